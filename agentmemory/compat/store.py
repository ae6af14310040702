"""``StoredConversation``: the conversation behind one compat memory (or one windlass thread),
created on the first write, read by its newest rows."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from django.db import router, transaction

from agentmemory.history import PersistentChatHistory, resolve_conversation_id
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.validation import whole_number

#: the key of ``Conversation.metadata`` holding what a compat memory keeps beside the
#: messages (selectools' ``summary``, windlass' summary and how far it reaches)
STATE_KEY = "compat_state"


class StoredConversation:
    """One stored conversation, made when first written to.

    Args:
        conversation: an existing ``Conversation`` (or its primary key or uuid) to attach
            to; ``None`` creates one on the first write.
        owner: the user a created conversation belongs to (``Conversation.owner``).
        agent_key: ``Conversation.agent_key`` of a created conversation.
        metadata: ``Conversation.metadata`` of a created conversation.
        settle: called with the conversation just created; returns the one to use (another
            one made meanwhile for the same purpose, by another process: the one created
            here is then deleted, still empty), so racing writers end up in one conversation.

    Raises:
        ConversationNotFound: ``conversation`` is a uuid or key that names none.

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
        settle: Callable[[Conversation], Conversation] | None = None,
    ) -> None:
        self._conversation: Conversation | None = None
        self._lock = threading.RLock()
        self._settle = settle
        if conversation is not None:
            if isinstance(conversation, Conversation):
                self._conversation = conversation
            else:
                pk = resolve_conversation_id(conversation)
                self._conversation = Conversation.objects.using(router.db_for_read(Conversation)).get(pk=pk)
        self.owner = owner
        self.agent_key = agent_key
        self.metadata = dict(metadata or {})

    @property
    def exists(self) -> bool:
        """Whether the conversation has been created (or was given)."""
        return self._conversation is not None

    @property
    def conversation(self) -> Conversation:
        """The conversation, created now if it does not exist yet."""
        with self._lock:
            if self._conversation is None:
                made = Conversation.objects.using(router.db_for_write(Conversation)).create(
                    owner=self.owner, agent_key=self.agent_key, metadata=dict(self.metadata)
                )
                chosen = self._settle(made) if self._settle is not None else made
                if chosen.pk != made.pk:
                    made.delete()
                self._conversation = chosen
            return self._conversation

    def history(self) -> PersistentChatHistory:
        return PersistentChatHistory(self.conversation, validate_tool_pairs=False)

    def append(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Store ``messages`` in one batch (all or none); returns them with ``seq`` and ``id``.

        Raises:
            InvalidMessageError: a message our storage cannot hold (see
                ``PersistentChatHistory.add_messages``); nothing of the batch is stored.
        """
        if not messages:
            return []
        return self.history().add_messages(messages)

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
            found = list(rows.order_by("-seq")[: whole_number(limit, "limit", minimum=0)])
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
