"""Management commands refuse with a clear message what a command line can hold and the
database cannot take, before any work (variants of ``--older-than 800000d``).

Bytes of the command line that are not UTF-8 reach a command as lone surrogates (PEP 383):
they stopped six commands with a ``UnicodeEncodeError`` traceback at their first query.
Numbers past what a query or memory holds (``--batch-size``, ``--indent``, ``--max-tokens``)
ended in a database error, a ``MemoryError`` or a ``ValueError`` traceback.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from agentmemory.knowledge import KnowledgeMemory
from tests.factories import conversation_with_turns

pytestmark = pytest.mark.django_db

#: what Python makes of the byte 0xff in an argument (``os.fsdecode(b"caf\xff")``)
NOT_UTF8 = "caf\udcff"


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ("purge_conversations", "--agent", NOT_UTF8, "--dry-run", "--no-progress"),
        ("memory_md", "export", "--user", NOT_UTF8),
        ("import_conversation", "-", "--owner", NOT_UTF8),
        ("forget_user", NOT_UTF8, "--noinput"),
        ("replay_conversations", "--owner", NOT_UTF8, "--limit", "1"),
        ("mcp_server", "--user", NOT_UTF8),
        ("purge_conversations", "--agent", "b\x00", "--dry-run", "--no-progress"),
    ],
)
def test_an_argument_that_is_not_text_is_refused_by_name(args) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=r"argument (agent|user|owner) contains"):
        _run(*args)


def test_a_file_name_may_hold_any_bytes(user, tmp_path) -> None:  # type: ignore[no-untyped-def]
    KnowledgeMemory(user).store("Takes the night ferry", "travel", persistent=True)
    target = tmp_path / f"{NOT_UTF8}.md"
    _run("memory_md", "export", "--user", user.username, "--file", str(target))
    assert "Takes the night ferry" in target.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("recount_tokens", "--batch-size", str(2**70)), "--batch-size must be from 1 to 100,000"),
        (("rebuild_recall_index", "--batch-size", str(2**70)), "--batch-size must be from 1 to 100,000"),
        (("rebuild_recall_index", "--database", "nope"), "no database 'nope'"),
        (("replay_conversations", "--max-tokens", str(2**70), "--limit", "1"), "--max-tokens must be from 1"),
    ],
)
def test_numbers_past_what_the_work_can_hold_are_refused(args, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=message):
        _run(*args)


@pytest.mark.parametrize("indent", [str(2**70), "100000000", "-1"])
def test_an_export_indent_past_reason_is_refused(indent) -> None:  # type: ignore[no-untyped-def]
    conversation, _ = conversation_with_turns(2)
    with pytest.raises(CommandError, match="--indent must be from 0 to 16"):
        _run("export_conversation", str(conversation.uuid), "--indent", indent)
    assert '"format"' in _run("export_conversation", str(conversation.uuid), "--indent", "2")


def test_an_export_to_a_file_never_holds_the_whole_document(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The command built the document and its text in memory, where the API's export streams.
    import json
    import tracemalloc

    from agentmemory import transfer
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.tokens import ApproximateTokenCounter

    monkeypatch.setattr(transfer, "_BATCH", 5)  # rows read at once, as 1,000 are of far more
    conversation, _ = conversation_with_turns(1)
    PersistentChatHistory(conversation, token_counter=ApproximateTokenCounter()).add_messages(
        [ChatMessage.human(f"{i} " + "é" * 50_000) for i in range(40)]
    )
    target = tmp_path / "export.json"
    tracemalloc.start()
    try:
        _run("export_conversation", str(conversation.uuid), "--output", str(target))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = target.stat().st_size
    conversation.refresh_from_db()
    assert size > 4_000_000 and peak < size / 2, (size, peak)
    assert len(json.loads(target.read_text(encoding="utf-8"))["messages"]) == conversation.message_count


@pytest.mark.parametrize("where", ["missing/export.json", "."])
def test_an_export_to_a_place_that_is_no_file_is_refused(tmp_path, user, where) -> None:  # type: ignore[no-untyped-def]
    # a missing directory or a directory: FileNotFoundError and IsADirectoryError tracebacks
    conversation, _ = conversation_with_turns(1)
    target = tmp_path / where
    with pytest.raises(CommandError, match="cannot write"):
        _run("export_conversation", str(conversation.uuid), "--output", str(target))
    with pytest.raises(CommandError, match="cannot write"):
        _run("memory_md", "export", "--user", user.username, "--file", str(target))
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_an_export_that_fails_half_way_leaves_the_file_as_it_was(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the document was written into the file as it was read: a failure (a lost database
    # connection) left a truncated document in place of the previous one
    from django.db import OperationalError

    from agentmemory.management.commands import export_conversation

    conversation, _ = conversation_with_turns(2)
    target = tmp_path / "export.json"
    target.write_text("the previous export", encoding="utf-8")
    target.chmod(0o640)

    def fails_half_way(conversation):  # type: ignore[no-untyped-def]
        yield b'{"format": "agentmemory.conversation", '
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(export_conversation, "export_json", fails_half_way)
    with pytest.raises(OperationalError):
        _run("export_conversation", str(conversation.uuid), "--output", str(target))
    assert target.read_text(encoding="utf-8") == "the previous export"
    assert [path.name for path in tmp_path.iterdir()] == ["export.json"]
    monkeypatch.undo()
    _run("export_conversation", str(conversation.uuid), "--output", str(target))
    assert '"format"' in target.read_text(encoding="utf-8") and target.stat().st_mode & 0o777 == 0o640


# -- a user named in another Unicode form of the same name -----------------------------------


@pytest.mark.parametrize(
    ("stored", "typed"),
    [
        ("alice", "\uff41\uff4c\uff49\uff43\uff45"),  # full-width letters
        ("Z\u00fcrich", "Zu\u0308rich"),  # decomposed, as macOS file names and some terminals give it
    ],
)
def test_every_command_naming_a_user_finds_them_in_any_form_of_the_name(
    stored, typed, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """``create_user`` stores a username normalised (NFKC, ``normalize_username``) and
    ``chat --owner`` reads it so; ``memory_md --user``, ``import_conversation --owner``,
    ``forget_user`` and ``mcp_server --user`` compared the name as typed and answered "no
    user" for the user's own name in another form."""
    from django.contrib.auth import get_user_model

    from agentmemory.contrib.mcp import server
    from agentmemory.models import Conversation

    user = get_user_model().objects.create_user(stored)
    KnowledgeMemory(user).remember("Likes tea", persistent=True)
    assert "Likes tea" in _run("memory_md", "export", "--user", typed)
    exported = tmp_path / "conversation.json"
    conversation, _history = conversation_with_turns(1)
    _run("export_conversation", str(conversation.uuid), "--output", str(exported))
    conversation.delete()
    _run("import_conversation", str(exported), "--owner", typed)
    assert Conversation.objects.get().owner_id == user.pk
    served = []

    async def serve() -> None:
        served.append(True)

    monkeypatch.setattr(server, "serve_stdio", serve)
    _run("mcp_server", "--user", typed)
    assert served == [True]
    _run("forget_user", typed, "--noinput")
    assert not Conversation.objects.exists() and not KnowledgeMemory(user).live_facts().exists()
