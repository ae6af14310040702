"""Replaying transcripts turn by turn as an agent would, checking every context window.

For each transcript a conversation is created; a leading system message is stored first
(the pinned prompt). Then, turn by turn: the human message is appended, the context window
is built as an agent builds it (with the gap policy ``AGENTMEMORY['CONTEXT_GAP_POLICY']``:
a window that would leave stored messages in neither itself nor the summary first gets a
compaction) and checked against the window invariants (budget, whole tool exchanges, a
human message first, the prompt and summary placed once, no message skipped in the
middle), the recorded AI and tool messages of the turn are appended, and the memory
compactor is asked whether to compact (``request_compaction()``: inline without a broker, the
Celery task with one). Every append is its own transaction, as
``PersistentChatHistory`` does it, so compaction sees committed data.

The outcome is a ``ReplayReport``: counts, build latency, invariant violations, context
budget errors (the newest human message could not fit), the messages every window left
in neither itself nor the summary (counted by a query of their own, and checked against
the window's own ``uncovered`` accounting), and the summariser calls, with those made by
compactions the window builds asked for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Sum
from django.utils import timezone

from agentmemory.compaction import BaseMemoryCompactor, build_compactor
from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.formats.transcripts import Transcript
from agentmemory.history import PersistentChatHistory, leading_system_messages
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, Role, ToolCall, pending_calls
from agentmemory.models import Conversation, Message, Summary
from agentmemory.validation import MAX_ID

__all__ = [
    "LONG_CONVERSATION_HUMANS",
    "Finding",
    "ReplayReport",
    "TurnPlan",
    "percentile",
    "plan_turns",
    "refresh_summary_counts",
    "replay_transcripts",
    "wait_for_compaction",
]

#: conversations with at least this many human messages must end with a summary (the
#: issue's done-criterion, matching the default SUMMARIZE_EVERY_N_HUMAN_MESSAGES)
LONG_CONVERSATION_HUMANS = 10
#: findings kept per kind; the counts keep counting past it
MAX_FINDINGS_KEPT = 100


# --------------------------------------------------------------------------- pure logic


@dataclass
class TurnPlan:
    """A transcript cut into what the replay appends, in order.

    Attributes:
        prompt: a leading system message, stored first and pinned (or ``None``).
        preamble: messages before the first human message (stored without building a window;
            the system messages that open it are pinned with the prompt).
        turns: ``(human message, the AI/tool/other messages until the next human message)``.
    """

    prompt: ChatMessage | None
    preamble: list[ChatMessage]
    turns: list[tuple[ChatMessage, list[ChatMessage]]]


def plan_turns(messages: Sequence[ChatMessage]) -> TurnPlan:
    """Cut ``messages`` into a pinned prompt, a preamble and turns (design vocabulary: a turn is
    a human message and everything after it until the next human message)."""
    prompt = None
    rest = list(messages)
    if rest and rest[0].role is Role.SYSTEM:
        prompt = rest.pop(0)
    preamble: list[ChatMessage] = []
    turns: list[tuple[ChatMessage, list[ChatMessage]]] = []
    for message in rest:
        if message.role is Role.HUMAN:
            turns.append((message, []))
        elif turns:
            turns[-1][1].append(message)
        else:
            preamble.append(message)
    return TurnPlan(prompt=prompt, preamble=preamble, turns=turns)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation between closest
    ranks (numpy's default method); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Finding:
    """One problem seen during a replay: which conversation, which seq, what."""

    conversation: str
    conversation_id: int
    seq: int | None
    text: str

    def __str__(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "-"
        return f"{self.conversation} (conversation {self.conversation_id}), {where}: {self.text}"


@dataclass
class ReplayReport:
    """What a replay did and found.

    Attributes:
        max_tokens: budget of every window built (tokens).
        conversations, messages, human_messages: what was stored.
        tokens_stored: sum of stored token counts of the messages appended (tokens).
        windows_built: windows built and checked (one per human message, unless the build
            raised ``ContextBudgetExceeded``).
        summaries_made: summaries stored for the replayed conversations.
        conversations_summarised: replayed conversations that have a current summary.
        long_conversations: replayed conversations with at least ``LONG_CONVERSATION_HUMANS``
            human messages; ``long_conversations_summarised`` of them have a summary.
        left_out_messages: over every window built, stored messages after the summary
            boundary (or the pinned prompt) and before the window's first history message,
            other than orphaned tool results and waiting tool exchanges: messages in
            neither the window nor the summary; ``windows_with_left_out`` counts the windows
            where that was more than 0 (``left_out`` keeps the first ones).
        gap_compactions: compactions the window builds asked for to close a gap;
            ``gap_summariser_calls`` the summariser calls of the summaries they made.
        summariser_calls: summariser calls of every summary of the replayed conversations.
        violation_count: window invariant violations (``violations`` keeps the first
            ones), a window whose own ``uncovered`` count disagrees with the replay's
            included.
        budget_error_count: builds that raised ``ContextBudgetExceeded`` (the newest
            human message could not fit; reported apart, ``budget_errors`` keeps the
            first ones).
        build_ms: latency of each window build (milliseconds).
        elapsed_seconds: wall time of the replay (seconds).
        conversation_ids: primary keys of the conversations created.
    """

    max_tokens: int
    conversations: int = 0
    messages: int = 0
    human_messages: int = 0
    tokens_stored: int = 0
    windows_built: int = 0
    summaries_made: int = 0
    conversations_summarised: int = 0
    long_conversations: int = 0
    long_conversations_summarised: int = 0
    left_out_messages: int = 0
    windows_with_left_out: int = 0
    gap_compactions: int = 0
    gap_summariser_calls: int = 0
    summariser_calls: int = 0
    gap_summary_ids: list[int] = field(default_factory=list)
    violation_count: int = 0
    budget_error_count: int = 0
    violations: list[Finding] = field(default_factory=list)
    budget_errors: list[Finding] = field(default_factory=list)
    left_out: list[Finding] = field(default_factory=list)
    build_ms: list[float] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    conversation_ids: list[int] = field(default_factory=list)

    @property
    def build_p50_ms(self) -> float | None:
        return percentile(self.build_ms, 50)

    @property
    def build_p95_ms(self) -> float | None:
        return percentile(self.build_ms, 95)

    def add_violation(self, finding: Finding) -> None:
        self.violation_count += 1
        if len(self.violations) < MAX_FINDINGS_KEPT:
            self.violations.append(finding)

    def add_budget_error(self, finding: Finding) -> None:
        self.budget_error_count += 1
        if len(self.budget_errors) < MAX_FINDINGS_KEPT:
            self.budget_errors.append(finding)

    def add_left_out(self, count: int, finding: Finding) -> None:
        self.left_out_messages += count
        self.windows_with_left_out += 1
        if len(self.left_out) < MAX_FINDINGS_KEPT:
            self.left_out.append(finding)

    @property
    def failed(self) -> bool:
        """Whether the replay found a problem: a violation, a budget error or a message
        left in neither a window nor the summary."""
        return bool(self.violation_count or self.budget_error_count or self.left_out_messages)

    def summary_line(self) -> str:
        """The last line of a replay's output."""
        return (
            f"Replay finished: {self.violation_count} invariant violations, "
            f"{self.left_out_messages} messages left out, {self.budget_error_count} budget errors"
        )

    def lines(self, *, show: int = 5) -> list[str]:
        """The report as text lines, the first ``show`` findings of each kind included; the
        last line is ``summary_line()``."""

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f} ms"

        rate = self.messages / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0
        out = [
            f"conversations:        {self.conversations:,}",
            f"messages:             {self.messages:,} ({self.human_messages:,} human)",
            f"tokens stored:        {self.tokens_stored:,}",
            f"windows built:        {self.windows_built:,} (budget {self.max_tokens:,} tokens each)",
            f"summaries made:       {self.summaries_made:,} "
            f"({self.conversations_summarised:,} conversations have a summary)",
            f"long conversations:   {self.long_conversations_summarised:,} of {self.long_conversations:,} "
            f"with >= {LONG_CONVERSATION_HUMANS} human messages have a summary",
            f"left outside window and summary: {self.left_out_messages:,} messages "
            f"in {self.windows_with_left_out:,} windows",
            f"summariser calls:     {self.summariser_calls:,} ({self.gap_summariser_calls:,} in "
            f"{self.gap_compactions:,} compactions asked for by window builds)",
            f"context budget errors: {self.budget_error_count:,}",
            f"build latency:        p50 {ms(self.build_p50_ms)}, p95 {ms(self.build_p95_ms)}",
            f"elapsed:              {self.elapsed_seconds:.1f} s ({rate:,.0f} messages/s)",
        ]
        for title, count, findings in (
            ("invariant violations", self.violation_count, self.violations),
            ("context budget errors", self.budget_error_count, self.budget_errors),
            (
                "windows with messages left outside window and summary",
                self.windows_with_left_out,
                self.left_out,
            ),
        ):
            if count and show > 0:
                out.append(f"First {min(show, count)} of {count:,} {title}:")
                out.extend(f"  {finding}" for finding in findings[:show])
        out.append(self.summary_line())
        return out


