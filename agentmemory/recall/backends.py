"""Recall backends behind one protocol: full-text (default, nothing to download), embeddings
(exact cosine on any database) and hybrid (reciprocal rank fusion of the two).

A backend ranks the rows of an already scoped queryset of ``Fact`` or ``Message`` by their
relevance to a query; scoping, expiry, recency and importance are applied by the callers in
``agentmemory.recall`` and ``agentmemory.knowledge``, the same way for every backend.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from django.db import transaction
from django.db.models import Model, QuerySet
from django.utils.module_loading import import_string

from agentmemory import signals
from agentmemory.recall import fulltext
from agentmemory.recall.embedders import Embedder, cosine_scores, from_bytes, numpy, to_bytes

__all__ = [
    "EmbeddingBackend",
    "FullTextBackend",
    "HybridBackend",
    "Ranking",
    "RecallBackend",
    "embedding_model_for",
    "fuse",
    "fuse_scores",
    "get_backend",
    "get_embedder",
    "mirror_vectors",
    "ranking_for",
]

#: where the ``"pgvector"`` backend lives (``agentmemory.contrib.pgvector``)
PGVECTOR_BACKEND = "agentmemory.contrib.pgvector.backend.PgVectorBackend"
#: names this module still answers for, from where they moved (``__getattr__``)
_MOVED = {
    "PgVectorBackend": PGVECTOR_BACKEND,
    "PgVectorRanking": "agentmemory.contrib.pgvector.backend.PgVectorRanking",
}


def __getattr__(name: str) -> Any:
    """``PgVectorBackend`` (and its ranking) live in ``agentmemory.contrib.pgvector.backend``;
    this module's old names, and settings strings naming them, keep working, imported on
    first use so that the core never imports the integration when it loads."""
    if name in _MOVED:
        return import_string(_MOVED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


class Ranking(Protocol):
    """One query ranked over one scoped queryset, for callers that need more than the best
    candidates: ``top(limit)`` is ``rank(queryset, query, limit)``, and ``scores(ids)`` gives
    the relevance of other rows of the same queryset on the same scale (a row that does not
    match counts 0 and is left out). Built by a backend's optional ``ranking(queryset,
    query)``; ``ranking_for`` adapts a backend that has only ``rank``. ``top`` is called
    first and once."""

    def top(self, limit: int) -> list[tuple[int, float]]: ...

    def scores(self, ids: Collection[int]) -> dict[int, float]: ...


class RankOnly:
    """The ``Ranking`` of a backend that has only ``rank``: ``scores(ids)`` ranks the rows
    ``ids`` alone, which is on the scale of ``top`` where a row's relevance does not depend on
    the other rows ranked (cosine similarity does; a backend whose relevance depends on the
    scope's statistics should build its own ``Ranking``)."""

    def __init__(self, backend: RecallBackend, queryset: QuerySet[Any], query: str) -> None:
        self.backend = backend
        self.queryset = queryset
        self.query = query

    def top(self, limit: int) -> list[tuple[int, float]]:
        return self.backend.rank(self.queryset, self.query, limit)

    def scores(self, ids: Collection[int]) -> dict[int, float]:
        if not ids:
            return {}
        return dict(self.backend.rank(self.queryset.filter(pk__in=list(ids)), self.query, len(ids)))


def ranking_for(backend: RecallBackend, queryset: QuerySet[Any], query: str) -> Ranking:
    """``backend.ranking(queryset, query)`` where the backend has it, else ``RankOnly``."""
    make = getattr(backend, "ranking", None)
    if make is not None:
        ranking: Ranking = make(queryset, query)
        return ranking
    return RankOnly(backend, queryset, query)


class FullTextRanking:
    """Full-text ``Ranking``: ``top`` keeps the scores of the scope's best
    ``fulltext.PG_MAX_MATCHES`` matches (its one statement computes them all anyway), so
    ``scores`` is a lookup, and a row beyond them counts 0. On another database, ``scores``
    ranks the rows ``ids`` in one more statement."""

    def __init__(self, queryset: QuerySet[Any], query: str) -> None:
        from django.db import connections

        self.queryset = queryset
        self.query = query
        self.known: dict[int, float] | None = None
        self.complete = connections[queryset.db].vendor in ("postgresql", "sqlite")
        #: ``{pk: (conversation_id, seq)}`` of the ranked messages where the ranking
        #: statement gave them (PostgreSQL), else empty
        self.places: dict[int, tuple[int, int]] = {}
        #: a message's score is raised by up to this share for the score of its passage
        #: (``fulltext.passage_scores`` over every candidate, where the database gives it:
        #: PostgreSQL and SQLite), scaled to the best passage's; 0: not (the default)
        self.passage_weight = 0.0
        #: ``{pk: passage score}`` of the candidates, once ``top`` ran with a weight
        self.passages: dict[int, float] = {}
        #: the ids of ``queryset`` as a ``compiled.Scope`` (its SQL compiled once), or None
        self.scope: Any = None

    def top(self, limit: int) -> list[tuple[int, float]]:
        if self.complete:
            passages: dict[int, float] | None = {} if self.passage_weight else None
            every = fulltext.search(
                self.queryset,
                self.query,
                fulltext.PG_MAX_MATCHES,
                places=self.places,
                passages=passages,
                scope=self.scope,
            )
            if passages:
                self.passages = passages
                every = _weighted(every, passages, self.passage_weight)
            self.known = dict(every)
            return every[:limit]
        return fulltext.search(self.queryset, self.query, limit)

    def scores(self, ids: Collection[int]) -> dict[int, float]:
        if not ids:
            return {}
        if self.known is not None:
            return {pk: self.known[pk] for pk in ids if pk in self.known}
        return dict(fulltext.search(self.queryset.filter(pk__in=list(ids)), self.query, len(ids)))


def _weighted(
    ranked: list[tuple[int, float]], passages: dict[int, float], weight: float
) -> list[tuple[int, float]]:
    """``ranked`` with each score times ``1 + weight * p / best``, ``p`` the row's passage
    score (0 for a row without one, found by a substring match only), re-sorted best first,
    then the newest (highest id)."""
    scale = weight / (max(passages.values()) or 1.0)
    get = passages.get
    scored = sorted([(-score * (1.0 + scale * get(pk, 0.0)), -pk) for pk, score in ranked])
    return [(-pk, -score) for score, pk in scored]


class FullTextBackend:
    """PostgreSQL ``tsvector`` with a GIN index, SQLite FTS5 (see ``recall.fulltext``)."""

    name = "fulltext"

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        return fulltext.search(queryset, query, limit)

    def ranking(self, queryset: QuerySet[Any], query: str) -> Ranking:
        return FullTextRanking(queryset, query)

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


class EmbeddingRanking:
    """Exact cosine ``Ranking``: ``top`` reads every vector of the scope and computes every
    similarity, so ``scores`` is a lookup (rows without a vector, or with a similarity of 0
    or below, are left out)."""

    def __init__(self, embedder: Embedder, queryset: QuerySet[Any], query: str) -> None:
        self.embedder = embedder
        self.queryset = queryset
        self.query = query
        self.similarities: tuple[list[int], Any] = ([], None)

    def top(self, limit: int) -> list[tuple[int, float]]:
        if not self.query.strip() or limit <= 0:
            return []
        emb_model, fk = embedding_model_for(self.queryset.model)
        rows = list(
            emb_model._default_manager.using(self.queryset.db)
            .filter(model=self.embedder.model, **{f"{fk}__in": self.queryset.values("pk")})
            .values_list(f"{fk}_id", "vector")
        )
        if not rows:
            return []
        (query_vector,) = self.embedder.embed([self.query])
        # Only vectors of the query's length compare: the same model name with another
        # length (its ``dimensions`` option changed) failed in the arithmetic (ValueError)
        # until ``rebuild_recall_index`` replaced them.
        size = 4 * len(query_vector)
        rows = [(pk, vector) for pk, vector in rows if len(vector) == size]
        if not rows:
            return []
        ids = [pk for pk, _ in rows]
        xp = numpy()
        matrix = xp.vstack([from_bytes(vector) for _, vector in rows])
        scores = cosine_scores(query_vector, matrix)
        self.similarities = (ids, scores)
        order = xp.argsort(-scores, kind="stable")[:limit]
        return [(ids[i], float(scores[i])) for i in order if scores[i] > 0]

    def scores(self, ids: Collection[int]) -> dict[int, float]:
        wanted = set(ids)
        found, similarities = self.similarities
        positions = [i for i, pk in enumerate(found) if pk in wanted]
        return {found[i]: float(similarities[i]) for i in positions if similarities[i] > 0}


class EmbeddingBackend:
    """Exact cosine similarity between the query's vector and the stored vectors of the rows
    (one query reads the vectors of the scoped rows; numpy does the arithmetic). Rows without
    a vector of this embedder's model are not found until indexed."""

    name = "embedding"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._size: int | None = None

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        return self.ranking(queryset, query).top(limit)

    def ranking(self, queryset: QuerySet[Any], query: str) -> Ranking:
        return EmbeddingRanking(self.embedder, queryset, query)

    def vectors_for(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embedder.embed(list(texts))

    def _dimensions(self) -> int:
        """The length of the embedder's vectors, asked of the model once per backend (only
        when ``index`` finds every row already embedded and has no new vector to tell)."""
        if self._size is None:
            (vector,) = self.embedder.embed(["dimensions"])
            self._size = len(vector)
        return self._size

    def index(self, objects: Sequence[Model]) -> int:
        """Store vectors for ``objects`` (facts or messages) that have none of this model yet;
        returns how many were stored. Calls the embedding model: keep it off the request
        path (``agentmemory.tasks`` runs it in a Celery task when a broker is configured)."""
        objects = [o for o in objects if getattr(o, "content", None)]
        if not objects:
            return 0
        emb_model, fk = embedding_model_for(type(objects[0]))
        db = objects[0]._state.db or "default"
        have = dict(
            emb_model._default_manager.using(db)
            .filter(model=self.embedder.model, **{f"{fk}__in": [o.pk for o in objects]})
            .values_list(f"{fk}_id", "dimensions")
        )
        todo = [o for o in objects if o.pk not in have]
        vectors: list[list[float]] = []
        if todo:
            with _billed_to(todo):
                vectors = self.embedder.embed([o.content for o in todo])  # type: ignore[attr-defined]
        # Vectors of this model name with a length the model no longer gives (its
        # ``dimensions`` option changed) are replaced: reads skip them.
        size = len(vectors[0]) if vectors else self._dimensions() if have else 0
        stale = [o for o in objects if have.get(o.pk, size) != size]
        if stale:
            with _billed_to(stale):
                vectors += self.embedder.embed([o.content for o in stale])  # type: ignore[attr-defined]
            todo += stale
        if not todo:
            return 0
        # One transaction, after the model calls: a process killed between the vectors and
        # their copies (``mirror_vectors``) left vectors that the redelivered task skipped
        # (they exist) and copies that were never made.
        with transaction.atomic(using=db):
            if stale:
                emb_model._default_manager.using(db).filter(
                    model=self.embedder.model, **{f"{fk}__in": [o.pk for o in stale]}
                ).delete()
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
    """Announce vectors just stored for ``objects`` on ``using`` (``vectors_stored``), so that
    an integration that keeps its own copy (``agentmemory.contrib.pgvector`` stores them in its
    ``vector`` tables on PostgreSQL) stores them too, whatever backend is configured."""
    if objects:
        signals.vectors_stored.send(
            sender=EmbeddingBackend,
            using=using,
            objects=objects,
            embedding_model=embedding_model,
            vectors=vectors,
        )


class HybridBackend:
    """Full-text and embeddings fused. The default, ``fusion="scores"``, adds each row's
    full-text relevance scaled to the best full-text hit (0..1) to ``dense_weight`` times its
    cosine similarity (negative similarities count 0); a row missing from one list gets 0
    from it. ``fusion="rrf"`` is reciprocal rank fusion instead (each list gives
    ``1 / (60 + rank)``), which ignores how far apart the scores are: on the LoCoMo
    benchmark (``docs/benchmarks.md``) it fell below full-text alone (recall@10 0.567 against
    0.609), while the fused scores rose above it (0.634).

    The embedding side is ``agentmemory.contrib.pgvector.backend.PgVectorBackend``: pgvector's
    HNSW index where ``agentmemory.contrib.pgvector`` is installed, exact cosine elsewhere.
    """

    name = "hybrid"

    def __init__(self, embedder: Embedder, *, fusion: str = "scores", dense_weight: float = 1.0) -> None:
        if fusion not in ("scores", "rrf"):
            raise ValueError(f"fusion must be 'scores' or 'rrf', not {fusion!r}")
        self.embedder = embedder
        self.fusion = fusion
        self.dense_weight = dense_weight
        self.text = FullTextBackend()
        # looked up by name: the core does not import the integration when it loads
        self.dense: EmbeddingBackend = import_string(PGVECTOR_BACKEND)(embedder)

    def rank(self, queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
        return self.ranking(queryset, query).top(limit)

    def ranking(self, queryset: QuerySet[Any], query: str) -> Ranking:
        return HybridRanking(self, queryset, query)

    def index(self, objects: Sequence[Model]) -> int:
        return self.dense.index(objects)


class HybridRanking:
    """The hybrid backend's ``Ranking``: ``top`` fuses the two sides' best ``max(limit, 50)``
    rows; ``scores`` fuses the two sides' ``scores`` of the rows ``ids`` the same way, with
    full-text relevance scaled to the best full-text hit of ``top``. With ``fusion="rrf"``
    a row outside both sides' lists has no rank, so ``scores`` leaves it out."""

    def __init__(self, backend: HybridBackend, queryset: QuerySet[Any], query: str) -> None:
        self.backend = backend
        self.text = ranking_for(backend.text, queryset, query)
        self.dense = ranking_for(backend.dense, queryset, query)
        self.best_text = 0.0
        self.known: dict[int, float] = {}

    def top(self, limit: int) -> list[tuple[int, float]]:
        depth = max(limit, 50)
        words = self.text.top(depth)
        meaning = self.dense.top(depth)
        self.best_text = max((score for _pk, score in words), default=0.0)
        if self.backend.fusion == "rrf":
            self.known = dict(fuse([words, meaning]))
            return list(self.known.items())[:limit]
        return fuse_scores(words, meaning, dense_weight=self.backend.dense_weight)[:limit]

    def scores(self, ids: Collection[int]) -> dict[int, float]:
        if self.backend.fusion == "rrf":
            return {pk: self.known[pk] for pk in ids if pk in self.known}
        words = self.text.scores(ids)
        meaning = self.dense.scores(ids)
        return dict(
            fuse_scores(
                list(words.items()),
                list(meaning.items()),
                dense_weight=self.backend.dense_weight,
                best=self.best_text,
            )
        )


def fuse_scores(
    words: Sequence[tuple[int, float]],
    meaning: Sequence[tuple[int, float]],
    *,
    dense_weight: float = 1.0,
    best: float | None = None,
) -> list[tuple[int, float]]:
    """``words`` relevance scaled to its best (0..1; or to ``best`` when given) plus
    ``dense_weight`` times the cosine similarities of ``meaning`` (below 0 counts 0), per
    row; best first."""
    if best is None:
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
        if name == "pgvector":
            # The integration depends on the core, never the reverse: looked up by name.
            pgvector_backend: RecallBackend = import_string(PGVECTOR_BACKEND)(embedder)
            return pgvector_backend
        return HybridBackend(embedder)
    backend: RecallBackend = import_string(name)(embedder=embedder)
    return backend


def _billed_to(objects: Sequence[Model]) -> Any:
    """The usage scope of an indexing request: the one conversation (messages) or owner
    (facts) all ``objects`` share, else none (the request is recorded unattributed)."""
    from agentmemory.recording import usage_scope

    conversations = {getattr(o, "conversation_id", None) for o in objects}
    owners = {getattr(o, "owner_id", None) for o in objects}
    conversation_id = conversations.pop() if len(conversations) == 1 else None
    owner_id = owners.pop() if len(owners) == 1 else None
    return usage_scope(conversation_id=conversation_id, owner_id=owner_id)
