"""``ContextWindowBuilder``: the token-limited context for one model call, read from the ORM.

A window is the pinned system prompt, the current summary (a second system message), then
the newest contiguous run of history that fits, starting on a human message, with every tool
exchange whole (design invariants C1-C8). The builder reads the conversation row, the pinned
system prompt, the metadata of the newest messages (stored token counts, newest first on the
``(conversation, seq)`` index, in pages sized from the conversation's average message size)
and finally the content of the rows it returns: a constant number of queries, whatever the
length of the conversation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound
from agentmemory.history import resolve_conversation_id
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter

TRUNCATION_MARKER = "\n[... truncated for the context window: {omitted} of {total} characters omitted ...]"
_META_FIELDS = ("seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls")


@dataclass(frozen=True, slots=True)
class RowMeta:
    """What the builder knows of a stored message before reading its content."""

    seq: int
    role: str
    token_count: int
    exchange_seq: int | None = None
    tool_call_id: str = ""
    tool_calls: Sequence[dict[str, Any]] = ()

    @property
    def is_orphan(self) -> bool:
        return self.role == Role.TOOL and self.exchange_seq is None


@dataclass
class PackResult:
    """Outcome of ``pack_history`` (pure logic, no database).

    Attributes:
        units: the chosen units, oldest first, each in canonical order (an AI message, then
            its results in ``tool_calls`` order).
        tokens: tokens of the chosen units, tool results counted at their capped size.
        blocked: ``(seq, tokens)`` of the newest unit that did not fit, if any.
        available_at_block: tokens that were left for the blocked unit.
        skipped_orphans: seqs of tool results that answer no stored call.
        skipped_incomplete: seqs of tool exchanges whose calls are not all answered.
        dropped_leading: seqs dropped so that the history starts on a human message.
        capped: seqs of tool results to send as truncated copies.
        truncate: ``(seq, tokens)`` of an oversized newest human message taken at that size.
        rows_consumed: metadata rows taken from the input iterator.
    """

    units: list[list[RowMeta]] = field(default_factory=list)
    tokens: int = 0
    blocked: tuple[int, int] | None = None
    available_at_block: int = 0
    skipped_orphans: list[int] = field(default_factory=list)
    skipped_incomplete: list[int] = field(default_factory=list)
    dropped_leading: list[int] = field(default_factory=list)
    capped: list[int] = field(default_factory=list)
    truncate: tuple[int, int] | None = None
    rows_consumed: int = 0

    @property
    def rows(self) -> list[RowMeta]:
        return [row for unit in self.units for row in unit]


def _effective_tokens(row: RowMeta, cap: int | None) -> int:
    if cap is not None and row.role == Role.TOOL and row.token_count > cap:
        return cap
    return row.token_count


def _canonical(unit_rows: list[RowMeta]) -> tuple[list[RowMeta], bool]:
    """Order a tool exchange: each AI message followed by its results in ``tool_calls``
    order (invariant W4); second value is False when some call has no result."""
    ai_rows = sorted((r for r in unit_rows if r.role == Role.AI), key=lambda r: r.seq)
    results = {r.tool_call_id: r for r in unit_rows if r.role == Role.TOOL}
    ordered: list[RowMeta] = []
    complete = True
    for ai in ai_rows:
        ordered.append(ai)
        for call in ai.tool_calls:
            result = results.pop(call["id"], None)
            if result is None:
                complete = False
            else:
                ordered.append(result)
    # Results left over belong to no AI message of the unit: data written around validation.
    return ordered, complete and not results


def pack_history(
    rows_newest_first: Iterator[RowMeta] | Sequence[RowMeta],
    *,
    budget: int,
    max_messages: int | None = None,
    max_tool_result_tokens: int | None = None,
    truncate_oversized_human: bool = False,
) -> PackResult:
    """Choose the newest contiguous run of whole units that fits ``budget`` tokens.

    A unit is a plain message or a whole tool exchange (stored with the same
    ``exchange_seq``). Units are taken newest first until the first that does not fit; then
    leading units are dropped until the run starts on a human message. Orphaned results and
    exchanges with unanswered calls are skipped and reported (invariants C1-C5; the rules
    are spelled out in shared/data/bug-cases.md).

    Args:
        rows_newest_first: stored metadata rows after the summary boundary, newest first.
        budget: tokens available for history (after system prompt and summary).
        max_messages: optional cap on the number of history messages.
        max_tool_result_tokens: tool results above this size count as this size (they are
            sent as truncated copies); ``None`` counts them whole.
        truncate_oversized_human: when the newest human message alone does not fit, take
            it anyway at the size left (``PackResult.truncate``), to be sent truncated.
    """
    result = PackResult()
    it = iter(rows_newest_first)
    pushback: list[RowMeta] = []
    count = 0

    def next_row() -> RowMeta | None:
        if pushback:
            return pushback.pop()
        row = next(it, None)
        if row is not None:
            result.rows_consumed += 1
        return row

    newest_first_units: list[list[RowMeta]] = []
    while True:
        row = next_row()
        if row is None:
            break
        if row.is_orphan:
            result.skipped_orphans.append(row.seq)
            continue
        if row.exchange_seq is None:
            unit = [row]
            complete = True
        else:
            start = row.exchange_seq
            members = [row]
            while members[-1].seq > start:
                prev = next_row()
                if prev is None:
                    break
                if prev.is_orphan:
                    result.skipped_orphans.append(prev.seq)
                    continue
                if prev.exchange_seq != start:
                    pushback.append(prev)
                    break
                members.append(prev)
            unit, complete = _canonical(members)
            if members[-1].seq != start:
                complete = False
            if not complete:
                result.skipped_incomplete.extend(sorted(m.seq for m in members))
                continue
        cost = sum(_effective_tokens(r, max_tool_result_tokens) for r in unit)
        too_many = max_messages is not None and count + len(unit) > max_messages
        if result.tokens + cost > budget or too_many:
            result.blocked = (min(r.seq for r in unit), cost)
            result.available_at_block = budget - result.tokens
            newest_human = unit[0].role == Role.HUMAN and not any(
                u[0].role == Role.HUMAN for u in newest_first_units
            )
            room = budget - result.tokens
            if truncate_oversized_human and newest_human and not too_many and len(unit) == 1 and room > 0:
                newest_first_units.append(unit)
                result.tokens += room
                result.truncate = (unit[0].seq, room)
            break
        newest_first_units.append(unit)
        result.tokens += cost
        count += len(unit)

    while newest_first_units and newest_first_units[-1][0].role != Role.HUMAN:
        dropped = newest_first_units.pop()
        result.tokens -= sum(_effective_tokens(r, max_tool_result_tokens) for r in dropped)
        result.dropped_leading.extend(r.seq for r in dropped)
    result.units = list(reversed(newest_first_units))
    if max_tool_result_tokens is not None:
        result.capped = [
            r.seq for r in result.rows if r.role == Role.TOOL and r.token_count > max_tool_result_tokens
        ]
    return result


def truncate_message(message: ChatMessage, max_tokens: int, counter: TokenCounter) -> ChatMessage:
    """A copy of ``message`` whose content is cut, with a visible marker, so that the whole
    message costs at most ``max_tokens`` by ``counter``.

    Raises:
        ContextBudgetExceeded: not even the marker fits.
    """
    text = message.text
    total = len(text)

    def candidate(keep: int) -> ChatMessage:
        marker = TRUNCATION_MARKER.format(omitted=total - keep, total=total)
        return _replace(message, content=text[:keep] + marker, truncated=True)

    if counter.count_message(candidate(0)) > max_tokens:
        raise ContextBudgetExceeded(seq=message.seq, tokens=message.token_count or 0, available=max_tokens)
    # A token covers at least one character, and rarely more than a few dozen: bound the
    # search so that counting stays cheap on multi-megabyte tool output.
    lo, hi = 0, min(total, max(64, max_tokens * 32))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count_message(candidate(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return candidate(lo)


def _replace(message: ChatMessage, **changes: Any) -> ChatMessage:
    values = {name: getattr(message, name) for name in message.__slots__}  # type: ignore[attr-defined]
    values.update(changes)
    return ChatMessage(**values)


@dataclass(frozen=True)
class ContextWindow:
    """What to send for one model call, with its accounting.

    Attributes:
        messages: pinned system prompt, summary message, history; oldest first.
        max_tokens: the budget it was built for (tokens).
        system_tokens, summary_tokens, history_tokens: tokens of each part.
        first_seq, last_seq: seqs of the oldest and newest history messages (None if empty).
        summary_id, summary_through_seq: the summary used, if any.
        skipped_orphans: seqs of stored tool results left out because they answer no call.
        skipped_incomplete: seqs of tool exchanges left out because calls lack results.
        truncated: seqs of messages sent as truncated copies (storage keeps them whole).
        rows_read: metadata rows read from the message table.
    """

    messages: list[ChatMessage]
    max_tokens: int
    system_tokens: int = 0
    summary_tokens: int = 0
    history_tokens: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    summary_id: int | None = None
    summary_through_seq: int | None = None
    skipped_orphans: tuple[int, ...] = ()
    skipped_incomplete: tuple[int, ...] = ()
    truncated: tuple[int, ...] = ()
    rows_read: int = 0

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.summary_tokens + self.history_tokens

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: messages that carry a seq, excluding the pinned system prompt."""
        return [m for m in self.messages if m.seq is not None and not (m.seq == 1 and m.role is Role.SYSTEM)]