# --------------------------------------------------------------------------- the service


def replay_transcripts(
    transcripts: Iterable[Transcript],
    *,
    max_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
    compact_before_build: bool = False,
    owner: Any = None,
) -> ReplayReport:
    """Store and replay ``transcripts`` turn by turn (see the module docstring).

    Args:
        transcripts: the conversations, e.g. from ``load_transcripts``; check them first with
            ``validate_transcript`` (``load_transcripts`` does) so that a bad one is refused
            before anything is written.
        max_tokens: budget of every window (tokens); defaults to
            ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``.
        progress: called with the number of messages stored after each append.
        compact_before_build: also ask the compactor right after each human message, before
            the window is built (besides after the turn). With eager tasks the previous turn
            is then folded before the window needs the room; without it a turn that filled
            the budget is left outside both window and summary at the next window.

    Returns:
        The ``ReplayReport``. With a Celery worker (``CELERY_BROKER_URL`` set) summaries are
        written asynchronously: call ``wait_for_compaction`` and ``refresh_summary_counts``
        before reading the summary counts.

    Raises:
        InvalidMessageError: a message storage refuses (not raised for validated transcripts).
    """
    from agentmemory.conf import app_settings

    budget = max_tokens if max_tokens is not None else app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
    if budget <= 0:
        raise ValueError("max_tokens must be positive")
    report = ReplayReport(max_tokens=budget)
    started = time.perf_counter()
    for transcript in transcripts:
        _replay_one(transcript, budget, report, progress or (lambda n: None), compact_before_build, owner)
    report.elapsed_seconds = time.perf_counter() - started
    refresh_summary_counts(report)
    return report


