"""``ConversationMirror``: the messages of a LangGraph chat graph, copied into an agentmemory
conversation so that the admin, recall (search) and compaction work on them.

``DjangoSaver(mirror=ConversationMirror(owner=...))`` mirrors every thread it checkpoints:
whenever a checkpoint of the root graph (checkpoint namespace ``""``) changes the ``messages``
channel (LangGraph's ``MessagesState``), the messages of that channel not mirrored yet are
appended to the thread's conversation, in the channel's order, each once: a message is known
by its LangChain id (``add_messages`` gives every message one), kept in
``MirroredMessage``. Human, AI (with their tool calls) and tool messages are converted by
``agentmemory.formats.langchain``.

The conversation is a record, not the graph's state: a message that the graph removes or
replaces (``RemoveMessage``, a summary node) stays in the conversation, and a replacement is
appended as a new message, like the conversation's other appends (compaction never deletes
messages either). A message the conversation refuses (a tool result answering no call, a tool
call without id...) is logged, skipped, and named in ``MirroredThread.last_error``; the
checkpoint is saved all the same: a message never fails a graph step. The owner does: an
``owner`` callable that raises, or a primary key that names no user (``MemoryScopeError``),
fails the step whose checkpoint would make the thread's conversation, as any error of the
saver's configuration does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.db import IntegrityError, ProgrammingError, router, transaction
from langchain_core.messages import BaseMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig

from agentmemory.compaction import request_compaction
from agentmemory.contrib import sessions
from agentmemory.contrib.langgraph.connections import tidy
from agentmemory.contrib.langgraph.models import MirroredMessage, MirroredThread
from agentmemory.exceptions import AgentMemoryError
from agentmemory.formats.langchain import from_langchain_message
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.scope import require_user
from agentmemory.store import functions

logger = logging.getLogger("agentmemory.contrib.langgraph")

__all__ = ["ConversationMirror"]

#: ids looked up per query when finding the messages not mirrored yet
_ID_BATCH = 500

Owner = Any  # a user, a user's primary key, or None


def _add(db: str, history: PersistentChatHistory, messages: list[ChatMessage]) -> None:
    """``history.add_messages(messages)`` in a savepoint of the checkpoint's transaction, run
    again once when the one-message append's server-side function could not be used (dropped
    or ``EXECUTE`` revoked under a connection that had found it, ``agentmemory.store.functions``):
    the failed call aborted the savepoint only, and the connection sends the statement as text
    from then on, so that mirroring does not fail the graph step.

    Raises:
        AgentMemoryError: the conversation refuses a message.
    """
    try:
        with transaction.atomic(using=db):
            history.add_messages(messages)
    except ProgrammingError as exc:
        if not functions.unusable(exc):
            raise
        with transaction.atomic(using=db):
            history.add_messages(messages)


class ConversationMirror:
    """Copies a graph's messages into one agentmemory conversation per LangGraph thread.

    Args:
        owner: who owns the conversations: a user, a user's primary key, None (no owner: only
            staff see them in the API, and recall never searches them), or a callable taking
            the run's ``RunnableConfig`` and returning one of those, such as
            ``lambda config: config["configurable"]["user_id"]``. Asked once per thread, when
            its conversation is made: a primary key that names no user then raises
            ``MemoryScopeError`` from the checkpoint's ``put`` (the graph step fails).
        agent_key: the conversations' agent key (default ``"langgraph"``).
        channel: the state key holding the messages (default ``"messages"``, as in
            LangGraph's ``MessagesState``).
        compact: ask for a compaction after each append (``request_compaction``: inline or
            in Celery, when due, after the commit; never raises). Default True.
        window_tokens: the budget (tokens) of the windows built from the conversation
            (``ContextWindowBuilder.build(max_tokens=...)``): the compactions asked for are
            due when the messages no longer fit it, and their summaries are made to fit it
            (``request_compaction(max_tokens=...)``). Default None: the budget the
            conversation's last compaction request named, else
            ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` (10,000), whose summaries take most
            of a smaller window and leave its messages out.
        keep_on_thread_delete: keep the conversation when the saver deletes the thread
            (``delete_thread``, ``prune(strategy="delete")``); default False: the
            conversation is deleted with the thread, as the thread's transcript
            (aegra/aegra#499). Deleting the conversation (the API, ``forget_user``,
            ``purge_conversations``, deleting its owner) always deletes the thread's
            checkpoints, whatever this says: they hold the same transcript, and the next
            checkpoint would mirror it all again into a new conversation.

    Raises:
        ValueError: ``window_tokens`` is not a positive integer.
    """

    def __init__(
        self,
        *,
        owner: Owner | Callable[[RunnableConfig], Owner] = None,
        agent_key: str = "langgraph",
        channel: str = "messages",
        compact: bool = True,
        window_tokens: int | None = None,
        keep_on_thread_delete: bool = False,
    ) -> None:
        if window_tokens is not None and (
            isinstance(window_tokens, bool) or not isinstance(window_tokens, int) or window_tokens < 1
        ):
            raise ValueError(f"window_tokens must be a positive integer or None, not {window_tokens!r}")
        self.window_tokens = window_tokens
        self.owner = owner
        self.agent_key = agent_key
        self.channel = channel
        self.compact = compact
        self.keep_on_thread_delete = keep_on_thread_delete

    def conversation_for(self, thread_id: str) -> Conversation | None:
        """The conversation that mirrors the thread, or None before its first message."""
        db = router.db_for_read(Conversation)
        link = (
            MirroredThread.objects.using(db)
            .select_related("conversation")
            .filter(thread_id=str(thread_id))
            .first()
        )
        return link.conversation if link is not None else None

    # -- called by DjangoSaver.put -----------------------------------------------------

    def mirror(
        self, config: RunnableConfig, values: Mapping[str, Any], new_versions: Mapping[str, Any]
    ) -> None:
        """Append the messages of ``values[channel]`` that the thread's conversation lacks.

        Called by ``DjangoSaver.put`` inside its transaction for root-graph checkpoints; a
        no-op when the checkpoint does not change the channel. Runs on the database the
        routers choose for ``Conversation``: when it is the saver's, the conversation and the
        checkpoint commit together. Never raises for a message the conversation refuses
        (see the module's docstring).
        """
        if self.channel not in new_versions or self.channel not in values:
            return
        raw = values[self.channel]
        if not isinstance(raw, list | tuple) or not raw:
            return
        try:
            messages = convert_to_messages(raw)
        except (ValueError, TypeError, NotImplementedError) as exc:
            logger.warning("LangGraph channel %r holds no messages to mirror: %s", self.channel, exc)
            return
        thread_id = str(config["configurable"]["thread_id"])
        db = router.db_for_write(Conversation)
        with tidy(db):
            self._mirror(db, thread_id, config, messages)

    def _mirror(self, db: str, thread_id: str, config: RunnableConfig, messages: list[BaseMessage]) -> None:
        with transaction.atomic(using=db):
            thread = self._thread(db, thread_id, config)
            fresh = self._unmirrored(db, thread, messages)
            if not fresh:
                return
            errors = self._append(db, thread, fresh)
            if errors or thread.last_error:
                thread.last_error = "; ".join(errors)[:10_000]
                thread.save(update_fields=["last_error"])
        if self.compact:
            request_compaction(thread.conversation_id, max_tokens=self.window_tokens)

    def _thread(self, db: str, thread_id: str, config: RunnableConfig) -> MirroredThread:
        """The thread's link row, locked; made with its conversation on first use."""
        link = MirroredThread.objects.using(db).select_for_update().filter(thread_id=thread_id).first()
        if link is not None:
            return link
        owner = self.owner(config) if callable(self.owner) else self.owner
        owner_id = sessions.session_owner_id(owner)
        if owner_id is not None:
            # the foreign key refused it only at the commit, as a bare IntegrityError that
            # failed the checkpoint without naming the owner
            require_user(owner_id, db)
        try:
            with transaction.atomic(using=db):
                conversation = Conversation.objects.using(db).create(
                    owner_id=owner_id,
                    agent_key=self.agent_key,
                    title=f"LangGraph thread {thread_id}"[:200],
                    metadata={"langgraph_thread_id": thread_id},
                )
                return MirroredThread.objects.using(db).create(thread_id=thread_id, conversation=conversation)
        except IntegrityError:
            # another process made the link first: use it
            return MirroredThread.objects.using(db).select_for_update().get(thread_id=thread_id)

    @staticmethod
    def _key(position: int, message: BaseMessage) -> str:
        if message.id:
            return str(message.id)
        # no id (a channel without add_messages): known by place and text
        digest = hashlib.sha256(f"{message.type}\0{message.content!r}".encode()).hexdigest()[:16]
        return f"#{position}:{digest}"

    def _unmirrored(
        self, db: str, thread: MirroredThread, messages: list[BaseMessage]
    ) -> list[tuple[str, BaseMessage]]:
        keyed: dict[str, BaseMessage] = {}
        for position, message in enumerate(messages):
            keyed.setdefault(self._key(position, message), message)
        keys = list(keyed)
        known: set[str] = set()
        for start in range(0, len(keys), _ID_BATCH):
            known.update(
                MirroredMessage.objects.using(db)
                .filter(thread=thread, message_id__in=keys[start : start + _ID_BATCH])
                .values_list("message_id", flat=True)
            )
        return [(key, message) for key, message in keyed.items() if key not in known]

    def _append(self, db: str, thread: MirroredThread, fresh: list[tuple[str, BaseMessage]]) -> list[str]:
        """Append the messages (all at once; one by one when the batch is refused, skipping
        the refused ones); returns the errors."""
        history = PersistentChatHistory(thread.conversation_id)
        errors: list[str] = []
        converted: list[tuple[str, ChatMessage]] = []
        for key, message in fresh:
            try:
                chat = from_langchain_message(message)
            except AgentMemoryError as exc:
                errors.append(self._refused(thread, key, exc))
                continue
            metadata = {**chat.metadata, "langgraph_message_id": key}
            converted.append((key, dataclasses.replace(chat, metadata=metadata)))
        try:
            _add(db, history, [chat for _key, chat in converted])
        except AgentMemoryError:
            for key, chat in converted:
                try:
                    _add(db, history, [chat])
                except AgentMemoryError as exc:
                    errors.append(self._refused(thread, key, exc))
        MirroredMessage.objects.using(db).bulk_create(
            [MirroredMessage(thread=thread, message_id=key) for key, _message in fresh], ignore_conflicts=True
        )
        return errors

    @staticmethod
    def _refused(thread: MirroredThread, key: str, exc: Exception) -> str:
        logger.warning(
            "LangGraph message %s of thread %s not mirrored into conversation %s: %s",
            key,
            thread.thread_id,
            thread.conversation_id,
            exc,
        )
        return f"message {key}: {exc}"
