"""Property-based tests of the context window invariants C1-C5 (shared/design.md).

Random histories (parallel tool calls with results stored in any order, orphaned results and
unanswered calls from relaxed imports, oversized messages, random token counts, an optional
pinned prompt and summary) are built into windows under random budgets, message caps and
tool-result caps. Each window is checked with ``agentmemory.invariants.window_violations``
and compared with an oracle written from the specification (bug-cases.md): units are taken
newest first until the first that does not fit, leading units are dropped until the run
starts on a human message, skipped items are reported, and the newest human message is in
the window unless ``ContextBudgetExceeded`` is raised. Comparing with the oracle also proves
maximality: the window starts at the oldest human message from which the rest still fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.context import ContextWindowBuilder, RowMeta, pack_history
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary
from tests.helpers import TableTokenCounter

# -- the model of a history ---------------------------------------------------------------


@dataclass
class Msg:
    """One generated message. ``kind``: system, human, ai, call (an AI message with tool
    calls), result (answers a call of ``exchange``), orphan (answers nothing)."""

    seq: int
    kind: str
    tokens: int
    call_ids: list[str] = field(default_factory=list)
    call_id: str = ""
    exchange: int | None = None

    @property
    def content(self) -> str:
        return f"m{self.seq}"

    def chat(self) -> ChatMessage:
        if self.kind == "system":
            return ChatMessage.system(self.content)
        if self.kind == "human":
            return ChatMessage.human(self.content)
        if self.kind == "ai":
            return ChatMessage.ai(self.content)
        if self.kind == "call":
            return ChatMessage.ai(
                self.content,
                [ToolCall(id=c, name="t", arguments={"n": i}) for i, c in enumerate(self.call_ids)],
            )
        return ChatMessage.tool(self.content, tool_call_id=self.call_id, name="t")

    def meta(self) -> RowMeta:
        role = {"system": "system", "human": "human", "ai": "ai", "call": "ai"}.get(self.kind, "tool")
        calls = [{"id": c, "name": "t", "arguments": {}} for c in self.call_ids]
        return RowMeta(self.seq, role, self.tokens, self.exchange, self.call_id, calls)


token_counts = st.one_of(st.integers(1, 30), st.integers(1, 30), st.integers(1, 30), st.integers(60, 400))


@st.composite
def histories(draw, *, relaxed: bool) -> list[Msg]:  # type: ignore[no-untyped-def]
    """A stored history. Strict histories can be appended with tool-pair validation (only
    the newest exchange may still await results); relaxed ones hold orphans and exchanges
    whose calls were never all answered, as legacy imports do."""
    msgs: list[Msg] = []

    def add(kind: str, **kwargs) -> Msg:  # type: ignore[no-untyped-def]
        msg = Msg(seq=len(msgs) + 1, kind=kind, tokens=draw(token_counts), **kwargs)
        msgs.append(msg)
        return msg

    if draw(st.booleans()):
        add("system")
    n_events = draw(st.integers(0, 18))
    kinds = ["human", "human", "ai", "call"] + (["orphan"] if relaxed else [])
    calls_pending = False
    for event in range(n_events):
        kind = draw(st.sampled_from(kinds))
        if calls_pending and kind == "call":
            kind = "human"  # a call after unanswered calls would join their exchange
        if kind == "orphan":
            add("orphan", call_id=f"lost{len(msgs)}")
        elif kind != "call":
            add(kind)
            calls_pending = False
        else:
            n_calls = draw(st.integers(1, 3))
            ai = add("call")
            ai.call_ids = [f"c{ai.seq}_{j}" for j in range(n_calls)]
            ai.exchange = ai.seq
            order = draw(st.permutations(ai.call_ids))
            last_event = event == n_events - 1
            if relaxed or last_event:
                answered = [c for c in order if draw(st.booleans()) or not (relaxed or last_event)]
                answered = order if draw(st.booleans()) else answered
            else:
                answered = order
            for call_id in answered:
                if relaxed and draw(st.integers(0, 5)) == 0:
                    add("orphan", call_id=f"lost{len(msgs)}")
                add("result", call_id=call_id, exchange=ai.seq)
            calls_pending = len(answered) < n_calls
    return msgs


@dataclass
class Scenario:
    msgs: list[Msg]
    relaxed: bool
    max_tokens: int
    max_messages: int | None
    cap: int | None
    summary_before: int | None  # seq of the human message the summary stops before
    summary_tokens: int
    truncate: bool


@st.composite
def scenarios(draw, *, truncate: bool | None = None) -> Scenario:  # type: ignore[no-untyped-def]
    relaxed = draw(st.booleans())
    msgs = draw(histories(relaxed=relaxed))
    humans = [m.seq for m in msgs if m.kind == "human" and m.seq > 1]
    summary_before = draw(st.sampled_from(humans)) if humans and draw(st.booleans()) else None
    return Scenario(
        msgs=msgs,
        relaxed=relaxed,
        max_tokens=draw(st.integers(1, 250)),
        max_messages=draw(st.one_of(st.none(), st.none(), st.integers(0, 12))),
        cap=draw(st.one_of(st.none(), st.integers(20, 60))),
        summary_before=summary_before,
        summary_tokens=draw(st.integers(1, 40)),
        truncate=draw(st.booleans()) if truncate is None else truncate,
    )


# -- the oracle ---------------------------------------------------------------------------


@dataclass
class Expected:
    history: list[int]  # seqs, in the order they must be sent
    error: bool  # ContextBudgetExceeded must be raised (or, with truncate, may be)
    truncated_seq: int | None  # the newest human message, sent as a truncated copy
    room: int  # tokens left for the truncated copy
    orphans: set[int]
    incomplete: set[int]


def pinned_tokens(s: Scenario) -> tuple[int, int, int]:
    """(system prompt tokens, summary tokens, floor seq) of the scenario."""
    system = s.msgs[0].tokens if s.msgs and s.msgs[0].kind == "system" else 0
    summary = s.summary_tokens if s.summary_before is not None else 0
    floor = s.summary_before - 1 if s.summary_before is not None else (1 if system else 0)
    return system, summary, floor


def expected_window(s: Scenario) -> Expected:
    """The window the specification asks for, computed without the product's code."""
    system, summary, floor = pinned_tokens(s)
    budget = s.max_tokens - system - summary
    results = {(m.exchange, m.call_id): m for m in s.msgs if m.kind == "result"}
    units: list[tuple[list[int], int, bool]] = []  # (seqs in send order, cost, starts on human)
    orphans: set[int] = set()
    incomplete: set[int] = set()
    for m in s.msgs:
        if m.seq <= floor or m.kind in ("system", "result"):
            continue
        if m.kind == "orphan":
            orphans.add(m.seq)
        elif m.kind == "call":
            answers = [results.get((m.seq, c)) for c in m.call_ids]
            if all(answers):
                cost = m.tokens + sum(a.tokens if s.cap is None else min(a.tokens, s.cap) for a in answers)  # type: ignore[union-attr]
                units.append(([m.seq] + [a.seq for a in answers], cost, False))  # type: ignore[union-attr]
            else:
                incomplete |= {m.seq} | {a.seq for a in answers if a}
        else:
            units.append(([m.seq], m.tokens, m.kind == "human"))
    taken: list[tuple[list[int], int, bool]] = []
    used = count = 0
    truncated_seq, room = None, 0
    for unit in reversed(units):
        seqs, cost, is_human = unit
        too_many = s.max_messages is not None and count + len(seqs) > s.max_messages
        if used + cost > budget or too_many:
            newest_human = is_human and not any(u[2] for u in taken)
            if s.truncate and newest_human and not too_many and budget - used > 0:
                truncated_seq, room = seqs[0], budget - used
                taken.append(unit)
            break
        taken.append(unit)
        used += cost
        count += len(seqs)
    while taken and not taken[-1][2]:
        taken.pop()
    history = [seq for unit in reversed(taken) for seq in unit[0]]
    any_human = any(u[2] for u in units)
    error = (not history and any_human and s.max_messages != 0) or budget < 0  # C1: fixed part too big
    return Expected(history, error, truncated_seq, room, orphans, incomplete)


