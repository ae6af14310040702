"""``manage.py forget_user USER``: erase everything agentmemory stores of one user."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from agentmemory.deletion import erasure_counts, forget_user
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import find_user_by_name
from agentmemory.validation import parse_id


class Command(TextArgumentsCommand):
    help = (
        "Erase every conversation, message, summary, long-term fact, embedding, full-text index "
        "entry and usage record of one user (the account stays) and print the counts. USER is a "
        "username or a primary key."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("user", metavar="USER", help="username or primary key")
        parser.add_argument(
            "--by",
            choices=["username", "pk"],
            help="read USER only as a username or only as a primary key (when a username looks like an id)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print what would be erased, erase nothing"
        )
        parser.add_argument(
            "--noinput", "--no-input", action="store_false", dest="interactive", help="do not ask to confirm"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["user"], options["by"])
        name = f"{user.get_username()} (id {user.pk})"
        counts = erasure_counts([user])
        listed = ", ".join(f"{n} {what}" for what, n in counts.items()) or "nothing stored"
        if options["dry_run"]:
            self.stdout.write(f"would erase the memory of {name}: {listed}")
            return
        if options["interactive"]:
            answer = input(f"Erase all memory of {name} ({listed})? This cannot be undone. Type 'yes': ")
            if answer.strip().lower() != "yes":
                raise CommandError("erasure cancelled")
        report = forget_user(user)
        self.stdout.write(f"erased the memory of {name}:")
        for key, value in report.as_dict().items():
            if key == "user_id":
                continue
            if key == "other":
                for label, n in value.items():
                    self.stdout.write(f"  {label}: {n}")
            else:
                self.stdout.write(f"  {key.replace('_', ' ')}: {value}")

    def _user(self, value: str, by: str | None) -> Any:
        model = get_user_model()
        manager = model._default_manager
        by_name = None
        if by in (None, "username"):
            by_name = find_user_by_name(value)
        by_pk = None
        pk = parse_id(value)
        if by in (None, "pk") and pk is not None:
            by_pk = manager.filter(pk=pk).first()
        if by == "pk" and pk is None:
            raise CommandError(f"{value!r} is not a primary key")
        if by_name is not None and by_pk is not None and by_name.pk != by_pk.pk:
            raise CommandError(
                f"{value!r} is the username of user {by_name.pk} and the id of another user; "
                "pass --by username or --by pk"
            )
        user = by_name or by_pk
        if user is None:
            raise CommandError(f"no user {value!r} (by username or primary key)")
        return user
