"""Long-term memory for agents: the ``remember`` and ``recall`` tools, registered on agents
that set ``KNOWLEDGE_MEMORY_ENABLED = True``, the knowledge block in their system prompt, and
``search_conversations`` (search over the user's past conversations) to add to ``TOOLS``.

The memory belongs to the conversation's owner: a conversation without an owner has none
(the tools answer with an error the model can read; the system prompt gets no block). The
scope's agent key and namespace come from the agent class attributes
``KNOWLEDGE_MEMORY_AGENT_KEY`` and ``KNOWLEDGE_MEMORY_NAMESPACE`` (default None: the user's
facts are shared by all agents that use the default scope).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import router

from agentmemory.agents.tools import Tool, ToolContext, ToolError, tool
from agentmemory.knowledge import knowledge_memory_for

if TYPE_CHECKING:
    from agentmemory.agents.injector import AgentInjector
    from agentmemory.knowledge import KnowledgeMemory

__all__ = [
    "knowledge_memory_for",
    "memory_tools_for",
    "recall",
    "remember",
    "search_conversations",
    "with_knowledge",
]


def _memory(context: ToolContext) -> KnowledgeMemory:
    memory = knowledge_memory_for(context.agent, context.conversation)
    if memory is None:
        raise ToolError("Long-term memory is only available in a conversation that belongs to a user.")
    return memory


@tool(name="remember", description="Save important information to long-term memory for future reference")
def remember(content: str, context: ToolContext, category: str = "general", persistent: bool = False) -> str:
    """Remember a fact or piece of information.

    Args:
        content: The information to remember.
        category: Category for organization (e.g., "preferences", "personal", "technical").
        persistent: Whether this should be stored permanently.
    """
    from agentmemory.knowledge import InvalidFactError

    memory = _memory(context)
    try:
        return memory.remember(content, category, persistent, source_message=_turn_message(context))
    except InvalidFactError as exc:
        raise ToolError(str(exc)) from exc


def _turn_message(context: ToolContext) -> int | None:
    """The id of the human message the model is answering (the newest of the conversation):
    where a fact the model remembers comes from, shown as its source in the admin and the
    API. ``None`` when the conversation holds none."""
    from agentmemory.messages import Role
    from agentmemory.models import Message

    return (
        Message.objects.using(router.db_for_read(Message))
        .filter(conversation_id=context.conversation.pk, role=Role.HUMAN.value)
        .order_by("-seq")
        .values_list("pk", flat=True)
        .first()
    )


@tool(name="recall", description="Search long-term memory for facts relevant to a query")
def recall(query: str, context: ToolContext, k: int = 5) -> str:
    """Find remembered facts about the user that are relevant to a query.

    Args:
        query: What to look for, in plain words.
        k: How many facts to return (1 to 20).
    """
    if not 1 <= k <= 20:
        raise ToolError("k must be from 1 to 20")
    hits = _memory(context).recall(query, k=k)
    if not hits:
        return "No matching memories."
    return "\n".join(f"{i}. ({h.fact.category}) {h.fact.content}" for i, h in enumerate(hits, start=1))


@tool(name="search_conversations", description="Search the user's past conversations")
def search_conversations(query: str, context: ToolContext, k: int = 5) -> str:
    """Find messages of the user's earlier conversations (also parts that were summarised).

    Args:
        query: What to look for, in plain words.
        k: How many messages to return (1 to 20).
    """
    from agentmemory.recall import search_messages

    if not 1 <= k <= 20:
        raise ToolError("k must be from 1 to 20")
    conversation = context.conversation
    if conversation is None or conversation.owner_id is None:
        raise ToolError("Conversation search is only available in a conversation that belongs to a user.")
    hits = search_messages(query, owner=conversation.owner_id, k=k)
    if not hits:
        return "No matching messages."
    return "\n".join(
        f"{i}. [{h.created_at:%Y-%m-%d %H:%M}] ({h.role}, conversation {h.conversation_uuid}, "
        f"#{h.seq}) {h.content}"
        for i, h in enumerate(hits, start=1)
    )


def memory_tools_for(agent_cls: type, taken: set[str]) -> list[Tool]:
    """The tools an agent class gets automatically: ``remember`` and ``recall`` when it sets
    ``KNOWLEDGE_MEMORY_ENABLED = True`` (a tool of its own with the same name wins)."""
    if not getattr(agent_cls, "KNOWLEDGE_MEMORY_ENABLED", False):
        return []
    return [t for t in (remember, recall) if t.name not in taken]


def with_knowledge(agent: Any, injector: AgentInjector, prompt: str) -> str:
    """``prompt`` followed by the owner's ``build_context()`` block when the agent enables
    knowledge memory; the builder counts the whole system prompt in the window's budget."""
    if not getattr(type(agent), "KNOWLEDGE_MEMORY_ENABLED", False):
        return prompt
    memory = knowledge_memory_for(agent, injector.conversation)
    block, fact_ids = memory.build_context_with_ids() if memory is not None else ("", ())
    injector.knowledge_context = block  # the call records split the system tokens by it
    injector.knowledge_fact_ids = fact_ids  # the memory block does not repeat them
    return f"{prompt}\n\n{block}" if block else prompt