def check_window(s: Scenario, build) -> None:  # type: ignore[no-untyped-def]
    """Build (``build()`` returns a window or raises) and compare with the oracle."""
    expected = expected_window(s)
    system, summary, _ = pinned_tokens(s)
    try:
        window = build()
    except ContextBudgetExceeded:
        # With truncation, a room too small for even the truncation marker is an error too.
        assert expected.error or expected.truncated_seq is not None, (
            "ContextBudgetExceeded raised for a window that fits"
        )
        return
    assert not expected.error, "the newest human message is missing and no ContextBudgetExceeded was raised"
    stored = [m.seq for m in s.msgs]
    violations = window_violations(window, stored_seqs=stored, newest_seq=len(s.msgs))
    assert violations == []
    assert window.total_tokens <= s.max_tokens
    assert [m.seq for m in window.history] == expected.history
    assert window.system_tokens == system and window.summary_tokens == summary
    assert set(window.skipped_orphans) <= expected.orphans
    assert set(window.skipped_pending) <= expected.incomplete
    if expected.truncated_seq is not None:
        assert expected.truncated_seq in window.truncated
        assert window.history[0].truncated and window.history[0].seq == expected.truncated_seq
    humans = [m.seq for m in s.msgs if m.kind == "human" and m.seq > pinned_tokens(s)[2]]
    if humans and s.max_messages != 0:
        assert humans[-1] in [m.seq for m in window.history]  # the newest question is always sent


