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
installed as such a function (the head statement once per variant: with or without the
pinned prompt, with or without a cap on tool results), and the read path calls them.

* The functions are installed after every ``migrate`` (a ``post_migrate`` receiver), on each
  PostgreSQL database that the routers let agentmemory migrate, from the statement text of
  the installed agentmemory version. The name carries a hash of the body
  (``agentmemory_window_<statement>_<hash>``): a version whose statement changed calls a
  function of its own, never an older body. Older versions' functions are left in place, so
  that processes still running the previous release during a deployment keep working; they
  are small, and ``DROP FUNCTION`` removes them. A migration that changes the type of a
  column a statement returns leaves its text, so the name, as it was: ``migrate`` then
  makes that function again with the new result types.
* The statement in a function is the one sent as text otherwise, with the parameters in the
  same places, so both return the same rows (``tests/test_head_function.py`` checks it).
* Whether the functions exist is learned on each connection with no query of its own: the
  first head statement a connection sends as text carries one more ``UNION ALL`` branch that
  returns a row when ``to_regprocedure()`` finds both its function and the gap probe's and
  the session's role has ``EXECUTE`` on them. Until then, and where they are missing
  (``migrate`` not run since the upgrade, ``pytest --nomigrations`` with another
  PostgreSQL) or not callable (default privileges that revoke ``EXECUTE`` from ``PUBLIC``),
  the statements are sent as text, as before. A connection on which a function fails with
  "does not exist", "permission denied" or "structure of query does not match function
  result type" sends all the statements as text from then on.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from typing import Any

from django.db import DatabaseError, connections, router, transaction

logger = logging.getLogger(__name__)

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
#: every statement installed as a function: the head's variants and the gap probe
KEYS: tuple[tuple[Any, ...], ...] = (*VARIANTS, GAP)
#: prefix of every function's name
PREFIX = "agentmemory_window_"

_bodies: dict[tuple[Any, ...], tuple[str, str]] = {}
#: what each psycopg connection found: {key: function exists}
_known: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], bool]] = weakref.WeakKeyDictionary()


