"""The window builder's read path: hand-written SQL returning typed rows.

Called by ``agentmemory.context.builder`` directly (``read_head``, ``TailReader``,
``read_contents``, ``read_uncovered``; the gap probe is ``agentmemory.store.gap``), each on
the database alias the caller passes. One statement reads the conversation row with its
summary and pinned system prompt and the first page of the tail (stored token counts newest
first on the ``(conversation, seq)`` index, the page sized from the conversation's average
message size, with the content of the rows inside the budget); a window longer than the
first page reads further pages, each twice the size of the last: a constant number of
queries, whatever the length of the conversation. On PostgreSQL the head statement runs
through a server-side function where a migration created it (``agentmemory.store.functions``),
planned once per server session. Of each message's metadata only what a converter sends is
read (``agentmemory.store.sent_metadata``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from django.db import connections, router

from agentmemory.messages import ChatMessage, Role, ToolCall, pending_calls, stored_object
from agentmemory.models import Conversation, Message
from agentmemory.store import functions
from agentmemory.store.connection import statement_cursor
from agentmemory.store.rows import (
    _META_FIELDS,
    _ROLES,
    _TOOL,
    ConversationRow,
    RowMeta,
    SummaryRow,
    _call_objects,
    _chat,
    _loads,
    _new_chat,
    _parts,
    _set_metadata,
    _tool_calls,
    _tuple_new,
)
from agentmemory.store.sent_metadata import sent_metadata, sent_metadata_column, sent_metadata_sql

# -- reading ---------------------------------------------------------------------------------
#
# The read path is hand-written SELECTs through the connection's cursor rather than
# querysets: a window is built for every model call, and the ORM's query construction,
# compilation and model instances cost several times the database work here (measured in
# docs/benchmarks.md). One statement reads the conversation row, its summary, its pinned
# system prompt and the first page of the tail with the content of the rows inside the
# budget; a longer window reads further pages. The SQL is plain (UNION ALL, a window
# function, scalar sub-selects), runs on PostgreSQL and SQLite, and takes table and column
# names from the models' metadata. Its text is built once per database alias and variant.


_SQL_CACHE: dict[tuple[Any, ...], str] = {}
#: largest budget (tokens) and message cap passed to the database
MAX_READ = 2**31
#: largest seq: the largest value of the 64-bit ``seq`` column (PostgreSQL's ``bigint``,
#: SQLite's ``INTEGER``), and of any parameter compared with it
MAX_SEQ = 2**63 - 1
#: largest cap on tool results passed to the database: the ``token_count`` column's (a
#: 32-bit integer), which no stored count exceeds, so a larger cap caps nothing either
_MAX_CAP = 2**31 - 1


def _clamp_cap(cap: int) -> int:
    """``cap`` within the ``token_count`` column's range, capping the same rows."""
    return min(cap, _MAX_CAP)


_NO_CAP = 2**62
#: Columns of every row the read path returns, head statement and later pages alike: the
#: kind of row, the metadata (``_META_FIELDS``), id, name, whether the content was read,
#: the content, the content parts, and a JSON column: the pinned message's ``metadata``, and
#: for the rows whose content was read what a converter sends of theirs
#: (``agentmemory.store.sent_metadata``: the thinking blocks of an ``ai`` row, ``true`` for a
#: failed ``tool`` result, NULL for the others). One layout for every page, so rows are used
#: as the driver returns them, never sliced.
_TAIL_WIDTH = len(_META_FIELDS) + 7
#: index of ``seq`` in a row
_SEQ = 1
#: sort key of the head statement's rows: kind, then seq
_KIND_SEQ = itemgetter(0, _SEQ)


def _names(alias: str) -> tuple[Any, Any, Any]:
    """Quoted column-name helpers ``(conversation, summary, message)`` for ``alias``."""
    from agentmemory.models import Summary

    qn = connections[alias].ops.quote_name

    def helper(model: Any) -> Any:
        return lambda name: qn(model._meta.get_field(name).column)

    return helper(Conversation), helper(Summary), helper(Message)


def _sum(alias: str, expression: str) -> str:
    """SQL adding up the token counts ``expression`` on ``alias``: ``SUM``, except on SQLite,
    whose ``SUM`` of integers raises "integer overflow" past 2**63 - 1, which two messages at
    the column's largest value reach there: it adds them as floats (exact up to 2**53
    tokens; NULL over no rows, as ``SUM``). PostgreSQL sums the integer column as a bigint."""
    if connections[alias].vendor == "sqlite":
        return f"SUM(CAST({expression} AS REAL))"
    return f"SUM({expression})"


