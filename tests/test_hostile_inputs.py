"""Hostile input through Python: content parts whose fields have the wrong types are refused
before anything reads them, and one tool exchange with thousands of calls packs in time
linear in its size (rows are never compared field by field)."""

from __future__ import annotations

import pytest

from agentmemory.context.packing import RowMeta, pack_history
from agentmemory.exceptions import InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, Message


@pytest.mark.django_db
@pytest.mark.parametrize(
    "part",
    [
        ContentPart(kind=PartKind.TEXT, text=1),  # type: ignore[arg-type]
        ContentPart(kind=PartKind.IMAGE, data=b"\x89PNG", mime_type="image/png"),  # type: ignore[arg-type]
        ContentPart(kind=PartKind.IMAGE, url="https://example.com/a.png", width="9", height=9),  # type: ignore[arg-type]
        ContentPart(kind=PartKind.FILE, file_id="f", filename=None),  # type: ignore[arg-type]
        ContentPart(kind=PartKind.TEXT, text="a", extra=[1]),  # type: ignore[arg-type]
    ],
)
def test_parts_with_fields_of_the_wrong_type_are_refused(part):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create()
    message = ChatMessage(
        role=Role.HUMAN, content="", parts=(ContentPart(kind=PartKind.TEXT, text="a"), part)
    )
    with pytest.raises(InvalidMessageError) as info:
        PersistentChatHistory(conv).add_messages([ChatMessage.human("first"), message])
    assert info.value.index == 1 and "part 1" in info.value.reason
    assert not Message.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "field"),
    [
        (ChatMessage(role=Role.HUMAN, content="a\x00b"), "content"),
        (ChatMessage(role=Role.HUMAN, content=None), "content"),
        (ChatMessage(role=Role.HUMAN, content="x", tool_calls=(ToolCall("c1", "f", {}),)), "tool_calls"),
        (ChatMessage(role=Role.AI, content=None, tool_calls=(ToolCall("c1", "", {}),)), "tool_calls"),
        (ChatMessage(role=Role.TOOL, content="x", tool_call_id=""), "tool_call_id"),
        (ChatMessage(role=Role.HUMAN, content="x", name="n" * 256), "name"),
        (ChatMessage(role=Role.HUMAN, content="x", metadata={"k": float("nan")}), "metadata"),
        (
            ChatMessage(
                role=Role.HUMAN, content="", parts=(ContentPart(kind=PartKind.AUDIO, url="https://a/b"),)
            ),
            "parts",
        ),
        (ChatMessage(role=Role.TOOL, content="x", tool_call_id="nobody"), "tool_call_id"),
    ],
)
def test_a_refused_message_names_the_field_at_fault(message, field):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create()
    with pytest.raises(InvalidMessageError) as info:
        PersistentChatHistory(conv).add_messages([message])
    assert info.value.field == field
    assert info.value.field_errors() == {field: [info.value.reason]}


def test_an_exchange_of_thousands_of_calls_is_packed_without_comparing_rows(monkeypatch):
    def no_comparison(self, other):  # type: ignore[no-untyped-def]
        raise AssertionError("rows compared field by field: quadratic in the size of an exchange")

    monkeypatch.setattr(RowMeta, "__eq__", no_comparison)
    n = 5_000
    calls = [{"id": f"c{i}", "name": "f", "arguments": {}} for i in range(n)]
    rows = [RowMeta(1, "human", 5), RowMeta(2, "ai", 10, 2, "", calls)]
    rows += [RowMeta(3 + i, "tool", 2, 2, f"c{n - 1 - i}") for i in range(n)]  # stored in reverse
    rows.append(RowMeta(3 + n, "tool", 2, None, "stray"))  # an orphan
    packed = pack_history(reversed(rows), budget=1_000_000)
    exchange = packed.units[1]
    assert [r.tool_call_id for r in exchange[1:]] == [c["id"] for c in calls]
    assert packed.skipped_orphans == [3 + n]


@pytest.mark.django_db
def test_messages_over_the_part_and_tool_call_caps_are_refused_whole(settings):  # type: ignore[no-untyped-def]
    # Every call waiting for a result is checked on each later append, and a provider refuses
    # a request with more images than it accepts: both counts are capped per message.
    settings.AGENTMEMORY = {"MAX_PARTS_PER_MESSAGE": 3, "MAX_TOOL_CALLS_PER_MESSAGE": 2}
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv)
    text = ContentPart(kind=PartKind.TEXT, text="a")
    with pytest.raises(InvalidMessageError) as info:
        history.add_messages(
            [ChatMessage.human("q"), ChatMessage(role=Role.HUMAN, content="", parts=(text,) * 4)]
        )
    assert info.value.index == 1 and "MAX_PARTS_PER_MESSAGE" in info.value.reason
    calls = [ToolCall(id=f"c{i}", name="t") for i in range(3)]
    with pytest.raises(InvalidMessageError) as info:
        history.add_messages([ChatMessage.human("q"), ChatMessage.ai(None, calls)])
    assert info.value.index == 1 and "MAX_TOOL_CALLS_PER_MESSAGE" in info.value.reason
    assert not Message.objects.exists()
    # at the caps, both are stored
    history.add_messages(
        [ChatMessage(role=Role.HUMAN, content="", parts=(text,) * 3), ChatMessage.ai(None, calls[:2])]
    )
    assert Message.objects.filter(conversation=conv).count() == 2
