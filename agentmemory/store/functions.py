"""PostgreSQL: the window's read statements and the one-message append's statements as
server-side functions, so that they are planned once per server session even when
statements are sent as text.

The head statement (``agentmemory.store.window._head_sql``: the conversation row, its summary,
its pinned system prompt and the newest page of messages) runs for every model call, and the
gap probe (``_gap_probe_sql``: what a window leaves outside itself and the summary) for most
of them. PostgreSQL parses and plans a statement sent as text on every execution, and for
these planning takes about as long as running them. Django sends statements as text unless
the project turns prepared statements on (``agentmemory.store.connection``), and prepared statements are
unsafe behind a transaction pooler (PgBouncer in transaction mode), where names a client
prepared reach other clients' server sessions.

A PL/pgSQL function keeps its statements' plans in the server session that runs it
(PostgreSQL's plan cache, the same as for a prepared statement: custom plans for the first
five calls, then a generic plan when it costs no more), and nothing about it lives on the
client: a pooler may hand each transaction to any server session. So each statement is
a function (the head statement once per variant: with or without the pinned prompt, with or
without a cap on tool results), and the read path calls them.

* A migration creates them (``agentmemory/migrations/0027_window_read_functions_in_migration.py``;
  ``0028_window_head_floor_and_gap.py`` replaces the head statement's, which took the floor as a
  ninth argument), from the statement text frozen in it, under fixed names: ``agentmemory_window_head_pu``,
  ``_head_pc``, ``_head_nu``, ``_head_nc`` and ``agentmemory_window_gap``. A release that
  changes a statement, or the type of a column one returns, ships a migration that replaces
  them; ``tests/test_head_function.py`` fails while the live statement and the text of the
  latest such migration differ (``agentmemory.store.function_sql.body`` gives the live one).
* The statement in a function is the one sent as text otherwise, with the parameters in the
  same places, so both return the same rows (``tests/test_head_function.py`` checks it).
* Whether the functions exist is learned on each connection with no query of its own: the
  first head statement a connection sends as text carries one more ``UNION ALL`` branch that
  returns a row when ``to_regprocedure()`` finds both its function and the gap probe's and
  the session's role has ``EXECUTE`` on them. Until then, and where they are missing
  (``migrate`` not run since the upgrade, ``pytest --nomigrations``) or not callable (default
  privileges that revoke ``EXECUTE`` from ``PUBLIC``), the statements are sent as text, as
  before. A connection on which a function fails with "does not exist", "permission denied"
  or "structure of query does not match function result type" sends all the statements as
  text from then on.

The one-message append (``agentmemory.store.append._run_one``) follows the same rules with
four functions of its own (``APPEND_KEYS``: ``agentmemory_append_one_system``, ``_human``,
``_ai`` and ``_calls``), created by ``0029_append_one_functions.py``
(``tests/test_append_function.py`` compares their text with
``agentmemory.store.function_sql.body``). A connection learns
whether they exist from the first one-message append it sends as text, which returns one
more column (``has_function_privilege`` over the four) beside the stored row; it learns
nothing from an append that stored no row (a check failed), and asks again with the next.
"""

from __future__ import annotations

import weakref
from typing import Any

from django.db import ProgrammingError, connections

from agentmemory.store.connection import prepares_statements, statement_cursor

#: The head statement's parameters, in the order of the function's arguments, with the
#: SQL type of each argument.
HEAD_PARAMS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("system", "text"),
    ("room", "bigint"),
    ("half", "bigint"),
    ("triple", "bigint"),
    ("max_page", "bigint"),
    ("tool", "text"),
    ("cap", "bigint"),
    ("floor", "bigint"),
)
#: The gap probe's parameters (``agentmemory.store.gap.read_gap_probe``); ``pending`` is
#: the array of the seqs of the AI messages asked about.
GAP_PARAMS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("system", "text"),
    ("summary", "bigint"),
    ("before", "bigint"),
    ("pinned", "bigint"),
    ("pinned_last", "bigint"),
    ("pending", "bigint[]"),
)
#: The one-message append's parameters without tool calls or results
#: (``agentmemory.store.append._PLAIN_APPEND_ONE_SQL``, one function per role).
PLAIN_APPEND_PARAMS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("tokens", "bigint"),
    ("now", "text"),
    ("content", "text"),
    ("name", "text"),
    ("counter", "text"),
    ("metadata", "text"),
    ("parts", "text"),
)
#: The one-message append's parameters for an AI message with tool calls or a tool result
#: (``agentmemory.store.append._APPEND_ONE_SQL``).
CALLS_APPEND_PARAMS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("tokens", "bigint"),
    ("now", "text"),
    ("role", "text"),
    ("content", "text"),
    ("tool_calls", "text"),
    ("tool_call_id", "text"),
    ("name", "text"),
    ("counter", "text"),
    ("metadata", "text"),
    ("parts", "text"),
    ("new_ids", "text"),
    ("answered", "text"),
    ("strict", "boolean"),
)
#: the variants of the head statement: (with_pinned, capped)
VARIANTS = ((False, False), (False, True), (True, False), (True, True))
#: the gap probe's key (it has one variant)
GAP = ("gap",)
#: every statement of the window's read path that is a function: the head's variants and
#: the gap probe
KEYS: tuple[tuple[Any, ...], ...] = (*VARIANTS, GAP)
#: the one-message append's statements that are functions: one per role without tool calls
#: (``system``, ``human``, ``ai``), and ``calls`` (tool calls made or answered)
APPEND_KEYS: tuple[tuple[str, str], ...] = (
    ("append", "system"),
    ("append", "human"),
    ("append", "ai"),
    ("append", "calls"),
)
#: prefix of the window's functions' names
PREFIX = "agentmemory_window_"
#: prefix of the append's functions' names
APPEND_PREFIX = "agentmemory_append_one_"