def _tail_select(
    alias: str,
    *,
    capped: bool,
    where: str,
    limit: str,
    before: str = "",
    after: str = "",
    ordered: bool = True,
    trim: bool = False,
) -> str:
    """A page of the tail: rows newest first on the ``(conversation, seq)`` index, at most
    ``limit``. A running sum of the (capped) stored token counts, newest first, decides
    which rows also bring their content: those inside ``%(room)s``, so that text past the
    budget (a multi-megabyte tool output just too old to fit) is never read. The inner
    ``ORDER BY seq DESC LIMIT`` keeps the plan on the index even for a conversation that
    holds a large share of the table. ``before`` and ``after`` are extra output columns.

    ``trim`` leaves out rows the packer cannot use, in one pass of one window: it keeps the
    rows that start inside ``%(room)s`` (the running sum before them is within it: the
    rows inside and the first row past it), and each row past them that is not older than
    the oldest AI message answered by a tool result read so far (a running minimum over
    the same window). That keeps every row from the oldest AI message whose tool result
    starts inside the room (a unit is costed when its AI message is read), and may keep
    a few more rows past it, not always contiguous: ``_exact_page`` drops those, so the
    page is what a second window over the whole page would have kept. (That second
    window buffered every row of the page with its content again: a third of the
    statement's time.) ``TailReader`` knows from the sum of the rows it got that more
    may follow."""
    qn = connections[alias].ops.quote_name
    _, _, m = _names(alias)
    meta = [m(f) for f in _META_FIELDS]
    tokens = m("token_count")
    if capped:
        # The cap as an integer, the column's type: a bigint in the CASE made every running
        # sum a numeric one (SUM of bigint), about a sixth of the head statement's time on
        # the server. Callers clamp it to the column's range (``_clamp_cap``).
        tokens = (
            f"CASE WHEN {m('role')} = %(tool)s AND {tokens} > %(cap)s "
            f"THEN CAST(%(cap)s AS integer) ELSE {tokens} END"
        )
    # What a converter sends of the metadata of the rows whose content is read (the thinking
    # blocks of an ``ai`` row, the error flag of a failed ``tool`` result): the subtree only,
    # computed by the database for those rows, NULL for the others, so that the rest of the
    # metadata (model, usage, provider payload) is neither sent nor parsed, and a row without
    # either costs no JSON decoding here (``agentmemory.store.sent_metadata``).
    metadata = f"CASE WHEN running <= %(room)s THEN {sent_metadata_sql(alias, m('metadata'), m('role'))} END"
    if trim:
        # One window for both running values (seq is unique within a conversation, so ROWS
        # and the default RANGE frame agree): a single WindowAgg, streamed into the LIMIT.
        # The role is a literal: the statement has no %(tool)s parameter when uncapped.
        window = f"WINDOW w AS (ORDER BY {m('seq')} DESC ROWS UNBOUNDED PRECEDING) "
        running = (
            f"{_sum(alias, tokens)} OVER w AS running, {tokens} AS tok, "
            f"MIN(CASE WHEN {m('role')} = '{Role.TOOL.value}' THEN {m('exchange_seq')} END) OVER w AS reach"
        )
    else:
        window = ""
        running = f"{_sum(alias, tokens)} OVER (ORDER BY {m('seq')} DESC) AS running"
    page = (
        f"SELECT {', '.join(meta)}, {m('id')}, {m('name')}, {m('content')}, {m('parts')}, {m('metadata')}, "
        f"{running} FROM {qn(Message._meta.db_table)} WHERE {where} {window}"
        f"ORDER BY {m('seq')} DESC LIMIT {limit}"
    )
    if trim:
        source = f"({page}) tail WHERE running - tok <= %(room)s OR {m('seq')} >= reach"
    else:
        source = f"({page}) tail"
    return (
        f"SELECT {before}{', '.join(meta)}, {m('id')}, {m('name')}, "
        f"CASE WHEN running <= %(room)s THEN 1 ELSE 0 END, "
        f"CASE WHEN running <= %(room)s THEN {m('content')} END, "
        f"CASE WHEN running <= %(room)s THEN {m('parts')} END, {metadata}{after} FROM {source}"
        + (f" ORDER BY {m('seq')} DESC" if ordered else "")
    )


def _page_expression(alias: str, c: Any, table: str) -> str:
    """``first_page_size`` in SQL over the conversation row of ``table``; in numeric on
    PostgreSQL, where counters near the bigint limit (set by an import) raised "bigint out
    of range" (SQLite carries on in floating point where an integer overflows)."""
    count, stored = f"{table}.{c('message_count')}", f"{table}.{c('stored_tokens')}"
    if connections[alias].vendor == "sqlite":
        greatest, least, cast, divide = "MAX", "MIN", "{}", "({} - 1) / ({})"
    else:
        greatest, least, cast, divide = "GREATEST", "LEAST", "CAST({} AS numeric)", "div({} - 1, {})"
    n_count, n_stored = cast.format(count), cast.format(stored)
    quotient = divide.format(f"%(triple)s * {n_count} + 2 * {n_stored}", f"2 * {n_stored}")
    more = f"CASE WHEN {stored} <= {count} THEN %(half)s ELSE {quotient} END"
    page = f"{least}(CASE WHEN {count} <= 0 THEN 16 ELSE {greatest}(16, {more} + 8) END, %(max_page)s)"
    return page if greatest == "MAX" else f"CAST({page} AS bigint)"