# -- pure packing: many examples, no database --------------------------------------------


@settings(max_examples=600, deadline=None, database=None)
@given(scenarios(truncate=False))
def test_pack_history_matches_the_specification(s: Scenario) -> None:
    _, _, floor = pinned_tokens(s)
    system, summary, _ = pinned_tokens(s)
    rows = [m.meta() for m in reversed(s.msgs) if m.seq > floor and m.kind != "system"]
    result = pack_history(
        rows,
        budget=s.max_tokens - system - summary,
        max_messages=s.max_messages,
        max_tool_result_tokens=s.cap,
    )
    expected = expected_window(s)
    packed = [r.seq for r in result.rows]
    if expected.error:
        assert not any(r.role == Role.HUMAN for r in result.rows)
        return
    assert packed == expected.history
    assert result.tokens <= max(0, s.max_tokens - system - summary)
    assert set(result.skipped_orphans) <= expected.orphans
    assert set(result.skipped_pending) <= expected.incomplete
    assert result.rows_consumed <= len(rows)


# -- the builder over the ORM ---------------------------------------------------------------


def store(s: Scenario, counter: TableTokenCounter) -> Conversation:
    conv = Conversation.objects.create(agent_key="property")
    history = PersistentChatHistory(conv, token_counter=counter, validate_tool_pairs=not s.relaxed)
    history.add_messages([m.chat() for m in s.msgs])
    if s.summary_before is not None:
        through = s.summary_before - 1
        covered = sum(1 for m in s.msgs if m.kind == "human" and m.seq <= through)
        summary = Summary.objects.create(
            conversation=conv,
            text="an earlier summary",
            first_seq=1,
            through_seq=through,
            human_messages_covered=covered,
            token_count=s.summary_tokens,
            token_counter=counter.id,
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    return conv


@pytest.mark.django_db
@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(s=scenarios())
def test_built_window_matches_the_specification(s: Scenario) -> None:
    counter = TableTokenCounter([m.content for m in s.msgs], [m.tokens for m in s.msgs])
    conv = store(s, counter)
    builder = ContextWindowBuilder(
        conv,
        token_counter=counter,
        max_tool_result_tokens=s.cap,
        oversized_message_policy="truncate" if s.truncate else "error",
        fit_newest_turn=False,  # the specification is plain packing (tests/test_context_gaps.py has the rest)
    )
    before = list(Message.objects.filter(conversation=conv).order_by("seq").values())
    check_window(s, lambda: builder.build(s.max_tokens, max_messages=s.max_messages))
    assert list(Message.objects.filter(conversation=conv).order_by("seq").values()) == before  # C6
