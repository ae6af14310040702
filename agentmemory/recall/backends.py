"""Recall backends behind one protocol: full-text (default, nothing to download), embeddings
(exact cosine on any database) and hybrid (reciprocal rank fusion of the two).

A backend ranks the rows of an already scoped queryset of ``Fact`` or ``Message`` by their
relevance to a query; scoping, expiry, recency and importance are applied by the callers in
``agentmemory.recall`` and ``agentmemory.knowledge``, the same way for every backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from django.db.models import Model, QuerySet
from django.utils.module_loading import import_string

from agentmemory.recall import fulltext
from agentmemory.recall.embedders import Embedder, cosine_scores, from_bytes, numpy, to_bytes

__all__ = [
    "EmbeddingBackend",
    "FullTextBackend",
    "HybridBackend",
    "PgVectorBackend",
    "RecallBackend",
    "embedding_model_for",
    "fuse",
    "fuse_scores",
    "get_backend",
    "get_embedder",
    "mirror_vectors",
]

#: the constant of reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009)
RRF_K = 60


@runtime_checkable
class RecallBackend(Protocol):
    """Ranks rows of a scoped ``Fact`` or ``Message`` queryset against a query.

    ``rank`` returns at most ``limit`` ``(pk, relevance)`` pairs, best first; relevance is
    higher for better matches and comparable only within one call. ``index`` prepares rows
    written outside the database's own indexes (embeddings); full-text needs nothing.
    """

    name: str

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]: ...

    def index(self, objects: Sequence[Model]) -> int: ...


class FullTextBackend:
    """PostgreSQL ``tsvector`` with a GIN index, SQLite FTS5 (see ``recall.fulltext``)."""

    name = "fulltext"

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        return fulltext.search(queryset, query, limit)

    def index(self, objects: Sequence[Model]) -> int:
        return 0  # the database maintains the full-text index in the writing transaction


def embedding_model_for(model: type[Model]) -> tuple[type[Model], str]:
    """The embedding model class and its foreign key name for ``Fact`` or ``Message``."""
    from agentmemory.models import Fact, FactEmbedding, Message, MessageEmbedding

    if issubclass(model, Fact):
        return FactEmbedding, "fact"
    if issubclass(model, Message):
        return MessageEmbedding, "message"
    raise TypeError(f"no embeddings for {model.__name__}")


class EmbeddingBackend:
    """Exact cosine similarity between the query's vector and the stored vectors of the rows
    (one query reads the vectors of the scoped rows; numpy does the arithmetic). Rows without
    a vector of this embedder's model are not found until indexed."""

    name = "embedding"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        if not query.strip() or limit <= 0:
            return []
        emb_model, fk = embedding_model_for(queryset.model)
        rows = list(
            emb_model._default_manager.using(queryset.db)
            .filter(model=self.embedder.model, **{f"{fk}__in": queryset.values("pk")})
            .values_list(f"{fk}_id", "vector")
        )
        if not rows:
            return []
        ids = [pk for pk, _ in rows]
        xp = numpy()
        matrix = xp.vstack([from_bytes(vector) for _, vector in rows])
        (query_vector,) = self.embedder.embed([query])
        scores = cosine_scores(query_vector, matrix)
        order = xp.argsort(-scores, kind="stable")[:limit]
        return [(ids[i], float(scores[i])) for i in order if scores[i] > 0]

    def vectors_for(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embedder.embed(list(texts))

    def index(self, objects: Sequence[Model]) -> int:
        """Store vectors for ``objects`` (facts or messages) that have none of this model yet;
        returns how many were stored. Calls the embedding model: keep it off the request
        path (``agentmemory.tasks`` runs it in a Celery task when a broker is configured)."""
        objects = [o for o in objects if getattr(o, "content", None)]
        if not objects:
            return 0
        emb_model, fk = embedding_model_for(type(objects[0]))
        db = objects[0]._state.db or "default"
        have = set(
            emb_model._default_manager.using(db)
            .filter(model=self.embedder.model, **{f"{fk}__in": [o.pk for o in objects]})
            .values_list(f"{fk}_id", flat=True)
        )
        todo = [o for o in objects if o.pk not in have]
        if not todo:
            return 0
        with _billed_to(todo):
            vectors = self.embedder.embed([o.content for o in todo])  # type: ignore[attr-defined]
        emb_model._default_manager.using(db).bulk_create(
            [
                emb_model(
                    **{fk: o, "model": self.embedder.model, "dimensions": len(v), "vector": to_bytes(v)}
                )
                for o, v in zip(todo, vectors, strict=True)
            ],
            ignore_conflicts=True,
        )
        mirror_vectors(db, todo, self.embedder.model, vectors)
        return len(todo)


def mirror_vectors(
    using: str, objects: Sequence[Model], embedding_model: str, vectors: Sequence[Sequence[float]]
) -> None:
    """Where ``agentmemory.contrib.pgvector`` is installed and ``using`` is PostgreSQL, store
    the vectors just stored as float32 bytes in its ``vector`` tables too (whatever backend
    is configured, so switching to ``"pgvector"`` later finds every row)."""
    from agentmemory.contrib.pgvector import indexes

    if objects and indexes.available(using):
        indexes.store_vectors(using, objects, embedding_model, vectors)


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

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        from agentmemory.contrib.pgvector import indexes

        if not indexes.available(queryset.db):
            return super().rank(queryset, query, limit)
        if not query.strip() or limit <= 0:
            return []
        from django.db import connections, transaction
        from django.db.models.functions import Cast
        from pgvector.django import CosineDistance, VectorField

        vector_model, fk = indexes.vector_model_for(queryset.model)
        (query_vector,) = self.embedder.embed([query])
        dims = len(query_vector)
        rows = (
            vector_model._default_manager.using(queryset.db)
            .filter(model=self.embedder.model, **{f"{fk}__in": queryset.order_by().values("pk")})
            .annotate(
                distance=CosineDistance(
                    Cast("vector", output_field=VectorField(dimensions=dims)), query_vector
                )
            )
            .order_by("distance")
            .values_list(f"{fk}_id", "distance")[:limit]
        )
        with transaction.atomic(using=queryset.db), connections[queryset.db].cursor() as cursor:
            cursor.execute(
                "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                "set_config('hnsw.ef_search', %s, true)",
                [str(self.HNSW_EF_SEARCH)],
            )
            found = list(rows)
        ranked = [(pk, 1.0 - float(distance)) for pk, distance in found if distance is not None]
        ranked.sort(key=lambda item: (-item[1], -item[0]))
        return [(pk, score) for pk, score in ranked if score > 0]


class HybridBackend:
    """Full-text and embeddings fused. The default, ``fusion="scores"``, adds each row's
    full-text relevance scaled to the best full-text hit (0..1) to ``dense_weight`` times its
    cosine similarity (negative similarities count 0); a row missing from one list gets 0
    from it. ``fusion="rrf"`` is reciprocal rank fusion instead (each list gives
    ``1 / (60 + rank)``), which ignores how far apart the scores are: on the LoCoMo
    benchmark (``docs/benchmarks.md``) it fell below full-text alone (recall@10 0.567 against
    0.609), while the fused scores rose above it (0.634).

    The embedding side is ``PgVectorBackend``: pgvector's HNSW index where
    ``agentmemory.contrib.pgvector`` is installed, exact cosine elsewhere.
    """

    name = "hybrid"

    def __init__(self, embedder: Embedder, *, fusion: str = "scores", dense_weight: float = 1.0) -> None:
        if fusion not in ("scores", "rrf"):
            raise ValueError(f"fusion must be 'scores' or 'rrf', not {fusion!r}")
        self.embedder = embedder
        self.fusion = fusion
        self.dense_weight = dense_weight
        self.text = FullTextBackend()
        self.dense: EmbeddingBackend = PgVectorBackend(embedder)

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        depth = max(limit, 50)
        words = self.text.rank(queryset, query, depth)
        meaning = self.dense.rank(queryset, query, depth)
        if self.fusion == "rrf":
            return fuse([words, meaning])[:limit]
        return fuse_scores(words, meaning, dense_weight=self.dense_weight)[:limit]

    def index(self, objects: Sequence[Model]) -> int:
        return self.dense.index(objects)


def fuse_scores(
    words: Sequence[tuple[int, float]], meaning: Sequence[tuple[int, float]], *, dense_weight: float = 1.0
) -> list[tuple[int, float]]:
    """``words`` relevance scaled to its best (0..1) plus ``dense_weight`` times the cosine
    similarities of ``meaning`` (below 0 counts 0), per row; best first."""
    best = max((score for _pk, score in words), default=0.0)
    scores: dict[int, float] = {}
    if best > 0:
        for pk, score in words:
            scores[pk] = max(score, 0.0) / best
    for pk, similarity in meaning:
        scores[pk] = scores.get(pk, 0.0) + dense_weight * max(similarity, 0.0)
    return sorted(scores.items(), key=lambda item: (-item[1], -item[0]))


def fuse(rankings: Iterable[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked ``(pk, score)`` lists, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for position, (pk, _score) in enumerate(ranking, start=1):
            scores[pk] = scores.get(pk, 0.0) + 1.0 / (RRF_K + position)
    return sorted(scores.items(), key=lambda item: (-item[1], -item[0]))


def get_embedder() -> Embedder | None:
    """The embedder of ``AGENTMEMORY["EMBEDDER"]`` (a dotted path to a class or factory,
    called with ``EMBEDDER_OPTIONS``), or None when none is configured."""
    from agentmemory.conf import app_settings

    conf = app_settings()
    if not conf.EMBEDDER:
        return None
    factory = import_string(conf.EMBEDDER)
    embedder: Embedder = factory(**conf.EMBEDDER_OPTIONS)
    return embedder


def get_backend(name: str | None = None, *, embedder: Embedder | None = None) -> RecallBackend:
    """The backend named ``name`` (default ``AGENTMEMORY["RECALL_BACKEND"]``): "fulltext",
    "embedding", "pgvector", "hybrid", or a dotted path to a class taking ``embedder=``.

    Raises:
        ImproperlyConfigured: an embedding or hybrid backend without an embedder.
    """
    from django.core.exceptions import ImproperlyConfigured

    from agentmemory.conf import app_settings

    name = name or app_settings().RECALL_BACKEND
    if name == "fulltext":
        return FullTextBackend()
    embedder = embedder or get_embedder()
    if name in ("embedding", "pgvector", "hybrid"):
        if embedder is None:
            raise ImproperlyConfigured(
                f"The {name!r} recall backend needs an embedder: set AGENTMEMORY['EMBEDDER']."
            )
        if name == "embedding":
            return EmbeddingBackend(embedder)
        return PgVectorBackend(embedder) if name == "pgvector" else HybridBackend(embedder)
    backend: RecallBackend = import_string(name)(embedder=embedder)
    return backend


def _billed_to(objects: Sequence[Model]) -> Any:
    """The usage scope of an indexing request: the one conversation (messages) or owner
    (facts) all ``objects`` share, else none (the request is recorded unattributed)."""
    from agentmemory.calls import usage_scope

    conversations = {getattr(o, "conversation_id", None) for o in objects}
    owners = {getattr(o, "owner_id", None) for o in objects}
    conversation_id = conversations.pop() if len(conversations) == 1 else None
    owner_id = owners.pop() if len(owners) == 1 else None
    return usage_scope(conversation_id=conversation_id, owner_id=owner_id)
