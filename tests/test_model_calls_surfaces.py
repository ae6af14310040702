"""The surfaces of recorded model calls: the read-only API (a conversation's calls, one
call's window as sent, usage per conversation and per user, owner-scoped) and the admin
(the list with usage totals, the window page)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test.utils import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.api.serializers import message_to_native
from agentmemory.formats.openai import to_openai_messages
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, ModelCall
from tests.factories import UserFactory

PRICES = {"gpt-4o-mini": {"input": "0.15", "output": "0.60"}}


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped " + "tracking " * 300


class Agent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "surfaces-test"
    SYSTEM_PROMPT = "You track orders."
    TOOLS = [lookup]


@pytest.fixture
def turn(db):  # type: ignore[no-untyped-def]
    """A user's conversation with one turn of two calls (a tool call, then the answer)."""
    user = UserFactory()
    llm = ScriptedChatModel(
        [
            ChatResponse(
                message=ChatMessage.ai(None, [ToolCall("c1", "lookup", {"order": "A7"})]),
                usage=Usage(1000, 20),
                model="gpt-4o-mini",
                finish_reason="tool_calls",
            ),
            ChatResponse(message=ChatMessage.ai("Shipped."), usage=Usage(3000, 5), model="gpt-4o-mini"),
        ]
    )
    agent = Agent(llm=llm)
    conv = agent.start_conversation(owner=user)
    with override_settings(AGENTMEMORY={"MAX_TOOL_RESULT_TOKENS": 60}):
        agent.run(conv, "Where is order A7?")
    return user, conv, llm


def client_for(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_login(user)
    return client


def calls_url(conv: Conversation, suffix: str = "") -> str:
    return f"/api/conversations/{conv.uuid}/model-calls/{suffix}"


@override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES})
def test_api_lists_calls_and_returns_each_window_as_sent(turn) -> None:  # type: ignore[no-untyped-def]
    user, conv, llm = turn
    api = client_for(user)
    listed = api.get(calls_url(conv))
    assert listed.status_code == 200
    first, second = listed.json()["results"]
    assert (first["kind"], first["round"], first["input_tokens"], first["usage_source"]) == (
        "chat",
        0,
        1000,
        "provider",
    )
    assert second["message_seq"] == 4 and (second["first_seq"], second["last_seq"]) == (1, 3)

    sent, tools = llm.calls[1]
    window = api.get(calls_url(conv, f"{second['id']}/window/")).json()
    keys = ("role", "content", "tool_calls", "tool_call_id", "name")
    assert [{k: m[k] for k in keys} for m in window["messages"]] == [
        {k: message_to_native(m)[k] for k in keys} for m in sent
    ]
    assert [m["seq"] for m in window["messages"]] == [None, 1, 2, 3]
    assert window["messages"][-1]["truncated"] is True and window["truncated"] == [3]  # the capped result
    assert window["tools"] == tools and window["history_tokens"] == second["history_tokens"]
    openai = api.get(calls_url(conv, f"{second['id']}/window/"), {"message_format": "openai"}).json()
    assert openai["messages"] == to_openai_messages(sent)
    assert api.get(calls_url(conv, f"{second['id']}/")).json() == second

    usage = api.get(calls_url(conv, "usage/")).json()
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (2, 4000, 25)
    assert Decimal(usage["cost"]) == (Decimal(4000) * Decimal("0.15") + 25 * Decimal("0.60")) / 10**6
    mine = api.get("/api/usage/").json()
    assert mine["calls"] == 2 and mine["cost"] == usage["cost"]
    assert api.get("/api/usage/", {"since": "2999-01-01T00:00:00Z"}).json()["calls"] == 0


