"""Content parts (several texts, images, audio, files): stored as structured content, round-trip
through every converter and through storage, priced by the providers' documented rules, shown
as placeholders where only text fits, refused when malformed (nothing stored)."""

from __future__ import annotations

import base64
import io
import json

import pytest
from rest_framework.test import APIClient

from agentmemory.compaction import render_transcript
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic, to_anthropic
from agentmemory.formats.langchain import from_langchain, to_langchain
from agentmemory.formats.media import image_size
from agentmemory.formats.openai import from_openai, from_openai_messages, to_openai, to_openai_messages
from agentmemory.formats.transcripts import parse_transcripts
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role
from agentmemory.models import Conversation, Message
from agentmemory.tokens import (
    ApproximateTokenCounter,
    TiktokenCounter,
    anthropic_image_tokens,
    openai_image_tokens,
)

PIL = pytest.importorskip("PIL.Image")


def encoded_image(width: int, height: int, fmt: str = "PNG") -> str:
    """A real image of the given size and format, base64-encoded."""
    buffer = io.BytesIO()
    PIL.new("RGB", (width, height), (200, 30, 30)).save(buffer, format=fmt)
    return base64.b64encode(buffer.getvalue()).decode()


PNG = encoded_image(1024, 1024)
PNG_URL = f"data:image/png;base64,{PNG}"
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF").decode()
WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 28).decode()

OPENAI_USER = {
    "role": "user",
    "content": [
        {"type": "text", "text": "part one"},
        {"type": "text", "text": "part two"},
        {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}},
        {"type": "file", "file": {"file_id": "file-abc"}},
    ],
}

ANTHROPIC_USER = {
    "role": "user",
    "content": [
        {"type": "text", "text": "Compare these."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "Invoice",
            "citations": {"enabled": True},
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Plain notes."}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/terms.pdf"}},
        {"type": "text", "text": "Which is cheaper?", "cache_control": {"type": "ephemeral"}},
    ],
}


# -- the converters ---------------------------------------------------------------------------


def test_openai_parts_round_trip_and_multi_part_text_is_not_glued():
    message = from_openai(OPENAI_USER)

    assert [p.kind for p in message.parts] == ["text", "text", "image", "image", "audio", "file", "file"]
    assert message.content == (
        "part one\npart two\n[image]\n[image]\n[audio]\n[file: a.pdf]\n[file]"
    )  # never "part onepart two", never base64
    image = message.parts[2]
    assert (image.data, image.mime_type, image.detail) == (PNG, "image/png", "high")
    assert message.parts[4].mime_type == "audio/wav"
    assert to_openai(message) == OPENAI_USER


def test_anthropic_blocks_round_trip():
    messages = from_anthropic([ANTHROPIC_USER])

    assert len(messages) == 1
    parts = messages[0].parts
    assert [p.kind for p in parts] == ["text", "image", "image", "file", "file", "file", "text"]
    assert parts[3].extra == {"title": "Invoice", "citations": {"enabled": True}}
    assert parts[4].text == "Plain notes."
    assert to_anthropic(messages) == (None, [ANTHROPIC_USER])


def test_anthropic_tool_result_with_an_image_round_trips():
    conversation = [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "done"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                    ],
                }
            ],
        },
    ]
    messages = from_anthropic(conversation)

    tool = messages[2]
    assert tool.role is Role.TOOL and tool.name == "shot"
    assert tool.content == "done\n[image]"
    assert to_anthropic(messages)[1] == conversation
    # OpenAI tool messages take only text: the image is named, not dropped silently
    assert to_openai(tool)["content"] == [
        {"type": "text", "text": "done"},
        {"type": "text", "text": "[image]"},
    ]


def test_langchain_standard_blocks_round_trip_every_part_kind():
    original = from_openai(OPENAI_USER)
    [lc] = to_langchain([original])

    assert lc.content[2] == {
        "type": "image",
        "base64": PNG,
        "mime_type": "image/png",
        "extras": {"detail": "high"},
    }
    assert from_langchain([lc]) == [original]
    # and what LangChain itself normalises to its standard blocks reads back the same
    assert [b["type"] for b in lc.content_blocks] == [
        "text",
        "text",
        "image",
        "image",
        "audio",
        "file",
        "file",
    ]


