"""A LangChain chat message history stored as an agentmemory conversation
(``pip install "django-agentmemory[langchain]"``).

``DjangoChatMessageHistory`` is a ``langchain_core.chat_history.BaseChatMessageHistory``
over ``agentmemory.history.PersistentChatHistory``: LangChain code that takes a history
(``RunnableWithMessageHistory``, your own chains) keeps its messages in your database, where
the admin, the API, search and compaction see them like any other conversation::

    from langchain_core.runnables.history import RunnableWithMessageHistory
    from agentmemory.contrib.langchain import DjangoChatMessageHistory

    chain_with_history = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: DjangoChatMessageHistory.for_session(session_id, owner=user),
        input_messages_key="question",
        history_messages_key="history",
    )

It answers like LangChain's own ``InMemoryChatMessageHistory`` for the same calls
(``messages``, ``add_message``, ``add_messages``, ``add_user_message``, ``add_ai_message``,
``clear`` and the ``a...`` methods): each LangChain message is one stored message, converted by
``agentmemory.formats.langchain`` (tool calls, tool results and content blocks included),
and comes back equal to what was added. What the columns do not give back exactly (message
ids, ``additional_kwargs``, ``response_metadata``, ``usage_metadata``, provider content
blocks, a chunk's class) is kept whole in the message's ``metadata["langchain_message"]``
(LangChain's own ``message_to_dict`` form, as its SQL histories store it).

Differences from the in-memory history, all deliberate:

- A ``ToolMessage`` answering no earlier ``AIMessage`` tool call still awaiting its result
  is refused (``InvalidMessageError``; providers reject such a history), unless the history
  is made with ``validate_tool_pairs=False`` (importing legacy history): it is then stored as
  an orphan that context windows never send.
- Text storage refuses (NUL characters, content over ``MAX_MESSAGE_CHARS``) is refused with
  nothing stored; so are message types agentmemory has no role for (``FunctionMessage``,
  ``RemoveMessage``, a ``ChatMessage`` with a role other than system, developer, user or
  assistant).

``window_tokens=N`` makes ``messages`` return the context window ``ContextWindowBuilder``
builds for at most N tokens (pinned system prompt, summary as a ``SystemMessage``, the
newest history that fits with tool calls whole) instead of every message: off by default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from uuid import UUID

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "agentmemory.contrib.langchain needs the 'langchain-core' package; install it with: "
        "pip install 'django-agentmemory[langchain]'"
    ) from exc

from asgiref.sync import sync_to_async
from django.db import connections, router

from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib import sessions
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.formats.langchain import from_langchain_message, to_langchain_message
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter

__all__ = ["MESSAGE_KEY", "DjangoChatMessageHistory", "message_from_langchain", "message_to_langchain"]

#: metadata key of the LangChain message (``message_to_dict``) kept beside a stored message
MESSAGE_KEY = "langchain_message"
#: metadata key of the session id on conversations made by ``for_session``
SESSION_KEY = "langchain_session_id"
#: the framework's name in the uuids of ``for_session`` conversations
FRAMEWORK = "langchain"

_TEXT_ONLY_ROLES = {"human": Role.HUMAN, "system": Role.SYSTEM, "tool": Role.TOOL}


@contextmanager
def _closing_new_connections() -> Iterator[None]:
    """Close the database connections the block opened, once it is done.

    LangChain runs the steps of a sync chain in a thread pool made for each call
    (``RunnableParallel``, which ``RunnableWithMessageHistory`` uses to read the history):
    a connection Django opened in such a thread would stay open until the thread object
    is collected, one per call. A thread that had a connection before (a request's, a
    worker's) keeps it."""
    opened = {conn.alias for conn in connections.all(initialized_only=True) if conn.connection is not None}
    try:
        yield
    finally:
        for conn in connections.all(initialized_only=True):
            if conn.alias not in opened and conn.connection is not None and not conn.in_atomic_block:
                conn.close()


def _as_dict(message: BaseMessage) -> dict[str, Any]:
    """``message_to_dict(message)`` as stored JSON (what the history gives back).

    Raises:
        InvalidMessageError: a value JSON cannot hold (bytes, an object of a custom class).
    """
    try:
        return dict(json.loads(json.dumps(message_to_dict(message))))
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(f"{type(message).__name__} holds a value that is not JSON: {exc}") from exc


def _text_only(message: BaseMessage) -> ChatMessage:
    """A human, system or tool message whose content blocks the converters have no part for
    (a provider's own block type): its text blocks, and the other blocks' types in brackets."""
    blocks = message.content if isinstance(message.content, list) else [message.content]
    texts = []
    for block in blocks:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            texts.append(f"[{block.get('type') if isinstance(block, dict) else type(block).__name__}]")
    role = _TEXT_ONLY_ROLES[message.type]
    tool_call_id = getattr(message, "tool_call_id", "") if role is Role.TOOL else ""
    return ChatMessage(
        role=role,
        content="\n".join(texts),
        tool_call_id=tool_call_id or "",
        name=getattr(message, "name", None) or "",
    )


def message_from_langchain(message: BaseMessage) -> ChatMessage:
    """One LangChain message as the ``ChatMessage`` ``DjangoChatMessageHistory`` stores:
    ``agentmemory.formats.langchain.from_langchain_message``, plus the message itself in
    ``metadata["langchain_message"]`` when the columns do not give it back exactly.

    Raises:
        InvalidMessageError: a message type agentmemory has no role for, an ``AIMessage``
            with ``invalid_tool_calls`` or tool calls without ids, a value that is not JSON.
    """
    stored = _as_dict(message)
    try:
        chat = from_langchain_message(message)
    except InvalidMessageError:
        if message.type not in _TEXT_ONLY_ROLES or not isinstance(message.content, list):
            raise
        chat = _text_only(message)
    if _as_dict(to_langchain_message(chat)) != stored:
        chat = replace(chat, metadata={**chat.metadata, MESSAGE_KEY: stored})
    return chat


def message_to_langchain(message: ChatMessage) -> BaseMessage:
    """The LangChain message of a stored message: the one kept in its metadata, else
    ``agentmemory.formats.langchain.to_langchain_message``. A truncated copy from a context
    window is sent as its shortened text."""
    stored = message.metadata.get(MESSAGE_KEY) if message.metadata else None
    if isinstance(stored, dict) and not message.truncated:
        return messages_from_dict([stored])[0]
    return to_langchain_message(message)


class DjangoChatMessageHistory(BaseChatMessageHistory):
    """A LangChain ``BaseChatMessageHistory`` stored as one agentmemory conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid (see
            ``for_session`` to name one by a session id).
        token_counter: counts each message at write time (``PersistentChatHistory``).
        validate_tool_pairs: refuse a ``ToolMessage`` that answers no call awaiting its
            result (default); ``False`` stores it as an orphan, for importing history.
        window_tokens: when set, ``messages`` is the context window of at most this many
            tokens (see the module); ``None`` (default): every message.

    Reads and writes go through ``PersistentChatHistory``: appends are atomic and ordered,
    the ``a...`` methods run the database work in a worker thread (never on the event loop).

    Raises:
        ConversationNotFound: a conversation (uuid) that does not exist.
    """

    def __init__(
        self,
        conversation: Conversation | int | str | UUID | None = None,
        *,
        token_counter: TokenCounter | None = None,
        validate_tool_pairs: bool = True,
        window_tokens: int | None = None,
        _session: tuple[UUID, str, Any, str] | None = None,
    ) -> None:
        if conversation is None and _session is None:
            raise TypeError("DjangoChatMessageHistory needs a conversation (or use for_session())")
        self._conversation = conversation
        self._session = _session
        self._token_counter = token_counter
        self.validate_tool_pairs = validate_tool_pairs
        self.window_tokens = window_tokens
        self._history: PersistentChatHistory | None = None
        if conversation is not None:
            self._history = self._make_history(conversation)

    @classmethod
    def for_session(
        cls, session_id: str, *, owner: Any = None, agent_key: str = "", **kwargs: Any
    ) -> DjangoChatMessageHistory:
        """The history of LangChain session ``session_id`` of ``owner`` (a user or its
        primary key, or ``None``) for ``agent_key``: a conversation made by the first write,
        whose uuid is derived from the three (``agentmemory.contrib.sessions.session_uuid``),
        so another owner's session of the same id is another conversation. Makes no query,
        so it may be called in an event loop's thread (``RunnableWithMessageHistory`` calls
        its factory there for ``ainvoke``). ``kwargs`` as for the class.

        Raises:
            TypeError, ValueError: a ``session_id`` that is not text, an ``agent_key`` the
                conversation cannot hold (``agentmemory.contrib.sessions.check_session``).
            MemoryScopeError: (by the first write, not here) ``owner`` is a primary key that
                names no user; nothing is stored.
        """
        sessions.check_session(session_id, agent_key)
        owner_id = sessions.session_owner_id(owner)
        uuid = sessions.session_uuid(FRAMEWORK, session_id, owner_id=owner_id, agent_key=agent_key)
        return cls(_session=(uuid, session_id, owner_id, agent_key), **kwargs)

    def _make_history(self, conversation: Conversation | int | str | UUID) -> PersistentChatHistory:
        return PersistentChatHistory(
            conversation, token_counter=self._token_counter, validate_tool_pairs=self.validate_tool_pairs
        )

    def _existing(self) -> PersistentChatHistory | None:
        if self._history is None and self._session is not None:
            pk = sessions.find_session_conversation(self._session[0])
            if pk is not None:
                self._history = self._make_history(pk)
        return self._history

    def _writable(self) -> PersistentChatHistory:
        history = self._existing()
        if history is None:
            assert self._session is not None
            uuid, session_id, owner_id, agent_key = self._session
            pk = sessions.get_or_create_session_conversation(
                uuid, session_id=session_id, metadata_key=SESSION_KEY, owner_id=owner_id, agent_key=agent_key
            )
            history = self._history = self._make_history(pk)
        return history

    @property
    def conversation_id(self) -> int | None:
        """Primary key of the conversation (``None`` for a session not written yet)."""
        history = self._existing()
        return None if history is None else history.conversation_id

    # -- BaseChatMessageHistory ---------------------------------------------------------

    # The base class declares an attribute; LangChain's own stores read it as a property.
    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The stored messages as LangChain messages, oldest first (O(history); with
        ``window_tokens``, the context window)."""
        with _closing_new_connections():
            return self._read()

    def _read(self) -> list[BaseMessage]:
        history = self._existing()
        if history is None:
            return []
        if self.window_tokens is not None:
            return self._window(history)
        return [message_to_langchain(m) for m in history.get_messages()]

    def _window(self, history: PersistentChatHistory) -> list[BaseMessage]:
        try:
            builder = ContextWindowBuilder(chat_history=history, pending_tool_calls="omit")
            window = builder.build(self.window_tokens)
        except ConversationNotFound:
            return []
        seqs = [m.seq for m in window.messages if m.seq is not None]
        # A window's messages carry no metadata (but thinking blocks); the converters read
        # the LangChain copy and a tool result's error flag from it.
        stored = dict(
            Message.objects.using(router.db_for_read(Message))
            .filter(conversation_id=history.conversation_id, seq__in=seqs)
            .exclude(metadata={})
            .values_list("seq", "metadata")
        )
        out = []
        for message in window.messages:
            if message.seq in stored:
                message = replace(message, metadata=stored[message.seq])
            out.append(message_to_langchain(message))
        return out

    def add_message(self, message: BaseMessage) -> None:
        """Append one message (see ``add_messages``)."""
        self.add_messages([message])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append messages atomically, in order.

        Raises:
            InvalidMessageError: a message cannot be stored (see the module); nothing of the
                batch is stored.
            TypeError: an object that is not a LangChain message.
        """
        batch = self._convert(messages)
        if batch:
            with _closing_new_connections():
                self._writable().add_messages(batch)

    @staticmethod
    def _convert(messages: Sequence[BaseMessage]) -> list[ChatMessage]:
        batch = []
        for index, message in enumerate(messages):
            if not isinstance(message, BaseMessage):
                raise TypeError(f"message {index} is a {type(message).__name__}, not a LangChain message")
            try:
                batch.append(message_from_langchain(message))
            except InvalidMessageError as exc:
                raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
        return batch

    def clear(self) -> None:
        """Delete every message and summary of the conversation (``PersistentChatHistory.clear``)."""
        with _closing_new_connections():
            self._clear()

    def _clear(self) -> None:
        history = self._existing()
        if history is not None:
            history.clear()

    # The a... methods run in asgiref's worker thread, whose connection is reused.

    async def aget_messages(self) -> list[BaseMessage]:
        return await sync_to_async(self._read)()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        batch = self._convert(messages)
        if batch:
            await sync_to_async(lambda: self._writable().add_messages(batch))()

    async def aclear(self) -> None:
        await sync_to_async(self._clear)()