#: Kinds of the rows of the head statement (its first column); the orphaned tool results
#: (``_ORPHAN``) sort after every other kind.
_ORPHAN, _CONVERSATION, _SUMMARY, _PINNED, _TAIL = -1, 0, 1, 2, 3
#: at most this many orphaned tool results come with the head statement (the newest); a
#: conversation with more has the gap probe find them (``agentmemory.store.gap``)
HEAD_ORPHANS = 16
#: the kind of the row that says the head function exists (``_run_head``)
_PROBE = 4


def _head_sql(alias: str, *, with_pinned: bool, capped: bool) -> str:
    """One statement, four kinds of rows in one column layout (``kind`` first, then the
    tail row layout, then ``metadata``):

    * the first page of the tail (``_tail_select``), whose LIMIT is the page size computed
      from the conversation row (``first_page_size`` gives the same
      number from the conversation row read alongside), trimmed to the rows the packer can
      use (``_tail_select(trim=True)``), above the floor: the summary's ``through_seq``
      (``%(floor)s``, NULL for the stored summary's) and the pinned prompt's last seq, so
      that no row the summary covers is read, whatever the budget;
    * (``with_pinned``) the pinned system messages with their ``metadata``: the system
      messages from the conversation's ``pinned_seq`` through ``pinned_last_seq``, both
      read in scalar sub-selects on the conversation row, so the lookup stays a range on
      the ``(conversation, seq)`` index;
    * the conversation: ``id`` in ``id``, ``message_count`` in ``seq``,
      ``human_message_count`` in ``token_count``, ``stored_tokens`` in ``exchange_seq``,
      ``pinned_seq`` in ``has_content``, ``pinned_last_seq`` as text in ``name``, its
      oldest stored seq as text in ``role`` and ``summary_id`` as text in ``tool_call_id``
      (every integer column is taken);
    * its summary, where the conversation's ``summary_id`` names one of its own summaries
      (a row written by hand may name another conversation's: no row then, and no floor
      from it): ``id``, ``through_seq`` in ``seq``, ``token_count``,
      ``human_messages_covered`` in ``exchange_seq``, ``token_counter`` in ``name``,
      ``text`` in ``content``, and as text ``first_seq`` in ``role`` and ``tokens_covered``
      in ``tool_call_id``;
    * (kind ``_ORPHAN``) its newest orphaned tool results, ``HEAD_ORPHANS`` + 1 at most,
      without content. With the oldest seq and the summary's span, what the gap report
      needs in the common case (``agentmemory.context.gaps.probe_from_head``).

    The conversation row is read once, on its primary key, in a common table expression
    (``conv``) that the other branches read from; the branches stay single-table otherwise
    (joins cost more to plan than the whole statement takes to run).
    """
    key = ("head", alias, with_pinned, capped)
    sql = _SQL_CACHE.get(key)
    if sql is not None:
        return sql
    from agentmemory.models import Summary

    qn = connections[alias].ops.quote_name
    c, s, m = _names(alias)
    conversations, summaries = qn(Conversation._meta.db_table), qn(Summary._meta.db_table)
    messages = qn(Message._meta.db_table)
    null = "NULL"
    # The conversation row, read once on its primary key (``conv``) for every branch that
    # needs it: each scalar sub-select on the table was a lookup of its own.
    columns = ", ".join(
        c(f)
        for f in (
            "id",
            "message_count",
            "human_message_count",
            "stored_tokens",
            "pinned_seq",
            "pinned_last_seq",
            "pending_tool_calls",
            "summary",
        )
    )
    with_conversation = f"WITH conv AS (SELECT {columns} FROM {conversations} WHERE {c('id')} = %(id)s) "
    limit = f"COALESCE((SELECT {_page_expression(alias, c, 'conv')} FROM conv), 0)"
    greatest = "MAX" if connections[alias].vendor == "sqlite" else "GREATEST"
    # The stored summary, only where it is one of the conversation's own: a ``summary_id``
    # written by hand (raw SQL, a data migration, a restore) may name another conversation's,
    # whose text and span are never this conversation's (the conversation row carries the id,
    # so the builder tells such a row from one without a summary: ``check_summary``).
    own_summary = f"{s('id')} = (SELECT {c('summary')} FROM conv) AND {s('conversation')} = %(id)s"
    # The floor: the page holds no row the summary covers (``%(floor)s`` NULL: the stored
    # summary's ``through_seq``; a number: that seq, 0 for none) or the pinned prompt holds.
    floor = (
        f"{greatest}(COALESCE(%(floor)s, "
        f"(SELECT {s('through_seq')} FROM {summaries} WHERE {own_summary}), 0), "
        f"COALESCE((SELECT COALESCE({c('pinned_last_seq')}, {c('pinned_seq')}) FROM conv), 0))"
    )
    # The tail comes first and the pinned message second: PostgreSQL resolves the type of
    # each column of a UNION from left to right, and these two branches give every column
    # its type (two NULLs first would make text, which clashes with jsonb or bigint).
    branches = [
        _tail_select(
            alias,
            capped=capped,
            where=f"{m('conversation')} = %(id)s AND {m('seq')} > {floor}",
            limit=limit,
            before=f"{_TAIL}, ",
            ordered=False,
            trim=True,
        )
    ]
    if with_pinned:
        pinned = [
            str(_PINNED),
            *(m(f) for f in _META_FIELDS),
            m("id"),
            m("name"),
            "1",
            m("content"),
            m("parts"),
            m("metadata"),
        ]
        branches.append(
            f"SELECT {', '.join(pinned)} FROM {messages} "
            f"WHERE {m('conversation')} = %(id)s AND {m('seq')} BETWEEN "
            f"(SELECT {c('pinned_seq')} FROM conv) AND "
            f"(SELECT COALESCE({c('pinned_last_seq')}, {c('pinned_seq')}) FROM conv) "
            f"AND {m('role')} = %(system)s"
        )
    conversation = [
        str(_CONVERSATION),
        c("message_count"),
        # the oldest stored seq, for the gap report
        f"CAST((SELECT {m('seq')} FROM {messages} WHERE {m('conversation')} = %(id)s "
        f"ORDER BY {m('seq')} LIMIT 1) AS varchar(20))",
        c("human_message_count"),
        c("stored_tokens"),
        f"CAST({c('summary')} AS varchar(20))",
        null,
        c("id"),
        f"CAST({c('pinned_last_seq')} AS varchar(20))",
        c("pinned_seq"),
        null,
        null,
        c("pending_tool_calls"),
    ]
    summary = [
        str(_SUMMARY),
        s("through_seq"),
        f"CAST({s('first_seq')} AS varchar(20))",
        s("token_count"),
        s("human_messages_covered"),
        f"CAST({s('tokens_covered')} AS varchar(20))",
        null,
        s("id"),
        s("token_counter"),
        "1",
        s("text"),
        null,
        null,
    ]
    branches.append(f"SELECT {', '.join(conversation)} FROM conv")
    branches.append(f"SELECT {', '.join(summary)} FROM {summaries} WHERE {own_summary}")
    # The newest orphaned tool results (on the partial index that holds only them), one
    # more than ``HEAD_ORPHANS`` to tell that there are more: with the conversation's
    # oldest seq and the summary's span, what the gap report needs in the common case
    # (``agentmemory.context.gaps.probe_from_head``), so it costs no statement of its own.
    # Typed NULLs: the sub-select's columns are resolved before the UNION's.
    text_null, json_null = (
        ("CAST(NULL AS text)", "CAST(NULL AS jsonb)")
        if connections[alias].vendor == "postgresql"
        else (null, null)
    )
    orphan = [
        str(_ORPHAN),
        *(m(f) for f in _META_FIELDS),
        m("id"),
        m("name"),
        "0",
        text_null,
        json_null,
        json_null,
    ]
    branches.append(
        f"SELECT * FROM (SELECT {', '.join(orphan)} FROM {messages} "
        f"WHERE {m('conversation')} = %(id)s AND {m('role')} = '{Role.TOOL.value}' "
        f"AND {m('exchange_seq')} IS NULL ORDER BY {m('seq')} DESC LIMIT {HEAD_ORPHANS + 1}) orphans"
    )
    sql = _SQL_CACHE[key] = with_conversation + " UNION ALL ".join(branches)
    return sql