def test_langchain_reads_openai_and_legacy_blocks():
    from langchain_core.messages import HumanMessage

    message = HumanMessage(
        content=[
            "see",
            {"type": "image_url", "image_url": {"url": PNG_URL}},
            {"type": "image", "source_type": "url", "url": "https://example.com/x.png"},
        ]
    )
    [converted] = from_langchain([message])

    assert [(p.kind, p.url) for p in converted.parts] == [
        ("text", ""),
        ("image", ""),
        ("image", "https://example.com/x.png"),
    ]
    assert converted.parts[1].data == PNG


def test_parts_cross_converters_from_anthropic_to_openai():
    [message] = from_anthropic([ANTHROPIC_USER])
    sent = to_openai(message)["content"]

    assert sent[1] == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert sent[3] == {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}}
    assert sent[4] == {"type": "text", "text": "Plain notes."}
    assert sent[5] == {"type": "text", "text": "[file: https://example.com/terms.pdf]"}


def test_an_openai_transcript_with_parts_imports_them():
    data = [{"title": "vision", "messages": [OPENAI_USER, {"role": "assistant", "content": "A red square."}]}]
    [transcript] = parse_transcripts(data, source="vision.json")

    assert transcript.messages[0].parts == from_openai(OPENAI_USER).parts


# -- sizes and prices -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_image_size_is_read_from_the_header(fmt):
    assert image_size(encoded_image(640, 359, fmt)) == (640, 359)


def test_image_size_of_something_else_is_unknown():
    assert image_size(PDF) is None
    assert image_size("") is None


def test_openai_tile_rule_matches_the_documented_examples():
    # OpenAI's vision guide: 1024 x 1024 high detail is 765 tokens; 2048 x 4096 is 1,105
    assert openai_image_tokens(1024, 1024, "high") == 765
    assert openai_image_tokens(2048, 4096, "auto") == 1105
    assert openai_image_tokens(4096, 8192, "low") == 85
    assert openai_image_tokens(100, 100) == 85 + 170


def test_anthropic_rule_matches_the_documented_examples():
    # Anthropic's vision guide: 1000 x 1000 is about 1,334 tokens; 200 x 200 about 54
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(200, 200) == 54
    assert anthropic_image_tokens(8000, 8000) == 1600


def test_an_image_costs_its_rule_never_its_base64_length(settings):
    settings.AGENTMEMORY = {"IMAGE_TOKENS_UNKNOWN_SIZE": 999}
    counter = TiktokenCounter("cl100k_base")
    text_only = counter.count_message(ChatMessage.human("look"))
    inline = ChatMessage.from_parts(
        Role.HUMAN,
        [
            ContentPart(PartKind.TEXT, text="look"),
            ContentPart(PartKind.IMAGE, data=PNG, mime_type="image/png"),
        ],
    )
    assert counter.count_message(inline) == text_only + 765
    assert counter.count_text(PNG) > 765  # what counting the base64 would have cost
    by_url = ChatMessage.from_parts(
        Role.HUMAN,
        [ContentPart(PartKind.TEXT, text="look"), ContentPart(PartKind.IMAGE, url="https://x/y.png")],
    )
    assert counter.count_message(by_url) == text_only + 999
    low = ChatMessage.from_parts(
        Role.HUMAN,
        [ContentPart(PartKind.TEXT, text="look"), ContentPart(PartKind.IMAGE, url="https://x", detail="low")],
    )
    assert counter.count_message(low) == text_only + 85
    claude = TiktokenCounter("cl100k_base", image_rule="anthropic")
    assert claude.count_message(inline) == text_only + anthropic_image_tokens(1024, 1024)
    assert claude.id == "tiktoken:cl100k_base/images:anthropic"
    # the estimate prices images the same way
    assert ApproximateTokenCounter().count_part(inline.parts[1]) == 765


def test_audio_and_files_cost_their_settings(settings):
    settings.AGENTMEMORY = {"AUDIO_PART_TOKENS": 321, "FILE_PART_TOKENS": 654}
    counter = TiktokenCounter("cl100k_base")
    assert counter.count_part(ContentPart(PartKind.AUDIO, data=WAV, mime_type="audio/wav")) == 321
    assert counter.count_part(ContentPart(PartKind.FILE, file_id="file-1")) == 654
    notes = ContentPart(PartKind.FILE, text="Plain notes.", mime_type="text/plain")
    assert counter.count_part(notes) == counter.count_text("Plain notes.")


