"""Memory compaction: incremental summaries of a conversation's earlier messages.

``BaseMemoryCompactor`` holds the protocol (when to compact, which span, how to store the
result safely under a lease); ``LLMMemoryCompactor`` writes the summary with a ``ChatModel``;
``OfflineMemoryCompactor`` writes a labelled extractive summary when no model is configured.

``request_compaction()`` is the one entry point every caller uses (agents, the API, the admin,
the replay, the context builder): it decides whether a compaction is due and then runs it in
process after the caller's transaction commits ("inline"), hands it to the Celery task
``agentmemory.tasks.compact_conversation`` ("celery"), or does nothing ("off"), following
``AGENTMEMORY["COMPACTION_MODE"]``. A broker or model failure never reaches the caller: it is
logged and recorded on the conversation, and the periodic sweep (``sweep_compactions`` task,
``compact_conversations`` command) or the next trigger picks the work up again.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, OperationalError, connections, router, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from agentmemory import broker, signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import InvalidSummaryError, LLMRefusalError, PermanentLLMError, TransientLLMError
from agentmemory.flush import MemoryFlush
from agentmemory.history import PersistentChatHistory, last_foldable_seq
from agentmemory.llm.base import ChatModel, ChatResponse, OutputSchema, Usage
from agentmemory.llm.facts import FactDraft, said_at, speaker, with_stored_time
from agentmemory.llm.structured import invoke_structured
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import TokenCounter, longest_fitting_prefix
from agentmemory.validation import text_problem, whole_number

logger = logging.getLogger("agentmemory.compaction")

PROMPT_VERSION = "summary-v3"

#: what a summary must keep and how it is written (``SUMMARY_INSTRUCTIONS`` and the
#: structured call of the memory flush, ``agentmemory.flush``, share it)
SUMMARY_RULES = (
    "You maintain the running summary of a conversation between a user and an AI assistant that "
    "can call tools. You are given the previous summary (possibly empty) and the messages that "
    "came after it, each headed by its number, the date it was written and who wrote it. Write the "
    "updated summary: keep every fact, name, number, date, decision, preference, commitment and "
    "open question that later turns may need, and the outcome of tool calls that matter. Say who "
    "said or did what by name where the messages give names, and when: write dates as calendar "
    "dates (turn 'yesterday' or 'last week' into the date it means, from the date of its "
    "message). Drop small talk. Write plain prose or short bullet points in the third person, at "
    "most {max_tokens} tokens, in the same language as the conversation (the language the user "
    "writes in; do not translate it, keep names and identifiers as written)."
)
SUMMARY_INSTRUCTIONS = SUMMARY_RULES + " Output only the summary."
CONDENSE_INSTRUCTIONS = (
    "Shorten the following conversation summary to at most {max_tokens} tokens. Keep facts, "
    "names, numbers, dates, decisions and open questions; drop detail that later turns are "
    "unlikely to need. Keep the summary's language. Output only the shortened summary."
)
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


# The section headers of the summary prompt: a reply that repeats them is the prompt sent back.
_PROMPT_HEADERS = ("Previous summary:", "New messages:")
_PAGE = 500

#: ``(max_tokens, system_tokens)`` of the windows a requested summary must fit
_Window = tuple[int | None, int | None]

#: the values of ``AGENTMEMORY["COMPACTION_MODE"]``
COMPACTION_MODES = ("auto", "celery", "inline", "off")

#: How publishing a task retries: once, at once, within ``ENQUEUE_TIMEOUT_SECONDS``
#: (``agentmemory.broker``), so a dead or frozen broker costs an append a fraction of a
#: second, not Celery's default of several seconds of reconnecting.
ENQUEUE_RETRY_POLICY = broker.ENQUEUE_RETRY_POLICY

#: The longest pause of the sweep before it retries a conversation whose compaction runs keep
#: failing (seconds); see ``retry_delay``.
FAILED_RETRY_MAX_SECONDS = 6 * 3600


def retry_delay(failures: int) -> float:
    """How long the sweep waits after the ``failures``-th failed compaction run in a row of
    a conversation before it tries again (seconds). A first failure is retried by the next
    sweep (a one-off 503 passes); from the second on the pause doubles from two lease
    periods: ``COMPACTION_LEASE_SECONDS * 2**(failures - 1)``, at most
    ``FAILED_RETRY_MAX_SECONDS``. A summariser that keeps refusing (a permanent model error,
    a summary rejected every time) is then asked a few times a day, not on every sweep; a
    new turn still asks at once (its new messages may be what helps)."""
    if failures <= 1:
        return 0.0
    lease = app_settings().COMPACTION_LEASE_SECONDS
    return float(min(lease * 2 ** min(failures - 1, 32), FAILED_RETRY_MAX_SECONDS))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class SummaryDraft:
    """A validated summary text with what it cost to write (tokens, calls), and the durable
    facts the summariser found in the messages it folded (kept by the memory flush,
    ``agentmemory.flush``; empty when no flush runs)."""

    text: str
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    facts: tuple[FactDraft, ...] = ()


#: ``CompactionRun.status`` values
STORED, PARTIAL, NOTHING, BUSY, GONE, LOST_LEASE, SUPERSEDED = (
    "stored",
    "partial",
    "nothing",
    "busy",
    "gone",
    "lost_lease",
    "superseded",
)


@dataclass(frozen=True, slots=True)
class CompactionRun:
    """What one bounded compaction run did.

    Attributes:
        status: ``"stored"`` (a summary reaching the target was stored), ``"partial"`` (an
            intermediate summary was stored at a human-turn boundary; more remains),
            ``"nothing"`` (nothing to fold), ``"busy"`` (another run holds the lease),
            ``"gone"`` (the conversation was deleted), ``"lost_lease"`` (the lease was taken
            over while the model worked; nothing stored), ``"superseded"`` (the summary or
            history changed meanwhile; nothing stored).
        summary: the conversation's summary after the run (new or current), or ``None``.
        retry_after: for ``"busy"``: seconds until the other run's lease expires.
        llm_calls: summariser calls made by this run.
    """

    status: str
    summary: Summary | None = None
    retry_after: float = 0.0
    llm_calls: int = 0

    @property
    def more_to_do(self) -> bool:
        """Whether another run should follow (a partial backlog, or a busy lease)."""
        return self.status in (PARTIAL, BUSY, LOST_LEASE, SUPERSEDED)


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """What ``request_compaction()`` did.

    Attributes:
        conversation_id: the conversation.
        due: a compaction was due (or forced).
        mode: the mode in force: ``"inline"``, ``"celery"`` or ``"off"``.
        enqueued: the Celery task was handed to the broker (or will be when the caller's
            transaction commits, see ``deferred``).
        ran_inline: the compaction ran in this process before the call returned.
        deferred: the work waits for the caller's transaction to commit (then runs inline,
            or is enqueued).
        summary_id: the conversation's summary id after an inline run or a wait.
        error: why the work could not be started or failed, when known (also recorded on
            the conversation as ``compaction_error``).
        reason: the caller's reason, for logs.
    """

    conversation_id: int
    due: bool
    mode: str
    enqueued: bool = False
    ran_inline: bool = False
    deferred: bool = False
    summary_id: int | None = None
    error: str | None = None
    reason: str = ""

    @property
    def scheduled(self) -> bool:
        """A compaction ran, was enqueued, or will run/enqueue at commit."""
        return self.enqueued or self.ran_inline or self.deferred


# --------------------------------------------------------------------------- the lease


def _write_locked(exc: OperationalError) -> bool:
    """Whether ``exc`` is SQLite refusing a second writer ("database is locked", or "database
    table is locked" on a shared-cache database) rather than a real failure."""
    return "is locked" in str(exc)


@dataclass(frozen=True, slots=True)
class Lease:
    """A compaction's hold on a conversation: a random token and when it expires."""

    token: uuid.UUID
    taken_at: Any
    expires_at: Any


class LeaseKeeper:
    """Renews a lease every ``lease_seconds / 3`` seconds in a small daemon thread while the
    model works, so a long compaction is never taken over while it is alive, and a dead
    worker's lease expires within ``lease_seconds``. The thread uses its own database
    connection and closes it when it stops. ``lost`` is set when the lease was taken over
    (the row no longer holds our token): the run must not store.
    """

    def __init__(self, conversation_id: int, lease: Lease, lease_seconds: float) -> None:
        self.conversation_id = conversation_id
        self.lease = lease
        self.lease_seconds = lease_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"agentmemory-lease-{conversation_id}", daemon=True
        )

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # Bounded: a renewal stuck behind a lock must not hold the caller.
        self._thread.join(timeout=5)

    def _run(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        try:
            while not self._stop.wait(interval):
                renewed = Conversation.objects.filter(
                    pk=self.conversation_id, compaction_lease=self.lease.token
                ).update(compaction_lease_expires_at=timezone.now() + timedelta(seconds=self.lease_seconds))
                if not renewed:
                    logger.warning(
                        "compaction of conversation %s lost its lease; its result will not be stored",
                        self.conversation_id,
                    )
                    self.lost.set()
                    return
        except Exception:
            logger.exception("renewing the compaction lease of conversation %s failed", self.conversation_id)
        finally:
            connections.close_all()  # this thread's connections only


# --------------------------------------------------------------------------- compactors


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
        self.flush: MemoryFlush | None = None

    # -- reading ------------------------------------------------------------------------

    def _conversation(self) -> Conversation | None:
        conversation: Conversation | None = (
            self.conversation_repo.select_related("summary").filter(pk=self.conversation_id).first()  # type: ignore[misc]  # the repo is duck-typed
        )
        return conversation

    def get_summary(self) -> Summary | None:
        """The conversation's current summary, or ``None``."""
        conv = self._conversation()
        return conv.summary if conv is not None else None

    def needs_compaction(self, *, max_tokens: int | None = None, system_tokens: int | None = None) -> bool:
        """Whether a compaction is due: ``every_n_human`` human messages since the last
        summary was made; or the summary and the messages it does not cover fill more than
        ``COMPACTION_TRIGGER_RATIO`` (0.8) of the room the system prompt leaves in a window
        of ``max_tokens`` (default: the window of ``fit_to_window``, else
        ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``), so the next human message still finds
        room; or the conversation opens with messages before its first human message, which
        no window can start on; or a compaction was requested longer than
        ``COMPACTION_LEASE_SECONDS`` ago and has not completed (it failed, or its worker
        died) and no live lease holds it. Reads the conversation row (one to three queries).

        The system prompt is never folded, so it is not counted as history (a large prompt
        alone must not make every turn due), but the room it takes is left out of the window
        (an agent's prompt that is not stored must not make the trigger late):
        ``system_tokens`` (default: the one given to ``fit_to_window``, else the stored
        pinned prompt's)."""
        conv = self._conversation()
        self.last_checked = conv
        if conv is None:
            return False
        if _stale_request(conv):
            return True
        summary = conv.summary
        baseline = summary.human_message_count if summary else 0
        if conv.human_message_count - baseline >= self.every_n_human:
            return True
        humans_after = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        if humans_after < self.keep_recent_human_turns:
            return False  # nothing could be folded: the newest turns stay verbatim
        if summary is None and self._opens_without_human(conv):
            # The assistant spoke first (a greeting): those messages can never start a
            # window, so fold them now rather than leave them outside window and summary.
            return True
        if humans_after == self.keep_recent_human_turns:
            return False
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
        (``Conversation.summary_window_tokens``, with its system prompt), else
        ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``. A request without a budget (an API
        append, the sweep) made summaries for 10,000 tokens, which then filled most of the
        smaller windows they were sent in."""
        if max_tokens:
            return max_tokens, None
        if conv.summary_window_tokens:
            return conv.summary_window_tokens, conv.summary_system_tokens
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
        floor = conv.summary.through_seq if conv.summary else 0
        return max(floor, conv.pinned_through)

    def target_boundary(self, conv: Conversation) -> int | None:
        """The ``through_seq`` the next summary should reach, or ``None`` if nothing can be
        folded: everything before the newest ``keep_recent_human_turns`` human turns (and
        before ``keep_recent_messages``), cut at the start of a human turn so that no tool
        exchange is split (BUG-05, BUG-15)."""
        floor = self._floor(conv)
        humans = Message.objects.filter(conversation_id=conv.pk, role=Role.HUMAN, seq__gt=floor).order_by(
            "-seq"
        )
        kept = humans.values_list("seq", flat=True)[
            self.keep_recent_human_turns - 1 : self.keep_recent_human_turns
        ]
        kept_start = next(iter(kept), None)
        if kept_start is None:
            return None
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
        if all(header in lines for header in _PROMPT_HEADERS):
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
        """Take the compaction lease: a fresh token with an expiry ``COMPACTION_LEASE_SECONDS``
        ahead, written only when no other run holds a live lease (an expired lease, left by a
        dead worker, is taken over). ``None`` when another run holds it."""
        now = timezone.now()
        lease = Lease(
            token=uuid.uuid4(),
            taken_at=now,
            expires_at=now + timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS),
        )
        try:
            taken = (
                Conversation.objects.filter(pk=self.conversation_id)
                .filter(Q(compaction_lease__isnull=True) | Q(compaction_lease_expires_at__lt=now))
                .update(
                    compaction_lease=lease.token,
                    compaction_lease_expires_at=lease.expires_at,
                    compaction_started_at=now,
                )
            )
        except OperationalError as exc:
            if not _write_locked(exc):
                raise
            # SQLite allows one writer at a time: a run that cannot write the lease row now
            # is in the same place as one that finds the lease taken, and is rescheduled.
            return None
        return lease if taken else None

    def _release(self, lease: Lease) -> None:
        Conversation.objects.filter(pk=self.conversation_id, compaction_lease=lease.token).update(
            compaction_lease=None, compaction_lease_expires_at=None, compaction_started_at=None
        )

    def _busy(self) -> CompactionRun:
        try:
            expires = (
                Conversation.objects.filter(pk=self.conversation_id)
                .values_list("compaction_lease_expires_at", flat=True)
                .first()
            )
        except OperationalError as exc:
            if not _write_locked(exc):
                raise
            return CompactionRun(BUSY, retry_after=float(app_settings().COMPACTION_LEASE_SECONDS))
        if expires is None and not Conversation.objects.filter(pk=self.conversation_id).exists():
            return CompactionRun(GONE)
        left = (expires - timezone.now()).total_seconds() if expires is not None else 0.0
        logger.info(
            "compaction of conversation %s is already running (lease expires in %.0f s)",
            self.conversation_id,
            left,
        )
        return CompactionRun(BUSY, retry_after=max(left, 0.0))

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
        """
        lease = self._claim()
        if lease is None:
            return self._busy()
        try:
            conv = self._conversation()
            if conv is None:
                return CompactionRun(GONE)
            target = self.target_boundary(conv)
            if target is None:
                _mark_done(self.conversation_id, lease.taken_at)
                return CompactionRun(NOTHING, summary=conv.summary)
            self.max_summary_tokens = self.summary_budget(conv)
            self.flush = MemoryFlush.for_conversation(conv)
            with LeaseKeeper(self.conversation_id, lease, app_settings().COMPACTION_LEASE_SECONDS) as keeper:
                run = self._compact(conv, target, lease, keeper)
            if run.status == STORED:
                _mark_done(self.conversation_id, lease.taken_at)
            elif run.status == PARTIAL:
                _clear_error(self.conversation_id)
            return run
        finally:
            self._release(lease)

    def _compact(self, conv: Conversation, target: int, lease: Lease, keeper: LeaseKeeper) -> CompactionRun:
        previous = conv.summary
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
                raise _LeaseLost
            draft = self.summarize(text, messages)
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
                if row.role == Role.HUMAN and started and calls + bool(chunk) >= self.max_calls_per_run:
                    # The run's budget of calls is spent: fold what is pending and stop right
                    # before this human message, so the intermediate summary ends on a turn.
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
        except _LeaseLost:
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
                .only("id", "summary_id", "human_message_count", "pinned_seq", "compaction_lease")
                .first()
            )
            if locked is None:
                return CompactionRun(GONE, llm_calls=calls)  # deleted while the model worked (BUG-23)
            current = Summary.objects.filter(pk=locked.summary_id).first() if locked.summary_id else None
            if current is not None and current.through_seq >= boundary:
                # Someone else got there first: the boundary never moves back.
                return CompactionRun(STORED, summary=current, llm_calls=calls)
            if locked.compaction_lease != lease.token or keeper.lost.is_set():
                logger.warning(
                    "compaction of conversation %s lost its lease while the model worked; not stored",
                    self.conversation_id,
                )
                return CompactionRun(LOST_LEASE, llm_calls=calls)
            if (current.pk if current else None) != (previous.pk if previous else None):
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


