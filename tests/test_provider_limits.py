"""Per-request limits the providers document, kept by every request a stored history is
replayed into: prompt-cache breakpoints, their lifetimes, media counts and sizes, tool-call
ids and function names, tool counts. The fake servers refuse what the real APIs refuse, with
their wording; storage always keeps the history as it was."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest
from django.db import connection

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.agents.checks import check_agents
from agentmemory.formats.anthropic import from_anthropic, to_anthropic
from agentmemory.formats.openai import to_openai_messages
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, ToolCall
from agentmemory.models import Message
from tests.factories import UserFactory
from tests.fake_anthropic_server import validate_messages_request
from tests.fake_openai_server import InvalidRequest, validate_chat_request


def png(width: int, height: int) -> str:
    """A base64 PNG header of the given size (enough for every size reader)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    data = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return base64.b64encode(data + b"\x00" * 16).decode()


def cached_turns(n: int, ttl: str | None = None) -> list[dict]:  # type: ignore[type-arg]
    """An Anthropic transcript whose every user turn marked a cache breakpoint, as a client
    that caches the prefix on each turn stores it."""
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    turns: list[dict] = []  # type: ignore[type-arg]
    for i in range(n):
        turns.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Question {i}, with the long document before it."},
                    {"type": "text", "text": f"Details {i}", "cache_control": control},
                ],
            }
        )
        turns.append({"role": "assistant", "content": f"Answer {i}"})
    turns.append({"role": "user", "content": "And now?"})
    return turns


def markers(request_messages: list[dict]) -> list[str]:  # type: ignore[type-arg]
    found = []
    for message in request_messages:
        if isinstance(message["content"], list):
            found += [b["text"] for b in message["content"] if "cache_control" in b]
    return found


# -- Anthropic ---------------------------------------------------------------------------------


def test_stored_cache_markers_are_sent_at_most_four_times_the_newest_kept() -> None:
    history = from_anthropic(cached_turns(6))
    system, messages = to_anthropic(history)
    assert markers(messages) == ["Details 2", "Details 3", "Details 4", "Details 5"]
    validate_messages_request({"model": "m", "max_tokens": 10, "system": system, "messages": messages})
    # storage's copy is untouched
    assert sum("cache_control" in p.extra for m in history for p in m.parts) == 6


def test_the_tools_breakpoint_counts_toward_the_four_and_keeps_its_place(fake_anthropic, request) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    tool = {"name": "lookup", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
    reply = model.invoke(from_anthropic(cached_turns(6)), tools=[tool])
    assert reply.message.content == "Fine."
    sent = fake_anthropic.requests[-1]
    assert "cache_control" in sent["tools"][0]
    assert markers(sent["messages"]) == ["Details 3", "Details 4", "Details 5"]


def test_a_one_hour_breakpoint_after_a_shorter_one_is_sent_with_the_default_lifetime() -> None:
    turns = [*cached_turns(2), {"role": "assistant", "content": "ok"}, *cached_turns(2, ttl="1h")]
    _system, messages = to_anthropic(from_anthropic(turns))
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": messages})
    ttls = [
        b["cache_control"].get("ttl")
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if "cache_control" in b
    ]
    assert ttls == [None, None, None, None]


def test_a_thinking_block_never_carries_a_breakpoint() -> None:
    thinking = {
        "type": "thinking",
        "thinking": "Let me look.",
        "signature": "sig",
        "cache_control": {"type": "ephemeral"},
    }
    stored = [
        ChatMessage.human("Look it up"),
        ChatMessage.ai(None, [ToolCall("t1", "lookup", {})], metadata={"thinking": [thinking]}),
        ChatMessage.tool("found", tool_call_id="t1", name="lookup"),
    ]
    _system, messages = to_anthropic(stored)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": messages})
    assert (
        messages[1]["content"][0]["type"] == "thinking" and "cache_control" not in messages[1]["content"][0]
    )


def image_turn(i: int, width: int = 64, height: int = 64) -> ChatMessage:
    return ChatMessage.human(
        f"picture {i}",
        parts=(
            ContentPart(PartKind.TEXT, text=f"picture {i}"),
            ContentPart(PartKind.IMAGE, data=png(width, height), mime_type="image/png"),
        ),
    )


def test_at_most_a_hundred_images_are_sent_the_oldest_as_their_placeholder() -> None:
    stored = []
    for i in range(102):
        stored += [image_turn(i), ChatMessage.ai(f"seen {i}")]
    _system, messages = to_anthropic(stored)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": messages})
    kinds = [[b["type"] for b in m["content"]] for m in messages if m["role"] == "user"]
    assert kinds[0] == kinds[1] == ["text", "text"]
    assert [b["text"] for b in messages[0]["content"]] == ["picture 0", "[image]"]
    assert all(k == ["text", "image"] for k in kinds[2:])


def test_in_a_request_of_many_images_a_large_one_is_sent_as_its_placeholder() -> None:
    stored = []
    for i in range(25):
        stored += [image_turn(i, *((3000, 2000) if i == 3 else (800, 600))), ChatMessage.ai(f"seen {i}")]
    _system, messages = to_anthropic(stored)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": messages})
    assert [b["type"] for b in messages[6]["content"]] == ["text", "text"]
    _system, few = to_anthropic(stored[6:16])  # five images: the large one goes as it is
    assert [b["type"] for b in few[0]["content"]] == ["text", "image"]


JPEG = base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 32).decode()
BMP = base64.b64encode(b"BM" + b"\x00" * 40).decode()


