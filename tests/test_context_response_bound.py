"""The context window's answer is bounded in bytes like every other answer of the API.

Its budget is in tokens, and a token is not a few bytes of the answer: each history message
carries its keys (``part``, ``seq``, ``role``, ``token_count``...), so a window of 200,000
one-word messages at ``max_tokens=1000000`` answered 27.5 MB in the native format (17 s) and
30.2 MB in LangChain's (33 s), against the 10 MB ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``
every page and search answer keeps. Such a window now holds the newest history messages that
fit, as ``max_messages`` would cut it (whole tool exchanges, starting on a human message),
and ``uncovered`` reports the stored messages it left out; the newest turn is always sent,
whole, as a page always holds one item.
"""

from __future__ import annotations

import pytest

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, ModelCall
from agentmemory.tokens import ApproximateTokenCounter

pytestmark = pytest.mark.django_db

BOUND = 20_000
COUNTER = ApproximateTokenCounter()
FORMATS = ["native", "openai", "anthropic", "langchain"]


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("windowed")


def _many(user, turns: int) -> Conversation:  # type: ignore[no-untyped-def]
    """``turns`` turns of a question, a tool exchange and an answer: 4 small messages each."""
    conv = Conversation.objects.create(owner=user, agent_key="bounded")
    messages: list[ChatMessage] = []
    for i in range(turns):
        call = ToolCall(id=f"c{i}", name="look", arguments={"n": i})
        messages += [
            ChatMessage.human(f"q{i}"),
            ChatMessage.ai(None, tool_calls=[call]),
            ChatMessage.tool(f"r{i}", tool_call_id=f"c{i}", name="look"),
            ChatMessage.ai(f"a{i}"),
        ]
    PersistentChatHistory(conv, token_counter=COUNTER).add_messages(messages)
    return conv


@pytest.mark.parametrize("shape", FORMATS)
def test_a_window_of_many_small_messages_is_cut_to_the_bound(api_forced, user, settings, shape) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _many(user, 150)  # 600 messages: 50 to 90 KB of answer in every format
    response = api_forced.get(
        f"/api/conversations/{conv.uuid}/context/",
        {"max_tokens": 100_000, "message_format": shape},
    )
    assert response.status_code == 200, response.content[:300]
    assert len(response.content) <= BOUND
    body = response.json()
    assert body["last_seq"] == 600  # the newest turn is sent
    first = body["first_seq"]
    assert first > 1 and (first - 1) % 4 == 0  # whole turns, starting on a human message
    assert body["uncovered"]["count"] == first - 1  # and what it left out is reported
    assert body["history_tokens"] < body["max_tokens"]


@pytest.mark.parametrize("shape", FORMATS)
def test_a_window_that_fits_is_sent_whole(api_forced, user, settings, shape) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _many(user, 10)
    body = api_forced.get(
        f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 100_000, "message_format": shape}
    ).json()
    assert body["first_seq"] == 1 and body["last_seq"] == 40 and body["uncovered"]["count"] == 0


def test_the_newest_turn_is_sent_whole_when_it_alone_is_over_the_bound(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _many(user, 20)
    PersistentChatHistory(conv, token_counter=COUNTER).add_messages(
        [ChatMessage.human("big " + "é" * 15_000), ChatMessage.ai("ok")]
    )
    response = api_forced.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 100_000})
    assert response.status_code == 200
    body = response.json()
    assert len(response.content) > BOUND  # one turn, sent alone
    assert [m["seq"] for m in body["messages"] if m["part"] == "history"] == [81, 82]


def test_max_messages_still_caps_below_the_bound(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _many(user, 150)
    body = api_forced.get(
        f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 100_000, "max_messages": 8}
    ).json()
    assert body["first_seq"] == 593 and body["last_seq"] == 600


# -- the window a model call recorded -----------------------------------------------------------


class _BigBudget(BaseToolCallingAgent, register=False):
    AGENT_KEY = "bounded"
    SYSTEM_PROMPT = "Be brief."
    CONVERSATION_HISTORY_TOKEN_LIMIT = 100_000