def test_api_usage_cost_is_null_when_no_call_was_priced(turn) -> None:  # type: ignore[no-untyped-def]
    user, conv, _ = turn  # no MODEL_PRICES: gpt-4o-mini has no price
    api = client_for(user)
    for url in ("/api/usage/", calls_url(conv, "usage/")):
        usage = api.get(url).json()
        assert usage["calls"] == 2 and usage["unpriced_models"] == ["gpt-4o-mini"]
        assert usage["cost"] is None and [m["cost"] for m in usage["by_model"]] == [None]
    empty = api.get("/api/usage/", {"since": "2999-01-01T00:00:00Z"}).json()
    assert empty["calls"] == 0 and Decimal(empty["cost"]) == 0
    ModelCall.objects.create(
        kind="chat",
        usage_source="provider",
        owner=user,
        conversation=conv,
        model="gpt-4o-mini-x",
        input_tokens=10,
    )
    with override_settings(AGENTMEMORY={"MODEL_PRICES": {"gpt-4o-mini-x": {"input": "1", "output": "1"}}}):
        mixed = api.get("/api/usage/").json()
    assert Decimal(mixed["cost"]) == Decimal("0.00001") and mixed["unpriced_models"] == ["gpt-4o-mini"]
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert schema["components"]["schemas"]["Usage"]["properties"]["cost"]["nullable"] is True


def test_admin_conversation_usage_names_unpriced_models_beside_the_priced_cost(turn, admin_client) -> None:  # type: ignore[no-untyped-def]
    _, conv, _ = turn
    page = reverse("admin:agentmemory_conversation_change", args=[conv.pk])
    assert "no price for gpt-4o-mini" in admin_client.get(page).content.decode()
    ModelCall.objects.create(
        kind="embedding", usage_source="provider", conversation=conv, model="embed-small", input_tokens=10
    )
    with override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES}):
        body = admin_client.get(page).content.decode()
    cost = (Decimal(4000) * Decimal("0.15") + 25 * Decimal("0.60")) / 10**6
    assert f"cost {cost}" in body and "no price for embed-small" in body


def test_api_is_scoped_to_the_owner_and_refuses_bad_input(turn) -> None:  # type: ignore[no-untyped-def]
    user, conv, _ = turn
    call = ModelCall.objects.filter(conversation=conv).first()
    assert call is not None
    stranger = client_for(UserFactory())
    assert stranger.get(calls_url(conv)).status_code == 404
    assert stranger.get(calls_url(conv, f"{call.uuid}/window/")).status_code == 404
    assert stranger.get("/api/usage/").json()["calls"] == 0
    assert APIClient().get("/api/usage/").status_code in (401, 403)
    api = client_for(user)
    assert api.get(calls_url(conv, "not-a-uuid/")).status_code == 404
    for since in ("yesterday", "0001-01-01T00:00:00+05:00", "2026-13-01T00:00:00Z"):
        bad = api.get("/api/usage/", {"since": since})
        assert bad.status_code == 400 and bad.json()["error"] and "since" in bad.json()["fields"]
    assert api.get("/api/usage/", {"until": "2026-01-01T00:00:00"}).status_code == 200  # naive: UTC
    ModelCall.objects.filter(pk=call.pk).update(kind="embedding")
    assert api.get(calls_url(conv, f"{call.uuid}/window/")).status_code == 409


@override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES})
def test_admin_lists_calls_with_totals_and_shows_a_window_as_sent(turn, admin_client) -> None:  # type: ignore[no-untyped-def]
    _, conv, llm = turn
    changelist = reverse("admin:agentmemory_modelcall_changelist")
    page = admin_client.get(changelist, {"conversation__id__exact": conv.pk})
    assert page.status_code == 200
    body = page.content.decode()
    assert "Usage of the calls listed" in body and "4,000" in body
    assert admin_client.get(changelist, {"kind": "chat", "model": "gpt-4o-mini"}).status_code == 200
    second = ModelCall.objects.filter(conversation=conv).order_by("id").last()
    assert second is not None
    assert (
        admin_client.get(reverse("admin:agentmemory_modelcall_change", args=[second.pk])).status_code == 200
    )
    window = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[second.pk]))
    assert window.status_code == 200
    text = window.content.decode()
    assert "Where is order A7?" in text and "You track orders." in text and "sent as a shortened copy" in text
    assert len(window.context["entries"]) == len(llm.calls[1][0])