def test_claude_models_price_images_by_anthropics_rule():
    from agentmemory.tokens import counter_for_model

    assert counter_for_model("claude-sonnet-4-5").image_rule == "anthropic"
    assert counter_for_model("gpt-4").image_rule == "openai"


def test_the_summariser_transcript_shows_placeholders_not_base64():
    message = from_openai(OPENAI_USER)
    transcript = render_transcript([message])

    assert "[image]" in transcript and "[file: a.pdf]" in transcript
    assert PNG[:40] not in transcript and PDF[:20] not in transcript


# -- storage and windows ----------------------------------------------------------------------


@pytest.mark.django_db
def test_parts_are_stored_and_read_back_whole(conversation):
    history = PersistentChatHistory(conversation, token_counter=TiktokenCounter("cl100k_base"))
    [stored] = history.add_messages(from_openai_messages([OPENAI_USER]))

    row = Message.objects.get(pk=stored.id)
    assert row.content.startswith("part one\npart two\n[image]")
    assert row.parts[2] == {
        "type": "image",
        "data": PNG,
        "mime_type": "image/png",
        "detail": "high",
        "width": 1024,
        "height": 1024,
    }
    assert to_openai(row.to_chat_message()) == OPENAI_USER
    assert to_openai_messages(history.get_messages()) == [OPENAI_USER]


@pytest.mark.django_db
def test_a_window_sends_the_image_and_counts_it_by_the_tile_rule(conversation):
    counter = TiktokenCounter("cl100k_base")
    history = PersistentChatHistory(conversation, token_counter=counter)
    picture = ChatMessage.from_parts(
        Role.HUMAN,
        [
            ContentPart(PartKind.TEXT, text="What is this?"),
            ContentPart(PartKind.IMAGE, data=PNG, mime_type="image/png"),
        ],
    )
    history.add_messages(
        [
            ChatMessage.system("You look at pictures."),
            picture,
            ChatMessage.ai("A red square."),
            ChatMessage.human("Thanks!"),
            ChatMessage.ai("You are welcome."),
        ]
    )
    stored = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    assert stored[1].token_count == counter.count_message(ChatMessage.human("What is this?")) + 765
    assert stored[1].token_count < 800  # not the 1,000+ tokens of its base64 text

    builder = ContextWindowBuilder(conversation, token_counter=counter)
    window = builder.build(max_tokens=1000)
    assert [m.seq for m in window.messages] == [1, 2, 3, 4, 5]
    assert window.history_tokens == sum(m.token_count for m in stored[1:])
    sent = to_openai_messages(window.messages)[1]["content"]
    assert sent[1] == {"type": "image_url", "image_url": {"url": PNG_URL}}

    # a budget the image does not fit leaves its turn out, whole
    small = builder.build(max_tokens=sum(m.token_count for m in (stored[0], stored[3], stored[4])) + 200)
    assert [m.seq for m in small.messages] == [1, 4, 5]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("message", "match"),
    [
        (
            ChatMessage.from_parts(
                Role.HUMAN, [ContentPart(PartKind.TEXT, text="a\x00"), ContentPart(PartKind.TEXT, text="b")]
            ),
            "NUL",
        ),
        (
            ChatMessage.from_parts(
                Role.HUMAN, [ContentPart(PartKind.IMAGE, data="not base64!", mime_type="image/png")]
            ),
            "not base64",
        ),
        (
            ChatMessage.from_parts(
                Role.HUMAN, [ContentPart(PartKind.IMAGE, data=PDF, mime_type="application/pdf")]
            ),
            "inline images must be",
        ),
        (ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.IMAGE, data=PNG)]), "no mime_type"),
        (ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.IMAGE, url="ftp://x/y.png")]), "http"),
        (ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.IMAGE)]), "exactly one source"),
        (
            ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.IMAGE, url="https://x", file_id="f")]),
            "exactly one source",
        ),
        (
            ChatMessage.from_parts(
                Role.HUMAN, [ContentPart(PartKind.IMAGE, url="https://x", detail="ultra")]
            ),
            "detail",
        ),
        (
            ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.AUDIO, url="https://x/a.wav")]),
            "inline only",
        ),
        (
            ChatMessage.from_parts(Role.AI, [ContentPart(PartKind.IMAGE, url="https://x/y.png")]),
            "only text parts",
        ),
        (
            ChatMessage.from_parts(
                Role.HUMAN, [ContentPart(PartKind.FILE, file_id="f", extra={"x": float("nan")})]
            ),
            "NaN",
        ),
        (ChatMessage(role=Role.HUMAN, content="x", parts=("text",)), "not a ContentPart"),  # type: ignore[arg-type]
    ],
)
def test_malformed_parts_are_refused_and_nothing_is_stored(conversation, message, match):
    history = PersistentChatHistory(conversation)
    with pytest.raises(InvalidMessageError, match=match):
        history.add_messages([ChatMessage.human("before"), message])
    assert Message.objects.filter(conversation=conversation).count() == 0


