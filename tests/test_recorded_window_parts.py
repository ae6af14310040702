"""A recorded model call says what its request held, part by part, and the parts add up to
the request: the system prompt's own tokens, the knowledge block an agent puts at its end
(``KNOWLEDGE_MEMORY_ENABLED``), the summary, the memory block (``MEMORY_RECALL_ENABLED``) and
the history. ``/model-calls/{id}/window/`` answered ``"memory": null`` for a call that sent a
memory block, and a ``system_tokens`` holding the knowledge block's tokens without saying so
(the call list's ``system_tokens`` of the same call did not), so the figures a user read there
did not add up to what was sent."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.conf import get_token_counter
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, ModelCall, Summary
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FILLER = [f"Small talk number {i} about the weather and nothing else." for i in range(6)]


class Remembering(BaseToolCallingAgent, register=False):
    AGENT_KEY = "parts-test"
    SYSTEM_PROMPT = "You answer from memory."
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True


def _stored(owner, texts, agent_key="parts-test"):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    make = (ChatMessage.human, ChatMessage.ai)
    PersistentChatHistory(conv).add_messages([make[i % 2](text) for i, text in enumerate(texts)])
    return conv


def _turn():  # type: ignore[no-untyped-def]
    """One turn of ``Remembering`` that sends every part: a system prompt with a knowledge
    block, a summary, a memory block and history. Returns (user, call, request sent)."""
    user = UserFactory()
    KnowledgeMemory(user).store("Preferred airline: TAP", "travel", persistent=True)
    _stored(user, [*FILLER, "My sister's wedding is on 12 June in Porto.", "How wonderful!"])
    conv = _stored(user, ["Hello there.", "Hi! How can I help?"])
    summary = Summary.objects.create(
        conversation=conv, text="The user said hello.", first_seq=1, through_seq=2, token_count=8
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    llm = ScriptedChatModel(["12 June, in Porto."])
    result = Remembering(llm).run(conv, "When is my sister's wedding?")
    call = ModelCall.objects.get(conversation=conv, kind="chat")
    [(sent, _tools)] = llm.calls
    call.block = result.calls[0].window.memory  # type: ignore[attr-defined]
    return user, call, sent


def test_the_recorded_parts_add_up_to_the_request_sent() -> None:
    user, call, sent = _turn()
    counter = get_token_counter()
    request_tokens = sum(counter.count_message(m) for m in sent)
    prompt, summary, block = sent[0], sent[1], sent[2]
    assert "Preferred airline: TAP" in prompt.text and "summary_id" in summary.metadata
    assert MEMORY_BLOCK_KEY in block.metadata and "12 June in Porto" in block.text
    bare = counter.count_message(ChatMessage.system(Remembering.SYSTEM_PROMPT))

    api = APIClient()
    api.force_login(user)
    base = f"/api/conversations/{call.conversation.uuid}/model-calls/"
    [listed] = api.get(base).json()["results"]
    window = api.get(f"{base}{listed['id']}/window/").json()
    parts = ("system_tokens", "knowledge_tokens", "summary_tokens", "memory_tokens", "history_tokens")
    for answer in (listed, window):
        # the same figures in the list and in the window, and they add up to the request
        assert answer["system_tokens"] == bare
        assert answer["knowledge_tokens"] == counter.count_message(prompt) - bare > 0
        assert answer["memory_tokens"] == counter.count_message(block) > 0
        assert sum(answer[name] for name in parts) == request_tokens
    assert {name: window[name] for name in parts} == {name: listed[name] for name in parts}
    assert window["total_tokens"] == request_tokens
    # each message's token_count is what it cost as sent; together, the request
    assert [m["part"] for m in window["messages"]] == ["system_prompt", "summary", "memory", "history"]
    assert [m["token_count"] for m in window["messages"]] == [counter.count_message(m) for m in sent]

    # the memory block sent: its text, tokens and what it quoted, by public ids
    memory = window["memory"]
    assert memory is not None
    assert memory["text"] == block.text and memory["tokens"] == window["memory_tokens"]
    assert memory["item_count"] == block.metadata[MEMORY_BLOCK_KEY] >= 1
    assert memory["removed"] is False
    quoted = sorted({item.conversation_id for item in call.block.items if item.conversation_id})
    assert memory["conversations"] == [str(Conversation.objects.get(pk=pk).uuid) for pk in quoted]
    wedding = Conversation.objects.get(owner=user, messages__content__contains="12 June in Porto")
    assert str(wedding.uuid) in memory["conversations"]
    assert memory["facts"] == []  # the knowledge block shows the one fact: not repeated
    # the knowledge block: the facts it showed
    fact = Fact.objects.get(owner=user)
    assert window["knowledge_facts"] == [str(fact.uuid)]


def test_a_window_without_a_memory_block_or_knowledge_says_so() -> None:
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="plain")

    class Plain(BaseToolCallingAgent, register=False):
        AGENT_KEY = "plain"
        SYSTEM_PROMPT = "Be brief."

    llm = ScriptedChatModel(["Hi."])
    Plain(llm).run(conv, "Hello")
    call = ModelCall.objects.get(conversation=conv)
    api = APIClient()
    api.force_login(user)
    window = api.get(f"/api/conversations/{conv.uuid}/model-calls/{call.uuid}/window/").json()
    assert window["memory"] is None and window["memory_tokens"] == 0
    assert window["knowledge_tokens"] == 0 and window["knowledge_facts"] == []
    counter = get_token_counter()
    assert window["total_tokens"] == sum(counter.count_message(m) for m in llm.calls[0][0])
    # the context endpoint has the same shape: no knowledge block there
    context = api.get(f"/api/conversations/{conv.uuid}/context/").json()
    assert context["knowledge_tokens"] == 0
    assert context["total_tokens"] == (
        context["system_tokens"]
        + context["summary_tokens"]
        + context["memory_tokens"]
        + context["history_tokens"]
    )


def test_a_memory_block_removed_since_is_marked_and_keeps_its_figures() -> None:
    user, call, _sent = _turn()
    Conversation.objects.filter(owner=user).exclude(pk=call.conversation_id).delete()
    api = APIClient()
    api.force_login(user)
    window = api.get(f"/api/conversations/{call.conversation.uuid}/model-calls/{call.uuid}/window/").json()
    memory = window["memory"]
    assert memory["removed"] is True and "12 June" not in memory["text"]
    assert memory["conversations"] == [] and memory["tokens"] == window["memory_tokens"] > 0
    assert memory["item_count"] >= 1


def test_the_admin_window_page_shows_every_part(admin_client) -> None:  # type: ignore[no-untyped-def]
    _user, call, sent = _turn()
    page = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[call.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    counter = get_token_counter()
    bare = counter.count_message(ChatMessage.system(Remembering.SYSTEM_PROMPT))
    knowledge = counter.count_message(sent[0]) - bare
    items = sent[2].metadata[MEMORY_BLOCK_KEY]
    conversations = len({item.conversation_id for item in call.block.items if item.conversation_id})
    assert f"System prompt (its own text)</dt><dd>{bare}</dd>" in body
    assert f"Knowledge block (end of the system prompt, 1 fact)</dt><dd>{knowledge}</dd>" in body
    memory = counter.count_message(sent[2])
    label = (
        f"Memory block ({items} item{'' if items == 1 else 's'}, quoting {conversations} "
        f"conversation{'' if conversations == 1 else 's'} and 0 facts)</dt><dd>{memory}</dd>"
    )
    assert label in body
    total = sum(counter.count_message(m) for m in sent)
    assert f"<strong>{total}</strong>" in body