def stored_image(data: str, mime_type: str) -> list[ChatMessage]:
    return [
        ChatMessage.human(
            "Look",
            parts=(
                ContentPart(PartKind.TEXT, text="Look"),
                ContentPart(PartKind.IMAGE, data=data, mime_type=mime_type),
            ),
        ),
        ChatMessage.ai("A cat."),
        ChatMessage.human("And now?"),
    ]


@pytest.mark.parametrize(
    ("data", "mime_type", "sent"),
    [
        (JPEG, "image/jpg", "image/jpeg"),  # OpenAI's data URLs take image/jpg
        (png(64, 64), "image/jpeg", "image/png"),  # a client that labels every image JPEG
        (png(64, 64), "", "image/png"),
        (JPEG, "IMAGE/JPEG", "image/jpeg"),
    ],
    ids=["jpg", "png-labelled-jpeg", "no-type", "upper-case"],
)
def test_an_inline_image_is_sent_with_the_media_type_its_data_shows(data, mime_type, sent) -> None:  # type: ignore[no-untyped-def]
    history = stored_image(data, mime_type)
    _system, messages = to_anthropic(history)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": messages})
    assert messages[0]["content"][1]["source"] == {"type": "base64", "media_type": sent, "data": data}
    assert history[0].parts[1].mime_type == mime_type  # storage's copy is untouched