def _next_page_sql(alias: str, *, capped: bool) -> str:
    key = ("next", alias, capped)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        _, _, m = _names(alias)
        where = f"{m('conversation')} = %(id)s AND {m('seq')} > %(floor)s AND {m('seq')} < %(upper)s"
        sql = _SQL_CACHE[key] = _tail_select(
            alias, capped=capped, where=where, limit="%(size)s", before=f"{_TAIL}, "
        )
    return sql


@dataclass
class WindowHead:
    """What the first statement read: the conversation, its summary and pinned system
    prompt, the first page's size and its rows newest first (raw rows of ``_TAIL_WIDTH``
    columns, for ``TailReader``)."""

    conv: ConversationRow
    summary: SummaryRow | None
    #: the pinned system messages, oldest first (empty: none, or not asked for)
    pinned: tuple[ChatMessage, ...]
    page_size: int
    page: list[tuple[Any, ...]]
    #: the tokens the page was trimmed to (``_tail_select(trim=True)``, ``TailReader``)
    room: int = 0
    #: what the gap report needs beside the counters (``agentmemory.context.gaps``): the
    #: conversation's oldest stored seq (``None``: no messages)...
    first_seq: int | None = None
    #: ...the summary's ``first_seq`` and ``tokens_covered`` (``None``: no summary)...
    summary_first_seq: int | None = None
    summary_tokens_covered: int | None = None
    #: ...and its orphaned tool results, ``(seq, tokens)`` newest first, every one of them
    #: (``None``: more than ``HEAD_ORPHANS``, left to the gap probe)
    orphans: tuple[tuple[int, int], ...] | None = ()

    @property
    def newest_seq(self) -> int | None:
        """The newest stored seq (``None``: the conversation has no messages above the
        floor ``read_head`` read from)."""
        return self.page[0][_SEQ] if self.page else None


