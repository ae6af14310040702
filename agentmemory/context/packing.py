"""Pure packing of a context window: which stored messages fit a budget (no database).

``pack_history`` takes metadata rows newest first and chooses the newest contiguous run of
whole units (a plain message, or a tool exchange with every result) that fits; the
``truncate_message`` helper makes the marked, shortened copies sent for oversized messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import ChatMessage, Role
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
        blocked_by_count: the blocked unit fitted the tokens but not ``max_messages``.
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
    blocked_by_count: bool = False
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
    rows_newest_first: Iterable[RowMeta],
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
            result.blocked_by_count = too_many and result.tokens + cost <= budget
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
