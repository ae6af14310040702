"""selectools' ``ConversationMemory`` (seed 000), backed by a stored conversation, and (from
``agentmemory.compat.selectools_agent``, seed 001) its ``KnowledgeMemory``, ``Agent``,
``AgentConfig``, ``AgentResult``, ``OpenAIProvider``, ``LocalProvider``; and ``tool``, our
``agentmemory.agents.tool`` (selectools' decorator spelling, giving our ``Tool``).

    from agentmemory.compat.selectools import ConversationMemory, Message, Role

The sliding window, the token limit and the tool-pair-aware trim are the seed's, applied to
what the memory returns: every message stays stored (``PersistentChatHistory``), and the
window is worked out from the newest stored rows on each read. ``clear()`` deletes the
stored messages, as the seed's ``clear`` forgets them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from django.db import router, transaction

from agentmemory.agents.tools import tool
from agentmemory.compat.selectools_agent import (
    Agent,
    AgentConfig,
    AgentResult,
    KnowledgeMemory,
    LocalProvider,
    OpenAIProvider,
)
from agentmemory.compat.store import StoredConversation
from agentmemory.compat.types import Message, Role, ToolCall, from_chat_message, to_chat_message
from agentmemory.conf import app_settings
from agentmemory.exceptions import InvalidMessageError
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.validation import text_problem, whole_number

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentResult",
    "ConversationMemory",
    "KnowledgeMemory",
    "LocalProvider",
    "Message",
    "OpenAIProvider",
    "Role",
    "ToolCall",
    "estimate_tokens",
    "tool",
]


def estimate_tokens(text: str | None) -> int:
    """selectools' estimate for the ``max_tokens`` limit: a quarter of the characters,
    rounded down (``len(content) // 4``, the estimate its ``_enforce_limits`` falls back on).
    Our stored ``token_count`` is not used, so the trim is the seed's to the message."""
    return len(text or "") // 4


def fix_tool_pair_boundary(messages: list[Message]) -> list[Message]:
    """The seed's ``_fix_tool_pair_boundary``: drop leading tool results and leading
    assistant messages that make tool calls, keeping at least one message (a request must
    not start with a result whose call was cut off; OpenAI and Anthropic refuse it)."""
    start = 0
    while len(messages) - start > 1:
        first = messages[start]
        if first.role == Role.TOOL or (first.role == Role.ASSISTANT and first.tool_calls):
            start += 1
            continue
        break
    return messages[start:]


class ConversationMemory:
    """selectools' conversation memory: a sliding window of at most ``max_messages``
    messages (and ``max_tokens`` estimated tokens), trimmed so it never starts on a tool
    result or a tool-calling assistant message.

    Args:
        max_messages: at most this many messages are returned (default 20).
        max_tokens: when set, the oldest messages are left out while the window's
            ``estimate_tokens`` total exceeds it (one message is always kept).
        conversation: an existing ``Conversation`` (or its key or uuid) to keep the messages
            in; by default one is created on the first ``add``.
        owner: the user a created conversation belongs to.

    Raises:
        ValueError: ``max_messages`` or ``max_tokens`` below 1 (the seed's checks).
        ConversationNotFound: ``conversation`` names none.
        MemoryScopeError: (on the first write) ``owner`` is a user id that names no user.

    ``add`` and ``add_many`` take this module's ``Message`` or our ``ChatMessage``; reads
    return ``Message`` objects (``seq`` and ``id`` set). Each add stores the messages, then
    reads the window again (``_last_trimmed`` is what the add pushed out of it); storage
    keeps everything, so a second memory attached to the same conversation sees the same
    window. ``summary`` (written by whatever summarises trimmed messages: selectools'
    agent does it when ``AgentConfig(summarize_on_trim=True)``) is kept in the
    conversation's metadata.
    """

    def __init__(
        self,
        max_messages: int = 20,
        max_tokens: int | None = None,
        *,
        conversation: Conversation | int | str | UUID | None = None,
        owner: Any = None,
    ) -> None:
        # the seed's messages for values below 1; a value that is no whole number is a TypeError
        if whole_number(max_messages, "max_messages") < 1:
            raise ValueError("max_messages must be at least 1")
        if max_tokens is not None and whole_number(max_tokens, "max_tokens") < 1:
            raise ValueError("max_tokens must be at least 1")
        self.max_messages = max_messages
        self.max_tokens = max_tokens
        self._store = StoredConversation(conversation, owner=owner, metadata={"compat": "selectools"})
        # The window never reaches seqs at or below the floor (set by ``from_dict`` when
        # restoring into a conversation that already holds messages).
        self._floor = 0
        # After ``from_dict``, the restored messages are returned as they were, whatever the
        # limits, until the next add (the seed does not re-run ``_enforce_limits`` on restore).
        self._exact = False
        self._last_trimmed: list[Message] = []
        self._summary: str | None = None
        self._summary_read = False

    @property
    def conversation(self) -> Conversation:
        """The stored conversation (created now if nothing was added yet)."""
        return self._store.conversation

    # -- the window ---------------------------------------------------------------------

    def _window(self) -> list[Message]:
        if not self._store.exists:
            return []
        if self._exact:
            return [from_chat_message(m) for m in self._store.newest(after_seq=self._floor)]
        messages = [
            from_chat_message(m) for m in self._store.newest(self.max_messages, after_seq=self._floor)
        ]
        if self.max_tokens is not None:
            total = sum(estimate_tokens(m.content) for m in messages)
            start = 0
            while len(messages) - start > 1 and total > self.max_tokens:
                total -= estimate_tokens(messages[start].content)
                start += 1
            messages = messages[start:]
        return fix_tool_pair_boundary(messages)

    # -- the seed's methods -------------------------------------------------------------

    def add(self, message: Message | ChatMessage) -> None:
        """Add a single message to history (stored at once)."""
        self.add_many([message])

    def add_many(self, messages: Iterable[Message | ChatMessage]) -> None:
        """Add several messages at once, in one stored batch; the limits apply once, after.

        Raises:
            InvalidMessageError: a message our storage cannot hold (a tool call or result
                without an id, a tool call id given twice, text with NUL bytes); nothing of
                the batch is stored.
            TypeError: an item is neither a ``Message`` nor a ``ChatMessage``.
        """
        batch = [to_chat_message(m) for m in messages]
        if not batch:
            return
        before = self._window()
        added = [from_chat_message(m) for m in self._store.append(batch)]
        self._exact = False
        after = self._window()
        first = after[0].seq if after else None
        self._last_trimmed = [m for m in before + added if first is None or (m.seq or 0) < first]

    def get_history(self) -> list[Message]:
        """The window, oldest first (a new list)."""
        return self._window()

    def get_recent(self, n: int) -> list[Message]:
        """The last ``n`` messages of the window.

        Raises:
            TypeError: ``n`` is not a whole number.
            ValueError: ``n`` below 1.
        """
        if whole_number(n, "n") < 1:
            raise ValueError("n must be at least 1")
        return self._window()[-n:]

    def clear(self) -> None:
        """Delete every stored message of the conversation (the summary stays, as in the
        seed)."""
        self._store.clear()
        self._exact = False
        self._floor = 0
        self._last_trimmed = []

    @property
    def summary(self) -> str | None:
        """The summary of trimmed messages, or ``None``; kept in the conversation's metadata."""
        if not self._summary_read:
            self._summary = self._store.state().get("summary") if self._store.exists else None
            self._summary_read = True
        return self._summary

    @summary.setter
    def summary(self, value: str | None) -> None:
        """Raises TypeError: ``value`` is not text or None. InvalidMessageError: text our
        storage cannot hold (NUL characters, lone surrogates) or longer than
        ``AGENTMEMORY["MAX_MESSAGE_CHARS"]`` (the summary is sent to the model as a message);
        nothing is stored."""
        _check_summary(value)
        self._store.update_state(summary=value)
        self._summary = value
        self._summary_read = True

    def to_dict(self) -> dict[str, Any]:
        """The seed's serialisation: ``max_messages``, ``max_tokens``, ``message_count``,
        ``messages`` (each ``Message.to_dict()``) and ``summary``."""
        messages = self._window()
        return {
            "max_messages": self.max_messages,
            "max_tokens": self.max_tokens,
            "message_count": len(messages),
            "messages": [m.to_dict() for m in messages],
            "summary": self.summary,
        }

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        conversation: Conversation | int | str | UUID | None = None,
        owner: Any = None,
    ) -> ConversationMemory:
        """A memory holding what ``to_dict`` wrote: the limits, the messages (stored in a new
        conversation, or appended to ``conversation``) and the summary. As in the seed, the
        limits are not applied to the restored messages (they apply from the next add), the
        tool-pair boundary is fixed and ``_last_trimmed`` is empty.

        Raises:
            ValueError: an invalid limit, a missing or unknown role.
            TypeError: ``data`` is not a mapping, ``messages`` is not a list of mappings, a
                tool call is malformed, or ``summary`` is neither text nor None.
            InvalidMessageError: a message our storage cannot hold, or a summary it cannot
                hold (NUL characters, lone surrogates, longer than
                ``AGENTMEMORY["MAX_MESSAGE_CHARS"]``).
            ConversationNotFound: ``conversation`` names none.
            MemoryScopeError: ``owner`` is a user id that names no user.
        Nothing is stored when any of them is raised (the messages and the summary are
        written in one transaction).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a mapping (what to_dict returns), not {type(data).__name__}")
        memory = cls(
            max_messages=data.get("max_messages", 20),
            max_tokens=data.get("max_tokens"),
            conversation=conversation,
            owner=owner,
        )
        listed = data.get("messages") or []
        if not isinstance(listed, list | tuple):
            raise TypeError(f"messages is a list of message mappings, not {type(listed).__name__}")
        messages = fix_tool_pair_boundary([Message.from_dict(m) for m in listed])
        batch = [to_chat_message(m) for m in messages]
        summary = data.get("summary")
        _check_summary(summary)
        memory._floor = memory._store.last_seq()
        with transaction.atomic(using=router.db_for_write(Conversation)):
            memory._store.append(batch)
            if summary is not None:
                memory.summary = summary
        memory._exact = True
        return memory

    def __len__(self) -> int:
        return len(self._window())

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return (
            f"ConversationMemory(max_messages={self.max_messages}, max_tokens={self.max_tokens}, "
            f"current_messages={len(self)})"
        )


def _check_summary(value: Any) -> None:
    """Raises TypeError: ``value`` is neither text nor None. InvalidMessageError: text no
    database stores (``text_problem``: NUL characters, lone surrogates), or longer than
    ``AGENTMEMORY["MAX_MESSAGE_CHARS"]`` (a summary is sent to the model as a message)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"summary must be text or None, not {type(value).__name__}")
    problem = text_problem(value)
    if problem:
        raise InvalidMessageError(f"summary {problem}")
    most = app_settings().MAX_MESSAGE_CHARS
    if len(value) > most:
        raise InvalidMessageError(
            f"summary holds {len(value)} characters, more than AGENTMEMORY['MAX_MESSAGE_CHARS'] ({most})"
        )
