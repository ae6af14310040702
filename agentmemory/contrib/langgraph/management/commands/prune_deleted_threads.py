"""``manage.py prune_deleted_threads``: delete the records of deleted LangGraph threads that
guard nothing any more, for hosts that run their upkeep from cron rather than Celery beat."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError, connections

from agentmemory.conf import app_settings
from agentmemory.contrib.langgraph.receivers import prune_deleted_threads
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.retention import parse_period


class Command(TextArgumentsCommand):
    help = (
        "Delete the records of deleted LangGraph threads (DeletedThread) older than "
        "AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS'] days (--older-than replaces the "
        "setting). A record keeps a run that was in flight when its thread was deleted from "
        "bringing the thread back; run this daily (the Celery task "
        "agentmemory.contrib.langgraph.tasks.prune_deleted_threads does the same)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--older-than",
            metavar="PERIOD",
            help="instead of the setting: 3d, 12h, 1w (unit: days)",
        )
        parser.add_argument(
            "--database",
            metavar="ALIAS",
            help="the database holding the records (default: the one the routers choose)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["older_than"] is None:
            older_than = timedelta(days=app_settings().LANGGRAPH_DELETED_THREAD_DAYS)
        else:
            try:
                older_than = parse_period(options["older_than"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        using = options["database"]
        if using is not None and using not in connections:
            raise CommandError(f"no database {using!r} in DATABASES")
        try:
            count = prune_deleted_threads(older_than=older_than, using=using, dry_run=options["dry_run"])
        except DatabaseError as exc:
            raise CommandError(
                f"could not read the records of deleted threads: {exc} (has migrate run there?)"
            ) from exc
        verb = "would delete" if options["dry_run"] else "deleted"
        noun = "record" if count == 1 else "records"
        self.stdout.write(f"{verb} {count} {noun} of deleted threads older than {_period(older_than)}")


def _period(period: timedelta) -> str:
    """``period`` as a reader says it: "3 days", "12:00:00" for less than a day."""
    if period.seconds == 0 and period.microseconds == 0:
        return f"{period.days} day{'' if period.days == 1 else 's'}"
    return str(period)