def _replay_one(
    transcript: Transcript,
    budget: int,
    report: ReplayReport,
    progress: Callable[[int], None],
    compact_before_build: bool,
    owner: Any,
) -> None:
    from agentmemory.conf import app_settings

    conversation = Conversation.objects.create(
        owner=owner,
        title=transcript.title[:200],
        agent_key=transcript.agent_key[:100],
        metadata=transcript.metadata,
    )
    cid = conversation.pk
    report.conversations += 1
    report.conversation_ids.append(cid)
    history = PersistentChatHistory(cid)
    compactor = build_compactor(cid)
    gap_policy = app_settings().CONTEXT_GAP_POLICY
    builder = ContextWindowBuilder(chat_history=history, memory_compactor=compactor, gap_policy=gap_policy)
    plan = plan_turns(transcript.messages)

    def append(messages: list[ChatMessage]) -> list[ChatMessage]:
        stored = history.add_messages(messages)
        report.messages += len(stored)
        report.tokens_stored += sum(m.token_count or 0 for m in stored)
        progress(len(stored))
        return stored

    # The system messages that open the transcript are pinned (stored while the
    # conversation holds only system messages): the prompt and the preamble's leading ones.
    pinned = 0
    if plan.prompt is not None:
        pinned = 1
        for message in plan.preamble:
            if message.role is not Role.SYSTEM:
                break
            pinned += 1
    if plan.prompt is not None:
        append([plan.prompt])
    if plan.preamble:
        append(plan.preamble)
    for human, rest in plan.turns:
        newest = append([human])[0].seq
        report.human_messages += 1
        if compact_before_build:
            compactor.compact_if_needed(max_tokens=budget)
        before = _summary_id(cid) if gap_policy == "close" else None
        t0 = time.perf_counter()
        try:
            window = builder.build(budget)
        except ContextBudgetExceeded as exc:
            report.add_budget_error(Finding(transcript.title, cid, exc.seq, str(exc)))
        else:
            report.build_ms.append((time.perf_counter() - t0) * 1000)
            report.windows_built += 1
            _count_gap_compaction(window, before, report)
            _check_window(window, transcript.title, cid, budget, newest, pinned, report)
        if rest:
            append(rest)
        compactor.compact_if_needed(max_tokens=budget)


