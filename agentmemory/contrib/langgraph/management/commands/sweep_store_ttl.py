"""``manage.py sweep_store_ttl``: delete the ``DjangoStore`` items whose TTL ran out, for hosts
that run their upkeep from cron rather than Celery beat."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError, connections

from agentmemory.contrib.langgraph.store import DjangoStore
from agentmemory.management.base import TextArgumentsCommand


class Command(TextArgumentsCommand):
    help = (
        "Delete the LangGraph store items (DjangoStore) whose TTL ran out, with their vectors. "
        "Expired items are never returned either way; this frees their rows. Run it every few "
        "minutes (the Celery task agentmemory.contrib.langgraph.tasks.sweep_store_ttl does the same)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="the database holding the store (default: the one the routers choose)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"]
        if using is not None and using not in connections:
            raise CommandError(f"no database {using!r} in DATABASES")
        store = DjangoStore(using=using)
        try:
            count = store.expired_count() if options["dry_run"] else store.sweep_ttl()
        except DatabaseError as exc:
            raise CommandError(f"could not read the store: {exc} (has migrate run there?)") from exc
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write(f"{verb} {count} expired store item{'' if count == 1 else 's'}")
