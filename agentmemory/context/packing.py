"""Pure packing of a context window: which stored messages fit a budget (no database).

``pack_history`` takes metadata rows newest first and chooses the newest contiguous run of
whole units (a plain message, or a tool exchange with every result) that fits; the
``truncate_message`` helper makes the marked, shortened copies sent for oversized messages,
and ``marker_only_copy`` the copy of a tool result that holds nothing but the marker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from agentmemory.conf import app_settings
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import ChatMessage, Role
from agentmemory.store.rows import RowMeta
from agentmemory.tokens import TokenCounter, longest_fitting_prefix

#: content of the placeholder result sent for a tool call still awaiting its own (placeholder
#: mode); the copy sent carries ``metadata={"pending_tool_call": True}``, storage never does
PENDING_RESULT_PLACEHOLDER = "[no result yet: this tool call is still pending]"
TRUNCATION_MARKER = "\n[... truncated for the context window: {omitted} of {total} characters omitted ...]"
# Plain strings: rows hold their role as the stored string, and comparing it with a ``Role``
# member costs several times a string comparison (this runs for every row of every window).
_HUMAN, _AI, _TOOL = Role.HUMAN.value, Role.AI.value, Role.TOOL.value


#: positions of ``RowMeta``'s fields, for the loops that run for every row of every window
#: (``tests/test_context_gaps.py`` checks them against ``RowMeta._fields``)
_SEQ: Final = 0
_ROLE: Final = 1
_TOKENS: Final = 2
_EXCHANGE: Final = 3
_CALL_ID: Final = 4
_CALLS: Final = 5
_PLACEHOLDER: Final = 6


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
        skipped_pending: seqs of the messages of tool exchanges left out because a call
            still awaits its result (the AI message and the results already stored).
        skipped_late: seqs of results stored after the window's first message whose
            exchange is older than the window (or folded into the summary): never sent on
            their own.
        placeholders: ids of calls sent with a placeholder result (placeholder mode).
        dropped_leading: seqs dropped so that the history starts on a human message.
        capped: seqs of tool results to send as truncated copies.
        marker_only: seqs of tool results to send as marker-only copies (``marker_tokens``).
        truncate: ``(seq, tokens)`` of an oversized newest human message taken at that size.
        blocked_by_count: the blocked unit fitted the tokens but not ``max_messages``.
        rows_consumed: metadata rows taken from the input iterator.
    """

    units: list[list[RowMeta]] = field(default_factory=list)
    tokens: int = 0
    blocked: tuple[int, int] | None = None
    available_at_block: int = 0
    skipped_orphans: list[int] = field(default_factory=list)
    skipped_pending: list[int] = field(default_factory=list)
    skipped_late: list[int] = field(default_factory=list)
    placeholders: list[str] = field(default_factory=list)
    dropped_leading: list[int] = field(default_factory=list)
    capped: list[int] = field(default_factory=list)
    marker_only: list[int] = field(default_factory=list)
    truncate: tuple[int, int] | None = None
    blocked_by_count: bool = False
    rows_consumed: int = 0

    @cached_property
    def rows(self) -> list[RowMeta]:
        """The rows of ``units``, oldest first (made once: ``units`` is final when set)."""
        return [row for unit in self.units for row in unit]


def pending_placeholder(call_id: str, name: str = "") -> ChatMessage:
    """The placeholder result sent, in the copy only, for the call ``call_id`` that has no
    result yet (``AGENTMEMORY['PENDING_TOOL_CALLS'] = "placeholder"``)."""
    return ChatMessage.tool(
        PENDING_RESULT_PLACEHOLDER, tool_call_id=call_id, name=name, metadata={"pending_tool_call": True}
    )


def _effective_tokens(row: RowMeta, cap: int | None, marker_tokens: Mapping[int, int] | None = None) -> int:
    if row.role != _TOOL:
        return row.token_count
    if marker_tokens and not row.placeholder and row.seq in marker_tokens:
        return marker_tokens[row.seq]
    if cap is not None and row.token_count > cap:
        return cap
    return row.token_count


