"""Cursors for the statements agentmemory runs on every model call, prepared once per
database connection on PostgreSQL.

Building a context window and appending one message run the same few statements each time
with other values. PostgreSQL parses and plans a statement sent as text on every execution,
and for the window's head statement (the conversation row, its summary, its pinned prompt
and the newest page of messages) that is more than half of the database's work. A prepared
statement is parsed once per connection and, after five executions, run on a generic plan
that PostgreSQL keeps (``plan_cache_mode``), so a worker or a persistent web connection
(``CONN_MAX_AGE``) pays for planning once. A statement is prepared on its second execution on a connection:
preparing takes a round trip of its own, which a connection that runs it once would not
win back. With prepared statements off, the head statement is planned once per server
session all the same, through a server-side function (``agentmemory.store.functions``).

``statement_cursor(alias)`` gives such a cursor on PostgreSQL with psycopg 3 (the parameters
are bound on the server and statements are prepared with psycopg's ``prepare=True``), and
Django's ordinary cursor everywhere else. Either way it is Django's cursor wrapper: queries
are logged under ``DEBUG``, counted by ``CaptureQueriesContext`` and
``django_assert_num_queries``, pass through ``connection.execute_wrapper()`` hooks, and
raise Django's database errors.

Whether statements are prepared is the operator's choice, as it is for Django's own: a
transaction pooler (PgBouncer in transaction mode before 1.21 or without
``max_prepared_statements``, and other poolers that share server sessions between clients)
hands a client's next transaction to another server session, where the statement names a
client prepared are unknown, taken by another client's statements, or, worst, name another
client's statement with the same parameters, which then runs with this client's values (a
system prompt stored as a human message). Nothing on the client can tell that a pooler sits
in between, so Django opens psycopg 3 connections with prepared statements off
(``prepare_threshold=None``, "to keep connection poolers working") and this module follows it.
Statements are prepared when:

* ``AGENTMEMORY["PREPARED_STATEMENTS"]`` is ``None`` (the default) and the database's
  ``OPTIONS`` set ``prepare_threshold`` to a number (Django's way of turning psycopg's
  prepared statements back on), or it is ``True``;
* and the database's settings do not turn them off the way Django's documentation describes
  for a transaction pooler: ``DISABLE_SERVER_SIDE_CURSORS = True``, or
  ``OPTIONS["prepare_threshold"] = None`` written out;
* and the driver is psycopg 3 on PostgreSQL;
* and no prepared statement was found stale on the connection (below).

A prepared statement that the server no longer knows (a pooler handed the client another
server session), whose name the server already holds for another statement (likewise), or
whose cached plan no longer returns the same columns (a migration changed a column's type
while the connection stayed open) fails once. From then on nothing more is prepared on that
connection (a new connection prepares again). Outside a transaction the failed statement is
run again as text, so the caller sees nothing; inside one the error is raised, as any
database error is, and the transaction must be rolled back.
"""

from __future__ import annotations

import weakref
from typing import Any

from django.db import connections

from agentmemory.conf import app_settings

#: ``prepare_threshold`` given, for the time of one of this module's statements, to a
#: connection Django opened with prepared statements off (Django's default, ``None``):
#: psycopg then prepares the statement executed with ``prepare=True`` and never another.
#: It goes back to ``None`` after: with a threshold set, psycopg keeps the text of each of
#: the last 100 statements run on the connection to count them, and Django's statements
#: carry their values in their text (a batch of long messages: megabytes held per
#: connection for nothing).
_EXPLICIT_ONLY = 2**31 - 1

#: SQLSTATE of "prepared statement ... does not exist"
_UNKNOWN_STATEMENT = "26000"
#: SQLSTATE of "cached plan must not change result type" (feature not supported)
_PLAN_CHANGED = "0A000"
#: SQLSTATE of "prepared statement ... already exists"
_NAME_TAKEN = "42P05"

_cursor_class: Any = None

#: psycopg connections on which a prepared statement was found stale
_unprepared: weakref.WeakSet[Any] = weakref.WeakSet()
#: the statements run once on each psycopg connection (the second run prepares them)
_executed: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class _Composed:
    """A statement with its values in place, where Django's query log looks for it."""

    __slots__ = ("query",)

    def __init__(self, text: str) -> None:
        self.query = text.encode()