def _summary_id(cid: int) -> int | None:
    """The conversation's current summary id (read before a build, to tell a summary made
    for the build from an older one)."""
    return Conversation.objects.filter(pk=cid).values_list("summary_id", flat=True).first()


def _count_gap_compaction(window: ContextWindow, summary_before: int | None, report: ReplayReport) -> None:
    """Count a compaction the build asked for, and the summary it made, if any."""
    request = window.compaction
    if request is None:
        return
    report.gap_compactions += 1
    if request.summary_id is not None and request.summary_id != summary_before:
        report.gap_summary_ids.append(request.summary_id)


def _check_window(
    window: ContextWindow,
    title: str,
    cid: int,
    budget: int,
    newest_seq: int | None,
    pinned: int,
    report: ReplayReport,
) -> None:
    """The window invariants on one window, and the messages it leaves outside both window
    and summary, counted here by a query of their own and compared with the window's
    ``uncovered``. ``pinned``: how many system messages open the conversation (pinned, at
    seqs 1 to ``pinned``)."""
    stored_seqs: list[int] = []
    if window.first_seq is not None and window.last_seq is not None:
        # Only the window's own seq range: the check stays O(window), like the build.
        stored_seqs = list(
            Message.objects.filter(
                conversation_id=cid, seq__gte=window.first_seq, seq__lte=window.last_seq
            ).values_list("seq", flat=True)
        )
    for problem in window_violations(
        window, max_tokens=budget, stored_seqs=stored_seqs, newest_seq=newest_seq
    ):
        report.add_violation(Finding(title, cid, newest_seq, problem))

    floor = max(window.summary_through_seq or 0, pinned)
    # through the seq before the window's first; without history, every seq (``2**62`` left
    # out what was stored above it)
    through = window.first_seq - 1 if window.first_seq is not None else MAX_ID
    pending = pending_calls(
        Conversation.objects.filter(pk=cid).values_list("pending_tool_calls", flat=True).first()
    )
    left_out = (
        Message.objects.filter(conversation_id=cid, seq__gt=floor, seq__lte=through)
        .exclude(role=Role.TOOL.value, exchange_seq__isnull=True)
        .exclude(exchange_seq__in=set(pending.values()))
        .count()
    )
    if left_out != window.uncovered.count:
        report.add_violation(
            Finding(
                title,
                cid,
                newest_seq,
                f"the window reports {window.uncovered.count} uncovered messages, "
                f"the replay counts {left_out}",
            )
        )
    if left_out:
        summary = (
            f"summary through seq {window.summary_through_seq}"
            if window.summary_id is not None
            else "no summary"
        )
        span = f"seqs {floor + 1}..{through}" if window.first_seq is not None else f"seqs after {floor}"
        report.add_left_out(
            left_out,
            Finding(
                title,
                cid,
                newest_seq,
                f"{left_out} messages ({span}) in neither "
                f"window nor summary; {summary}, window history seqs {window.first_seq}..{window.last_seq}, "
                f"{window.total_tokens} of {budget} tokens (system {window.system_tokens}, "
                f"summary {window.summary_tokens}, history {window.history_tokens})",
            ),
        )