class _LeaseLost(Exception):
    """Internal: the lease keeper saw the lease taken over; stop folding."""


def _stale_request(conv: Conversation) -> bool:
    """A compaction was requested more than a lease ago, has not completed, and no live
    lease holds it (its run failed, was refused, or its worker died)."""
    requested = getattr(conv, "compaction_requested_at", None)
    if requested is None:
        return False
    now = timezone.now()
    grace = timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    expires = conv.compaction_lease_expires_at
    return requested < now - grace and (expires is None or expires < now)


def _mark_done(conversation_id: int, since: Any) -> None:
    """Forget the request a completed run has served (only requests made before the run
    started: a later one still wants its own run) and the last error."""
    Conversation.objects.filter(pk=conversation_id, compaction_requested_at__lte=since).update(
        compaction_requested_at=None
    )
    _clear_error(conversation_id)


def _clear_error(conversation_id: int) -> None:
    Conversation.objects.filter(pk=conversation_id).filter(
        ~Q(compaction_error="") | Q(compaction_failures__gt=0)
    ).update(compaction_error="", compaction_failed_at=None, compaction_failures=0)


def record_compaction_failure(
    conversation_id: int, error: BaseException | str, *, failed_run: bool = False
) -> str:
    """Write why a compaction could not be started or failed on the conversation
    (``compaction_error``, ``compaction_failed_at``) and keep its request pending, so the
    sweep and the next trigger pick it up. Never raises (a failure to record is logged).
    ``failed_run``: a compaction run failed (the model or its summary, not the broker):
    ``compaction_failures`` counts it, and the sweep backs off (``retry_delay``).

    Returns:
        The recorded text.
    """
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = text[:2000]
    try:
        now = timezone.now()
        changes: dict[str, Any] = {"compaction_error": text, "compaction_failed_at": now}
        if failed_run:
            changes["compaction_failures"] = F("compaction_failures") + 1
        Conversation.objects.filter(pk=conversation_id).update(**changes)
        Conversation.objects.filter(pk=conversation_id, compaction_requested_at__isnull=True).update(
            compaction_requested_at=now
        )
    except Exception:
        logger.exception("could not record the compaction failure of conversation %s", conversation_id)
    return text