def _canonical(ai: RowMeta, results: list[RowMeta]) -> tuple[list[RowMeta], list[dict[str, Any]]]:
    """Order a tool exchange: the AI message, then its results in ``tool_calls`` order,
    wherever they were stored. Second value: the calls that have no result."""
    by_id = {r[_CALL_ID]: r for r in results}
    ordered = [ai]
    unanswered = []
    for call in ai[_CALLS]:
        result = by_id.pop(call["id"], None)
        if result is None:
            unanswered.append(call)
        else:
            ordered.append(result)
    return ordered, unanswered


def pack_history(
    rows_newest_first: Iterable[RowMeta],
    *,
    budget: int,
    max_messages: int | None = None,
    max_tool_result_tokens: int | None = None,
    truncate_oversized_human: bool = False,
    placeholder_tokens: Callable[[dict[str, Any]], int] | None = None,
    marker_tokens: Mapping[int, int] | None = None,
) -> PackResult:
    """Choose the newest contiguous run of whole units that fits ``budget`` tokens.

    A unit is a plain message or a tool exchange: an AI message with tool calls and the
    results that answer them (``exchange_seq`` = the AI message's seq), in ``tool_calls``
    order whatever order they were stored in, also when a result was stored after later
    messages. Read newest first, such a late result comes before its AI message: it is held
    until the AI message is read, and the unit costs the AI message plus its results.

    Units are taken newest first until the first that does not fit; then leading units are
    dropped until the run starts on a human message. Nothing in the middle is left out,
    except: orphaned results (answering no stored call), and exchanges whose calls are not
    all answered, because OpenAI and Anthropic reject a call without its result. Those are
    left out and reported, or, with ``placeholder_tokens``, sent with a placeholder result
    for each unanswered call. Results whose AI message lies below the rows read (older than
    the window, or folded into the summary) are never sent on their own.

    Args:
        rows_newest_first: stored metadata rows after the summary boundary, newest first.
        budget: tokens available for history (after system prompt and summary).
        max_messages: optional cap on the number of history messages.
        max_tool_result_tokens: tool results above this size count as this size (they are
            sent as truncated copies); ``None`` counts them whole.
        truncate_oversized_human: when the newest human message alone does not fit, take
            it anyway at the size left (``PackResult.truncate``), to be sent truncated.
        placeholder_tokens: cost (tokens) of the placeholder result sent for an unanswered
            call, given the call (``{"id", "name", "arguments"}``); ``None`` leaves
            exchanges with unanswered calls out.
        marker_tokens: tool results to send as copies holding only the truncation marker
            (``marker_only_copy``), by seq, with the tokens of that copy; they count at that
            size whatever ``max_tool_result_tokens`` says (``PackResult.marker_only``).
    """
    result = PackResult()
    count = 0
    tokens = 0  # of the units taken so far
    # results read before their AI message, by the seq of that AI message
    held: dict[int, list[RowMeta]] = {}
    outside: list[RowMeta] = []  # results read whose exchange does not enter the window

    newest_first_units: list[list[RowMeta]] = []
    consumed = 0
    # every row counts its stored tokens (``_effective_tokens`` without a cap or markers)
    uncapped = max_tool_result_tokens is None and not marker_tokens
    # Fields are read by position (``_SEQ`` ...): a named field of a ``RowMeta`` costs a
    # descriptor call on every access, and this loop runs for every row of every window.
    for row in rows_newest_first:
        consumed += 1
        role = row[_ROLE]
        if role == _TOOL:
            if row[_EXCHANGE] is None and not row[_PLACEHOLDER]:  # an orphan
                result.skipped_orphans.append(row[_SEQ])
            else:
                held.setdefault(row[_EXCHANGE], []).append(row)  # type: ignore[arg-type]
            continue
        if role == _AI and row[_CALLS]:
            results = held.pop(row[_SEQ], [])
            unit, unanswered = _canonical(row, results)
            # Results whose id the AI message does not hold: data written around validation.
            # The unit holds distinct results only, so when it holds as many as were read,
            # every one was placed. (By identity otherwise: comparing rows field by field
            # made an exchange of n calls cost n**2.)
            stray: list[int] = []
            if len(unit) <= len(results):
                placed = {id(r) for r in unit}
                stray = [r.seq for r in results if id(r) not in placed]
            if unanswered or stray:
                if placeholder_tokens is None or stray:
                    result.skipped_pending.extend(sorted([row.seq, *(r.seq for r in results)]))
                    continue
                unit = _with_placeholders(row, unit, unanswered, placeholder_tokens)
            if uncapped:
                cost = sum([r[_TOKENS] for r in unit])
            elif not marker_tokens and max_tool_result_tokens is not None:
                # ``_effective_tokens`` with a cap and no markers, inlined: the default
                # builder caps tool results, and this runs for every exchange of its windows.
                limit = max_tool_result_tokens
                cost = sum([limit if r[_ROLE] == _TOOL and r[_TOKENS] > limit else r[_TOKENS] for r in unit])
            else:
                cost = sum(_effective_tokens(r, max_tool_result_tokens, marker_tokens) for r in unit)
        else:
            unit = [row]
            cost = row[_TOKENS]  # not a tool result: never capped
        too_many = max_messages is not None and count + len(unit) > max_messages
        if tokens + cost > budget or too_many:
            outside.extend(unit[1:])
            result.blocked = (min(r.seq for r in unit), cost)
            result.blocked_by_count = too_many and tokens + cost <= budget
            result.available_at_block = budget - tokens
            newest_human = unit[0].role == _HUMAN and not any(u[0].role == _HUMAN for u in newest_first_units)
            room = budget - tokens
            if truncate_oversized_human and newest_human and not too_many and len(unit) == 1 and room > 0:
                newest_first_units.append(unit)
                tokens += room
                result.truncate = (unit[0].seq, room)
            break
        newest_first_units.append(unit)
        tokens += cost
        count += len(unit)

    while newest_first_units and newest_first_units[-1][0][_ROLE] != _HUMAN:
        dropped = newest_first_units.pop()
        outside.extend(dropped[1:])
        tokens -= sum(_effective_tokens(r, max_tool_result_tokens, marker_tokens) for r in dropped)
        result.dropped_leading.extend(r.seq for r in dropped if not r.placeholder)
    result.tokens = tokens
    result.rows_consumed = consumed
    result.units = list(reversed(newest_first_units))
    chosen = result.rows
    # Results of exchanges older than the window that were stored after its start.
    first = min([r[_SEQ] for r in chosen], default=0)
    outside.extend(r for rows in held.values() for r in rows)
    result.skipped_late = sorted(
        r.seq for r in outside if r.role == _TOOL and not r.placeholder and r.seq > first
    )
    result.placeholders = [r[_CALL_ID] for r in chosen if r[_PLACEHOLDER]]
    marked = marker_tokens or {}
    if marked:
        result.marker_only = [
            r.seq for r in chosen if r.role == _TOOL and not r.placeholder and r.seq in marked
        ]
    if max_tool_result_tokens is not None:
        # By position, the cheap comparisons first: the default builder caps tool results.
        result.capped = [
            r[_SEQ]
            for r in chosen
            if r[_ROLE] == _TOOL
            and r[_TOKENS] > max_tool_result_tokens
            and not r[_PLACEHOLDER]
            and r[_SEQ] not in marked
        ]
    return result


