"""What a window leaves in neither itself nor the summary, worked out from the
conversation's counters and the gap probe's few rows (``agentmemory.store.window``), not by
reading the messages left out. ``ContextWindowBuilder._gap`` (``left_out.py``) falls back to
counting the rows where the counters cannot say. No database access.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agentmemory import signals
from agentmemory.context.packing import _SEQ, _TOKENS
from agentmemory.context.window import NO_UNCOVERED, ContextWindow, UncoveredMessages
from agentmemory.store.gap import GapProbe
from agentmemory.store.rows import ConversationRow, RowMeta, SummaryRow
from agentmemory.store.window import WindowHead

_NO_SEQ = 2**62


@dataclass(frozen=True, slots=True)
class _GapState:
    """What a build read that the gap accounting needs: the conversation's counters, the
    summary, the newest stored seq and every tail row read (newest first)."""

    conv: ConversationRow
    summary: SummaryRow | None
    newest_seq: int | None
    rows_seen: list[RowMeta]
    #: what the head statement read (``probe_from_head``)
    head: WindowHead | None = None


def probe_from_head(state: _GapState, *, before: int, pending_exchanges: list[int]) -> GapProbe | None:
    """What the gap probe (``agentmemory.store.gap.read_gap_probe``) would find, from the
    rows the head statement read with the window, or ``None`` when they do not say it all
    (the caller then runs the probe): AI messages with calls still waiting that are older
    than the window (``pending_exchanges``), more orphaned tool results than the head
    statement lists, a pinned prompt not read (an explicit ``system_prompt``), or a summary
    other than the stored one (a custom compactor's).

    The common case, a window with no waiting calls behind it, so costs no statement of its
    own beside the window's."""
    head = state.head
    if head is None or pending_exchanges or head.orphans is None:
        return None
    pinned_tokens = None
    if state.conv.has_system_prompt:
        if not head.pinned:
            return None
        pinned_tokens = sum(m.token_count or 0 for m in head.pinned)
    summary = state.summary
    first = covered = None
    if summary is not None:
        if head.summary is None or head.summary.pk != summary.pk:
            return None
        first, covered = head.summary_first_seq, head.summary_tokens_covered
    orphans = tuple(orphan for orphan in head.orphans if orphan[0] < before)
    return GapProbe(head.first_seq, pinned_tokens, first, covered, orphans, ())


def _derive_gap(
    state: _GapState, probe: GapProbe, *, after: int, before: int, pending_exchanges: list[int]
) -> UncoveredMessages | None:
    """The uncovered messages with ``after < seq < before`` from counters and the probe, or
    ``None`` when the counters cannot tell them (the caller then counts the rows).

    The messages present hold the seqs ``probe.first_seq..newest_seq`` without a hole when
    their number is ``message_count`` (appends hand out consecutive seqs, and ``clear()``
    deletes every message); then the gap holds every seq of its span. Its tokens are
    ``stored_tokens`` less those at or below ``after`` (the pinned run's, and the
    summary's ``tokens_covered``) and those from ``before`` on (rows the window read).
    """
    conv, newest, first = state.conv, state.newest_seq, probe.first_seq
    if newest is None or first is None or newest - first + 1 != conv.message_count:
        return None
    pinned_tokens = probe.pinned_tokens if conv.has_system_prompt else None
    if conv.has_system_prompt and pinned_tokens is None:
        return None  # the flag and the rows disagree
    summary = state.summary
    pinned_floor = conv.pinned_through
    # Tokens of the messages at or below ``after``.
    if after <= 0:
        below = 0
    elif after == pinned_floor:
        below = pinned_tokens or 0  # the pinned run alone
    elif summary is not None and after == summary.through_seq and probe.summary_first_seq is not None:
        start = probe.summary_first_seq
        if start > max(first, pinned_floor + 1):
            return None  # messages before the summary's span that it does not count
        if any(start <= seq <= after for seq, _ in probe.orphans):
            # Compaction leaves orphans out of ``tokens_covered``, ``recount_tokens``
            # counts them in: which one made this figure cannot be told.
            return None
        below = probe.summary_tokens_covered or 0
        if pinned_tokens is not None and start > pinned_floor:
            below += pinned_tokens
    else:
        return None
    lo, hi = max(after + 1, first), min(before - 1, newest)
    if hi < lo:
        return NO_UNCOVERED
    count = hi - lo + 1
    # The window read every row from ``before`` on (the reader goes newest first).
    # (``RowMeta`` fields by position: one pass over every row read, in every reported build.)
    tokens = conv.stored_tokens - below - sum([r[_TOKENS] for r in state.rows_seen if r[_SEQ] >= before])
    excluded: set[int] = set()
    for seq, row_tokens in probe.orphans:
        if seq > after:
            excluded.add(seq)
            tokens -= row_tokens
    if pending_exchanges:
        found = {seq: (row_tokens, calls) for seq, row_tokens, calls in probe.pending}
        waiting = conv.pending_call_seqs
        for seq in pending_exchanges:
            if seq not in found:
                return None  # pending calls name an AI message that is not stored
            row_tokens, calls = found[seq]
            if calls > waiting.count(seq) and max(seq, after) + 1 < before:
                return None  # some of its results are stored, maybe inside the gap
            if lo <= seq <= hi:
                excluded.add(seq)
                tokens -= row_tokens
    count -= len(excluded)
    if count < 0 or tokens < 0:
        return None  # counters changed under the read (a concurrent append or clear)
    if count == 0:
        return NO_UNCOVERED
    return UncoveredMessages.from_span(count, tokens, lo, hi, frozenset(excluded))


logger = logging.getLogger("agentmemory.context")

#: ``reason`` values of the ``messages_left_out`` signal
REASON_NOT_CLOSED = "compaction did not cover them"
REASON_NO_COMPACTOR = "no memory compactor"
REASON_NOT_REQUESTED = "compaction not requested (gap policy 'report')"
REASON_SUMMARY_CUT = "the summary was left out to make room for the turn in progress"


def report_left_out(sender: Any, conversation_id: int, window: ContextWindow, reason: str) -> None:
    """Log what ``window`` leaves in neither itself nor the summary (INFO for gap policy
    "report", else WARNING) and send ``messages_left_out`` from ``sender``."""
    uncovered = window.uncovered
    level = logging.INFO if reason == REASON_NOT_REQUESTED else logging.WARNING
    if logger.isEnabledFor(level):
        # Guarded: the arguments cost more than the call when the level is off (gap policy
        # "report" logs at INFO, off by default), which is every default build with a gap.
        bounds = uncovered.seq_range
        logger.log(
            level,
            "context window of conversation %s leaves %d stored messages (%d tokens, seqs %s..%s) "
            "in neither the window nor the summary: %s",
            conversation_id,
            uncovered.count,
            uncovered.tokens,
            bounds[0] if bounds else "-",
            bounds[1] if bounds else "-",
            reason,
        )
    signal = signals.messages_left_out
    if not signal.receivers:
        return  # ``Signal.send`` returns at once too: its arguments are not worked out
    signal.send(
        sender=sender,
        conversation_id=conversation_id,
        window=window,
        uncovered=uncovered,
        messages_removed=uncovered.count,
        messages_remaining=len(window.history),
        reason=reason,
    )