def _compaction_due(compactor: BaseMemoryCompactor, cid: int, budget: int | None) -> bool:
    """Whether compaction has not caught up: one is due or running (its lease)."""
    now = timezone.now()
    running = (
        Conversation.objects.filter(pk=cid, compaction_started_at__isnull=False)
        .exclude(compaction_lease_expires_at__lt=now)  # a dead worker's lease is not running
        .exists()
    )
    return running or compactor.needs_compaction(max_tokens=budget)


def refresh_summary_counts(report: ReplayReport) -> None:
    """Fill the report's summary counts from the database (a few queries per 500
    conversations)."""
    ids = report.conversation_ids
    report.summaries_made = report.conversations_summarised = report.summariser_calls = 0
    report.long_conversations = report.long_conversations_summarised = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        made = Summary.objects.filter(conversation_id__in=chunk).aggregate(
            count=Count("id"), calls=Sum("llm_calls")
        )
        report.summaries_made += made["count"]
        report.summariser_calls += made["calls"] or 0
        for humans, summary_id in Conversation.objects.filter(pk__in=chunk).values_list(
            "human_message_count", "summary_id"
        ):
            has_summary = summary_id is not None
            report.conversations_summarised += has_summary
            if humans >= LONG_CONVERSATION_HUMANS:
                report.long_conversations += 1
                report.long_conversations_summarised += has_summary
    report.gap_summariser_calls = _gap_summariser_calls(report)


def _gap_summariser_calls(report: ReplayReport) -> int:
    ids = sorted(set(report.gap_summary_ids))
    total = 0
    for start in range(0, len(ids), 500):
        total += (
            Summary.objects.filter(pk__in=ids[start : start + 500]).aggregate(calls=Sum("llm_calls"))["calls"]
            or 0
        )
    return total


def wait_for_compaction(
    conversation_ids: Sequence[int], *, timeout: float, max_tokens: int | None = None, poll: float = 0.5
) -> bool:
    """Wait until no conversation in ``conversation_ids`` needs or runs a compaction (for
    a window of ``max_tokens``), for at most ``timeout`` seconds: for replays whose
    compactions run on a Celery worker.

    Returns:
        ``True`` when everything settled in time.
    """
    deadline = time.monotonic() + timeout
    pending = list(conversation_ids)
    while True:
        pending = [
            cid
            for cid in pending
            if _compaction_due(BaseMemoryCompactor(Conversation.objects, cid, None), cid, max_tokens)
        ]
        if not pending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


# --------------------------------------------------------------------------- through the agent