def _compose(connection: Any, query: Any, params: Any) -> str:
    """``query`` with ``params`` in place as psycopg's client-side cursor writes them (for
    the query log); the statement as written when a value cannot be written so (the error
    the statement raised is the one that matters)."""
    import psycopg

    try:
        return psycopg.ClientCursor(connection).mogrify(query, params)
    except psycopg.Error:
        return str(query)


def prepares_statements(alias: str) -> bool:
    """Whether ``statement_cursor(alias)`` prepares its statements (see the module's doc)."""
    return _prepares(connections[alias], app_settings().PREPARED_STATEMENTS)


def _prepares(conn: Any, wanted: bool | None) -> bool:
    """``prepares_statements`` for the connection ``conn`` and the setting's value ``wanted``."""
    if conn.vendor != "postgresql" or wanted is False:
        return False
    settings_dict = conn.settings_dict
    if settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return False
    options = settings_dict.get("OPTIONS") or {}
    threshold = options.get("prepare_threshold")
    if "prepare_threshold" in options and threshold is None:
        return False
    if wanted is not True and (isinstance(threshold, bool) or not isinstance(threshold, int)):
        return False  # Django's default: off, to keep transaction poolers working
    return _psycopg3()


def _preparing_cursor_class() -> Any:
    """Django's server-side binding cursor for psycopg 3, executing each statement with
    ``prepare=True`` from its second execution on a connection; made on first use so that
    psycopg is imported only on PostgreSQL."""
    global _cursor_class
    if _cursor_class is None:
        import psycopg
        from django.db.backends.postgresql.base import ServerBindingCursor
        from psycopg.pq import TransactionStatus

        base: Any = ServerBindingCursor

        class PreparingCursor(base):  # type: ignore[misc]
            #: set when Django logs queries (``DEBUG``, ``CaptureQueriesContext``)
            log_queries = False

            def execute(self, query: Any, params: Any = None, *, prepare: Any = None, **kwargs: Any) -> Any:
                conn = self.connection
                if conn.prepare_threshold is not None:
                    return self._execute(query, params, **kwargs)
                conn.prepare_threshold = _EXPLICIT_ONLY
                try:
                    return self._execute(query, params, **kwargs)
                finally:
                    conn.prepare_threshold = None

            def _execute(self, query: Any, params: Any, **kwargs: Any) -> Any:
                # Prepared from its second execution on a connection: preparing costs a
                # round trip of its own, which a connection that runs the statement once
                # (a web request with CONN_MAX_AGE = 0, Django's default) would not win back.
                seen = _executed.get(self.connection)
                if seen is None:
                    seen = _executed[self.connection] = set()
                again = query in seen
                if not again:
                    seen.add(query)
                try:
                    try:
                        return super().execute(query, params, prepare=again, **kwargs)
                    except psycopg.Error as exc:
                        stale = exc.sqlstate in (_UNKNOWN_STATEMENT, _NAME_TAKEN) or (
                            exc.sqlstate == _PLAN_CHANGED
                            # plancache.c raises it; the message is in the server's language
                            and (
                                exc.diag.source_function == "RevalidateCachedQuery"
                                or "cached plan" in str(exc)
                            )
                        )
                        if not stale:
                            raise
                        # The server's statements are not what psycopg remembers: prepare
                        # nothing more on this connection.
                        _unprepared.add(self.connection)
                        if self.connection.info.transaction_status != TransactionStatus.IDLE:
                            raise
                        return super().execute(query, params, prepare=False, **kwargs)
                finally:
                    if self.log_queries:
                        # Django's query log takes the text of a query from the cursor as
                        # psycopg composed it for client-side binding: compose it so, values
                        # in place, for a statement that failed too (Django logs those).
                        self._query = _Composed(_compose(self.connection, query, params))

        _cursor_class = PreparingCursor
    return _cursor_class


