"""``PersistentChatHistory``: append, read, ``messages_after`` and clear, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, router, transaction
from django.db.models import Min
from django.utils import timezone

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import (
    ConversationFull,
    ConversationNotFound,
    ConversationStateError,
    InvalidMessageError,
    MessageNotFound,
)
from agentmemory.messages import ChatMessage, Role, pending_calls
from agentmemory.models import Conversation, Message
from agentmemory.store.append import (
    _append_one_postgresql,
    _append_postgresql,
    leading_system_messages,
    pin_after_append,
)
from agentmemory.tokens import TokenCounter
from agentmemory.validation import MAX_ID, coerce_message, link_tool_message, validate_message, whole_number

_LOCK_FIELDS = (
    "id",
    "last_seq",
    "message_count",
    "human_message_count",
    "stored_tokens",
    "pinned_seq",
    "pinned_last_seq",
    "pending_tool_calls",
)


def check_room(conv: Conversation, *, count: int, humans: int, tokens: int) -> None:
    """Refuse a batch of ``count`` messages (``humans`` of them human, ``tokens`` tokens in
    all) whose counters would pass ``MAX_ID`` (2**63 - 1, the largest value of their 64-bit
    columns): SQLite's driver raised ``OverflowError`` and PostgreSQL "bigint out of range",
    a 500 from the API.

    Raises:
        ConversationFull: the seqs would pass it.
        ConversationStateError: a count would (no conversation holds 2**63 messages or
            tokens: the stored count is wrong).
    """
    if conv.last_seq > MAX_ID - count:
        raise ConversationFull(conversation_id=conv.pk, last_seq=conv.last_seq, count=count, limit=MAX_ID)
    for field, added in (
        ("message_count", count),
        ("human_message_count", humans),
        ("stored_tokens", tokens),
    ):
        value = getattr(conv, field)
        if value > MAX_ID - added:
            raise ConversationStateError(
                f"its {field} is {value}, which {added} more would take past 2**63 - 1 "
                "(no conversation holds that many)",
                conversation_id=conv.pk,
                field=field,
                value=value,
            )


def seq_taken(exc: IntegrityError) -> bool:
    """Whether ``exc`` is the unique ``(conversation, seq)`` constraint refusing a seq that a
    stored message already has: PostgreSQL's detail names the key's columns (on a
    partitioned table too), SQLite's message the table's columns."""
    text = str(exc)
    return "(conversation_id, seq)" in text or "agentmemory_message.seq" in text


def _seq_taken_error(conversation_id: int, last_seq: int | None) -> ConversationStateError:
    """The error of an append whose seqs collided with stored ones; ``last_seq`` ``None``:
    PostgreSQL aborted the caller's transaction with the failed statement, so it was not
    read again (the caller rolls the transaction back)."""
    aborted = " (the failed statement aborted this transaction: roll it back)" if last_seq is None else ""
    return ConversationStateError(
        f"its last_seq{'' if last_seq is None else f' ({last_seq})'} is below the seq of a stored "
        f"message, so the seq an append takes next is taken already{aborted}",
        conversation_id=conversation_id,
        field="last_seq",
        value=last_seq,
    )


def check_conversation_argument(conversation: Any) -> None:
    """Refuse what cannot name a conversation: anything but a ``Conversation``, an integer
    primary key, a uuid or its text.

    Raises:
        TypeError: a bool (``True`` is an ``int`` to Python, and opened conversation 1), a
            float, None or any other type.
    """
    if isinstance(conversation, bool) or not isinstance(conversation, Conversation | int | str | UUID):
        raise TypeError(
            "a conversation is a Conversation, its primary key or its uuid, "
            f"not {type(conversation).__name__} {conversation!r}"
        )


def resolve_conversation_id(conversation: Conversation | int | str | UUID) -> int:
    """The primary key of a conversation given as an instance, a pk or its public uuid.

    Raises:
        ConversationNotFound: a uuid that matches no conversation.
        TypeError: what cannot name a conversation (``check_conversation_argument``).
    """
    check_conversation_argument(conversation)
    if isinstance(conversation, Conversation):
        return conversation.pk
    if isinstance(conversation, int):
        return conversation
    try:
        pk = (
            Conversation.objects.using(router.db_for_read(Conversation))
            .filter(uuid=conversation)
            .values_list("pk", flat=True)
            .first()
        )
    except (ValueError, TypeError, ValidationError) as exc:
        raise ConversationNotFound(f"no conversation {conversation!r}") from exc
    if pk is None:
        raise ConversationNotFound(f"no conversation {conversation!r}")
    return pk


def running_in_event_loop() -> bool:
    """Whether the caller runs in an event loop's thread, where Django refuses database
    access (``SynchronousOnlyOperation``): a uuid is then resolved later, in a worker
    thread (bug report langchain-ai/langchain#23716, BUG-25)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def last_foldable_seq(
    conversation: Conversation, *, floor: int, target: int, now: datetime | None = None
) -> int:
    """The highest seq at most ``target`` through which a summary may fold the conversation
    without cutting a tool exchange that is not finished: never past the human turn holding
    the oldest exchange (after ``floor``) that still has a call awaiting its result, or
    whose result was stored after ``target`` (right before that exchange when no human
    message opens a turn between ``floor`` and it: tool exchanges alone). A call unanswered for
    ``AGENTMEMORY['PENDING_TOOL_CALL_TIMEOUT']`` seconds counts as abandoned and no longer
    holds the summary back (``None``: never abandoned; compaction then stops before a call
    that will never be answered until ``cancel_pending_tool_calls()`` answers it).

    Args:
        conversation: with ``pending_tool_calls`` loaded.
        floor: seq the current summary reaches (nothing at or below it is folded again).
        target: seq the compactor would fold through.
        now: the time ages are measured at (defaults to now).

    Returns:
        ``target`` or a lower seq; ``floor`` when nothing may be folded.
    """
    using = router.db_for_read(Message)
    messages = Message.objects.using(using).filter(conversation_id=conversation.pk)
    waiting = {
        seq for seq in pending_calls(conversation.pending_tool_calls).values() if floor < seq <= target
    }
    abandoned: set[int] = set()
    timeout = app_settings().PENDING_TOOL_CALL_TIMEOUT
    if waiting and timeout is not None:
        cutoff = (now or timezone.now()) - timedelta(seconds=timeout)
        abandoned = set(
            messages.filter(seq__in=waiting, created_at__lte=cutoff).values_list("seq", flat=True)
        )
        waiting -= abandoned
    while target > floor:
        late = (
            messages.filter(role=Role.TOOL, seq__gt=target, exchange_seq__gt=floor, exchange_seq__lte=target)
            .exclude(exchange_seq__in=abandoned)
            .aggregate(first=Min("exchange_seq"))["first"]
        )
        blockers = [seq for seq in waiting if seq <= target] + ([late] if late is not None else [])
        if not blockers:
            return target
        turn = (
            messages.filter(role=Role.HUMAN, seq__gt=floor, seq__lte=min(blockers))
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        target = min(blockers) - 1 if turn is None else turn - 1
    return floor


class PersistentChatHistory:
    """The stored messages of one conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid (made in an
            event loop's thread, where Django allows no query, the uuid is resolved by the
            first call that reads or writes, such as ``aadd_messages``).
        token_counter: counts each message at write time; defaults to
            ``AGENTMEMORY['TOKEN_COUNTER']``. The count and the counter's ``id`` are stored.
        validate_tool_pairs: refuse tool results that answer no earlier unanswered call
            (default). ``False`` is for importing legacy history: such results are stored
            as orphans and skipped by context windows, and a call that reuses the id of a
            call still unanswered supersedes it (the abandoned exchange is left out).

    Every read and write goes to the database the routers choose for ``Message``
    (``router.db_for_read`` / ``router.db_for_write``); a conversation and its messages live
    on the same database.

    Appends never collide or lose a message, however many processes append to one
    conversation, and cost a constant number of queries whatever the batch size: on
    PostgreSQL one statement (the conversation row locked, its counters and pending tool
    calls checked and changed, the rows inserted with the seqs it hands over); elsewhere, and
    to refuse a batch with a precise error, the conversation row is locked
    (``SELECT ... FOR UPDATE``), the pending tool calls checked, then the rows inserted and
    the counters updated: three queries.
    """

    def __init__(
        self,
        conversation: Conversation | int | str | UUID,
        *,
        token_counter: TokenCounter | None = None,
        validate_tool_pairs: bool = True,
    ) -> None:
        check_conversation_argument(conversation)
        self._conversation = conversation
        self._conversation_id: int | None = None
        if isinstance(conversation, Conversation | int) or not running_in_event_loop():
            self._conversation_id = resolve_conversation_id(conversation)
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        self.validate_tool_pairs = validate_tool_pairs

    @property
    def conversation_id(self) -> int:
        """Primary key of the conversation. A uuid given in an event loop's thread is
        resolved here, on first use (the ``a...`` methods use it in their worker thread).

        Raises:
            ConversationNotFound: the uuid names no conversation.
        """
        if self._conversation_id is None:
            self._conversation_id = resolve_conversation_id(self._conversation)
        return self._conversation_id

    @conversation_id.setter
    def conversation_id(self, value: int) -> None:
        self._conversation_id = value

    # -- writing ------------------------------------------------------------------------

    def add_message(self, message: ChatMessage) -> ChatMessage:
        """Append one message; returns it with ``seq``, ``id`` and ``token_count`` set."""
        return self.add_messages([message])[0]

    def add_messages(
        self, messages: Iterable[ChatMessage], *, validate_tool_pairs: bool | None = None
    ) -> list[ChatMessage]:
        """Append messages atomically, in the order given, on the database the routers choose
        for writing ``Message`` (``router.db_for_write``).

        Messages are stored in the order they happen: a human message may follow a tool call
        that still awaits its result, and a result may arrive after later messages; it is
        linked to its call (``exchange_seq``) and context windows put it right after it.

        Every system message stored while the conversation holds only system messages (a
        new conversation, or one just cleared), in one batch or over several appends, is
        part of the pinned system prompt: sent first, in stored order, in every context
        window, and never summarised (``Conversation.pinned_seq`` through
        ``pinned_last_seq``). So OpenAI's ``[system, developer, user, ...]`` pins both
        leading messages (a developer message is stored as a system message). A system
        message stored after any other message is ordinary history.

        Returns:
            The stored messages (``seq``, ``id``, ``token_count`` set), oldest first.

        Raises:
            InvalidMessageError: a message cannot be stored (unknown role, NUL bytes, content
                over ``MAX_MESSAGE_CHARS``, arguments not a JSON object, a tool call id already
                pending, a tool result answering no pending call); nothing of the batch is
                stored.
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
        using = router.db_for_write(Message)
        stored = None
        connection = connections[using]
        if connection.vendor == "postgresql":
            try:
                if len(batch) == 1:
                    stored = _append_one_postgresql(
                        using, self.conversation_id, batch[0], counts[0], self.token_counter.id, strict=strict
                    )
                else:
                    stored = _append_postgresql(
                        using, self.conversation_id, batch, counts, self.token_counter.id, strict=strict
                    )
            except IntegrityError as exc:
                if not seq_taken(exc):
                    raise
                if connection.in_atomic_block:
                    # the failed statement aborted the transaction: nothing more can be read
                    raise _seq_taken_error(self.conversation_id, None) from exc
                # outside a transaction the locked path below says it, with the stored value
        if stored is None:
            stored = self._append_locked(using, batch, counts, strict=strict)
        # Recall schedules the embedding of new messages from this signal
        # (``agentmemory.recall.receivers``).
        signals.message_appended.send(
            sender=PersistentChatHistory, conversation_id=self.conversation_id, messages=stored, using=using
        )
        return stored

    def _append_locked(
        self, using: str, batch: list[ChatMessage], counts: list[int], *, strict: bool
    ) -> list[ChatMessage]:
        """Append under a row lock on the conversation: the pending tool calls are read,
        checked and changed with the seqs, so concurrent appends see each other's calls."""
        counter_id = self.token_counter.id
        last_seq: int | None = None
        try:
            with transaction.atomic(using=using):
                try:
                    conv = (
                        Conversation.objects.using(using)
                        .select_for_update()
                        .only(*_LOCK_FIELDS)
                        .get(pk=self.conversation_id)
                    )
                except Conversation.DoesNotExist as exc:
                    raise ConversationNotFound(f"conversation {self.conversation_id} does not exist") from exc
                last_seq = conv.last_seq
                check_room(
                    conv,
                    count=len(batch),
                    humans=sum(1 for m in batch if m.role is Role.HUMAN),
                    tokens=sum(counts),
                )
                pending = pending_calls(conv.pending_tool_calls)
                rows = []
                seq = conv.last_seq
                humans = 0
                # The system messages stored while the conversation holds only system messages
                # (none at all: new, or cleared) are the pinned system prompt, whatever their seqs.
                pinned_seq, pinned_last_seq = pin_after_append(
                    message_count=conv.message_count,
                    last_seq=conv.last_seq,
                    pinned_seq=conv.pinned_seq,
                    pinned_last_seq=conv.pinned_last_seq,
                    lead=leading_system_messages(batch),
                )
                now = timezone.now()
                for i, (message, tokens) in enumerate(zip(batch, counts, strict=True)):
                    seq += 1
                    exchange_seq = link_tool_message(message, seq, i, pending, strict=strict)
                    if message.role is Role.HUMAN:
                        humans += 1
                    rows.append(
                        Message(
                            conversation_id=self.conversation_id,
                            seq=seq,
                            role=message.role.value,
                            content=message.content,
                            parts=[p.to_dict() for p in message.parts] or None,
                            tool_calls=[c.to_dict() for c in message.tool_calls],
                            tool_call_id=message.tool_call_id,
                            name=message.name,
                            token_count=tokens,
                            token_counter=counter_id,
                            exchange_seq=exchange_seq,
                            metadata=dict(message.metadata or {}),
                            created_at=now,
                        )
                    )
                Message.objects.using(using).bulk_create(rows)
                Conversation.objects.using(using).filter(pk=self.conversation_id).update(
                    last_seq=seq,
                    message_count=conv.message_count + len(rows),
                    human_message_count=conv.human_message_count + humans,
                    stored_tokens=conv.stored_tokens + sum(counts),
                    has_system_prompt=pinned_seq is not None,
                    pinned_seq=pinned_seq,
                    pinned_last_seq=pinned_last_seq,
                    pending_tool_calls=pending,
                    updated_at=now,
                )
        except IntegrityError as exc:
            if not seq_taken(exc):
                raise
            raise _seq_taken_error(self.conversation_id, last_seq) from exc
        return [row.to_chat_message() for row in rows]

    def cancel_pending_tool_calls(self, reason: str = "the tool call was cancelled") -> list[ChatMessage]:
        """Answer every tool call still awaiting its result with an error result
        (``"Error: <reason>"``, with ``metadata["is_error"]`` so that it is sent as one), for
        a call that will never be answered (a client that died between a call and its
        result, an approval that was refused). Nothing requires it: the conversation goes on
        while calls are pending, but their exchanges stay out of context windows and out of
        summaries until answered.

        Returns:
            The tool results stored (empty when no call was pending), oldest call first, in
            the order of each AI message's ``tool_calls``.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
            InvalidMessageError: ``reason`` is not storable text.
        """
        using = router.db_for_write(Message)
        for attempt in range(2):
            conv = (
                Conversation.objects.using(using)
                .only("id", "pending_tool_calls")
                .filter(pk=self.conversation_id)
                .first()
            )
            if conv is None:
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
            pending = pending_calls(conv.pending_tool_calls)
            if not pending:
                return []
            # Each result carries its call's tool name, as the agent's own results do, so the
            # admin, the API and converters that name results (LangChain, transcripts) show it.
            names = {call.tool_call_id: call.name for call in conv.pending_calls(using=using)}
            ordered = list(names)
            # Ids whose AI message is gone (data written around the history) still get an answer.
            ordered += sorted(set(pending) - set(ordered), key=lambda call_id: (pending[call_id], call_id))
            results = [
                ChatMessage.tool(
                    f"Error: {reason}",
                    tool_call_id=call_id,
                    name=names.get(call_id, ""),
                    metadata={"is_error": True},
                )
                for call_id in ordered
            ]
            try:
                return self.add_messages(results)
            except InvalidMessageError:
                if attempt:
                    raise
                # Another writer answered some of them meanwhile: read the pending calls again.
        return []

    def clear(self) -> None:
        """Delete every message and summary of the conversation, and its pinned system
        prompt; ``seq`` keeps counting up (seqs are never reused, so a late compaction
        cannot attach to new messages).

        The next message stored is the first of the conversation again: the system messages
        stored while it holds only system messages are the pinned system prompt
        (``Conversation.pinned_seq`` through ``pinned_last_seq``), sent first in every
        context window and never summarised, whatever their seqs. So ``history.clear();
        history.add_message(ChatMessage.system("You are ..."))`` starts over with that
        prompt pinned. A system message stored after any other message is not pinned.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
        """
        from agentmemory.models import Summary

        using = router.db_for_write(Message)
        with transaction.atomic(using=using):
            conversations = Conversation.objects.using(using).filter(pk=self.conversation_id)
            found = list(conversations.select_for_update().values_list("owner_id", flat=True))
            if not found:
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
            conversations.update(
                summary=None,
                message_count=0,
                human_message_count=0,
                stored_tokens=0,
                has_system_prompt=False,
                pinned_seq=None,
                pinned_last_seq=None,
                pending_tool_calls={},
                updated_at=timezone.now(),
            )
            Summary.objects.using(using).filter(conversation_id=self.conversation_id).delete()
            Message.objects.using(using).filter(conversation_id=self.conversation_id).delete()
            # sent for a conversation without owner too: integrations that keep a copy of
            # the words (a LangGraph thread's checkpoints) erase it
            signals.memory_deleted.send(
                Conversation,
                using=using,
                owner_ids=[found[0]] if found[0] is not None else [],
                conversation_ids=[self.conversation_id],
                kept=True,
            )

    def pop(self) -> ChatMessage | None:
        """Delete the newest stored message and return it (``seq``, ``id`` and
        ``token_count`` set), or ``None`` when the conversation holds none: the ``pop_item``
        of session stores such as the OpenAI Agents SDK's, which undo the last item (a
        retried turn, a corrected message).

        The conversation's counters follow under its row lock: the message and token counts,
        the pinned system prompt (popping the last pinned message shortens the run), and the
        pending tool calls: popping an AI message withdraws its calls that still await a
        result, popping a tool result makes the call it answered pending again. Summaries
        that reach the popped message (only possible once every later message is gone:
        compaction never folds the newest turn) are deleted, and the newest summary left
        becomes the current one. Seqs are not reused (as after ``clear``): the next message
        gets a seq above every one handed out, so a compaction that read the popped message
        cannot attach to a new one.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
        """
        from agentmemory.models import Summary

        using = router.db_for_write(Message)
        with transaction.atomic(using=using):
            try:
                conv = (
                    Conversation.objects.using(using)
                    .select_for_update()
                    .only(*_LOCK_FIELDS, "summary_id", "owner_id")
                    .get(pk=self.conversation_id)
                )
            except Conversation.DoesNotExist as exc:
                raise ConversationNotFound(f"conversation {self.conversation_id} does not exist") from exc
            newest = list(Message.objects.using(using).filter(conversation_id=conv.pk).order_by("-seq")[:2])
            if not newest:
                return None
            row = newest[0]
            before = newest[1].seq if len(newest) > 1 else None
            pending = pending_calls(conv.pending_tool_calls)
            if row.role == Role.AI:
                for call in row.tool_calls or ():
                    if pending.get(call.get("id")) == row.seq:
                        del pending[call["id"]]
            elif row.role == Role.TOOL and row.exchange_seq is not None:
                # The call is unanswered again, unless a later call took over its id.
                pending.setdefault(row.tool_call_id, row.exchange_seq)
            pinned_seq, pinned_last_seq = conv.pinned_seq, conv.pinned_last_seq
            if pinned_seq is not None and row.seq <= conv.pinned_through:
                # The newest message is pinned, so every message is: the run ends before it.
                if before is None or before < pinned_seq:
                    pinned_seq = pinned_last_seq = None
                else:
                    pinned_last_seq = before
            if conv.summary_id is not None:
                reached = Summary.objects.using(using).filter(
                    conversation_id=conv.pk, through_seq__gte=row.seq
                )
                if reached.exists():
                    reached.delete()
                    conv.summary_id = (
                        Summary.objects.using(using)
                        .filter(conversation_id=conv.pk)
                        .order_by("-through_seq")
                        .values_list("pk", flat=True)
                        .first()
                    )
            message = row.to_chat_message()
            Message.objects.using(using).filter(pk=row.pk).delete()
            if conv.owner_id is not None:
                signals.memory_deleted.send(
                    Message, using=using, owner_ids=[conv.owner_id], messages=[(conv.pk, row.seq)]
                )
            Conversation.objects.using(using).filter(pk=conv.pk).update(
                message_count=max(conv.message_count - 1, 0),
                human_message_count=max(conv.human_message_count - (row.role == Role.HUMAN), 0),
                stored_tokens=max(conv.stored_tokens - row.token_count, 0),
                has_system_prompt=pinned_seq is not None,
                pinned_seq=pinned_seq,
                pinned_last_seq=pinned_last_seq,
                pending_tool_calls=pending,
                summary_id=conv.summary_id,
                updated_at=timezone.now(),
            )
        return message

    # -- reading ------------------------------------------------------------------------

    def get_messages(self, *, limit: int | None = None) -> list[ChatMessage]:
        """Stored messages, oldest first; with ``limit``, the newest ``limit`` of them.

        Reads O(returned) rows: the newest are taken from the end of the ``(conversation,
        seq)`` index, then put in chronological order (bug report yaalalabs/agent-kernel#739).

        Raises:
            TypeError: ``limit`` is not a whole number (a float, a string, a bool).
            ValueError: ``limit`` is negative.
        """
        if limit is not None:
            limit = whole_number(limit, "limit", minimum=0)
        if not -MAX_ID - 1 <= self.conversation_id <= MAX_ID:
            return []  # no 64-bit id: no conversation (SQLite's driver raised OverflowError)
        qs = Message.objects.using(router.db_for_read(Message)).filter(conversation_id=self.conversation_id)
        if limit is not None:
            # A limit past any conversation's end means all of it; the database's LIMIT is a
            # 64-bit integer (PostgreSQL answers a larger one with "bigint out of range").
            rows = list(qs.order_by("-seq")[: min(limit, MAX_ID)])
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
            TypeError: ``message_id`` is not a whole number (a float, a string, a bool).
        """
        if message_id is not None:
            whole_number(message_id, "message_id")
        if not -MAX_ID - 1 <= self.conversation_id <= MAX_ID:
            # no 64-bit id: no conversation (SQLite's driver raised OverflowError)
            if message_id is not None:
                raise MessageNotFound(f"message {message_id} is not in conversation {self.conversation_id}")
            return []
        qs = Message.objects.using(router.db_for_read(Message)).filter(conversation_id=self.conversation_id)
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

    async def apop(self) -> ChatMessage | None:
        return await sync_to_async(self.pop)()
