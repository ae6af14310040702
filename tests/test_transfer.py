"""Export and import of conversations: the round trip restores the exact state (messages, seqs,
token counts, summaries with their spans, counters, pending tool calls), as a function, as
management commands and through the API; a refused document writes nothing."""

from __future__ import annotations

import copy
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary
from agentmemory.transfer import (
    ConversationExists,
    InvalidConversationData,
    export_conversation,
    import_conversation,
)

pytestmark = pytest.mark.django_db

MESSAGE_COLUMNS = [f.attname for f in Message._meta.concrete_fields if f.name not in ("id", "conversation")]
SUMMARY_COLUMNS = [
    f.attname for f in Summary._meta.concrete_fields if f.name not in ("id", "conversation", "previous")
]
CONVERSATION_COLUMNS = [
    f.attname
    for f in Conversation._meta.concrete_fields
    if f.name not in ("id", "owner", "summary") and not f.name.startswith("compaction_")
]


def state(conv: Conversation, *, with_uuid: bool = True) -> dict:
    conv = Conversation.objects.select_related("summary").get(pk=conv.pk)
    columns = [c for c in CONVERSATION_COLUMNS if with_uuid or c != "uuid"]
    return {
        "conversation": {c: getattr(conv, c) for c in columns},
        "current_summary": conv.summary.through_seq if conv.summary else None,
        "messages": list(
            Message.objects.filter(conversation=conv).order_by("seq").values_list(*MESSAGE_COLUMNS)
        ),
        "summaries": [
            (*row, prev)
            for *row, prev in Summary.objects.filter(conversation=conv)
            .order_by("through_seq")
            .values_list(*SUMMARY_COLUMNS, "previous__through_seq")
        ],
    }


@pytest.fixture
def rich(django_user_model) -> Conversation:  # type: ignore[no-untyped-def]
    """A conversation with a system prompt, a parallel tool exchange, odd metadata, two
    summaries (the second extending the first) and a tool call still pending."""
    owner = django_user_model.objects.create_user("alice", password="pw")
    conv = Conversation.objects.create(
        owner=owner, agent_key="support", title="Refund ✓", metadata={"channel": "web", "n": [1, 2.5, None]}
    )
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system("You help."), ChatMessage.human("Where is order 7?")])
    calls = (
        ToolCall(id="c1", name="lookup", arguments={"order": 7, "deep": {"a": [1, {"b": "é"}]}}),
        ToolCall(id="c2", name="weather", arguments={}),
    )
    history.add_messages(
        [
            ChatMessage.ai(None, calls, metadata={"usage": {"input_tokens": 10, "output_tokens": 3}}),
            ChatMessage.tool("shipped", tool_call_id="c1", name="lookup"),
            ChatMessage.tool("", tool_call_id="c2", name="weather"),
            ChatMessage.ai("It shipped."),
        ]
    )
    for i in range(3):
        history.add_messages([ChatMessage.human(f"q{i} " + "word " * 20), ChatMessage.ai(f"a{i}")])
    history.add_messages(
        [
            ChatMessage.human("and now?"),
            ChatMessage.ai(None, (ToolCall(id="c9", name="approve", arguments={}),)),
        ]
    )
    first = Summary.objects.create(
        conversation=conv,
        text="Order 7 asked about.",
        first_seq=2,
        through_seq=6,
        token_count=5,
        model="m",
        human_messages_covered=1,
    )
    second = Summary.objects.create(
        conversation=conv,
        text="Order 7 shipped; q0 answered.",
        first_seq=2,
        through_seq=8,
        previous=first,
        token_count=7,
        human_messages_covered=2,
        tokens_covered=123,
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=second)
    conv.refresh_from_db()
    return conv


def test_round_trip_restores_the_exact_state(rich):
    before = state(rich)
    assert before["conversation"]["pending_tool_calls"] == {"c9": rich.last_seq}
    document = json.loads(json.dumps(export_conversation(rich)))  # JSON types only
    assert document["format"] == "agentmemory.conversation" and document["version"] == 1
    assert [m["seq"] for m in document["messages"]] == list(range(1, rich.last_seq + 1))

    Conversation.objects.filter(pk=rich.pk).delete()
    restored = import_conversation(document)
    assert state(restored) == before
    assert restored.owner is None and restored.uuid == rich.uuid


def test_imported_conversation_builds_the_same_window_and_goes_on(rich):
    window = ContextWindowBuilder(rich).build(200)
    copy_ = import_conversation(export_conversation(rich), new_uuid=True)
    assert copy_.uuid != rich.uuid
    assert state(copy_, with_uuid=False) == state(rich, with_uuid=False)
    again = ContextWindowBuilder(copy_).build(200)
    assert [(m.role, m.content, m.seq) for m in again.messages] == [
        (m.role, m.content, m.seq) for m in window.messages
    ]
    # The store carries on from the restored counters and pending call.
    [result] = PersistentChatHistory(copy_).add_messages(
        [ChatMessage.tool("approved", tool_call_id="c9", name="approve")]
    )
    assert result.seq == rich.last_seq + 1


def test_import_refuses_a_taken_uuid_and_writes_nothing(rich):
    count = Message.objects.count()
    with pytest.raises(ConversationExists):
        import_conversation(export_conversation(rich))
    assert Conversation.objects.count() == 1 and Message.objects.count() == count