def _recorded(conv: Conversation) -> ModelCall:
    _BigBudget(llm=ScriptedChatModel(["done"])).run(conv, "and now?")
    return ModelCall.objects.filter(conversation=conv).latest("pk")


@pytest.mark.parametrize("shape", FORMATS)
def test_a_recorded_window_over_the_bound_leaves_out_its_oldest_messages_and_says_so(
    api_forced, user, settings, shape
) -> None:  # type: ignore[no-untyped-def]
    conv = _many(user, 150)
    call = _recorded(conv)  # recorded under the default bound: all 601 messages were sent
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    response = api_forced.get(
        f"/api/conversations/{conv.uuid}/model-calls/{call.uuid}/window/", {"message_format": shape}
    )
    assert response.status_code == 200, response.content[:300]
    assert len(response.content) <= BOUND
    body = response.json()
    assert body["left_out"] > 0 and body["left_out"] % 4 == 0  # from a human message on
    assert body["last_seq"] == 601  # the call's accounting stays the call's
    text = response.content.decode()
    assert "and now?" in text and '"q0"' not in text


def test_a_recorded_window_that_fits_is_sent_whole(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    conv = _many(user, 10)
    call = _recorded(conv)
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    body = api_forced.get(f"/api/conversations/{conv.uuid}/model-calls/{call.uuid}/window/").json()
    assert body["left_out"] == 0
    assert [m["seq"] for m in body["messages"] if m["part"] == "history"] == list(range(1, 42))


def test_the_admin_window_page_shows_the_newest_messages_and_says_how_many_it_left_out(
    user, admin_client, settings
) -> None:  # type: ignore[no-untyped-def]
    from django.urls import reverse

    from agentmemory.admin import utils as admin_calls

    conv = _many(user, 300)  # 1,201 messages sent: a table row each
    call = _recorded(conv)
    body = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[call.pk])).content.decode()
    assert body.count("<tr>") <= admin_calls.WINDOW_PAGE_MESSAGES + 5
    assert "and now?" in body and ">q0<" not in body
    assert "oldest history messages this call sent are not shown here" in body
    assert "from seq 205 on" in body  # the first shown, a human message


def test_the_admin_context_page_shows_the_newest_messages_and_says_how_many_it_left_out(
    user, admin_client
) -> None:  # type: ignore[no-untyped-def]
    from django.urls import reverse

    from agentmemory.admin import utils as admin_utils

    conv = _many(user, 300)
    url = reverse("admin:agentmemory_conversation_context", args=[conv.pk])
    body = admin_client.get(url, {"max_tokens": 100_000}).content.decode()
    assert body.count("<tr") <= admin_utils.WINDOW_PAGE_MESSAGES + 30
    assert ">a299<" in body or "a299" in body
    assert "oldest history messages of this window are not shown here" in body
    assert "shown from seq 201 on" in body


def test_provider_changes_name_the_positions_of_the_messages_the_bounded_answer_shows(
    api_forced, user, settings
) -> None:  # type: ignore[no-untyped-def]
    """A change recorded for a message the bounded answer shows points at that message in
    ``messages``; one for a message left out has ``message`` null, never the position of
    another message."""
    conv = _many(user, 150)
    call = _recorded(conv)
    change = {"part": None, "change": "content_cut", "reason": "OpenAI's limit", "kept": 1}
    call.window_changes = {
        **(call.window_changes or {}),
        "provider_changes": [{**change, "message": 1, "seq": 1}, {**change, "message": 599, "seq": 599}],
    }
    call.save(update_fields=["window_changes"])
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    body = api_forced.get(f"/api/conversations/{conv.uuid}/model-calls/{call.uuid}/window/").json()
    assert body["left_out"] > 0
    old, new = body["provider_changes"]
    assert old["seq"] == 1 and old["message"] is None  # left out of this answer
    assert body["messages"][new["message"]]["seq"] == 599