def test_a_model_call_page_links_to_its_owner(turn, admin_client) -> None:  # type: ignore[no-untyped-def]
    user, conv, _ = turn
    call = ModelCall.objects.filter(conversation=conv).first()
    assert call is not None
    body = admin_client.get(reverse("admin:agentmemory_modelcall_change", args=[call.pk])).content.decode()
    owner_url = reverse("admin:auth_user_change", args=[user.pk])
    assert f'<a href="{owner_url}">{user.username}</a>' in body


def test_forgetting_a_user_erases_their_usage_records(turn) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.deletion import forget_user

    user, _, _ = turn
    other = Conversation.objects.create(owner=UserFactory(), agent_key="surfaces-test")
    ModelCall.objects.create(kind="embedding", owner=other.owner, usage_source="counted", input_tokens=3)
    report = forget_user(user)
    assert report.other.get("agentmemory.ModelCall") == 2
    assert not ModelCall.objects.filter(owner=user).exists() and ModelCall.objects.count() == 1


def test_an_ai_message_page_links_to_the_call_and_window_that_produced_it(turn, admin_client) -> None:  # type: ignore[no-untyped-def]
    _, conv, _ = turn
    answer = Message.objects.get(conversation=conv, role="ai", content="Shipped.")
    call = ModelCall.objects.get(message=answer)
    page = admin_client.get(reverse("admin:agentmemory_message_change", args=[answer.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert reverse("admin:agentmemory_modelcall_window", args=[call.pk]) in body
    assert reverse("admin:agentmemory_modelcall_change", args=[call.pk]) in body
    human = Message.objects.get(conversation=conv, role="human")
    page = admin_client.get(reverse("admin:agentmemory_message_change", args=[human.pk]))
    assert "/window/" not in page.content.decode()


@override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES})
def test_the_conversation_page_shows_its_usage_and_cost(turn, admin_client) -> None:  # type: ignore[no-untyped-def]
    _, conv, _ = turn
    page = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[conv.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    # Two chat calls: 1,000 + 3,000 input tokens, 20 + 5 output, priced per million tokens.
    assert "2 model calls" in body
    assert "4,000 input tokens" in body and "25 output tokens" in body
    cost = (4000 * Decimal("0.15") + 25 * Decimal("0.60")) / 10**6
    assert f"cost {cost}" in body
    assert f"conversation__id__exact={conv.pk}" in body
    empty = Conversation.objects.create(owner=conv.owner, agent_key="surfaces-test")
    page = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[empty.pk]))
    assert "no model calls recorded" in page.content.decode()


def test_a_recorded_window_declares_its_tools_in_the_shape_asked_for(turn) -> None:  # type: ignore[no-untyped-def]
    """The tools beside the messages are in the same provider's shape: OpenAI's function
    tools, Anthropic's ``input_schema`` tools, the native declarations; LangChain's chat
    models were sent OpenAI's shape (``bind_tools``)."""
    user, conv, llm = turn
    api = client_for(user)
    call = ModelCall.objects.filter(conversation=conv).order_by("id").last()
    url = calls_url(conv, f"{call.uuid}/window/")
    [declared] = llm.calls[1][1]
    assert set(declared) == {"name", "description", "parameters"}

    def tools(message_format: str) -> list[dict]:
        response = api.get(url, {"message_format": message_format})
        assert response.status_code == 200, response.content
        return response.json()["tools"]

    assert tools("native") == [declared]
    assert tools("openai") == [{"type": "function", "function": declared}]
    assert tools("anthropic") == [
        {"name": "lookup", "description": declared["description"], "input_schema": declared["parameters"]}
    ]
    pytest.importorskip("langchain_core")
    assert tools("langchain") == [{"type": "function", "function": declared}]
    # ?format=openai (the renderer) means the OpenAI shape too
    assert api.get(url, {"format": "openai"}).json()["tools"] == [{"type": "function", "function": declared}]
