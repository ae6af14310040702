"""``BaseMemoryCompactor``: when to compact, which span, and storing the result safely.

The protocol every compactor follows; the stock summarisers (``LLMMemoryCompactor``,
``OfflineMemoryCompactor``) are in ``agentmemory.compaction.summarisers``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from django.db import IntegrityError, router, transaction
from django.db.models import Sum

from agentmemory import signals
from agentmemory.agent_registry import window_budget
from agentmemory.compaction import flush as memory_flush
from agentmemory.compaction.prompts import PROMPT_HEADERS, PROMPT_VERSION, summary_token_budget
from agentmemory.compaction.state import (
    BUSY,
    GONE,
    LOST_LEASE,
    NOTHING,
    PARTIAL,
    STORED,
    SUPERSEDED,
    CompactionRun,
    Lease,
    LeaseKeeper,
    LeaseLost,
    SummaryDraft,
    busy_run,
    claim_lease,
    clear_compaction_error,
    mark_request_served,
    release_lease,
    request_is_stale,
)
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context.bookkeeping import foreign_summary_error
from agentmemory.exceptions import InvalidSummaryError, LLMContextLengthError
from agentmemory.history import PersistentChatHistory, last_foldable_seq
from agentmemory.llm.base import ChatModel
from agentmemory.llm.facts import with_stored_time
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import TokenCounter
from agentmemory.validation import text_problem, whole_number

logger = logging.getLogger("agentmemory.compaction")

_PAGE = 500
#: the least ``max_input_tokens`` a run lowers itself to when the summariser's window is
#: smaller than the span (``_smaller_spans``); below it the run fails
MIN_INPUT_TOKENS = 32


def summary_of(conv: Conversation) -> Summary | None:
    """The current summary of ``conv``, the one the next summary extends (``None``: none).

    Raises:
        ConversationStateError: ``summary_id`` names another conversation's summary (written
            by hand: raw SQL, a data migration, a restore), whose text is never folded into a
            summary of this conversation; ``manage.py repair_conversations`` puts one of its
            own back (``agentmemory.context.bookkeeping.foreign_summary_error``).
    """
    summary = conv.own_summary
    if summary is None and conv.summary_id is not None:
        raise foreign_summary_error(conv.pk, conv.summary_id)
    return summary


class BaseMemoryCompactor:
    """When and what to compact, and storing the result safely.

    Args:
        conversation_repo: the queryset or manager conversations are read from
            (``Conversation.objects`` by default).
        conversation_id: primary key of the conversation.
        llm: the ``ChatModel`` that writes summaries (may be ``None`` for compactors that
            do not use one).
        chat_history: the conversation's ``PersistentChatHistory``.
        summarize_every_n_human: compact after this many human messages since the last
            summary; defaults to ``SUMMARIZE_EVERY_N_HUMAN_MESSAGES`` (10).
        keep_recent_human_turns: newest human turns never folded; default 1 (the newest
            question always stays verbatim).
        keep_recent_messages: optionally also keep at least this many newest messages
            verbatim; the boundary then moves back to the start of a human turn (BUG-05).
        max_summary_tokens: longest summary stored (tokens), whatever the window; default
            ``MAX_SUMMARY_TOKENS``. Each run lowers the limit to fit the window it is made
            for (``fit_to_window``, ``summary_token_budget``); longer output is condensed.
        max_input_tokens: largest span of new messages per summariser call (tokens); longer
            spans are folded in chunks, so the prompt never grows with the conversation.
        max_calls_per_run: summariser calls one run may make before it stores an
            intermediate summary at a human-turn boundary and leaves the rest to the next
            run; defaults to ``COMPACTION_MAX_CALLS_PER_RUN``.
        token_counter: counts the summary message; defaults to the configured counter.

    Raises:
        TypeError: a count option that is not a whole number (a float, a string, a bool).
        ValueError: a count option below its least value: 1 for ``summarize_every_n_human``,
            ``keep_recent_human_turns``, ``max_summary_tokens``, ``max_input_tokens`` and
            ``max_calls_per_run``, 0 for ``keep_recent_messages`` (``None`` takes the default).
    """

    prompt_version = PROMPT_VERSION

    def __init__(
        self,
        conversation_repo: Any,
        conversation_id: int,
        llm: ChatModel | None,
        chat_history: PersistentChatHistory | None = None,
        *,
        summarize_every_n_human: int | None = None,
        keep_recent_human_turns: int | None = None,
        keep_recent_messages: int | None = None,
        max_summary_tokens: int | None = None,
        max_input_tokens: int | None = None,
        max_calls_per_run: int | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        conf = app_settings()
        self.conversation_repo = conversation_repo if conversation_repo is not None else Conversation.objects
        self.conversation_id = conversation_id
        self.llm = llm
        self.chat_history = chat_history
        # ``0`` must not quietly become the default, nor a float be compared with counts.
        for name, value, least in (
            ("summarize_every_n_human", summarize_every_n_human, 1),
            ("keep_recent_messages", keep_recent_messages, 0),
            ("max_summary_tokens", max_summary_tokens, 1),
            ("max_input_tokens", max_input_tokens, 1),
            ("max_calls_per_run", max_calls_per_run, 1),
        ):
            if value is not None:  # None: the default applies
                whole_number(value, name, minimum=least)
        self.every_n_human = summarize_every_n_human or conf.SUMMARIZE_EVERY_N_HUMAN_MESSAGES
        self.keep_recent_human_turns = (
            conf.KEEP_RECENT_HUMAN_TURNS if keep_recent_human_turns is None else keep_recent_human_turns
        )
        whole_number(self.keep_recent_human_turns, "keep_recent_human_turns")
        if self.keep_recent_human_turns < 1:
            raise ValueError("keep_recent_human_turns must be >= 1: the newest question stays verbatim")
        self.keep_recent_messages = keep_recent_messages
        #: the limit whatever the window (tokens)
        self.summary_token_cap = max_summary_tokens or conf.MAX_SUMMARY_TOKENS
        #: the limit of the summary being made (tokens): the cap, lowered by ``run()`` to
        #: fit the window (``summary_token_budget``)
        self.max_summary_tokens = self.summary_token_cap
        #: the window budget and system prompt the next summary must fit (tokens); ``None``
        #: takes ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` and a stored pinned prompt
        self.window_tokens: int | None = None
        self.system_tokens: int | None = None
        self.max_input_tokens = max_input_tokens or conf.SUMMARIZER_MAX_INPUT_TOKENS
        self.max_calls_per_run = max_calls_per_run or conf.COMPACTION_MAX_CALLS_PER_RUN
        self.token_counter: TokenCounter = token_counter or (
            chat_history.token_counter if chat_history is not None else get_token_counter()
        )
        #: the conversation row read by the last ``needs_compaction()`` (saves a query)
        self.last_checked: Conversation | None = None
        #: the memory flush of the run in progress (``run()`` sets it; ``None``: no facts are
        #: extracted, see ``agentmemory.flush``)
        self.flush: memory_flush.MemoryFlush | None = None
        #: ``time.monotonic()`` after which ``run()`` stores what it folded at the next
        #: human-turn boundary, as when ``max_calls_per_run`` is spent (``None``: no time
        #: bound); a caller that waits for the run sets it (``run_compaction(deadline=...)``)
        self.deadline: float | None = None

    # -- reading ------------------------------------------------------------------------

    def _conversation(self) -> Conversation | None:
        conversation: Conversation | None = (
            self.conversation_repo.select_related("summary").filter(pk=self.conversation_id).first()  # type: ignore[misc]  # the repo is duck-typed
        )
        return conversation

    def get_summary(self) -> Summary | None:
        """The conversation's current summary, or ``None``.

        Raises:
            ConversationStateError: the current summary is another conversation's
                (``summary_of``).
        """
        conv = self._conversation()
        return summary_of(conv) if conv is not None else None

    #: How ``ContextWindowBuilder`` (a layer below, which does not import this class) knows
    #: a compactor: the compaction door can build this class, and whether its
    #: ``get_summary`` is this stock one (the stored summary, read with the window) or its own.
    compaction_door_class: ClassVar[bool] = True
    stock_get_summary = get_summary

    def needs_compaction(self, *, max_tokens: int | None = None, system_tokens: int | None = None) -> bool:
        """Whether a compaction is due: ``every_n_human`` human messages since the last
        summary was made; or the summary and the messages it does not cover fill more than
        ``COMPACTION_TRIGGER_RATIO`` (0.8) of the room the system prompt leaves in a window
        of ``max_tokens`` (default: the window of ``fit_to_window``, else
        ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``), so the next human message still finds
        room, also when no human message follows the summary at all (tool exchanges alone:
        an autonomous run, a pipeline writing through the API), since no window can send
        those (its history starts on a human message, design invariant C3); or the messages
        after the summary open before its first human message, which no window can start
        on; or a compaction was requested longer than ``COMPACTION_LEASE_SECONDS`` ago and
        has not completed (it failed, or its worker died) and no live lease holds it. Never
        while the current summary is another conversation's (``summary_of``: a run refuses
        it). Reads the conversation row (one to three queries).

        The system prompt is never folded, so it is not counted as history (a large prompt
        alone must not make every turn due), but the room it takes is left out of the window
        (an agent's prompt that is not stored must not make the trigger late):
        ``system_tokens`` (default: the one given to ``fit_to_window``, else the stored
        pinned prompt's)."""
        conv = self._conversation()
        self.last_checked = conv
        if conv is None:
            return False
        if conv.summary_id is not None and conv.own_summary is None:
            # Its current summary is another conversation's (written by hand): a run refuses
            # it (``summary_of``), so none is due until ``repair_conversations`` fixes it.
            return False
        if request_is_stale(conv):
            return True
        summary = conv.summary
        baseline = summary.human_message_count if summary else 0
        if conv.human_message_count - baseline >= self.every_n_human:
            return True
        humans_after = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        if humans_after == 0:
            # No human message after the summary: no window sends these messages, so they
            # reach a model through a summary only. Folded when they fill the window's
            # trigger share, like a history that no longer fits (never one call per append).
            return self._fills_window(conv, summary, max_tokens, system_tokens)
        # A summary that reached past every human message of its time (tool exchanges
        # alone) may be followed by more before the next human message.
        after_all_humans = summary is None or summary.human_messages_covered >= summary.human_message_count
        if after_all_humans and self._opens_without_human(conv):
            # The assistant spoke first (a greeting), or tool exchanges came before the
            # human message: those messages can never start a window, so fold them now
            # rather than leave them outside window and summary.
            return True
        if humans_after <= self.keep_recent_human_turns:
            return False  # nothing could be folded: the newest turns stay verbatim
        return self._fills_window(conv, summary, max_tokens, system_tokens)

    def _fills_window(
        self, conv: Conversation, summary: Summary | None, max_tokens: int | None, system_tokens: int | None
    ) -> bool:
        """Whether the summary and the messages it does not cover fill more than
        ``COMPACTION_TRIGGER_RATIO`` of the room the system prompt leaves in the window (see
        ``needs_compaction``)."""
        budget, stored_system = self._window(conv, max_tokens or self.window_tokens)
        pinned = self._pinned_tokens(conv)
        if system_tokens is None:
            system_tokens = self.system_tokens if self.system_tokens is not None else stored_system
        if system_tokens is None:
            system_tokens = pinned
        conf = app_settings()
        # The pinned prompt is in ``stored_tokens`` but no summary can fold it.
        uncovered = conv.stored_tokens - pinned - (summary.tokens_covered if summary else 0)
        room = budget - system_tokens
        # Compact before the window is full, so the next human message still finds room.
        return uncovered + (summary.token_count if summary else 0) > room * conf.COMPACTION_TRIGGER_RATIO

    def _pinned_tokens(self, conv: Conversation) -> int:
        """Tokens of the stored pinned system prompt, every message of its run summed (0
        without one; one query with one)."""
        if conv.pinned_seq is None:
            return 0
        tokens: int | None = Message.objects.filter(
            conversation_id=conv.pk, seq__gte=conv.pinned_seq, seq__lte=conv.pinned_through
        ).aggregate(tokens=Sum("token_count"))["tokens"]
        return tokens or 0

    def _opens_without_human(self, conv: Conversation) -> bool:
        first_role = (
            Message.objects.filter(conversation_id=conv.pk, seq__gt=self._floor(conv))
            .order_by("seq")
            .values_list("role", flat=True)
            .first()
        )
        return first_role is not None and first_role != Role.HUMAN

    def compact_if_needed(self, *, max_tokens: int | None = None, system_tokens: int | None = None) -> bool:
        """Request a compaction when ``needs_compaction()`` holds, through
        ``request_compaction()`` (inline after commit, a Celery task, or nothing, by
        ``COMPACTION_MODE``). Never raises because of the broker or the model.

        Args:
            max_tokens: the window budget (tokens): the trigger is checked against it and
                the summary is made to fit it (``summary_token_budget``).
            system_tokens: tokens of a system prompt sent with every window but not stored
                (an agent's ``SYSTEM_PROMPT``); default: the stored pinned prompt, if any.

        Returns:
            ``True`` when a compaction was run, enqueued or scheduled for commit.
        """
        # The compactor's door back to the dispatcher, the one call up a layer in this
        # package: dispatch builds compactors (through runs), so it imports them, not the
        # reverse; ``compact_if_needed()`` is kept for the seed design's compactor contract.
        from agentmemory.compaction.dispatch import request_compaction

        return request_compaction(
            self.conversation_id,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            compactor=self,
            reason="compact_if_needed",
        ).scheduled

    def fit_to_window(self, max_tokens: int | None, system_tokens: int | None = None) -> None:
        """Make the next summary fit windows of ``max_tokens`` tokens that send a system
        prompt of ``system_tokens`` tokens (``None``: the stored pinned prompt, if any);
        ``run()`` sets ``max_summary_tokens`` from them (``summary_token_budget``)."""
        self.window_tokens = max_tokens
        self.system_tokens = system_tokens

    @staticmethod
    def _window(conv: Conversation, max_tokens: int | None) -> tuple[int, int | None]:
        """``(window budget, system prompt tokens or None)`` a summary is made for: the
        budget given, else the one the conversation's last compaction request named
        (``Conversation.summary_window_tokens``, with its system prompt), else the window of
        the agent registered under the conversation's agent key
        (``agent_registry.window_budget``), else ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``.
        A request without a budget (an API append, the sweep) made summaries for 10,000
        tokens, which then filled most of the smaller windows they were sent in."""
        if max_tokens:
            return max_tokens, None
        if conv.summary_window_tokens:
            return conv.summary_window_tokens, conv.summary_system_tokens
        registered = window_budget(conv.agent_key)
        if registered is not None:
            # the conversation's agent has not named its window yet (history written through
            # the API before its first turn): its windows are the ones to fit
            return registered
        return app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT, None

    def summary_budget(self, conv: Conversation) -> int:
        """The limit of the summary made now (tokens of text): ``summary_token_budget`` for
        the window set by ``fit_to_window`` (default ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``),
        the system prompt given there or the stored pinned one, capped by
        ``summary_token_cap``. Reads the pinned prompt's count (one query) when it is needed."""
        window, stored_system = self._window(conv, self.window_tokens)
        system = self.system_tokens if self.system_tokens is not None else stored_system
        if system is None:
            system = self._pinned_tokens(conv)
        return summary_token_budget(
            window, system_tokens=system, overhead=self.summary_tokens(""), cap=self.summary_token_cap
        )

    # -- the span -----------------------------------------------------------------------

    def _floor(self, conv: Conversation) -> int:
        # The pinned system prompt, its whole run of system messages (and anything before
        # it, which ``clear()`` deleted), is never folded into a summary.
        summary = conv.own_summary
        floor = summary.through_seq if summary else 0
        return max(floor, conv.pinned_through)

    def target_boundary(self, conv: Conversation) -> int | None:
        """The ``through_seq`` the next summary should reach, or ``None`` if nothing can be
        folded: everything before the newest ``keep_recent_human_turns`` human turns (and
        before ``keep_recent_messages``), cut at the start of a human turn so that no tool
        exchange is split (BUG-05, BUG-15). With fewer human turns than that after the
        summary, what comes before the first of them (no window can start there); with none,
        every message (tool exchanges alone), less ``keep_recent_messages``, cut before an
        exchange still waiting for a result (``last_foldable_seq``)."""
        floor = self._floor(conv)
        humans = Message.objects.filter(conversation_id=conv.pk, role=Role.HUMAN, seq__gt=floor).order_by(
            "-seq"
        )
        kept = humans.values_list("seq", flat=True)[
            self.keep_recent_human_turns - 1 : self.keep_recent_human_turns
        ]
        kept_start = next(iter(kept), None)
        if kept_start is None:
            oldest = humans.order_by("seq").values_list("seq", flat=True).first()
            end = conv.last_seq if oldest is None else oldest - 1
            if oldest is None and self.keep_recent_messages:
                end = conv.last_seq - self.keep_recent_messages
            target = last_foldable_seq(conv, floor=floor, target=end) if end > floor else floor
            return target if target > floor else None
        if self.keep_recent_messages:
            limit = conv.last_seq - self.keep_recent_messages + 1
            if limit < kept_start:
                kept_start = humans.filter(seq__lte=limit).values_list("seq", flat=True).first()
                if kept_start is None:
                    return None
        # Never cut a tool exchange still waiting for a result (unless abandoned) or answered late.
        target = last_foldable_seq(conv, floor=floor, target=kept_start - 1)
        return target if target > floor else None

    def _rows(self, floor: int, target: int) -> Iterator[Message]:
        """Stored messages ``floor+1..target`` in order, a page at a time (memory stays
        bounded); orphaned tool results (relaxed imports) are skipped."""
        last = floor
        while last < target:
            page = list(
                Message.objects.filter(
                    conversation_id=self.conversation_id, seq__gt=last, seq__lte=target
                ).order_by("seq")[:_PAGE]
            )
            if not page:
                return
            for row in page:
                if not row.is_orphan:
                    yield row
            last = page[-1].seq

    def _span(self, floor: int, target: int) -> Iterator[list[ChatMessage]]:
        """Messages ``floor+1..target`` in chunks of at most ``max_input_tokens`` (by stored
        counts); a single larger message is a chunk of its own."""
        chunk: list[ChatMessage] = []
        tokens = 0
        for row in self._rows(floor, target):
            if chunk and tokens + row.token_count > self.max_input_tokens:
                yield chunk
                chunk, tokens = [], 0
            chunk.append(row.to_chat_message())
            tokens += row.token_count
        if chunk:
            yield chunk

    def _smaller_spans(
        self, messages: list[ChatMessage], exc: LLMContextLengthError
    ) -> list[list[ChatMessage]]:
        """``messages`` in smaller spans after the summariser said a request was over its
        context window (``LLMContextLengthError``: a compaction model with a smaller window
        than ``SUMMARIZER_MAX_INPUT_TOKENS`` assumes; NousResearch/hermes-agent#7879,
        langchain-ai/deepagents#5913). Lowers ``max_input_tokens`` for the rest of the run to
        half the failed span's stored tokens, so the following spans, and each message's
        rendered copy, are sent smaller too (``run()`` restores it); the stored messages stay
        whole.

        Returns:
            Two or more spans of ``messages``, in order; one message alone, which the
            transcript then cuts to the lowered limit.

        Raises:
            LLMContextLengthError: ``exc`` again when nothing smaller can be sent (the limit
                is already ``MIN_INPUT_TOKENS``).
        """
        tokens = sum(m.token_count or 0 for m in messages)
        limit = max(MIN_INPUT_TOKENS, min(self.max_input_tokens, tokens) // 2)
        if limit >= self.max_input_tokens and len(messages) == 1:
            raise exc
        logger.warning(
            "compaction of conversation %s: the summariser's context window is smaller than a span "
            "of %s messages (%s tokens); folding it in spans of at most %s tokens (lower "
            "SUMMARIZER_MAX_INPUT_TOKENS to fit the compaction model): %s",
            self.conversation_id,
            len(messages),
            tokens,
            limit,
            exc,
        )
        self.max_input_tokens = min(self.max_input_tokens, limit)
        if len(messages) == 1:
            return [messages]
        spans: list[list[ChatMessage]] = [[]]
        size = 0
        for message in messages:
            if spans[-1] and size + (message.token_count or 0) > limit:
                spans.append([])
                size = 0
            spans[-1].append(message)
            size += message.token_count or 0
        if len(spans) == 1:
            half = len(messages) // 2
            spans = [messages[:half], messages[half:]]
        return spans

    # -- writing ------------------------------------------------------------------------

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        """Fold ``messages`` into ``previous``; subclasses implement it."""
        raise NotImplementedError

    def validate(self, text: str) -> str:
        """The cleaned (stripped) summary text, or ``InvalidSummaryError``.

        The checks are structural, never about the wording (a summary may well say that an
        order was lost or that a payment failed with a 502): the text is not empty or
        whitespace; it is not the prompt sent back (the prompt's section headers on lines of
        their own); no database refuses it (NUL characters, lone surrogates). Its length is
        checked by the caller against ``max_summary_tokens`` after condensing. Whether the
        provider refused or cut the reply short is known from the response (see
        ``LLMMemoryCompactor``), not from the text.
        """
        cleaned = (text or "").strip()
        if not cleaned:
            raise InvalidSummaryError("the summariser returned an empty summary")
        lines = {line.strip() for line in cleaned.splitlines()}
        if all(header in lines for header in PROMPT_HEADERS):
            raise InvalidSummaryError("the summariser echoed its prompt")
        problem = text_problem(cleaned)
        if problem:
            raise InvalidSummaryError(f"the summary {problem}")
        return cleaned

    def summary_message(self, text: str) -> ChatMessage:
        return ChatMessage.system(app_settings().SUMMARY_MESSAGE_PREFIX + text)

    def summary_tokens(self, text: str) -> int:
        """Tokens of the summary message as the context window sends it (prefix, framing)."""
        return self.token_counter.count_message(self.summary_message(text))

    def text_tokens(self, text: str) -> int:
        """Tokens of the summary text alone: what ``max_summary_tokens`` limits."""
        return self.token_counter.count_text(text)

    # -- the lease ----------------------------------------------------------------------

    def _claim(self) -> Lease | None:
        """Take the compaction lease (``agentmemory.compaction.state.claim_lease``)."""
        return claim_lease(self.conversation_id)

    def _release(self, lease: Lease) -> None:
        release_lease(self.conversation_id, lease)

    def _busy(self) -> CompactionRun:
        return busy_run(self.conversation_id)

    # -- running ------------------------------------------------------------------------

    def compact(self) -> Summary | None:
        """Run ``run()`` and return the summary after it (see ``run()`` for errors).

        Returns:
            The new summary; the current one if it already reaches the target; ``None``
            when there is nothing to do, another run holds the lease, or the conversation is
            gone (BUG-23).
        """
        run = self.run()
        if run.status in (NOTHING, BUSY, GONE, LOST_LEASE, SUPERSEDED):
            return None
        return run.summary

    def run(self) -> CompactionRun:
        """Write the next summary now, under the conversation's lease (one bounded run).

        Holds no database lock while the model works; the lease (renewed by a
        ``LeaseKeeper`` thread) keeps a second run from doing the same work, the lease token
        checked under the row lock keeps a run that lost its lease from storing, and the
        unique ``(conversation, through_seq)`` keeps the boundary from moving backwards.
        Messages are never edited or deleted. With a memory flush (``agentmemory.flush``), the
        facts the summariser found are checked and embedded before the transaction and stored
        in the one that stores the summary. At most ``max_calls_per_run`` summariser calls
        are made (plus those needed to reach the next human-turn boundary): a longer backlog
        is stored as an intermediate summary at a human-turn boundary (``"partial"``) and
        the next run continues from there.

        Returns:
            A ``CompactionRun``.

        Raises:
            InvalidSummaryError: the summariser's output was unusable (nothing is stored).
            TransientLLMError, PermanentLLMError: from the model (nothing is stored).
            ConversationStateError: the current summary is another conversation's
                (``summary_of``): no summariser call is made, nothing is stored.
        """
        lease = self._claim()
        if lease is None:
            return self._busy()
        try:
            conv = self._conversation()
            if conv is None:
                return CompactionRun(GONE)
            current = summary_of(conv)  # never another conversation's: its text is not folded
            target = self.target_boundary(conv)
            if target is None:
                mark_request_served(self.conversation_id, lease.taken_at)
                return CompactionRun(NOTHING, summary=current)
            self.max_summary_tokens = self.summary_budget(conv)
            self.flush = memory_flush.MemoryFlush.for_conversation(conv)
            input_limit = self.max_input_tokens  # ``_smaller_spans`` may lower it for this run
            try:
                with LeaseKeeper(
                    self.conversation_id, lease, app_settings().COMPACTION_LEASE_SECONDS
                ) as keeper:
                    run = self._compact(conv, target, lease, keeper)
            finally:
                self.max_input_tokens = input_limit
            if run.status == STORED:
                mark_request_served(self.conversation_id, lease.taken_at)
            elif run.status == PARTIAL:
                clear_compaction_error(self.conversation_id)
            return run
        finally:
            self._release(lease)

    def _spent(self, calls: int) -> bool:
        """Whether a run that has made (or is about to make) ``calls`` summariser calls must
        stop at this human-turn boundary: ``max_calls_per_run`` reached, or ``deadline``
        passed (a caller waiting for the run: ``COMPACTION_WAIT_SECONDS`` bounds the turn,
        and one run of 20 model calls took minutes)."""
        if calls >= self.max_calls_per_run:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    # Long on purpose: the fold loop's running totals are what the storing
    # transaction writes, and the checks under the row lock read them all; halves would
    # hand a dozen values across.
    def _compact(self, conv: Conversation, target: int, lease: Lease, keeper: LeaseKeeper) -> CompactionRun:
        previous = summary_of(conv)
        floor = self._floor(conv)
        text = previous.text if previous else None
        model = ""
        input_tokens = output_tokens = calls = 0
        span_tokens = span_humans = 0
        chunk: list[ChatMessage] = []
        chunk_tokens = 0
        reached = floor  # the last seq folded into ``text``
        # the first seq this run reads: the new summary's first_seq when there is no previous
        # one (after ``clear()`` the stored messages start past ``floor + 1``)
        first: int | None = None
        stop_at: int | None = None  # set when the run stops early at a human-turn boundary

        def fold(messages: list[ChatMessage]) -> None:
            nonlocal text, model, input_tokens, output_tokens, calls, span_tokens, span_humans, reached
            if keeper.lost.is_set():
                raise LeaseLost
            try:
                draft = self.summarize(text, messages)
            except LLMContextLengthError as exc:
                calls += 1
                for part in self._smaller_spans(messages, exc):
                    fold(part)
                return
            if self.flush is not None:
                self.flush.collect(getattr(draft, "facts", ()), messages)
            text = draft.text
            model = draft.model or model
            input_tokens += draft.input_tokens
            output_tokens += draft.output_tokens
            calls += max(draft.llm_calls, 1)
            span_tokens += sum(m.token_count or 0 for m in messages)
            span_humans += sum(1 for m in messages if m.role is Role.HUMAN)
            reached = messages[-1].seq or reached

        try:
            for row in self._rows(floor, target):
                started = bool(chunk) or reached > floor
                if row.role == Role.HUMAN and started and self._spent(calls + bool(chunk)):
                    # The run's budget of calls (or of time) is spent: fold what is pending and
                    # stop right before this human message, so the intermediate summary ends
                    # on a turn.
                    if chunk:
                        fold(chunk)
                    stop_at = row.seq - 1
                    break
                if chunk and chunk_tokens + row.token_count > self.max_input_tokens:
                    fold(chunk)
                    chunk, chunk_tokens = [], 0
                if first is None:
                    first = row.seq
                chunk.append(with_stored_time(row.to_chat_message(), row.created_at))
                chunk_tokens += row.token_count
            else:
                if chunk:
                    fold(chunk)
        except LeaseLost:
            return CompactionRun(LOST_LEASE, llm_calls=calls)
        boundary = target if stop_at is None else stop_at
        if text is None or reached <= floor:
            return CompactionRun(NOTHING, summary=previous, llm_calls=calls)
        text_tokens = self.text_tokens(text)
        if text_tokens > self.max_summary_tokens:
            raise InvalidSummaryError(
                f"summary has {text_tokens} tokens, over its limit of {self.max_summary_tokens} "
                f"(MAX_SUMMARY_TOKENS={self.summary_token_cap}, and the window's share)"
            )
        token_count = self.summary_tokens(text)
        if self.flush is not None:
            self.flush.prepare()  # checks and embeds the facts: no lock is held yet

        with transaction.atomic(using=router.db_for_write(Conversation)):
            if self.flush is not None:
                self.flush.lock()  # the facts' scope first, as a request storing a fact would
            locked = (
                Conversation.objects.select_for_update()
                .filter(pk=self.conversation_id)
                .only(
                    "id",
                    "summary_id",
                    "human_message_count",
                    "pinned_seq",
                    "compaction_lease",
                    "content_purged_at",
                )
                .first()
            )
            if locked is None:
                return CompactionRun(GONE, llm_calls=calls)  # deleted while the model worked (BUG-23)
            if locked.content_purged_at != conv.content_purged_at:
                # blanked (``purge_conversations --blank-content``) while the model worked: the
                # summary and the facts were made of the words the purge removed
                logger.warning(
                    "conversation %s was blanked while its compaction ran; not stored", self.conversation_id
                )
                return CompactionRun(SUPERSEDED, llm_calls=calls)
            # The current summary as stored now, only one of this conversation's own: one set
            # by hand to another conversation's meanwhile stops the run (``SUPERSEDED``).
            current = (
                Summary.objects.filter(pk=locked.summary_id, conversation_id=self.conversation_id).first()
                if locked.summary_id
                else None
            )
            if current is not None and current.through_seq >= boundary:
                # Someone else got there first: the boundary never moves back.
                return CompactionRun(STORED, summary=current, llm_calls=calls)
            if locked.compaction_lease != lease.token or keeper.lost.is_set():
                logger.warning(
                    "compaction of conversation %s lost its lease while the model worked; not stored",
                    self.conversation_id,
                )
                return CompactionRun(LOST_LEASE, llm_calls=calls)
            if locked.summary_id != (previous.pk if previous else None) or (
                previous is not None and current is None
            ):
                # another summary is current, or the one extended was moved by hand to another
                # conversation meanwhile: a summary extending it would be this conversation's
                # with another's as its ``previous``
                return CompactionRun(SUPERSEDED, summary=current, llm_calls=calls)
            if not Message.objects.filter(conversation_id=self.conversation_id, seq=boundary).exists():
                return CompactionRun(SUPERSEDED, summary=current, llm_calls=calls)  # history cleared
            try:
                with transaction.atomic(using=router.db_for_write(Summary)):
                    summary = Summary.objects.create(
                        conversation_id=self.conversation_id,
                        text=text,
                        first_seq=previous.first_seq if previous else (floor + 1 if first is None else first),
                        through_seq=boundary,
                        previous=previous,
                        human_messages_covered=(previous.human_messages_covered if previous else 0)
                        + span_humans,
                        human_message_count=locked.human_message_count,
                        tokens_covered=(previous.tokens_covered if previous else 0) + span_tokens,
                        token_count=token_count,
                        token_counter=self.token_counter.id,
                        model=model,
                        prompt_version=self.prompt_version,
                        input_tokens=input_tokens,
                        output_tokens=output_tokens,
                        llm_calls=calls,
                    )
            except IntegrityError:
                existing = Summary.objects.filter(
                    conversation_id=self.conversation_id, through_seq=boundary
                ).first()
                return CompactionRun(
                    STORED if stop_at is None else PARTIAL, summary=existing, llm_calls=calls
                )
            Conversation.objects.filter(pk=self.conversation_id).update(summary=summary)
            if self.flush is not None:
                self.flush.store(summary)  # with the summary or not at all; never fails it
        signals.summary_created.send(sender=Summary, conversation_id=self.conversation_id, summary=summary)
        if stop_at is not None:
            logger.info(
                "compaction of conversation %s folded seqs %s..%s in %s calls; %s..%s left for the next run",
                self.conversation_id,
                floor + 1,
                boundary,
                calls,
                boundary + 1,
                target,
            )
            return CompactionRun(PARTIAL, summary=summary, llm_calls=calls)
        return CompactionRun(STORED, summary=summary, llm_calls=calls)
