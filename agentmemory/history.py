"""``PersistentChatHistory``: append, read, ``messages_after`` and clear, sync and async."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter

_MAX_SHORT = 255
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


#: deepest nesting accepted in tool arguments and metadata (JSON objects and arrays)
MAX_JSON_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``: PostgreSQL refuses NUL bytes and
    no database can encode a lone UTF-16 surrogate (``"\\ud800"``) as UTF-8."""
    if "\x00" in value:
        return "contains a NUL character"
    if _SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a storable JSON value, or ``None``: non-string object keys
    (they would be rewritten as strings), NaN or infinities, nesting deeper than
    ``MAX_JSON_DEPTH``, text that ``text_problem`` refuses, or a non-JSON type."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested deeper than {MAX_JSON_DEPTH} levels"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "contains NaN or an infinity"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a non-string key {key!r}"
            problem = text_problem(key) or json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"holds a {type(value).__name__}, which is not a JSON type"


def _check_json(value: Any, what: str, index: int) -> None:
    problem = json_problem(value)
    if problem:
        raise InvalidMessageError(f"{what} {problem}", index=index)


@dataclass
class _ExchangeState:
    """The open tool exchange while a batch is validated (mirrors the conversation row)."""

    open_seq: int | None
    pending: list[str]


def _coerce(message: Any, index: int) -> ChatMessage:
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(
            f"expected a ChatMessage, got {type(message).__name__} (convert provider formats with "
            "agentmemory.formats first)",
            index=index,
        )
    try:
        role = Role(message.role)
    except ValueError as exc:
        allowed = ", ".join(r.value for r in Role)
        raise InvalidMessageError(f"unknown role {message.role!r} (allowed: {allowed})", index=index) from exc
    if role is not message.role:
        message = ChatMessage(
            role=role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=message.name,
            metadata=message.metadata,
        )
    return message


def validate_message(message: ChatMessage, index: int, *, max_chars: int) -> None:
    """Check one message on its own (invariant W3); raises ``InvalidMessageError``."""
    content = message.content
    if content is not None and not isinstance(content, str):
        raise InvalidMessageError(f"content must be text or None, not {type(content).__name__}", index=index)
    if content is not None:
        problem = text_problem(content)
        if problem:
            raise InvalidMessageError(f"content {problem}", index=index)
        if len(content) > max_chars:
            raise InvalidMessageError(
                f"content has {len(content)} characters, over the maximum of {max_chars} "
                "(AGENTMEMORY['MAX_MESSAGE_CHARS'])",
                index=index,
            )
    for field_name in ("tool_call_id", "name"):
        value = getattr(message, field_name)
        if not isinstance(value, str):
            raise InvalidMessageError(f"{field_name} must be a string", index=index)
        problem = text_problem(value)
        if problem:
            raise InvalidMessageError(f"{field_name} {problem}", index=index)
        if len(value) > _MAX_SHORT:
            raise InvalidMessageError(f"{field_name} is longer than {_MAX_SHORT} characters", index=index)
    if not isinstance(message.metadata, Mapping):
        raise InvalidMessageError(
            f"metadata must be a JSON object, not {type(message.metadata).__name__}", index=index
        )
    _check_json(message.metadata, "metadata", index)
    if not isinstance(message.tool_calls, tuple | list):
        raise InvalidMessageError("tool_calls must be a list of ToolCall objects", index=index)
    role = message.role
    if role in (Role.HUMAN, Role.SYSTEM) and content is None:
        raise InvalidMessageError(f"a {role} message needs content (text, possibly empty)", index=index)
    if message.tool_calls and role is not Role.AI:
        raise InvalidMessageError(f"only ai messages carry tool calls, not {role}", index=index)
    if role is Role.AI and content is None and not message.tool_calls:
        raise InvalidMessageError("an ai message needs content or tool calls", index=index)
    if role is Role.TOOL:
        if not message.tool_call_id:
            raise InvalidMessageError(
                "a tool result needs the tool_call_id of the call it answers", index=index
            )
        if content is None:
            raise InvalidMessageError("a tool result needs content (text, possibly empty)", index=index)
    elif message.tool_call_id:
        raise InvalidMessageError(f"only tool messages carry a tool_call_id, not {role}", index=index)
    seen: set[str] = set()
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            raise InvalidMessageError("tool_calls must hold ToolCall objects", index=index)
        if not isinstance(call.id, str) or not call.id or len(call.id) > _MAX_SHORT or text_problem(call.id):
            raise InvalidMessageError(f"tool call id {call.id!r} is empty, too long or not text", index=index)
        if call.id in seen:
            raise InvalidMessageError(f"tool call id {call.id!r} appears twice", index=index)
        seen.add(call.id)
        if (
            not isinstance(call.name, str)
            or not call.name
            or len(call.name) > _MAX_SHORT
            or text_problem(call.name)
        ):
            raise InvalidMessageError(
                f"tool call {call.id!r} needs a name of at most {_MAX_SHORT} characters of text", index=index
            )
        if not isinstance(call.arguments, Mapping):
            raise InvalidMessageError(
                f"arguments of tool call {call.id!r} must be a JSON object, "
                f"not {type(call.arguments).__name__}",
                index=index,
            )
        _check_json(call.arguments, f"arguments of tool call {call.id!r}", index)


