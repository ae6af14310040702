"""PostgreSQL: the window's read statements as server-side functions, so that they are
planned once per server session even when statements are sent as text.

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
  latest such migration differ (``body`` gives the live one).
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
"""

from __future__ import annotations

import weakref
from typing import Any

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
#: The gap probe's parameters (``agentmemory.store.window.read_gap_probe``); ``pending`` is
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
#: the variants of the head statement: (with_pinned, capped)
VARIANTS = ((False, False), (False, True), (True, False), (True, True))
#: the gap probe's key (it has one variant)
GAP = ("gap",)
#: every statement that is a function: the head's variants and the gap probe
KEYS: tuple[tuple[Any, ...], ...] = (*VARIANTS, GAP)
#: prefix of every function's name
PREFIX = "agentmemory_window_"

#: what each psycopg connection found: {key: function exists}
_known: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _params(key: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    return GAP_PARAMS if key == GAP else HEAD_PARAMS


def code(key: tuple[Any, ...]) -> str:
    """The code of the function of ``key`` in its name: ``head_`` then ``p``/``n`` (pinned
    prompt read or not) and ``c``/``u`` (tool results capped or not), or ``gap``."""
    if key == GAP:
        return "gap"
    with_pinned, capped = key
    return "head_" + ("p" if with_pinned else "n") + ("c" if capped else "u")


def name(key: tuple[Any, ...]) -> str:
    """The function's name: ``agentmemory_window_`` and its ``code``."""
    return f"{PREFIX}{code(key)}"


def signature(key: tuple[Any, ...]) -> str:
    """The function's name with its argument types, as ``to_regprocedure()`` and ``DROP
    FUNCTION`` take it."""
    return f"{name(key)}({','.join(kind for _, kind in _params(key))})"


def names() -> list[str]:
    """The signatures of the five functions the read path calls (the head statement's four
    variants and the gap probe)."""
    return [signature(key) for key in KEYS]


def body(alias: str, key: tuple[Any, ...]) -> str:
    """The statement the function of ``key`` should return, as this version writes it for
    ``alias``, with its parameters written ``$1``, ``$2`` ... in the order of the function's
    arguments: the text a migration freezes when it creates the function.

    Raises:
        ValueError: the statement has a parameter the function does not take.
    """
    from agentmemory.store.window import _gap_probe_sql, _head_sql

    if key == GAP:
        sql = _gap_probe_sql(alias, pending=0, pending_array=True)
    else:
        with_pinned, capped = key
        sql = _head_sql(alias, with_pinned=with_pinned, capped=capped)
    for position, (param, _) in enumerate(_params(key), start=1):
        sql = sql.replace(f"%({param})s", f"${position}")
    if "%(" in sql or "%s" in sql:  # a parameter this module does not know
        raise ValueError(f"the {code(key)} statement has a parameter its function does not take")
    return sql


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