def _broken(document: dict, path: str, value) -> dict:  # type: ignore[no-untyped-def]
    broken = copy.deepcopy(document)
    target = broken
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return broken


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("version", 2, "version"),
        ("format", "other", "format"),
        ("messages.3.seq", 3, "messages[3].seq"),
        ("messages.0.role", "wizard", "messages[0].role"),
        ("messages.1.content", "nul \x00 byte", "messages[1].content"),
        ("messages.1.metadata", {"x": "\ud800"}, "messages[1].metadata"),
        ("messages.1.token_count", -1, "messages[1].token_count"),
        ("messages.1.token_count", 1.5, "messages[1].token_count"),
        ("messages.1.created_at", "yesterday", "messages[1].created_at"),
        ("messages.4.tool_call_id", "", "messages[4]"),
        ("messages.4.exchange_seq", 1, "messages[4].exchange_seq"),
        ("messages.1.surprise", 1, "messages[1].surprise"),
        ("conversation.message_count", 99, "conversation.message_count"),
        ("conversation.stored_tokens", 1, "conversation.stored_tokens"),
        ("conversation.last_seq", 2, "conversation.last_seq"),
        ("conversation.pending_tool_calls", {"nope": 3}, "conversation.pending_tool_calls.nope"),
        ("conversation.summary_through_seq", 7, "conversation.summary_through_seq"),
        ("conversation.metadata", None, "conversation.metadata"),
        ("summaries.1.previous_through_seq", 5, "summaries[1].previous_through_seq"),
        ("summaries.1.through_seq", 6, "summaries[1].through_seq"),
        ("summaries.0.through_seq", 10_000, "summaries[0]"),
        ("summaries.0.text", " ", "summaries[0].text"),
        ("messages", _DELETE, "messages"),
        ("messages", {"1": {}}, "messages"),
    ],
)
def test_import_refuses_a_bad_document_and_writes_nothing(rich, path, value, where):
    document = export_conversation(rich)
    Conversation.objects.all().delete()
    with pytest.raises(InvalidConversationData) as info:
        import_conversation(_broken(document, path, value))
    assert info.value.path == where, str(info.value)
    assert not Conversation.objects.exists() and not Message.objects.exists() and not Summary.objects.exists()


def test_import_refuses_what_is_not_a_document(db):
    for data in (None, [], "text", {"format": "agentmemory.conversation"}):
        with pytest.raises(InvalidConversationData):
            import_conversation(data)  # type: ignore[arg-type]
    assert not Conversation.objects.exists()


def test_export_and_import_commands_round_trip(rich, tmp_path, django_user_model):
    target = tmp_path / "conv.json"
    call_command("export_conversation", str(rich.uuid), "-o", str(target), stderr=io.StringIO())
    before = state(rich)
    Conversation.objects.filter(pk=rich.pk).delete()
    out = io.StringIO()
    call_command("import_conversation", str(target), "--owner", "alice", stdout=out, stderr=io.StringIO())
    restored = Conversation.objects.get(uuid=out.getvalue().strip())
    assert state(restored) == before
    assert restored.owner == django_user_model.objects.get(username="alice")

    stdout = io.StringIO()
    call_command("export_conversation", str(rich.uuid), stdout=stdout)
    assert json.loads(stdout.getvalue())["conversation"]["uuid"] == str(rich.uuid)


def test_commands_report_errors(rich, tmp_path):
    with pytest.raises(CommandError, match="no conversation"):
        call_command("export_conversation", "00000000-0000-0000-0000-000000000000")
    with pytest.raises(CommandError, match="not a uuid"):
        call_command("export_conversation", "nope")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "agentmemory.conversation", "version": 99}))
    with pytest.raises(CommandError, match="nothing imported"):
        call_command("import_conversation", str(bad), stderr=io.StringIO())
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_conversation", str(tmp_path / "missing.json"))
    exported = tmp_path / "conv.json"
    call_command("export_conversation", str(rich.uuid), "-o", str(exported), stderr=io.StringIO())
    with pytest.raises(CommandError, match=r"already used here \(--new-uuid imports a copy\)"):
        call_command("import_conversation", str(exported), stderr=io.StringIO())


def test_api_export_and_import_are_scoped_to_the_user(rich, django_user_model):
    alice = APIClient()
    alice.force_login(rich.owner)
    response = alice.get(f"/api/conversations/{rich.uuid}/export/")
    assert response.status_code == 200 and response.streaming  # written as it is read
    document = json.loads(response.getvalue())
    expected = json.loads(json.dumps(export_conversation(rich)))
    assert document == {**expected, "exported_at": document["exported_at"]}

    mallory = APIClient()
    mallory.force_login(django_user_model.objects.create_user("mallory", password="pw"))
    assert mallory.get(f"/api/conversations/{rich.uuid}/export/").status_code == 404

    imported = mallory.post("/api/conversations/import/", document, format="json")
    assert imported.status_code == 201, imported.content
    body = imported.json()
    assert body["uuid"] != str(rich.uuid) and body["last_seq"] == rich.last_seq
    assert body["summary"]["through_seq"] == 8
    copy_ = Conversation.objects.get(uuid=body["uuid"])
    assert copy_.owner.username == "mallory"
    assert state(copy_, with_uuid=False) == state(rich, with_uuid=False)


def test_api_import_refuses_a_bad_document_with_its_path(rich):
    client = APIClient()
    client.force_login(rich.owner)
    document = export_conversation(rich)
    document["messages"][2]["seq"] = 1
    count = Message.objects.count()
    response = client.post("/api/conversations/import/", document, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_document" and response.json()["path"] == "messages[2].seq"
    assert Conversation.objects.count() == 1 and Message.objects.count() == count
