"""Tests of the OpenAI chat-completions converters in ``agentmemory.formats.openai``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.openai import from_openai, from_openai_messages, to_openai, to_openai_messages
from agentmemory.messages import ChatMessage, Role, ToolCall

BUG_CASES = Path(__file__).resolve().parents[2] / "shared" / "data" / "bug-cases.json"

# BUG-20 (cubist38/mlx-openai-server#205): an assistant turn that only calls tools has content null.
BUG_20_MESSAGES = [
    {"role": "user", "content": "What time is it in Tokyo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_t1",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz": "Asia/Tokyo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_t1", "content": "14:05"},
    {"role": "assistant", "content": "It is 14:05 in Tokyo."},
    {"role": "user", "content": "And in Oslo?"},
]

PARALLEL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "c"}'},
        },
        {
            "id": "call_b",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "days": [1, 2]}'},
        },
        {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    ],
}


def canonical(messages):
    """Messages with tool-call arguments parsed, so JSON strings compare as objects."""
    result = []
    for message in messages:
        message = dict(message)
        if "tool_calls" in message:
            message["tool_calls"] = [
                {
                    **call,
                    "function": {**call["function"], "arguments": json.loads(call["function"]["arguments"])},
                }
                for call in message["tool_calls"]
            ]
        result.append(message)
    return result


def test_bug_20_round_trips_exactly():
    messages = from_openai_messages(BUG_20_MESSAGES)

    assert [m.role for m in messages] == [Role.HUMAN, Role.AI, Role.TOOL, Role.AI, Role.HUMAN]
    assert messages[1].content is None
    assert messages[1].tool_calls == (
        ToolCall(id="call_t1", name="get_time", arguments={"tz": "Asia/Tokyo"}),
    )
    assert messages[2].tool_call_id == "call_t1"
    back = to_openai_messages(messages)
    assert "content" in back[1]
    assert back[1]["content"] is None
    assert canonical(back) == canonical(BUG_20_MESSAGES)


def test_bug_20_from_shared_corpus():
    if not BUG_CASES.exists():
        pytest.skip(f"bug corpus not found at {BUG_CASES} (only in the development checkout)")
    case = next(c for c in json.loads(BUG_CASES.read_text()) if c["id"] == "BUG-20")

    back = to_openai_messages(from_openai_messages(case["input"]))

    assert canonical(back) == canonical(case["input"])


def test_parallel_tool_calls_keep_order_and_parse_arguments():
    message = from_openai(PARALLEL)

    assert [c.id for c in message.tool_calls] == ["call_a", "call_b", "call_c"]
    assert message.tool_calls[1].arguments == {"city": "Zürich", "days": [1, 2]}
    assert message.tool_calls[2].arguments == {}
    assert canonical([to_openai(message)]) == canonical([PARALLEL])


def test_arguments_serialised_as_json_string_without_ascii_escapes():
    message = ChatMessage.ai(tool_calls=[ToolCall(id="c1", name="greet", arguments={"name": "Zoë"})])

    call = to_openai(message)["tool_calls"][0]

    assert call == {
        "id": "c1",
        "type": "function",
        "function": {"name": "greet", "arguments": '{"name": "Zoë"}'},
    }


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage.system("You are terse."),
        ChatMessage.system("Be nice.", name="policy"),
        ChatMessage.human("hi"),
        ChatMessage.human("hi", name="alice"),
        ChatMessage.ai("hello"),
        ChatMessage.ai(""),
        ChatMessage.ai(None, [ToolCall("c1", "lookup", {"q": "x", "n": 3})]),
        ChatMessage.ai("Let me check.", [ToolCall("c1", "lookup", {}), ToolCall("c2", "other", {"a": None})]),
        ChatMessage.ai("", [ToolCall("c1", "lookup", {"nested": {"deep": [1, {"x": True}]}})]),
        ChatMessage.tool("42", tool_call_id="c1"),
        ChatMessage.tool("", tool_call_id="c1"),
    ],
)
def test_chat_message_round_trip(message):
    assert from_openai(to_openai(message)) == message


@pytest.mark.parametrize(
    "data",
    [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "hello"},
        {"role": "assistant", "content": "hello", "name": "bot"},
        {"role": "assistant", "content": None, "tool_calls": PARALLEL["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
    ],
)
def test_canonical_dict_round_trip(data):
    assert canonical([to_openai(from_openai(data))]) == canonical([data])


def test_to_openai_shapes():
    assert to_openai(ChatMessage.system("s")) == {"role": "system", "content": "s"}
    assert to_openai(ChatMessage.human("h")) == {"role": "user", "content": "h"}
    assert to_openai(ChatMessage.ai("a")) == {"role": "assistant", "content": "a"}
    # The tool message param has no name; content null is not allowed for tool results.
    assert to_openai(ChatMessage(role=Role.TOOL, content=None, tool_call_id="c", name="lookup")) == {
        "role": "tool",
        "tool_call_id": "c",
        "content": "",
    }
    # content null is only valid next to tool calls.
    assert to_openai(ChatMessage.ai(None)) == {"role": "assistant", "content": ""}


def test_metadata_and_storage_fields_are_not_sent():
    message = ChatMessage.human("hi", metadata={"model": "x"}, seq=3, id=9, token_count=2, truncated=True)

    assert to_openai(message) == {"role": "user", "content": "hi"}


def test_developer_role_maps_to_system():
    assert from_openai({"role": "developer", "content": "d"}) == ChatMessage.system("d")


def test_text_content_parts_are_kept_as_parts_and_their_text_joined_by_a_newline():
    data = {
        "role": "user",
        "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
    }
    message = from_openai(data)

    assert message.content == "part one\npart two"
    assert [p.text for p in message.parts] == ["part one", "part two"]
    assert to_openai(message) == data


def test_a_single_text_part_is_plain_text():
    message = from_openai({"role": "user", "content": [{"type": "text", "text": "Hello"}]})

    assert message == ChatMessage.human("Hello")


def test_tool_name_is_kept_when_present():
    message = from_openai({"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "ok"})

    assert message == ChatMessage.tool("ok", tool_call_id="c1", name="lookup")


def test_response_only_fields_are_ignored_and_refusal_kept_in_metadata():
    message = from_openai(
        {
            "role": "assistant",
            "content": None,
            "refusal": "I can't help with that.",
            "annotations": [],
            "audio": None,
            "function_call": None,
            "tool_calls": None,
        }
    )

    # content null without tool calls cannot be stored or sent: the refusal is the reply's text
    assert message.content == "I can't help with that."
    assert message.tool_calls == ()
    assert message.metadata == {"refusal": "I can't help with that."}


def test_empty_arguments_string_means_empty_object():
    message = from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "now", "arguments": ""}}],
        }
    )

    assert message.tool_calls[0].arguments == {}


def _assistant_with_arguments(arguments):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_bad", "type": "function", "function": {"name": "f", "arguments": arguments}}
        ],
    }


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "3", "null", "true"])
def test_arguments_that_are_not_a_json_object_are_refused(arguments):
    with pytest.raises(InvalidMessageError, match=r"call_bad.*must be a JSON object"):
        from_openai(_assistant_with_arguments(arguments))


def test_malformed_json_arguments_are_refused():
    with pytest.raises(InvalidMessageError, match=r"call_bad.*not valid JSON"):
        from_openai(_assistant_with_arguments('{"city": "Oslo"'))


def test_arguments_nested_deeper_than_the_parser_can_go_are_refused():
    # json.loads recurses once per level and gives up with RecursionError near 1,000 levels
    nested = '{"a": ' + "[" * 5_000 + "]" * 5_000 + "}"
    with pytest.raises(InvalidMessageError, match=r"call_bad.*nested too deeply"):
        from_openai(_assistant_with_arguments(nested))


def test_tool_message_without_tool_call_id_is_refused():
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        from_openai({"role": "tool", "content": "42"})


@pytest.mark.parametrize("role", ["robot", None, "", "human"])
def test_unknown_role_is_refused(role):
    with pytest.raises(InvalidMessageError, match="unknown OpenAI role"):
        from_openai({"role": role, "content": "x"})


def test_legacy_function_role_is_refused():
    with pytest.raises(InvalidMessageError, match="legacy 'function' role"):
        from_openai({"role": "function", "name": "f", "content": "x"})


def test_legacy_function_call_field_is_refused():
    with pytest.raises(InvalidMessageError, match="function_call"):
        from_openai({"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}})


@pytest.mark.parametrize(
    ("part", "match"),
    [
        ({"type": "refusal", "refusal": "no"}, "type 'refusal'"),
        ({"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}, "type 'video_url'"),
        ({"type": "image_url", "image_url": {}}, "'url' must be a non-empty string"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,abc"}}, "not base64"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA"}}, "'format'"),
        ({"type": "file", "file": {"filename": "a.pdf"}}, "neither 'file_data' nor 'file_id'"),
        ("text", "must be an object"),
    ],
)
def test_unknown_or_malformed_content_parts_are_refused(part, match):
    with pytest.raises(InvalidMessageError, match=match):
        from_openai({"role": "user", "content": [{"type": "text", "text": "look"}, part]})


def test_custom_tool_calls_are_refused():
    data = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_x", "type": "custom", "custom": {"name": "f", "input": "raw"}}],
    }

    with pytest.raises(InvalidMessageError, match=r"call_x.*'custom'"):
        from_openai(data)


def test_duplicate_tool_call_ids_are_refused():
    data = {"role": "assistant", "content": None, "tool_calls": [PARALLEL["tool_calls"][0]] * 2}

    with pytest.raises(InvalidMessageError, match="repeats tool call id"):
        from_openai(data)


def test_tool_calls_on_a_user_message_are_refused():
    with pytest.raises(InvalidMessageError, match="only assistant messages"):
        from_openai({"role": "user", "content": "x", "tool_calls": PARALLEL["tool_calls"]})


def test_batch_errors_carry_the_index():
    with pytest.raises(InvalidMessageError) as info:
        from_openai_messages([{"role": "user", "content": "ok"}, {"role": "tool", "content": "orphan"}])

    assert info.value.index == 1
    assert str(info.value).startswith("message 1: ")


def test_to_openai_refuses_tool_message_without_id_and_unserialisable_arguments():
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        to_openai(ChatMessage(role=Role.TOOL, content="x"))
    with pytest.raises(InvalidMessageError, match="not JSON-serialisable") as info:
        to_openai_messages([ChatMessage.ai(tool_calls=[ToolCall("c1", "f", {"when": object()})])])
    assert info.value.index == 0


def test_sdk_response_message_object_is_accepted() -> None:
    """``from_openai(response.choices[0].message)`` works without ``model_dump()`` first."""
    from openai.types.chat import ChatCompletionMessage

    sdk_message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"id": 7}'}}
            ],
        }
    )
    message = from_openai(sdk_message)
    assert message.content is None
    assert message.tool_calls[0].arguments == {"id": 7}
    assert from_openai(ChatCompletionMessage(role="assistant", content="Hi")).content == "Hi"


def test_tool_results_take_the_name_of_the_call_they_answer_in_the_list():
    messages = from_openai_messages(
        [
            {"role": "user", "content": "Weather in Oslo and Bergen?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {"id": "c2", "type": "function", "function": {"name": "forecast", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "rain"},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            # a result whose call is not in the list keeps no name (storage decides if it is valid)
            {"role": "tool", "tool_call_id": "elsewhere", "content": "late"},
        ]
    )
    assert [(m.tool_call_id, m.name) for m in messages[2:]] == [
        ("c2", "forecast"),
        ("c1", "weather"),
        ("elsewhere", ""),
    ]


def test_reasoning_content_goes_back_with_the_assistant_turn_that_made_it() -> None:
    """OpenAI-compatible servers in thinking mode (DeepSeek, Kimi, vLLM reasoning parsers)
    reply with ``reasoning_content`` beside the tool calls, and refuse the next request of the
    tool loop without it (400 "The `reasoning_content` in the thinking mode must be passed back
    to the API"; crewAIInc/crewAI#5878, abhigyanpatwari/GitNexus#43): it is kept with the
    message, counted, and sent back on that message only."""
    from agentmemory.tokens import ApproximateTokenCounter

    reply = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "The user wants the time; call get_time.",
        "tool_calls": [
            {"id": "call_t1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
        ],
    }
    message = from_openai(reply)
    assert message.metadata == {
        "thinking": [{"type": "reasoning_content", "thinking": "The user wants the time; call get_time."}]
    }
    assert to_openai(message) == reply
    without = ChatMessage.ai(None, message.tool_calls)
    counter = ApproximateTokenCounter()
    assert counter.count_message(message) > counter.count_message(without)
    # never on a turn that carried none, nor on other roles
    assert "reasoning_content" not in to_openai(without)
    assert "reasoning_content" not in to_openai(from_openai({"role": "assistant", "content": "Hi."}))
    # Anthropic thinking blocks are not OpenAI reasoning, and the reverse
    anthropic = ChatMessage.ai(
        "Hi.", metadata={"thinking": [{"type": "thinking", "thinking": "x", "signature": "s"}]}
    )
    assert "reasoning_content" not in to_openai(anthropic)
    from agentmemory.formats.anthropic import to_anthropic

    _, turns = to_anthropic(
        [ChatMessage.human("What time is it?"), message, ChatMessage.tool("14:05", tool_call_id="call_t1")]
    )
    assert [b["type"] for b in turns[1]["content"]] == ["tool_use"]
