"""PostgreSQL appends in one statement, and the rule that pins the leading system messages.

``PersistentChatHistory.add_messages`` (``agentmemory.history``) validates a batch, counts
its tokens and calls ``_append_one_postgresql`` (one message, plain parameters) or
``_append_postgresql`` (a batch, one array per column) on PostgreSQL; either returns
``None`` when the batch needs the history's locked path (an error to report precisely, or a
case the statement leaves out). One round trip, atomic on its own: the conversation row's
counters are bumped and the rows inserted with the seqs the ``UPDATE`` hands over.

**The pinned system prompt.** Every system message stored while the conversation holds only
system messages (none at all: new, or just cleared) is pinned: ``Conversation.pinned_seq``
through ``pinned_last_seq``. The rule has one definition in each language, and
``tests/test_pin_rule.py`` checks that the two agree on every case:

* ``pin_after_append`` (Python), used by the history's locked path;
* ``pin_expressions`` / ``pin_assignments`` (SQL), the ``SET`` clauses of every append
  statement here.

On PostgreSQL with statements sent as text, the one-message statements run through
server-side functions (``_run_one``; migration ``0029_append_one_functions``), planned once
per server session.

Only ``agentmemory.models``, ``agentmemory.messages`` and the ``connection``, ``rows`` and
``functions`` modules of this package are imported.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.utils import timezone

from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, pinned_end
from agentmemory.store import functions
from agentmemory.store.connection import prepares_statements, statement_cursor
from agentmemory.store.rows import _new_chat, _set_metadata


def leading_system_messages(batch: list[ChatMessage]) -> int:
    """How many messages open ``batch`` with the system role (0 when the first is not one):
    those a conversation holding only system messages pins (``Conversation.pinned_last_seq``)."""
    lead = 0
    for message in batch:
        if message.role is not Role.SYSTEM:
            break
        lead += 1
    return lead


def pin_after_append(
    *, message_count: int, last_seq: int, pinned_seq: int | None, pinned_last_seq: int | None, lead: int
) -> tuple[int | None, int | None]:
    """``(pinned_seq, pinned_last_seq)`` of a conversation after appending a batch that opens
    with ``lead`` system messages (``leading_system_messages``), from the row as it was
    before (``message_count``, ``last_seq``, ``pinned_seq``, ``pinned_last_seq``).

    The batch's leading system messages are pinned when the conversation holds no message
    (its first is then the start of the pin), or when every message it holds is pinned
    (``pinned_end`` reaches ``last_seq``: a row written before ``pinned_last_seq`` existed
    pins ``pinned_seq`` alone). ``pin_expressions`` is the same rule in SQL."""
    if lead <= 0:
        return pinned_seq, pinned_last_seq
    if message_count == 0:
        return last_seq + 1, last_seq + lead
    if pinned_seq is not None and pinned_end(pinned_seq, pinned_last_seq) == last_seq:
        return pinned_seq, last_seq + lead
    return pinned_seq, pinned_last_seq


def pin_expressions(*, lead: str, row: str = "", last_seq: str | None = None) -> dict[str, str]:
    """``pin_after_append`` in SQL: the new value of ``has_system_prompt``, ``pinned_seq``
    and ``pinned_last_seq``, by column, as expressions over the conversation row before the
    update.

    Args:
        lead: SQL for the number of leading system messages (a parameter such as
            ``"%(lead)s"``, or a literal: ``"1"`` for one system message).
        row: prefix of the conversation's columns (``"c."`` where the table is aliased).
        last_seq: SQL for the conversation's ``last_seq`` before the update (default: the
            row's own column; ``"locked.last_seq"`` where a CTE locked and read it).
    """
    last = last_seq or f"{row}last_seq"
    count, first, through = f"{row}message_count", f"{row}pinned_seq", f"{row}pinned_last_seq"
    return {
        "has_system_prompt": f"{row}has_system_prompt OR ({count} = 0 AND {lead} > 0)",
        "pinned_seq": f"CASE WHEN {count} = 0 AND {lead} > 0 THEN {last} + 1 ELSE {first} END",
        "pinned_last_seq": (
            f"CASE WHEN {lead} > 0 AND ({count} = 0 OR ({first} IS NOT NULL "
            f"AND COALESCE({through}, {first}) = {last})) THEN {last} + {lead} ELSE {through} END"
        ),
    }


def pin_assignments(*, lead: str, row: str = "", last_seq: str | None = None) -> str:
    """The ``SET`` clauses of ``pin_expressions`` (same arguments), each ending in a comma."""
    return " ".join(
        f"{column} = {expression},"
        for column, expression in pin_expressions(lead=lead, row=row, last_seq=last_seq).items()
    )


# Every statement below updates no row when a counter would pass 2**63 - 1, the largest
# value of its 64-bit column (``last_seq`` or a count written by hand: raw SQL, a data
# migration), instead of failing with "bigint out of range": nothing is stored,
# and the locked path (``PersistentChatHistory._append_locked``) raises the typed error.
# Those that read the pending tool calls also update none when the column is not a JSON
# object, or holds for a call answered here what is no seq (a row written by hand), rather
# than failing on the cast: the locked path reads it with ``messages.pending_calls``.
_PLAIN_APPEND_SQL = """
WITH bumped AS (
    UPDATE {conversation}
    SET last_seq = last_seq + %(n)s,
        message_count = message_count + %(n)s,
        human_message_count = human_message_count + %(humans)s,
        stored_tokens = stored_tokens + %(tokens)s,
        {pin}
        updated_at = %(now)s
    WHERE id = %(id)s
      AND last_seq <= 9223372036854775807 - %(n)s AND message_count <= 9223372036854775807 - %(n)s
      AND human_message_count <= 9223372036854775807 - %(humans)s
      AND stored_tokens <= 9223372036854775807 - %(tokens)s
    RETURNING last_seq - %(n)s AS base
)
INSERT INTO {message} (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT %(id)s, bumped.base + v.ord, v.role, v.content, v.tool_calls::jsonb, v.tool_call_id, v.name,
       v.token_count, %(counter)s, NULL, v.metadata::jsonb, v.parts::jsonb, %(now)s
FROM bumped, unnest(
    %(ords)s::integer[], %(roles)s::varchar[], %(contents)s::text[], %(tool_calls)s::text[],
    %(tool_call_ids)s::varchar[], %(names)s::varchar[], %(token_counts)s::integer[],
    %(exchange_ords)s::integer[], %(metadatas)s::text[], %(parts)s::text[]
) AS v(ord, role, content, tool_calls, tool_call_id, name, token_count, exchange_ord, metadata, parts)
ORDER BY v.ord
RETURNING id, seq, exchange_seq
"""
_APPEND_SQL = """
WITH locked AS (
    SELECT id, last_seq, pending_tool_calls AS pending
    FROM {conversation} WHERE id = %(id)s FOR UPDATE
), bumped AS (
    UPDATE {conversation} AS c
    SET last_seq = locked.last_seq + %(n)s,
        message_count = c.message_count + %(n)s,
        human_message_count = c.human_message_count + %(humans)s,
        stored_tokens = c.stored_tokens + %(tokens)s,
        {pin}
        pending_tool_calls = (locked.pending - %(answered)s::text[]) || COALESCE(
            (SELECT jsonb_object_agg(k, locked.last_seq + o)
             FROM unnest(%(new_ids)s::text[], %(new_ords)s::integer[]) AS t(k, o)),
            '{{}}'::jsonb
        ),
        updated_at = %(now)s
    FROM locked
    WHERE c.id = locked.id
      AND locked.last_seq <= 9223372036854775807 - %(n)s AND c.message_count <= 9223372036854775807 - %(n)s
      AND c.human_message_count <= 9223372036854775807 - %(humans)s
      AND c.stored_tokens <= 9223372036854775807 - %(tokens)s
      AND jsonb_typeof(locked.pending) = 'object'
      AND NOT EXISTS (
          SELECT 1 FROM unnest(%(answered)s::text[]) AS a(k)
          WHERE locked.pending ? a.k AND NOT (jsonb_typeof(locked.pending -> a.k) = 'number'
                                              AND (locked.pending ->> a.k) ~ '^[1-9][0-9]{{0,17}}$')
      )
      AND (NOT %(strict)s OR locked.pending ?& %(answered)s::text[])
      AND NOT locked.pending ?| %(called)s::text[]
    RETURNING locked.last_seq AS base, locked.pending AS pending
)
INSERT INTO {message} (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT %(id)s, bumped.base + v.ord, v.role, v.content, v.tool_calls::jsonb, v.tool_call_id, v.name,
       v.token_count, %(counter)s,
       CASE WHEN v.exchange_ord IS NOT NULL THEN bumped.base + v.exchange_ord
            WHEN v.tool_call_id <> '' THEN (bumped.pending ->> v.tool_call_id)::bigint END,
       v.metadata::jsonb, v.parts::jsonb, %(now)s
FROM bumped, unnest(
    %(ords)s::integer[], %(roles)s::varchar[], %(contents)s::text[], %(tool_calls)s::text[],
    %(tool_call_ids)s::varchar[], %(names)s::varchar[], %(token_counts)s::integer[],
    %(exchange_ords)s::integer[], %(metadatas)s::text[], %(parts)s::text[]
) AS v(ord, role, content, tool_calls, tool_call_id, name, token_count, exchange_ord, metadata, parts)
ORDER BY v.ord
RETURNING id, seq, exchange_seq
"""


# One message, the usual case (an agent stores each message as it happens): the same work as
# the statements above with one row of plain parameters instead of ten arrays to unnest,
# which the driver adapts and the server plans several times faster. Each parameter is
# given once (the inserted row takes the conversation id and the time from the updated
# conversation row), and the time is ISO 8601 text cast by the server: Django binds
# parameters on the client, where adapting a ``datetime`` costs several times a string.
# Without tool calls and results (validation refuses them on such a message), the role's
# counters are literals: one text per role (``{role}``, ``{humans}``, ``{pin}``).
_PLAIN_APPEND_ONE_SQL = """
WITH bumped AS (
    UPDATE {conversation}
    SET last_seq = last_seq + 1,
        message_count = message_count + 1,
        human_message_count = human_message_count + {humans},
        stored_tokens = stored_tokens + %(tokens)s,{pin}
        updated_at = %(now)s::timestamptz
    WHERE id = %(id)s
      AND last_seq < 9223372036854775807 AND message_count < 9223372036854775807
      AND human_message_count <= 9223372036854775807 - {humans}
      AND stored_tokens <= 9223372036854775807 - %(tokens)s
    RETURNING id, last_seq, updated_at
)
INSERT INTO {message} (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.last_seq, '{role}', %(content)s, '[]'::jsonb, '', %(name)s,
       %(tokens)s, %(counter)s, NULL, %(metadata)s::jsonb, %(parts)s::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq
"""
# One AI message with tool calls (``new_ids``: a JSON list of their ids) or one tool result
# (``answered``: the id it answers): the pending calls are checked and changed under the
# row lock, as in ``_APPEND_SQL``. Neither is a system message: the pin is left as it is.
_APPEND_ONE_SQL = """
WITH locked AS (
    SELECT id, last_seq, pending_tool_calls AS pending
    FROM {conversation} WHERE id = %(id)s FOR UPDATE
), new_ids AS (
    SELECT k FROM jsonb_array_elements_text(%(new_ids)s::jsonb) AS t(k)
), bumped AS (
    UPDATE {conversation} AS c
    SET last_seq = locked.last_seq + 1,
        message_count = c.message_count + 1,
        stored_tokens = c.stored_tokens + %(tokens)s,
        pending_tool_calls = (locked.pending - %(answered)s::text) || COALESCE(
            (SELECT jsonb_object_agg(k, locked.last_seq + 1) FROM new_ids), '{{}}'::jsonb
        ),
        updated_at = %(now)s::timestamptz
    FROM locked
    WHERE c.id = locked.id
      AND locked.last_seq < 9223372036854775807 AND c.message_count < 9223372036854775807
      AND c.stored_tokens <= 9223372036854775807 - %(tokens)s
      AND jsonb_typeof(locked.pending) = 'object'
      AND (NOT locked.pending ? %(answered)s::text
           OR (jsonb_typeof(locked.pending -> %(answered)s::text) = 'number'
               AND (locked.pending ->> %(answered)s::text) ~ '^[1-9][0-9]{{0,17}}$'))
      AND (%(answered)s::text = '' OR NOT %(strict)s OR locked.pending ? %(answered)s::text)
      AND NOT EXISTS (SELECT 1 FROM new_ids WHERE locked.pending ? new_ids.k)
    RETURNING c.id, locked.last_seq AS base, locked.pending AS pending, c.updated_at
)
INSERT INTO {message} (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, parts, created_at
)
SELECT bumped.id, bumped.base + 1, %(role)s, %(content)s, %(tool_calls)s::jsonb, %(tool_call_id)s, %(name)s,
       %(tokens)s, %(counter)s,
       CASE WHEN %(answered)s::text = '' THEN bumped.base + 1
            ELSE (bumped.pending ->> %(answered)s::text)::bigint END,
       %(metadata)s::jsonb, %(parts)s::jsonb, bumped.updated_at
FROM bumped
RETURNING id, seq, exchange_seq
"""
_SQL_TEXT: dict[tuple[str, str, str], str] = {}


def _sql_text(template: str, name: str, **literals: str) -> str:
    """``template`` with the table names and ``literals`` filled in, made once per
    statement (``name`` names the statement and its literals)."""
    key = (name, Conversation._meta.db_table, Message._meta.db_table)
    sql = _SQL_TEXT.get(key)
    if sql is None:
        sql = _SQL_TEXT[key] = template.format(
            conversation=Conversation._meta.db_table, message=Message._meta.db_table, **literals
        )
    return sql


#: literals of the one-message statement without tool calls, per role: the role, what it
#: adds to the human message count, and for a system message the pin (a system message
#: stored while the conversation holds only system messages, or none, is pinned)
_PLAIN_ROLE_LITERALS: dict[Role, dict[str, str]] = {
    role: {
        "role": role.value,
        "humans": "1" if role is Role.HUMAN else "0",
        "pin": "\n        " + pin_assignments(lead="1") if role is Role.SYSTEM else "",
    }
    for role in Role
    if role is not Role.TOOL
}


def append_one_sql(variant: str) -> str:
    """The one-message append's statement for ``variant``: a role without tool calls
    (``"system"``, ``"human"``, ``"ai"``; ``_PLAIN_APPEND_ONE_SQL``) or ``"calls"`` (an AI
    message with tool calls, or a tool result; ``_APPEND_ONE_SQL``). The text sent as is, and
    the body of its server-side function (``agentmemory.store.functions``, migration
    ``0029_append_one_functions``)."""
    if variant == "calls":
        return _sql_text(_APPEND_ONE_SQL, "one")
    role = Role(variant)
    return _sql_text(_PLAIN_APPEND_ONE_SQL, f"plain-one-{role.value}", **_PLAIN_ROLE_LITERALS[role])


#: The end of every one-message statement, and what the first one a connection sends as text
#: returns beside it: whether the append's four functions exist and the session's role may
#: call them (``has_function_privilege`` is NULL for the NULL of a missing one).
_RETURNING = "RETURNING id, seq, exchange_seq"
_PROBE = (
    ", (SELECT COALESCE(bool_and(COALESCE(has_function_privilege(to_regprocedure(f), 'EXECUTE'), "
    "false)), false) FROM unnest(%(append_functions)s::text[]) AS t(f))"
)


def _run_one(using: str, variant: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """The row the one-message statement of ``variant`` returns (``None``: none).

    On PostgreSQL with statements sent as text (Django's default), through its server-side
    function once the connection has found it (``agentmemory.store.functions``): planned
    once per server session rather than parsed and planned on every append. The first
    statement a connection sends as text tells whether the functions exist and may be
    called, in one more column of its ``RETURNING``; where they do not (``migrate`` not run
    since the upgrade, ``EXECUTE`` revoked) the statement is sent as text, as before. A
    function that fails as unusable sends the statements as text on that connection from
    then on (inside a transaction the error is raised once: roll back and retry). Where the
    connection prepares its statements (``agentmemory.store.connection``), the statement
    itself, prepared."""
    if prepares_statements(using):
        with statement_cursor(using, prepared=True) as cursor:
            cursor.execute(append_one_sql(variant), params)
            return cursor.fetchone()  # type: ignore[no-any-return]
    # not prepared, on PostgreSQL (the only caller's condition): ``functions.usable``
    key = ("append", variant)
    rows = functions.call(using, key, params, functions.APPEND_KEYS)
    if rows is not None:
        return rows[0] if rows else None
    with statement_cursor(using, prepared=False) as cursor:
        raw = connections[using].connection
        found = functions.known(raw, key)
        sql = append_one_sql(variant)
        if found is None:
            sql = sql.replace(_RETURNING, _RETURNING + _PROBE)
            params = {**params, "append_functions": functions.append_names()}
        cursor.execute(sql, params)
        returned = cursor.fetchone()
    if found is None and returned is not None:
        exists = bool(returned[3])
        for other in functions.APPEND_KEYS:
            functions.remember(raw, other, exists)
        returned = returned[:3]
    return returned  # type: ignore[no-any-return]


def _append_one_postgresql(
    using: str, conversation_id: int, message: ChatMessage, tokens: int, counter_id: str, *, strict: bool
) -> list[ChatMessage] | None:
    """``_append_postgresql`` for a batch of one message, with plain parameters (through its
    server-side function where ``_run_one`` may)."""
    role = message.role
    params: dict[str, Any] = {
        "id": conversation_id,
        "tokens": tokens,
        "counter": counter_id,
        "now": timezone.now().isoformat(),
        "content": message.content,
        "name": message.name,
        "metadata": json.dumps(dict(message.metadata)) if message.metadata else "{}",
        "parts": json.dumps([p.to_dict() for p in message.parts]) if message.parts else None,
    }
    if role is Role.AI and message.tool_calls:
        ids = [c.id for c in message.tool_calls]
        if len(set(ids)) != len(ids):
            return None  # one id twice: the locked path says so
        params.update(
            role=role.value,
            tool_calls=json.dumps([c.to_dict() for c in message.tool_calls]),
            tool_call_id=message.tool_call_id,
            new_ids=json.dumps(ids),
            answered="",
            strict=strict,
        )
        variant = "calls"
    elif role is Role.TOOL:
        params.update(
            role=role.value,
            tool_calls="[]",
            tool_call_id=message.tool_call_id,
            new_ids="[]",
            answered=message.tool_call_id,
            strict=strict,
        )
        variant = "calls"
    else:
        # validated: no tool calls and no tool_call_id on this message
        variant = role.value
    returned = _run_one(using, variant, params)
    if returned is None:
        return None  # no such conversation, or a check failed: the locked path says which
    pk, seq, _ = returned
    # The message as stored, made the quick way (``agentmemory.store.rows``): its fields are
    # the validated message's, so the dataclass's checks have run on them already.
    stored = _new_chat(
        role,
        message.content,
        message.tool_calls,
        message.tool_call_id,
        message.name,
        seq,
        pk,
        tokens,
        message.parts,
    )
    if message.metadata:
        _set_metadata(stored, dict(message.metadata))
    return [stored]


def _append_postgresql(
    using: str,
    conversation_id: int,
    batch: list[ChatMessage],
    counts: list[int],
    counter_id: str,
    *,
    strict: bool,
) -> list[ChatMessage] | None:
    """Append ``batch`` in one statement, or return ``None`` when the batch needs the
    locked path (to be refused with a precise error, or for a case this statement leaves
    out: a call id both answered and made again in one batch).

    With tool calls or results, the conversation row is locked (``SELECT ... FOR UPDATE``
    in the first CTE) and its counters and pending tool calls changed in the ``UPDATE``,
    which also checks that every result answering a call from an earlier append finds it
    pending (strict mode) and that no new call reuses a pending id; without them the
    ``UPDATE`` alone takes the lock. The rows are inserted with the seqs it hands over: one
    round trip, atomic on its own, so no transaction needs to be opened around it.
    """
    local: dict[str, int] = {}  # calls made in this batch and not answered yet: id -> ordinal
    answered: list[str] = []  # ids answered here of calls made by an earlier append
    called: set[str] = set()
    exchange_ords: list[int | None] = []
    for ordinal, message in enumerate(batch, start=1):
        exchange_ord: int | None = None
        if message.role is Role.AI and message.tool_calls:
            for call in message.tool_calls:
                if call.id in local or call.id in answered:
                    return None
                local[call.id] = ordinal
                called.add(call.id)
            exchange_ord = ordinal
        elif message.role is Role.TOOL:
            if message.tool_call_id in local:
                exchange_ord = local.pop(message.tool_call_id)
            elif message.tool_call_id in answered or message.tool_call_id in called:
                return None
            else:
                answered.append(message.tool_call_id)
        exchange_ords.append(exchange_ord)

    n = len(batch)
    now = timezone.now()
    params: dict[str, Any] = {
        "id": conversation_id,
        "n": n,
        "humans": sum(1 for m in batch if m.role is Role.HUMAN),
        "tokens": sum(counts),
        # the leading system messages, pinned when the conversation holds only system messages
        "lead": leading_system_messages(batch),
        "answered": answered,
        "new_ids": list(local),
        "new_ords": list(local.values()),
        "strict": strict,
        "called": sorted(called),
        "counter": counter_id,
        "now": now,
    }
    # One array per column: the statement's text is the same for every batch size, so
    # neither the driver nor the server parses thousands of placeholders for a long batch.
    params.update(
        ords=list(range(1, n + 1)),
        roles=[m.role.value for m in batch],
        contents=[m.content for m in batch],
        tool_calls=[json.dumps([c.to_dict() for c in m.tool_calls]) for m in batch],
        tool_call_ids=[m.tool_call_id for m in batch],
        names=[m.name for m in batch],
        token_counts=counts,
        exchange_ords=exchange_ords,
        metadatas=[json.dumps(dict(m.metadata or {})) for m in batch],
        parts=[json.dumps([p.to_dict() for p in m.parts]) if m.parts else None for m in batch],
    )
    # Without tool calls or results the pending calls stay as they are: the plain statement
    # (the ``UPDATE`` takes the row lock itself) costs the database less to plan.
    if called or answered:
        sql = _sql_text(
            _APPEND_SQL, "batch", pin=pin_assignments(lead="%(lead)s", row="c.", last_seq="locked.last_seq")
        )
    else:
        sql = _sql_text(_PLAIN_APPEND_SQL, "plain-batch", pin=pin_assignments(lead="%(lead)s"))
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    if not returned:
        return None  # no such conversation, or a check failed: the locked path says which
    by_seq = {seq: (pk, exchange_seq) for pk, seq, exchange_seq in returned}
    base = min(by_seq) - 1
    return [
        ChatMessage(
            role=message.role,
            content=message.content,
            parts=message.parts,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=message.name,
            metadata=dict(message.metadata or {}),
            seq=base + ordinal,
            id=by_seq[base + ordinal][0],
            token_count=tokens,
        )
        for ordinal, (message, tokens) in enumerate(zip(batch, counts, strict=True), start=1)
    ]
