"""HNSW indexes and vector rows of ``agentmemory.contrib.pgvector``.

A ``vector`` column without a fixed length cannot carry an HNSW index itself; each embedding
model gets a partial expression index instead, the layout pgvector's README gives for
vectors of several lengths in one column::

    CREATE INDEX ... ON agentmemory_pgvector_factvector
        USING hnsw ((vector::vector(384)) vector_cosine_ops) WITH (m = 16, ef_construction = 64)
        WHERE model = 'all-MiniLM-L6-v2-int8' AND vector_dims(vector) = 384

A query uses it when it orders by ``vector::vector(384) <=> query`` with ``model = ...`` and
``vector_dims(vector) = 384`` in its filter, which is what ``PgVectorBackend`` sends. The
length is part of the predicate because one model name can give vectors of another length
(the ``dimensions`` option of OpenAI's text-embedding-3 models): rows of the old length
would make the cast fail, in the index build and in a scan.

The embedding model and its length are the host's choice, so the indexes are made by a
migration the host generates into one of its own apps (``manage.py pgvector_index_migration
<app_label>``, which writes ``index_migration`` out) and runs with ``migrate``: DDL in a
migration, never at request time. Without its index a model's vectors are still searched,
exactly, by a scan of its rows; ``rebuild_recall_index`` names the indexes that are missing
(``missing_indexes``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from django.apps import apps
from django.db import connections, models

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "TABLES",
    "available",
    "create_index_sql",
    "hnsw_index_name",
    "index_migration",
    "missing_indexes",
    "vector_model_for",
]

#: pgvector's defaults, written out so the index definition says what it is
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
#: the vector tables, by the kind in their indexes' names
TABLES = {"fact": "agentmemory_pgvector_factvector", "msg": "agentmemory_pgvector_messagevector"}


def available(using: str) -> bool:
    """Whether pgvector search can run on database ``using``: this app is installed and the
    database is PostgreSQL (its migration created the ``vector`` extension there)."""
    return apps.is_installed("agentmemory.contrib.pgvector") and connections[using].vendor == "postgresql"


def vector_model_for(model: type[models.Model]) -> tuple[type[models.Model], str]:
    """The vector model and its foreign key name for ``Fact`` or ``Message``."""
    from agentmemory.contrib.pgvector.models import FactVector, MessageVector
    from agentmemory.models import Fact, Message

    if issubclass(model, Fact):
        return FactVector, "fact"
    if issubclass(model, Message):
        return MessageVector, "message"
    raise TypeError(f"no vectors for {model.__name__}")


def hnsw_index_name(kind: str, embedding_model: str, dimensions: int) -> str:
    """A stable name (under PostgreSQL's 63 characters) for one model's index on the table
    of ``kind`` (``"fact"`` or ``"msg"``, the keys of ``TABLES``)."""
    digest = hashlib.sha256(f"{embedding_model}\x00{dimensions}".encode()).hexdigest()[:10]
    return f"agentmemory_pgv_{kind}_hnsw_{int(dimensions)}_{digest}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_index_sql(kind: str, embedding_model: str, dimensions: int) -> str:
    """``CREATE INDEX`` of ``embedding_model``'s HNSW index on the table of ``kind``, in
    PostgreSQL's SQL (the module's doc shows one).

    Raises:
        ValueError: ``dimensions`` is not between 1 and 2,000 (pgvector indexes at most
            2,000 dimensions of ``vector``), or ``embedding_model`` is empty or holds a NUL.
    """
    dimensions = int(dimensions)
    if not 1 <= dimensions <= 2000:
        raise ValueError(f"an HNSW index of vector takes 1 to 2,000 dimensions, not {dimensions}")
    if not embedding_model or "\x00" in embedding_model:
        raise ValueError("the embedding model's name must be non-empty text without NUL")
    # Written out rather than built from HnswIndex(OpClass(Cast(...))): Django wraps such an
    # index element in parentheses together with its operator class, which PostgreSQL refuses.
    name = hnsw_index_name(kind, embedding_model, dimensions)
    return (
        f'CREATE INDEX IF NOT EXISTS "{name}" ON "{TABLES[kind]}" '
        f"USING hnsw ((vector::vector({dimensions})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
        f"WHERE model = {_literal(embedding_model)} AND vector_dims(vector) = {dimensions}"
    )


_MIGRATION = '''"""HNSW indexes of agentmemory's pgvector tables for the embedding model {model_text}
({dimensions} dimensions): the partial indexes ``PgVectorBackend``'s query uses
(``agentmemory.contrib.pgvector.indexes``). Written by ``manage.py pgvector_index_migration``;
the SQL is held here, so the migration runs the same whatever release is installed.
PostgreSQL only; on a large table the build takes a while and blocks writes to it."""

from django.db import migrations

CREATE = {create}
DROP = {drop}


def create_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in CREATE:
            schema_editor.execute(sql, params=None)


def drop_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql in DROP:
            schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):
    dependencies = {dependencies}

    operations = [
        migrations.RunPython(create_indexes, drop_indexes, elidable=False),
    ]
'''


def index_migration(
    embedding_model: str, dimensions: int, *, dependencies: Sequence[tuple[str, str]] = ()
) -> str:
    """The text of a migration module that creates the HNSW indexes of ``embedding_model``'s
    vectors of ``dimensions`` on both vector tables (and drops them going back), after
    ``agentmemory_pgvector``'s first migration and ``dependencies`` (the host app's latest
    migration). It imports nothing but Django.

    Raises:
        ValueError: as ``create_index_sql``.
    """
    create = [create_index_sql(kind, embedding_model, dimensions) for kind in TABLES]
    drop = [f'DROP INDEX IF EXISTS "{hnsw_index_name(kind, embedding_model, dimensions)}"' for kind in TABLES]

    def listing(statements: list[str]) -> str:
        return "[\n" + "".join(f"    {sql!r},\n" for sql in statements) + "]"

    return _MIGRATION.format(
        model_text=repr(embedding_model),
        dimensions=int(dimensions),
        create=listing(create),
        drop=listing(drop),
        dependencies=repr([("agentmemory_pgvector", "0001_initial"), *dependencies]),
    )


def missing_indexes(using: str, embedding_model: str) -> list[tuple[str, int]]:
    """``(table, dimensions)`` of the stored vectors of ``embedding_model`` on ``using`` that
    have no HNSW index (a search of them scans their rows). Runs one statement per table."""
    missing = []
    with connections[using].cursor() as cursor:
        for kind, table in TABLES.items():
            cursor.execute(
                f'SELECT DISTINCT vector_dims(vector) FROM "{table}" WHERE model = %s ORDER BY 1',
                [embedding_model],
            )
            for (dimensions,) in cursor.fetchall():
                name = hnsw_index_name(kind, embedding_model, dimensions)
                cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
                if cursor.fetchone() is None:
                    missing.append((table, int(dimensions)))
    return missing


def store_vectors(
    using: str,
    objects: Sequence[models.Model],
    embedding_model: str,
    vectors: Sequence[Sequence[float]],
) -> int:
    """Store ``vectors`` (one per fact or message of ``objects``) in the vector table; rows
    already there are kept. Returns how many rows were sent. No index is made here (the
    host's migration makes them: the module's doc)."""
    if not objects:
        return 0
    vector_model, fk = vector_model_for(type(objects[0]))
    vector_model._default_manager.using(using).bulk_create(
        [
            vector_model(**{fk: obj, "model": embedding_model, "vector": list(vector)})
            for obj, vector in zip(objects, vectors, strict=True)
        ],
        ignore_conflicts=True,
    )
    return len(objects)


def copy_stored_vectors(using: str, embedding_model: str, *, batch_size: int = 1000) -> int:
    """Copy the float32 vectors of ``embedding_model`` in ``FactEmbedding`` and
    ``MessageEmbedding`` that have no row in the vector tables yet (``rebuild_recall_index``);
    returns how many rows were copied."""
    from agentmemory.models import FactEmbedding, MessageEmbedding
    from agentmemory.recall.embedders import from_bytes

    copied = 0
    for emb_model, fk in ((FactEmbedding, "fact"), (MessageEmbedding, "message")):
        vector_model, _fk = vector_model_for(emb_model._meta.get_field(fk).related_model)  # type: ignore[arg-type]
        have = vector_model._default_manager.using(using).filter(model=embedding_model)
        missing = (
            emb_model._default_manager.using(using)
            .filter(model=embedding_model)
            .exclude(**{f"{fk}_id__in": have.values(f"{fk}_id")})
            .order_by("pk")
        )
        last = 0
        while batch := list(missing.filter(pk__gt=last).values_list("pk", f"{fk}_id", "vector")[:batch_size]):
            last = batch[-1][0]
            vector_model._default_manager.using(using).bulk_create(
                [
                    vector_model(**{f"{fk}_id": obj_id, "model": embedding_model, "vector": from_bytes(data)})
                    for _pk, obj_id, data in batch
                ],
                ignore_conflicts=True,
            )
            copied += len(batch)
    return copied
