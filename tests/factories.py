"""factory_boy factories and small builders of realistic histories for the tests."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    agent_key = "test-agent"
    title = factory.Sequence(lambda n: f"Conversation {n}")


def turn(i: int, *, tool: bool = False, words: int = 12) -> list[ChatMessage]:
    """One human turn numbered ``i``: a question, optionally a tool exchange, an answer.

    Contents are distinct per ``i`` so tests can find every message again.
    """
    filler = " ".join(f"w{i}x{k}" for k in range(words))
    messages = [ChatMessage.human(f"question {i}: {filler}")]
    if tool:
        call = ToolCall(id=f"call_{i}", name="lookup", arguments={"turn": i, "query": f"item {i}"})
        messages += [
            ChatMessage.ai(None, [call]),
            ChatMessage.tool(f"result {i}: {filler}", tool_call_id=f"call_{i}", name="lookup"),
        ]
    messages.append(ChatMessage.ai(f"answer {i}: {filler}"))
    return messages


def conversation_with_turns(
    n_turns: int,
    *,
    system_prompt: str | None = "You are a helpful agent.",
    token_counter=None,  # type: ignore[no-untyped-def]
    tool_every: int = 3,
    words: int = 12,
    batch_size: int = 2_000,
) -> tuple[Conversation, PersistentChatHistory]:
    """A conversation holding ``n_turns`` turns (every ``tool_every``-th with a tool
    exchange), appended in batches of about ``batch_size`` messages."""
    conv = ConversationFactory()
    history = PersistentChatHistory(conv, token_counter=token_counter)
    batch: list[ChatMessage] = [ChatMessage.system(system_prompt)] if system_prompt is not None else []
    for i in range(n_turns):
        batch += turn(i, tool=bool(tool_every) and i % tool_every == tool_every - 1, words=words)
        if len(batch) >= batch_size:
            history.add_messages(batch)
            batch = []
    if batch:
        history.add_messages(batch)
    conv.refresh_from_db()
    return conv, history
