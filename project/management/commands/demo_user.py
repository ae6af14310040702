"""``manage.py demo_user``: create or reuse the example project's demo user and say how to log in."""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import router, transaction
from django.urls import reverse

SERVER = "http://127.0.0.1:8000"


def python_command() -> str:
    """How to call this Python from the current directory (``.venv/bin/python`` after ``make``)."""
    executable = sys.executable or "python"
    relative = os.path.relpath(executable)
    return executable if relative.startswith("..") else relative


class Command(BaseCommand):
    help = (
        "Create or reuse a superuser of this local example project (default name 'demo') and print "
        "how to log in to the admin and the API. A new user, or one with no usable password (as "
        "'replay_conversations --owner' creates), gets a generated password, printed once; an "
        "existing password is never changed or printed (set another with 'manage.py changepassword'). "
        "For local development only: the example project's 'make demo' runs it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo", help="name of the demo user (default: demo)")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        username = options["username"]
        python = python_command()
        with transaction.atomic(using=router.db_for_write(user_model)):
            user, created = user_model._default_manager.get_or_create(**{user_model.USERNAME_FIELD: username})
            password = None
            # A password is made only where none can be used: never for a user someone gave one.
            if created or not user.has_usable_password():
                password = secrets.token_urlsafe(12)
                user.set_password(password)
            user.is_staff = user.is_superuser = user.is_active = True
            user.save()

        if password is not None:
            # a user 'replay_conversations --owner' made (make demo's step before this) has
            # none yet: said so, or its line "logs in once it is given a password" reads as
            # a contradiction of the password below
            given = "" if created else " (made without a password by the step before; it has one now)"
            self.stdout.write(
                f"Demo user {username!r}{given}, a superuser of this local example project.\n"
                f"  password: {password}\n"
                f"  (printed only this once; to set another: {python} manage.py changepassword {username})"
            )
        else:
            self.stdout.write(
                f"Demo user {username!r} exists; its password is unchanged "
                f"(to set another: {python} manage.py changepassword {username})."
            )
        api = f"{SERVER}{reverse('agentmemory:conversation-list')}"
        lines = [
            f"\nStart the server with `{python} manage.py runserver`, then log in as {username}:",
            f"  admin: {SERVER}{reverse('admin:index')}",
            f"  API:   {api} (browsable once logged in to the admin)",
        ]
        if apps.is_installed("rest_framework.authtoken"):
            lines += [
                "  From a program, with a token (printed by the first command):",
                f"         {python} manage.py drf_create_token {username}",
                f'         curl -H "Authorization: Token TOKEN" {api}',
            ]
        else:
            lines.append(f"  From a shell: curl -u {username}:{password or 'PASSWORD'} {api}")
        self.stdout.write("\n".join(lines))
