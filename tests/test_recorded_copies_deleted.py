"""Deleting memory removes its copies from recorded model calls.

A recorded chat call keeps the memory block it sent (text from the owner's other
conversations and facts) and the knowledge block at the end of its system prompt (facts).
Deleting a conversation, clearing it, popping a message or forgetting a fact must leave none
of those words in what the app shows of the call: its rebuilt window, the admin's "Window
sent" page, ``/model-calls/{id}/window/``.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.calls import recorded_window
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, ModelCall, PromptText
from agentmemory.recording import KNOWLEDGE_BLOCK_REMOVED, MEMORY_BLOCK_REMOVED, redact_recorded_copies
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FILLER = [f"Small talk number {i} about the weather and nothing else." for i in range(6)]
SECRET = "The safe code is 4471 behind the painting."


class Recalling(BaseToolCallingAgent, register=False):
    AGENT_KEY = "copies-test"
    SYSTEM_PROMPT = "You answer from memory."
    MEMORY_RECALL_ENABLED = True


class Knowing(Recalling, register=False):
    KNOWLEDGE_MEMORY_ENABLED = True


def stored(owner, texts, *, agent_key="other"):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    make = (ChatMessage.human, ChatMessage.ai)
    PersistentChatHistory(conv).add_messages([make[i % 2](text) for i, text in enumerate(texts)])
    return conv


def asked(owner, agent_class=Recalling):  # type: ignore[no-untyped-def]
    """A new conversation where the agent was asked about the safe; its recorded call."""
    conv = Conversation.objects.create(owner=owner, agent_key="copies-test")
    agent_class(ScriptedChatModel(["4471."])).run(conv, "What is the safe code behind the painting?")
    return conv, ModelCall.objects.get(conversation=conv)


def shown(call: ModelCall, owner) -> str:  # type: ignore[no-untyped-def]
    """Everything the app shows of ``call``: the rebuilt window, the API's and the admin's."""
    call = ModelCall.objects.get(pk=call.pk)
    texts = [m.text for m in recorded_window(call)]
    api = APIClient()
    api.force_login(owner)
    window = api.get(f"/api/conversations/{call.conversation.uuid}/model-calls/{call.uuid}/window/")
    assert window.status_code == 200, window.content
    texts.append(window.content.decode())
    owner.is_staff = owner.is_superuser = True
    owner.save()
    admin = APIClient()
    admin.force_login(owner)
    page = admin.get(reverse("admin:agentmemory_modelcall_window", args=[call.pk]))
    assert page.status_code == 200
    texts.append(page.content.decode())
    return "\n".join(texts)


@pytest.fixture
def user():  # type: ignore[no-untyped-def]
    return UserFactory()


def test_deleting_a_conversation_removes_the_block_that_quoted_it(user) -> None:
    source = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, call = asked(user)
    assert "4471" in shown(call, user)  # sent and recorded as sent
    assert call.window_changes["memory"]["sources"]["messages"]
    source.delete()
    text = shown(call, user)
    assert "4471" not in text
    assert MEMORY_BLOCK_REMOVED in text
    # what was sent is still accounted for, and nothing names the deleted words any more
    after = ModelCall.objects.get(pk=call.pk).window_changes["memory"]
    assert after["tokens"] > 0
    assert after["digest"] != call.window_changes["memory"]["digest"]
    assert not PromptText.objects.filter(digest=call.window_changes["memory"]["digest"]).exists()
    assert "sources" not in after


def test_deleting_through_the_api_and_in_bulk_removes_the_copies(user) -> None:
    source = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, call = asked(user)
    api = APIClient()
    api.force_login(user)
    assert api.delete(f"/api/conversations/{source.uuid}/").status_code == 204
    assert "4471" not in shown(call, user)

    again = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, second = asked(user)
    assert "4471" in shown(second, user)
    Conversation.objects.filter(pk=again.pk).delete()
    assert "4471" not in shown(second, user)


def test_clearing_or_popping_the_quoted_messages_removes_the_copies(user) -> None:
    source = stored(user, [*FILLER, SECRET])  # the secret is the newest message
    _conv, call = asked(user)
    assert "4471" in shown(call, user)
    popped = PersistentChatHistory(source).pop()
    assert popped is not None and popped.text == SECRET
    assert "4471" not in shown(call, user)

    other = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, second = asked(user)
    assert "4471" in shown(second, user)
    PersistentChatHistory(other).clear()
    assert "4471" not in shown(second, user)


def test_a_block_that_quoted_something_else_is_kept(user) -> None:
    stored(user, [*FILLER, SECRET, "Noted."])
    unrelated = stored(user, ["What did we plant in the garden?", "Tulips."])
    _conv, call = asked(user)
    unrelated.delete()
    assert "4471" in shown(call, user)


def test_forgetting_a_fact_removes_it_from_the_recorded_system_prompt(user) -> None:
    memory = KnowledgeMemory(user)
    memory.remember(SECRET, "home", True)
    memory.remember("Prefers tea to coffee", "preferences", True)
    _conv, call = asked(user, Knowing)
    before = shown(call, user)
    assert "4471" in before and "Prefers tea" in before
    fact = Fact.objects.get(owner=user, content=SECRET)
    assert memory.forget(fact.pk) == 1
    text = shown(call, user)
    assert "4471" not in text
    assert KNOWLEDGE_BLOCK_REMOVED in text
    assert "You answer from memory." in text  # the agent's own prompt is kept
    assert not PromptText.objects.filter(digest=call.system_prompt_digest).exists()
    # a second deletion does not cut the prompt again
    other = Fact.objects.get(owner=user, content__startswith="Prefers tea")
    other.delete()
    recorded = recorded_window(ModelCall.objects.get(pk=call.pk))[0].text
    assert recorded == f"You answer from memory.\n\n{KNOWLEDGE_BLOCK_REMOVED}"


def test_a_fact_recalled_into_the_memory_block_goes_with_its_history(user) -> None:
    memory = KnowledgeMemory(user)  # no knowledge block for this agent: facts come recalled
    memory.remember("safe code: 1234", "home", False)
    memory.remember("safe code: 4471", "home", False)  # supersedes the first
    _conv, call = asked(user)
    assert call.window_changes["memory"]["sources"]["facts"]
    assert "4471" in shown(call, user)
    Fact.objects.get(owner=user, content="safe code: 4471").delete()
    assert not Fact.objects.filter(owner=user).exists()  # the history went with it
    text = shown(call, user)
    assert "4471" not in text and "1234" not in text


def test_another_owners_records_are_left_alone(user) -> None:
    source = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, call = asked(user)
    stranger = UserFactory()
    stored(stranger, [*FILLER, SECRET, "Noted."])
    _theirs, their_call = asked(stranger)
    source.delete()
    assert "4471" not in shown(call, user)
    assert "4471" in shown(their_call, stranger)


def test_no_owner_or_nothing_deleted_reads_nothing(django_assert_num_queries) -> None:
    with django_assert_num_queries(0):
        assert redact_recorded_copies(using="default", owner_ids=[], conversation_ids=[1]) == 0
        assert redact_recorded_copies(using="default", owner_ids=[1]) == 0
