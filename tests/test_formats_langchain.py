"""Tests of the LangChain message converters."""

from __future__ import annotations

import importlib
import sys

import pytest
from langchain_core.messages import (
    AIMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages import ChatMessage as GenericMessage

from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.langchain import (
    from_langchain,
    from_langchain_message,
    to_langchain,
    to_langchain_message,
)
from agentmemory.messages import ChatMessage, ToolCall

CONVERSATION = [
    ChatMessage.system("You are a travel agent."),
    ChatMessage.system("Summary of the earlier conversation:\nThe user lives in Oslo."),
    ChatMessage.human("Oslo and Rome?", name="alice"),
    ChatMessage.ai(
        "Checking both.",
        [
            ToolCall("call_a", "get_weather", {"city": "Oslo"}),
            ToolCall("call_b", "get_weather", {"city": "Rome", "days": [1, 2], "nested": {"unit": "C"}}),
        ],
    ),
    ChatMessage.tool("3°C", tool_call_id="call_a", name="get_weather"),
    ChatMessage.tool("20°C", tool_call_id="call_b", name="get_weather"),
    ChatMessage.ai(None, [ToolCall("call_c", "log", {})]),
    ChatMessage.tool("disk full", tool_call_id="call_c", name="log", metadata={"is_error": True}),
    ChatMessage.human("Thanks"),
    ChatMessage.ai("You're welcome."),
]


def test_to_langchain_builds_the_langchain_message_types():
    converted = to_langchain(CONVERSATION)

    assert [type(m) for m in converted] == [
        SystemMessage,
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        AIMessage,
        ToolMessage,
        HumanMessage,
        AIMessage,
    ]
    assert converted[2].name == "alice"
    assert converted[3].content == "Checking both."
    assert converted[3].tool_calls == [
        {"id": "call_a", "name": "get_weather", "args": {"city": "Oslo"}, "type": "tool_call"},
        {
            "id": "call_b",
            "name": "get_weather",
            "args": {"city": "Rome", "days": [1, 2], "nested": {"unit": "C"}},
            "type": "tool_call",
        },
    ]
    assert converted[4].tool_call_id == "call_a"
    assert converted[4].name == "get_weather"
    assert converted[4].content == "3°C"
    assert converted[6].content == ""  # LangChain has no null content
    assert converted[7].status == "error"
    assert converted[5].status == "success"


def test_round_trip_keeps_every_message():
    assert from_langchain(to_langchain(CONVERSATION)) == CONVERSATION


def test_round_trip_through_langchain_serialisation():
    from langchain_core.messages import messages_from_dict, messages_to_dict

    restored = messages_from_dict(messages_to_dict(to_langchain(CONVERSATION)))

    assert from_langchain(restored) == CONVERSATION


def test_text_blocks_are_kept_as_parts_and_provider_blocks_in_ai_messages_are_not_text():
    ai = AIMessage(
        content=[
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Checking "},
            "both.",
            {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}},
        ],
        tool_calls=[{"id": "toolu_1", "name": "w", "args": {"city": "Oslo"}, "type": "tool_call"}],
    )
    human = HumanMessage(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])

    # tool_use blocks duplicate tool_calls; thinking is kept aside, to go back to Anthropic
    assert from_langchain_message(ai) == ChatMessage.ai(
        "Checking both.",
        [ToolCall("toolu_1", "w", {"city": "Oslo"})],
        metadata={"thinking": [{"type": "thinking", "thinking": "hmm", "signature": "s"}]},
    )
    converted = from_langchain_message(human)
    assert converted.content == "a\nb"
    assert [part.text for part in converted.parts] == ["a", "b"]


def test_generic_chat_messages_with_known_roles_are_accepted():
    assert from_langchain(
        [GenericMessage(content="hi", role="user"), GenericMessage(content="yo", role="assistant")]
    ) == [
        ChatMessage.human("hi"),
        ChatMessage.ai("yo"),
    ]


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:,"}}]), "not base64"),
        (HumanMessage(content=[{"type": "video", "url": "https://example.com/v.mp4"}]), "'video'"),
        (HumanMessage(content=[{"type": "image", "mime_type": "image/png"}]), "needs one of base64"),
        (FunctionMessage(content="x", name="f"), "FunctionMessage"),
        (RemoveMessage(id="m1"), "RemoveMessage"),
        (GenericMessage(content="x", role="critic"), "ChatMessage"),
        (
            AIMessage(
                content="",
                invalid_tool_calls=[
                    {
                        "id": "call_cut",
                        "name": "w",
                        "args": '{"city": "Os',
                        "error": "bad JSON",
                        "type": "invalid_tool_call",
                    }
                ],
            ),
            "call_cut.*could not be parsed",
        ),
        (
            AIMessage(content="", tool_calls=[{"id": None, "name": "w", "args": {}, "type": "tool_call"}]),
            "has no 'id'",
        ),
    ],
)
def test_unsupported_langchain_input_is_refused_with_its_index(message, match):
    with pytest.raises(InvalidMessageError, match=match) as info:
        from_langchain([HumanMessage(content="hi"), message])

    assert info.value.index == 1