class ContextWindowBuilder:
    """Builds ``ContextWindow``s for one conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid.
        token_counter: counts what is not stored (summary message, truncated copies, an
            explicit system prompt); defaults to ``AGENTMEMORY['TOKEN_COUNTER']``. Stored
            messages are budgeted with their stored counts.
        system_prompt: the agent's system prompt. When given it replaces a stored leading
            system message; otherwise a stored system message at seq 1 is pinned.
        max_tool_result_tokens: cap on one tool result in the copy sent (tokens);
            defaults to ``AGENTMEMORY['MAX_TOOL_RESULT_TOKENS']``; ``None`` disables.
        oversized_message_policy: ``"error"`` (raise ``ContextBudgetExceeded``) or
            ``"truncate"`` (send a marked, truncated copy) when the newest human message
            cannot fit; defaults to ``AGENTMEMORY['OVERSIZED_MESSAGE_POLICY']``.
    """

    _UNSET: Any = object()

    def __init__(
        self,
        conversation: Conversation | int | str | UUID,
        *,
        token_counter: TokenCounter | None = None,
        system_prompt: str | None = None,
        max_tool_result_tokens: int | None = _UNSET,
        oversized_message_policy: str | None = None,
    ) -> None:
        conf = app_settings()
        self.conversation_id = resolve_conversation_id(conversation)
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        self.system_prompt = system_prompt
        self.max_tool_result_tokens = (
            conf.MAX_TOOL_RESULT_TOKENS if max_tool_result_tokens is self._UNSET else max_tool_result_tokens
        )
        self.oversized_message_policy = oversized_message_policy or conf.OVERSIZED_MESSAGE_POLICY
        if self.oversized_message_policy not in ("error", "truncate"):
            raise ValueError("oversized_message_policy must be 'error' or 'truncate'")

    def build(self, max_tokens: int | None = None, *, max_messages: int | None = None) -> ContextWindow:
        """Assemble the context window.

        Args:
            max_tokens: budget for everything returned (tokens); defaults to
                ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` (10,000).
            max_messages: optional cap on the number of history messages.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
            ContextBudgetExceeded: the newest human message cannot fit (policy "error").
        """
        if max_tokens is None:
            max_tokens = app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        if max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        if max_messages is not None and max_messages < 0:
            raise ValueError("max_messages must be >= 0")
        conv = (
            Conversation.objects.select_related("summary")
            .only(
                "id",
                "message_count",
                "human_message_count",
                "stored_tokens",
                "has_system_prompt",
                "summary__id",
                "summary__text",
                "summary__through_seq",
                "summary__token_count",
                "summary__token_counter",
                "summary__human_messages_covered",
            )
            .filter(pk=self.conversation_id)
            .first()
        )
        if conv is None:
            raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
        counter = self.token_counter

        messages: list[ChatMessage] = []
        system_tokens = 0
        if self.system_prompt is not None:
            pinned = ChatMessage.system(self.system_prompt)
            system_tokens = counter.count_message(pinned)
            messages.append(pinned)
        elif conv.has_system_prompt:
            row = Message.objects.filter(conversation_id=conv.pk, seq=1).first()
            if row is not None:
                pinned = row.to_chat_message()
                system_tokens = row.token_count
                messages.append(pinned)

        summary = conv.summary
        summary_tokens = 0
        if summary is not None:
            summary_message = ChatMessage.system(
                app_settings().SUMMARY_MESSAGE_PREFIX + summary.text, metadata={"summary_id": summary.pk}
            )
            summary_tokens = (
                summary.token_count
                if summary.token_counter == counter.id
                else counter.count_message(summary_message)
            )
            messages.append(summary_message)

        floor_seq = max(summary.through_seq if summary else 0, 1 if conv.has_system_prompt else 0)
        humans_after_floor = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        available = max_tokens - system_tokens - summary_tokens
        reader = _TailReader(conv.pk, floor_seq, _first_page_size(available, conv, max_messages))
        packed = pack_history(
            reader,
            budget=available,
            max_messages=max_messages,
            max_tool_result_tokens=self.max_tool_result_tokens,
            truncate_oversized_human=self.oversized_message_policy == "truncate",
        )

        has_human = any(unit[0].role == Role.HUMAN for unit in packed.units)
        if not has_human and humans_after_floor > 0 and (max_messages is None or max_messages > 0):
            blocked_seq, blocked_tokens = packed.blocked or (None, 0)
            raise ContextBudgetExceeded(seq=blocked_seq, tokens=blocked_tokens, available=packed.available_at_block)
        truncate_newest = packed.truncate

        rows = packed.rows
        contents: dict[int, Message] = {}
        if rows:
            first, last = rows[0].seq, rows[-1].seq
            lo, hi = min(first, last), max(r.seq for r in rows)
            wanted = {r.seq for r in rows}
            for message in Message.objects.filter(conversation_id=conv.pk, seq__gte=lo, seq__lte=hi).only(
                "id", "seq", "role", "content", "tool_calls", "tool_call_id", "name", "token_count"
            ):
                if message.seq in wanted:
                    contents[message.seq] = message

        history: list[ChatMessage] = []
        history_tokens = 0
        truncated: list[int] = []
        cap = self.max_tool_result_tokens
        for row in rows:
            stored = contents.get(row.seq)
            if stored is None:  # deleted between the two reads (conversation cleared)
                continue
            chat = ChatMessage(
                role=Role(stored.role),
                content=stored.content,
                tool_calls=tuple(ToolCall.from_dict(c) for c in stored.tool_calls or ()),
                tool_call_id=stored.tool_call_id,
                name=stored.name,
                seq=stored.seq,
                id=stored.pk,
                token_count=stored.token_count,
            )
            tokens = stored.token_count
            if truncate_newest and row.seq == truncate_newest[0]:
                chat = truncate_message(chat, truncate_newest[1], counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            elif cap is not None and row.role == Role.TOOL and stored.token_count > cap:
                chat = truncate_message(chat, cap, counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            history.append(chat)
            history_tokens += tokens
        messages.extend(history)

        window = ContextWindow(
            messages=messages,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            summary_tokens=summary_tokens,
            history_tokens=history_tokens,
            first_seq=history[0].seq if history else None,
            last_seq=history[-1].seq if history else None,
            summary_id=summary.pk if summary else None,
            summary_through_seq=summary.through_seq if summary else None,
            skipped_orphans=tuple(sorted(packed.skipped_orphans)),
            skipped_incomplete=tuple(sorted(packed.skipped_incomplete)),
            truncated=tuple(truncated),
            rows_read=reader.rows_read,
        )
        signals.context_built.send(sender=ContextWindowBuilder, conversation_id=conv.pk, window=window)
        return window

    async def abuild(self, max_tokens: int | None = None, *, max_messages: int | None = None) -> ContextWindow:
        """``build`` for async code: the ORM work runs in a worker thread, never on the event
        loop (bug report langchain-ai/langchain#23716)."""
        return await sync_to_async(self.build)(max_tokens, max_messages=max_messages)


def _first_page_size(budget: int, conv: Conversation, max_messages: int | None) -> int:
    """Rows to read first: enough for ``budget`` at the conversation's average message size,
    with a 1.5x margin; later pages double."""
    if conv.message_count <= 0:
        size = 16
    else:
        average = max(1.0, conv.stored_tokens / conv.message_count)
        size = max(16, math.ceil(max(budget, 0) / average * 1.5) + 8)
    if max_messages is not None:
        size = min(size, max_messages + 16)
    return size


class _TailReader:
    """Iterates metadata rows newest first, one page (one query) at a time."""

    def __init__(self, conversation_id: int, floor_seq: int, first_page: int) -> None:
        self.conversation_id = conversation_id
        self.floor_seq = floor_seq
        self.page_size = first_page
        self.rows_read = 0

    def __iter__(self) -> Iterator[RowMeta]:
        upper: int | None = None
        size = self.page_size
        while True:
            qs = Message.objects.filter(conversation_id=self.conversation_id, seq__gt=self.floor_seq)
            if upper is not None:
                qs = qs.filter(seq__lt=upper)
            page = list(qs.order_by("-seq").values_list(*_META_FIELDS)[:size])
            self.rows_read += len(page)
            for values in page:
                yield RowMeta(*values)
            if len(page) < size:
                return
            upper = page[-1][0]
            size *= 2
