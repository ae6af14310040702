"""The memory block never repeats what the request already sends (design R3): a fact whose
source message is in the window is left out of the block, as the message says it. The
``remember`` tool keeps a fact with the turn's own question as its source, and the second
model call of that turn was sent the question and, in the block, the fact made of it."""

from __future__ import annotations

import pytest

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.context import ContextWindowBuilder
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class Keeping(BaseToolCallingAgent, register=False):
    AGENT_KEY = "keeping-test"
    SYSTEM_PROMPT = "You keep what the user tells you."
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True


def block_of(messages):  # type: ignore[no-untyped-def]
    found = [m for m in messages if MEMORY_BLOCK_KEY in (m.metadata or {})]
    return found[0].text if found else ""


def test_the_fact_remembered_from_the_turn_is_not_in_its_next_call() -> None:
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key=Keeping.AGENT_KEY)
    call = ToolCall(id="c1", name="remember", arguments={"content": "Gym locker code: 4417"})
    llm = ScriptedChatModel([ChatMessage.ai("", tool_calls=[call]), "Noted: 4417."])
    Keeping(llm).run(conv, "My gym locker code is 4417, keep it for me.")
    assert KnowledgeMemory(user).live_facts().get().content == "Gym locker code: 4417"
    second = llm.calls[1][0]
    assert any("My gym locker code is 4417" in m.text for m in second)
    assert "Gym locker code: 4417" not in block_of(second)


def test_a_fact_of_a_message_outside_the_window_is_still_recalled() -> None:
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("My gym locker code is 4417."), ChatMessage.ai("Noted.")]
    )
    source = Message.objects.filter(conversation=conv).order_by("seq").first()
    KnowledgeMemory(user).store("Gym locker code: 4417", source_message=source)
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert "My gym locker code is 4417." in [m.text for m in window.history]
    assert window.memory is None or "Gym locker code: 4417" not in window.memory.text

    later = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(later).add_messages([ChatMessage.human("What is my gym locker code?")])
    block = ContextWindowBuilder(later, memory_recall=True).build(2_000).memory
    assert block is not None and "4417" in block.text


def test_a_fact_of_a_message_the_window_sends_cut_is_still_recalled() -> None:
    """The newest human message, too long for the window, is sent as a truncated copy
    (``oversized_message_policy="truncate"``): the fact kept from its end is not in what the
    window sends, and was left out of the block as if it were."""
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="a")
    text = "My packing list: " + "socks and shirts. " * 3_000 + "My gym locker code is 4417."
    PersistentChatHistory(conv).add_messages([ChatMessage.human(text)])
    source = Message.objects.get(conversation=conv)
    KnowledgeMemory(user).store("Gym locker code: 4417", source_message=source)
    window = ContextWindowBuilder(
        conv, memory_recall=True, oversized_message_policy="truncate", memory_query="gym locker code"
    ).build(2_000)
    assert window.truncated and "4417" not in window.history[-1].text
    assert window.memory is not None and "Gym locker code: 4417" in window.memory.text