def test_missing_tool_call_ids_can_be_filled_for_replies():
    reply = AIMessage(
        content="", tool_calls=[{"id": None, "name": "w", "args": {"a": 1}, "type": "tool_call"}]
    )

    message = from_langchain_message(reply, fill_missing_ids=True)

    [call] = message.tool_calls
    assert call.id.startswith("call_")
    assert call.arguments == {"a": 1}
    assert message.content is None


def test_tool_message_without_call_id_is_refused():
    with pytest.raises(InvalidMessageError, match="no tool_call_id") as info:
        to_langchain([ChatMessage.human("hi"), ChatMessage.tool("x", tool_call_id="")])

    assert info.value.index == 1
    with pytest.raises(InvalidMessageError, match="unknown role"):
        to_langchain_message(ChatMessage(role="function", content="x"))  # type: ignore[arg-type]


def test_import_without_langchain_core_explains_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "agentmemory.formats.langchain")
    for name in [m for m in sys.modules if m == "langchain_core" or m.startswith("langchain_core.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "langchain_core", None)

    with pytest.raises(ImportError, match=r"pip install 'django-agentmemory\[langchain\]'"):
        importlib.import_module("agentmemory.formats.langchain")


def test_thinking_goes_back_with_the_turns_of_the_tool_loop_in_progress():
    """With extended thinking on, Anthropic refuses a tool loop whose last assistant turn does
    not start with its thinking ("Expected `thinking` or `redacted_thinking`, but found
    `tool_use`"); ``ChatAnthropic`` sends the thinking blocks of an ``AIMessage``'s content, so
    they go back there, signature intact, for the turns after the last human message only (the
    API ignores earlier ones, and another model may refuse them). DeepSeek-style
    ``reasoning_content`` goes back in ``additional_kwargs``, where ``ChatDeepSeek`` reads it."""
    thinking = [{"type": "thinking", "thinking": "Look the order up.", "signature": "sig"}]
    history = [
        ChatMessage.human("Where is order 7?"),
        ChatMessage.ai(
            "Checking.", [ToolCall("toolu_1", "lookup", {"id": 7})], metadata={"thinking": thinking}
        ),
        ChatMessage.tool("shipped", tool_call_id="toolu_1"),
        ChatMessage.ai("It shipped.", metadata={"thinking": thinking}),
        ChatMessage.human("And order 9?"),
        ChatMessage.ai(
            None,
            [ToolCall("call_0", "lookup", {"id": 9})],
            metadata={"thinking": [{"type": "reasoning_content", "thinking": "Look it up."}]},
        ),
        ChatMessage.tool("pending", tool_call_id="call_0"),
        ChatMessage.human("Try again."),
        ChatMessage.ai(None, [ToolCall("toolu_2", "lookup", {"id": 9})], metadata={"thinking": thinking}),
        ChatMessage.tool("lost", tool_call_id="toolu_2"),
        ChatMessage.ai(
            None,
            [ToolCall("call_3", "lookup", {"id": 9})],
            metadata={"thinking": [{"type": "reasoning_content", "thinking": "Ask again."}]},
        ),
    ]
    sent = to_langchain(history)
    assert sent[1].content == "Checking." and sent[3].content == "It shipped."  # an earlier loop
    # an earlier turn's reasoning_content goes back too: DeepSeek's thinking-mode guide asks
    # for the reasoning of every assistant turn that called tools in all later requests
    assert sent[5].additional_kwargs == {"reasoning_content": "Look it up."}
    assert sent[8].content == thinking  # the loop in progress: thinking first
    assert sent[8].tool_calls[0]["id"] == "toolu_2"
    assert sent[10].content == "" and sent[10].additional_kwargs == {"reasoning_content": "Ask again."}
    # and it reads back as it was stored
    assert from_langchain(sent[7:10]) == history[7:10]
    assert from_langchain(sent[4:7]) == history[4:7]