def _run_head(alias: str, params: dict[str, Any], *, with_pinned: bool, capped: bool) -> list[Any]:
    """The head statement's rows. On PostgreSQL, through its server-side function where the
    connection has found it (``agentmemory.store.functions``), planned once per server
    session; otherwise as text, the first time on a connection with one more branch that
    tells whether the function exists (a row of kind ``_PROBE``, removed here). Where the
    connection prepares its statements (``agentmemory.store.connection``), the statement itself."""
    if not _uses_functions(alias):
        with statement_cursor(alias) as cursor:
            cursor.execute(_head_sql(alias, with_pinned=with_pinned, capped=capped), params)
            return cursor.fetchall()  # type: ignore[no-any-return]
    params.setdefault("system", None)
    params.setdefault("tool", None)
    params.setdefault("cap", None)
    key = (with_pinned, capped)
    rows = _through_function(alias, key, params)
    if rows is not None:
        return rows
    conn = connections[alias]
    with conn.cursor() as cursor:
        raw = conn.connection
        found = functions.known(raw, key)
        sql = _head_sql(alias, with_pinned=with_pinned, capped=capped)
        if found is None:
            params["function"] = functions.signature(key)
            params["gap_function"] = functions.signature(functions.GAP)
            sql = f"{sql} UNION ALL {_probe_sql()}"
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if found is None:
        exists = bool(rows) and rows[-1][0] == _PROBE
        if exists:
            rows.pop()
        else:  # UNION ALL promises no order: look at every row
            exists = any(row[0] == _PROBE for row in rows)
            if exists:
                rows = [row for row in rows if row[0] != _PROBE]
        functions.remember(raw, key, exists)
        functions.remember(raw, functions.GAP, exists)
    return rows  # type: ignore[no-any-return]


#: the gap probe's key in ``agentmemory.store.functions``
_GAP_KEY = ("gap",)


def _uses_functions(alias: str) -> bool:
    """Whether the read path may call its server-side functions on ``alias``
    (``agentmemory.store.functions.usable``)."""
    return functions.usable(alias)


def _through_function(alias: str, key: tuple[Any, ...], params: dict[str, Any]) -> list[Any] | None:
    """The rows of the statement of ``key`` through its server-side function
    (``agentmemory.store.functions.call``), or ``None`` when the connection has not found
    the function (or found it gone, outside a transaction)."""
    return functions.call(alias, key, params, functions.KEYS)


def _probe_sql() -> str:
    """A branch of the head statement: one row of kind ``_PROBE`` when the functions named
    by ``%(function)s`` and ``%(gap_function)s`` exist (in the schemas the session's search
    path reaches) and the session's role may call them: a role without ``EXECUTE`` on them
    (default privileges that revoke it from ``PUBLIC``) sends the statements as text.
    ``has_function_privilege`` is NULL for the NULL of a missing function."""
    return (
        f"SELECT {_PROBE}{', NULL' * (_TAIL_WIDTH - 1)} "
        "WHERE has_function_privilege(to_regprocedure(%(function)s), 'EXECUTE') "
        "AND has_function_privilege(to_regprocedure(%(gap_function)s), 'EXECUTE')"
    )


#: indexes of the role, the exchange seq and the content flag in a tail row (the row layout,
#: ``kind`` first; ``_SEQ`` is the seq)
_ROLE_COL, _EXCHANGE_COL, _HAS_CONTENT = 2, 4, 9
#: the types of a stored seq as the drivers return it
_NUMBERS = (int, float)


def _past_room(row: tuple[Any, ...]) -> bool:
    """Whether a tail row ends past the room (the statement read it without its content)."""
    return not row[_HAS_CONTENT]


