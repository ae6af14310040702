"""Rebuilding ``agentmemory_message`` as a hash-partitioned table and back (PostgreSQL).

Kept beside the migration that runs it (a module whose name starts with "_" is not a
migration to Django): a migration imports no live app code, so what it does cannot change
under an install that already ran it.

Both directions work the same way, inside one transaction (PostgreSQL's DDL is
transactional: a failure anywhere leaves the table as it was):

1. ``LOCK TABLE agentmemory_message IN EXCLUSIVE MODE``: reads go on, writes (appends,
   compaction's bookkeeping is on other tables) wait until the commit.
2. The definitions of its constraints and indexes are read from the catalogs, then the table,
   its indexes and its id sequence are renamed out of the way.
3. A new table of the same columns (``CREATE TABLE ... (LIKE ... INCLUDING ALL but the
   indexes)``: defaults, check constraints, the generated ``search_vector`` column, the
   identity column) is made, partitioned or not, and every row is copied in one
   ``INSERT ... SELECT`` (PostgreSQL routes each row to its partition; the generated
   full-text column is computed again, which is most of the copy's cost).
4. The constraints and indexes are made again under their own names, so later migrations
   find them: the primary key becomes ``(id, conversation_id)`` on the partitioned table
   (PostgreSQL requires every unique constraint of a partitioned table to hold the partition
   key) and ``(id)`` again on the plain one; the unique ``(conversation_id, seq)``, the
   orphan index and the full-text GIN index are unchanged (on the partitioned table each is a
   partitioned index, one per partition).
5. The id sequence continues where the old one stopped; the old table is dropped; the table
   is analysed.

Foreign keys that point at messages (``Fact.source_message``, ``MessageEmbedding.message``,
``ModelCall.message``, ``contrib.pgvector``'s ``MessageVector.message``) cannot stay: a
foreign key must reference a unique constraint, and on the partitioned table none holds
``id`` alone. They are dropped on the way in; Django still applies their ``on_delete``
(``SET_NULL``, ``CASCADE``) when messages are deleted through the ORM, which every delete in
agentmemory is. On the way back they are made again, after references to messages that no
longer exist are settled as their ``on_delete`` says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction

TABLE = "agentmemory_message"
#: the partition key: every read and write of the app names one conversation
KEY = "conversation_id"
#: the old table while its rows are copied
OLD_TABLE = "agentmemory_message_rebuilt"
#: allowed numbers of partitions (one partition is the plain table with extra steps; past a
#: few hundred, planning and locking costs grow with the count, see PostgreSQL's
#: "Partitioning Best Practices", ddl-partitioning.html)
MIN_PARTITIONS, MAX_PARTITIONS = 2, 1024
#: partitions when ``AGENTMEMORY_PARTITIONS`` is not set
DEFAULT_PARTITIONS = 16


class PartitioningError(Exception):
    """The layout cannot be changed: not PostgreSQL, a bad partition count, or a unique
    constraint or index without ``conversation_id`` (a partitioned table cannot hold one)."""


@dataclass(frozen=True)
class LayoutChange:
    """What a rebuild did: ``partitions`` (0: the plain table), ``rows`` copied, ``seconds``
    the transaction took up to the commit, and the foreign keys dropped (``table.name``) or
    made again."""

    partitions: int
    rows: int
    seconds: float
    foreign_keys: tuple[str, ...]


def partition_name(index: int) -> str:
    """The table of hash partition ``index`` (``agentmemory_message_p0`` and on)."""
    return f"{TABLE}_p{index}"


def require_postgresql(connection: Any) -> None:
    """Raise ``PartitioningError`` unless ``connection`` is PostgreSQL."""
    if connection.vendor != "postgresql":
        raise PartitioningError(
            f"agentmemory.contrib.partitioning needs PostgreSQL; database {connection.alias!r} is "
            f"{connection.vendor}. Remove the app from INSTALLED_APPS or route agentmemory's "
            "models to a PostgreSQL database."
        )


def check_partitions(value: Any) -> int:
    """``value`` as a partition count, or ``PartitioningError``: an integer from
    ``MIN_PARTITIONS`` to ``MAX_PARTITIONS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PARTITIONS <= value <= MAX_PARTITIONS:
        raise PartitioningError(
            f"AGENTMEMORY_PARTITIONS must be an integer from {MIN_PARTITIONS} to {MAX_PARTITIONS}, "
            f"not {value!r}"
        )
    return value


