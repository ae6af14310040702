"""``StoredConversation``: the conversation behind one compat memory (or one windlass thread),
created on the first write, read by its newest rows."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from django.db import connections, router, transaction

from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory, resolve_conversation_id
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.recall.scope import require_user
from agentmemory.validation import whole_number

#: the key of ``Conversation.metadata`` holding what a compat memory keeps beside the
#: messages (selectools' ``summary``, windlass' summary and how far it reaches)
STATE_KEY = "compat_state"
#: the most rows a read asks for (a seq is a 64-bit integer)
_MAX_ROWS = 2**62


def take_creation_lock(using: str, key: str) -> None:
    """Serialise, until the transaction ends, the writers creating the conversation named
    ``key`` (an owner's windlass thread).

    Without it two memories starting the same thread inside transactions (a view under
    ``ATOMIC_REQUESTS``) each see no conversation, since neither has committed, and each
    create one: the thread is split in two and one's messages are never read again.
    PostgreSQL: a transaction-level advisory lock on a 64-bit hash of ``key``
    (``pg_advisory_xact_lock``), so other threads never wait; the second writer then reads
    the first one's conversation. SQLite writes one transaction at a time; with
    ``"transaction_mode": "IMMEDIATE"`` (check ``agentmemory.W003``) the second writer
    waits at the start of its transaction.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    digest = hashlib.blake2b(f"agentmemory.compat\0{key}".encode("utf-8", "surrogatepass"), digest_size=8)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest.digest(), "big", signed=True)]
        )


def owner_field(owner: Any) -> dict[str, Any]:
    """The keyword setting ``Conversation.owner`` to ``owner``: a user, ``None``, or a user's
    primary key (``owner_id``), as the long-term memories take it."""
    if isinstance(owner, int) and not isinstance(owner, bool):
        return {"owner_id": owner}
    return {"owner": owner}