def render_transcript(
    messages: Sequence[ChatMessage],
    *,
    max_chars_per_message: int = 8_000,
    token_counter: TokenCounter | None = None,
    max_tokens_per_message: int | None = None,
) -> str:
    """Plain-text transcript for the summariser: one block per message, tool calls with
    their JSON arguments, long contents and long arguments cut (the stored messages stay
    whole): a call whose arguments carry a whole file cannot make the request overflow.

    Each message is headed by its number (seq) and, where it differs from the message before,
    the date it was said (the date a transcript gave it, else the time it was stored:
    ``agentmemory.llm.facts.said_at``), and names its writer where the message gives a name
    (``speaker``), else "User" or "Assistant": ``[#12 | 1:56 pm on 8 May, 2023] Caroline: I
    went to ...``, then ``[#13] Melanie: ...``. A summary can only keep the dates and names it
    is given.

    Args:
        messages: the span to render, oldest first.
        max_chars_per_message: cut of each content and each call's arguments (characters).
        token_counter, max_tokens_per_message: when both are given, each message's block is
            also cut to at most ``max_tokens_per_message`` tokens by ``token_counter``, its
            lines (the text, each call) sharing the budget equally. Characters are no bound
            on tokens: 8,000 rare Han ideographs are about 18,000 tokens, 8,000 cuneiform
            signs 32,000 (BUG-19), so the span's budget would not hold (BUG-12).

    Returns:
        The transcript; a cut line ends with ``[... N characters cut]``.
    """

    def cut(text: str) -> str:
        if len(text) <= max_chars_per_message:
            return text
        return text[:max_chars_per_message] + f" [... {len(text) - max_chars_per_message} characters cut]"

    lines = []
    last_said = ""
    for m in messages:
        text = cut(m.text)
        block = []
        said = said_at(m)
        # the date only where it changes, as a chat log shows it: every line need not pay for it
        head = " | ".join(
            part
            for part in (f"#{m.seq}" if m.seq is not None else "", said if said != last_said else "")
            if part
        )
        last_said = said or last_said
        name = speaker(m)
        if m.role is Role.HUMAN:
            block.append(f"{name or 'User'}: {text}")
        elif m.role is Role.AI:
            if text:
                block.append(f"{name or 'Assistant'}: {text}")
            for call in m.tool_calls:
                args = cut(json.dumps(dict(call.arguments), ensure_ascii=False))
                block.append(f"{name or 'Assistant'} called tool {call.name}({args})")
        elif m.role is Role.TOOL:
            block.append(f"Tool {m.name or m.tool_call_id} returned: {text}")
        else:
            block.append(f"System: {text}")
        if token_counter is not None and max_tokens_per_message is not None and block:
            share = max(1, max_tokens_per_message // len(block))
            block = [_cut_to_tokens(line, share, token_counter) for line in block]
        if head and block:
            block[0] = f"[{head}] {block[0]}"
        lines.extend(block)
    return "\n".join(lines)


def _cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` whole when it costs at most ``max_tokens`` tokens, else its longest prefix
    that fits with the cut marker after it (``longest_fitting_prefix``)."""
    if counter.count_text(text) <= max_tokens:
        return text

    def candidate(keep: int) -> str:
        return text[:keep] + f" [... {len(text) - keep} characters cut]"

    return candidate(
        longest_fitting_prefix(len(text), max_tokens, lambda keep: counter.count_text(candidate(keep)))
    )


class LLMMemoryCompactor(BaseMemoryCompactor):
    """Writes summaries with a ``ChatModel``: previous summary plus the new messages only
    (incremental), validated, condensed when over ``max_summary_tokens`` (BUG-13).

    A reply the provider marks as refused (OpenAI's ``finish_reason`` ``"content_filter"``
    or a ``refusal``, Anthropic's ``stop_reason`` ``"refusal"``) raises ``LLMRefusalError``;
    a reply cut at the output token limit (``"length"``, ``"max_tokens"``) raises
    ``InvalidSummaryError``: its end, with the newest facts, is missing.

    When the run keeps facts (the memory flush, ``agentmemory.flush``), one structured call
    returns the summary and the facts together (``agentmemory.flush.summarize_with_facts``):
    a reply that does not match the schema is asked again once (``max_format_attempts``),
    then fails the run with ``StructuredOutputError`` (nothing stored).
    """

    max_condense_attempts = 2
    #: structured calls per span before a malformed reply fails the run
    max_format_attempts = 2

    def _call(
        self,
        instructions: str,
        prompt: str,
        span: Sequence[ChatMessage] = (),
        *,
        output: OutputSchema | None = None,
    ) -> tuple[str, ChatResponse]:
        """One summariser call: plain, or structured when ``output`` is given
        (``agentmemory.llm.structured.invoke_structured``); recorded, and checked for a
        refusal or a cut-off reply.

        Raises:
            LLMRefusalError, InvalidSummaryError: as the class docstring says.
            TransientLLMError, PermanentLLMError: from the model.
        """
        if self.llm is None:
            raise PermanentLLMError("LLMMemoryCompactor needs an llm")
        messages = [ChatMessage.system(instructions), ChatMessage.human(prompt)]
        started = time.monotonic()
        if output is None:
            response = self.llm.invoke(messages)
        else:
            response = invoke_structured(self.llm, messages, output)
        self._record(messages, response, time.monotonic() - started, span)
        if response.refused:
            raise LLMRefusalError(
                f"the summariser {response.model or ''} declined to summarise "
                f"(finish reason {response.finish_reason!r})",
                finish_reason=response.finish_reason,
            )
        if response.cut_off:
            raise InvalidSummaryError(
                "the summary was cut off at the model's output limit "
                f"(finish reason {response.finish_reason!r})"
            )
        return response.message.text, response

    def _record(
        self, sent: list[ChatMessage], response: ChatResponse, latency: float, span: Sequence[ChatMessage]
    ) -> None:
        """Record the summariser call (``ModelCall`` of kind "compaction"): usage as the
        provider reported it, else counted with the compactor's counter and marked."""
        from agentmemory.calls import USAGE_COUNTED, USAGE_PROVIDER, record_call
        from agentmemory.models import ModelCallKind

        usage, source = response.usage, USAGE_PROVIDER
        if usage is None:
            counter = self.token_counter
            reply = response.message.text
            if not reply and response.parsed is not None:  # a forced tool call's input
                reply = json.dumps(response.parsed, ensure_ascii=False)
            usage = Usage(
                input_tokens=sum(counter.count_message(m) for m in sent),
                output_tokens=counter.count_text(reply),
            )
            source = USAGE_COUNTED
        seqs = [m.seq for m in span if m.seq is not None]
        record_call(
            ModelCallKind.COMPACTION,
            model=response.model or getattr(self.llm, "model_name", ""),
            usage=usage,
            usage_source=source,
            conversation_id=self.conversation_id,
            latency=round(latency, 6),
            finish_reason=response.finish_reason,
            first_seq=min(seqs) if seqs else None,
            last_seq=max(seqs) if seqs else None,
        )

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        facts: tuple[FactDraft, ...] = ()
        if self.flush is not None and self.flush.extract:
            from agentmemory.flush import summarize_with_facts

            text, facts, responses = summarize_with_facts(self, previous, messages)
            response = responses[-1]
        else:
            # A message larger than the span's budget is a chunk of its own: cut to the budget.
            transcript = render_transcript(
                messages, token_counter=self.token_counter, max_tokens_per_message=self.max_input_tokens
            )
            prompt = (
                f"Previous summary:\n{previous or '(none yet)'}\n\n"
                f"New messages:\n{transcript}\n\n"
                "Write the updated summary."
            )
            text, response = self._call(
                SUMMARY_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), prompt, messages
            )
            responses = [response]
        usage = sum((r.usage or Usage() for r in responses), Usage())
        usage_in, usage_out, calls = usage.input_tokens, usage.output_tokens, len(responses)
        text = self.validate(text)
        attempts = 0
        while self.text_tokens(text) > self.max_summary_tokens and attempts < self.max_condense_attempts:
            attempts += 1
            text, response = self._call(
                CONDENSE_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), text, messages
            )
            usage = response.usage or Usage()
            usage_in += usage.input_tokens
            usage_out += usage.output_tokens
            calls += 1
            text = self.validate(text)
        if self.text_tokens(text) > self.max_summary_tokens:
            raise InvalidSummaryError(
                f"summary still over {self.max_summary_tokens} tokens after {attempts} condensing attempts"
            )
        return SummaryDraft(
            text=text,
            model=response.model or getattr(self.llm, "model_name", ""),
            input_tokens=usage_in,
            output_tokens=usage_out,
            llm_calls=calls,
            facts=facts,
        )


class OfflineMemoryCompactor(BaseMemoryCompactor):
    """A labelled, extractive compactor used when no language model is configured.

    It calls no model: the summary starts with ``agentmemory.llm.offline.OFFLINE_LABEL`` and
    lists what the user asked, what the assistant said and which tools ran, one line each,
    with speakers' names and the dates they spoke, newest kept first when the list outgrows
    ``max_summary_tokens`` (counted with the configured token counter). With the memory flush
    it finds first-person facts by simple rules (``agentmemory.llm.offline.extract_facts``)
    and marks them as found without a model. It lets compaction, storage and context windows be seen
    working on a machine without API keys; configure a model (``COMPACTION_LLM``, ``LLMS``,
    ``OPENAI_API_KEY``/``ANTHROPIC_API_KEY``) for real summaries.
    """

    prompt_version = "offline-extractive-v2"

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        from agentmemory.llm.offline import OFFLINE_MODEL, extractive_summary

        text = extractive_summary(previous, messages, max_tokens=self.max_summary_tokens)
        facts = self.flush.offline_facts(messages) if self.flush is not None and self.flush.extract else ()
        return SummaryDraft(text=self.validate(text), model=OFFLINE_MODEL, llm_calls=1, facts=facts)


# --------------------------------------------------------------------------- building


def get_compaction_llm() -> ChatModel | None:
    """The summariser model: ``AGENTMEMORY['COMPACTION_LLM']`` (dotted path to a
    ``ChatModel`` class or factory), else ``AGENTMEMORY['LLMS']['compaction']`` or
    ``['default']``, else a model configured by the environment (``OPENAI_API_KEY`` /
    ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``), else ``None`` (``build_compactor`` then
    uses ``OfflineMemoryCompactor``)."""
    from django.utils.module_loading import import_string

    path = app_settings().COMPACTION_LLM
    if path:
        model: ChatModel | None = import_string(path)()
        return model
    from agentmemory.llm.config import get_llm

    return get_llm("compaction" if "compaction" in app_settings().LLMS else "default")


def _resolve_class(compactor_class: str | type | None) -> type[BaseMemoryCompactor]:
    from django.utils.module_loading import import_string

    if compactor_class is None:
        cls: type[BaseMemoryCompactor] = app_settings().import_compactor_class()
    elif isinstance(compactor_class, str):
        cls = import_string(compactor_class)
    else:
        cls = compactor_class
    return cls


def build_compactor(
    conversation_id: int, *, compactor_class: str | type | None = None, llm: ChatModel | None = None
) -> BaseMemoryCompactor:
    """The compactor a compaction run uses, as the Celery task and inline runs build it:
    ``compactor_class`` (a class or dotted path; default ``COMPACTOR_CLASS``) built as
    ``cls(Conversation.objects, conversation_id, llm, history)`` with ``llm`` or
    ``get_compaction_llm()``. Without any configured model, an ``LLMMemoryCompactor`` (or a
    subclass that keeps its ``summarize``) becomes an ``OfflineMemoryCompactor`` (labelled,
    extractive); a subclass with its own ``summarize`` keeps its class and fails with
    ``PermanentLLMError`` if it calls the missing model."""
    cls = _resolve_class(compactor_class)
    model = llm if llm is not None else get_compaction_llm()
    if (
        model is None
        and issubclass(cls, LLMMemoryCompactor)
        and cls.summarize is LLMMemoryCompactor.summarize
    ):
        cls = OfflineMemoryCompactor
    history = PersistentChatHistory(conversation_id)
    return cls(Conversation.objects, conversation_id, model, history)


def _importable_path(cls: type) -> str | None:
    """The dotted path a worker can import ``cls`` by, or ``None`` (with a warning) for a
    class it could not find (defined in a function or in an interactive shell); the
    worker then uses ``COMPACTOR_CLASS``."""
    from django.utils.module_loading import import_string

    path = f"{cls.__module__}.{cls.__qualname__}"
    try:
        if "<locals>" not in path and import_string(path) is cls:
            return path
    except ImportError:
        pass
    logger.warning(
        "compactor class %s cannot be imported by a Celery worker; the task will use "
        "AGENTMEMORY['COMPACTOR_CLASS'] instead. Define compactor classes at module level.",
        path,
    )
    return None


# --------------------------------------------------------------------------- the mode


def compaction_mode() -> str:
    """The compaction mode in force: ``"inline"``, ``"celery"`` or ``"off"``.

    ``AGENTMEMORY["COMPACTION_MODE"]`` may name one; ``"auto"`` (the default) picks
    ``"celery"`` when the Celery app the tasks bind to has a broker URL (set explicitly by the
    host, e.g. ``CELERY_BROKER_URL`` read by its ``celery.py``, or the ``CELERY_BROKER_URL``
    environment variable) and does not run tasks eagerly, and ``"inline"`` otherwise. A host
    that only adds the app to ``INSTALLED_APPS`` has no broker, so its compactions run in
    process after each commit instead of failing to reach a broker that is not there.
    """
    return describe_compaction_mode()[0]


def describe_compaction_mode() -> tuple[str, str]:
    """``(mode, why)``: the mode in force and a sentence saying why (for ``manage.py check``)."""
    setting = app_settings().COMPACTION_MODE
    if setting in ("celery", "inline", "off"):
        return setting, f"AGENTMEMORY['COMPACTION_MODE'] is {setting!r}"
    broker, eager = celery_broker()
    if broker and not eager:
        return "celery", "COMPACTION_MODE is 'auto' and the Celery app has a broker URL"
    if broker:
        return "inline", "COMPACTION_MODE is 'auto' and Celery runs tasks eagerly (task_always_eager)"
    return "inline", "COMPACTION_MODE is 'auto' and no Celery broker is configured"


def celery_broker() -> tuple[str, bool]:
    """``(broker_url, always_eager)`` of the Celery app tasks bind to (the current app;
    the default app reads only the ``CELERY_BROKER_URL`` environment variable). The broker
    URL is ``""`` when none was set."""
    try:
        from celery import current_app

        conf = current_app.conf
        broker = conf.broker_write_url or conf.broker_url or ""
        return str(broker), bool(conf.task_always_eager)
    except Exception:  # a broken Celery configuration must not break an append
        logger.exception("cannot read the Celery configuration")
        return "", False


# --------------------------------------------------------------------------- requesting


def request_compaction(
    conversation_id: int,
    *,
    max_tokens: int | None = None,
    force: bool = False,
    wait: float = 0.0,
    compactor_class: str | type | None = None,
    reason: str = "",
    compactor: BaseMemoryCompactor | None = None,
    system_tokens: int | None = None,
) -> CompactionRequest:
    """Compact the conversation if a compaction is due, the way ``COMPACTION_MODE`` says.

    "inline": the compaction runs in this process once the caller's transaction commits
    (at once outside a transaction), one bounded run per request. "celery": the task
    ``compact_conversation`` is enqueued on commit, with a short publish retry policy
    (``ENQUEUE_RETRY_POLICY``), so a dead broker costs well under a second. "off": nothing.
    A request is recorded on the conversation (``compaction_requested_at``) until a run
    completes; a failure to enqueue or a failed inline run is logged and recorded
    (``compaction_error``) and never raised: the append or agent turn that asked has
    already succeeded. The ``sweep_compactions`` task, the ``compact_conversations``
    command and the next trigger pick such requests up.

    Args:
        conversation_id: primary key of the conversation.
        max_tokens: the window budget (tokens): the "no longer fits" trigger is checked
            against it, and the summary is made to fit it (``summary_token_budget``). It is
            remembered on the conversation (``summary_window_tokens``, with
            ``system_tokens``); default: the budget a request named before, else
            ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``. Pass the budget your windows are
            built with: a summary made for a larger window is sent cut in a smaller one.
        force: skip the "is it due" check.
        wait: seconds; when positive, make sure a compaction has run before returning:
            inline it runs now (runs follow each other until the backlog is folded or the
            time is up); with Celery the task is enqueued at once and awaited up to
            ``wait`` seconds.
        compactor_class: a class or dotted path; default ``COMPACTOR_CLASS`` (or the
            class of ``compactor``).
        reason: why the caller asks (for logs).
        compactor: a compactor instance whose ``needs_compaction()`` settings decide
            whether one is due (the run itself builds its own with the compaction model).
        system_tokens: tokens of a system prompt sent with every window but not stored
            (an agent's), left out of the summary's room; default: the stored pinned
            prompt, if any.

    Returns:
        A ``CompactionRequest``.
    """
    mode = "off"
    try:
        mode = compaction_mode()
        return _request(
            conversation_id,
            mode,
            (max_tokens, system_tokens),
            force,
            wait,
            compactor_class,
            reason,
            compactor,
        )
    except Exception as exc:
        # The caller's append or turn has already succeeded; deciding about compaction must
        # not turn it into an error.
        logger.exception("requesting a compaction of conversation %s failed", conversation_id)
        return CompactionRequest(
            conversation_id, due=False, mode=mode, error=f"{type(exc).__name__}: {exc}", reason=reason
        )


def _needs(checker: Any, window: _Window) -> bool:
    """``checker.needs_compaction()``, with the window's ``max_tokens`` and
    ``system_tokens`` where its signature takes them (a subclass may predate either)."""
    method = checker.needs_compaction
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        parameters = {"max_tokens": None, "system_tokens": None}  # type: ignore[assignment]
    kwargs: dict[str, Any] = {}
    if "max_tokens" in parameters:
        kwargs["max_tokens"] = window[0]
    if "system_tokens" in parameters and window[1] is not None:
        kwargs["system_tokens"] = window[1]
    return bool(method(**kwargs))


def _request(
    conversation_id: int,
    mode: str,
    window: _Window,
    force: bool,
    wait: float,
    compactor_class: str | type | None,
    reason: str,
    compactor: BaseMemoryCompactor | None,
) -> CompactionRequest:
    if compactor is not None and compactor_class is None:
        compactor_class = type(compactor)
    checker = compactor or _resolve_class(compactor_class)(Conversation.objects, conversation_id, None)
    due = _needs(checker, window)
    conv = getattr(checker, "last_checked", None)
    if conv is None or conv.pk != conversation_id:
        conv = Conversation.objects.filter(pk=conversation_id).first()
    if conv is None:
        return CompactionRequest(conversation_id, due=False, mode=mode, reason=reason)
    if not (due or force):
        return CompactionRequest(conversation_id, due=False, mode=mode, reason=reason)
    if mode == "off":
        return CompactionRequest(conversation_id, due=True, mode=mode, reason=reason)
    if (
        mode == "celery"
        and not force
        and wait <= 0
        and conv.compaction_requested_at is not None
        and not conv.compaction_error
        and not _stale_request(conv)
    ):
        # Already handed to the broker and not failed: one queued task per conversation
        # is enough (the task checks again when it runs).
        return CompactionRequest(conversation_id, due=True, mode=mode, enqueued=True, reason=reason)
    # Claim the request only if nobody did since it was read (two appends that both see the
    # threshold must not enqueue two tasks, bug case BUG-33).
    # A request naming its window is remembered: later ones naming none (an API append,
    # the sweep) make summaries for the same window.
    named = {"summary_window_tokens": window[0], "summary_system_tokens": window[1]} if window[0] else {}
    claimed = Conversation.objects.filter(
        pk=conversation_id, compaction_requested_at=conv.compaction_requested_at
    ).update(compaction_requested_at=timezone.now(), **named)
    if not claimed and mode == "celery" and not force and wait <= 0:
        return CompactionRequest(conversation_id, due=True, mode=mode, enqueued=True, reason=reason)
    if not claimed:
        Conversation.objects.filter(pk=conversation_id).update(
            compaction_requested_at=timezone.now(), **named
        )
    if mode == "inline":
        return _request_inline(conversation_id, compactor_class, window, force, wait, reason)
    if wait > 0 and _worker_missing(conv):
        # A recent wait found no worker taking the task: enqueue, but do not hold the caller
        # for the whole wait again before the lease period has passed.
        wait = 0.0
    return _request_celery(conversation_id, compactor_class, window, force, wait, reason)


def _request_inline(
    conversation_id: int,
    compactor_class: str | type | None,
    window: _Window,
    force: bool,
    wait: float,
    reason: str,
) -> CompactionRequest:
    if wait > 0:
        deadline = time.monotonic() + wait
        summary_id, error = None, None
        while True:
            run, error = _run_safely(conversation_id, compactor_class, window=window)
            summary_id = run.summary.pk if run is not None and run.summary is not None else summary_id
            if run is None or run.status != PARTIAL or time.monotonic() >= deadline:
                break
        return CompactionRequest(
            conversation_id,
            due=True,
            mode="inline",
            ran_inline=True,
            summary_id=summary_id,
            error=error,
            reason=reason,
        )
    outcome: dict[str, Any] = {}

    def run_now() -> None:
        run, error = _run_safely(conversation_id, compactor_class, only_if_needed=not force, window=window)
        outcome["run"], outcome["error"] = run, error

    transaction.on_commit(run_now, using=router.db_for_write(Conversation))
    if "run" not in outcome and "error" not in outcome:
        return CompactionRequest(conversation_id, due=True, mode="inline", deferred=True, reason=reason)
    run = outcome.get("run")
    return CompactionRequest(
        conversation_id,
        due=True,
        mode="inline",
        ran_inline=True,
        summary_id=run.summary.pk if run is not None and run.summary is not None else None,
        error=outcome.get("error"),
        reason=reason,
    )


def _run_safely(
    conversation_id: int,
    compactor_class: str | type | None,
    *,
    only_if_needed: bool = False,
    window: _Window = (None, None),
) -> tuple[CompactionRun | None, str | None]:
    """One inline run; every failure is logged and recorded, never raised."""
    try:
        run = run_compaction(
            conversation_id,
            compactor_class=compactor_class,
            only_if_needed=only_if_needed,
            max_tokens=window[0],
            system_tokens=window[1],
        )
    except Exception as exc:
        logger.warning("inline compaction of conversation %s failed: %s", conversation_id, exc, exc_info=True)
        return None, f"{type(exc).__name__}: {exc}"
    if run.status == BUSY:
        logger.info(
            "inline compaction of conversation %s refused: another run holds the lease; left for the sweep",
            conversation_id,
        )
    return run, None


def _request_celery(
    conversation_id: int,
    compactor_class: str | type | None,
    window: _Window,
    force: bool,
    wait: float,
    reason: str,
) -> CompactionRequest:
    path = _importable_path(compactor_class) if isinstance(compactor_class, type) else compactor_class
    outcome: dict[str, Any] = {}

    def publish() -> None:
        outcome["error"] = enqueue_compaction(
            conversation_id,
            compactor_class=path,
            max_tokens=window[0],
            system_tokens=window[1],
            only_if_needed=not force,
        )

    if wait > 0:
        publish()
    else:
        transaction.on_commit(publish, using=router.db_for_write(Conversation))
    if "error" not in outcome:
        return CompactionRequest(
            conversation_id, due=True, mode="celery", enqueued=True, deferred=True, reason=reason
        )
    error = outcome["error"]
    if error is not None or wait <= 0:
        return CompactionRequest(
            conversation_id, due=True, mode="celery", enqueued=error is None, error=error, reason=reason
        )
    summary_id, served = _await_compaction(conversation_id, wait)
    if not served:
        error = record_compaction_failure(conversation_id, f"{_NOT_PICKED_UP} within {wait:g} s")
        return CompactionRequest(
            conversation_id,
            due=True,
            mode="celery",
            enqueued=True,
            summary_id=summary_id,
            error=error,
            reason=reason,
        )
    return CompactionRequest(
        conversation_id, due=True, mode="celery", enqueued=True, summary_id=summary_id, reason=reason
    )


_NOT_PICKED_UP = "no Celery worker ran the compaction"


def _worker_missing(conv: Conversation) -> bool:
    """A wait for a worker timed out on this conversation less than a lease ago."""
    failed = conv.compaction_failed_at
    grace = timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    return (
        conv.compaction_error.startswith(_NOT_PICKED_UP)
        and failed is not None
        and failed > timezone.now() - grace
    )


def _await_compaction(conversation_id: int, wait: float) -> tuple[int | None, bool]:
    """Poll until the request is served (cleared), the summary changed, or ``wait`` runs out.

    Returns:
        The summary id, and whether a worker served the request or is running it (a live
        lease) when the wait ended.
    """
    deadline = time.monotonic() + wait
    before = Conversation.objects.filter(pk=conversation_id).values_list("summary_id", flat=True).first()
    delay = 0.05
    while True:
        row = (
            Conversation.objects.filter(pk=conversation_id)
            .values_list("summary_id", "compaction_requested_at", "compaction_lease_expires_at")
            .first()
        )
        if row is None:
            return None, True
        summary_id, requested, lease_expires = row
        if requested is None or summary_id != before:
            return summary_id, True
        if time.monotonic() >= deadline:
            return summary_id, lease_expires is not None and lease_expires > timezone.now()
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 0.5)


def enqueue_compaction(
    conversation_id: int,
    *,
    compactor_class: str | None = None,
    max_tokens: int | None = None,
    only_if_needed: bool = True,
    countdown: float | None = None,
    system_tokens: int | None = None,
) -> str | None:
    """Hand ``compact_conversation`` to the broker now, waiting at most
    ``ENQUEUE_TIMEOUT_SECONDS`` for it (``agentmemory.broker.publish``).

    Returns:
        ``None`` when published; otherwise the error text, which is logged and recorded on
        the conversation (any exception from ``apply_async``: kombu's ``OperationalError``,
        a refused connection, a serialisation error). Never raises.
    """
    from agentmemory.tasks import compact_conversation

    try:
        broker.publish(
            compact_conversation,
            (conversation_id, compactor_class),
            {"max_tokens": max_tokens, "only_if_needed": only_if_needed, "system_tokens": system_tokens},
            countdown=countdown,
        )
    except Exception as exc:
        logger.warning(
            "could not enqueue the compaction of conversation %s (the sweep or the next trigger "
            "will try again): %s",
            conversation_id,
            exc,
        )
        return record_compaction_failure(conversation_id, f"enqueue failed: {type(exc).__name__}: {exc}")
    return None


# --------------------------------------------------------------------------- running


def run_compaction(
    conversation_id: int,
    *,
    compactor_class: str | type | None = None,
    max_tokens: int | None = None,
    only_if_needed: bool = False,
    llm: ChatModel | None = None,
    system_tokens: int | None = None,
    count_transient: bool = True,
) -> CompactionRun:
    """One bounded compaction run of a conversation, as the task, inline requests and the
    ``compact_conversations`` command do it; a failure is recorded on the conversation
    (``compaction_error``) before it is raised.

    Args:
        conversation_id: primary key of the conversation.
        compactor_class: a class or dotted path; default ``COMPACTOR_CLASS``.
        max_tokens: the window budget (tokens): the trigger is checked against it and the
            summary is made to fit it (``BaseMemoryCompactor.fit_to_window``).
        only_if_needed: do nothing unless ``needs_compaction()`` still holds (requests
            queued behind a busy worker then find nothing to do).
        llm: the summariser; default ``get_compaction_llm()``.
        system_tokens: tokens of a system prompt sent with every window but not stored;
            default: the stored pinned prompt, if any.
        count_transient: whether a ``TransientLLMError`` counts as a failed run for the
            sweep's pause (``compaction_failures``, ``retry_delay``); the Celery task passes
            ``False`` while it will retry itself, so that one task's retries count once.

    Returns:
        The ``CompactionRun``.

    Raises:
        TransientLLMError, PermanentLLMError, InvalidSummaryError: recorded, then raised.
    """
    if not Conversation.objects.filter(pk=conversation_id).exists():
        logger.info("conversation %s is gone; nothing to compact", conversation_id)
        return CompactionRun(GONE)
    compactor = build_compactor(conversation_id, compactor_class=compactor_class, llm=llm)
    compactor.fit_to_window(max_tokens, system_tokens)
    if only_if_needed and not compactor.needs_compaction(max_tokens=max_tokens):
        conv = compactor.last_checked
        if conv is not None and conv.compaction_requested_at is not None:
            _mark_done(conversation_id, timezone.now())
        return CompactionRun(NOTHING, summary=conv.summary if conv is not None else None)
    started = time.perf_counter()
    try:
        run = compactor.run()
    except Exception as exc:
        logger.warning("compaction of conversation %s failed: %s", conversation_id, exc)
        counted = count_transient or not isinstance(exc, TransientLLMError)
        record_compaction_failure(conversation_id, exc, failed_run=counted)
        _finished(compactor, conversation_id, "failed", started, None, f"{type(exc).__name__}: {exc}")
        raise
    _finished(compactor, conversation_id, run.status, started, run, "")
    return run


def _finished(
    compactor: BaseMemoryCompactor,
    conversation_id: int,
    outcome: str,
    started: float,
    run: CompactionRun | None,
    error: str,
) -> None:
    """The structured log record and the ``compaction_finished`` signal of one run."""
    stored = run.summary if run is not None and run.status in (STORED, PARTIAL) else None
    fields = {
        "conversation_id": conversation_id,
        "outcome": outcome,
        "duration_s": round(time.perf_counter() - started, 6),
        "input_tokens": stored.input_tokens if stored is not None else 0,
        "output_tokens": stored.output_tokens if stored is not None else 0,
        "llm_calls": run.llm_calls if run is not None else 0,
        "error": error,
    }
    logger.info(
        "compaction of conversation %s: %s in %.3f s (%s tokens in, %s out)",
        conversation_id,
        outcome,
        fields["duration_s"],
        fields["input_tokens"],
        fields["output_tokens"],
        extra={"compaction": fields},
    )
    signals.compaction_finished.send(sender=type(compactor), **fields)


def pending_compactions(
    *, include_due: bool = False, limit: int | None = None, backoff: bool = True
) -> list[int]:
    """Ids of conversations whose requested compaction has not run (requested more than
    ``COMPACTION_LEASE_SECONDS`` ago, or failed) and that no live lease holds, oldest
    request first; with ``include_due`` also every conversation for which a compaction is
    due now (reads every conversation: for the management command, not for a beat task).
    With ``backoff`` (the default), a conversation whose runs failed ``n`` times in a row is
    left out until ``retry_delay(n)`` has passed since the last failure."""
    now = timezone.now()
    grace = now - timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    free = Q(compaction_lease__isnull=True) | Q(compaction_lease_expires_at__lt=now)
    qs = (
        Conversation.objects.filter(free)
        .filter(
            Q(compaction_requested_at__lt=grace)
            | (Q(compaction_requested_at__isnull=False) & ~Q(compaction_error=""))
        )
        .order_by("compaction_requested_at")
        .values_list("pk", "compaction_failures", "compaction_failed_at")
    )
    ids: list[int] = []
    waiting: set[int] = set()
    for pk, failures, failed_at in qs.iterator():
        if (
            backoff
            and failures
            and failed_at is not None
            and failed_at > now - timedelta(seconds=retry_delay(failures))
        ):
            waiting.add(pk)  # failed again and again: not before its pause is over
            continue
        ids.append(pk)
        if limit and len(ids) >= limit:
            break
    if include_due:
        seen = set(ids) | waiting
        cls = _resolve_class(None)
        for pk in Conversation.objects.filter(free).order_by("pk").values_list("pk", flat=True).iterator():
            if pk not in seen and cls(Conversation.objects, pk, None).needs_compaction():
                ids.append(pk)
                if limit and len(ids) >= limit:
                    break
    return ids


def sweep(
    *,
    enqueue: bool | None = None,
    include_due: bool = False,
    limit: int | None = None,
    progress: Callable[[int, str], None] | None = None,
    backoff: bool = True,
) -> dict[str, int]:
    """Pick up requested-but-not-run compactions (see ``pending_compactions``): enqueue
    them (``enqueue=True``; default when the mode is "celery") or run them here, one
    bounded run each, continuing a backlog while runs are partial. ``backoff=False`` also
    takes conversations whose failing runs are pausing (``retry_delay``).

    Returns:
        Counts by outcome: ``{"enqueued": n, "stored": n, "failed": n, ...}``.
    """
    if enqueue is None:
        enqueue = compaction_mode() == "celery"
    counts: dict[str, int] = {}
    for pk in pending_compactions(include_due=include_due, limit=limit, backoff=backoff):
        if enqueue:
            outcome = "enqueued" if enqueue_compaction(pk, only_if_needed=False) is None else "failed"
            if outcome == "enqueued":
                # Handed over again: the next sweep leaves it to the worker for a lease period.
                Conversation.objects.filter(pk=pk).update(
                    compaction_requested_at=timezone.now(), compaction_error="", compaction_failed_at=None
                )
        else:
            outcome = compact_backlog(pk)
        counts[outcome] = counts.get(outcome, 0) + 1
        if progress is not None:
            progress(pk, outcome)
    return counts


def compact_backlog(conversation_id: int, *, compactor_class: str | type | None = None) -> str:
    """Run bounded compactions of one conversation in this process until its backlog is
    folded (runs stop being ``"partial"``); failures are recorded, not raised.

    Returns:
        The last run's status, or ``"failed"``.
    """
    while True:
        try:
            run = run_compaction(conversation_id, compactor_class=compactor_class)
        except Exception:
            return "failed"
        if run.status != PARTIAL:
            return run.status


def compact_if_needed(
    conversation_id: int, *, max_tokens: int | None = None, compactor_class: str | type | None = None
) -> bool:
    """``request_compaction()`` for callers that only want a yes/no: ``True`` when a
    compaction ran, was enqueued or will be at commit. The check reads the conversation row
    (one or two queries) and never builds a model client; it never raises because of the
    broker or the model."""
    return request_compaction(
        conversation_id, max_tokens=max_tokens, compactor_class=compactor_class, reason="compact_if_needed"
    ).scheduled


__all__ = [
    "COMPACTION_MODES",
    "BaseMemoryCompactor",
    "CompactionRequest",
    "CompactionRun",
    "LLMMemoryCompactor",
    "OfflineMemoryCompactor",
    "SummaryDraft",
    "build_compactor",
    "compact_backlog",
    "compact_if_needed",
    "compaction_mode",
    "enqueue_compaction",
    "get_compaction_llm",
    "pending_compactions",
    "record_compaction_failure",
    "render_transcript",
    "request_compaction",
    "run_compaction",
    "sweep",
]
