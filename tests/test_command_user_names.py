"""Every command that names a user reads the name by one rule (``agentmemory.management.
owners.user_by_name``): as given, else as ``create_user`` stores it (NFKC).

``chat --owner`` and ``replay_conversations --owner`` found "alice" typed in full-width
letters (``resolve_owner`` normalises), while ``forget_user``, ``memory_md --user``,
``import_conversation --owner``, ``mcp_server --user`` and the admin's recall page compared
the name as typed and said there was no such user.
"""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from agentmemory.contrib.mcp import server
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.management.owners import find_user, resolve_owner
from agentmemory.models import Conversation, Fact
from tests.factories import conversation_with_turns

pytestmark = pytest.mark.django_db

#: "alice" in full-width letters, which NFKC reads as "alice"
WIDE = "\uff41\uff4c\uff49\uff43\uff45"


@pytest.fixture
def alice():  # type: ignore[no-untyped-def]
    user = get_user_model().objects.create_user("alice")
    KnowledgeMemory(user).store("Takes the night ferry", "travel", persistent=True)
    return user


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_rule_is_the_one_owner_creation_follows(alice) -> None:  # type: ignore[no-untyped-def]
    assert resolve_owner(WIDE, None, purpose="to own it") == alice
    assert find_user(WIDE) == alice
    assert find_user(WIDE, by="username") == alice
    assert find_user(str(alice.pk), by="pk") == alice
    # a name stored as given, not as create_user stores it, is still found as given
    odd = get_user_model().objects.create(username="Zu\u0308rich")
    assert find_user("Zu\u0308rich") == odd
    with pytest.raises(CommandError, match="no user 'nobody'"):
        find_user("nobody")


def test_forget_user_finds_the_user(alice) -> None:  # type: ignore[no-untyped-def]
    assert "would erase the memory of alice" in _run("forget_user", WIDE, "--dry-run")
    _run("forget_user", WIDE, "--noinput")
    assert not Fact.objects.filter(owner=alice).exists()


def test_memory_md_finds_the_user(alice) -> None:  # type: ignore[no-untyped-def]
    assert "Takes the night ferry" in _run("memory_md", "export", "--user", WIDE)


def test_import_conversation_finds_the_owner(alice, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conversation, _ = conversation_with_turns(2)
    document = tmp_path / "conversation.json"
    document.write_text(_run("export_conversation", str(conversation.uuid)), encoding="utf-8")
    _run("import_conversation", str(document), "--owner", WIDE, "--new-uuid")
    assert Conversation.objects.filter(owner=alice).count() == 1
    assert json.loads(document.read_text(encoding="utf-8"))


def test_mcp_server_finds_the_user(alice, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    served: list[int] = []

    async def serve() -> None:  # what the transport would act for, instead of serving stdin
        bound = server._scope.get()
        assert bound is not None
        served.append(bound.owner_id)

    monkeypatch.setattr(server, "serve_stdio", serve)
    call_command("mcp_server", "--user", WIDE)
    assert served == [alice.pk]


def test_the_admin_recall_page_finds_the_owner(admin_client, alice) -> None:  # type: ignore[no-untyped-def]
    page = admin_client.get(reverse("admin:agentmemory_fact_recall"), {"owner": WIDE, "q": "ferry"})
    assert page.status_code == 200
    assert "Takes the night ferry" in page.content.decode()
