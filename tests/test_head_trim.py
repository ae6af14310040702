"""The head statement's trimmed page (``_tail_select(trim=True)``) gives the same windows as
the whole first page it replaced, at most one more page per window assembled.

Random histories hold what makes the reader go past the rows that start inside the budget:
tool results stored after later messages, parallel calls answered in any order, calls never
answered, orphaned results, a pinned run of several system messages, system messages later
on, token counts of 0 and oversized messages; and random builders: budgets from 1 token to a
million, message caps, tool-result caps, ``oversized_message_policy="truncate"``,
``fit_newest_turn``, ``pending_tool_calls="placeholder"``, every gap policy, a summary whose
boundary falls anywhere, a system prompt that replaces the stored one. Each window is built
twice, from two copies of the conversation: as it is, and with the head statement's page
whole (``trim=False``, and the reader not told of a trimmed page), as before the page was
trimmed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Conversation, Summary
from agentmemory.store import window as read_path
from tests.helpers import TableTokenCounter
from tests.test_properties import Msg

token_counts = st.one_of(st.integers(0, 30), st.integers(1, 30), st.just(0), st.integers(60, 400))


@st.composite
def histories(draw: Any) -> list[Msg]:
    msgs: list[Msg] = []

    def add(kind: str, **kwargs: Any) -> Msg:
        msg = Msg(len(msgs) + 1, kind, draw(token_counts), **kwargs)
        msgs.append(msg)
        return msg

    for _ in range(draw(st.integers(0, 3))):
        add("system")
    waiting: list[str] = []  # calls not answered yet: answered now, later or never
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["human", "human", "ai", "call", "call", "result", "orphan", "system"]))
        if kind == "call":
            ai = add("call")
            ai.call_ids = [f"c{ai.seq}_{j}" for j in range(draw(st.integers(1, 3)))]
            order = draw(st.permutations(ai.call_ids))
            now = draw(st.integers(0, len(order)))
            for call_id in order[:now]:
                add("result", call_id=call_id)
            waiting.extend(order[now:])
        elif kind == "result":
            if waiting:
                add("result", call_id=waiting.pop(draw(st.integers(0, len(waiting) - 1))))
        elif kind == "orphan":
            add("orphan", call_id=f"lost{len(msgs)}")
        else:
            add(kind)
    return msgs


@dataclass
class Case:
    msgs: list[Msg]
    max_tokens: int
    max_messages: int | None
    cap: int | None
    truncate: bool
    fit: bool
    pending: str
    gap: str
    summary_through: int | None
    summary_tokens: int
    system_prompt: bool


@st.composite
def cases(draw: Any) -> Case:
    msgs = draw(histories())
    seqs = [m.seq for m in msgs]
    return Case(
        msgs=msgs,
        max_tokens=draw(
            st.one_of(st.integers(1, 300), st.integers(1, 3), st.just(1_000_000), st.integers(300, 3000))
        ),
        max_messages=draw(st.one_of(st.none(), st.none(), st.integers(0, 12))),
        cap=draw(st.one_of(st.none(), st.integers(1, 80))),
        truncate=draw(st.booleans()),
        fit=draw(st.booleans()),
        pending=draw(st.sampled_from(["omit", "placeholder"])),
        gap=draw(st.sampled_from(["report", "close", "ignore"])),
        summary_through=draw(st.sampled_from(seqs)) if seqs and draw(st.booleans()) else None,
        summary_tokens=draw(st.integers(0, 60)),
        system_prompt=draw(st.booleans()),
    )


#: 300 random cases a test; they share its transaction, each storing its own conversation
EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def store(case: Case, counter: TableTokenCounter) -> Conversation:
    conv = Conversation.objects.create(agent_key="trim")
    history = PersistentChatHistory(conv, token_counter=counter, validate_tool_pairs=False)
    if case.msgs:
        history.add_messages([m.chat() for m in case.msgs])
    if case.summary_through is not None:
        summary = Summary.objects.create(
            conversation=conv,
            text="an earlier summary",
            first_seq=1,
            through_seq=case.summary_through,
            human_messages_covered=sum(
                1 for m in case.msgs if m.kind == "human" and m.seq <= case.summary_through
            ),
            token_count=case.summary_tokens,
            token_counter=counter.id,
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    return conv


@contextlib.contextmanager
def whole_first_page() -> Iterator[None]:
    """The read path as before the page was trimmed: the head statement's page whole, and
    the reader taking a short page as the end. Sent as text (the installed functions hold
    the trimmed statement)."""
    select, init, uses = read_path._tail_select, read_path.TailReader.__init__, read_path._uses_functions
    exact = read_path._exact_page

    def untrimmed(*args: Any, **kwargs: Any) -> str:
        return select(*args, **{**kwargs, "trim": False})

    def untold(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "first_room": None})

    cached = dict(read_path._SQL_CACHE)
    read_path._SQL_CACHE.clear()
    read_path._tail_select = untrimmed  # type: ignore[assignment]
    read_path.TailReader.__init__ = untold  # type: ignore[method-assign]
    read_path._uses_functions = lambda alias: False  # type: ignore[assignment]
    read_path._exact_page = lambda rows: rows  # type: ignore[assignment]
    try:
        yield
    finally:
        read_path._exact_page = exact
        read_path._tail_select = select
        read_path.TailReader.__init__ = init  # type: ignore[method-assign]
        read_path._uses_functions = uses
        read_path._SQL_CACHE.clear()
        read_path._SQL_CACHE.update(cached)


def build(case: Case) -> tuple[Any, int]:
    """What the build gives (the window's fields, or the error) and its number of queries."""
    counter = TableTokenCounter([m.content for m in case.msgs], [m.tokens for m in case.msgs])
    conv = store(case, counter)
    builder = ContextWindowBuilder(
        conv,
        token_counter=counter,
        system_prompt="the agent prompt" if case.system_prompt else None,
        max_tool_result_tokens=case.cap,
        oversized_message_policy="truncate" if case.truncate else "error",
        pending_tool_calls=case.pending,
        gap_policy=case.gap,
        fit_newest_turn=case.fit,
    )
    queries = 0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        try:
            w = builder.build(case.max_tokens, max_messages=case.max_messages)
        except Exception as exc:  # the error is the outcome compared
            return (type(exc).__name__, str(exc)), queries
    uncovered = (w.uncovered.count, w.uncovered.tokens, w.uncovered.seqs) if w.uncovered else None
    return {
        "messages": [(m.role.value, m.seq, m.content, m.tool_call_id, m.truncated) for m in w.messages],
        "tokens": (w.system_tokens, w.summary_tokens, w.history_tokens),
        "summary_through": w.summary_through_seq,
        "skipped": (w.skipped_orphans, w.skipped_pending, w.skipped_late, w.placeholders, w.truncated),
        "uncovered": uncovered,
        "compaction": w.compaction is not None,
    }, queries


@pytest.mark.django_db
@EXAMPLES
@given(case=cases())
def test_the_trimmed_page_gives_the_windows_of_the_whole_page(case: Case) -> None:
    trimmed, queries = build(case)
    with whole_first_page():
        whole, queries_before = build(case)
    assert trimmed == whole
    # A reader past a trimmed page reads at most one page more (its later pages double from
    # the same size); a build assembles at most three windows (``_with_summary_cut``).
    assert queries_before <= queries <= queries_before + 3


def reference_page(whole: list[Any], room: int, cap: int | None) -> list[int]:
    """The seqs the trimmed page must hold, from the whole page newest first, by the rule
    as written (``_tail_select``): the rows that start inside ``room`` (capped) tokens, and
    every row not older than the oldest AI message answered by a tool result among them."""
    before, inside = 0, []
    for row in whole:
        if before <= room:
            inside.append(row)
        tokens = row[3]
        before += cap if cap is not None and row[2] == "tool" and tokens > cap else tokens
    answered = [row[4] for row in inside if row[2] == "tool" and row[4] is not None]
    reach = min(answered, default=None)
    return [row[1] for row in whole if row in inside or (reach is not None and row[1] >= reach)]


def head_page(case: Case, conv: Conversation) -> list[Any]:
    head = read_path.read_head(
        "default",
        conv.pk,
        with_pinned=not case.system_prompt,
        budget=case.max_tokens,
        max_messages=case.max_messages,
        max_tool_result_tokens=case.cap,
    )
    assert head is not None
    return head.page


@pytest.mark.django_db
@EXAMPLES
@given(case=cases())
def test_the_trimmed_page_holds_exactly_the_rows_the_rule_keeps(case: Case) -> None:
    # The statement keeps a superset in one window; ``_exact_page`` cuts it to the rule. On
    # PostgreSQL the trimmed page comes through the installed function.
    conv = store(case, TableTokenCounter([m.content for m in case.msgs], [m.tokens for m in case.msgs]))
    trimmed = [row[1] for row in head_page(case, conv)]
    with whole_first_page():
        whole = head_page(case, conv)
    assert trimmed == reference_page(whole, case.max_tokens, case.cap)


@pytest.mark.django_db
def test_rows_the_single_window_keeps_past_the_rule_are_dropped() -> None:
    # Past the room: tool exchanges separated by human messages. Each result keeps its own
    # call in the statement's running minimum, so the statement returns those exchanges but
    # not the human messages between them: rows with gaps, which the page must not hold.
    msgs: list[Msg] = []
    for i in range(6):
        msgs.append(Msg(len(msgs) + 1, "human", 5))
        call = Msg(len(msgs) + 1, "call", 5)
        call.call_ids = [f"c{i}"]
        msgs.append(call)
        msgs.append(Msg(len(msgs) + 1, "result", 5, call_id=f"c{i}"))
    msgs.append(Msg(len(msgs) + 1, "human", 5))
    case = Case(msgs, 12, None, None, False, False, "omit", "report", None, 0, False)
    conv = store(case, TableTokenCounter([m.content for m in msgs], [m.tokens for m in msgs]))
    returned: list[list[int]] = []
    exact = read_path._exact_page

    def recording(rows: list[Any]) -> list[Any]:
        returned.append([row[1] for row in rows])
        return exact(rows)

    read_path._exact_page = recording  # type: ignore[assignment]
    try:
        page = [row[1] for row in head_page(case, conv)]
    finally:
        read_path._exact_page = exact
    newest = len(msgs)
    # the last human message, the result and call before it (the result starts inside
    # 12 tokens), then the exchanges further back without the human messages between them
    assert page == [newest, newest - 1, newest - 2]
    assert returned[0][:3] == page and len(returned[0]) > len(page)
    assert newest - 3 not in returned[0]  # a human message past the room: a gap
    with whole_first_page():
        whole = head_page(case, conv)
    assert page == reference_page(whole, 12, None)


def test_the_cut_compares_only_numbers_like_the_database() -> None:
    # SQLite keeps text written into ``exchange_seq`` around Django (raw SQL); its MIN and
    # >= order numbers before text, so such a value reaches no row. Rows as the head
    # statement returns them: kind, seq, role, tokens, exchange_seq, ..., has_content at 9.
    def row(seq: int, role: str, exchange: Any, has_content: int) -> tuple[Any, ...]:
        return (3, seq, role, 5, exchange, "", "[]", seq, "", has_content, None, None, None)

    page = [row(6, "human", None, 1), row(5, "tool", "x", 0), row(4, "tool", 2, 0), row(3, "tool", 2, 0)]
    assert [r[1] for r in read_path._exact_page(list(page))] == [6, 5]  # the text reaches nothing
    page[1] = row(5, "tool", 2, 0)
    assert [r[1] for r in read_path._exact_page(list(page))] == [6, 5, 4, 3]  # down to seq 2
    page[1] = row(5, "tool", 2.0, 0)  # a REAL compares as the number it is
    assert [r[1] for r in read_path._exact_page(list(page))] == [6, 5, 4, 3]
