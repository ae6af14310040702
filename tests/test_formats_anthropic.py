"""Tests of the Anthropic Messages converters, including a stored conversation sent through the SDK."""

from __future__ import annotations

import json
import types
import typing
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence

import anthropic
import pytest
import typing_extensions
from anthropic.types import Message, MessageParam, TextBlockParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic, from_anthropic_message, to_anthropic
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Summary

SYSTEM = ChatMessage.system("You are a travel agent.")
SUMMARY = ChatMessage.system("Summary of the earlier conversation:\nThe user lives in Oslo.")


# -- to_anthropic -------------------------------------------------------------------------------


def test_system_prompt_and_summary_go_to_the_system_parameter():
    system, messages = to_anthropic([SYSTEM, SUMMARY, ChatMessage.human("Hi")])

    assert (
        system == "You are a travel agent.\n\nSummary of the earlier conversation:\nThe user lives in Oslo."
    )
    assert messages == [{"role": "user", "content": "Hi"}]


def test_system_as_text_blocks_keeps_one_block_per_system_message():
    system, _ = to_anthropic([SYSTEM, SUMMARY, ChatMessage.human("Hi")], system_blocks=True)

    assert system == [
        {"type": "text", "text": "You are a travel agent."},
        {"type": "text", "text": "Summary of the earlier conversation:\nThe user lives in Oslo."},
    ]


def test_no_system_message_gives_none_and_a_late_system_message_still_moves_to_system():
    assert to_anthropic([ChatMessage.human("Hi")])[0] is None
    system, messages = to_anthropic(
        [ChatMessage.human("Hi"), ChatMessage.system("Be brief."), ChatMessage.ai("Hello")]
    )
    assert system == "Be brief."
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_same_role_runs_are_merged_into_one_message_with_several_blocks():
    _, messages = to_anthropic(
        [
            ChatMessage.human("First question."),
            ChatMessage.human("Second question."),
            ChatMessage.ai("First answer."),
            ChatMessage.ai("Second answer."),
        ]
    )

    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "First question."},
                {"type": "text", "text": "Second question."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "First answer."},
                {"type": "text", "text": "Second answer."},
            ],
        },
    ]


def test_tool_calls_become_tool_use_blocks_after_the_text():
    _, messages = to_anthropic(
        [
            ChatMessage.human("Weather?"),
            ChatMessage.ai("Let me check.", [ToolCall("toolu_1", "get_weather", {"city": "Oslo"})]),
            ChatMessage.tool("3°C", tool_call_id="toolu_1", name="get_weather"),
        ]
    )

    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
    }
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3°C"}],
    }


def test_parallel_results_are_one_user_message_in_call_order_with_the_next_human_text_after():
    _, messages = to_anthropic(
        [
            ChatMessage.human("Oslo and Rome?"),
            ChatMessage.ai(
                None,
                [
                    ToolCall("toolu_a", "get_weather", {"city": "Oslo"}),
                    ToolCall("toolu_b", "get_weather", {"city": "Rome"}),
                ],
            ),
            # Stored in completion order, not call order.
            ChatMessage.tool("20°C", tool_call_id="toolu_b", name="get_weather"),
            ChatMessage.tool("3°C", tool_call_id="toolu_a", name="get_weather"),
            ChatMessage.human("Thanks! And tomorrow?"),
        ]
    )

    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "3°C"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "20°C"},
        {"type": "text", "text": "Thanks! And tomorrow?"},
    ]


def test_empty_text_is_never_sent():
    _, messages = to_anthropic(
        [
            ChatMessage.human("Hi"),
            ChatMessage.ai("", [ToolCall("toolu_1", "lookup", {})]),
            ChatMessage.tool("", tool_call_id="toolu_1"),
            ChatMessage.ai(""),  # nothing to send: dropped
            ChatMessage.human(""),
            ChatMessage.ai("Done."),
        ]
    )

    assert messages == [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        {"role": "assistant", "content": "Done."},
    ]


def test_error_results_are_flagged():
    _, messages = to_anthropic(
        [
            ChatMessage.human("Book it"),
            ChatMessage.ai(None, [ToolCall("toolu_1", "book", {"id": 7})]),
            ChatMessage.tool("seat taken", tool_call_id="toolu_1", metadata={"is_error": True}),
        ]
    )

    assert messages[2]["content"][0]["is_error"] is True


