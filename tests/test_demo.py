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
    assert [c[0] for c in commands] == ["migrate", "demo"]
    outputs = []
    for name, *args in commands:
        out = StringIO()
        call_command(name, *args, stdout=out)
        outputs.append(out.getvalue())

    password = printed_password(outputs[-1])
    # the demo gives the user its password itself: no advice to set one, no word of a step
    # that made it without one
    assert "it logs in once it is given a password" not in "".join(outputs)
    assert "made without a password" not in "".join(outputs)
    assert outputs[-1].count(password) == 1
    # the replay's report comes first, how to log in last
    assert outputs[-1].index("Replay finished: 0 invariant violations") < outputs[-1].index("password:")
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


@pytest.mark.django_db(transaction=True)
def test_demo_user_after_a_replay_that_made_the_user_says_it_gave_it_a_password() -> None:
    """Run by hand after ``replay_conversations --owner demo``, whose advice to set a password
    applies there: the user it made has none until this command gives it one."""
    replay = StringIO()
    call_command("replay_conversations", "--owner", "demo", "--limit", "1", "--no-progress", stdout=replay)
    assert "it logs in once it is given a password" in replay.getvalue()

    output = demo_user()

    assert "made without a password by replay_conversations --owner; it has one now" in output
    assert get_user_model().objects.get(username="demo").check_password(printed_password(output))
