"""``purge_conversations --blank-content`` reaches every copy of what a conversation said.

Blanking emptied the messages and summaries, but the texts recorded with each model call (the
system prompt with the owner's knowledge block and the summary message as sent, kept once per
conversation in ``PromptText``) still held the words, so ``/model-calls/{id}/window/`` and the
admin's window page showed what docs/operations.md says is blanked; so did the Anthropic
thinking blocks kept in an AI message's metadata. Every place a word of the conversation can
be read back from is checked here: the API (messages, export, summaries, context, search,
model calls and their windows), the admin's pages and the recall index.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test.utils import override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.calls import text_digest
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, ModelCall, PromptText, Summary
from agentmemory.recall import search_messages
from agentmemory.retention import purge_conversations
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: words said in the conversation (and in the facts sent with it); none may survive blanking
WORDS = ("zeppelin", "walnuts", "Reykjavik", "pondering", "hangar")


@tool
def book(city: str) -> str:
    """Book a flight."""
    return f"booked a zeppelin to {city}. " + "hangar details " * 200


class Planner(BaseToolCallingAgent, register=False):
    AGENT_KEY = "planner"
    SYSTEM_PROMPT = "You plan trips."
    TOOLS = [book]
    KNOWLEDGE_MEMORY_ENABLED = True


@pytest.fixture
def said(db):  # type: ignore[no-untyped-def]
    """A conversation with a summary, a tool exchange, thinking blocks and two recorded model
    calls that sent the owner's facts and the summary."""
    user = UserFactory(username="traveller")
    KnowledgeMemory(user).store("Allergic to walnuts", "health", persistent=True)
    agent = Planner(
        llm=ScriptedChatModel(
            [
                ChatResponse(
                    message=ChatMessage.ai(None, [ToolCall("c1", "book", {"city": "Reykjavik"})]),
                    usage=Usage(100, 5),
                    model="m",
                ),
                ChatResponse(
                    message=ChatMessage.ai("Your zeppelin is booked."), usage=Usage(200, 5), model="m"
                ),
            ]
        )
    )
    conv = agent.start_conversation(owner=user)
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Find me a zeppelin hangar"),
            ChatMessage.ai(
                "There is one near the hangar.",
                metadata={
                    "model": "m",
                    "thinking": [{"type": "thinking", "thinking": "pondering the zeppelin"}],
                },
            ),
        ]
    )
    summary = Summary.objects.create(
        conversation=conv, text="asked for a zeppelin hangar", first_seq=1, through_seq=2
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    with override_settings(AGENTMEMORY={"MAX_TOOL_RESULT_TOKENS": 60}):  # a shortened copy is sent
        agent.run(conv, "Book a zeppelin to Reykjavik")
    calls = list(ModelCall.objects.filter(conversation=conv, kind="chat").order_by("pk"))
    assert len(calls) == 2 and all(c.summary_digest and c.system_prompt_digest for c in calls)
    texts = " ".join(PromptText.objects.filter(conversation=conv).values_list("text", flat=True))
    assert "walnuts" in texts and "zeppelin" in texts  # the copies blanking must reach
    Conversation.objects.filter(pk=conv.pk).update(updated_at=timezone.now() - timedelta(days=400))
    return user, conv, calls


def _leaks(text: str) -> list[str]:
    return [word for word in WORDS if word.lower() in text.lower()]


def test_blanking_reaches_the_windows_recorded_with_model_calls(said, admin_client) -> None:  # type: ignore[no-untyped-def]
    user, conv, calls = said
    client = APIClient()
    client.force_authenticate(user)
    window_url = f"/api/conversations/{conv.uuid}/model-calls/{calls[1].uuid}/window/"
    admin_window = reverse("admin:agentmemory_modelcall_window", args=[calls[1].pk])
    before = client.get(window_url)
    assert _leaks(before.content.decode())  # the words are there

    purge_conversations(older_than=timedelta(days=30), blank_content=True)

    for call in calls:
        answer = client.get(f"/api/conversations/{conv.uuid}/model-calls/{call.uuid}/window/")
        assert answer.status_code == 200, answer.content
        assert _leaks(answer.content.decode()) == []
        # the window still says what was sent, in shape: system prompt, summary, history
        roles = [m["role"] for m in answer.json()["messages"]]
        assert roles[:2] == ["system", "system"] and "human" in roles
        assert "-" not in "".join(m["content"] or "" for m in answer.json()["messages"])  # no "-120 of 0"
        page = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[call.pk]))
        assert page.status_code == 200 and _leaks(page.content.decode()) == []
    assert _leaks(admin_client.get(admin_window).content.decode()) == []
    # the tool declarations are the agent's, not what was said: they read back unchanged
    assert client.get(window_url).json()["tools"] == before.json()["tools"]


def test_blanking_leaves_no_word_anywhere_it_can_be_read(said, admin_client) -> None:  # type: ignore[no-untyped-def]
    user, conv, _calls = said
    call_command("purge_conversations", "--older-than", "30d", "--blank-content", "--no-progress")
    client = APIClient()
    client.force_authenticate(user)
    base = f"/api/conversations/{conv.uuid}"
    for path in ("/", "/messages/", "/summaries/", "/export/", "/context/", "/model-calls/"):
        answer = client.get(base + path)
        assert answer.status_code == 200, path
        assert _leaks(answer.getvalue().decode()) == [], path  # the export is streamed
    for word in WORDS[:4]:
        found = client.get("/api/search/", {"q": word, "include": "messages"}).json()["messages"]
        assert found == [], word
        assert search_messages(word, owner=user) == []
    for name in ("conversation_change", "conversation_context"):
        page = admin_client.get(reverse(f"admin:agentmemory_{name}", args=[conv.pk]))
        assert page.status_code == 200 and _leaks(page.content.decode()) == [], name
    rows = Message.objects.filter(conversation=conv)
    assert not any("thinking" in (m.metadata or {}) for m in rows)
    assert all(
        m.metadata.get("model") == "m" for m in rows if m.role == "ai" and m.metadata
    )  # the rest stays
    # what is left of the recorded texts: the tool declarations, and the blanked text
    tools = set(ModelCall.objects.filter(conversation=conv).values_list("tools_digest", flat=True))
    left = dict(PromptText.objects.filter(conversation=conv).values_list("digest", "text"))
    assert set(left) == (tools - {""}) | {text_digest("")}
    assert _leaks(json.dumps(left)) == []


def test_texts_sent_after_blanking_are_recorded_anew(said) -> None:  # type: ignore[no-untyped-def]
    # Blanked texts are not kept under the digest of what they held: a later call that sends
    # the same system prompt again records it, and its window reads back as sent.
    _user, conv, calls = said
    purge_conversations(older_than=timedelta(days=30), blank_content=True)
    digest = calls[0].system_prompt_digest
    assert not PromptText.objects.filter(conversation=conv, digest=digest).exists()
    assert PromptText.objects.get(conversation=conv, digest=text_digest("")).text == ""
    agent = Planner(llm=ScriptedChatModel([ChatResponse(message=ChatMessage.ai("Hello again."), model="m")]))
    agent.run(conv, "Hello")
    latest = ModelCall.objects.filter(conversation=conv, kind="chat").order_by("pk").last()
    assert latest is not None
    assert "You plan trips." in latest.window()[0].content
