"""PostgreSQL: the window's head statement as a server-side function, so that it is planned
once per server session even when statements are sent as text.

The head statement (``agentmemory.context.sql._head_sql``: the conversation row, its summary,
its pinned system prompt and the newest page of messages) runs for every model call.
PostgreSQL parses and plans a statement sent as text on every execution, and for this one
planning takes about as long as running it. Django sends statements as text unless the
project turns prepared statements on (``agentmemory.db``), and prepared statements are unsafe
behind a transaction pooler (PgBouncer in transaction mode), where names a client prepared
reach other clients' server sessions.

A PL/pgSQL function keeps its statements' plans in the server session that runs it
(PostgreSQL's plan cache, the same as for a prepared statement: custom plans for the first
five calls, then a generic plan when it costs no more), and nothing about it lives on the
client: a pooler may hand each transaction to any server session. So the head statement is
installed as such a function, one per variant (with or without the pinned prompt, with or
without a cap on tool results), and ``read_head`` calls it.

* The functions are installed after every ``migrate`` (a ``post_migrate`` receiver), on each
  PostgreSQL database that the routers let agentmemory migrate, from the statement text of
  the installed agentmemory version. The name carries a hash of the body
  (``agentmemory_window_head_<variant>_<hash>``): a version whose statement changed calls a
  function of its own, never an older body. Older versions' functions are left in place, so
  that processes still running the previous release during a deployment keep working; they
  are small, and ``DROP FUNCTION`` removes them.
* The statement in the function is the one ``read_head`` sends as text otherwise, with the
  parameters in the same places, so both return the same rows (``tests/test_head_function.py``
  checks it).
* Whether the function exists is learned on each connection with no query of its own: the
  first head statement a connection sends as text carries one more ``UNION ALL`` branch that
  returns a row when ``to_regprocedure()`` finds the function. Until then, and where it is
  missing (``migrate`` not run since the upgrade, ``pytest --nomigrations`` with another
  PostgreSQL), the statement is sent as text, as before.
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
)
#: the variants of the head statement: (with_pinned, capped)
VARIANTS = ((False, False), (False, True), (True, False), (True, True))
#: prefix of every head function's name
PREFIX = "agentmemory_window_head_"

_bodies: dict[tuple[str, bool, bool], tuple[str, str]] = {}
#: what each psycopg connection found: {variant: function exists}
_known: weakref.WeakKeyDictionary[Any, dict[tuple[bool, bool], bool]] = weakref.WeakKeyDictionary()


def _variant_code(with_pinned: bool, capped: bool) -> str:
    return ("p" if with_pinned else "n") + ("c" if capped else "u")


def body(alias: str, *, with_pinned: bool, capped: bool) -> tuple[str, str]:
    """``(name, body)``: the function's name and the statement it returns, the head
    statement of ``alias`` with its parameters written ``$1`` ... ``$8`` in the order of
    ``HEAD_PARAMS``."""
    key = (alias, with_pinned, capped)
    cached = _bodies.get(key)
    if cached is not None:
        return cached
    from agentmemory.context.sql import _head_sql

    sql = _head_sql(alias, with_pinned=with_pinned, capped=capped)
    for position, (name, _) in enumerate(HEAD_PARAMS, start=1):
        sql = sql.replace(f"%({name})s", f"${position}")
    if "%(" in sql or "%s" in sql:  # a parameter this module does not know
        raise ValueError("the head statement has a parameter the function does not take")
    signature = ",".join(kind for _, kind in HEAD_PARAMS)
    digest = hashlib.sha256(f"{signature}\n{sql}".encode()).hexdigest()[:12]
    cached = _bodies[key] = (f"{PREFIX}{_variant_code(with_pinned, capped)}_{digest}", sql)
    return cached


def signature(alias: str, *, with_pinned: bool, capped: bool) -> str:
    """The function's name with its argument types, as ``to_regprocedure()`` takes it."""
    name, _ = body(alias, with_pinned=with_pinned, capped=capped)
    return f"{name}({','.join(kind for _, kind in HEAD_PARAMS)})"


def call_sql(alias: str, *, with_pinned: bool, capped: bool) -> str:
    """The statement that calls the function, with the head statement's named parameters."""
    name, _ = body(alias, with_pinned=with_pinned, capped=capped)
    arguments = ", ".join(f"%({param})s::{kind}" for param, kind in HEAD_PARAMS)
    return f"SELECT * FROM {name}({arguments})"


def known(raw_connection: Any, with_pinned: bool, capped: bool) -> bool | None:
    """Whether the function of this variant exists, as found on this psycopg connection
    (``None``: not asked yet)."""
    found = _known.get(raw_connection)
    return None if found is None else found.get((with_pinned, capped))


def remember(raw_connection: Any, with_pinned: bool, capped: bool, exists: bool) -> None:
    """Record what a head statement found about the function on this connection."""
    found = _known.get(raw_connection)
    if found is None:
        found = _known[raw_connection] = {}
    found[(with_pinned, capped)] = exists


def _result_types(cursor: Any, sql: str) -> list[str]:
    """The SQL type of each column of ``sql`` (its parameters ``$1`` ... NULL), as
    PostgreSQL resolves the ``UNION ALL``: the function must declare exactly these."""
    nulls = sql
    for position in range(len(HEAD_PARAMS), 0, -1):
        nulls = nulls.replace(f"${position}", f"NULL::{HEAD_PARAMS[position - 1][1]}")
    cursor.execute(f"SELECT * FROM ({nulls}) head LIMIT 0")
    oids = [column.type_code for column in cursor.description]
    cursor.execute(
        "SELECT format_type(oid, NULL) FROM unnest(%s::oid[]) WITH ORDINALITY AS t(oid, n) ORDER BY n",
        [oids],
    )
    return [row[0] for row in cursor.fetchall()]


def install(alias: str) -> list[str]:
    """Create the head functions of the installed version on ``alias`` where they are
    missing; returns the names created. Nothing happens on a database other than
    PostgreSQL, or one that the routers do not let agentmemory migrate.

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
        for with_pinned, capped in VARIANTS:
            name, sql = body(alias, with_pinned=with_pinned, capped=capped)
            cursor.execute(
                "SELECT to_regprocedure(%s) IS NOT NULL",
                [signature(alias, with_pinned=with_pinned, capped=capped)],
            )
            if cursor.fetchone()[0]:
                continue
            columns = ", ".join(f"c{i} {kind}" for i, kind in enumerate(_result_types(cursor, sql)))
            arguments = ", ".join(kind for _, kind in HEAD_PARAMS)
            # STABLE: the function only reads, within the snapshot of the statement calling it.
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {name}({arguments}) RETURNS TABLE ({columns}) "
                f"LANGUAGE plpgsql STABLE AS $agentmemory$ BEGIN RETURN QUERY {sql}; END $agentmemory$"
            )
            created.append(name)
    return created


def install_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """``post_migrate`` receiver: install the head functions on ``using`` (see the module's
    doc). A database whose agentmemory tables are not at this version's shape (a migration
    run backwards) is skipped: the head statement is then sent as text."""
    if getattr(sender, "name", None) != "agentmemory":
        return
    try:
        created = install(using)
    except DatabaseError as exc:
        logger.info("agentmemory: window head functions not installed on %r: %s", using, exc)
        return
    if created:
        logger.debug("agentmemory: installed %s on %r", ", ".join(created), using)
