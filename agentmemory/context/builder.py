"""``ContextWindowBuilder``: the token-limited context for one model call, read from the database.

A window is the pinned system prompt (the leading run of stored system messages, in stored
order, or the agent's own prompt), the current summary (a system message after it), then
the newest contiguous run of history that fits, starting on a human message, with every tool
exchange whole. The builder only reads: what a window leaves in neither itself nor the
summary is reported on the window, by the ``messages_left_out`` signal and in the log. With
gap policy "close", a compaction is asked for first and the window built again by
``agentmemory.closing.build_closing_gap``, which the agent loop and the API call (and
``build()`` calls for a builder made with that policy). The reads go through ``read_head()`` and
``TailReader`` (hand-written SQL in ``agentmemory.store.window``): a constant number of
queries, whatever the length of the conversation. What a window leaves uncovered is worked
out from the conversation's counters and a few index lookups (made by the window's own
statement in the common case), not by reading the messages left out (see
``ContextWindowBuilder._gap``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.db import router

from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import hooks
from agentmemory.context.bookkeeping import (
    check_pinned,
    check_summary,
    foreign_summary_error,
    pinned_over_other,
)
from agentmemory.context.fitting import (
    MIN_CUT_SUMMARY_TOKENS,
    _sent_history,
    _turn_floor,
    _turn_rows,
    _TurnFloor,
)
from agentmemory.context.fitting import (
    MIN_FITTED_TOOL_RESULT_TOKENS as MIN_FITTED_TOOL_RESULT_TOKENS,  # the rule, named where it applies
)
from agentmemory.context.gaps import _NO_SEQ, _GapState
from agentmemory.context.left_out import LeftOutReport
from agentmemory.context.memory import (  # noqa: F401  (re-exported)
    MEMORY_QUERY_MAX_CHARS,
    MEMORY_QUERY_PART_CHARS,
    MemoryBlock,
    memory_message,
    transaction_savepoint,
    turn_query,
)
from agentmemory.context.packing import (
    _PLACEHOLDER,
    _SEQ,
    RowMeta,
    pack_history,
    pending_placeholder,
    summary_token_budget,
    truncate_message,
)
from agentmemory.context.turn import TurnFitting
from agentmemory.context.window import NO_UNCOVERED, SUMMARY_CUT, ContextWindow
from agentmemory.exceptions import (
    ContextBudgetExceeded,
    ConversationNotFound,
    TurnTooLarge,
)
from agentmemory.history import check_conversation_argument, resolve_conversation_id, running_in_event_loop
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.store.window import (
    MAX_READ,
    SummaryRow,
    TailReader,
    read_contents,
    read_head,
)
from agentmemory.tokens import TokenCounter
from agentmemory.validation import (
    _tool_result_cap,
    check_system_prompt,
    validate_max_tokens,
    whole_number,
)

logger = logging.getLogger("agentmemory.context")

#: what a builder does about stored messages left in neither the window nor the summary
GAP_POLICIES = ("close", "report", "ignore")


class ContextWindowBuilder(TurnFitting, LeftOutReport, MemoryBlock):
    """Builds ``ContextWindow``s for one conversation.

    Two ways to name the conversation: ``ContextWindowBuilder(conversation)``, or, as the
    agent contract writes it, ``ContextWindowBuilder(chat_history=...,
    memory_compactor=...)``.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid.
        chat_history: a ``PersistentChatHistory`` (instead of ``conversation``); its token
            counter is the default ``token_counter``.
        memory_compactor: where the summary comes from. Not given: the conversation's
            stored summary, and gaps are closed with ``AGENTMEMORY['COMPACTOR_CLASS']``.
            A ``BaseMemoryCompactor``: ``get_summary()`` gives the summary (a ``Summary``,
            a ``str`` or ``None``), and gaps are closed by compactions of its class; a
            ``str`` summary covers messages the builder cannot know, so no gap is looked
            for then. ``None``: no summary is sent and none is made (trimming only; what
            is trimmed is still reported). A summary of another conversation (the stored
            one, where ``summary_id`` was written by hand, or a ``Summary`` a compactor
            gives) is never sent: the build raises ``ConversationStateError``.
        token_counter: counts what is not stored (summary message, truncated copies, an
            explicit system prompt); defaults to ``AGENTMEMORY['TOKEN_COUNTER']``. Stored
            messages are budgeted with their stored counts.
        system_prompt: the agent's system prompt. When given it replaces a stored leading
            system messages; otherwise the stored pinned system prompt is sent
            (``Conversation.pinned_seq`` through ``pinned_last_seq``: the system messages
            stored while the conversation held only system messages, in stored order).
        max_tool_result_tokens: cap on one tool result in the copy sent (tokens, at least
            1); defaults to ``AGENTMEMORY['MAX_TOOL_RESULT_TOKENS']``; ``None`` disables.
        oversized_message_policy: ``"error"`` (raise ``ContextBudgetExceeded``) or
            ``"truncate"`` (send a marked, truncated copy) when the newest human message
            cannot fit; defaults to ``AGENTMEMORY['OVERSIZED_MESSAGE_POLICY']``.
        pending_tool_calls: what to do with a tool exchange whose calls are not all
            answered: ``"omit"`` leaves it out (``ContextWindow.skipped_pending``),
            ``"placeholder"`` sends it with a placeholder result for each unanswered call
            (``pending_placeholder``; in the copy sent only). Defaults to
            ``AGENTMEMORY['PENDING_TOOL_CALLS']``.
        gap_policy: what to do when stored messages would be in neither the window nor the
            summary. ``"close"``: ask for a compaction (``request_compaction(force=True,
            wait=AGENTMEMORY['COMPACTION_WAIT_SECONDS'])``: inline where compaction runs
            inline, else enqueued and awaited) and build once more, then report what is
            still left out; that step is ``agentmemory.closing.build_closing_gap``, which
            ``build()`` calls for this policy (the reading itself never enqueues or
            waits); ``"report"``: only report it (``ContextWindow.uncovered``, the
            ``messages_left_out`` signal, a log line); ``"ignore"``: plain trimming.
            Reporting is worked out from what the window's statement reads, whatever the
            number of messages left out; one more statement of index lookups only when
            a call older than the window still waits for its result, more than
            ``HEAD_ORPHANS`` (16) orphaned tool results are stored, the pinned prompt was
            not read (``system_prompt`` given) or the summary is a custom compactor's
            (``agentmemory.context.gaps.probe_from_head``). Defaults to "report": a
            read has no side effects unless asked; agents and the replay pass
            ``AGENTMEMORY['CONTEXT_GAP_POLICY']`` ("close" by default).
        compaction: ``False``: no compaction is asked for, whatever ``gap_policy`` (an
            agent without a memory compactor sends the stored summary and trims); with
            ``"close"`` what the window leaves out is then reported at WARNING as left out
            for want of a compactor (``messages_left_out``'s reason "no memory compactor").

        fit_newest_turn: when the turn in progress (a human message and the tool exchanges
            after it) does not fit, send its tool results as marked truncated copies cut to
            one size (with a tool-result cap), down to ``MIN_FITTED_TOOL_RESULT_TOKENS``
            (64). When it still does not fit beside the summary, the summary keeps what the
            turn leaves at those shortest copies, sent as a marked truncated copy of at
            least ``MIN_CUT_SUMMARY_TOKENS`` (64): the summary, which stands for every
            earlier message, goes before longer copies of the turn's tool results. When not
            even that fits, the last step sends the turn's oldest tool results, as few as
            make the room, as copies holding only the truncation marker
            (``marker_only_copy``: every call keeps its result message, only its content is
            replaced; the newest results, which the model is answering, keep their text
            longest). When not even that fits, gap policy "close" raises ``TurnTooLarge``
            (no model call is sent without the messages the summary covers); "report" and
            "ignore" send the turn without the summary (reporting what it covered). A turn
            that does not fit beside the system prompt alone, with every result as the
            marker alone, raises ``TurnTooLarge``. Every copy is listed in
            ``ContextWindow.truncated``; storage keeps the messages whole. ``False`` keeps
            plain packing (``ContextBudgetExceeded``). Default ``True``.
        memory_recall: put a memory block into each window: what the conversation owner's
            past conversations and facts hold about the turn, recalled by
            ``agentmemory.recall.memory.recall_memory`` and sent as one system message right
            after the summary (``ContextWindow.memory``, ``memory_tokens``). The window is
            built within the budget less ``AGENTMEMORY['MEMORY_RECALL_SHARE']`` (0.25), or
            within the whole budget when the turn in progress needs it; the block gets what
            the system prompt, the summary and the history leave, so the whole stays within
            ``max_tokens``. Items the window already sends (its seqs, and
            ``memory_exclude_fact_ids``) are left out. A conversation without an owner gets
            no block; a recall that fails (a database error) is logged and the window is
            sent without a block. ``None``: ``AGENTMEMORY['MEMORY_RECALL_ENABLED']`` (False).
        memory_query: what to recall; defaults to the newest human message and the turn so far
            (``turn_query``).
        memory_agent_key, memory_namespace: the scope besides the owner: ``memory_agent_key``
            limits the conversations searched to that agent key and the facts to those stored
            with it (``None``: every conversation of the owner, and the facts stored without
            an agent key); ``memory_namespace`` is the facts' namespace.
        memory_exclude_fact_ids: facts the request already holds (an agent's knowledge block
            in its system prompt): never repeated in the memory block.
        memory_said_in: texts of the system prompt that record what the user said (an
            agent's knowledge block, ``build_context()``): a past message one of them, or the
            summary, says word for word is not repeated in the memory block
            (``recall.text.said_within``), nor is a fact one of them shows
            (``recall.text.entry_keys``). The rest of the system prompt is the developer's
            instructions: a message it happens to quote (an example of what users write) is
            still recalled, since the quote does not tell the model that the user said it.

    Tool results are sent right after the AI message that made the call, in the order of its
    ``tool_calls``, wherever they are stored (a result may be stored after later messages).

    Raises:
        TypeError: neither ``conversation`` nor ``chat_history`` given; a
            ``max_tool_result_tokens`` that is not a whole number.
        ValueError: an unknown policy, a ``max_tool_result_tokens`` below 1, or
            ``conversation`` and ``chat_history`` name different conversations.
        ConversationNotFound: a uuid that names no conversation (made in an event loop's
            thread, the uuid is resolved by the first ``build``/``abuild``, which raise it).
    """

    _UNSET: Any = object()

    def __init__(
        self,
        conversation: Conversation | int | str | UUID | None = None,
        *,
        chat_history: Any = None,
        memory_compactor: Any = _UNSET,
        token_counter: TokenCounter | None = None,
        system_prompt: str | None = None,
        max_tool_result_tokens: int | None = _UNSET,
        oversized_message_policy: str | None = None,
        pending_tool_calls: str | None = None,
        gap_policy: str | None = None,
        compaction: bool = True,
        fit_newest_turn: bool = True,
        memory_recall: bool | None = None,
        memory_query: str | None = None,
        memory_agent_key: str | None = None,
        memory_namespace: str | None = None,
        memory_exclude_fact_ids: Iterable[int] = (),
        memory_said_in: Iterable[str] = (),
    ) -> None:
        conf = app_settings()
        if memory_recall is None:
            memory_recall = conf.MEMORY_RECALL_ENABLED
        if not isinstance(memory_recall, bool):
            raise TypeError(f"memory_recall must be True, False or None, not {memory_recall!r}")
        if memory_query is not None and not isinstance(memory_query, str):
            raise TypeError(f"memory_query must be text or None, not {type(memory_query).__name__}")
        self.memory_recall = memory_recall
        self.memory_query = memory_query
        self.memory_agent_key = memory_agent_key
        self.memory_namespace = memory_namespace
        self.memory_exclude_fact_ids = tuple(memory_exclude_fact_ids)
        said_in = () if isinstance(memory_said_in, str) else tuple(memory_said_in)
        if isinstance(memory_said_in, str) or not all(isinstance(text, str) for text in said_in):
            raise TypeError("memory_said_in must be an iterable of texts")
        self.memory_said_in: tuple[str, ...] = said_in
        self._memory_owner: Any = self._UNSET
        if conversation is None and chat_history is None:
            raise TypeError("ContextWindowBuilder needs a conversation or chat_history=")
        if conversation is not None:
            check_conversation_argument(conversation)
        self.chat_history = chat_history
        self._conversation = conversation
        self._conversation_id: int | None = None
        if chat_history is not None:
            token_counter = token_counter or getattr(chat_history, "token_counter", None)
        # Resolved now unless that needs a query in an event loop's thread (a uuid, or a
        # history that holds one), where Django refuses it: then on first use.
        if (
            chat_history is None and isinstance(conversation, Conversation | int)
        ) or not running_in_event_loop():
            self._conversation_id = self._resolve_conversation()
        self.memory_compactor = None if memory_compactor is self._UNSET else memory_compactor
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        check_system_prompt(system_prompt)
        self.system_prompt = system_prompt
        self.max_tool_result_tokens = _tool_result_cap(
            conf.MAX_TOOL_RESULT_TOKENS if max_tool_result_tokens is self._UNSET else max_tool_result_tokens
        )
        self.oversized_message_policy = oversized_message_policy or conf.OVERSIZED_MESSAGE_POLICY
        if self.oversized_message_policy not in ("error", "truncate"):
            raise ValueError("oversized_message_policy must be 'error' or 'truncate'")
        self.pending_tool_calls = pending_tool_calls or conf.PENDING_TOOL_CALLS
        if self.pending_tool_calls not in ("omit", "placeholder"):
            raise ValueError("pending_tool_calls must be 'omit' or 'placeholder'")
        self.fit_newest_turn = fit_newest_turn
        self.gap_policy = gap_policy or "report"
        if self.gap_policy not in GAP_POLICIES:
            raise ValueError(f"gap_policy must be one of {', '.join(GAP_POLICIES)}, not {self.gap_policy!r}")
        # Where the summary comes from: the stored one (read with the window, no extra
        # query), none, or the compactor's own ``get_summary()``.
        self._no_summary = memory_compactor is None
        self._compactor_class: Any = None  # the configured one
        self._custom_summary = False
        if memory_compactor is not self._UNSET and memory_compactor is not None:
            # Known by what the class says of itself, not by importing compaction (a layer
            # above): ``BaseMemoryCompactor`` sets ``compaction_door_class`` (the compaction
            # door can build it) and ``stock_get_summary`` (its own ``get_summary``).
            kind = type(memory_compactor)
            door = getattr(kind, "compaction_door_class", False) is True
            stock = door and kind.get_summary is getattr(kind, "stock_get_summary", None)
            self._custom_summary = not stock
            self._compactor_class = kind if door else None
        self._summary_message: ChatMessage | None = None
        self._turn_floor: _TurnFloor | None = None
        self._turn_source: tuple[list[RowMeta], dict[int, ChatMessage], int] | None = None
        self._system_tokens = 0
        self._system_prompt_cache: tuple[str, TokenCounter, int] | None = None
        self._pinned_floor = 0
        self._placeholder_tokens: Callable[[dict[str, Any]], int] | None = None
        self._gap_state: _GapState | None = None
        self._can_compact = compaction and (
            memory_compactor is self._UNSET
            or (memory_compactor is not None and self._compactor_class is not None)
        )

    @property
    def conversation_id(self) -> int:
        """Primary key of the conversation. A uuid given in an event loop's thread is
        resolved here, on first use (``abuild`` uses it in its worker thread).

        Raises:
            ConversationNotFound: the uuid names no conversation.
            ValueError: ``conversation`` and ``chat_history`` name different conversations.
        """
        if self._conversation_id is None:
            self._conversation_id = self._resolve_conversation()
        return self._conversation_id

    def _resolve_conversation(self) -> int:
        if self.chat_history is None:
            return resolve_conversation_id(self._conversation)  # type: ignore[arg-type]  # not None here
        conversation_id = int(self.chat_history.conversation_id)
        if self._conversation is not None and resolve_conversation_id(self._conversation) != conversation_id:
            raise ValueError("conversation and chat_history name different conversations")
        return conversation_id

    def build(self, max_tokens: int | None = None, *, max_messages: int | None = None) -> ContextWindow:
        """Assemble the context window.

        Args:
            max_tokens: budget for everything returned (tokens); defaults to
                ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` (10,000); at most
                ``MAX_CONTEXT_TOKENS`` (1,000,000).
            max_messages: optional cap on the number of history messages.

        Returns:
            The ``ContextWindow``; ``uncovered`` says what it leaves outside itself and
            the summary after the gap policy has run, ``compaction`` the compaction it
            asked for.

        Raises:
            TypeError, ValueError: ``max_tokens`` is not a whole number of tokens between
                1 and the ceiling, or ``max_messages`` is negative or not an integer.
            ConversationNotFound: the conversation does not exist (any more).
            ContextBudgetExceeded: the newest human message cannot fit (policy "error").
            TurnTooLarge: the turn in progress cannot fit, even with its tool results sent as the
                truncation marker alone; or, with gap policy "close", not beside the shortest cut
                of the summary (see ``fit_newest_turn``). A ``ContextBudgetExceeded``.
            ConversationStateError: the pinned prompt, summary or counts hide the newest turn;
                or the summary the window would send is another conversation's (a
                ``summary_id`` written by hand: ``agentmemory.context.bookkeeping.check_summary``).
        """
        max_tokens, max_messages = self.limits(max_tokens, max_messages)
        if self.gap_policy == "close" and self._can_compact:
            # The read path never asks for a compaction itself: "close" is the caller's
            # step (``agentmemory.closing``), taken here for callers that pass it.
            return hooks.gap_closer()(self, max_tokens, max_messages=max_messages)
        return self.complete(max_tokens, max_messages, self._window)

    def _window(self, max_tokens: int, max_messages: int | None) -> ContextWindow:
        """The window without a memory block, what it leaves out reported (``build``)."""
        window, summary_cut = self.fit(max_tokens, max_messages)
        return self.report(window, self.left_out_reason(window, summary_cut=summary_cut))

    def limits(self, max_tokens: int | None, max_messages: int | None) -> tuple[int, int | None]:
        """``(max_tokens, max_messages)`` checked, the default budget filled in (see ``build``).

        Raises:
            TypeError, ValueError: as ``build``.
        """
        if max_tokens is None:
            max_tokens = app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        max_tokens = validate_max_tokens(max_tokens)
        if max_messages is not None:
            max_messages = whole_number(max_messages, "max_messages", minimum=0, unit="messages")
        return max_tokens, max_messages

    @property
    def can_compact(self) -> bool:
        """Whether a compaction could cover what a window leaves out: the configured
        compactor, or a ``BaseMemoryCompactor`` given as ``memory_compactor``."""
        return bool(self._can_compact)

    @property
    def compactor_class(self) -> Any:
        """The class of the compactor given as ``memory_compactor`` (``None``: the configured one)."""
        return self._compactor_class

    @property
    def system_tokens(self) -> int:
        """Tokens of the system prompt sent by the last window read (the explicit or the
        pinned one; 0 before the first)."""
        return self._system_tokens

    def _insert_memory(self, window: ContextWindow, block: Any, room: int | None = None) -> ContextWindow:
        """``window`` with the memory message of ``block`` after its summary, when it fits in
        ``room`` tokens (default: what ``window`` leaves of its ``max_tokens``)."""
        if room is None:
            room = window.max_tokens - window.total_tokens
        message = memory_message(block.text, len(block.items))
        # ``block.tokens`` is this message's count by the builder's counter (recall_memory
        # counts it so): not counted again (2.5 ms for a 3,000-token block).
        tokens = block.tokens
        if tokens > room:
            logger.warning(
                "the memory block of conversation %s (%d tokens) is over the %d tokens left for it; "
                "the window is sent without it",
                self.conversation_id,
                tokens,
                room,
            )
            return window
        messages = window.messages
        position = len(messages) - len(window.history)
        return replace(
            window,
            messages=[*messages[:position], message, *messages[position:]],
            memory=block,
            memory_tokens=tokens,
        )

    def fit(self, max_tokens: int, max_messages: int | None) -> tuple[ContextWindow, bool]:
        """One window read and fitted to ``max_tokens`` (checked: ``limits``), nothing
        reported: the window, and whether the summary had to be cut or left out for the
        turn in progress (``_with_summary_cut``, when ``fit_newest_turn``).

        Raises:
            ContextBudgetExceeded, TurnTooLarge: as ``build``.
        """
        try:
            window = self._assemble(max_tokens, max_messages)
        except ContextBudgetExceeded as exc:
            if not self.fit_newest_turn:
                raise
            return self._with_summary_cut(max_tokens, max_messages, exc), True
        if window.summary_id is not None and (window.uncovered or self._summary_to_share):
            window = self._summary_fitted_to_window(window, max_tokens, max_messages)
        return window, False

    def _summary_fitted_to_window(
        self, window: ContextWindow, max_tokens: int, max_messages: int | None
    ) -> ContextWindow:
        """``window`` with its summary sent cut to the share a summary may take of it
        (``summary_token_budget``) when the summary is longer and stored messages after it
        are left out: such a summary was made for a larger window (``request_compaction``
        without the budget the windows are built with) and took the room of the messages it
        does not cover. Kept as it is when cutting leaves as many messages out. When none is
        left out and a memory block is to join the window (``_summary_to_share``), cut to the
        share of the request's budget: the block gets the room. Logged as a warning naming
        the budget to pass when messages gain the room."""
        of = max_tokens if window.uncovered else self._summary_to_share  # the request's budget
        share = summary_token_budget(of, system_tokens=window.system_tokens)
        if window.summary_tokens <= share:
            return window
        try:
            cut = self._assemble(max_tokens, max_messages, summary_limit=share)
        except ContextBudgetExceeded:
            return window
        if cut.uncovered.count >= window.uncovered.count:
            if self._summary_to_share and not window.uncovered:
                return cut
            return self._assemble(max_tokens, max_messages)  # the state of the window returned
        logger.warning(
            "the summary of conversation %s (%d tokens) was made for a larger window than this one "
            "(max_tokens %d, where a summary may take %d): it is sent cut so that %d more stored "
            "messages fit. Pass max_tokens=%d to request_compaction() so that summaries are made "
            "for this window.",
            self.conversation_id,
            window.summary_tokens,
            max_tokens,
            share,
            window.uncovered.count - cut.uncovered.count,
            max_tokens,
        )
        return cut

    def _with_summary_cut(
        self, max_tokens: int, max_messages: int | None, error: ContextBudgetExceeded
    ) -> ContextWindow:
        """The window when the summary leaves no room for the turn in progress (a tool loop
        that fits beside the system prompt but not beside the summary as well).

        The turn goes in whole, its tool results at their shortest copies if need be
        (``MIN_FITTED_TOOL_RESULT_TOKENS``), and the summary keeps the rest, sent as a marked
        truncated copy (it stands for every earlier message; a longer tool-result copy
        does not). With less than ``MIN_CUT_SUMMARY_TOKENS`` left, the oldest tool results
        go as marker-only copies, as few as leave that much (``_TurnFloor.marker_plan``).
        When not even that leaves it: gap policy "close" raises ``TurnTooLarge`` naming the
        sizes; "report" and "ignore" leave the summary out, and then the messages it
        covered count as uncovered.

        Raises:
            TurnTooLarge: the turn does not fit beside the system prompt, or (gap policy
                "close") not beside the shortest cut of the summary.
            ContextBudgetExceeded: ``error``, when leaving the summary out does not help.
        """
        self._summary_message = None
        self._turn_floor = None
        self._turn_source = None
        if self._no_summary:
            raise error
        try:
            window = self._assemble(max_tokens, max_messages, summary_limit=0)
        except TurnTooLarge:
            raise  # the turn does not fit beside the system prompt alone: that blocks the call
        except ContextBudgetExceeded:
            raise error from None
        summary_message = self._summary_message
        source, self._turn_source = self._turn_source, None  # not kept past this build
        if summary_message is None:  # there was no summary to take out
            raise error
        turn = self._turn_floor
        turn_tokens = turn.tokens if turn is not None else window.history_tokens
        room = max_tokens - window.system_tokens - turn_tokens
        cap = self.max_tool_result_tokens
        if room < MIN_CUT_SUMMARY_TOKENS and turn is not None and source is not None and cap is not None:
            # The last step before refusing: the oldest tool results as marker-only copies,
            # as few as make room for the shortest cut of the summary.
            rows, contents, conv_pk = source
            turn = _turn_floor(
                rows, cap, self._marker_tokens(rows, contents, conv_pk), self._placeholder_tokens
            )
            plan = turn.marker_plan(max_tokens - window.system_tokens - MIN_CUT_SUMMARY_TOKENS)
            if plan:
                room = max_tokens - window.system_tokens - turn.tokens_with(plan)
        if room >= MIN_CUT_SUMMARY_TOKENS:
            try:
                return self._assemble(max_tokens, max_messages, summary_limit=room)
            except ContextBudgetExceeded:
                pass  # the floor was not reached (rows changed between the reads): leave it out
        if self.gap_policy == "close" and turn is not None:
            raise turn.error(
                summary_tokens=MIN_CUT_SUMMARY_TOKENS,
                system_tokens=window.system_tokens,
                max_tokens=max_tokens,
            )
        # No room even for a cut summary: what it covers is sent nowhere.
        if self.gap_policy == "ignore" or window.summary_through_seq is None:
            return replace(window, summary_id=None, summary_through_seq=None)
        uncovered = self._gap(
            router.db_for_read(Message),
            after=self._pinned_floor,
            before=window.first_seq if window.first_seq is not None else _NO_SEQ,
            pending_exchanges=self._gap_state.conv.pending_exchanges if self._gap_state else (),
        )
        return replace(window, summary_id=None, summary_through_seq=None, uncovered=uncovered)

    def _summary(self, stored: SummaryRow | None) -> tuple[SummaryRow | None, str | None]:
        """The summary to send: ``(row, None)`` when its coverage is known, ``(None,
        text)`` for a custom compactor's text, ``(None, None)`` for none."""
        if self._no_summary:
            return None, None
        if not self._custom_summary:
            return stored, None
        from agentmemory.models import Summary

        compactor: Any = self.memory_compactor
        got = compactor.get_summary()
        if got is None:
            return None, None
        if isinstance(got, Summary):
            if got.conversation_id is not None and got.conversation_id != self.conversation_id:
                raise foreign_summary_error(self.conversation_id, got.pk)
            return (
                SummaryRow(
                    got.pk,
                    got.text,
                    got.through_seq,
                    got.token_count,
                    got.token_counter,
                    got.human_messages_covered,
                ),
                None,
            )
        text = str(got)
        return (None, text) if text.strip() else (None, None)

    def _assemble(
        self, max_tokens: int, max_messages: int | None, *, summary_limit: int | None = None
    ) -> ContextWindow:
        """One window. ``summary_limit``: ``None`` sends the summary whole; ``0`` leaves it
        out (kept in ``_summary_message``; the history still starts after what it covers)
        and records the turn's floor (``_turn_floor``); a positive number sends it as a
        marked truncated copy of at most that many tokens when it is longer."""
        counter = self.token_counter
        messages: list[ChatMessage] = []
        system_tokens = 0
        if self.system_prompt is not None:
            pinned_message, system_tokens = self._system_prompt_message()
            messages.append(pinned_message)
        using = router.db_for_read(Message)
        # The first page is sized, and its content read, for the budget before the summary
        # and a stored system prompt are taken off: never less than the history can use.
        head = read_head(
            using,
            self.conversation_id,
            with_pinned=self.system_prompt is None,
            # Clamped: no window holds 2**31 tokens, and the page-size arithmetic in SQL
            # must stay within 64-bit integers.
            budget=min(max_tokens - system_tokens, MAX_READ),
            max_messages=None if max_messages is None else min(max_messages, MAX_READ),
            max_tool_result_tokens=self.max_tool_result_tokens,
            # The rows a summary covers are not read: the stored one's (None), or, for a
            # summary that is not the stored one, from the first stored message on.
            floor=0 if self._no_summary or self._custom_summary else None,
        )
        if head is None:
            raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
        conv, summary = head.conv, head.summary
        check_pinned(conv)  # a stored value no run of seqs has hides messages silently
        if not (self._no_summary or self._custom_summary):
            check_summary(conv, summary)  # another conversation's: never sent as this one's
        if (
            conv.pinned_seq is not None
            and self.system_prompt is None
            and len(head.pinned) != conv.pinned_through - conv.pinned_seq + 1
        ):
            # fewer system rows than the pinned run's seqs: a deleted one, or a run written
            # by hand over other messages, which the window would leave out unreported
            found = pinned_over_other(using, self.conversation_id, conv.pinned_seq, conv.pinned_last_seq)
            if found is not None:
                raise found
        if head.pinned:
            # The leading run of stored system messages, in stored order, counted once.
            messages.extend(head.pinned)
            system_tokens = sum(m.token_count or 0 for m in head.pinned)

        summary, custom_text = self._summary(summary)
        coverage_unknown = custom_text is not None
        summary_message, summary_tokens, summary_cut = self._summary_part(summary, custom_text, summary_limit)
        if summary_message is not None and summary_limit != 0:
            messages.append(summary_message)

        floor_seq = max(summary.through_seq if summary else 0, conv.pinned_through)
        humans_after_floor = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        available = max_tokens - system_tokens - summary_tokens
        if available < 0:
            # The fixed part alone breaks the budget: nothing can be sent.
            raise ContextBudgetExceeded(
                seq=head.pinned[0].seq if head.pinned else None,
                tokens=system_tokens + summary_tokens,
                available=max_tokens,
                what="the system prompt and summary",
            )
        reader = TailReader(
            conv.pk,
            floor_seq,
            head.page_size,
            first_rows=head.page,
            first_room=head.room,
            content_budget=available,
            max_tool_result_tokens=self.max_tool_result_tokens,
            using=using,
        )
        placeholder_tokens = self._placeholder_tokens = (
            (lambda call: counter.count_message(pending_placeholder(call["id"], call.get("name", ""))))
            if self.pending_tool_calls == "placeholder"
            else None
        )
        cap = self.max_tool_result_tokens
        rows_seen = reader.seen
        source = iter(reader)
        packed = pack_history(
            source,
            budget=available,
            max_messages=max_messages,
            max_tool_result_tokens=cap,
            truncate_oversized_human=self.oversized_message_policy == "truncate",
            placeholder_tokens=placeholder_tokens,
        )

        # Marker-only copies come after the summary's own cut: not while it is sent whole.
        markers_allowed = summary_message is None or summary_limit is not None
        packed, cap, has_human, turn, marks, marker_tokens = self._fit_newest_turn(
            packed,
            source,
            reader,
            humans_after_floor=humans_after_floor,
            available=available,
            max_messages=max_messages,
            markers_allowed=markers_allowed,
        )
        if not has_human and humans_after_floor > 0 and (max_messages is None or max_messages > 0):
            self._refuse_turn(
                packed,
                turn,
                marks,
                reader,
                max_messages=max_messages,
                markers_allowed=markers_allowed and cap is not None,
                summary_tokens=summary_tokens,
                system_tokens=system_tokens,
                max_tokens=max_tokens,
            )
        truncate_newest = packed.truncate
        self._system_tokens = system_tokens
        if summary_limit == 0 and has_human:
            rows_of_turn = turn or _turn_rows(packed.units)
            self._turn_floor = _turn_floor(
                rows_of_turn, self.max_tool_result_tokens, None, placeholder_tokens
            )
            # What marker-only copies cost is counted only when ``_with_summary_cut`` needs it.
            self._turn_source = (rows_of_turn, reader.contents, conv.pk)

        rows = packed.rows
        contents = reader.contents
        missing = [r[_SEQ] for r in rows if r[_SEQ] not in contents and not r[_PLACEHOLDER]]
        if missing:
            # Rows past the running budget (skipped orphans before them, or the oversized
            # newest human message taken truncated) were read without their content.
            contents.update(read_contents(using, conv.pk, missing))

        history, history_tokens, truncated = _sent_history(
            rows,
            contents,
            counter,
            plain=not (missing or truncate_newest or marker_tokens or packed.placeholders or packed.capped),
            truncate_newest=truncate_newest,
            marker_tokens=marker_tokens,
            cap=cap,
        )
        messages.extend(history)
        seqs = [m.seq for m in history if m.seq is not None]
        first_seq = min(seqs) if seqs else None  # results go in call order, not seq order
        self._pinned_floor = conv.pinned_through
        # What the gap accounting needs, here and in ``_with_summary_cut``.
        self._gap_state = _GapState(conv, summary, head.newest_seq, rows_seen, head)
        uncovered = NO_UNCOVERED  # worked out first: the window is made once, not ``replace``d
        if self.gap_policy != "ignore" and not coverage_unknown:
            uncovered = self._uncovered_after(packed, using, floor_seq, conv, first_seq)
        return ContextWindow(
            messages=messages,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            summary_tokens=summary_tokens,
            history_tokens=history_tokens,
            first_seq=first_seq,
            last_seq=max(seqs) if seqs else None,
            summary_id=summary.pk if summary else None,
            summary_through_seq=summary.through_seq if summary else None,
            skipped_orphans=tuple(sorted(packed.skipped_orphans)),
            skipped_pending=tuple(sorted(packed.skipped_pending)),
            skipped_late=tuple(packed.skipped_late),
            placeholders=tuple(packed.placeholders),
            truncated=(SUMMARY_CUT, *truncated) if summary_cut else tuple(truncated),
            rows_read=reader.rows_read,
            uncovered=uncovered,
        )

    def _summary_part(
        self, summary: SummaryRow | None, custom_text: str | None, summary_limit: int | None
    ) -> tuple[ChatMessage | None, int, bool]:
        """The summary message to send, its tokens, and whether it was cut to
        ``summary_limit`` (see ``_assemble``). ``summary_limit == 0``: not sent (0 tokens),
        kept aside in ``_summary_message`` for ``_with_summary_cut``."""
        counter = self.token_counter
        summary_message: ChatMessage | None = None
        summary_tokens = 0
        summary_cut = False
        if custom_text is not None:
            summary_message = ChatMessage.system(app_settings().SUMMARY_MESSAGE_PREFIX + custom_text)
            summary_tokens = counter.count_message(summary_message)
        elif summary is not None:
            summary_message = ChatMessage.system(
                app_settings().SUMMARY_MESSAGE_PREFIX + summary.text, metadata={"summary_id": summary.pk}
            )
            summary_tokens = (
                summary.token_count
                if summary.token_counter == counter.id
                else counter.count_message(summary_message)
            )
        if summary_message is not None and summary_limit == 0:
            # Not sent: kept aside for ``_with_summary_cut``, which sends it cut if room is
            # left. The history still starts after what it covers.
            self._summary_message = summary_message
            summary_tokens = 0
        elif summary_message is not None and summary_limit is not None and summary_tokens > summary_limit:
            summary_message = truncate_message(summary_message, summary_limit, counter)
            summary_tokens = counter.count_message(summary_message)
            summary_cut = True
        return summary_message, summary_tokens, summary_cut

    def _system_prompt_message(self) -> tuple[ChatMessage, int]:
        """The system prompt's message and its tokens by the builder's counter (tokens),
        counted once per builder (an agent's builder serves every model call of a turn) and again only
        when ``system_prompt`` or ``token_counter`` is replaced."""
        prompt, counter = self.system_prompt, self.token_counter
        assert prompt is not None
        # A new message each time: windows never share a message (its metadata is a dict).
        message = ChatMessage.system(prompt)
        cached = self._system_prompt_cache
        if cached is not None and cached[0] is prompt and cached[1] is counter:
            return message, cached[2]
        tokens = counter.count_message(message)
        self._system_prompt_cache = (prompt, counter, tokens)
        return message, tokens

    async def abuild(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> ContextWindow:
        """``build`` for async code: the ORM work runs in a worker thread, never on the event
        loop (bug report langchain-ai/langchain#23716)."""
        return await sync_to_async(self.build)(max_tokens, max_messages=max_messages)


ContextWindowBuilder.signal_sender = ContextWindowBuilder
