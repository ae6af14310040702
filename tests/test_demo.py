"""make demo: the example project's demo user owns what the demo replays and can log in."""

from __future__ import annotations

import re
import shlex
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agentmemory.models import Conversation, ModelCall

ROOT = Path(__file__).resolve().parents[1]


def demo_user(*args: str) -> str:
    out = StringIO()
    call_command("demo_user", *args, stdout=out)
    return out.getvalue()


def printed_password(output: str) -> str:
    match = re.search(r"^  password: (\S+)$", output, re.MULTILINE)
    assert match, output
    return match.group(1)


def demo_commands() -> list[list[str]]:
    """The ``manage.py`` commands of the Makefile's ``demo`` recipe, as argument lists."""
    recipe, commands = False, []
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("demo:"):
            recipe = True
        elif recipe and line.startswith("\t"):
            words = shlex.split(line)
            commands.append(words[words.index("manage.py") + 1 :])
        elif recipe:
            break
    return commands


@pytest.mark.django_db
def test_demo_user_is_a_superuser_with_a_generated_password_printed_once(client) -> None:  # type: ignore[no-untyped-def]
    first = demo_user()
    second = demo_user()

    password = printed_password(first)
    user = get_user_model().objects.get(username="demo")
    assert user.is_superuser and user.is_staff and user.check_password(password)
    assert len(password) >= 16
    assert password not in second
    assert "its password is unchanged" in second
    assert "manage.py changepassword demo" in second
    assert client.login(username="demo", password=password)
    assert client.get("/admin/").status_code == 200


@pytest.mark.django_db
def test_demo_user_never_replaces_a_password_someone_set() -> None:
    get_user_model().objects.create_user("demo", password="chosen-by-me")

    output = demo_user()

    user = get_user_model().objects.get(username="demo")
    assert user.check_password("chosen-by-me")
    assert user.is_staff
    assert "password:" not in output


@pytest.mark.django_db(transaction=True)
def test_make_demo_leaves_the_demo_user_a_login_and_a_non_empty_api_list(client) -> None:  # type: ignore[no-untyped-def]
    commands = demo_commands()
    assert [c[0] for c in commands] == ["migrate", "replay_conversations", "demo_user"]
    outputs = []
    for name, *args in commands:
        out = StringIO()
        call_command(name, *args, "--no-progress" if name == "replay_conversations" else "-v1", stdout=out)
        outputs.append(out.getvalue())

    password = printed_password(outputs[-1])
    # the replay made the user without a password; the last step says it gave it one
    assert "it logs in once it is given a password" in outputs[1]
    assert "made without a password by the step before; it has one now" in outputs[-1]
    assert "http://127.0.0.1:8000/admin/" in outputs[-1]
    assert "manage.py drf_create_token demo" in outputs[-1]
    assert 'curl -H "Authorization: Token TOKEN" http://127.0.0.1:8000/api/conversations/' in outputs[-1]
    demo = get_user_model().objects.get(username="demo")
    assert Conversation.objects.filter(owner=demo).count() == Conversation.objects.count() == 3
    assert client.login(username="demo", password=password)
    listed = client.get("/api/conversations/", HTTP_ACCEPT="application/json").json()["results"]
    assert len(listed) == 3
    # Replayed through the agent: every model call of every turn is recorded, so the admin's
    # model calls and the usage endpoint have something to show.
    usage = client.get("/api/usage/", HTTP_ACCEPT="application/json").json()
    assert usage["calls"] == ModelCall.objects.filter(conversation__owner=demo).count() > 3
