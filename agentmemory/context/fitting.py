"""Fitting the turn in progress into a window, and the history messages sent for a packing.

The parts of ``ContextWindowBuilder`` that decide how a turn that does not fit is sent
(tool results cut to one size, down to ``MIN_FITTED_TOOL_RESULT_TOKENS``; the oldest as the
truncation marker alone) and which copies go out for the rows packed. No database access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentmemory.context.packing import (
    _SEQ,
    RowMeta,
    _replace,
    marker_only_copy,
    pending_placeholder,
    truncate_message,
)
from agentmemory.exceptions import TurnTooLarge
from agentmemory.messages import ChatMessage, Role
from agentmemory.tokens import TokenCounter

_HUMAN, _TOOL, _AI = Role.HUMAN.value, Role.TOOL.value, Role.AI.value

#: the shortest truncated copy of a tool result sent to fit a tool loop into the window
#: (tokens): below it the marker alone would be most of the copy (a bare marked copy of a
#: tau-bench result costs 45 to 49 tokens by the cl100k tokenizer, id and name included)
MIN_FITTED_TOOL_RESULT_TOKENS = 64

#: the shortest cut of the summary sent beside a turn in progress (tokens): below it the
#: prefix and the marker would be most of it
MIN_CUT_SUMMARY_TOKENS = 64


def _newest_turn(source: Iterator[RowMeta], seen: list[RowMeta]) -> list[RowMeta]:
    """The rows of the newest turn, newest first: what packing read, then more from
    ``source`` until the newest human message; empty when there is none."""
    for index, row in enumerate(seen):
        if row.role == Role.HUMAN:
            return seen[: index + 1]
    for row in source:
        if row.role == Role.HUMAN:
            return seen
    return []


def _fitting_cap(turn: list[RowMeta], budget: int, cap: int) -> int | None:
    """The largest size (tokens, at most ``cap``) to cut the turn's tool results to so that
    the whole turn fits ``budget``, by water-filling: results smaller than the size are
    sent whole. ``None`` when the size would be under ``MIN_FITTED_TOOL_RESULT_TOKENS``."""
    results = sorted(min(r.token_count, cap) for r in turn if r.role == Role.TOOL and not r.is_orphan)
    if not results:
        return None
    room = budget - sum(r.token_count for r in turn if r.role != Role.TOOL)
    for index, tokens in enumerate(results):
        left = len(results) - index
        if tokens * left > room:
            size = room // left
            return size if size >= MIN_FITTED_TOOL_RESULT_TOKENS else None
        room -= tokens
    return None  # everything fits at the current cap: something else blocks


def _placeholders_cost(turn: list[RowMeta], cost: Callable[[dict[str, Any]], int] | None) -> int:
    """Tokens of the placeholder results sent for the turn's unanswered calls (0 when
    ``cost`` is ``None``: such exchanges are left out). Rows are those of ``_newest_turn``."""
    if cost is None:
        return 0
    answered = {(r.exchange_seq, r.tool_call_id) for r in turn if r.role == _TOOL}
    return sum(
        cost(call)
        for r in turn
        if r.role == _AI and r.tool_calls
        for call in r.tool_calls
        if (r.seq, call["id"]) not in answered
    )


@dataclass(frozen=True, slots=True)
class _TurnFloor:
    """What the turn in progress costs at its shortest (tokens).

    ``messages``: its human and AI messages (never cut). ``results``: its tool results,
    oldest first (by exchange, then seq), as ``(seq, stored tokens, tokens of its
    marker-only copy)``; the last is ``None`` when unknown (no cap: no copies are made).
    ``floor``: the shortest cut copy of a result (``MIN_FITTED_TOOL_RESULT_TOKENS``, or the
    cap when smaller); ``capped``: whether results may be cut at all."""

    first_seq: int
    last_seq: int
    messages: int
    results: tuple[tuple[int, int, int | None], ...]
    floor: int
    capped: bool

    def _at_floor(self, tokens: int) -> int:
        return min(tokens, self.floor) if self.capped else tokens

    @property
    def tokens(self) -> int:
        """The turn with every tool result at its shortest cut copy, none marker-only."""
        return self.messages + sum(self._at_floor(tokens) for _, tokens, _ in self.results)

    def tokens_with(self, plan: dict[int, int]) -> int:
        """``tokens`` with the results of ``plan`` (a ``marker_plan``) as marker-only copies."""
        return self.messages + sum(
            plan[seq] if seq in plan else self._at_floor(tokens) for seq, tokens, _ in self.results
        )

    def marker_plan(self, room: int) -> dict[int, int] | None:
        """The tool results to send as marker-only copies so that the turn costs at most
        ``room`` tokens, the others at their shortest cut copies: ``{seq: tokens of the
        copy}``, the oldest results first and no more than needed (the newest results are
        what the model is answering, so they keep their text longest). ``{}`` when none is
        needed; ``None`` when the turn does not fit even with every one."""
        need = self.tokens - room
        if need <= 0:
            return {}
        plan: dict[int, int] = {}
        for seq, tokens, marker in self.results:
            if marker is None:
                continue
            saving = self._at_floor(tokens) - marker
            if saving <= 0:
                continue  # a short result costs less whole than as a marker
            plan[seq] = marker
            need -= saving
            if need <= 0:
                return plan
        return None

    def error(self, *, summary_tokens: int, system_tokens: int, max_tokens: int) -> TurnTooLarge:
        """The ``TurnTooLarge`` naming the least the turn costs: each tool result whole,
        cut to ``floor`` or as a marker-only copy, whichever is shortest."""
        short = short_tokens = cut = marked = marked_tokens = 0
        for _, tokens, marker in self.results:
            least = self._at_floor(tokens)
            if marker is not None and marker < least:
                marked += 1
                marked_tokens += marker
            elif least < tokens:
                cut += 1
            else:
                short += 1
                short_tokens += tokens
        return TurnTooLarge(
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            message_tokens=self.messages,
            short_results=short,
            short_result_tokens=short_tokens,
            cut_results=cut,
            tool_result_floor=self.floor,
            marker_results=marked,
            marker_result_tokens=marked_tokens,
            summary_tokens=summary_tokens,
            system_tokens=system_tokens,
            max_tokens=max_tokens,
        )


def _turn_floor(
    turn: list[RowMeta],
    cap: int | None,
    marker_tokens: dict[int, int] | None = None,
    placeholder_tokens: Callable[[dict[str, Any]], int] | None = None,
) -> _TurnFloor:
    """What the turn ``turn`` (rows newest first, its human message last) costs with every
    tool result cut to its shortest copy (``MIN_FITTED_TOOL_RESULT_TOKENS``, or ``cap`` when
    smaller; not cut when ``cap`` is ``None``), and what each would cost as a marker-only
    copy (``marker_tokens``, by seq; results not in it are never sent so). AI and human
    messages are never cut: an AI message's tool-call arguments are what the tools ran with.
    Orphaned results, exchanges still waiting for all their results and results of
    exchanges older than the turn are left out of a window, so out of this; with
    ``placeholder_tokens`` (the cost of a call's placeholder result) an exchange still
    waiting is sent, with a placeholder for each unanswered call, and counts so."""
    floor = MIN_FITTED_TOOL_RESULT_TOKENS if cap is None else min(cap, MIN_FITTED_TOOL_RESULT_TOKENS)
    answered: dict[int, int] = {}
    for row in turn:
        if row.role == _TOOL and row.exchange_seq is not None:
            answered[row.exchange_seq] = answered.get(row.exchange_seq, 0) + 1
    sent: set[int] = set()  # the exchanges the window sends
    messages = _placeholders_cost(turn, placeholder_tokens)
    for row in turn:
        if row.role == _TOOL:
            continue
        if row.role == _AI and row.tool_calls:
            if answered.get(row.seq, 0) < len(row.tool_calls) and placeholder_tokens is None:
                continue  # a call still waits for its result: the exchange is left out
            sent.add(row.seq)
        messages += row.token_count
    marks = marker_tokens if cap is not None and marker_tokens else {}
    results = sorted(
        (row.exchange_seq, row.seq, row.token_count, marks.get(row.seq))
        for row in turn
        if row.role == _TOOL and row.exchange_seq in sent
    )
    seqs = [row.seq for row in turn]
    return _TurnFloor(
        min(seqs),
        max(seqs),
        messages,
        tuple((seq, tokens, marker) for _, seq, tokens, marker in results),
        floor,
        cap is not None,
    )


def _turn_rows(units: list[list[RowMeta]]) -> list[RowMeta]:
    """The rows of the newest turn among packed ``units`` (oldest first)."""
    start = max((i for i, unit in enumerate(units) if unit[0].role == _HUMAN), default=None)
    if start is None:
        return []
    return [row for unit in reversed(units[start:]) for row in reversed(unit)]


#: a seq above every stored one: ``before`` of an empty window


def _sent_history(
    rows: list[RowMeta],
    contents: dict[int, ChatMessage],
    counter: TokenCounter,
    *,
    plain: bool,
    truncate_newest: tuple[int, int] | None,
    marker_tokens: dict[int, int] | None,
    cap: int | None,
) -> tuple[list[ChatMessage], int, list[int]]:
    """The history messages sent for the packed ``rows`` (oldest first), their tokens, and
    the seqs sent as truncated copies: the newest human message cut to
    ``truncate_newest`` ``(seq, tokens)``, the results of ``marker_tokens`` as the marker
    alone, results over ``cap`` tokens cut to it, and a placeholder for each unanswered
    call. ``plain``: none of that applies and every row's content was read."""
    if plain:
        # The usual window: every message as stored, none cut, no placeholder, each read
        # with the row the packer counted (``RowMeta`` fields by position, as in
        # ``pack_history``: this runs for every message of most windows).
        history = [chat for row in rows if (chat := contents.get(row[_SEQ])) is not None]
        return history, sum([chat.token_count or 0 for chat in history]), []
    history = []
    history_tokens = 0
    truncated: list[int] = []
    for row in rows:
        if row.placeholder:
            placeholder = pending_placeholder(row.tool_call_id, row.name)
            history.append(_replace(placeholder, token_count=row.token_count))
            history_tokens += row.token_count
            continue
        chat = contents.get(row.seq)
        if chat is None:  # deleted between the reads (conversation cleared)
            continue
        tokens = chat.token_count or 0
        if truncate_newest and row.seq == truncate_newest[0]:
            chat = truncate_message(chat, truncate_newest[1], counter)
            tokens = counter.count_message(chat)
            truncated.append(row.seq)
        elif marker_tokens and row.role == _TOOL and row.seq in marker_tokens:
            chat = marker_only_copy(chat)
            tokens = counter.count_message(chat)
            truncated.append(row.seq)
        elif cap is not None and row.role == _TOOL and tokens > cap:
            chat = truncate_message(chat, cap, counter)
            tokens = counter.count_message(chat)
            truncated.append(row.seq)
        history.append(chat)
        history_tokens += tokens
    return history, history_tokens, truncated
