"""Agents with long-term memory: the auto-registered ``remember`` and ``recall`` tools, the
knowledge block in the system prompt, and ``search_conversations``."""

from __future__ import annotations

import pytest

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.agents.memory_tools import search_conversations
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Fact
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class MemoryAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "memory-test"
    SYSTEM_PROMPT = "You are a helpful assistant."
    KNOWLEDGE_MEMORY_ENABLED = True
    TOOLS = [search_conversations]


class PlainAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "plain-test"


def _remember_call(content: str) -> ChatMessage:
    call = ToolCall(
        id="call_1",
        name="remember",
        arguments={"content": content, "category": "preferences", "persistent": True},
    )
    return ChatMessage.ai(None, [call])


def test_tools_are_registered_only_when_enabled() -> None:
    llm = ScriptedChatModel()
    assert set(MemoryAgent(llm).tools) == {"search_conversations", "remember", "recall"}
    assert "remember" not in PlainAgent(llm).tools


def test_preference_remembered_in_one_conversation_is_used_in_another_after_a_restart() -> None:
    user = UserFactory(username="alice")
    first_llm = ScriptedChatModel([_remember_call("User prefers dark mode"), "I'll remember that."])
    agent = MemoryAgent(first_llm)
    result = agent.run(agent.start_conversation(owner=user), "Remember that I prefer dark mode.")
    assert result.answer == "I'll remember that."
    tool_result = first_llm.calls[1][0][-1]
    assert tool_result.role is Role.TOOL and tool_result.content.startswith(
        "Remembered (preferences, persistent)"
    )
    assert Fact.objects.get().content == "User prefers dark mode"

    # a new agent object and a new conversation: only the database carries the fact over
    seen: list[str] = []

    def answer(messages: list[ChatMessage]) -> str:
        seen.append(messages[0].content or "")
        return "You prefer dark mode."

    second_llm = ScriptedChatModel([answer])
    again = MemoryAgent(second_llm)
    result = again.run(again.start_conversation(owner=user), "Which theme do I like?")
    assert result.answer == "You prefer dark mode."
    assert seen[0] == (
        "You are a helpful assistant.\n\n[Long-term Memory]\n## preferences\n- User prefers dark mode"
    )
    # another user's agent never sees it
    other_llm = ScriptedChatModel([answer])
    other = MemoryAgent(other_llm)
    other.run(other.start_conversation(owner=UserFactory(username="alice_")), "Which theme do I like?")
    assert seen[1] == "You are a helpful assistant."


def test_a_remembered_fact_names_the_message_it_came_from() -> None:
    # The admin and the API show where a fact came from: for the agent's remember tool,
    # the human message the model was answering.
    user = UserFactory()
    llm = ScriptedChatModel(["Noted.", _remember_call("Passport number is X1234567"), "Saved."])
    agent = MemoryAgent(llm)
    conversation = agent.start_conversation(owner=user)
    agent.run(conversation, "Hello")
    agent.run(conversation, "My passport number is X1234567, please keep it.")
    fact = Fact.objects.get()
    assert fact.source_message is not None
    assert fact.source_message.conversation_id == conversation.pk
    assert fact.source_message.content == "My passport number is X1234567, please keep it."


def test_recall_and_search_conversations_tools() -> None:
    user = UserFactory()
    KnowledgeMemory(user).remember("Allergic to peanuts", "health", persistent=True)
    calls = [
        ToolCall(id="c1", name="recall", arguments={"query": "peanut allergy"}),
        ToolCall(id="c2", name="search_conversations", arguments={"query": "peanuts"}),
    ]
    llm = ScriptedChatModel([ChatMessage.ai(None, calls), "ok"])
    agent = MemoryAgent(llm)
    agent.run(agent.start_conversation(owner=user), "Do you know about peanuts?")
    results = {m.tool_call_id: m.content for m in llm.calls[1][0] if m.role is Role.TOOL}
    assert results["c1"] == "1. (health) Allergic to peanuts"
    assert "Do you know about peanuts?" in results["c2"] and "(human, conversation " in results["c2"]


def test_ownerless_conversation_gets_an_error_result_not_a_crash() -> None:
    llm = ScriptedChatModel([_remember_call("x"), "ok"])
    agent = MemoryAgent(llm)
    result = agent.run(agent.start_conversation(), "remember x")
    assert result.answer == "ok"
    tool_result = llm.calls[1][0][-1]
    assert "belongs to a user" in (tool_result.content or "")
    assert Fact.objects.count() == 0
