"""``PersistentChatHistory.pop()``: the newest message is deleted and returned, and the
conversation afterwards is the one that appending the remaining messages would have made
(counters, pinned system prompt, pending tool calls, summaries)."""

from __future__ import annotations

import asyncio
import random

import pytest

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary
from tests.factories import ConversationFactory, turn

pytestmark = pytest.mark.django_db

_STATE = (
    "message_count",
    "human_message_count",
    "stored_tokens",
    "pending_tool_calls",
    "has_system_prompt",
    "pinned_seq",
    "pinned_last_seq",
)


def state(conv: Conversation) -> dict:
    return Conversation.objects.values(*_STATE).get(pk=conv.pk)


def replayed_state(messages: list[ChatMessage]) -> tuple[dict, list[tuple]]:
    """The state of a fresh conversation holding ``messages`` (its seqs mapped to the
    originals' so that pins and pending calls compare)."""
    conv = ConversationFactory()
    history = PersistentChatHistory(conv, validate_tool_pairs=False)
    stored = history.add_messages([_plain(m) for m in messages]) if messages else []
    seq_map = {new.seq: old.seq for new, old in zip(stored, messages, strict=True)}
    row = state(conv)
    row["pending_tool_calls"] = {k: seq_map[v] for k, v in row["pending_tool_calls"].items()}
    for key in ("pinned_seq", "pinned_last_seq"):
        if row[key] is not None:
            row[key] = seq_map[row[key]]
    return row, [(m.role, m.content, m.tool_call_id) for m in history.get_messages()]


def _plain(message: ChatMessage) -> ChatMessage:
    return ChatMessage(
        role=message.role,
        content=message.content,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
        name=message.name,
        metadata=message.metadata,
        parts=message.parts,
    )


def test_pop_returns_the_newest_message_and_none_when_empty(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    assert history.pop() is None
    stored = history.add_messages(turn(0, tool=True))
    popped = history.pop()
    assert popped == stored[-1]
    assert [m.seq for m in history.get_messages()] == [m.seq for m in stored[:-1]]
    for _ in stored[:-1]:
        assert history.pop() is not None
    assert history.pop() is None
    assert state(conversation) == {
        "message_count": 0,
        "human_message_count": 0,
        "stored_tokens": 0,
        "pending_tool_calls": {},
        "has_system_prompt": False,
        "pinned_seq": None,
        "pinned_last_seq": None,
    }


def test_seqs_are_not_reused_after_a_pop(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    history.add_messages([ChatMessage.human("a"), ChatMessage.ai("b")])
    history.pop()
    assert history.add_message(ChatMessage.ai("c")).seq == 3


def test_popping_a_result_makes_its_call_pending_again(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    call = ToolCall(id="call_1", name="lookup", arguments={"q": 1})
    stored = history.add_messages(
        [ChatMessage.human("q"), ChatMessage.ai(None, [call]), ChatMessage.tool("r", tool_call_id="call_1")]
    )
    history.pop()
    assert state(conversation)["pending_tool_calls"] == {"call_1": stored[1].seq}
    window = ContextWindowBuilder(conversation).build(max_tokens=1_000)
    assert stored[1].seq in window.skipped_pending
    # answered again, the exchange is whole again
    history.add_message(ChatMessage.tool("r2", tool_call_id="call_1"))
    assert [m.content for m in ContextWindowBuilder(conversation).build(max_tokens=1_000).messages] == [
        "q",
        None,
        "r2",
    ]


def test_popping_a_call_withdraws_it(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    call = ToolCall(id="call_1", name="lookup", arguments={})
    history.add_messages([ChatMessage.human("q"), ChatMessage.ai(None, [call])])
    history.pop()
    assert state(conversation)["pending_tool_calls"] == {}
    with pytest.raises(InvalidMessageError, match="answers no earlier unanswered tool call"):
        history.add_message(ChatMessage.tool("late", tool_call_id="call_1"))
    # the id is free for a new call
    history.add_message(ChatMessage.ai(None, [call]))


def test_popping_pinned_system_messages_shortens_the_pin(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    first, _ = history.add_messages([ChatMessage.system("one"), ChatMessage.system("two")])
    history.pop()
    assert state(conversation)["pinned_seq"] == state(conversation)["pinned_last_seq"] == first.seq
    assert [m.content for m in ContextWindowBuilder(conversation).build(max_tokens=100).messages] == ["one"]
    history.pop()
    assert state(conversation)["has_system_prompt"] is False
    assert state(conversation)["pinned_seq"] is None
    # empty again: the next system message is pinned as in a new conversation
    prompt = history.add_message(ChatMessage.system("three"))
    assert state(conversation)["pinned_seq"] == prompt.seq


def test_a_summary_reaching_the_popped_message_is_deleted(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation)
    stored = history.add_messages(turn(0) + turn(1))
    older = Summary.objects.create(
        conversation=conversation, text="turn 0", first_seq=1, through_seq=stored[1].seq
    )
    newer = Summary.objects.create(
        conversation=conversation, text="both turns", first_seq=1, through_seq=stored[-1].seq, previous=older
    )
    Conversation.objects.filter(pk=conversation.pk).update(summary=newer)
    history.pop()
    conversation.refresh_from_db()
    assert conversation.summary_id == older.pk
    assert list(Summary.objects.filter(conversation=conversation)) == [older]
    history.pop()
    history.pop()
    conversation.refresh_from_db()
    assert conversation.summary_id is None
    assert not Summary.objects.filter(conversation=conversation).exists()


def test_random_appends_and_pops_leave_the_state_appending_would_make() -> None:
    """Seeded random sequences of appends (system prompts, turns with tool calls, results
    stored late, orphans) and pops: after each pop the counters, pins, pending calls and
    messages equal those of a fresh conversation holding what is left."""
    rng = random.Random(22)
    for _ in range(12):
        conv = ConversationFactory()
        history = PersistentChatHistory(conv, validate_tool_pairs=False)
        kept: list[ChatMessage] = []
        calls = 0
        for _ in range(rng.randint(4, 14)):
            choice = rng.random()
            if choice < 0.25 and kept:
                popped = history.pop()
                assert popped is not None
                assert popped.seq == kept.pop().seq
                expected, rows = replayed_state(kept)
                assert state(conv) == expected
                assert [(m.role, m.content, m.tool_call_id) for m in history.get_messages()] == rows
                continue
            if choice < 0.35:
                batch = [ChatMessage.system(f"system {rng.random()}")]
            elif choice < 0.55:
                calls += 1
                ids = [f"call_{calls}_{k}" for k in range(rng.randint(1, 2))]
                batch = [ChatMessage.ai(None, [ToolCall(id=i, name="t", arguments={}) for i in ids])]
            elif choice < 0.75:
                answer = rng.choice([f"call_{calls}_0", f"call_{calls}_1", "call_none"])
                batch = [ChatMessage.tool("result", tool_call_id=answer)]
            else:
                batch = [ChatMessage.human(f"human {rng.random()}")]
            kept += history.add_messages(batch)
        assert Message.objects.filter(conversation=conv).count() == len(kept)


def test_pop_of_a_missing_conversation_raises() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    Conversation.objects.filter(pk=conv.pk).delete()
    with pytest.raises(ConversationNotFound):
        history.pop()


@pytest.mark.django_db(transaction=True)
def test_apop_runs_outside_the_event_loop() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("a"), ChatMessage.ai("b")])
    popped = asyncio.run(history.apop())
    assert popped is not None and popped.content == "b"