@pytest.mark.django_db
def test_inline_data_over_the_setting_is_refused(conversation, settings):
    settings.AGENTMEMORY = {"MAX_PART_DATA_BYTES": 1000}
    big = ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.IMAGE, data=PNG, mime_type="image/png")])
    with pytest.raises(InvalidMessageError, match="MAX_PART_DATA_BYTES"):
        PersistentChatHistory(conversation).add_messages([big])
    assert not Message.objects.exists()


# -- the API ----------------------------------------------------------------------------------


@pytest.fixture
def vision_api(django_user_model):  # type: ignore[no-untyped-def]
    """An API client of user ``viewer`` and a conversation of theirs."""
    user = django_user_model.objects.create_user("viewer", password="pw")
    client = APIClient()
    client.force_login(user)
    return client, Conversation.objects.create(owner=user, agent_key="vision")


@pytest.mark.django_db
def test_api_appends_an_image_data_url_natively_and_in_the_openai_format(vision_api):
    client, conv = vision_api
    url = f"/api/conversations/{conv.uuid}/messages/"
    native = {
        "role": "human",
        "parts": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "url": PNG_URL, "detail": "low"},
        ],
    }
    response = client.post(url, native, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["content"] == "What is this?\n[image]"
    assert body["parts"][1] == {
        "type": "image",
        "data": PNG,
        "mime_type": "image/png",
        "detail": "low",
        "width": 1024,
        "height": 1024,
    }
    assert body["token_count"] < 120  # a low-detail image is 85 tokens

    response = client.post(url + "?format=openai", {"messages": [OPENAI_USER]}, format="json")
    assert response.status_code == 201, response.json()
    stored = Message.objects.get(conversation=conv, seq=2).to_chat_message()
    assert to_openai(stored) == OPENAI_USER

    listed = client.get(url).json()["results"]
    assert [m["parts"] is not None for m in listed] == [True, True]
    response = client.get(f"/api/conversations/{conv.uuid}/context/?max_tokens=20000&format=openai")
    assert response.status_code == 200, response.json()
    assert json.dumps(response.json()).count(PNG) == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "parts",
    [
        "image",
        [{"type": "video", "url": "https://x/v.mp4"}],
        [{"type": "image", "url": "https://x/y.png", "colour": "red"}],
        [{"type": "image", "url": "https://x/y.png", "extra": "x"}],
        [{"type": "image", "url": "https://x/y.png", "width": "wide"}],
        [{"type": "text", "text": "a\u0000b"}],
        [{"type": "image", "data": "%%%", "mime_type": "image/png"}],
    ],
)
def test_api_refuses_malformed_parts_with_a_json_400(vision_api, parts):
    client, conv = vision_api
    response = client.post(
        f"/api/conversations/{conv.uuid}/messages/", {"role": "human", "parts": parts}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_message"
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_the_admin_shows_parts_without_their_base64(admin_client, conversation):  # type: ignore[no-untyped-def]
    from django.urls import reverse

    [stored] = PersistentChatHistory(conversation).add_messages(from_openai_messages([OPENAI_USER]))
    page = admin_client.get(reverse("admin:agentmemory_message_change", args=[stored.id]))

    assert page.status_code == 200
    html = page.content.decode()
    assert "[image]: image/png" in html and "1024 x 1024 px" in html and "detail high" in html
    assert "[file: a.pdf]: application/pdf" in html
    assert PNG[:40] not in html and WAV[:20] not in html