def test_an_inline_image_of_a_format_anthropic_does_not_take_is_sent_as_its_placeholder(
    fake_anthropic, request
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    assert model.invoke(stored_image(BMP, "image/bmp")).message.content == "Fine."
    assert fake_anthropic.requests[-1]["messages"][0]["content"] == [
        {"type": "text", "text": "Look"},
        {"type": "text", "text": "[image]"},
    ]


def large_png(chars: int) -> str:
    """A base64 PNG of ``chars`` characters (a header, then zero bytes): within every
    per-image limit, large in a request."""
    header = base64.b64decode(png(800, 600))[:33]  # signature and IHDR chunk
    return base64.b64encode(header + b"\x00" * (chars * 3 // 4 - len(header))).decode()


def test_a_request_over_32_mb_sends_its_oldest_inline_images_as_placeholders(fake_anthropic, request) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    data = large_png(5_000_000)  # under the 5 MiB of one image
    stored = []
    for i in range(7):  # 35 MB of images
        stored += [
            ChatMessage.human(
                f"photo {i}",
                parts=(
                    ContentPart(PartKind.TEXT, text=f"photo {i}"),
                    ContentPart(PartKind.IMAGE, data=data, mime_type="image/png"),
                ),
            ),
            ChatMessage.ai(f"seen {i}"),
        ]
    stored.append(ChatMessage.human("Which was sharpest?"))
    assert model.invoke(stored).message.content == "Fine."
    sent = fake_anthropic.requests[-1]["messages"]
    kinds = [[b["type"] for b in m["content"]] for m in sent if isinstance(m["content"], list)]
    assert kinds == [["text", "text"]] + [["text", "image"]] * 6
    assert sent[0]["content"][1] == {"type": "text", "text": "[image]"}
    assert stored[0].parts[1].data == data  # the caller's (storage's) copy is untouched


@pytest.mark.django_db
def test_an_agent_replays_a_long_cached_history_to_anthropic_without_a_refusal(
    fake_anthropic, request
) -> None:  # type: ignore[no-untyped-def]
    class Assistant(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "Be brief."

    fake_anthropic.enqueue_text("Here you are.")
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    agent = Assistant(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    PersistentChatHistory(conversation).add_messages(from_anthropic(cached_turns(8)[:-1]))
    assert agent.run(conversation, "And now?").answer == "Here you are."
    assert len(markers(fake_anthropic.requests[-1]["messages"])) == 4
    stored = [m.to_chat_message() for m in Message.objects.filter(conversation=conversation)]
    assert sum("cache_control" in part.extra for m in stored for part in m.parts) == 8


# -- OpenAI ------------------------------------------------------------------------------------


def test_replayed_function_names_are_sent_in_the_characters_and_length_the_api_takes() -> None:
    long_name = "mcp_server_" + "x" * 80
    stored = [
        ChatMessage.human("Read it"),
        ChatMessage.ai(None, [ToolCall("c1", "files.read", {}), ToolCall("c2", "lookup order", {})]),
        ChatMessage.tool("text", tool_call_id="c1", name="files.read"),
        ChatMessage.tool("order", tool_call_id="c2", name="lookup order"),
        ChatMessage.ai(None, [ToolCall("c3", long_name, {})]),
        ChatMessage.tool("ok", tool_call_id="c3", name=long_name),
        ChatMessage.ai("Done."),
    ]
    messages = to_openai_messages(stored)
    validate_chat_request({"model": "m", "messages": messages})
    names = [call["function"]["name"] for m in messages for call in m.get("tool_calls", [])]
    assert names[:2] == ["files_read", "lookup_order"]
    assert len(names[2]) == 64 and names[2].startswith("mcp_server_xxx")
    assert (
        to_openai_messages(stored)[4]["tool_calls"][0]["function"]["name"] == names[2]
    )  # the same each time


def test_at_most_five_hundred_images_are_sent_to_openai() -> None:
    stored = []
    for i in range(501):
        stored += [image_turn(i), ChatMessage.ai(f"seen {i}")]
    messages = to_openai_messages(stored)
    validate_chat_request({"model": "m", "messages": messages})
    assert messages[0]["content"][1] == {"type": "text", "text": "[image]"}
    assert messages[2]["content"][1]["type"] == "image_url"


def test_a_tool_output_over_openais_longest_message_is_sent_cut_with_a_marker(fake_openai, request) -> None:  # type: ignore[no-untyped-def]
    fake_openai.enqueue_text("Done.")
    model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    request.addfinalizer(model.close)
    output = "x" * 10_600_000  # a recursive listing (Shopify/roast#52)
    stored = [
        ChatMessage.human("List the files"),
        ChatMessage.ai(None, [ToolCall("c1", "shell", {"cmd": "ls -R ."})]),
        ChatMessage.tool(output, tool_call_id="c1", name="shell"),
    ]
    assert model.invoke(stored).message.content == "Done."
    sent = fake_openai.requests[-1]["messages"][2]["content"]
    assert 10_485_760 - 10 < len(sent) <= 10_485_760
    kept, marker = sent.split("\n[... ")
    assert set(kept) == {"x"}
    assert (
        marker
        == f"cut to the API's longest message: {len(output) - len(kept)} of 10600000 characters omitted ...]"
    )
    assert stored[2].content == output  # the caller's (storage's) copy is whole


def test_the_fake_refuses_what_the_api_refuses() -> None:
    """The checks the tests above rely on."""
    with pytest.raises(InvalidRequest, match="maximum length 40"):
        validate_chat_request(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c" * 41, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c" * 41, "content": "ok"},
                ],
            }
        )
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(129)]
    with pytest.raises(InvalidRequest, match="array too long"):
        validate_chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools})


