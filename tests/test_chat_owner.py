"""``manage.py chat --owner``: a terminal conversation that belongs to a user, so that the
memory features (the ``remember`` and ``recall`` tools, the knowledge block, the memory
block) work there as they do for an agent run with ``start_conversation(owner=user)``."""

from __future__ import annotations

import io
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from agentmemory.agents import BaseToolCallingAgent, registry
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Fact

pytestmark = pytest.mark.django_db


class RememberingAgent(BaseToolCallingAgent, register=False):
    NAME = "Rememberer"
    AGENT_KEY = "remember-test"
    SYSTEM_PROMPT = "You are a helpful assistant."
    KNOWLEDGE_MEMORY_ENABLED = True


@pytest.fixture
def agent_key():  # type: ignore[no-untyped-def]
    registry.register(RememberingAgent)
    yield RememberingAgent.AGENT_KEY
    registry.unregister(RememberingAgent.AGENT_KEY)


def chat(monkeypatch: pytest.MonkeyPatch, llm: ScriptedChatModel, lines: str, *args: str) -> str:
    monkeypatch.setattr("agentmemory.management.commands.chat.resolve_llm", lambda spec: llm)
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    out = io.StringIO()
    call_command("chat", RememberingAgent.AGENT_KEY, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def remember(content: str) -> ChatMessage:
    return ChatMessage.ai(None, [ToolCall("call_1", "remember", {"content": content, "persistent": True})])


def test_a_fact_remembered_in_one_terminal_conversation_is_known_in_the_next(monkeypatch, agent_key):  # type: ignore[no-untyped-def]
    first = ScriptedChatModel([remember("Prefers email over phone"), "Noted."])
    out = chat(monkeypatch, first, "I prefer email.\n", "--owner", "alice")

    alice = get_user_model().objects.get(username="alice")
    assert not alice.has_usable_password()  # created as replay_conversations --owner creates it
    assert "Created user 'alice' to own the conversation" in out
    assert "[tool] remember(" in out and "Remembered" in out and "Long-term memory is only" not in out
    assert Fact.objects.get().owner == alice
    conversation = Conversation.objects.get()
    assert conversation.owner == alice
    assert "owned by alice" in out
    assert f"--conversation {conversation.uuid}" in out

    # a second conversation of the same user: the fact is in its system prompt
    seen: list[str] = []

    def answer(messages: list[ChatMessage]) -> str:
        seen.append(messages[0].content or "")
        return "By email."

    out = chat(monkeypatch, ScriptedChatModel([answer]), "How should you contact me?\n", "--owner", "alice")
    assert "Created user" not in out  # an existing user is reused, silently
    assert Conversation.objects.filter(owner=alice).count() == 2
    assert "Prefers email over phone" in seen[0]


def test_continuing_a_conversation_keeps_its_owner_and_refuses_another(monkeypatch, agent_key):  # type: ignore[no-untyped-def]
    users = get_user_model().objects
    alice, bob = users.create_user("alice"), users.create_user("bob")
    conversation = Conversation.objects.create(owner=alice, agent_key=agent_key)

    # without --owner: the conversation's own owner, whose memory the tools use
    out = chat(
        monkeypatch,
        ScriptedChatModel([remember("Lives in Oslo"), "Noted."]),
        "I live in Oslo.\n",
        "--conversation",
        str(conversation.uuid),
    )
    assert "owned by alice" in out
    assert Fact.objects.get().owner == alice

    with pytest.raises(CommandError, match="belongs to alice, not bob"):
        chat(
            monkeypatch,
            ScriptedChatModel(["never sent"]),
            "hello\n",
            "--conversation",
            str(conversation.uuid),
            "--owner",
            "bob",
        )
    ownerless = Conversation.objects.create(agent_key=agent_key)
    with pytest.raises(CommandError, match="belongs to no user, not bob"):
        chat(
            monkeypatch,
            ScriptedChatModel(["never sent"]),
            "hello\n",
            "--conversation",
            str(ownerless.uuid),
            "--owner",
            "bob",
        )
    assert conversation.messages.count() == 4 and not ownerless.messages.exists()
    assert not Conversation.objects.filter(owner=bob).exists()


def test_without_an_owner_the_command_says_memory_needs_one(monkeypatch, agent_key):  # type: ignore[no-untyped-def]
    out = chat(monkeypatch, ScriptedChatModel(["Hello."]), "hi\n")
    assert "no owner" in out and "--owner" in out
    assert Conversation.objects.get().owner is None


def test_an_owner_name_the_user_model_refuses_is_a_command_error(monkeypatch, agent_key):  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="--owner"):
        chat(monkeypatch, ScriptedChatModel(["never sent"]), "hi\n", "--owner", "not a valid name!")
    assert not Conversation.objects.exists()