class statement_cursor:
    """A Django cursor on ``alias`` whose statements are prepared on the server where
    ``prepares_statements(alias)``; ``connections[alias].cursor()`` otherwise.

    Parameters are written as for any Django cursor (``%s`` or ``%(name)s``); on PostgreSQL
    they are sent apart from the statement, so a value can only stand where SQL accepts a
    parameter (not for a table name or inside a quoted literal).

    On PostgreSQL with psycopg 3 the driver's cursor under Django's wrapper is kept on the
    connection and used again by the next ``statement_cursor`` (``_kept_cursor``): the
    statements run here take one row or a page each, on every model call and append, and
    making, setting up and closing a cursor for each cost about as much Python as binding
    its values. Django's wrapper is made for each use all the same, so the query log,
    ``execute_wrapper()`` hooks and Django's errors are as for any cursor. Used as a context
    manager (``with statement_cursor(alias) as cursor``); a class rather than a generator,
    which would cost the same again.
    """

    __slots__ = ("alias", "kept", "prepared", "wrapped")

    def __init__(self, alias: str, *, prepared: bool | None = None) -> None:
        self.alias = alias
        #: ``prepares_statements(alias)`` when the caller knows it already
        self.prepared = prepared
        self.kept: _Kept | None = None

    def __enter__(self) -> Any:
        conn = connections[self.alias]
        prepared = self.prepared
        if prepared is None:
            prepared = _prepares(conn, app_settings().PREPARED_STATEMENTS)
        if conn.vendor != "postgresql" or not _psycopg3():
            self.wrapped = conn.cursor()
            return self.wrapped
        # What ``BaseDatabaseWrapper._cursor()`` does, with a kept cursor, and for prepared
        # statements psycopg's server-side binding cursor in place of the connection's
        # client-side one.
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        raw = conn.connection
        if prepared and raw in _unprepared:
            prepared = False
        with conn.wrap_database_errors:
            kept = self.kept = _kept_cursor(conn, raw, prepared)
            cursor = kept.cursor
            if prepared:
                cursor.log_queries = conn.queries_logged
        conn.validate_thread_sharing()
        self.wrapped = conn.make_debug_cursor(cursor) if conn.queries_logged else conn.make_cursor(cursor)
        return self.wrapped

    def __exit__(self, *exc_info: Any) -> None:
        kept = self.kept
        if kept is None:
            self.wrapped.__exit__(*exc_info)  # Django's: closes its cursor
        elif kept.keep:
            # psycopg holds a statement's rows until the cursor runs the next one: a window's
            # page of long messages (megabytes) stayed alive on an idle connection, and on a
            # closed one until the thread's next statement. Its ``_reset`` is what each
            # ``execute`` starts with (and ``close`` runs).
            kept.cursor._reset()
            kept.busy = False
        else:
            self.wrapped.__exit__(*exc_info)


class _Kept:
    """A psycopg cursor kept on a Django connection (``_kept_cursor``)."""

    __slots__ = ("busy", "cursor", "keep", "raw", "timezone")

    def __init__(self, raw: Any, cursor: Any, timezone: Any, *, keep: bool) -> None:
        self.raw = raw
        self.cursor = cursor
        self.timezone = timezone
        #: kept on the connection for the next use (else closed after this one)
        self.keep = keep
        #: handed out and not given back yet
        self.busy = True


#: the attribute of a Django connection that holds its kept cursors: [plain, preparing]
_KEPT = "_agentmemory_kept_cursors"


def _kept_cursor(conn: Any, raw: Any, prepared: bool) -> _Kept:
    """The cursor ``statement_cursor`` hands out on ``conn`` (whose psycopg connection is
    ``raw``): the one kept for ``prepared`` (server-side binding) or not, made again when
    the psycopg connection or the connection's time zone changed since. A cursor in use
    (a statement run from inside another's ``execute_wrapper()`` hook) or a connection
    shared between threads (``allow_thread_sharing``), where two threads would read each
    other's rows, gets a cursor of its own, closed after it (``keep`` is ``False``)."""
    kept: list[_Kept | None] | None = conn.__dict__.get(_KEPT)
    if kept is None:
        kept = [None, None]
        conn.__dict__[_KEPT] = kept
    slot = kept[prepared]
    timezone = conn.timezone
    if (
        slot is not None
        and slot.raw is raw
        and slot.timezone is timezone
        and not slot.busy
        and not conn.allow_thread_sharing
    ):
        slot.busy = True
        return slot
    if prepared:
        cursor = _preparing_cursor_class()(raw)
        _use_connection_time_zone(conn, cursor)
    else:
        cursor = conn.create_cursor()
    keep = (slot is None or slot.raw is not raw or not slot.busy) and not conn.allow_thread_sharing
    made = _Kept(raw, cursor, timezone, keep=keep)
    if keep:
        kept[prepared] = made
    return made


def _psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def _use_connection_time_zone(conn: Any, cursor: Any) -> None:
    """Timestamps loaded in the connection's time zone, as Django's ``create_cursor`` does
    for its own cursors."""
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    tzloader = conn.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if conn.timezone != tzloader.timezone:
        register_tzloader(conn.timezone, cursor)