def partitions(connection: Any) -> int:
    """How many hash partitions ``agentmemory_message`` has on ``connection``: 0 for the plain
    table (or none at all, or another database)."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relkind, (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid) "
            "FROM pg_class c WHERE c.oid = to_regclass(%s)",
            [TABLE],
        )
        row = cursor.fetchone()
    return int(row[1]) if row and row[0] == "p" else 0


def partition_messages(
    connection: Any, count: int, *, log: Callable[[str], None] | None = None
) -> LayoutChange:
    """Rebuild ``agentmemory_message`` on ``connection`` as ``count`` hash partitions by
    ``conversation_id``, with every row (see the module's docstring). A no-op when it is
    partitioned already (a different ``count`` needs ``unpartition_messages`` first).

    Raises ``PartitioningError`` (not PostgreSQL, ``count`` out of range, a unique
    constraint or index without ``conversation_id``)."""
    require_postgresql(connection)
    check_partitions(count)
    if partitions(connection):
        return LayoutChange(partitions(connection), 0, 0.0, ())
    return _rebuild(connection, count, log=log)


def unpartition_messages(
    connection: Any,
    *,
    message_model: Any = None,
    schema_editor: Any = None,
    log: Callable[[str], None] | None = None,
) -> LayoutChange:
    """Rebuild the plain ``agentmemory_message`` from the partitioned one, with every row, and
    make the foreign keys to it again (``message_model``: the ``Message`` model whose
    referring fields to use, default the installed one; migrations pass their historical
    one, and their ``schema_editor``). A no-op when it is not partitioned. Raises
    ``PartitioningError`` on a database other than PostgreSQL."""
    require_postgresql(connection)
    if not partitions(connection):
        return LayoutChange(0, 0, 0.0, ())
    return _rebuild(connection, 0, message_model=message_model, schema_editor=schema_editor, log=log)


def _rebuild(
    connection: Any,
    count: int,
    *,
    message_model: Any = None,
    schema_editor: Any = None,
    log: Callable[[str], None] | None = None,
) -> LayoutChange:
    say = log or (lambda _line: None)
    started = time.perf_counter()
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")
        # deferred foreign key checks still pending in this transaction are made now: a table
        # with pending trigger events cannot be altered
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        constraints = _constraints(cursor)
        indexes = _indexes(cursor)
        if count:
            _require_key(constraints, indexes)
        incoming = _incoming_foreign_keys(cursor)
        sequence = _sequence(cursor)

        for table, name in incoming:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        cursor.execute(f"ALTER TABLE {TABLE} RENAME TO {OLD_TABLE}")
        for number, name in enumerate(_index_names(cursor, OLD_TABLE)):
            cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{OLD_TABLE}_{number}"')
        if sequence:
            cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {OLD_TABLE}_id_seq")

        how = f" PARTITION BY HASH ({KEY})" if count else ""
        cursor.execute(
            f"CREATE TABLE {TABLE} (LIKE {OLD_TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            f"INCLUDING GENERATED INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMMENTS){how}"
        )
        for remainder in range(count):
            cursor.execute(
                f"CREATE TABLE {partition_name(remainder)} PARTITION OF {TABLE} "
                f"FOR VALUES WITH (MODULUS {count}, REMAINDER {remainder})"
            )
        columns = ", ".join(_copied_columns(cursor))
        say(f"copying the rows into {f'{count} partitions' if count else 'the plain table'}")
        cursor.execute(
            f"INSERT INTO {TABLE} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {OLD_TABLE}"
        )
        rows = cursor.rowcount
        if sequence:
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), last_value, is_called) "
                f"FROM {OLD_TABLE}_id_seq",
                [TABLE],
            )

        say("making the constraints and indexes again")
        for name, kind, definition in constraints:
            if kind == "p":
                definition = f"PRIMARY KEY (id, {KEY})" if count else "PRIMARY KEY (id)"
            cursor.execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{name}" {definition}')
        for _name, definition in indexes:
            cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
        if count:
            _name_partition_indexes(cursor)
        cursor.execute(f"DROP TABLE {OLD_TABLE}")
        made: list[str] = []
        if not count:
            if schema_editor is None:
                with connection.schema_editor(atomic=False) as editor:
                    made = _restore_foreign_keys(editor, cursor, message_model)
            else:
                made = _restore_foreign_keys(schema_editor, cursor, message_model)
        cursor.execute(f"ANALYZE {TABLE}")
    seconds = time.perf_counter() - started
    dropped = tuple(f"{table}.{name}" for table, name in incoming)
    return LayoutChange(count, rows, seconds, dropped or tuple(made))


def _name_partition_indexes(cursor: Any) -> None:
    """Name each partition's index after the table's (``agentmemory_msg_fts_idx_p3``) rather
    than PostgreSQL's ``agentmemory_message_p3_search_vector_idx``: plans then say which of
    agentmemory's indexes they use."""
    cursor.execute(
        "SELECT parent.relname, child.relname, tbl.relname FROM pg_inherits i "
        "JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_class child ON child.oid = i.inhrelid "
        "JOIN pg_index x ON x.indexrelid = child.oid JOIN pg_class tbl ON tbl.oid = x.indrelid "
        "JOIN pg_index p ON p.indexrelid = parent.oid WHERE p.indrelid = %s::regclass",
        [TABLE],
    )
    for parent, child, table in cursor.fetchall():
        suffix = table[len(TABLE) + 1 :]
        cursor.execute(f'ALTER INDEX "{child}" RENAME TO "{parent[: 62 - len(suffix)]}_{suffix}"')


def _constraints(cursor: Any) -> list[tuple[str, str, str]]:
    """(name, kind, definition) of the table's primary key, unique, exclusion and foreign key
    constraints (check constraints travel with ``LIKE ... INCLUDING CONSTRAINTS``)."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'x', 'f') "
        "ORDER BY contype = 'f', conname",
        [TABLE],
    )
    return [(name, kind, definition) for name, kind, definition in cursor.fetchall()]


def _indexes(cursor: Any) -> list[tuple[str, str]]:
    """(name, ``CREATE INDEX`` statement) of the table's indexes that back no constraint.

    PostgreSQL sets no storage parameter on a partitioned index (``ALTER INDEX ... SET``
    refuses one), so a migration that changes one sets each partition's index instead
    (agentmemory's 0031); the statement of a partitioned index takes the parameters of its
    first partition's, so that they survive going back to the plain table."""
    cursor.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), c.relkind = 'I', "
        "(SELECT array_to_string(l.reloptions, ', ') FROM pg_partition_tree(i.indexrelid) t "
        "JOIN pg_class l ON l.oid = t.relid WHERE t.isleaf ORDER BY l.relname LIMIT 1) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid "
        "AND k.conrelid = i.indrelid) ORDER BY c.relname",
        [TABLE],
    )
    return [
        (name, _with_options(definition, options) if partitioned else definition)
        for name, definition, partitioned, options in cursor.fetchall()
    ]


