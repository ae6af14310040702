"""The gap probe of the window's read path: the few rows that, with the conversation's
counters, give the messages a window leaves outside itself and the summary (its oldest seq,
the pinned prompt's tokens, the summary's span, orphaned tool results, the AI messages whose
calls await a result). One statement of index lookups, whatever the length of the
conversation; on PostgreSQL through its server-side function where a migration created it
(``agentmemory.store.functions``).

Called by ``agentmemory.context.builder`` when the head statement's rows do not say it all
(``agentmemory.context.gaps.probe_from_head``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections

from agentmemory.messages import Role
from agentmemory.models import Message
from agentmemory.store.connection import statement_cursor
from agentmemory.store.rows import _tool_calls
from agentmemory.store.window import (
    _GAP_KEY,
    _SQL_CACHE,
    MAX_SEQ,
    _names,
    _sum,
    _through_function,
    _uses_functions,
)


@dataclass(frozen=True, slots=True)
class GapProbe:
    """What ``read_gap_probe`` found: the few rows that, with the conversation's counters,
    give the messages a window leaves outside itself and the summary.

    Attributes:
        first_seq: the conversation's oldest stored seq (``None``: no messages).
        pinned_tokens: stored tokens of the pinned system messages, summed (``None``: none).
        summary_first_seq, summary_tokens_covered: of the summary asked about (``None``:
            none, or it is gone).
        orphans: ``(seq, tokens)`` of the tool results answering no call, older than the
            window.
        pending: ``(seq, tokens, number of tool calls)`` of the AI messages asked about.
    """

    first_seq: int | None
    pinned_tokens: int | None
    summary_first_seq: int | None
    summary_tokens_covered: int | None
    orphans: tuple[tuple[int, int], ...]
    pending: tuple[tuple[int, int, int], ...]


def _gap_probe_sql(alias: str, *, pending: int, pending_array: bool = False) -> str:
    """The gap probe of ``read_gap_probe`` for ``pending`` AI messages asked about
    (``%(p0)s`` ...), or, with ``pending_array`` (PostgreSQL), for any number of them in
    one array parameter ``%(pending)s`` (the statement of its server-side function)."""
    key = ("gap", alias, pending, pending_array)
    sql = _SQL_CACHE.get(key)
    if sql is not None:
        return sql
    from agentmemory.models import Summary

    qn = connections[alias].ops.quote_name
    _, s, m = _names(alias)
    messages, summaries = qn(Message._meta.db_table), qn(Summary._meta.db_table)
    conv = f"{m('conversation')} = %(id)s"
    branches = [
        f"SELECT 0, (SELECT {m('seq')} FROM {messages} WHERE {conv} ORDER BY {m('seq')} LIMIT 1), "
        f"(SELECT {_sum(alias, m('token_count'))} FROM {messages} WHERE {conv} "
        f"AND {m('seq')} BETWEEN %(pinned)s AND %(pinned_last)s AND {m('role')} = %(system)s), "
        f"(SELECT {s('first_seq')} FROM {summaries} WHERE {s('id')} = %(summary)s), "
        f"(SELECT {s('tokens_covered')} FROM {summaries} WHERE {s('id')} = %(summary)s), NULL"
    ]
    if pending or pending_array:
        # Second, so that PostgreSQL gives the last column the type of ``tool_calls``.
        if pending_array:
            asked = f"{m('seq')} = ANY(%(pending)s)"
        else:
            asked = f"{m('seq')} IN ({', '.join(f'%(p{i})s' for i in range(pending))})"
        branches.append(
            f"SELECT 2, {m('seq')}, {m('token_count')}, NULL, NULL, {m('tool_calls')} FROM {messages} "
            f"WHERE {conv} AND {asked}"
        )
    # The role is a literal, as in the partial index ``agentmemory_msg_orphan_idx``: a
    # database uses a partial index only for a query whose condition implies the index's.
    branches.append(
        f"SELECT 1, {m('seq')}, {m('token_count')}, NULL, NULL, NULL FROM {messages} "
        f"WHERE {conv} AND {m('role')} = '{Role.TOOL.value}' AND {m('exchange_seq')} IS NULL "
        f"AND {m('seq')} < %(before)s"
    )
    sql = _SQL_CACHE[key] = " UNION ALL ".join(branches)
    return sql


def read_gap_probe(
    alias: str,
    conversation_id: int,
    *,
    before: int,
    summary_id: int | None,
    pending_exchanges: list[int],
    pinned_seq: int | None = None,
    pinned_last_seq: int | None = None,
) -> GapProbe:
    """One statement of index lookups, whatever the length of the conversation: the
    oldest seq, the tokens of the pinned system messages from ``pinned_seq`` through
    ``pinned_last_seq`` (default: ``pinned_seq`` alone), summed (``None``: none),
    the summary's span and covered tokens,
    the orphaned tool results with ``seq < before`` (on the partial index that holds only
    them) and the AI messages at ``pending_exchanges``."""
    params: dict[str, Any] = {
        "id": conversation_id,
        "system": Role.SYSTEM.value,
        "summary": summary_id,
        # ``before`` is ``MAX_SEQ + 1`` for "no window" (past every seq), which no 64-bit
        # parameter holds: an orphan at ``MAX_SEQ`` itself is then not found as one and is
        # counted among the uncovered messages (too many, never too few).
        "before": min(before, MAX_SEQ),
        "pinned": pinned_seq,
        "pinned_last": pinned_seq if pinned_last_seq is None else pinned_last_seq,
    }
    rows = None
    if _uses_functions(alias):
        rows = _through_function(alias, _GAP_KEY, {**params, "pending": list(pending_exchanges)})
    if rows is None:
        params.update({f"p{i}": seq for i, seq in enumerate(pending_exchanges)})
        with statement_cursor(alias) as cursor:
            cursor.execute(_gap_probe_sql(alias, pending=len(pending_exchanges)), params)
            rows = cursor.fetchall()
    head: tuple[Any, ...] = (None, None, None, None)
    orphans: list[tuple[int, int]] = []
    pending: list[tuple[int, int, int]] = []
    for kind, seq, tokens, first, covered, calls in rows:
        if kind == 0:
            head = (seq, None if tokens is None else int(tokens), first, covered)
        elif kind == 1:
            orphans.append((seq, tokens))
        else:
            pending.append((seq, tokens, len(_tool_calls(calls))))
    return GapProbe(head[0], head[1], head[2], head[3], tuple(orphans), tuple(pending))