#: what each psycopg connection found: {key: function exists}
_known: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _params(key: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    if key in APPEND_KEYS:
        return CALLS_APPEND_PARAMS if key[1] == "calls" else PLAIN_APPEND_PARAMS
    return GAP_PARAMS if key == GAP else HEAD_PARAMS


def code(key: tuple[Any, ...]) -> str:
    """The code of the function of ``key`` in its name: ``head_`` then ``p``/``n`` (pinned
    prompt read or not) and ``c``/``u`` (tool results capped or not), or ``gap``; for the
    append's, its variant (``system``, ``human``, ``ai``, ``calls``)."""
    if key == GAP:
        return "gap"
    if key in APPEND_KEYS:
        return str(key[1])
    with_pinned, capped = key
    return "head_" + ("p" if with_pinned else "n") + ("c" if capped else "u")


def name(key: tuple[Any, ...]) -> str:
    """The function's name: ``agentmemory_window_`` and its ``code``
    (``agentmemory_append_one_`` and it for the append's)."""
    return f"{APPEND_PREFIX if key in APPEND_KEYS else PREFIX}{code(key)}"


def signature(key: tuple[Any, ...]) -> str:
    """The function's name with its argument types, as ``to_regprocedure()`` and ``DROP
    FUNCTION`` take it."""
    return f"{name(key)}({','.join(kind for _, kind in _params(key))})"


def names() -> list[str]:
    """The signatures of the five functions the read path calls (the head statement's four
    variants and the gap probe)."""
    return [signature(key) for key in KEYS]


def append_names() -> list[str]:
    """The signatures of the four functions the one-message append calls."""
    return [signature(key) for key in APPEND_KEYS]


_calls: dict[tuple[Any, ...], str] = {}


def call_sql(key: tuple[Any, ...]) -> str:
    """The statement that calls the function, with the statement's named parameters (made
    once per key: it is sent for every window)."""
    cached = _calls.get(key)
    if cached is None:
        arguments = ", ".join(f"%({param})s::{kind}" for param, kind in _params(key))
        cached = _calls[key] = f"SELECT * FROM {name(key)}({arguments})"
    return cached


def known(raw_connection: Any, key: tuple[Any, ...]) -> bool | None:
    """Whether the function of ``key`` exists, as found on this psycopg connection
    (``None``: not asked yet)."""
    found = _known.get(raw_connection)
    return None if found is None else found.get(key)


def remember(raw_connection: Any, key: tuple[Any, ...], exists: bool) -> None:
    """Record what a statement found about the function of ``key`` on this connection."""
    found = _known.get(raw_connection)
    if found is None:
        found = _known[raw_connection] = {}
    found[key] = exists


#: SQLSTATEs of a function the connection can no longer use, where the statement as text
#: still runs: "function ... does not exist" (dropped), "permission denied" (``EXECUTE``
#: revoked) and "structure of query does not match function result type" (a column the
#: function returns changed type under it)
UNUSABLE = frozenset({"42883", "42501", "42804"})


def unusable(exc: BaseException) -> bool:
    """Whether ``exc`` says a server-side function could not be used (SQLSTATE in
    ``UNUSABLE``): the error ``call`` raises inside a transaction, after which the connection
    sends the statement as text. A caller that rolled back to a savepoint around the call may
    run it again."""
    cause = exc.__cause__  # psycopg 3 names the code ``sqlstate``, psycopg2 ``pgcode``
    return (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) in UNUSABLE


def usable(alias: str) -> bool:
    """Whether the statements of ``alias`` may go through their server-side functions:
    PostgreSQL, with statements not prepared (a prepared statement is planned once per
    connection already, and runs without the function's own cost)."""
    return connections[alias].vendor == "postgresql" and not prepares_statements(alias)


#: the values a ``bigint`` argument takes (PostgreSQL's 64-bit integer)
_BIGINT_MIN, _BIGINT_MAX = -(2**63), 2**63 - 1


def _fits(key: tuple[Any, ...], params: dict[str, Any]) -> bool:
    """Whether every ``bigint`` argument of the function of ``key`` holds its value. A
    conversation id past that range names no row: the statement as text compares it as a
    number and finds none (``ConversationNotFound`` for the caller), where the function's
    argument would fail with "bigint out of range"."""
    for param, kind in _params(key):
        value = params.get(param)
        if kind == "bigint" and isinstance(value, int) and not _BIGINT_MIN <= value <= _BIGINT_MAX:
            return False
    return True


#: text values written into a call as SQL literals by ``literal_call``: the role names the
#: read path passes, nothing a caller's data can hold
_PLAIN_TEXT = frozenset({"system", "human", "ai", "tool"})


def literal_call(key: tuple[Any, ...], params: dict[str, Any]) -> str | None:
    """The statement that calls the function of ``key`` with ``params`` written in place as
    SQL literals, or ``None`` when a value is not one written so here: a plain ``int``
    within ``bigint`` (not a ``bool``), ``None``, or a role name (``_PLAIN_TEXT``).

    With statements sent as text, Django's psycopg cursor binds parameters on the client:
    it looks up a dumper for each, quotes it and splices it into the statement, in Python,
    on every call (about 0.04 ms of a window's build for the head statement's nine
    integers and names). The server receives the same text either way; a value of another
    kind leaves the call to the driver (``None``)."""
    parts = []
    for param, kind in _params(key):
        value = params.get(param)
        if value is None:
            parts.append(f"NULL::{kind}")
        elif type(value) is int:
            if not _BIGINT_MIN <= value <= _BIGINT_MAX:
                return None
            parts.append(f"{value}::{kind}")
        elif type(value) is str and value in _PLAIN_TEXT:
            parts.append(f"'{value}'::{kind}")
        else:
            return None
    return f"SELECT * FROM {name(key)}({', '.join(parts)})"


def call(
    alias: str, key: tuple[Any, ...], params: dict[str, Any], family: tuple[tuple[Any, ...], ...]
) -> list[Any] | None:
    """The rows of the statement of ``key`` through its server-side function on a database
    where ``usable``, or ``None`` when the connection has not found the function (or found it
    gone: dropped since, outside a transaction; inside one the error is raised, with a note),
    or a ``bigint`` argument cannot hold its value (``_fits``: the statement as text runs).
    A function found unusable marks every function of ``family`` (the window's ``KEYS`` or
    the append's ``APPEND_KEYS``) unusable on the connection: what removed one has most
    often removed them all.

    Raises:
        django.db.ProgrammingError: inside a transaction, the function could not be used
            (the transaction is aborted: roll back and retry); or any other error it raised.
    """
    conn = connections[alias]
    raw = conn.connection
    if raw is None or not known(raw, key) or not _fits(key, params):
        return None
    literal = literal_call(key, params) if key in VARIANTS else None
    with statement_cursor(alias, prepared=False) as cursor:  # ``usable``: not prepared
        try:
            if literal is None:
                cursor.execute(call_sql(key), params)
            else:
                cursor.execute(literal)
            return cursor.fetchall()  # type: ignore[no-any-return]
        except ProgrammingError as exc:
            # Dropped since (``DROP FUNCTION``, a schema restored from a dump without it),
            # ``EXECUTE`` revoked, or a column it returns changed type: back to the
            # statement as text, which outside a transaction runs now.
            if not unusable(exc):
                raise
            # Inside a transaction each would cost a failed statement of its own.
            for other in family:
                remember(raw, other, False)
            if not conn.get_autocommit() or conn.in_atomic_block:
                # PostgreSQL's hint (explicit type casts) points the wrong way here.
                exc.add_note(
                    f"agentmemory: the server-side function {name(key)} could not be used "
                    "inside this transaction (dropped, EXECUTE revoked, or a column type "
                    "changed since the connection found it); roll back and retry: this "
                    "connection sends the statement as text from now on "
                    "(agentmemory.store.functions)."
                )
                raise
            return None
