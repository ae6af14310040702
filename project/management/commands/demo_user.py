"""``manage.py demo_user``: create or reuse the example project's demo user and say how to log in."""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DemoUser:
    """What ``ensure_demo_user`` did: the user's name, the password it generated (``None``
    when the user kept one someone gave it), and whether it created the user."""

    username: str
    password: str | None
    created: bool


def ensure_demo_user(username: str) -> DemoUser:
    """Create or reuse the superuser ``username`` of this local example project. A new user,
    or one with no usable password (as ``replay_conversations --owner`` creates), gets a
    generated password; an existing password is never changed."""
    user_model = get_user_model()
    with transaction.atomic(using=router.db_for_write(user_model)):
        user, created = user_model._default_manager.get_or_create(**{user_model.USERNAME_FIELD: username})
        password = None
        # A password is made only where none can be used: never for a user someone gave one.
        if created or not user.has_usable_password():
            password = secrets.token_urlsafe(12)
            user.set_password(password)
        user.is_staff = user.is_superuser = user.is_active = True
        user.save()
    return DemoUser(username, password, created)


def login_text(demo: DemoUser, *, made_by: str = "") -> str:
    """How to log in as ``demo``: its password when one was generated (printed this once),
    the admin's and the API's addresses, and how to get a token.

    Args:
        made_by: for an existing user that had no usable password, what made it so ("by
            replay_conversations --owner"); said beside the password, since that command
            told the user to set one.
    """
    python, username, password = python_command(), demo.username, demo.password
    if password is not None:
        given = f" (made without a password {made_by}; it has one now)" if made_by else ""
        lines = [
            f"Demo user {username!r}{given}, a superuser of this local example project.",
            f"  password: {password}",
            f"  (printed only this once; to set another: {python} manage.py changepassword {username})",
        ]
    else:
        lines = [
            f"Demo user {username!r} exists; its password is unchanged "
            f"(to set another: {python} manage.py changepassword {username})."
        ]
    api = f"{SERVER}{reverse('agentmemory:conversation-list')}"
    lines += [
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
    return "\n".join(lines)


class Command(BaseCommand):
    help = (
        "Create or reuse a superuser of this local example project (default name 'demo') and print "
        "how to log in to the admin and the API. A new user, or one with no usable password (as "
        "'replay_conversations --owner' creates), gets a generated password, printed once; an "
        "existing password is never changed or printed (set another with 'manage.py changepassword'). "
        "For local development only; 'manage.py demo' (which 'make demo' runs) does this after its replay."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo", help="name of the demo user (default: demo)")

    def handle(self, *args: Any, **options: Any) -> None:
        demo = ensure_demo_user(options["username"])
        # a user 'replay_conversations --owner' made has none yet: said so, or that command's
        # line "logs in once it is given a password" reads as a contradiction of the password
        made_by = "" if demo.created else "by replay_conversations --owner"
        self.stdout.write(login_text(demo, made_by=made_by))