def replay_through_agent(
    transcripts: Iterable[Transcript],
    *,
    max_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
    owner: Any = None,
) -> ReplayReport:
    """Replay ``transcripts`` through ``BaseToolCallingAgent.run()`` with the memory
    compactor enabled and a scripted model that answers each call with the recorded AI
    message (tool calls included), tools answering with the recorded results.

    Every model call of a turn is checked like a replay window (``windows_built`` counts
    model calls): the window sent, the messages it leaves in neither itself nor the
    summary, budget errors (the turn is then stored as recorded and the replay goes on).
    A transcript's leading system message is the agent's system prompt (sent, not stored);
    a turn that does not end on a text answer gets a short closing answer, since an agent
    turn ends on one. ``owner`` owns the conversations created, as in ``replay_transcripts``.

    Returns:
        The ``ReplayReport``.
    """
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.agents.results import ModelCallStarted, StepStored, TurnStarted
    from agentmemory.agents.tools import ToolOutcome
    from agentmemory.conf import app_settings
    from agentmemory.llm.fake import ScriptedChatModel

    budget = max_tokens if max_tokens is not None else app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
    report = ReplayReport(max_tokens=budget)
    progress = progress or (lambda n: None)
    started = time.perf_counter()
    results: dict[str, ChatMessage] = {}  # the recorded tool results of the current turn, by call id
    for transcript in transcripts:
        plan = plan_turns(transcript.messages)

        class ReplayAgent(BaseToolCallingAgent, register=False):
            # The transcript's agent, as the plain replay stores it: the admin's agent filter,
            # the API's ?agent_key= and the usage per agent find these conversations too.
            AGENT_KEY = transcript.agent_key[:100]
            SYSTEM_PROMPT = plan.prompt.text if plan.prompt is not None else "You are a helpful assistant."
            MEMORY_COMPACTOR_ENABLED = True
            CONVERSATION_HISTORY_TOKEN_LIMIT = budget
            MAX_TOOL_ROUNDS = 10_000

            def execute_tool(self, call: ToolCall, injector: Any) -> ToolOutcome:
                recorded = results.pop(call.id, None)
                if recorded is None:  # the transcript holds no result for this call
                    recorded = ChatMessage.tool("(no recorded result)", tool_call_id=call.id, name=call.name)
                return ToolOutcome(recorded)

        agent = ReplayAgent(llm=ScriptedChatModel())
        conversation = agent.start_conversation(
            owner=owner, title=transcript.title[:200], metadata=transcript.metadata
        )
        cid = conversation.pk
        report.conversations += 1
        report.conversation_ids.append(cid)
        history = PersistentChatHistory(cid, token_counter=agent.token_counter)
        # The preamble's leading system messages (a developer message after the prompt, say)
        # are stored into the empty conversation, so pinned: the agent's prompt replaces them
        # in every window, which leaves them out of what it counts as uncovered.
        pinned = leading_system_messages(plan.preamble)
        if plan.preamble:
            stored = history.add_messages(plan.preamble)
            report.messages += len(stored)
            progress(len(stored))
        for human, rest in plan.turns:
            answers = [m for m in rest if m.role is Role.AI]
            if not answers or answers[-1].tool_calls:
                answers.append(ChatMessage.ai("(end of the recorded turn)"))
            results.clear()
            results.update({m.tool_call_id: m for m in rest if m.role is Role.TOOL})
            agent.llm = ScriptedChatModel(answers)  # a fresh script for each turn
            report.human_messages += 1
            newest: int | None = None
            stored_in_turn = 0
            before = _summary_id(cid)
            t0 = time.perf_counter()
            try:
                for event in agent.stream(cid, human.text):
                    if isinstance(event, TurnStarted):
                        newest = event.message.seq
                    elif isinstance(event, ModelCallStarted):
                        report.build_ms.append((time.perf_counter() - t0) * 1000)
                        report.windows_built += 1
                        window = event.window
                        _count_gap_compaction(window, before, report)
                        _check_window(window, transcript.title, cid, budget, newest, pinned, report)
                    elif isinstance(event, StepStored):
                        report.messages += len(event.messages)
                        stored_in_turn += len(event.messages)
                        progress(len(event.messages))
                        before = _summary_id(cid)
                        t0 = time.perf_counter()
            except ContextBudgetExceeded as exc:
                report.add_budget_error(Finding(transcript.title, cid, exc.seq, str(exc)))
                remaining = rest[stored_in_turn:]  # the steps the agent could not take
                report.messages += len(history.add_messages(remaining)) if remaining else 0
            report.messages += 1  # the human message
    report.elapsed_seconds = time.perf_counter() - started
    ids = report.conversation_ids
    for start in range(0, len(ids), 500):
        chunk = Message.objects.filter(conversation_id__in=ids[start : start + 500])
        report.tokens_stored += chunk.aggregate(total=Sum("token_count"))["total"] or 0
    refresh_summary_counts(report)
    return report