def _exact_page(rows: list[Any]) -> list[Any]:
    """The head's page as the trim promises it (``_tail_select(trim=True)``), from the rows
    the statement returned, newest first: the rows that start inside the room (the running
    sum of the (capped) token counts before them is within it), then the rows past them
    down to the oldest AI message answered by a tool result among those, and no other.

    The statement keeps a superset, computed in one window: every row past the room that
    is not older than the oldest call answered by a result read so far, including results
    past the room. Its rows that start inside the room come first and complete; the rows
    down to the oldest call answered among them come next, all of them. What follows is
    dropped here (in place; ``rows`` is returned): it may have gaps.

    A row ends inside the room when it came with its content (the statement's running sum
    through it is within the room, the same sum and room as the trim's), so the rows that
    start inside are those up to the first row read without content. Those are a prefix
    (no token count is negative), found by bisection."""
    if not rows or not _past_room(rows[-1]):
        return rows  # every row ends inside the room: none is past it
    inside = bisect_left(rows, True, key=_past_room) + 1  # and the first row past it
    # The oldest call answered by a result that starts inside. Only numbers: SQLite keeps
    # text written into the integer column around Django, and its MIN and >= put numbers
    # before text, so text there reaches no row (Python would refuse to compare them).
    reach = min(
        [
            row[_EXCHANGE_COL]
            for row in rows[:inside]
            if row[_ROLE_COL] == _TOOL and type(row[_EXCHANGE_COL]) in _NUMBERS
        ],
        default=None,
    )
    end = inside
    if reach is not None:
        while end < len(rows) and rows[end][_SEQ] >= reach:
            end += 1
    del rows[end:]
    return rows


def read_head(
    alias: str,
    conversation_id: int,
    *,
    with_pinned: bool,
    budget: int,
    max_messages: int | None,
    max_tool_result_tokens: int | None,
    floor: int | None = None,
) -> WindowHead | None:
    """The conversation, its summary, its pinned system messages (``with_pinned``; the
    leading run of system messages, oldest first) and the first page of its tail in one
    statement; ``None`` when the conversation does not exist.

    ``budget`` (tokens) sizes the first page and bounds the content read with it; it must
    not be less than what the history may use (here: the budget before the summary and the
    pinned prompt are taken off), so the page brings at least the content that is needed.

    The page holds only rows above the floor: the pinned prompt's last seq, and
    ``floor`` (a seq; ``None``: the stored summary's ``through_seq``), whichever is
    higher. Rows a summary covers are never read, whatever the budget.

    The summary is the conversation's current one only where it is one of the
    conversation's own: a ``summary_id`` that names another conversation's summary (written
    by hand) reads as none (``WindowHead.summary`` is ``None``, and its span is no floor),
    with the id kept in ``WindowHead.conv.summary_id`` for the caller to refuse it.
    """
    if not -MAX_SEQ - 1 <= conversation_id <= MAX_SEQ:
        return None  # no 64-bit id: no conversation (SQLite's driver raised OverflowError)
    capped = max_tool_result_tokens is not None
    budget = max(budget, 0)
    params: dict[str, Any] = {
        "id": conversation_id,
        "system": Role.SYSTEM.value,
        "room": budget,
        "half": (3 * budget + 1) // 2,
        "triple": 3 * budget,
        "max_page": _NO_CAP if max_messages is None else max_messages + 16,
        "floor": floor,
    }
    if capped:
        params.update(tool=Role.TOOL.value, cap=_clamp_cap(max_tool_result_tokens))  # type: ignore[arg-type]
    rows = _run_head(alias, params, with_pinned=with_pinned, capped=capped)
    # UNION ALL promises no order: the tail rows (the highest kind) first, newest first,
    # then the pinned messages (newest first), the summary and the conversation. Rows are kept as the
    # driver made them: the reader and the builder index into them.
    rows.sort(key=_KIND_SEQ, reverse=True)
    end = len(rows)
    while end and rows[end - 1][0] != _TAIL:
        end -= 1
    conv = summary = None
    pinned: list[ChatMessage] = []
    first_seq = summary_first = summary_covered = None
    orphans: list[tuple[int, int]] = []
    for row in rows[end:]:
        kind = row[0]
        values = row[1:]
        if kind == _ORPHAN:
            orphans.append((values[0], values[2]))
            continue
        if kind == _CONVERSATION:
            first_seq = None if values[1] is None else int(values[1])
            # the entries that name a call and a seq (``pending_calls``: a row written by hand
            # may hold anything, and failed every window)
            pending = pending_calls(_loads(values[11])) if values[11] and values[11] != "{}" else None
            call_seqs = tuple(pending.values()) if pending else ()
            conv = ConversationRow(
                values[6],
                values[0],
                values[2],
                values[3],
                values[8],
                None if values[7] is None else int(values[7]),
                tuple(sorted(set(call_seqs))),
                call_seqs,
                None if values[4] is None else int(values[4]),
            )
        elif kind == _SUMMARY:
            summary = SummaryRow(values[6], values[9], values[0], values[2], values[7], values[3])
            summary_first = None if values[1] is None else int(values[1])
            summary_covered = None if values[4] is None else int(values[4])
        else:
            seq, role, tokens, _, tool_call_id, tool_calls, pk, name, _, content, parts, metadata = values
            pinned.append(
                ChatMessage(
                    role=Role(role),
                    content=content,
                    tool_calls=tuple(ToolCall.from_stored(c) for c in _tool_calls(tool_calls)),
                    tool_call_id=tool_call_id,
                    name=name,
                    metadata=stored_object(_loads(metadata)),
                    seq=seq,
                    id=pk,
                    token_count=tokens,
                    parts=_parts(parts),
                )
            )
    del rows[end:]
    page = _exact_page(rows)
    if conv is None:
        return None
    # The LIMIT of the tail branch, computed from the same row of the same snapshot.
    page_size = first_page_size(budget, conv, max_messages)
    run = tuple(reversed(pinned)) if conv.has_system_prompt else ()
    return WindowHead(
        conv=conv,
        summary=summary,
        pinned=run,
        page_size=page_size,
        page=page,
        room=budget,
        first_seq=first_seq,
        summary_first_seq=summary_first,
        summary_tokens_covered=summary_covered,
        # newest first, as sorted
        orphans=tuple(orphans) if len(orphans) <= HEAD_ORPHANS else None,
    )