@pytest.mark.django_db
def test_an_agent_replays_a_history_with_foreign_names_and_ids_to_openai(fake_openai, request) -> None:  # type: ignore[no-untyped-def]
    class Assistant(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "Be brief."

    fake_openai.enqueue_text("Here you are.")
    model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    request.addfinalizer(model.close)
    agent = Assistant(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    long_id = "portkey-6aa6db90-1b84-4155-9f32-f658c97d6b1b"
    PersistentChatHistory(conversation).add_messages(
        [
            ChatMessage.human("Read the file"),
            ChatMessage.ai(None, [ToolCall(long_id, "files.read", {"path": "a.txt"})]),
            ChatMessage.tool("contents", tool_call_id=long_id, name="files.read"),
            ChatMessage.ai("It says: contents."),
        ]
    )
    assert agent.run(conversation, "Thanks, and now?").answer == "Here you are."


def test_an_agent_with_more_tools_than_openai_takes_is_a_system_check_warning() -> None:
    from agentmemory.agents import registry
    from agentmemory.agents.tools import Tool

    def make(i: int) -> Tool:
        def run() -> str:
            return "ok"

        run.__name__ = f"tool_{i}"
        run.__doc__ = f"Tool {i}."
        return Tool(run)

    class Crowded(BaseToolCallingAgent, register=False):
        AGENT_KEY = "crowded-tools"
        TOOLS = [make(i) for i in range(130)]

    registry.register(Crowded)
    try:
        found = [(m.id, m.level) for m in check_agents() if m.obj is Crowded]
    finally:
        registry.unregister("crowded-tools")
    assert found == [("agentmemory.W101", 30)]


# -- stored rows written around validation -------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ('{"path": "a.txt"}', {"path": "a.txt"}),  # OpenAI's wire form, written as it came
        ([1, 2], {"_raw_arguments": "[1, 2]"}),
        ("not json", {"_raw_arguments": "not json"}),
        (5, {"_raw_arguments": "5"}),
    ],
)
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_stored_arguments_that_are_not_an_object_are_sent_as_one(
    fake_anthropic, fake_openai, request, provider, stored, sent
) -> None:  # type: ignore[no-untyped-def]
    class Assistant(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "Be brief."

    if provider == "anthropic":
        fake_anthropic.enqueue_text("Here you are.")
        model = AnthropicChatModel(
            model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
        )
    else:
        fake_openai.enqueue_text("Here you are.")
        model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    request.addfinalizer(model.close)
    agent = Assistant(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    PersistentChatHistory(conversation).add_messages(
        [
            ChatMessage.human("Read the file"),
            ChatMessage.ai(None, [ToolCall("c1", "read", {"path": "x"})]),
            ChatMessage.tool("contents", tool_call_id="c1", name="read"),
            ChatMessage.ai("It says: contents."),
        ]
    )
    # a row written around validation (the ORM, SQL, an older version)
    row = Message.objects.get(conversation=conversation, role="ai", seq=2)
    Message.objects.filter(pk=row.pk).update(tool_calls=[{"id": "c1", "name": "read", "arguments": stored}])

    assert agent.run(conversation, "Thanks, and now?").answer == "Here you are."
    if provider == "anthropic":
        [call] = [b for b in fake_anthropic.requests[-1]["messages"][1]["content"] if b["type"] == "tool_use"]
        assert call["input"] == sent
    else:
        [call] = fake_openai.requests[-1]["messages"][2]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == sent
    # storage as it was (read around the field, which gives the ORM the shape it writes)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tool_calls FROM {Message._meta.db_table} WHERE id = %s", [row.pk])
        [raw] = cursor.fetchone()
    assert (json.loads(raw) if isinstance(raw, str) else raw)[0]["arguments"] == stored


def test_a_request_without_inline_media_is_not_measured(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # measuring means writing the whole request as JSON (4 ms for 2.4 MB of text), for a
    # limit only inline images and documents can be brought under
    from agentmemory.formats import anthropic as formats

    def measured(value):  # type: ignore[no-untyped-def]
        raise AssertionError("a text-only request was measured")

    monkeypatch.setattr(formats, "_json_bytes", measured)
    model = AnthropicChatModel(model="claude-test", base_url="http://127.0.0.1:9", api_key="k")
    request, _changes = model._request([ChatMessage.human("x" * 2_400_000)], None)
    assert json.dumps(request["messages"]).count("x") == 2_400_000