def _with_placeholders(
    ai: RowMeta,
    answered: list[RowMeta],
    unanswered: list[dict[str, Any]],
    cost: Callable[[dict[str, Any]], int],
) -> list[RowMeta]:
    """The exchange with a placeholder row for each unanswered call, in ``tool_calls`` order."""
    missing = {call["id"] for call in unanswered}
    by_id = {r.tool_call_id: r for r in answered[1:]}
    unit = [ai]
    for call in ai.tool_calls:
        if call["id"] in missing:
            unit.append(
                RowMeta(
                    seq=ai.seq,
                    role=Role.TOOL.value,
                    token_count=cost(call),
                    exchange_seq=ai.seq,
                    tool_call_id=call["id"],
                    placeholder=True,
                    name=call.get("name", ""),
                )
            )
        else:
            unit.append(by_id[call["id"]])
    return unit


def _marked_copy(message: ChatMessage, keep: int) -> ChatMessage:
    """A copy of ``message`` holding its first ``keep`` characters and the marker."""
    text = message.text
    total = len(text)
    marker = TRUNCATION_MARKER.format(omitted=total - keep, total=total)
    return _replace(message, content=text[:keep] + marker, truncated=True)


def marker_only_copy(message: ChatMessage) -> ChatMessage:
    """A copy of ``message`` whose content is the truncation marker alone
    (``TRUNCATION_MARKER``: every character of the content left out, and how many), flagged
    ``truncated``; the shortest copy ``truncate_message`` can make. Its tool call id and name
    stay, so a tool result keeps its place after its call. Storage keeps the message whole.

    Sent for tool results of a turn that does not fit even with every result cut to its
    shortest text (``ContextWindowBuilder``, ``fit_newest_turn``).
    """
    return _marked_copy(message, 0)


