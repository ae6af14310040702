"""Agent turns against a hostile environment: tools that raise, return what JSON cannot hold
or what storage refuses (NUL characters, lone surrogates, text over ``MAX_MESSAGE_CHARS``),
and models that reply with such text, with tool calls that storage would refuse, for tools
that do not exist, with ids of calls still pending, or that never stop calling tools. The turn
always ends with an answer, every step stored and every window valid."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.agents.tools import RAW_ARGUMENTS_KEY
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.validation import json_problem, text_problem
from tests.test_agents import calls, reply

pytestmark = pytest.mark.django_db


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text form")

    __repr__ = __str__


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text form")


@tool
def nul_text() -> str:
    """Returns a NUL character."""
    return "a\x00b"


@tool
def surrogate_text() -> str:
    """Returns a lone surrogate."""
    return "a\ud800b"


@tool
def huge_text() -> str:
    """Returns more than MAX_MESSAGE_CHARS."""
    return "x" * 2_100


@tool
def unprintable() -> Any:
    """Returns an object whose str() fails."""
    return Unprintable()


@tool
def unprintable_inside() -> dict:
    """Returns JSON holding such an object."""
    return {"a": Unprintable()}


@tool
def tuple_keys() -> dict:
    """Returns keys JSON cannot hold."""
    return {(1, 2): 3}


@tool
def circular() -> dict:
    """Returns a dict that holds itself."""
    value: dict = {}
    value["self"] = value
    return value


@tool
def fails_unprintably() -> str:
    """Raises an exception whose str() fails."""
    raise UnprintableError


@tool
def again() -> str:
    """Always answers."""
    return "again"


class Hostile(BaseToolCallingAgent, register=False):
    AGENT_KEY = "hostile-test"
    SYSTEM_PROMPT = "You test."
    TOOLS = [
        nul_text,
        surrogate_text,
        huge_text,
        unprintable,
        unprintable_inside,
        tuple_keys,
        circular,
        fails_unprintably,
        again,
    ]


@pytest.fixture
def conv(settings) -> Conversation:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_MESSAGE_CHARS": 2_000, "MAX_TOOL_RESULT_TOKENS": None}
    conv = Conversation.objects.create(agent_key="hostile-test")
    # A call waiting for an approval from an earlier turn: its id may not be reused.
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("earlier"), ChatMessage.ai(None, [ToolCall(id="pending-1", name="again")])]
    )
    return conv


def stored(conv: Conversation) -> list[ChatMessage]:
    return [m.to_chat_message() for m in Message.objects.filter(conversation=conv).order_by("seq")]


def assert_storable(message: ChatMessage) -> None:
    assert not text_problem(message.content or "") and not json_problem(dict(message.metadata))
    for call in message.tool_calls:
        assert not text_problem(call.id) and not text_problem(call.name)
        assert not json_problem(dict(call.arguments))


@pytest.mark.parametrize(
    ("tool_name", "expected"),
    [
        ("nul_text", "a\ufffdb"),
        ("surrogate_text", "a\ufffdb"),
        ("unprintable", "<Unprintable that cannot be shown as text>"),
        ("unprintable_inside", "<dict that cannot be shown as text>"),
        ("tuple_keys", "{(1, 2): 3}"),
        ("circular", "{'self': {...}}"),
        ("fails_unprintably", "Error: UnprintableError: <UnprintableError that cannot be shown as text>"),
        ("nope", "Error: unknown tool 'nope'; available tools: " + ", ".join(t.name for t in Hostile.TOOLS)),
    ],
)
def test_tool_results_that_storage_would_refuse_are_stored_readable(conv, tool_name, expected):
    llm = ScriptedChatModel([reply(calls(("c1", tool_name, {}))), reply("done")])
    result = Hostile(llm=llm).run(conv, "go")
    assert result.answer == "done" and result.stopped_reason == "answer"
    [tool_result] = result.tool_results
    assert tool_result.content == expected
    assert stored(conv)[-2].content == expected  # what the model was sent next is what is stored
    assert llm.calls[1][0][-1].content == expected


def test_a_tool_result_over_max_message_chars_is_cut_with_a_note(conv):
    llm = ScriptedChatModel([reply(calls(("c1", "huge_text", {}))), reply("done")])
    result = Hostile(llm=llm).run(conv, "go")
    [tool_result] = result.tool_results
    assert len(tool_result.content) == 2_000
    assert tool_result.content.startswith("xxx") and tool_result.content.endswith(
        "[cut here: 2,100 characters, over the 2,000 stored]"
    )


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage.ai("a\x00b"),
        ChatMessage.ai("a\ud800b"),
        ChatMessage.ai("y" * 3_000),
        ChatMessage.ai("x", name="bot\x00"),
        ChatMessage.ai("x", metadata={"provider": Unprintable(), "nan": float("nan"), (1, 2): "k"}),
        ChatMessage.ai("x", metadata={"deep": eval("[" * 100 + "]" * 100)}),
    ],
    ids=["nul", "surrogate", "over-max-chars", "name-nul", "metadata-not-json", "metadata-too-deep"],
)
def test_a_model_reply_that_storage_would_refuse_is_stored_made_storable(conv, message):
    llm = ScriptedChatModel([ChatResponse(message=message, usage=Usage(1, 1), finish_reason=Unprintable())])
    result = Hostile(llm=llm).run(conv, "go")
    answer = stored(conv)[-1]
    assert answer.role is Role.AI and answer.content == result.answer
    assert_storable(answer)
    assert len(answer.content) <= 2_000


@pytest.mark.parametrize(
    "call",
    [
        ToolCall(id="c1", name="", arguments={}),
        ToolCall(id="c1", name="n" * 300, arguments={}),
        ToolCall(id="c1", name="again\x00", arguments={}),
        ToolCall(id="c\x00", name="again", arguments={}),
        ToolCall(id="i" * 300, name="again", arguments={}),
        ToolCall(id="pending-1", name="again", arguments={}),
        ToolCall(id="c1", name="again", arguments={"a": float("nan")}),
        ToolCall(id="c1", name="again", arguments={"a\x00": 1}),
        ToolCall(id="c1", name="again", arguments={"a": eval("[" * 100 + "]" * 100)}),
        ToolCall(id="c1", name="again", arguments="not an object"),  # type: ignore[arg-type]
    ],
    ids=[
        "empty-name",
        "long-name",
        "nul-name",
        "nul-id",
        "long-id",
        "pending-id",
        "nan-argument",
        "nul-key",
        "deep-arguments",
        "arguments-not-object",
    ],
)
def test_tool_calls_that_storage_would_refuse_are_answered_and_the_turn_goes_on(conv, call):
    llm = ScriptedChatModel([reply(ChatMessage(role=Role.AI, tool_calls=(call,))), reply("done")])
    result = Hostile(llm=llm).run(conv, "go")
    assert result.answer == "done"
    rows = stored(conv)
    ai, tool_result = rows[-3], rows[-2]
    assert_storable(ai)
    [stored_call] = ai.tool_calls
    assert tool_result.tool_call_id == stored_call.id != "pending-1"
    if call.name == "again" and not json_problem(call.arguments) and isinstance(call.arguments, dict):
        assert tool_result.content == "again"  # only the id was replaced
    else:
        assert tool_result.content.startswith("Error: ")
        assert call.name != "again" or RAW_ARGUMENTS_KEY in stored_call.arguments
    # The approval from the earlier turn still waits, and can still be answered.
    assert Conversation.objects.get(pk=conv.pk).pending_tool_calls == {"pending-1": 2}
    PersistentChatHistory(conv).add_message(ChatMessage.tool("approved", tool_call_id="pending-1"))
    for window in result.windows:
        assert window_violations(window) == []


def test_a_model_that_never_stops_calling_tools_is_stopped_after_max_tool_rounds(conv):
    llm = ScriptedChatModel([reply(calls((f"loop{i}", "again", {}))) for i in range(50)])
    result = Hostile(llm=llm).run(conv, "go")
    assert result.stopped_reason == "max_tool_rounds"
    assert len(llm.calls) == Hostile.MAX_TOOL_ROUNDS + 1 and llm.remaining == 50 - len(llm.calls)
    assert stored(conv)[-1].content.startswith("Error: not run: this turn reached its limit of 8 tool rounds")


@pytest.mark.django_db(transaction=True)
def test_the_async_path_makes_the_same_replies_storable(conv):
    llm = ScriptedChatModel(
        [reply(calls(("pending-1", "nul_text", {}), ("c2", "unprintable", {}))), reply("a\x00done")]
    )

    async def scenario():  # type: ignore[no-untyped-def]
        try:
            return await Hostile(llm=llm).arun(conv, "go")
        finally:
            await sync_to_async(connections.close_all)()

    result = asyncio.run(scenario())
    assert result.answer == "a\ufffddone"
    assert [m.content for m in result.tool_results] == [
        "a\ufffdb",
        "<Unprintable that cannot be shown as text>",
    ]
    assert "pending-1" not in [c.id for c in stored(conv)[-4].tool_calls]


def test_a_reply_with_more_tool_calls_than_the_cap_runs_the_first_ones(conv, settings):
    settings.AGENTMEMORY = {**settings.AGENTMEMORY, "MAX_TOOL_CALLS_PER_MESSAGE": 3}
    many = calls(*[(f"c{i}", "again", {}) for i in range(10)])
    llm = ScriptedChatModel([reply(many), reply("done")])
    result = Hostile(llm=llm).run(conv, "go")
    assert result.answer == "done"
    rows = stored(conv)
    ai = rows[-5]
    assert [c.id for c in ai.tool_calls] == ["c0", "c1", "c2"]
    assert [r.tool_call_id for r in rows[-4:-1]] == ["c0", "c1", "c2"]
    for window in result.windows:
        assert window_violations(window) == []


@tool
def ten_megabytes() -> str:
    """Returns 10 MB of text."""
    return "z" * 10_000_000


@tool
async def ten_megabytes_async() -> str:
    """Returns 10 MB of text, in async code."""
    return "z" * 10_000_000


class Bulky(BaseToolCallingAgent, register=False):
    AGENT_KEY = "bulky-test"
    SYSTEM_PROMPT = "You test."
    TOOLS = [ten_megabytes, ten_megabytes_async]
    CONVERSATION_HISTORY_TOKEN_LIMIT = 100_000


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["run", "arun"])
def test_huge_tool_results_of_one_reply_are_not_all_held_in_memory_at_once(conv, path):
    """Twenty calls of a tool returning 10 MB each: every result is cut to
    ``MAX_MESSAGE_CHARS`` (2,000 here) as it comes back, and the 10 MB value is not kept until
    the whole exchange is stored (that was 200 MB for this reply; a reply may hold up to
    ``MAX_TOOL_CALLS_PER_MESSAGE`` calls, 128 by default, and a tool return anything)."""
    import tracemalloc

    name = "ten_megabytes" if path == "run" else "ten_megabytes_async"
    many = calls(*[(f"c{i}", name, {}) for i in range(20)])
    agent = Bulky(llm=ScriptedChatModel([reply(many), reply("done")]))

    async def scenario():  # type: ignore[no-untyped-def]
        try:
            return await agent.arun(conv, "go")
        finally:
            await sync_to_async(connections.close_all)()

    tracemalloc.start()
    try:
        result = agent.run(conv, "go") if path == "run" else asyncio.run(scenario())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.answer == "done"
    assert [len(m.content) for m in result.tool_results] == [2_000] * 20
    assert peak < 60_000_000, f"{peak / 1e6:.0f} MB"