def test_history_starting_with_an_ai_message_is_refused_clearly():
    with pytest.raises(ValueError, match="start with a user turn") as info:
        to_anthropic([SYSTEM, ChatMessage.ai("Hello, how can I help?"), ChatMessage.human("Hi")])

    assert isinstance(info.value, InvalidMessageError)
    assert info.value.index == 1


def test_orphan_tool_result_is_refused():
    with pytest.raises(InvalidMessageError, match=r"toolu_x.*do not answer a tool call") as info:
        to_anthropic(
            [ChatMessage.human("Hi"), ChatMessage.ai("Hello"), ChatMessage.tool("?", tool_call_id="toolu_x")]
        )

    assert info.value.index == 2


def test_unanswered_call_before_the_next_user_turn_is_refused_but_a_trailing_one_is_kept():
    calling = [ChatMessage.human("Hi"), ChatMessage.ai(None, [ToolCall("toolu_1", "f", {})])]
    with pytest.raises(InvalidMessageError, match=r"toolu_1.*no tool result"):
        to_anthropic([*calling, ChatMessage.human("Anyone?")])

    _, messages = to_anthropic(calling)
    assert messages[-1]["content"][0]["id"] == "toolu_1"


def test_tool_message_without_call_id_names_its_index():
    with pytest.raises(InvalidMessageError, match="no tool_call_id") as info:
        to_anthropic([ChatMessage.human("Hi"), ChatMessage.tool("x", tool_call_id="")])

    assert info.value.index == 1


# -- from_anthropic -----------------------------------------------------------------------------


CONVERSATION = [
    SYSTEM,
    ChatMessage.human("Oslo and Rome?"),
    ChatMessage.ai(
        "Checking both.",
        [
            ToolCall("toolu_a", "get_weather", {"city": "Oslo"}),
            ToolCall("toolu_b", "get_weather", {"city": "Rome", "days": [1, 2]}),
        ],
    ),
    ChatMessage.tool("3°C", tool_call_id="toolu_a", name="get_weather"),
    ChatMessage.tool("20°C", tool_call_id="toolu_b", name="get_weather"),
    ChatMessage.human("Thanks"),
    ChatMessage.ai(None, [ToolCall("toolu_c", "log", {})]),
    ChatMessage.tool("disk full", tool_call_id="toolu_c", name="log", metadata={"is_error": True}),
    ChatMessage.ai("You're welcome."),
]


def test_round_trip_of_a_conversation_with_parallel_calls():
    system, messages = to_anthropic(CONVERSATION)

    assert from_anthropic(messages, system=system) == CONVERSATION


def test_round_trip_with_system_blocks():
    system, messages = to_anthropic([SYSTEM, SUMMARY, ChatMessage.human("Hi")], system_blocks=True)

    assert from_anthropic(messages, system=system) == [SYSTEM, SUMMARY, ChatMessage.human("Hi")]


def test_response_message_from_the_sdk_becomes_an_ai_message():
    response = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
                {"type": "text", "text": "Checking "},
                {"type": "text", "text": "both."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 7},
        }
    )

    [message] = from_anthropic_message(response)

    assert message.content == "Checking both."
    assert message.tool_calls == (ToolCall("toolu_1", "get_weather", {"city": "Oslo"}),)
    assert message.metadata["thinking"][0]["thinking"] == "Two cities."


def test_user_blocks_become_tool_messages_then_a_human_message():
    converted = from_anthropic(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {"type": "text", "text": "And now?"},
                ],
            },
        ]
    )

    assert converted[2:] == [
        ChatMessage.tool("sunny", tool_call_id="t1", name="w"),
        ChatMessage.human("And now?"),
    ]


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "system", "content": "x"}, "top-level 'system'"),
        ({"role": "user", "content": [{"type": "image", "source": {}}]}, "image block has source type None"),
        ({"role": "user", "content": [{"type": "video", "source": {}}]}, "'video'"),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]},
            "JSON object",
        ),
        (
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search"}]},
            "server_tool_use",
        ),
    ],
)
def test_unsupported_anthropic_input_is_refused(message, match):
    with pytest.raises(InvalidMessageError, match=match) as info:
        from_anthropic([{"role": "user", "content": "hi"}, message])

    assert info.value.index == 1


# -- against the SDK's types and the (validating) fake API --------------------------------------


