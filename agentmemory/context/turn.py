"""The turn in progress fitted into a window, for ``ContextWindowBuilder``: when packing left
it out, its tool results sent as copies cut to one size and, as a last step, the oldest as the
truncation marker alone; when even that fails, the typed error that names the sizes.

``TurnFitting`` is the part of ``ContextWindowBuilder`` that does it
(``fit_newest_turn``); the arithmetic (the cap, the floor, the plan of marker-only copies)
is ``agentmemory.context.fitting`` (no database access). Reads the content of the results
the window did not read (``agentmemory.store.window.read_contents``) when their
marker-only copies are to be counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from django.db import router

from agentmemory.context.fitting import _fitting_cap, _newest_turn, _placeholders_cost, _turn_floor
from agentmemory.context.packing import PackResult, RowMeta, marker_only_copy, pack_history
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Message
from agentmemory.store.window import TailReader, read_contents

if TYPE_CHECKING:
    from agentmemory.tokens import TokenCounter

    class _Builder(Protocol):
        """What ``TurnFitting``'s methods use of ``ContextWindowBuilder``."""

        _placeholder_tokens: Callable[[dict[str, Any]], int] | None

        @property
        def max_tool_result_tokens(self) -> int | None: ...
        @property
        def fit_newest_turn(self) -> bool: ...
        @property
        def oversized_message_policy(self) -> str: ...
        @property
        def token_counter(self) -> TokenCounter: ...
        def _marker_tokens(
            self, turn: list[RowMeta], contents: dict[int, ChatMessage], conv_pk: int
        ) -> dict[int, int]: ...


_HUMAN, _TOOL = Role.HUMAN.value, Role.TOOL.value


class TurnFitting:
    """The part of ``ContextWindowBuilder`` that fits the turn in progress when packing left
    it out (``fit_newest_turn``), or refuses the window."""

    def _fit_newest_turn(
        self: _Builder,
        packed: PackResult,
        source: Iterator[RowMeta],
        reader: TailReader,
        *,
        humans_after_floor: int,
        available: int,
        max_messages: int | None,
        markers_allowed: bool,
    ) -> tuple[PackResult, int | None, bool, list[RowMeta], dict[int, int] | None, dict[int, int] | None]:
        """Fit the turn in progress when the packing ``packed`` left it out (a tool loop
        whose results pile up after the human message; see ``fit_newest_turn``): its tool
        results as copies cut to one size, and as a last step (``markers_allowed``: the
        summary is already cut or left out) the oldest as the truncation marker alone.

        Returns ``(packed, cap, has_human, turn, marks, marker_tokens)``: the packing to
        send (the refit one when the turn now fits), the tool-result cap it used (tokens),
        whether it holds a human message, the turn's rows (empty: not looked at), what each
        result costs as the marker alone where that was counted, and the results sent so.
        """
        cap = self.max_tool_result_tokens
        placeholder_tokens = self._placeholder_tokens
        has_human = any(unit[0].role == _HUMAN for unit in packed.units)
        turn: list[RowMeta] = []
        marker_tokens: dict[int, int] | None = None
        marks: dict[int, int] | None = None  # what each result costs as the marker alone
        if (
            not self.fit_newest_turn
            or has_human
            or humans_after_floor <= 0
            or cap is None
            or packed.blocked_by_count
        ):
            return packed, cap, has_human, turn, marks, marker_tokens
        # The newest turn does not fit: in a tool loop its results pile up after the
        # human message. Send its tool results as shorter truncated copies, all cut to
        # one size, rather than fail the model call (the turn stays whole and in order).
        turn = _newest_turn(source, reader.seen)
        # The room left once the placeholders sent for unanswered calls are paid for.
        room = available - _placeholders_cost(turn, placeholder_tokens)
        fitted = _fitting_cap(turn, room, cap) if turn else None
        if fitted is None and turn and markers_allowed:
            # Not even the shortest cut copies fit (and the summary, if any, is already
            # cut or left out): the last step before refusing sends the oldest results
            # as copies holding only the truncation marker.
            marks = self._marker_tokens(turn, reader.contents, reader.conversation_id)
            floor = _turn_floor(turn, cap, marks, placeholder_tokens)
            plan = floor.marker_plan(available)
            if plan is not None:  # ``{}``: the shortest cut copies fit without markers
                fitted, marker_tokens = floor.floor, plan or None
        if fitted is not None:
            refit = pack_history(
                turn,
                budget=available,
                max_messages=max_messages,
                max_tool_result_tokens=fitted,
                truncate_oversized_human=self.oversized_message_policy == "truncate",
                placeholder_tokens=placeholder_tokens,
                marker_tokens=marker_tokens,
            )
            if any(unit[0].role == _HUMAN for unit in refit.units):
                refit.blocked = refit.blocked or packed.blocked  # older rows were not read
                return refit, fitted, True, turn, marks, marker_tokens
            marker_tokens = None
        return packed, cap, has_human, turn, marks, marker_tokens

    def _refuse_turn(
        self: _Builder,
        packed: PackResult,
        turn: list[RowMeta],
        marks: dict[int, int] | None,
        reader: TailReader,
        *,
        max_messages: int | None,
        markers_allowed: bool,
        summary_tokens: int,
        system_tokens: int,
        max_tokens: int,
    ) -> NoReturn:
        """Refuse a window whose packing holds no human message though the conversation
        has one after the summary: the turn in progress does not fit.

        Raises:
            ContextBudgetExceeded: ``max_messages`` is too small for the turn, or its human
                message does not fit.
            TurnTooLarge: a tool loop that does not fit, naming its parts and sizes.
        """
        blocked_seq, blocked_tokens = packed.blocked or (None, 0)
        if packed.blocked_by_count:
            raise ContextBudgetExceeded(
                seq=blocked_seq,
                tokens=blocked_tokens,
                available=packed.available_at_block,
                message=f"the newest turn needs more than max_messages={max_messages} messages "
                f"(its unit from seq={blocked_seq} does not fit); raise max_messages",
            )
        if len(turn) > 1:  # a tool loop: name its parts (a lone human message is named below)
            if marks is None and markers_allowed:
                marks = self._marker_tokens(turn, reader.contents, reader.conversation_id)
            raise _turn_floor(turn, self.max_tool_result_tokens, marks, self._placeholder_tokens).error(
                summary_tokens=summary_tokens, system_tokens=system_tokens, max_tokens=max_tokens
            )
        raise ContextBudgetExceeded(
            seq=blocked_seq, tokens=blocked_tokens, available=packed.available_at_block
        )

    def _marker_tokens(
        self: _Builder, turn: list[RowMeta], contents: dict[int, ChatMessage], conv_pk: int
    ) -> dict[int, int]:
        """What each tool result of ``turn`` costs as a marker-only copy (tokens, by seq),
        by the builder's counter. Reads the content of the results the window did not read
        yet (one query) and keeps it in ``contents``."""
        seqs = [row.seq for row in turn if row.role == _TOOL and not row.placeholder]
        missing = [seq for seq in seqs if seq not in contents]
        if missing:
            contents.update(read_contents(router.db_for_read(Message), conv_pk, missing))
        counter = self.token_counter
        return {
            seq: counter.count_message(marker_only_copy(contents[seq])) for seq in seqs if seq in contents
        }
