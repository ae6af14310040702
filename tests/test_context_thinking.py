"""Stored Anthropic thinking blocks in the context window: read as the subtree alone, and
counted so that a window that sends them back stays within its budget (invariant C1)."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import router

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.formats.anthropic import to_anthropic
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.store.window import read_contents
from agentmemory.tokens import TiktokenCounter

pytestmark = pytest.mark.django_db

_THINKING_TYPES = ("thinking", "redacted_thinking")
_USAGE = {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 900, "output_tokens": 310}}


def _reasoning(topic: str, words: int) -> str:
    return f"Thinking about {topic}: " + " ".join(
        f"step {i} weighs the {topic} options" for i in range(words // 5)
    )


def _blocks(topic: str, *, redacted: bool = False) -> list[dict[str, str]]:
    blocks = [{"type": "thinking", "thinking": _reasoning(topic, 300), "signature": "Eq" + "x" * 600}]
    if redacted:
        blocks.append({"type": "redacted_thinking", "data": "EmwK" + "y" * 400})
    return blocks


def _ai(text: str, call: ToolCall | None, topic: str, *, redacted: bool = False) -> ChatMessage:
    return ChatMessage.ai(
        text, [call] if call else [], metadata={**_USAGE, "thinking": _blocks(topic, redacted=redacted)}
    )


def _conversation(counter: TiktokenCounter) -> Conversation:
    """A finished tool loop with thinking, then a question whose tool loop is in progress:
    two calls, each after thinking, the last one answered."""
    conv = Conversation.objects.create(agent_key="thinking")
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages(
        [
            ChatMessage.human("Plan a day in Oslo."),
            _ai("Looking at museums.", ToolCall("toolu_0", "search", {"q": "museums"}), "museums"),
            ChatMessage.tool("Munch, Fram, Viking ships.", tool_call_id="toolu_0", name="search"),
            ChatMessage.ai("Start with the Munch museum.", metadata=_USAGE),
            ChatMessage.human("And the weather there tomorrow?"),
            _ai("Checking.", ToolCall("toolu_1", "weather", {"city": "Oslo"}), "weather"),
            ChatMessage.tool("Rain until noon.", tool_call_id="toolu_1", name="weather"),
            _ai("And the wind.", ToolCall("toolu_2", "wind", {"city": "Oslo"}), "wind", redacted=True),
            ChatMessage.tool("Calm.", tool_call_id="toolu_2", name="wind"),
        ]
    )
    return conv


def _sent_tokens(messages: list[ChatMessage], counter: TiktokenCounter) -> tuple[int, int]:
    """(tokens of the request as ``to_anthropic`` sends it, tokens of its thinking blocks):
    each message without its metadata, plus the thinking blocks really sent."""
    _, turns = to_anthropic(messages)
    bare = sum(counter.count_message(dataclasses.replace(m, metadata={})) for m in messages)
    sent = [
        [b for b in turn["content"] if b["type"] in _THINKING_TYPES]
        for turn in turns
        if turn["role"] == "assistant" and isinstance(turn["content"], list)
    ]
    thinking = sum(counter.count_thinking(blocks) for blocks in sent)
    return bare + thinking, thinking


class _UncountedThinking(TiktokenCounter):
    """The count before thinking blocks were counted."""

    def count_thinking(self, blocks: object) -> int:
        return 0


def _windows(conv: Conversation, counter: TiktokenCounter) -> list[tuple[int, list[ChatMessage]]]:
    stored = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
    windows = []
    for budget in range(100, 2600, 20):
        try:
            built = ContextWindowBuilder(conv, token_counter=counter, max_tool_result_tokens=None).build(
                budget
            )
        except ContextBudgetExceeded:
            continue  # the tool loop in progress does not fit at all
        assert window_violations(built, stored_seqs=stored, newest_seq=max(stored)) == []
        windows.append((budget, built.messages))
    return windows


def test_a_window_that_sends_thinking_never_exceeds_its_budget_as_sent() -> None:
    counter = TiktokenCounter("cl100k_base")
    conv = _conversation(counter)
    windows = _windows(conv, counter)
    assert windows
    sent_thinking = 0
    for budget, messages in windows:
        sent, thinking = _sent_tokens(messages, counter)
        assert sent <= budget, (budget, sent)
        sent_thinking = max(sent_thinking, thinking)
    assert sent_thinking > 0  # the loop's thinking went back with it
    # the whole conversation: the finished loop's thinking is counted but not sent
    whole = windows[-1][1]
    assert len(whole) == 9
    assert sum(m.token_count or 0 for m in whole) > _sent_tokens(whole, counter)[0]

    # Uncounted, the same thinking makes a request over its budget: what the check catches.
    legacy = _UncountedThinking("cl100k_base")
    conv = _conversation(legacy)
    over = [
        budget for budget, messages in _windows(conv, legacy) if _sent_tokens(messages, counter)[0] > budget
    ]
    assert over


def test_the_window_carries_only_the_thinking_subtree() -> None:
    """The rest of the metadata (model, usage) stays in storage: neither read nor sent; a
    message without thinking, and thinking stored on another role, bring none."""
    counter = TiktokenCounter("cl100k_base")
    conv = _conversation(counter)
    Message.objects.filter(conversation=conv, seq=1).update(metadata={"thinking": _blocks("stray")})
    messages = (
        ContextWindowBuilder(conv, token_counter=counter, max_tool_result_tokens=None).build(100_000).messages
    )
    by_seq = {m.seq: m for m in messages}
    assert by_seq[1].metadata == {}  # a human message's "thinking" is no thinking block
    assert by_seq[4].metadata == {}  # an ai message without thinking
    assert by_seq[6].metadata == {"thinking": _blocks("weather")}
    assert by_seq[8].metadata == {"thinking": _blocks("wind", redacted=True)}

    # the rows the tail read left without content are read alike
    contents = read_contents(router.db_for_read(Message), conv.pk, [1, 4, 6, 7, 8])
    assert contents[1].metadata == {}
    assert contents[4].metadata == {}
    assert contents[6].metadata == {"thinking": _blocks("weather")}
    assert contents[7].metadata == {}
    assert contents[8].metadata == by_seq[8].metadata
    assert contents[8] == by_seq[8]


def test_stored_token_counts_include_the_thinking_and_nothing_else() -> None:
    counter = TiktokenCounter("cl100k_base")
    conv = _conversation(counter)
    for message in Message.objects.filter(conversation=conv):
        chat = message.to_chat_message()
        bare = counter.count_message(dataclasses.replace(chat, metadata={}))
        thinking = chat.metadata.get("thinking") if chat.role == "ai" else None
        assert message.token_count == bare + counter.count_thinking(thinking)


def test_reasoning_content_of_an_openai_compatible_reply_goes_back_through_the_window() -> None:
    """A DeepSeek-style reply (``reasoning_content`` beside tool calls) stored by the agent loop
    comes back from the window with its reasoning, counted in the window's budget (C1), so the
    next request of the tool loop is not refused (crewAIInc/crewAI#5878)."""
    from agentmemory.formats.openai import from_openai, to_openai_messages

    counter = TiktokenCounter()
    conv = Conversation.objects.create(agent_key="thinking")
    history = PersistentChatHistory(conv, token_counter=counter)
    reply = from_openai(
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": _reasoning("the weather", 200),
            "tool_calls": [
                {"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ],
        }
    )
    history.add_messages(
        [
            ChatMessage.human("Weather in Oslo tomorrow?"),
            dataclasses.replace(reply, metadata={**reply.metadata, **_USAGE}),
            ChatMessage.tool("Rain until noon.", tool_call_id="call_w", name="weather"),
        ]
    )
    window = ContextWindowBuilder(conv, token_counter=counter).build(max_tokens=5_000)
    sent = to_openai_messages(window.messages)
    assert sent[1]["reasoning_content"] == _reasoning("the weather", 200)
    assert set(sent[1]) == {"role", "content", "reasoning_content", "tool_calls"}
    assert window.history_tokens == sum(counter.count_message(m) for m in window.messages)
    assert window.history_tokens > counter.count_message(dataclasses.replace(reply, metadata={})) + 100
