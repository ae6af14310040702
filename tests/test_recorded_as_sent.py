"""A recorded chat call shows what the provider received, not only the window the builder
made: every change the adapter made to meet the provider's per-request limits (an image sent
as its placeholder text, a media type corrected, text cut, a cache breakpoint left out, an
empty error result filled in) is listed on the record, applied to the window the API and the
admin rebuild, and noted beside the changed part. The fake servers refuse what the real APIs
refuse, so each request below is one the provider would take."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.calls import recorded_context_window
from agentmemory.formats.anthropic import EMPTY_ERROR_TEXT, from_anthropic
from agentmemory.formats.openai import CUT_MARKER
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, ToolCall
from agentmemory.models import Message, ModelCall
from tests.factories import UserFactory
from tests.test_provider_limits import BMP, JPEG, cached_turns, large_png, png


class Assistant(BaseToolCallingAgent, register=False):
    SYSTEM_PROMPT = "Be brief."


@pytest.fixture
def anthropic_model(fake_anthropic, request):  # type: ignore[no-untyped-def]
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    return model


@pytest.fixture
def openai_model(fake_openai, request):  # type: ignore[no-untyped-def]
    model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    request.addfinalizer(model.close)
    return model


def run_turn(model, history, text: str = "And now?", agent_class=Assistant, stored_as=None):  # type: ignore[no-untyped-def]
    """One agent turn after ``history`` was stored; returns the recorded chat call.
    ``stored_as`` (a media type) relabels the stored images, as rows written before storage
    checked media types hold them."""
    user = UserFactory()
    agent = agent_class(llm=model)
    conversation = agent.start_conversation(owner=user)
    if history:
        PersistentChatHistory(conversation).add_messages(history)
    if stored_as:
        for row in Message.objects.filter(conversation=conversation):
            if not row.parts:
                continue
            row.parts = [{**p, "mime_type": stored_as} if p["type"] == "image" else p for p in row.parts]
            row.save(update_fields=["parts"])
    agent.run(conversation, text)
    call = ModelCall.objects.get(conversation=conversation, kind="chat")
    call.test_user = user  # type: ignore[attr-defined]
    return call


def image_message(data: str, mime_type: str, text: str = "Look") -> ChatMessage:
    return ChatMessage.human(
        text,
        parts=(
            ContentPart(PartKind.TEXT, text=text),
            ContentPart(PartKind.IMAGE, data=data, mime_type=mime_type),
        ),
    )


def changes_of(call: ModelCall) -> list[tuple[int | None, int | None, str]]:
    return [(c["seq"], c["part"], c["change"]) for c in call.window_changes.get("provider_changes", [])]


def window_api(call: ModelCall, **params: str) -> dict:  # type: ignore[type-arg]
    client = APIClient()
    client.force_login(call.test_user)  # type: ignore[attr-defined]
    url = f"/api/conversations/{call.conversation.uuid}/model-calls/{call.uuid}/window/"
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    return response.json()


def seq_of(call: ModelCall, index: int) -> int:
    """Seq of the ``index``-th stored message of the call's conversation (0-based)."""
    return list(Message.objects.filter(conversation=call.conversation).order_by("seq"))[index].seq


# -- Anthropic: images sent as placeholders ----------------------------------------------------


