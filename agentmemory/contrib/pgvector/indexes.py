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
would make the cast fail, in the index build and in a scan. The index is created the first time
vectors of a model are stored (``ensure_hnsw_index``; ``rebuild_recall_index`` does it too).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from django.apps import apps
from django.db import connections, models

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_M",
    "available",
    "ensure_hnsw_index",
    "hnsw_index_name",
    "vector_model_for",
]

#: pgvector's defaults, written out so the index definition says what it is
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64

_known_indexes: set[tuple[str, str, str, int]] = set()


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


def hnsw_index_name(vector_model: type[models.Model], embedding_model: str, dimensions: int) -> str:
    """A stable name (under PostgreSQL's 63 characters) for one model's index on one table."""
    digest = hashlib.sha256(f"{embedding_model}\x00{dimensions}".encode()).hexdigest()[:10]
    kind = "fact" if vector_model.__name__ == "FactVector" else "msg"
    return f"agentmemory_pgv_{kind}_hnsw_{dimensions}_{digest}"


def _create_index_sql(
    editor: Any, vector_model: type[models.Model], embedding_model: str, dimensions: int
) -> str:
    # Written out rather than built from HnswIndex(OpClass(Cast(...))): Django wraps such an
    # index element in parentheses together with its operator class, which PostgreSQL refuses.
    name = hnsw_index_name(vector_model, embedding_model, dimensions)
    return (
        f"CREATE INDEX IF NOT EXISTS {editor.quote_name(name)} "
        f"ON {editor.quote_name(vector_model._meta.db_table)} "
        f"USING hnsw ((vector::vector({int(dimensions)})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
        f"WHERE model = {editor.quote_value(embedding_model)} AND vector_dims(vector) = {int(dimensions)}"
    )


def ensure_hnsw_index(
    using: str, vector_model: type[models.Model], embedding_model: str, dimensions: int
) -> bool:
    """Create the HNSW index of ``embedding_model``'s vectors on ``vector_model``'s table
    unless it exists; returns True when it was created. Building it over many existing rows
    takes a while (pgvector builds faster with a larger ``maintenance_work_mem``)."""
    key = (using, vector_model._meta.db_table, embedding_model, dimensions)
    if key in _known_indexes:
        return False
    name = hnsw_index_name(vector_model, embedding_model, dimensions)
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
        exists = cursor.fetchone() is not None
    if not exists:
        with connection.schema_editor() as editor:
            # Rows written to the table earlier in this transaction leave their deferred
            # foreign-key checks pending, and PostgreSQL refuses CREATE INDEX on a table with
            # pending trigger events: run the checks now (they would run at commit anyway),
            # then defer again (Django makes its foreign keys INITIALLY DEFERRED).
            editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            editor.execute(_create_index_sql(editor, vector_model, embedding_model, dimensions))
            editor.execute("SET CONSTRAINTS ALL DEFERRED")
    if not connection.in_atomic_block:  # remembered once it can no longer be rolled back
        _known_indexes.add(key)
    return not exists


def store_vectors(
    using: str,
    objects: Sequence[models.Model],
    embedding_model: str,
    vectors: Sequence[Sequence[float]],
) -> int:
    """Store ``vectors`` (one per fact or message of ``objects``) in the vector table, after
    making sure the model's HNSW index exists; rows already there are kept. Returns how many
    rows were sent."""
    if not objects:
        return 0
    vector_model, fk = vector_model_for(type(objects[0]))
    ensure_hnsw_index(using, vector_model, embedding_model, len(vectors[0]))
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
            ensure_hnsw_index(using, vector_model, embedding_model, len(from_bytes(batch[0][2])))
            vector_model._default_manager.using(using).bulk_create(
                [
                    vector_model(**{f"{fk}_id": obj_id, "model": embedding_model, "vector": from_bytes(data)})
                    for _pk, obj_id, data in batch
                ],
                ignore_conflicts=True,
            )
            copied += len(batch)
    return copied
