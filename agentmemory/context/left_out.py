"""What a window leaves in neither itself nor the summary, for ``ContextWindowBuilder``: the
lookups that say it when the window's own rows do not (the gap probe, or a count of the
rows), why it is left out, and the report (log and ``messages_left_out``).

``LeftOutReport`` is the part of ``ContextWindowBuilder`` that does it; the arithmetic over
the conversation's counters is ``agentmemory.context.gaps`` (no database access), the reads
are ``agentmemory.store.gap`` and ``agentmemory.store.window``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agentmemory.context.gaps import (
    _NO_SEQ,
    REASON_NO_COMPACTOR,
    REASON_NOT_CLOSED,
    REASON_NOT_REQUESTED,
    REASON_SUMMARY_CUT,
    _derive_gap,
    _GapState,
    probe_from_head,
    report_left_out,
)
from agentmemory.context.packing import PackResult
from agentmemory.context.window import MAX_LISTED_SEQS, NO_UNCOVERED, ContextWindow, UncoveredMessages
from agentmemory.store.gap import read_gap_probe
from agentmemory.store.rows import ConversationRow
from agentmemory.store.window import read_uncovered

if TYPE_CHECKING:

    class _Builder(Protocol):
        """What ``LeftOutReport``'s methods use of ``ContextWindowBuilder``."""

        _gap_state: _GapState | None

        @property
        def signal_sender(self) -> type: ...
        @property
        def conversation_id(self) -> int: ...
        @property
        def gap_policy(self) -> str: ...
        def _report_left_out(self, window: ContextWindow, reason: str) -> None: ...
        def _gap(
            self, using: str, *, after: int, before: int, pending_exchanges: tuple[int, ...]
        ) -> UncoveredMessages: ...


class LeftOutReport:
    """The part of ``ContextWindowBuilder`` that works out and reports what a window leaves
    in neither itself nor the summary (``ContextWindow.uncovered``)."""

    def left_out_reason(
        self: _Builder, window: ContextWindow, *, summary_cut: bool, compaction: Any = None
    ) -> str:
        """Why ``window`` leaves stored messages in neither itself nor the summary (the
        ``reason`` of ``messages_left_out``; ``""`` when it leaves none): the summary cut
        for the turn in progress, a compaction asked for (``compaction``, the
        ``request_compaction`` result) that did not cover them, no compactor for policy
        "close", or policy "report"."""
        if not window.uncovered:
            return ""
        if summary_cut:
            # Left out beside the turn in progress: compaction cannot help, it never folds
            # the newest turn.
            return REASON_SUMMARY_CUT
        if compaction is not None:
            error = getattr(compaction, "error", None)
            return f"{REASON_NOT_CLOSED}: {error}" if error else REASON_NOT_CLOSED
        if self.gap_policy == "close":
            return REASON_NO_COMPACTOR
        return REASON_NOT_REQUESTED

    def report(self: _Builder, window: ContextWindow, reason: str) -> ContextWindow:
        """Report what ``window`` leaves out (``reason``: ``left_out_reason``; the log and
        ``messages_left_out``) and return ``window``."""
        if window.uncovered:
            self._report_left_out(window, reason)
        return window

    def _report_left_out(self: _Builder, window: ContextWindow, reason: str) -> None:
        report_left_out(self.signal_sender, self.conversation_id, window, reason)

    def _uncovered_after(
        self: _Builder,
        packed: PackResult,
        using: str,
        floor_seq: int,
        conv: ConversationRow,
        first_seq: int | None,
    ) -> UncoveredMessages:
        """What the window whose oldest history seq is ``first_seq`` leaves in neither
        itself nor the summary (``ContextWindow.uncovered``; ``NO_UNCOVERED`` for none):
        nothing to look up when packing read every row down to the floor (nothing blocked
        it) and dropped nothing older than the window but waiting exchanges and orphans;
        otherwise ``_gap`` works it out."""
        before = first_seq if first_seq is not None else _NO_SEQ
        if packed.blocked is None and not any(seq < before for seq in packed.dropped_leading):
            return NO_UNCOVERED
        uncovered = self._gap(using, after=floor_seq, before=before, pending_exchanges=conv.pending_exchanges)
        return uncovered if uncovered.count else NO_UNCOVERED

    def _gap(
        self: _Builder, using: str, *, after: int, before: int, pending_exchanges: tuple[int, ...]
    ) -> UncoveredMessages:
        """The stored messages with ``after < seq < before`` (``before``: the window's
        oldest history seq), less orphaned tool results and the messages of the tool
        exchanges started at ``pending_exchanges``: what the window leaves in neither
        itself nor the summary.

        Worked out from the conversation's counters (``message_count``, ``stored_tokens``),
        the summary's ``tokens_covered`` and the rows the window read, with the few index
        lookups the head statement made beside them (``probe_from_head``), or, where those
        do not say it all, one statement of them (``read_gap_probe``): the cost does not
        grow with the number of messages left out. Where the counters cannot say (seqs
        with holes, which only an imported document can leave; a summary whose span does
        not start the conversation; a waiting tool exchange in the gap that already has
        results), one statement counts the gap instead (``read_uncovered``), reading it."""
        state = self._gap_state
        assert state is not None  # set by ``_assemble`` before it asks
        relevant = [seq for seq in pending_exchanges if seq < before]
        probe = probe_from_head(state, before=before, pending_exchanges=relevant) or read_gap_probe(
            using,
            self.conversation_id,
            before=before,
            summary_id=state.summary.pk if state.summary is not None else None,
            pending_exchanges=relevant,
            pinned_seq=state.conv.pinned_seq,
            pinned_last_seq=state.conv.pinned_through or None,
        )
        derived = _derive_gap(state, probe, after=after, before=before, pending_exchanges=relevant)
        if derived is not None:
            return derived
        count, tokens, seqs = read_uncovered(
            using,
            self.conversation_id,
            after=after,
            before=before,
            pending_exchanges=sorted(set(pending_exchanges)),
            listed=MAX_LISTED_SEQS,
        )
        if not count:
            return NO_UNCOVERED
        return UncoveredMessages(count, tokens, tuple(reversed(seqs)))
