"""``PersistentChatHistory``: append, read, ``messages_after`` and clear, sync and async."""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter
from agentmemory.validation import ExchangeState, coerce_message, link_exchange, validate_message

_LOCK_FIELDS = (
    "id",
    "last_seq",
    "message_count",
    "human_message_count",
    "stored_tokens",
    "has_system_prompt",
    "open_exchange_seq",
    "pending_tool_call_ids",
)


class MessageNotFound(ConversationNotFound):
    """The message id given to ``messages_after`` is not in this conversation."""


def resolve_conversation_id(conversation: Conversation | int | str | UUID) -> int:
    """The primary key of a conversation given as an instance, a pk or its public uuid.

    Raises:
        ConversationNotFound: a uuid that matches no conversation.
    """
    if isinstance(conversation, Conversation):
        return conversation.pk
    if isinstance(conversation, int):
        return conversation
    try:
        pk = Conversation.objects.filter(uuid=conversation).values_list("pk", flat=True).first()
    except (ValueError, TypeError, ValidationError) as exc:
        raise ConversationNotFound(f"no conversation {conversation!r}") from exc
    if pk is None:
        raise ConversationNotFound(f"no conversation {conversation!r}")
    return pk


class PersistentChatHistory:
    """The stored messages of one conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid.
        token_counter: counts each message at write time; defaults to
            ``AGENTMEMORY['TOKEN_COUNTER']``. The count and the counter's ``id`` are stored.
        validate_tool_pairs: refuse tool results that answer no earlier unanswered call
            (default). ``False`` is for importing legacy history: such results are stored
            as orphans and skipped by context windows.

    Appending takes a row lock on the conversation (``SELECT ... FOR UPDATE``) to allocate
    ``seq``; a batch of n messages costs three queries whatever n is (invariants W1, W2).
    """

    def __init__(
        self,
        conversation: Conversation | int | str | UUID,
        *,
        token_counter: TokenCounter | None = None,
        validate_tool_pairs: bool = True,
    ) -> None:
        self.conversation_id = resolve_conversation_id(conversation)
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        self.validate_tool_pairs = validate_tool_pairs

    # -- writing ------------------------------------------------------------------------

    def add_message(self, message: ChatMessage) -> ChatMessage:
        """Append one message; returns it with ``seq``, ``id`` and ``token_count`` set."""
        return self.add_messages([message])[0]

    def add_messages(
        self, messages: Iterable[ChatMessage], *, validate_tool_pairs: bool | None = None
    ) -> list[ChatMessage]:
        """Append messages atomically, in the order given.

        Returns:
            The stored messages (``seq``, ``id``, ``token_count`` set), oldest first.

        Raises:
            InvalidMessageError: a message breaks invariant W3 (unknown role, NUL bytes,
                content over ``MAX_MESSAGE_CHARS``, arguments not a JSON object, a tool
                result answering no unanswered call); nothing of the batch is stored.
            ConversationNotFound: the conversation does not exist (any more).
        """
        batch = [coerce_message(m, i) for i, m in enumerate(messages)]
        if not batch:
            return []
        strict = self.validate_tool_pairs if validate_tool_pairs is None else validate_tool_pairs
        max_chars = app_settings().MAX_MESSAGE_CHARS
        for i, message in enumerate(batch):
            validate_message(message, i, max_chars=max_chars)
        counts = [self.token_counter.count_message(m) for m in batch]
        counter_id = self.token_counter.id

        with transaction.atomic():
            try:
                conv = (
                    Conversation.objects.select_for_update().only(*_LOCK_FIELDS).get(pk=self.conversation_id)
                )
            except Conversation.DoesNotExist as exc:
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist") from exc
            state = ExchangeState(conv.open_exchange_seq, list(conv.pending_tool_call_ids or []))
            rows = []
            seq = conv.last_seq
            humans = 0
            has_system_prompt = conv.has_system_prompt
            for i, (message, tokens) in enumerate(zip(batch, counts, strict=True)):
                seq += 1
                exchange_seq = link_exchange(message, seq, i, state, strict=strict)
                if message.role is Role.HUMAN:
                    humans += 1
                if seq == 1 and message.role is Role.SYSTEM:
                    has_system_prompt = True
                rows.append(
                    Message(
                        conversation_id=self.conversation_id,
                        seq=seq,
                        role=message.role.value,
                        content=message.content,
                        tool_calls=[c.to_dict() for c in message.tool_calls],
                        tool_call_id=message.tool_call_id,
                        name=message.name,
                        token_count=tokens,
                        token_counter=counter_id,
                        exchange_seq=exchange_seq,
                        metadata=dict(message.metadata or {}),
                    )
                )
            Message.objects.bulk_create(rows)
            Conversation.objects.filter(pk=self.conversation_id).update(
                last_seq=seq,
                message_count=conv.message_count + len(rows),
                human_message_count=conv.human_message_count + humans,
                stored_tokens=conv.stored_tokens + sum(counts),
                has_system_prompt=has_system_prompt,
                open_exchange_seq=state.open_seq,
                pending_tool_call_ids=state.pending,
                updated_at=timezone.now(),
            )
        stored = [row.to_chat_message() for row in rows]
        signals.message_appended.send(
            sender=PersistentChatHistory, conversation_id=self.conversation_id, messages=stored
        )
        return stored

    def cancel_pending_tool_calls(self, reason: str = "the tool call was cancelled") -> list[ChatMessage]:
        """Answer every tool call still awaiting its result with an error result
        (``"Error: <reason>"``), so the conversation can go on after a client died between
        a call and its results.

        Returns:
            The tool results stored (empty when no call was pending), in call order.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
            InvalidMessageError: ``reason`` is not storable text.
        """
        for attempt in range(2):
            pending = (
                Conversation.objects.filter(pk=self.conversation_id)
                .values_list("pending_tool_call_ids", flat=True)
                .first()
            )
            if pending is None:
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
            if not pending:
                return []
            results = [ChatMessage.tool(f"Error: {reason}", tool_call_id=call_id) for call_id in pending]
            try:
                return self.add_messages(results)
            except InvalidMessageError:
                if attempt:
                    raise
                # Another writer answered some of them meanwhile: read the pending calls again.
        return []

    def clear(self) -> None:
        """Delete every message and summary of the conversation; ``seq`` keeps counting up
        (seqs are never reused, so a late compaction cannot attach to new messages).

        Only a system message stored at seq 1 is pinned, so after ``clear()`` give the
        system prompt to the builder (``ContextWindowBuilder(..., system_prompt=...)``, as
        agents do) rather than storing it again."""
        from agentmemory.models import Summary

        with transaction.atomic():
            if not Conversation.objects.select_for_update().filter(pk=self.conversation_id).exists():
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
            Conversation.objects.filter(pk=self.conversation_id).update(
                summary=None,
                message_count=0,
                human_message_count=0,
                stored_tokens=0,
                has_system_prompt=False,
                open_exchange_seq=None,
                pending_tool_call_ids=[],
                updated_at=timezone.now(),
            )
            Summary.objects.filter(conversation_id=self.conversation_id).delete()
            Message.objects.filter(conversation_id=self.conversation_id).delete()

    # -- reading ------------------------------------------------------------------------

    def get_messages(self, *, limit: int | None = None) -> list[ChatMessage]:
        """Stored messages, oldest first; with ``limit``, the newest ``limit`` of them.

        Reads O(returned) rows: the newest are taken from the end of the ``(conversation,
        seq)`` index, then put in chronological order (bug report yaalalabs/agent-kernel#739).
        """
        qs = Message.objects.filter(conversation_id=self.conversation_id)
        if limit is not None:
            if limit < 0:
                raise ValueError("limit must be >= 0")
            rows = list(qs.order_by("-seq")[:limit])
            rows.reverse()
        else:
            rows = list(qs.order_by("seq"))
        return [r.to_chat_message() for r in rows]

    @property
    def messages(self) -> list[ChatMessage]:
        """Every stored message, oldest first (O(history): prefer a context window)."""
        return self.get_messages()

    def messages_after(self, message_id: int | None) -> list[ChatMessage]:
        """Messages stored after the message ``message_id`` (all when ``None``), oldest first.

        Raises:
            MessageNotFound: ``message_id`` is not a message of this conversation.
        """
        qs = Message.objects.filter(conversation_id=self.conversation_id)
        if message_id is not None:
            seq = qs.filter(pk=message_id).values_list("seq", flat=True).first()
            if seq is None:
                raise MessageNotFound(f"message {message_id} is not in conversation {self.conversation_id}")
            qs = qs.filter(seq__gt=seq)
        return [r.to_chat_message() for r in qs.order_by("seq")]

    # -- async --------------------------------------------------------------------------

    async def aadd_message(self, message: ChatMessage) -> ChatMessage:
        return (await self.aadd_messages([message]))[0]

    async def aadd_messages(
        self, messages: Iterable[ChatMessage], *, validate_tool_pairs: bool | None = None
    ) -> list[ChatMessage]:
        batch = list(messages)
        return await sync_to_async(self.add_messages)(batch, validate_tool_pairs=validate_tool_pairs)

    async def aget_messages(self, *, limit: int | None = None) -> list[ChatMessage]:
        return await sync_to_async(self.get_messages)(limit=limit)

    async def amessages_after(self, message_id: int | None) -> list[ChatMessage]:
        return await sync_to_async(self.messages_after)(message_id)

    async def aclear(self) -> None:
        await sync_to_async(self.clear)()