def truncate_message(message: ChatMessage, max_tokens: int, counter: TokenCounter) -> ChatMessage:
    """A copy of ``message`` whose content is cut, with a visible marker, so that the whole
    message costs at most ``max_tokens`` by ``counter``.

    Raises:
        ContextBudgetExceeded: not even the marker fits.
    """
    total = len(message.text)

    def candidate(keep: int) -> ChatMessage:
        return _marked_copy(message, keep)

    if counter.count_message(candidate(0)) > max_tokens:
        raise ContextBudgetExceeded(seq=message.seq, tokens=message.token_count or 0, available=max_tokens)
    return candidate(
        longest_fitting_prefix(total, max_tokens, lambda keep: counter.count_message(candidate(keep)))
    )


def _replace(message: ChatMessage, **changes: Any) -> ChatMessage:
    values = {name: getattr(message, name) for name in message.__slots__}  # type: ignore[attr-defined]
    values.update(changes)
    return ChatMessage(**values)


#: the lowest limit ``summary_token_budget`` sets (tokens): a shorter summary could hold
#: little more than its framing (the offline label alone is about 15 tokens)
MIN_SUMMARY_BUDGET_TOKENS = 64


def summary_token_budget(
    max_tokens: int, *, system_tokens: int = 0, overhead: int = 0, cap: int | None = None
) -> int:
    """The longest summary text (tokens) worth making for windows of ``max_tokens``.

    A window holds the system prompt, the summary and the history, within ``max_tokens``
    (design invariant C1), and its history must hold the turn in progress whole: the newest
    human turn is never folded (K6), and its tool loop grows with every model call. So the
    summary may take at most ``AGENTMEMORY['SUMMARY_WINDOW_SHARE']`` (0.25) of the room left
    after the system prompt, less the framing of the summary message, and never more than
    ``cap`` (``MAX_SUMMARY_TOKENS``, 1,000), nor less than ``MIN_SUMMARY_BUDGET_TOKENS``
    (64, or ``cap`` when that is lower).

    The share is measured, not derived: in the 200 tau-bench airline runs (docs/replays.md),
    98.5% of the 2,654 model calls an agent makes have a turn in progress (tool results cut
    to 64 tokens) within three quarters of what a 3,000-token window leaves beside the
    1,256-token system prompt (97% within half). With the default 10,000-token window and a
    prompt of up to 6,000 tokens, the cap is the limit and summaries are as long as before.

    Args:
        max_tokens: the window budget the summary is sent in (tokens).
        system_tokens: the system prompt sent in every window (tokens, framing included).
        overhead: what the summary message costs beyond its text (prefix and framing).
        cap: the upper limit; default ``MAX_SUMMARY_TOKENS``.

    Returns:
        The limit on the summary text (tokens, counted with ``count_text``).
    """
    conf = app_settings()
    cap = conf.MAX_SUMMARY_TOKENS if cap is None else cap
    share = int((max_tokens - system_tokens) * conf.SUMMARY_WINDOW_SHARE) - overhead
    return max(min(cap, share), min(cap, MIN_SUMMARY_BUDGET_TOKENS))