def read_contents(alias: str, conversation_id: int, seqs: list[int]) -> dict[int, ChatMessage]:
    """Messages of the given seqs, by seq (the rare rows the tail read left without content).
    Of the metadata, only what a converter sends is read, as by the tail read
    (``agentmemory.store.sent_metadata``)."""
    rows = (
        Message.objects.using(alias)
        .filter(conversation_id=conversation_id, seq__in=seqs)
        .values_list(
            "id",
            "seq",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "token_count",
            "parts",
            sent_metadata_column(alias),
        )
    )
    contents = {}
    for r in rows:
        chat = _chat(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4] or (),
            r[5],
            r[6],
            r[7],
            _parts(r[8]),
        )
        if r[9] is not None and (kept := sent_metadata(r[2], r[9])) is not None:
            _set_metadata(chat, kept)
        contents[r[1]] = chat
    return contents


class TailReader:
    """Iterates metadata rows newest first, one page (one query) at a time, from the first
    page the caller read (``first_rows``, ``first_page`` rows asked for) when given.

    Each page also brings the content of the rows whose running token count (tool results
    counted at ``max_tool_result_tokens`` when set) stays within ``content_budget``, kept in
    ``contents`` by seq: in the usual case the window's messages come with the page that
    found them and no further read is needed. Rows at or below ``floor_seq`` are not
    yielded; ``rows_read`` counts every row read.

    ``first_room``: the first page was trimmed to the rows that start within that many
    tokens (the head statement's page, ``_tail_select(trim=True)``): when its rows hold more
    tokens than that, rows may follow it whatever its length.
    """

    def __init__(
        self,
        conversation_id: int,
        floor_seq: int,
        first_page: int,
        *,
        first_rows: list[tuple[Any, ...]] | None = None,
        content_budget: int = 0,
        max_tool_result_tokens: int | None = None,
        using: str | None = None,
        first_room: int | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.floor_seq = floor_seq
        self.page_size = first_page
        self.first_rows = first_rows
        self.first_room = first_room
        self.content_budget = content_budget
        self.cap = max_tool_result_tokens
        self.using = using or router.db_for_read(Message)
        self.rows_read = 0
        self.contents: dict[int, ChatMessage] = {}
        #: every row yielded so far, newest first
        self.seen: list[RowMeta] = []

    def _fetch(self, upper: int | None, size: int, room: int) -> list[tuple[Any, ...]]:
        params: dict[str, Any] = {
            "id": self.conversation_id,
            "floor": self.floor_seq,
            "size": size,
            "room": room,
        }
        if upper is None:  # no page read yet: start above the newest seq
            upper = 2**62
        params["upper"] = upper
        if self.cap is not None:
            params.update(tool=Role.TOOL.value, cap=_clamp_cap(self.cap))
        with statement_cursor(self.using) as cursor:
            cursor.execute(_next_page_sql(self.using, capped=self.cap is not None), params)
            return cursor.fetchall()

    def __iter__(self) -> Iterator[RowMeta]:
        seen = self.seen.append
        contents = self.contents
        new_tuple, row_type, new_chat, roles, call_objects = (
            _tuple_new,
            RowMeta,
            _new_chat,
            _ROLES,
            _call_objects,
        )
        cap = self.cap
        floor = self.floor_seq
        upper: int | None = None
        size = self.page_size
        spent = 0  # (capped) tokens of the rows already yielded
        page = self.first_rows
        first_room = self.first_room if page is not None else None
        while True:
            if page is None:
                page = self._fetch(upper, size, self.content_budget - spent)
            self.rows_read += len(page)
            complete = len(page) < size
            for (
                _,
                seq,
                role,
                token_count,
                exchange_seq,
                tool_call_id,
                raw_calls,
                pk,
                name,
                has_content,
                content,
                parts,
                sent,
            ) in page:
                if seq <= floor:
                    complete = True  # everything above the boundary has been read
                    break
                tool_calls = _tool_calls(raw_calls) if raw_calls and raw_calls != "[]" else ()
                if has_content:
                    # The message as sent, made here from the same row (``_chat`` without
                    # the call): most rows with content end up in the window.
                    contents[seq] = chat = new_chat(
                        roles[role],
                        content,
                        call_objects(tool_calls) if tool_calls else (),
                        tool_call_id,
                        name,
                        seq,
                        pk,
                        token_count,
                        _parts(parts) if parts is not None else (),
                    )
                    # NULL but for an ``ai`` row with thinking blocks and a failed tool result
                    if sent is not None and (kept := sent_metadata(role, sent)) is not None:
                        _set_metadata(chat, kept)
                spent += cap if cap is not None and role == _TOOL and token_count > cap else token_count
                # ``_new_row`` inlined: one call per row
                row = new_tuple(
                    row_type, (seq, role, token_count, exchange_seq, tool_call_id, tool_calls, False, "")
                )
                seen(row)
                yield row
            else:
                # Every row of the page is above the boundary. The head's page is trimmed
                # after the first row past its room: one that got there may have more after it.
                if first_room is not None and spent > first_room:
                    complete = False
            first_room = None  # later pages are whole
            if complete or not page:
                return
            upper = page[-1][_SEQ]
            size *= 2
            page = None


def first_page_size(budget: int, conv: Any, max_messages: int | None) -> int:
    """Rows to read first: enough for ``budget`` at the conversation's average message size
    (``conv.stored_tokens / conv.message_count``, at least 1), with a 1.5x margin, plus 8;
    at least 16, and at most ``max_messages + 16``. Later pages double.

    Integer arithmetic, so that ``_head_sql`` computes the same number in the database.
    """
    budget = max(budget, 0)
    if conv.message_count <= 0:
        size = 16
    else:
        if conv.stored_tokens <= conv.message_count:  # average at most one token: counts as one
            more = (3 * budget + 1) // 2
        else:  # ceil(budget / average * 1.5)
            more = (3 * budget * conv.message_count + 2 * conv.stored_tokens - 1) // (2 * conv.stored_tokens)
        size = max(16, more + 8)
    if max_messages is not None:
        size = min(size, max_messages + 16)
    return size


def _uncovered_sql(alias: str, *, pending: int) -> str:
    key = ("uncovered", alias, pending)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        _, _, m = _names(alias)
        qn = connections[alias].ops.quote_name
        exchange = m("exchange_seq")
        waiting = (
            f" AND ({exchange} IS NULL OR {exchange} NOT IN ({', '.join(['%s'] * pending)}))"
            if pending
            else ""
        )
        sql = _SQL_CACHE[key] = (
            f"SELECT {m('seq')}, COUNT(*) OVER (), {_sum(alias, m('token_count'))} OVER () "
            f"FROM {qn(Message._meta.db_table)} WHERE {m('conversation')} = %s AND {m('seq')} > %s "
            f"AND {m('seq')} <= %s AND NOT ({m('role')} = %s AND {exchange} IS NULL){waiting} "
            f"ORDER BY {m('seq')} DESC LIMIT %s"
        )
    return sql


def read_uncovered(
    alias: str, conversation_id: int, *, after: int, before: int, pending_exchanges: list[int], listed: int
) -> tuple[int, int, list[int]]:
    """Stored messages with ``after < seq < before`` other than orphaned tool results
    and the messages of the tool exchanges started at ``pending_exchanges`` (seqs of AI
    messages whose calls await a result): ``(count, tokens, seqs)``, the seqs newest
    first and at most ``listed`` of them (count and tokens are exact). One statement on
    the ``(conversation, seq)`` index. ``before`` may be ``MAX_SEQ + 1`` (no window: every
    seq); ``after`` and ``before - 1`` are compared as sent, within the column's range."""
    with statement_cursor(alias) as cursor:
        cursor.execute(
            _uncovered_sql(alias, pending=len(pending_exchanges)),
            [
                conversation_id,
                max(after, -MAX_SEQ - 1),
                min(before - 1, MAX_SEQ),
                Role.TOOL.value,
                *pending_exchanges,
                listed,
            ],
        )
        rows = cursor.fetchall()
    if not rows:
        return 0, 0, []
    return int(rows[0][1]), int(rows[0][2] or 0), [r[0] for r in rows]
