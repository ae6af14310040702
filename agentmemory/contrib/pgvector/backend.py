"""The ``"pgvector"`` recall backend: cosine distance computed by PostgreSQL's pgvector.

``AGENTMEMORY["RECALL_BACKEND"] = "pgvector"`` (or this class's dotted path; the old path
``agentmemory.recall.backends.PgVectorBackend`` still names it) ranks through an HNSW index
per embedding model where this app is installed and the database is PostgreSQL, and by exact
cosine (``EmbeddingBackend``) anywhere else, on the same stored vectors.

Vectors are mirrored into this app's tables by ``store_mirrored_vectors``, a receiver of
``agentmemory.signals.vectors_stored`` connected in ``PgVectorConfig.ready()``: the core
never imports this package.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from django.db.models import Model, QuerySet

from agentmemory.contrib.pgvector import indexes
from agentmemory.models import Conversation, Message
from agentmemory.recall.backends import EmbeddingBackend, EmbeddingRanking, Ranking

__all__ = [
    "PgVectorBackend",
    "PgVectorRanking",
    "copy_vectors_after_rebuild",
    "delete_blanked_vectors",
    "store_mirrored_vectors",
]


def store_mirrored_vectors(
    sender: Any,
    *,
    using: str,
    objects: Sequence[Model],
    embedding_model: str,
    vectors: Sequence[Sequence[float]],
    **kwargs: Any,
) -> None:
    """Receiver of ``vectors_stored``: where ``using`` is PostgreSQL, store the vectors just
    stored (``objects``' embeddings by ``embedding_model``) as float32 in this app's
    ``vector`` tables too, whatever backend is configured, so switching to ``"pgvector"``
    later finds every row."""
    if objects and indexes.available(using):
        indexes.store_vectors(using, objects, embedding_model, vectors)


def delete_blanked_vectors(
    sender: Any = None,
    *,
    using: str,
    conversation_ids: Sequence[int] = (),
    kept: bool = False,
    **kwargs: Any,
) -> None:
    """Receiver of ``memory_deleted``: the vectors of the messages of conversations whose
    words were erased while the conversations and their rows stay (``kept=True``:
    ``purge_conversations --blank-content``, ``PersistentChatHistory.clear``) go too, as their
    ``MessageEmbedding`` rows do. A vector encodes what the message said; the copies here
    hang on the message, which blanking keeps, so they were left behind and pgvector recall
    still ranked the blanked messages by them. A deleted message takes its vectors with it
    (the foreign key cascades), so nothing else needs this."""
    if sender is not Conversation or not kept or not conversation_ids or not indexes.available(using):
        return
    vector_model, _fk = indexes.vector_model_for(Message)
    vector_model._default_manager.using(using).filter(
        message__conversation_id__in=list(conversation_ids)
    ).delete()


def copy_vectors_after_rebuild(
    sender: Any, *, using: str, embedding_model: str, batch_size: int, write: Any, **kwargs: Any
) -> None:
    """Receiver of ``recall_index_rebuilt``: copy the vectors of ``embedding_model`` stored
    before this app was installed into its tables (``batch_size`` rows at a time), and
    report the count with ``write``, and the HNSW indexes the model's vectors lack (the
    host's migration makes them: ``manage.py pgvector_index_migration``). Nothing happens on
    a database other than PostgreSQL."""
    if indexes.available(using):
        copied = indexes.copy_stored_vectors(using, embedding_model, batch_size=batch_size)
        write(f"pgvector: {copied} vectors copied ({embedding_model})")
        for table, dimensions in indexes.missing_indexes(using, embedding_model):
            write(
                f"pgvector: no HNSW index of {embedding_model!r} ({dimensions} dimensions) on {table}, "
                f"so its searches scan the rows: `manage.py pgvector_index_migration <your_app> "
                f"--embedding-model {embedding_model!r} --dimensions {dimensions}`, then `migrate`"
            )


class PgVectorBackend(EmbeddingBackend):
    """Cosine distance computed by PostgreSQL's pgvector, through an HNSW index per embedding
    model, where ``agentmemory.contrib.pgvector`` is installed and the database is PostgreSQL;
    exact cosine (``EmbeddingBackend``) anywhere else, on the same stored vectors.

    The query orders the scope's vectors by ``vector::vector(n) <=> query`` with
    ``hnsw.iterative_scan = relaxed_order`` (pgvector 0.8), so a filtered scan keeps reading
    the index until it has ``limit`` rows of the scope; PostgreSQL's planner reads the
    scope's rows exactly instead when the scope is small (one conversation), which is both
    exact and fast there. HNSW is approximate: on a large scope a near vector can be missed
    (``HNSW_EF_SEARCH`` candidates are kept per step).
    """

    name = "pgvector"
    #: candidates kept per step of the HNSW search (pgvector's ``hnsw.ef_search``, default 40)
    HNSW_EF_SEARCH = 100

    def ranking(self, queryset: QuerySet[Any], query: str) -> Ranking:
        if not indexes.available(queryset.db):
            return EmbeddingRanking(self.embedder, queryset, query)
        return PgVectorRanking(self, queryset, query)


class PgVectorRanking:
    """pgvector's ``Ranking``: ``top`` is the index's nearest rows of the scope, and
    ``scores`` computes the distances of the rows ``ids`` in one more statement, with the
    query's vector ``top`` computed (the model is not called again)."""

    def __init__(self, backend: PgVectorBackend, queryset: QuerySet[Any], query: str) -> None:
        self.backend = backend
        self.queryset = queryset
        self.query = query
        self.query_vector: list[float] | None = None

    def _distances(self, queryset: QuerySet[Any], limit: int | None) -> list[tuple[int, float]]:
        from django.db import connections, transaction
        from django.db.models import F, Func, IntegerField
        from django.db.models.functions import Cast
        from pgvector.django import CosineDistance, VectorField

        if self.query_vector is None:
            (self.query_vector,) = self.backend.embedder.embed([self.query])
        dims = len(self.query_vector)
        vector_model, fk = indexes.vector_model_for(queryset.model)
        rows = (
            vector_model._default_manager.using(queryset.db)
            .filter(model=self.backend.embedder.model, **{f"{fk}__in": queryset.order_by().values("pk")})
            # only vectors of the query's length (the model may have given another length
            # before): the index's predicate, and no cast of a row of another length
            .alias(dims=Func(F("vector"), function="vector_dims", output_field=IntegerField()))
            .filter(dims=dims)
            .annotate(
                distance=CosineDistance(
                    Cast("vector", output_field=VectorField(dimensions=dims)), self.query_vector
                )
            )
            .values_list(f"{fk}_id", "distance")
        )
        if limit is None:
            found = list(rows.order_by())
        else:
            with transaction.atomic(using=queryset.db), connections[queryset.db].cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                    "set_config('hnsw.ef_search', %s, true)",
                    [str(self.backend.HNSW_EF_SEARCH)],
                )
                # equal distances broken by id, newest first, as full-text ranking breaks
                # equal scores: which of them the limit keeps is then never the scan's choice
                found = list(rows.order_by("distance", f"-{fk}_id")[:limit])
        ranked = [(pk, 1.0 - float(distance)) for pk, distance in found if distance is not None]
        ranked.sort(key=lambda item: (-item[1], -item[0]))
        return [(pk, score) for pk, score in ranked if score > 0]

    def top(self, limit: int) -> list[tuple[int, float]]:
        if not self.query.strip() or limit <= 0:
            return []
        return self._distances(self.queryset, limit)

    def scores(self, ids: Collection[int]) -> dict[int, float]:
        if not ids or not self.query.strip():
            return {}
        return dict(self._distances(self.queryset.filter(pk__in=list(ids)), None))