def _link_exchange(
    message: ChatMessage, seq: int, index: int, state: _ExchangeState, *, strict: bool
) -> int | None:
    """Advance the open tool exchange; return the ``exchange_seq`` for this message.

    Strict mode refuses a tool result that answers no earlier unanswered call and any other
    message while calls are unanswered (OpenAI and Anthropic both reject such histories).
    Relaxed mode (legacy imports) stores such results as orphans, which context windows skip,
    and joins AI messages that call tools before earlier calls are answered into one
    exchange (bug case BUG-05).
    """
    if message.role is Role.AI and message.tool_calls:
        ids = [c.id for c in message.tool_calls]
        clash = set(ids) & set(state.pending)
        if clash:
            raise InvalidMessageError(
                f"tool call id(s) {sorted(clash)} are already awaiting results", index=index
            )
        if state.pending and strict:
            # OpenAI and Anthropic want the results right after the message that called.
            raise InvalidMessageError(
                f"tool call(s) {state.pending} still await results; append them before another ai "
                "message (or cancel_pending_tool_calls())",
                index=index,
            )
        if state.open_seq is None:
            state.open_seq = seq
        state.pending.extend(ids)
        return state.open_seq
    if message.role is Role.TOOL:
        if message.tool_call_id in state.pending:
            state.pending.remove(message.tool_call_id)
            exchange = state.open_seq
            if not state.pending:
                state.open_seq = None
            return exchange
        if strict:
            raise InvalidMessageError(
                f"tool result for {message.tool_call_id!r} answers no earlier unanswered tool call "
                "(import legacy history with validate_tool_pairs=False to keep it as an orphan)",
                index=index,
            )
        return None
    if state.pending:
        if strict:
            raise InvalidMessageError(
                f"tool call(s) {state.pending} still await results; append them before a {message.role} "
                "message (or cancel_pending_tool_calls())",
                index=index,
            )
        state.pending = []
        state.open_seq = None
    return None


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
        batch = [_coerce(m, i) for i, m in enumerate(messages)]
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
            state = _ExchangeState(conv.open_exchange_seq, list(conv.pending_tool_call_ids or []))
            rows = []
            seq = conv.last_seq
            humans = 0
            has_system_prompt = conv.has_system_prompt
            for i, (message, tokens) in enumerate(zip(batch, counts, strict=True)):
                seq += 1
                exchange_seq = _link_exchange(message, seq, i, state, strict=strict)
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
