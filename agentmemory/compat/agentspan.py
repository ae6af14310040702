"""agentspan's memories (seed 003): ``ConversationMemory`` backed by a stored conversation,
``SemanticMemory`` over our semantic memory, and (from ``agentmemory.compat.agentspan_agent``)
``Agent``, ``AgentRuntime`` and ``AgentResult``, run in process through our LLM adapters; and
``tool``, our ``agentmemory.agents.tool`` (agentspan's decorator spelling, giving our ``Tool``).

    from agentmemory.compat.agentspan import Agent, AgentRuntime, ConversationMemory, tool
    from agentmemory.compat.agentspan import SemanticMemory
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from agentmemory.agents.tools import tool
from agentmemory.compat.agentspan_agent import Agent, AgentResult, AgentRuntime, SemanticMemory, TokenUsage
from agentmemory.compat.agentspan_messages import as_dict as _as_dict
from agentmemory.compat.agentspan_messages import from_dict as _from_dict
from agentmemory.compat.store import StoredConversation
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation
from agentmemory.semantic import MemoryEntry, MemoryStore
from agentmemory.validation import whole_number

__all__ = [
    "Agent",
    "AgentResult",
    "AgentRuntime",
    "ConversationMemory",
    "MemoryEntry",
    "MemoryStore",
    "SemanticMemory",
    "TokenUsage",
    "tool",
]


class ConversationMemory:
    """agentspan's chat history: messages kept for an agent session, trimmed to
    ``max_messages``.

    Args:
        messages: messages to start with (agentspan's dicts), stored on creation.
        max_messages: when set and exceeded, the oldest non-system messages are left out
            first and system messages keep their places: at most ``max_messages -
            system_count`` non-system messages (the newest) are kept; when the system
            messages alone reach ``max_messages``, only the newest ``max_messages`` of them.
        conversation: an existing conversation to keep the messages in; by default one is
            created on the first add.
        owner: the user a created conversation belongs to.

    Raises:
        TypeError: ``max_messages`` is not a whole number.
        ValueError: ``max_messages`` below 0 (0, like ``None``, keeps every message, as the
            seed's falsy check does).
        ConversationNotFound: ``conversation`` names none.
        InvalidMessageError: one of ``messages`` cannot be stored; nothing is stored.

    A refused add (``InvalidMessageError``) stores nothing, and a first add that is refused
    creates no conversation.

    The trim is the seed's, on what ``messages`` returns: every message stays stored.
    Like the seed's, it does not keep tool calls with their results (our
    ``ContextWindowBuilder`` does). ``clear()`` deletes the stored messages.
    """

    def __init__(
        self,
        messages: Iterable[Mapping[str, Any]] | None = None,
        max_messages: int | None = None,
        *,
        conversation: Conversation | int | str | UUID | None = None,
        owner: Any = None,
    ) -> None:
        self.max_messages = (
            None if max_messages is None else whole_number(max_messages, "max_messages", minimum=0)
        )
        self._store = StoredConversation(conversation, owner=owner, metadata={"compat": "agentspan"})
        initial = [_from_dict(m) for m in messages or ()]
        if initial:
            self._store.append(initial)

    @property
    def conversation(self) -> Conversation:
        """The stored conversation (created now if nothing was added yet)."""
        return self._store.conversation

    def _add(self, message: ChatMessage) -> None:
        self._store.append([message])

    def add_user_message(self, content: str) -> None:
        """Append a user message to the conversation."""
        self._add(ChatMessage.human(content))

    def add_assistant_message(self, content: str) -> None:
        """Append an assistant message to the conversation."""
        self._add(ChatMessage.ai(content))

    def add_system_message(self, content: str) -> None:
        """Append a system message to the conversation."""
        self._add(ChatMessage.system(content))

    def add_tool_call(
        self, tool_name: str, arguments: Mapping[str, Any], task_reference_name: str | None = None
    ) -> None:
        """Record a tool call; its id is ``task_reference_name`` (default
        ``"<tool_name>_ref"``, as in agentspan)."""
        if not isinstance(arguments, Mapping):
            raise TypeError(f"arguments must be a mapping of names to values, not {type(arguments).__name__}")
        ref = task_reference_name or f"{tool_name}_ref"
        self._add(
            ChatMessage.ai(None, tool_calls=[{"id": ref, "name": tool_name, "arguments": dict(arguments)}])
        )

    def add_tool_result(self, tool_name: str, result: Any, task_reference_name: str | None = None) -> None:
        """Record a tool result (``str(result)``) answering the call ``task_reference_name``."""
        ref = task_reference_name or f"{tool_name}_ref"
        self._add(ChatMessage.tool(str(result), tool_call_id=ref, name=tool_name))

    def _kept(self) -> list[ChatMessage]:
        if not self._store.exists:
            return []
        limit = self.max_messages
        if not limit:
            return self._store.newest()
        system = self._store.newest(roles=[Role.SYSTEM])
        if len(system) >= limit:
            return system[-limit:]
        # Every system message stays, in its place; the newest others fill the rest.
        others = self._store.newest(limit - len(system), roles=[Role.SYSTEM], exclude=True)
        return sorted(system + others, key=lambda m: m.seq or 0)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The kept messages, oldest first, as agentspan's dicts (a new list)."""
        return [_as_dict(m) for m in self._kept()]

    def to_chat_messages(self) -> list[dict[str, Any]]:
        """The kept messages as agentspan's dicts (a deep copy, as in agentspan)."""
        return copy.deepcopy(self.messages)

    def clear(self) -> None:
        """Delete every stored message of the conversation."""
        self._store.clear()

    def __len__(self) -> int:
        return len(self._kept())