class StoredConversation:
    """One stored conversation, made when first written to.

    Args:
        conversation: an existing ``Conversation`` (or its primary key or uuid) to attach
            to; ``None`` creates one on the first write.
        owner: the user a created conversation belongs to (``Conversation.owner``), or the
            user's primary key.
        agent_key: ``Conversation.agent_key`` of a created conversation.
        metadata: ``Conversation.metadata`` of a created conversation.
        find: looks up the conversation already made for the same purpose (by another
            memory or process); called on the first write under ``take_creation_lock(using,
            lock_key)``, and a conversation is created only when it finds none, so racing
            writers end up in one conversation.
        lock_key: names what ``find`` looks for (required with ``find``).

    Raises:
        ConversationNotFound: ``conversation`` is a uuid or key that names none.

    A write that creates the conversation and is refused (``append`` raising
    ``InvalidMessageError``, an owner id naming no user) leaves no conversation behind.

    Appends go through ``PersistentChatHistory`` with ``validate_tool_pairs=False``: the
    in-process memories these classes stand in for store any message, so a tool result
    whose call was never stored is kept as an orphan (context windows skip it) instead of
    being refused.
    """

    def __init__(
        self,
        conversation: Conversation | int | str | UUID | None = None,
        *,
        owner: Any = None,
        agent_key: str = "",
        metadata: dict[str, Any] | None = None,
        find: Callable[[], Conversation | None] | None = None,
        lock_key: str = "",
    ) -> None:
        self._conversation: Conversation | None = None
        self._lock = threading.RLock()
        self._find = find
        self._lock_key = lock_key
        if conversation is not None:
            if isinstance(conversation, Conversation):
                self._conversation = conversation
            else:
                pk = resolve_conversation_id(conversation)
                found = Conversation.objects.using(router.db_for_read(Conversation)).filter(pk=pk).first()
                if found is None:
                    raise ConversationNotFound(f"no conversation {conversation!r}")
                self._conversation = found
        self.owner = owner
        self.agent_key = agent_key
        self.metadata = dict(metadata or {})

    @property
    def exists(self) -> bool:
        """Whether the conversation has been created (or was given)."""
        return self._conversation is not None

    @property
    def conversation(self) -> Conversation:
        """The conversation, created now if it does not exist yet.

        Raises:
            MemoryScopeError: ``owner`` is a user id that names no user (the foreign key
                would refuse it only at the commit, as an ``IntegrityError``).
        """
        with self._lock:
            if self._conversation is None:
                using = router.db_for_write(Conversation)
                owner = owner_field(self.owner)
                if "owner_id" in owner:
                    require_user(owner["owner_id"], using)
                with transaction.atomic(using=using):
                    found = None
                    if self._find is not None:
                        take_creation_lock(using, self._lock_key)
                        found = self._find()
                    self._conversation = found or Conversation.objects.using(using).create(
                        **owner, agent_key=self.agent_key, metadata=dict(self.metadata)
                    )
            return self._conversation

    def history(self) -> PersistentChatHistory:
        return PersistentChatHistory(self.conversation, validate_tool_pairs=False)

    def append(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Store ``messages`` in one batch (all or none); returns them with ``seq`` and ``id``.

        Raises:
            InvalidMessageError: a message our storage cannot hold (see
                ``PersistentChatHistory.add_messages``); nothing of the batch is stored,
                and a conversation this write would have created is not created either.
        """
        if not messages:
            return []
        if self._conversation is not None:
            return self.history().add_messages(messages)
        with self._lock:
            if self._conversation is not None:
                return self.history().add_messages(messages)
            # The first write: the conversation is created in the same transaction as the
            # messages, so a refused batch leaves no empty conversation behind.
            try:
                with transaction.atomic(using=router.db_for_write(Conversation)):
                    return self.history().add_messages(messages)
            except BaseException:
                self._conversation = None
                raise

    def newest(
        self,
        limit: int | None = None,
        *,
        after_seq: int = 0,
        roles: Sequence[Role] = (),
        exclude: bool = False,
    ) -> list[ChatMessage]:
        """The newest ``limit`` stored messages (all when ``None``) with a seq above
        ``after_seq``, oldest first: one query reading O(returned) rows from the end of the
        ``(conversation, seq)`` index. ``roles`` keeps only those roles (``exclude=True``:
        leaves them out)."""
        if self._conversation is None:
            return []
        rows = Message.objects.using(router.db_for_read(Message)).filter(
            conversation_id=self._conversation.pk, seq__gt=after_seq
        )
        if roles:
            values = [r.value for r in roles]
            rows = rows.exclude(role__in=values) if exclude else rows.filter(role__in=values)
        if limit is None:
            found = list(rows.order_by("seq"))
        else:
            # more rows than any conversation holds: a limit past 64 bits is refused by SQL
            wanted = min(whole_number(limit, "limit", minimum=0), _MAX_ROWS)
            found = list(rows.order_by("-seq")[:wanted])
            found.reverse()
        return [row.to_chat_message() for row in found]

    def last_seq(self) -> int:
        """The highest seq handed out so far (0 for a conversation not created yet)."""
        if self._conversation is None:
            return 0
        return (
            Conversation.objects.using(router.db_for_read(Conversation))
            .filter(pk=self._conversation.pk)
            .values_list("last_seq", flat=True)
            .first()
            or 0
        )

    def clear(self) -> None:
        """Delete every stored message (``PersistentChatHistory.clear``); nothing to do for a
        conversation not created yet."""
        if self._conversation is not None:
            self.history().clear()

    def delete(self) -> None:
        """Delete the conversation with its messages; the next write creates a new one."""
        if self._conversation is not None:
            Conversation.objects.using(router.db_for_write(Conversation)).filter(
                pk=self._conversation.pk
            ).delete()
            self._conversation = None

    # -- state kept in Conversation.metadata ------------------------------------------------

    def state(self) -> dict[str, Any]:
        """``Conversation.metadata["compat_state"]`` as stored now (``{}`` when none)."""
        if self._conversation is None:
            return {}
        metadata = (
            Conversation.objects.using(router.db_for_read(Conversation))
            .filter(pk=self._conversation.pk)
            .values_list("metadata", flat=True)
            .first()
        )
        return dict((metadata or {}).get(STATE_KEY) or {})

    def update_state(self, **values: Any) -> None:
        """Merge ``values`` into the stored state, under the conversation's row lock (other
        metadata keys and concurrent changes to them are kept). Creates the conversation."""
        pk = self.conversation.pk
        using = router.db_for_write(Conversation)
        with transaction.atomic(using=using):
            rows = Conversation.objects.using(using).select_for_update().filter(pk=pk)
            metadata = dict(rows.values_list("metadata", flat=True).first() or {})
            state = dict(metadata.get(STATE_KEY) or {})
            state.update(values)
            metadata[STATE_KEY] = state
            rows.update(metadata=metadata)
