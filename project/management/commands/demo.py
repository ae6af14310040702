"""``manage.py demo``: what ``make demo`` shows after ``migrate``: the bundled sample replayed
through the agent as the demo user, then how to log in as that user."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from project.management.commands.demo_user import ensure_demo_user, login_text


class Command(BaseCommand):
    help = (
        "Create or reuse the superuser of this local example project (default name 'demo'), "
        "replay the bundled sample transcripts through the agent as that user "
        "('replay_conversations --owner demo --through-agent') and print how to log in (a "
        "generated password, printed once, for a user that had none). For local development only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo", help="name of the demo user (default: demo)")

    def handle(self, *args: Any, **options: Any) -> None:
        # The user exists, with its password, before the replay: the replay then has no user
        # to create, and no advice to give about a password this command prints below.
        demo = ensure_demo_user(options["username"])
        try:
            call_command(
                "replay_conversations",
                owner=demo.username,
                through_agent=True,
                stdout=self.stdout,
                stderr=self.stderr,
            )
        finally:
            # printed also when the replay failed: the password is shown this once only
            self.stdout.write("")
            self.stdout.write(login_text(demo))