def _params(key: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    return GAP_PARAMS if key == GAP else HEAD_PARAMS


def _code(key: tuple[Any, ...]) -> str:
    if key == GAP:
        return "gap"
    with_pinned, capped = key
    return "head_" + ("p" if with_pinned else "n") + ("c" if capped else "u")


def _text(alias: str, key: tuple[Any, ...]) -> str:
    from agentmemory.store.window import _gap_probe_sql, _head_sql

    if key == GAP:
        return _gap_probe_sql(alias, pending=0, pending_array=True)
    with_pinned, capped = key
    return _head_sql(alias, with_pinned=with_pinned, capped=capped)


def body(alias: str, key: tuple[Any, ...]) -> tuple[str, str]:
    """``(name, body)`` of the function of ``key`` (a head variant ``(with_pinned,
    capped)`` or ``GAP``): its name and the statement it returns, the statement of
    ``alias`` with its parameters written ``$1``, ``$2`` ... in the order of its
    parameter list."""
    cached = _bodies.get((alias, *key))
    if cached is not None:
        return cached
    sql = _text(alias, key)
    params = _params(key)
    for position, (name, _) in enumerate(params, start=1):
        sql = sql.replace(f"%({name})s", f"${position}")
    if "%(" in sql or "%s" in sql:  # a parameter this module does not know
        raise ValueError(f"the {_code(key)} statement has a parameter its function does not take")
    types = ",".join(kind for _, kind in params)
    digest = hashlib.sha256(f"{types}\n{sql}".encode()).hexdigest()[:12]
    cached = _bodies[(alias, *key)] = (f"{PREFIX}{_code(key)}_{digest}", sql)
    return cached


def signature(alias: str, key: tuple[Any, ...]) -> str:
    """The function's name with its argument types, as ``to_regprocedure()`` takes it."""
    name, _ = body(alias, key)
    return f"{name}({','.join(kind for _, kind in _params(key))})"


_calls: dict[tuple[Any, ...], str] = {}


def call_sql(alias: str, key: tuple[Any, ...]) -> str:
    """The statement that calls the function, with the statement's named parameters (made
    once per alias and key: it is sent for every window)."""
    cached = _calls.get((alias, *key))
    if cached is None:
        name, _ = body(alias, key)
        arguments = ", ".join(f"%({param})s::{kind}" for param, kind in _params(key))
        cached = _calls[(alias, *key)] = f"SELECT * FROM {name}({arguments})"
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


def _result_types(cursor: Any, sql: str, params: tuple[tuple[str, str], ...]) -> list[str]:
    """The SQL type of each column of ``sql`` (its parameters ``$1`` ... NULL), as
    PostgreSQL resolves the ``UNION ALL``: the function must declare exactly these."""
    nulls = sql
    for position in range(len(params), 0, -1):
        nulls = nulls.replace(f"${position}", f"NULL::{params[position - 1][1]}")
    cursor.execute(f"SELECT * FROM ({nulls}) head LIMIT 0")
    oids = [column.type_code for column in cursor.description]
    cursor.execute(
        "SELECT format_type(oid, NULL) FROM unnest(%s::oid[]) WITH ORDINALITY AS t(oid, n) ORDER BY n",
        [oids],
    )
    return [row[0] for row in cursor.fetchall()]


def install(alias: str, *, check_types: bool = True) -> list[str]:
    """Create the functions of the installed version on ``alias`` where they are missing,
    and (``check_types``) again where one returns columns of other types than the tables
    give now (a migration changed a column's type); returns the names created. Nothing
    happens on a database other than PostgreSQL, or one that the routers do not let
    agentmemory migrate.

    Raises:
        django.db.DatabaseError: the tables are not in the shape this version reads (a
            migration not applied yet); ``install_after_migrate`` skips such a database.
    """
    from agentmemory.models import Message

    connection = connections[alias]
    if connection.vendor != "postgresql" or not router.allow_migrate_model(alias, Message):
        return []
    created = []
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        signatures = [signature(alias, key) for key in KEYS]
        cursor.execute(
            "SELECT pg_get_function_result(to_regprocedure(f)) "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t(f, n) ORDER BY n",
            [signatures],
        )
        results = [row[0] for row in cursor.fetchall()]
        for key, function, result in zip(KEYS, signatures, results, strict=True):
            if result is not None and not check_types:
                continue
            name, sql = body(alias, key)
            params = _params(key)
            columns = ", ".join(f"c{i} {kind}" for i, kind in enumerate(_result_types(cursor, sql, params)))
            if result == f"TABLE({columns})":
                continue
            if result is not None:
                # The name is that of the statement's text; a migration that changed the
                # type of a column it returns leaves a function that fails on every call
                # ("structure of query does not match function result type"), and the
                # result type of a function cannot be replaced: made again.
                cursor.execute(f"DROP FUNCTION {function}")
            arguments = ", ".join(kind for _, kind in params)
            # STABLE: the function only reads, within the snapshot of the statement calling it.
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS TABLE ({columns}) "
                f"LANGUAGE plpgsql STABLE AS $agentmemory$ BEGIN RETURN QUERY {sql}; END $agentmemory$"
            )
            created.append(name)
    return created


def names(alias: str) -> list[str]:
    """The signatures of the functions this version calls on ``alias`` (five: the head
    statement's four variants, ``head_pu``, ``head_pc``, ``head_nu`` and ``head_nc`` for
    with/without the pinned prompt and capped/uncapped tool results, and ``gap``), as
    ``DROP FUNCTION`` and ``to_regprocedure()`` take them. Any other
    ``agentmemory_window_...`` function on the database is an earlier version's."""
    return [signature(alias, key) for key in KEYS]


def uninstall(alias: str) -> list[str]:
    """Drop every ``agentmemory_window_...`` function, of any version, from the schemas on
    ``alias``'s search path (``migrate agentmemory zero`` does, through migration 0021);
    returns the signatures dropped. Nothing happens on a database other than PostgreSQL."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "WHERE p.proname LIKE %s AND p.pronamespace = ANY(current_schemas(false)::regnamespace[])",
            [PREFIX.replace("_", r"\_") + "%"],
        )
        dropped = [row[0] for row in cursor.fetchall()]
        for function in dropped:
            cursor.execute(f"DROP FUNCTION IF EXISTS {function}")
    return dropped


def install_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate`` receiver: install the functions on ``using`` (see the module's doc).
    A database whose agentmemory tables are not at this version's shape (a migration run
    backwards) is skipped: the statements are then sent as text. The result types of the
    functions already there are checked when migrations ran (``plan``), not after a
    ``flush`` (which sends ``post_migrate`` too, after every ``TransactionTestCase``):
    that takes planning each statement once more."""
    if getattr(sender, "name", None) != "agentmemory":
        return
    try:
        created = install(using, check_types=bool(kwargs.get("plan")))
    except DatabaseError as exc:
        logger.warning(
            "agentmemory: window read functions not installed on %r (the statements are sent as text): %s",
            using,
            exc,
        )
        return
    if created:
        logger.debug("agentmemory: installed %s on %r", ", ".join(created), using)