def _check(value: object, annotation: object, where: str) -> None:
    """Check ``value`` against an SDK TypedDict annotation (the static contract, checked at run time)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is object or annotation is typing.Any:
        return
    if origin is typing.Annotated:
        return _check(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return _check(value, option, where)
            except AssertionError as exc:
                errors.append(str(exc))
        raise AssertionError(f"{where}: {value!r} matches no option: {errors}")
    if origin is typing.Literal:
        assert value in args, f"{where}: {value!r} not in {args}"
        return
    if origin in (
        typing.Required,
        typing.NotRequired,
        typing_extensions.Required,
        typing_extensions.NotRequired,
    ):
        return _check(value, args[0], where)
    if typing_extensions.is_typeddict(annotation):
        assert isinstance(value, dict), f"{where}: expected an object, got {value!r}"
        hints = typing.get_type_hints(annotation)
        unknown = set(value) - set(hints)
        assert not unknown, f"{where}: unknown keys {unknown} for {annotation.__name__}"
        missing = annotation.__required_keys__ - set(value)
        assert not missing, f"{where}: missing {missing} for {annotation.__name__}"
        for key, item in value.items():
            _check(item, hints[key], f"{where}.{key}")
        return
    if origin in (list, Iterable, Sequence, typing.Iterable) or annotation is list:
        assert isinstance(value, list), f"{where}: expected a list, got {value!r}"
        for i, item in enumerate(value):
            _check(item, args[0] if args else object, f"{where}[{i}]")
        return
    if origin in (dict, Mapping) or annotation is dict:
        assert isinstance(value, dict), f"{where}: expected an object"
        return
    if isinstance(annotation, type):
        assert isinstance(value, annotation), f"{where}: expected {annotation.__name__}, got {value!r}"
        return
    # SDK aliases such as SequenceNotStr: accept lists.
    assert isinstance(value, list), f"{where}: unexpected annotation {annotation!r}"


@pytest.fixture
def stored_conversation(db):
    """A stored conversation whose window has a summary, parallel calls stored out of order and
    same-role runs (two ai messages, then two human messages in a row)."""
    conversation = Conversation.objects.create(agent_key="travel")
    history = PersistentChatHistory(conversation)
    history.add_messages(
        [
            ChatMessage.human("I live in Oslo."),
            ChatMessage.ai("Noted."),
            ChatMessage.human("What is the weather in Oslo and Rome?"),
            ChatMessage.ai(
                "Checking both.",
                [
                    ToolCall("toolu_01", "get_weather", {"city": "Oslo"}),
                    ToolCall("toolu_02", "get_weather", {"city": "Rome", "unit": "C"}),
                ],
            ),
            ChatMessage.tool("20°C and sunny", tool_call_id="toolu_02", name="get_weather"),
            ChatMessage.tool("3°C and snow", tool_call_id="toolu_01", name="get_weather"),
            ChatMessage.ai("Oslo: 3°C, Rome: 20°C."),
            ChatMessage.ai("Anything else?"),
            ChatMessage.human("Book Rome."),
            ChatMessage.human("For two people, please."),
            ChatMessage.ai(None, [ToolCall("toolu_03", "book_trip", {"city": "Rome", "people": 2})]),
            ChatMessage.tool("", tool_call_id="toolu_03", name="book_trip"),
            ChatMessage.ai("Booked."),
            ChatMessage.human("Thanks!"),
        ]
    )
    summary = Summary.objects.create(
        conversation=conversation, text="The user lives in Oslo.", first_seq=1, through_seq=2
    )
    Conversation.objects.filter(pk=conversation.pk).update(summary=summary)
    return conversation


def test_stored_conversation_rendered_for_anthropic_passes_the_api_validation(
    stored_conversation,
    fake_anthropic,
):
    window = ContextWindowBuilder(stored_conversation, system_prompt="You are a travel agent.").build(
        max_tokens=5_000
    )
    assert [m.role for m in window.messages[:2]] == ["system", "system"]  # prompt, then summary

    system, messages = to_anthropic(window.messages)

    assert system.startswith("You are a travel agent.\n\nSummary of the earlier conversation:")
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4 + ["user"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["toolu_01", "toolu_02"]
    assert [b["text"] for b in messages[4]["content"]] == ["Book Rome.", "For two people, please."]
    request = {"model": "claude-test", "max_tokens": 256, "system": system, "messages": messages}
    _check(request, MessageCreateParamsNonStreaming, "request")
    for message in messages:
        _check(message, MessageParam, "message")
    _check([{"type": "text", "text": "x"}], list[TextBlockParam], "system")

    fake_anthropic.enqueue_text("You're welcome!")
    with anthropic.Anthropic(
        api_key="sk-ant-test", base_url=fake_anthropic.base_url, max_retries=0
    ) as client:
        reply = client.messages.create(**request)

    assert reply.content[0].text == "You're welcome!"
    assert fake_anthropic.requests[0]["messages"] == messages


def test_type_checker_catches_a_wrong_shape():
    with pytest.raises(AssertionError, match="unknown keys"):
        _check({"role": "user", "content": [{"type": "text", "text": "x", "bogus": 1}]}, MessageParam, "m")
    with pytest.raises(AssertionError):
        _check({"role": "tool", "content": "x"}, MessageParam, "m")


@pytest.mark.parametrize(
    ("messages", "system", "match"),
    [
        ([{"role": "assistant", "content": "Hi"}], None, 'first message must use the "user" role'),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], None, "roles must alternate"),
        (
            [{"role": "system", "content": "x"}, {"role": "user", "content": "b"}],
            None,
            'Unexpected role "system"',
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            None,
            "text content blocks must be non-empty",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
                },
                {"role": "user", "content": "where is the result?"},
            ],
            None,
            "`tool_use` ids were found without `tool_result` blocks immediately after: t1",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}],
            None,
            "unexpected `tool_use_id` found in `tool_result` blocks: t9",
        ),
        (
            [{"role": "user", "content": "hi"}],
            [{"type": "text", "text": ""}],
            "text content blocks must be non-empty",
        ),
    ],
)
def test_fake_server_refuses_what_anthropic_refuses(fake_anthropic, messages, system, match):
    request = {"model": "claude-test", "max_tokens": 16, "messages": messages}
    if system is not None:
        request["system"] = system
    with (
        anthropic.Anthropic(api_key="sk-ant-test", base_url=fake_anthropic.base_url, max_retries=0) as client,
        pytest.raises(anthropic.BadRequestError) as info,
    ):
        client.messages.create(**request)

    assert info.value.status_code == 400
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert match in info.value.body["error"]["message"]


def _post(fake, body, headers):
    request = urllib.request.Request(
        fake.base_url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    error = json.loads(info.value.read())
    info.value.close()
    return info.value.code, error


def test_fake_server_requires_max_tokens_the_version_header_and_an_api_key(fake_anthropic):
    body = {"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]}
    version = {"anthropic-version": "2023-06-01"}

    assert _post(fake_anthropic, body, {"x-api-key": "k", **version}) == (
        400,
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
            "request_id": "req_fake000001",
        },
    )
    status, error = _post(fake_anthropic, {**body, "max_tokens": 8}, {"x-api-key": "k"})
    assert (status, error["error"]["message"]) == (400, "anthropic-version: header is required")
    status, error = _post(fake_anthropic, {**body, "max_tokens": 8}, version)
    assert (status, error["error"]["type"]) == (401, "authentication_error")
    assert len(fake_anthropic.requests) == 3
    assert fake_anthropic.pending == 0


def test_one_id_twice_in_a_merged_assistant_turn_pairs_each_result_with_its_call_in_order():
    # Two AI messages in a row (kept by relaxed import) become one assistant turn.
    _, messages = to_anthropic(
        [
            ChatMessage.human("Oslo and Rome?"),
            ChatMessage.ai(None, [ToolCall("c1", "get_weather", {"city": "Oslo"})]),
            ChatMessage.ai(None, [ToolCall("c1", "get_weather", {"city": "Rome"})]),
            ChatMessage.tool("3°C", tool_call_id="c1", name="get_weather"),
            ChatMessage.tool("20°C", tool_call_id="c1", name="get_weather"),
        ]
    )

    calls = [(b["id"], b["input"]["city"]) for b in messages[1]["content"]]
    assert calls == [("c1", "Oslo"), ("c1_2", "Rome")]
    results = [(b["tool_use_id"], b["content"]) for b in messages[2]["content"]]
    assert results == [("c1", "3°C"), ("c1_2", "20°C")]