def _with_options(definition: str, options: str | None) -> str:
    """``definition`` (``pg_get_indexdef``) with its ``WITH (...)`` storage parameters
    replaced by ``options`` (``"fastupdate=on, gin_pending_list_limit=64"``; none: none)."""
    clause = f" WITH ({options})" if options else ""
    start = definition.find(" WITH (")
    if start >= 0:
        return definition[:start] + clause + definition[definition.index(")", start) + 1 :]
    where = definition.find(" WHERE ")
    return definition + clause if where < 0 else definition[:where] + clause + definition[where:]


def _index_names(cursor: Any, table: str) -> list[str]:
    cursor.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass ORDER BY c.relname",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _require_key(constraints: Iterable[tuple[str, str, str]], indexes: Iterable[tuple[str, str]]) -> None:
    """A partitioned table's unique constraints and unique indexes must hold the partition
    key (PostgreSQL refuses them otherwise); say which one does not, before changing
    anything."""
    for name, kind, definition in constraints:
        if kind in ("u", "x") and KEY not in definition:
            raise PartitioningError(
                f"constraint {name} ({definition}) does not include {KEY}: a partitioned table "
                "cannot enforce it"
            )
    for name, definition in indexes:
        if definition.startswith("CREATE UNIQUE") and KEY not in definition:
            raise PartitioningError(
                f"unique index {name} does not include {KEY}: a partitioned table cannot enforce it"
            )