@pytest.mark.django_db
def test_an_image_of_a_format_anthropic_does_not_take_is_recorded_as_its_placeholder(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    call = run_turn(
        anthropic_model, [image_message(BMP, "image/png"), ChatMessage.ai("A cat.")], stored_as="image/bmp"
    )
    seq = seq_of(call, 0)
    assert changes_of(call) == [(seq, 1, "image_placeholder")]
    [entry] = call.window_changes["provider_changes"]
    assert entry["message"] == 1 and "image/png" in entry["reason"]  # after the system prompt
    # the window as recorded holds what the model read: the placeholder text, no image
    sent = next(m for m in call.window() if m.seq == seq)
    assert [p.kind for p in sent.parts] == [PartKind.TEXT, PartKind.TEXT]
    assert sent.parts[1].text == "[image]"
    body = window_api(call)
    native = next(m for m in body["messages"] if m["seq"] == seq)
    assert "data" not in str(native["parts"]) and native["parts"][1]["text"] == "[image]"
    assert body["provider_changes"] == [
        {
            "message": 1,
            "seq": seq,
            "part": 1,
            "change": "image_placeholder",
            "reason": entry["reason"],
            "sent": None,
            "kept": None,
        }
    ]
    # storage keeps the image
    assert Message.objects.get(conversation=call.conversation, seq=seq).parts[1]["data"] == BMP


@pytest.mark.django_db
def test_an_image_over_eight_thousand_pixels_is_recorded_as_its_placeholder(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    call = run_turn(anthropic_model, [image_message(png(9000, 100), "image/png"), ChatMessage.ai("Wide.")])
    [entry] = call.window_changes["provider_changes"]
    assert (entry["change"], entry["part"]) == ("image_placeholder", 1)
    assert "9000x100" in entry["reason"] and "8000" in entry["reason"]
    assert recorded_context_window(call).messages[1].parts[1] == ContentPart(PartKind.TEXT, text="[image]")


@pytest.mark.django_db
def test_an_image_over_five_mib_of_base64_is_recorded_as_its_placeholder(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    data = large_png(5_300_000)  # within MAX_PART_DATA_BYTES once decoded, over Anthropic's 5 MiB
    call = run_turn(anthropic_model, [image_message(data, "image/png"), ChatMessage.ai("Big.")])
    [entry] = call.window_changes["provider_changes"]
    assert entry["change"] == "image_placeholder" and "5 MiB" in entry["reason"]
    assert fake_anthropic.requests[-1]["messages"][0]["content"][1] == {"type": "text", "text": "[image]"}
    assert call.window()[1].parts[1].text == "[image]"


@pytest.mark.django_db
def test_the_oldest_images_of_a_request_over_32_mb_are_recorded_as_placeholders(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    data = large_png(5_000_000)
    history = []
    for i in range(7):  # 35 MB of images, each within every per-image limit
        history += [image_message(data, "image/png", f"photo {i}"), ChatMessage.ai(f"seen {i}")]
    call = run_turn(anthropic_model, history, "Which was sharpest?")
    first = seq_of(call, 0)
    [entry] = call.window_changes["provider_changes"]
    assert (entry["seq"], entry["part"], entry["change"]) == (first, 1, "image_placeholder")
    assert "32,000,000 bytes" in entry["reason"]
    window = call.window()
    kinds = [[p.kind for p in m.parts] for m in window if m.parts]
    assert kinds == [[PartKind.TEXT, PartKind.TEXT]] + [[PartKind.TEXT, PartKind.IMAGE]] * 6


@pytest.mark.django_db
def test_a_media_type_corrected_from_the_data_is_recorded_as_sent(anthropic_model, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    call = run_turn(anthropic_model, [image_message(png(64, 64), "image/jpeg"), ChatMessage.ai("A dot.")])
    [entry] = call.window_changes["provider_changes"]
    assert (entry["change"], entry["part"], entry["sent"]) == ("media_type_corrected", 1, "image/png")
    assert "image/jpeg" in entry["reason"]
    assert call.window()[1].parts[1].mime_type == "image/png"
    body = window_api(call)
    assert body["messages"][1]["parts"][1]["mime_type"] == "image/png"
    # a type that already matches its data changes nothing
    fake_anthropic.enqueue_text("Fine.")
    same = run_turn(anthropic_model, [image_message(JPEG, "image/jpeg"), ChatMessage.ai("A dot.")])
    assert "provider_changes" not in same.window_changes


@pytest.mark.django_db
def test_cache_breakpoints_left_out_of_the_request_are_recorded(anthropic_model, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Here you are.")
    call = run_turn(anthropic_model, from_anthropic(cached_turns(6)[:-1]))
    dropped = [c for c in call.window_changes["provider_changes"] if c["change"] == "cache_control_dropped"]
    assert [(c["seq"], c["part"]) for c in dropped] == [(seq_of(call, 0), 1), (seq_of(call, 2), 1)]
    assert all("at most 4 cache breakpoints" in c["reason"] for c in dropped)
    marked = [m.seq for m in call.window() for p in m.parts if "cache_control" in p.extra]
    assert marked == [seq_of(call, i) for i in (4, 6, 8, 10)]


def test_an_error_result_without_text_reports_the_text_sent(anthropic_model, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Sorry.")
    messages = [
        ChatMessage.human("Look it up"),
        ChatMessage.ai(None, [ToolCall("t1", "lookup", {})]),
        ChatMessage.tool("", tool_call_id="t1", name="lookup", metadata={"is_error": True}),
    ]
    reply = anthropic_model.invoke(messages)
    assert fake_anthropic.requests[-1]["messages"][-1]["content"][0]["content"] == EMPTY_ERROR_TEXT
    [change] = reply.sent_changes
    assert (change.message, change.part, change.change, change.sent) == (
        2,
        None,
        "error_text_added",
        EMPTY_ERROR_TEXT,
    )


def test_a_final_assistant_turn_sent_without_trailing_whitespace_says_so(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    # an agent's window ends on the newest human message; a caller may prefill an answer
    fake_anthropic.enqueue_text("continued")
    messages = [ChatMessage.system("Be brief."), ChatMessage.human("Count"), ChatMessage.ai("One, two, ")]
    reply = anthropic_model.invoke(messages)
    assert fake_anthropic.requests[-1]["messages"][-1]["content"] == "One, two,"
    [change] = reply.sent_changes
    assert (change.message, change.part, change.change) == (2, None, "trailing_whitespace_stripped")


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [ChatMessage.human(" "), ChatMessage.ai("Hello?"), ChatMessage.human("")],
            [(0, None, "empty_text_added"), (2, None, "empty_text_added")],
            id="blank-human",
        ),
        pytest.param(
            [
                ChatMessage.human(
                    "Listen",
                    parts=(
                        ContentPart(PartKind.TEXT, text="Listen"),
                        ContentPart(PartKind.AUDIO, data="UklGRg==", mime_type="audio/wav"),
                    ),
                )
            ],
            [(0, 1, "audio_placeholder")],
            id="audio",
        ),
        pytest.param(
            from_anthropic([*cached_turns(2)[:-1], *cached_turns(2, ttl="1h")]),
            [(4, 1, "cache_ttl_shortened"), (6, 1, "cache_ttl_shortened")],
            id="ttl",
        ),
    ],
)
def test_every_other_change_anthropic_needs_is_reported(
    anthropic_model, fake_anthropic, messages, expected
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("ok")
    reply = anthropic_model.invoke(messages)
    assert [(c.message, c.part, c.change) for c in reply.sent_changes] == expected
    assert all(c.reason for c in reply.sent_changes)


def test_more_than_a_hundred_images_report_the_oldest_as_placeholders(
    anthropic_model, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("ok")
    messages = []
    for i in range(102):
        messages += [image_message(png(64, 64), "image/png", f"picture {i}"), ChatMessage.ai(f"seen {i}")]
    reply = anthropic_model.invoke([*messages, ChatMessage.human("All of them?")])
    assert [(c.message, c.part, c.change) for c in reply.sent_changes] == [
        (0, 1, "image_placeholder"),
        (2, 1, "image_placeholder"),
    ]
    assert "at most 100 images" in reply.sent_changes[0].reason


# -- OpenAI -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_content_openai_cut_is_recorded_and_the_window_lists_it_as_truncated(
    openai_model, fake_openai
) -> None:  # type: ignore[no-untyped-def]
    class Large(Assistant, register=False):
        CONVERSATION_HISTORY_TOKEN_LIMIT = 5_000_000

    fake_openai.enqueue_text("Done.")
    text = "x" * 10_600_000
    with override_settings(AGENTMEMORY={"MAX_MESSAGE_CHARS": 11_000_000, "MAX_CONTEXT_TOKENS": 5_000_000}):
        call = run_turn(openai_model, [], text, agent_class=Large)
    [entry] = call.window_changes["provider_changes"]
    human = seq_of(call, 0)
    assert (entry["seq"], entry["part"], entry["change"]) == (human, None, "content_cut")
    sent = fake_openai.requests[-1]["messages"][-1]["content"]
    window = recorded_context_window(call)
    assert window.messages[-1].content == sent and window.messages[-1].truncated
    assert human in window.truncated
    kept = entry["kept"]
    assert sent == text[:kept] + CUT_MARKER.format(omitted=len(text) - kept, total=len(text))
    body = window_api(call)
    assert body["truncated"] == [human] and body["messages"][-1]["truncated"] is True
    assert Message.objects.get(conversation=call.conversation, seq=human).content == text


def test_openai_reports_images_past_five_hundred_and_media_outside_user_messages(
    openai_model, fake_openai
) -> None:  # type: ignore[no-untyped-def]
    fake_openai.enqueue_text("ok")
    messages = []
    for i in range(501):
        messages += [image_message(png(8, 8), "image/png", f"p{i}"), ChatMessage.ai(f"seen {i}")]
    messages.append(
        ChatMessage.from_parts(
            "ai",  # type: ignore[arg-type]
            [
                ContentPart(PartKind.TEXT, text="Here"),
                ContentPart(PartKind.IMAGE, url="https://example.com/a.png"),
            ],
        )
    )
    messages.append(ChatMessage.human("Thanks"))
    reply = openai_model.invoke(messages)
    assert [(c.message, c.part, c.change) for c in reply.sent_changes] == [
        (0, 1, "image_placeholder"),
        (1002, 1, "image_placeholder"),
    ]


def test_an_adapter_that_changes_nothing_reports_nothing(
    anthropic_model, openai_model, fake_anthropic, fake_openai
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("ok")
    fake_openai.enqueue_text("ok")
    messages = [ChatMessage.system("Be brief."), image_message(png(64, 64), "image/png")]
    assert anthropic_model.invoke(messages).sent_changes == ()
    assert openai_model.invoke(messages).sent_changes == ()


# -- bounds and surfaces ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_record_keeps_a_bounded_list_and_counts_the_rest(anthropic_model, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.calls import MAX_PROVIDER_CHANGES

    class Large(Assistant, register=False):
        CONVERSATION_HISTORY_TOKEN_LIMIT = 200_000

    fake_anthropic.enqueue_text("Fine.")
    history = []
    for i in range(MAX_PROVIDER_CHANGES + 20):
        history += [image_message(png(9000, 100), "image/png", f"scan {i}"), ChatMessage.ai(f"seen {i}")]
    call = run_turn(anthropic_model, history, agent_class=Large)
    assert len(call.window_changes["provider_changes"]) == MAX_PROVIDER_CHANGES
    assert call.window_changes["provider_changes_more"] == 20
    body = window_api(call)
    assert len(body["provider_changes"]) == MAX_PROVIDER_CHANGES and body["provider_changes_more"] == 20


@pytest.mark.django_db
def test_the_admin_window_page_notes_the_changed_part(anthropic_model, fake_anthropic, admin_client) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_text("Fine.")
    call = run_turn(anthropic_model, [image_message(png(9000, 100), "image/png"), ChatMessage.ai("Wide.")])
    page = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[call.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "am-sent-change" in html and "part 2 (image)" in html
    assert "sent as its placeholder text" in html


@pytest.mark.django_db
def test_the_openapi_schema_states_the_changes(admin_client) -> None:  # type: ignore[no-untyped-def]
    schema = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    window = schema["components"]["schemas"]["RecordedWindow"]["properties"]
    assert window["provider_changes"]["type"] == "array"
    item = window["provider_changes"]["items"]
    item = schema["components"]["schemas"][item["$ref"].rsplit("/", 1)[1]] if "$ref" in item else item
    assert {"message", "seq", "part", "change", "reason", "sent", "kept"} <= set(item["properties"])
    change = item["properties"]["change"]
    refs = [change, *change.get("allOf", [])]
    enum = next(
        schema["components"]["schemas"][r["$ref"].rsplit("/", 1)[1]] if "$ref" in r else r
        for r in refs
        if "$ref" in r or "enum" in r
    )["enum"]
    assert "image_placeholder" in enum and "content_cut" in enum
    assert window["provider_changes_more"]["type"] == "integer"
