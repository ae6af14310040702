"""Import of hostile or inconsistent export documents: each is refused with the path of what is
wrong and writes nothing (as a function, through the command and the API), or, when the
document is a state the store can be in (gapped seqs), restores a conversation that goes on."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from agentmemory.compaction import OfflineMemoryCompactor, run_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary
from agentmemory.transfer import (
    MAX_SEQ,
    ConversationExists,
    InvalidConversationData,
    export_conversation,
    import_conversation,
)
from tests.test_transfer import rich  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db

Edit = Callable[[dict[str, Any]], Any]


def _document(conv: Conversation) -> dict[str, Any]:
    return json.loads(json.dumps(export_conversation(conv)))


def _edited(document: dict[str, Any], edit: Edit) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    edit(changed)
    return changed


def _shift(document: dict[str, Any], shift: Callable[[int], int]) -> None:
    """Every seq of the document mapped through ``shift`` (messages, links, summaries)."""
    for message in document["messages"]:
        message["seq"] = shift(message["seq"])
        if message["exchange_seq"] is not None:
            message["exchange_seq"] = shift(message["exchange_seq"])
    conversation = document["conversation"]
    conversation["last_seq"] = shift(conversation["last_seq"])
    conversation["pending_tool_calls"] = {k: shift(v) for k, v in conversation["pending_tool_calls"].items()}
    conversation["summary_through_seq"] = shift(conversation["summary_through_seq"])
    for summary in document["summaries"]:
        summary["first_seq"] = shift(summary["first_seq"])
        summary["through_seq"] = shift(summary["through_seq"])
        if summary["previous_through_seq"] is not None:
            summary["previous_through_seq"] = shift(summary["previous_through_seq"])


def _set(path: str, value: Any) -> Edit:
    def edit(document: dict[str, Any]) -> None:
        target: Any = document
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return edit


def _all(*edits: Edit) -> Edit:
    def edit(document: dict[str, Any]) -> None:
        for one in edits:
            one(document)

    return edit


def _stored() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Summary.objects.count()


# The rich conversation (tests.test_transfer): seq 1 system, 2 human, 3 AI calling c1 and c2,
# 4 and 5 their results, 6 AI, 7..12 three turns, 13 human, 14 AI calling c9 (pending);
# summaries through 6 and through 8 (current), the second extending the first.
REFUSED = {
    # the table's check constraint would raise IntegrityError (a 500 through the API)
    "retention of 0 days": (_set("conversation.retention_days", 0), "conversation.retention_days"),
    "pending call's seq is a list": (
        _set("conversation.pending_tool_calls", {"c9": [14]}),
        "conversation.pending_tool_calls.c9",
    ),
    "current summary's seq is a list": (
        _set("conversation.summary_through_seq", [8]),
        "conversation.summary_through_seq",
    ),
    "previous summary's seq is an object": (
        _set("summaries.1.previous_through_seq", {}),
        "summaries[1].previous_through_seq",
    ),
    "summary extends itself": (
        _set("summaries.1.previous_through_seq", 8),
        "summaries[1].previous_through_seq",
    ),
    "summaries extend each other": (
        _set("summaries.0.previous_through_seq", 8),
        "summaries[0].previous_through_seq",
    ),
    "date before year 1 in UTC": (
        _set("messages.0.created_at", "0001-01-01T00:00:00+05:00"),
        "messages[0].created_at",
    ),
    "date after year 9999 in UTC": (
        _set("summaries.0.created_at", "9999-12-31T23:59:59-05:00"),
        "summaries[0].created_at",
    ),
    "conversation date out of range": (
        _set("conversation.created_at", "0001-01-01T00:00:00+05:00"),
        "conversation.created_at",
    ),
    "last_seq at the 64-bit limit": (_set("conversation.last_seq", 2**63 - 1), "conversation.last_seq"),
    "seqs past MAX_SEQ": (lambda d: _shift(d, lambda seq: seq + MAX_SEQ), "messages[0].seq"),
    "summary past the last message": (
        _all(
            _set("conversation.last_seq", 100),
            _set("summaries.1.through_seq", 90),
            _set("conversation.summary_through_seq", 90),
        ),
        "summaries[1]",
    ),
    "summary counts humans it does not cover": (
        _set("summaries.1.human_messages_covered", 0),
        "summaries[1].human_messages_covered",
    ),
    "summary with a negative human count": (
        _set("summaries.1.human_messages_covered", -5),
        "summaries[1].human_messages_covered",
    ),
    "human message in a tool exchange": (_set("messages.1.exchange_seq", 3), "messages[1].exchange_seq"),
    "result linked to an exchange without its call": (
        _set("messages.3.tool_call_id", "zzz"),
        "messages[3].exchange_seq",
    ),
    "AI message linked to another exchange": (
        _set("messages.13.exchange_seq", 3),
        "messages[13].exchange_seq",
    ),
    "pending call already answered": (
        _set("conversation.pending_tool_calls", {"c9": 14, "c1": 3}),
        "conversation.pending_tool_calls.c1",
    ),
    "tool calls not a list": (_set("messages.2.tool_calls", {"id": "c1"}), "messages[2].tool_calls"),
    "tool call not an object": (_set("messages.2.tool_calls", [1, 2]), "messages[2].tool_calls[0]"),
    "tool call without an id": (_set("messages.2.tool_calls", [{"name": "x"}]), "messages[2].tool_calls[0]"),
    "parts not a list": (_set("messages.1.parts", {"a": 1}), "messages[1].parts"),
    "part without a type": (_set("messages.1.parts", [{"text": "a"}]), "messages[1].parts[0]"),
    "message metadata not an object": (_set("messages.1.metadata", [1]), "messages[1].metadata"),
    "conversation metadata not an object": (_set("conversation.metadata", [1]), "conversation.metadata"),
    "conversation names an owner": (_set("conversation.owner", 1), "conversation.owner"),
    "conversation names an owner id": (_set("conversation.owner_id", 1), "conversation.owner_id"),
    "duplicate seq": (_set("messages.5.seq", 5), "messages[5].seq"),
    "negative seq": (_set("messages.0.seq", -1), "messages[0].seq"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_import_refuses_an_inconsistent_document_and_writes_nothing(rich, case):  # noqa: F811
    edit, where = REFUSED[case]
    document = _edited(_document(rich), edit)
    before = _stored()
    with pytest.raises(InvalidConversationData) as info:
        import_conversation(document, new_uuid=True)
    assert info.value.path == where, str(info.value)
    assert _stored() == before


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_api_import_answers_400_with_the_path(rich, case):  # noqa: F811
    edit, where = REFUSED[case]
    client = APIClient(raise_request_exception=False)
    client.force_login(rich.owner)
    before = _stored()
    response = client.post("/api/conversations/import/", _edited(_document(rich), edit), format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"] == "invalid_document" and response.json()["path"] == where
    assert _stored() == before


def test_command_refuses_a_document_naming_an_owner(rich, tmp_path):  # noqa: F811
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(_edited(_document(rich), _set("conversation.owner", rich.owner_id))))
    before = _stored()
    with pytest.raises(CommandError, match=r"nothing imported: conversation\.owner"):
        call_command("import_conversation", str(path), "--new-uuid", stderr=io.StringIO())
    assert _stored() == before


def test_gapped_seqs_import_and_the_conversation_goes_on(rich):  # noqa: F811
    """Seqs with gaps (what messages deleted around the store leave) are a state the store
    handles: windows, appends, the pending call and compaction carry on."""
    document = _edited(_document(rich), lambda d: _shift(d, lambda seq: 1 + (seq - 1) * 3))
    conv = import_conversation(document, new_uuid=True)
    assert list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))[:3] == [1, 4, 7]
    history = PersistentChatHistory(conv)
    [answer] = history.add_messages([ChatMessage.tool("approved", tool_call_id="c9", name="approve")])
    assert answer.seq == 3 * 13 + 2 and Message.objects.get(pk=answer.id).exchange_seq == 3 * 13 + 1
    history.add_messages([ChatMessage.human("next?"), ChatMessage.ai("done")])
    run_compaction(conv.pk, compactor_class=OfflineMemoryCompactor)
    window = ContextWindowBuilder(conv).build(300)
    assert window_violations(window) == [] and not window.uncovered


def test_a_uuid_taken_between_the_check_and_the_insert_is_conversation_exists(rich, monkeypatch):  # noqa: F811
    """Two imports of one document at once: the one whose check ran before the other's insert
    committed hits the unique uuid and is told the uuid is taken, not an IntegrityError."""
    document = _document(rich)
    monkeypatch.setattr("agentmemory.transfer._uuid_taken", lambda alias, uuid: False)
    before = _stored()
    with pytest.raises(ConversationExists):
        import_conversation(document)
    assert _stored() == before


@pytest.mark.parametrize("offset", ["-20:21", "+16:00", "+23:59"])
def test_dates_at_any_utc_offset_python_reads_are_stored_as_their_instant(rich, offset):  # noqa: F811
    """Python reads UTC offsets up to 23:59, PostgreSQL takes 15:59 at most: a document date
    at -20:21 passed every check and failed the insert ("time zone displacement out of range",
    a 500 found by schemathesis). It is stored in UTC, the same instant."""
    when = f"2133-11-14T15:41:08{offset}"

    def edit(document: dict[str, Any]) -> None:
        document["conversation"]["created_at"] = when
        document["messages"][0]["created_at"] = when
        document["summaries"][0]["created_at"] = when

    client = APIClient(raise_request_exception=False)
    client.force_login(rich.owner)
    response = client.post("/api/conversations/import/", _edited(_document(rich), edit), format="json")
    assert response.status_code == 201, response.content[:300]
    conv = Conversation.objects.get(uuid=response.json()["uuid"])
    instant = parse_datetime(when)
    assert conv.created_at == instant
    assert Message.objects.filter(conversation=conv).order_by("seq").first().created_at == instant
    assert Summary.objects.filter(conversation=conv).order_by("through_seq").first().created_at == instant