def _incoming_foreign_keys(cursor: Any) -> list[tuple[str, str]]:
    """(table, constraint name) of the foreign keys of other tables that point at messages."""
    cursor.execute(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
        "WHERE contype = 'f' AND confrelid = %s::regclass AND conrelid <> confrelid "
        "AND conparentid = 0 ORDER BY 1, 2",
        [TABLE],
    )
    return [(table, name) for table, name in cursor.fetchall()]


def _sequence(cursor: Any) -> str | None:
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [TABLE])
    row = cursor.fetchone()
    return row[0] if row else None


def _copied_columns(cursor: Any) -> list[str]:
    """The columns a row is copied with: all but generated ones (computed again)."""
    cursor.execute(
        "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
        [OLD_TABLE],
    )
    return [row[0] for row in cursor.fetchall()]


def _referring_fields(message_model: Any) -> list[tuple[Any, Any]]:
    """(model, field) of every concrete foreign key with a database constraint to
    ``message_model``, in the registry the model belongs to."""
    found = []
    for model in message_model._meta.apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        for field in model._meta.local_fields:
            if (
                field.is_relation
                and field.many_to_one
                and field.db_constraint
                and field.related_model is message_model
            ):
                found.append((model, field))
    return found


def _restore_foreign_keys(editor: Any, cursor: Any, message_model: Any) -> list[str]:
    """Make the foreign keys to messages again, after settling references to messages that
    no longer exist the way their ``on_delete`` says (``SET_NULL``: emptied; ``CASCADE``:
    the referring row is deleted). Any other ``on_delete`` with such references raises
    ``PartitioningError`` (nothing is changed: the transaction rolls back)."""
    if message_model is None:
        from agentmemory.models import Message

        message_model = Message
    made = []
    for model, field in _referring_fields(message_model):
        table, column = model._meta.db_table, field.column
        dangling = (
            f"{column} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {TABLE} m WHERE m.id = {table}.{column})"
        )
        on_delete = field.remote_field.on_delete
        if on_delete is models.SET_NULL:
            cursor.execute(f"UPDATE {table} SET {column} = NULL WHERE {dangling}")
        elif on_delete is models.CASCADE:
            cursor.execute(f"DELETE FROM {table} WHERE {dangling}")
        else:
            cursor.execute(f"SELECT count(*) FROM {table} WHERE {dangling}")
            if cursor.fetchone()[0]:
                raise PartitioningError(
                    f"{table}.{column} refers to messages that no longer exist and its on_delete "
                    "is neither SET_NULL nor CASCADE: settle those rows first"
                )
        editor.execute(editor._create_fk_sql(model, field, "_fk_%(to_table)s_%(to_column)s"))
        made.append(f"{table}.{column}")
    return made


def configured_partitions() -> Any:
    """``settings.AGENTMEMORY_PARTITIONS``, or ``DEFAULT_PARTITIONS`` when unset (not checked:
    ``check_partitions`` does that)."""
    from django.conf import settings

    return getattr(settings, "AGENTMEMORY_PARTITIONS", DEFAULT_PARTITIONS)
