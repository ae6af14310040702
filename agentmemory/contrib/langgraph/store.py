"""``DjangoStore``: LangGraph's long-term memory store (``BaseStore``) on Django models.

Items are JSON documents under a namespace (a tuple of labels) and a key, as LangGraph's
``BaseStore`` defines them; ``DjangoStore`` answers like LangGraph's ``InMemoryStore`` for the
same operations (a test drives both with random operations and compares), and keeps them in
the project's database, with:

- ``search(namespace_prefix, query=..., filter=..., limit=..., offset=...)``: ``filter``
  compares like ``InMemoryStore`` (exact values, nested objects by their keys, lists element by
  element, ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``). A ``query`` ranks by
  vector similarity when the store has an ``index`` (LangGraph's ``IndexConfig``: ``embed``,
  ``dims``, ``fields``), as LangGraph's stores do; without one it ranks by full text with
  agentmemory's ``FullTextBackend`` (BM25 on PostgreSQL, FTS5 on SQLite), where
  ``InMemoryStore`` would ignore the query. Without a query, the items most recently updated
  come first (LangGraph's PostgreSQL store's order).
- TTL (``supports_ttl``): ``put(..., ttl=minutes)``; reads refresh the expiry of the items they
  return unless ``refresh_ttl=False`` (``TTLConfig``: ``default_ttl``, ``refresh_on_read``);
  expired items are never returned (``omit_expired`` defaults to True here; set it to False
  for LangGraph's default of returning them until swept) and ``sweep_ttl()`` deletes them.

Within one ``batch`` the reads see the store as it was before the batch, and the puts are
applied after them, the last put of a namespace and key winning (as in ``InMemoryStore``).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import router, transaction
from django.db.models import Q, QuerySet, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Left
from django.db.models.lookups import Exact
from django.utils import timezone
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from agentmemory.contrib.langgraph.connections import tidy_method
from agentmemory.contrib.langgraph.models import StoreItem, StoreVector
from agentmemory.recall.backends import FullTextBackend, RecallBackend
from agentmemory.validation import MAX_ID, text_problem

logger = logging.getLogger("agentmemory.contrib.langgraph")

__all__ = ["DjangoStore"]

#: rows read per query while a filter is checked in Python
CHUNK = 200
#: most full-text candidates ranked for one search (before the filter and the page)
MAX_TEXT_CANDIDATES = 1000
_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
#: the expiry of an item whose TTL reaches past what a date holds (LangGraph's ``ttl`` is
#: minutes, any number): in practice it never expires
LAST_EXPIRY = datetime(9999, 12, 31, tzinfo=UTC)


def _expiry(now: datetime, ttl: float) -> datetime:
    try:
        return now + timedelta(minutes=ttl)
    except OverflowError:
        return LAST_EXPIRY


def _value_problem(value: Any) -> str | None:
    """Why the database cannot store ``value`` as JSON (PostgreSQL's ``jsonb`` refuses NaN,
    infinities and the NUL character; no driver sends a lone surrogate), or ``None``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else "holds NaN or an infinity"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, Mapping):
        return next((p for k, v in value.items() if (p := _value_problem(k) or _value_problem(v))), None)
    if isinstance(value, list | tuple):
        return next((p for item in value if (p := _value_problem(item))), None)
    return None


def _join(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def _split(namespace: str) -> tuple[str, ...]:
    return tuple(namespace.split("."))


def _in_prefix(prefix: Sequence[str]) -> Q:
    """The items whose namespace starts with the labels of ``prefix``, compared exactly, as
    ``InMemoryStore`` compares them: the ``startswith`` (``LIKE``, which an index serves)
    is checked again by an ``=`` of the namespace's opening, since SQLite's ``LIKE`` ignores
    the case of ASCII letters: a search of ("users", "Alice") returned the items of
    ("users", "alice", ...), another user's memories."""
    if not prefix:
        return Q()
    joined = _join(prefix) + "."
    opening = Exact(Left("namespace", len(joined)), Value(joined))
    return Q(namespace=joined[:-1]) | (Q(namespace__startswith=joined) & Q(opening))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return float(value) if isinstance(value, bool) else None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    left, right = _number(value), _number(operand)
    if left is None or right is None:  # InMemoryStore raises here; a missing field matches nothing
        return False
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    return left <= right  # $lte


def matches(value: Any, wanted: Any) -> bool:
    """Whether a stored value satisfies one filter value, as ``InMemoryStore`` compares: an
    object of operators (``{"$gt": 3}``) applies each; another object matches an object
    holding its keys with matching values (extra keys allowed); a list matches a list of the
    same length element by element; anything else by equality.

    Raises:
        ValueError: an unknown ``$`` operator.
    """
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            for operator, operand in wanted.items():
                if operator not in _OPERATORS:
                    raise ValueError(f"Unsupported operator: {operator}")
                if not _operator(value, operator, operand):
                    return False
            return True
        if not isinstance(value, Mapping):
            return False
        return all(matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(matches(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _filter_ok(document: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(matches(document.get(k), v) for k, v in filter.items())


def _narrow(rows: QuerySet[StoreItem], filter: Mapping[str, Any] | None) -> QuerySet[StoreItem]:
    """Narrow in SQL by the filter's plain string values (exact in JSON as in Python); the
    whole filter is checked in Python on what SQL returns."""
    for i, (key, wanted) in enumerate((filter or {}).items()):
        if isinstance(wanted, Mapping) and set(wanted) == {"$eq"}:
            wanted = wanted["$eq"]
        if not isinstance(wanted, str):
            continue
        if text_problem(wanted) or text_problem(str(key)):
            return rows.none()  # no stored value holds it (PostgreSQL refused it in a query)
        alias = f"_value_{i}"
        rows = rows.alias(**{alias: KeyTransform(str(key), "value")}).filter(**{alias: wanted})
    return rows


def _namespace_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(want == "*" or have == want for have, want in pairs)


class _EmbedderEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over an agentmemory ``Embedder`` (``embed(texts)``)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self.embedder.embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@dataclass
class _Plan:
    """What a batch needs embedded, found before any query runs."""

    puts: dict[tuple[tuple[str, ...], str], PutOp] = field(default_factory=dict)
    texts: dict[tuple[tuple[str, ...], str], list[tuple[str, str]]] = field(default_factory=dict)
    queries: set[str] = field(default_factory=set)


class DjangoStore(BaseStore):
    """LangGraph's ``BaseStore`` on the project's database.

    ``graph = builder.compile(checkpointer=DjangoSaver(), store=DjangoStore())``; a node reads
    it as ``runtime.store`` (or the ``store`` argument). Needs
    ``"agentmemory.contrib.langgraph"`` in ``INSTALLED_APPS`` and its migrations.

    Args:
        using: database alias; default the one Django's routers choose for writing the item
            model (reads use it too, so an item just written is always found).
        index: LangGraph's ``IndexConfig`` for vector search: ``embed`` (LangChain
            ``Embeddings``, an embedding function, a ``"provider:model"`` string, or an
            agentmemory ``Embedder`` such as ``agentmemory.recall.get_embedder()``), ``dims``
            and ``fields`` (paths of the texts to embed; default the whole value, ``"$"``).
            Vectors are stored as float32 and compared by exact cosine (needs numpy).
        ttl: LangGraph's ``TTLConfig`` (minutes): ``default_ttl``, ``refresh_on_read``
            (default True), ``omit_expired`` (default True here), ``sweep_interval_minutes``
            (unused: call ``sweep_ttl()`` from a periodic task).
        backend: the ``RecallBackend`` that ranks a ``query`` without ``index`` (default
            ``FullTextBackend()``); it ranks ``StoreItem`` rows by their text.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        *,
        using: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        backend: RecallBackend | None = None,
    ) -> None:
        self.using = using
        self.ttl_config = ttl
        self.backend = backend if backend is not None else FullTextBackend()
        self.index_config = dict(index) if index else None
        self.embeddings: Embeddings | None = None
        fields = ["$"]
        if index:
            embed: Any = index.get("embed")
            if embed is not None and not isinstance(embed, Embeddings | str) and hasattr(embed, "embed"):
                self.embeddings = _EmbedderEmbeddings(embed)
            else:
                self.embeddings = ensure_embeddings(embed)
            fields = list(index.get("fields") or ["$"])
        self.fields = [(path, tokenize_path(path) if path != "$" else path) for path in fields]

    @property
    def db(self) -> str:
        """The database alias used (resolved on each call)."""
        return self.using or router.db_for_write(StoreItem)

    @property
    def omit_expired(self) -> bool:
        return bool((self.ttl_config or {}).get("omit_expired", True))

    # -- batch -------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations (``GetOp``, ``SearchOp``, ``ListNamespacesOp``, ``PutOp``);
        returns one result per operation, in order. Embeddings are computed first (one call
        for the batch's texts, one per distinct query), then the database work runs.

        Raises:
            InvalidNamespaceError: a namespace label that is empty, not a string, or holds
                "." or a NUL character; an empty namespace in a ``PutOp``.
            ValueError: an unknown filter operator or namespace match type; a put whose key
                or value holds what the database cannot store (NUL, a lone surrogate, NaN
                or an infinity), on every database alike.
        """
        ops = list(ops)
        plan = self._plan(ops)
        documents, queries = self._embed(plan)
        return self._run(ops, plan, documents, queries)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async ``batch``: embeddings through ``aembed_*``, the database in a worker thread."""
        ops = list(ops)
        plan = self._plan(ops)
        documents, queries = await self._aembed(plan)
        return await sync_to_async(self._run)(ops, plan, documents, queries)

    def _plan(self, ops: list[Op]) -> _Plan:
        plan = _Plan()
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                problem = _value_problem(str(op.key))
                if problem is None and op.value is not None:
                    problem = _value_problem(op.value)
                if problem:
                    raise ValueError(f"cannot store the item {op.key!r}: it {problem}")
                plan.puts[(tuple(op.namespace), op.key)] = op
            elif isinstance(op, SearchOp):
                if op.query and self.embeddings is not None:
                    plan.queries.add(op.query)
            elif not isinstance(op, GetOp | ListNamespacesOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
        for address, op in plan.puts.items():
            plan.texts[address] = self._texts(op)
        return plan

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """(path, text) pairs of a put's value: at the op's index paths, the store's fields
        otherwise; none for a delete or ``index=False``."""
        if op.value is None or op.index is False:
            return []
        paths = self.fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        found: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                found.extend((f"{path}.{i}", text) for i, text in enumerate(texts))
            elif texts:
                found.append((path, texts[0]))
        return found

    def _embed(self, plan: _Plan) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        if self.embeddings is None:
            return {}, {}
        texts = sorted({text for pairs in plan.texts.values() for _path, text in pairs})
        documents = dict(zip(texts, self.embeddings.embed_documents(texts), strict=True)) if texts else {}
        queries = {q: self.embeddings.embed_query(q) for q in sorted(plan.queries)}
        return documents, queries

    async def _aembed(self, plan: _Plan) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        if self.embeddings is None:
            return {}, {}
        texts = sorted({text for pairs in plan.texts.values() for _path, text in pairs})
        documents = (
            dict(zip(texts, await self.embeddings.aembed_documents(texts), strict=True)) if texts else {}
        )
        queries = {q: await self.embeddings.aembed_query(q) for q in sorted(plan.queries)}
        return documents, queries

    @tidy_method
    def _run(
        self,
        ops: list[Op],
        plan: _Plan,
        documents: dict[str, list[float]],
        queries: dict[str, list[float]],
    ) -> list[Result]:
        db = self.db
        now = timezone.now()
        results: list[Result] = [None] * len(ops)
        refresh: set[int] = set()
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            found = self._get_many(db, [op for _i, op in gets], now)
            for i, op in gets:
                row = found.get((_join(op.namespace), op.key))
                results[i] = self._item(row) if row is not None else None
                if row is not None and op.refresh_ttl and row.ttl_minutes is not None:
                    refresh.add(row.pk)
        for i, any_op in enumerate(ops):
            if isinstance(any_op, SearchOp):
                hits = self._search(db, any_op, now, queries.get(any_op.query or ""))
                results[i] = [item for _row, item in hits]
                if any_op.refresh_ttl:
                    refresh.update(row.pk for row, _item in hits if row.ttl_minutes is not None)
            elif isinstance(any_op, ListNamespacesOp):
                results[i] = self._list_namespaces(db, any_op, now)
        if refresh or plan.puts:
            with transaction.atomic(using=db):
                if refresh:
                    self._refresh(db, refresh, now)
                if plan.puts:
                    self._apply_puts(db, plan, documents, now)
        return results

    # -- reads -------------------------------------------------------------------------

    def _live(self, db: str, now: datetime) -> QuerySet[StoreItem]:
        rows = StoreItem.objects.using(db).all()
        if self.omit_expired:
            rows = rows.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        return rows

    def _item(self, row: StoreItem, score: float | None = None, search: bool = False) -> Item:
        if search:
            return SearchItem(
                namespace=_split(row.namespace),
                key=row.key,
                value=row.value,
                created_at=row.created_at,
                updated_at=row.updated_at,
                score=score,
            )
        return Item(
            value=row.value,
            key=row.key,
            namespace=_split(row.namespace),
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    def _get_many(self, db: str, ops: list[GetOp], now: datetime) -> dict[tuple[str, str], StoreItem]:
        wanted: dict[str, set[str]] = defaultdict(set)
        for op in ops:
            if not text_problem(str(op.key)):  # no item has such a key: it is not found
                wanted[_join(op.namespace)].add(str(op.key))
        query = Q()
        for namespace, keys in wanted.items():
            query |= Q(namespace=namespace, key__in=keys)
        return {(row.namespace, row.key): row for row in self._live(db, now).filter(query)}

    def _scope(self, db: str, op: SearchOp, now: datetime) -> QuerySet[StoreItem]:
        return _narrow(self._live(db, now).filter(_in_prefix(op.namespace_prefix)), op.filter)

    def _search(
        self, db: str, op: SearchOp, now: datetime, query_vector: list[float] | None
    ) -> list[tuple[StoreItem, Item]]:
        if op.limit <= 0 or op.offset < 0:
            return []
        scope = self._scope(db, op, now)
        if op.query and query_vector is not None:
            return self._semantic(scope, op, query_vector)
        if op.query:
            return self._fulltext(scope, op)
        wanted = op.offset + op.limit
        kept: list[StoreItem] = []
        for row in self._ordered(scope):
            if _filter_ok(row.value, op.filter):
                kept.append(row)
                if len(kept) >= wanted:
                    break
        return [(row, self._item(row, search=True)) for row in kept[op.offset :]]

    @staticmethod
    def _ordered(scope: QuerySet[StoreItem]) -> Iterator[StoreItem]:
        """The scope newest update first, read ``CHUNK`` rows per query."""
        rows = scope.order_by("-updated_at", "-pk")
        last: StoreItem | None = None
        while True:
            page = rows
            if last is not None:
                page = rows.filter(
                    Q(updated_at__lt=last.updated_at) | Q(updated_at=last.updated_at, pk__lt=last.pk)
                )
            found = list(page[:CHUNK])
            yield from found
            if len(found) < CHUNK:
                return
            last = found[-1]

    def _fulltext(self, scope: QuerySet[StoreItem], op: SearchOp) -> list[tuple[StoreItem, Item]]:
        assert op.query is not None
        ranked = self.backend.rank(
            scope, op.query, MAX_TEXT_CANDIDATES if op.filter else min(op.offset + op.limit, MAX_ID)
        )
        if not ranked:
            return []
        best = max(score for _pk, score in ranked) or 1.0
        rows = scope.model._default_manager.using(scope.db).in_bulk([pk for pk, _score in ranked])
        hits = []
        for pk, score in ranked:
            row = rows.get(pk)
            if row is not None and _filter_ok(row.value, op.filter):
                hits.append((row, self._item(row, score / best, search=True)))
        return hits[op.offset : op.offset + op.limit]

    def _semantic(
        self, scope: QuerySet[StoreItem], op: SearchOp, query_vector: list[float]
    ) -> list[tuple[StoreItem, Item]]:
        from agentmemory.recall.embedders import cosine_scores, from_bytes, numpy

        candidates = [row for row in self._ordered(scope) if _filter_ok(row.value, op.filter)]
        if not candidates:
            return []
        by_pk = {row.pk: row for row in candidates}
        best: dict[int, float] = {}
        vectors = list(
            StoreVector.objects.using(scope.db)
            .filter(item_id__in=list(by_pk))
            .values_list("item_id", "vector")
        )
        if vectors:
            xp = numpy()
            ids = [item_id for item_id, _v in vectors]
            sizes = {len(bytes(v)) for _i, v in vectors}
            if sizes != {4 * len(query_vector)}:  # vectors of another length (dims changed) do not compare
                keep = [(i, v) for i, v in vectors if len(bytes(v)) == 4 * len(query_vector)]
                ids = [i for i, _v in keep]
                vectors = keep
            if vectors:
                scores = cosine_scores(query_vector, xp.vstack([from_bytes(v) for _i, v in vectors]))
                for item_id, score in zip(ids, scores.tolist(), strict=True):
                    if item_id not in best or score > best[item_id]:
                        best[item_id] = float(score)
        scored = sorted(best.items(), key=lambda pair: -pair[1])
        ordered: list[tuple[StoreItem, float | None]] = [(by_pk[pk], score) for pk, score in scored]
        ordered += [(row, None) for row in candidates if row.pk not in best]
        page = ordered[op.offset : op.offset + op.limit]
        return [(row, self._item(row, score, search=True)) for row, score in page]

    def _list_namespaces(self, db: str, op: ListNamespacesOp, now: datetime) -> list[tuple[str, ...]]:
        rows = self._live(db, now)
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix" and condition.path and "*" not in condition.path:
                rows = rows.filter(_in_prefix(tuple(condition.path)))
        namespaces = {_split(ns) for ns in rows.order_by().values_list("namespace", flat=True).distinct()}
        kept = {
            ns
            for ns in namespaces
            if all(_namespace_matches(ns, condition) for condition in op.match_conditions or ())
        }
        if op.max_depth is not None:
            kept = {ns[: op.max_depth] for ns in kept}
        return sorted(kept)[op.offset : op.offset + op.limit]

    # -- writes ------------------------------------------------------------------------

    def _refresh(self, db: str, pks: set[int], now: datetime) -> None:
        """Restart the TTL of the items ``pks`` (their expiry becomes now + their TTL)."""
        by_ttl: dict[float, list[int]] = defaultdict(list)
        for pk, ttl in StoreItem.objects.using(db).filter(pk__in=pks).values_list("pk", "ttl_minutes"):
            if ttl is not None:
                by_ttl[ttl].append(pk)
        for ttl, ids in by_ttl.items():
            StoreItem.objects.using(db).filter(pk__in=ids).update(expires_at=_expiry(now, ttl))

    def _apply_puts(self, db: str, plan: _Plan, documents: dict[str, list[float]], now: datetime) -> None:
        deletes: dict[str, list[str]] = defaultdict(list)
        rows = []
        for (namespace, key), op in plan.puts.items():
            joined = _join(namespace)
            if op.value is None:
                deletes[joined].append(key)
                continue
            ttl = op.ttl
            rows.append(
                StoreItem(
                    namespace=joined,
                    key=key,
                    value=dict(op.value),
                    content="\n".join(text for _path, text in plan.texts[(namespace, key)]),
                    created_at=now,
                    updated_at=now,
                    expires_at=_expiry(now, ttl) if ttl is not None else None,
                    ttl_minutes=ttl,
                )
            )
        if deletes:
            query = Q()
            for joined_namespace, keys in deletes.items():
                query |= Q(namespace=joined_namespace, key__in=keys)
            StoreItem.objects.using(db).filter(query).delete()
        if not rows:
            return
        StoreItem.objects.using(db).bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["namespace", "key"],
            update_fields=["value", "content", "updated_at", "expires_at", "ttl_minutes"],
        )
        if self.embeddings is None:
            return
        query = Q()
        for row in rows:
            query |= Q(namespace=row.namespace, key=row.key)
        ids = {
            (namespace, key): pk
            for pk, namespace, key in StoreItem.objects.using(db)
            .filter(query)
            .values_list("pk", "namespace", "key")
        }
        StoreVector.objects.using(db).filter(item_id__in=list(ids.values())).delete()
        from agentmemory.recall.embedders import to_bytes

        vectors = []
        for (namespace, key), op in plan.puts.items():
            if op.value is None:
                continue
            pk = ids[(_join(namespace), key)]
            for path, text in plan.texts[(namespace, key)]:
                vectors.append(StoreVector(item_id=pk, path=path, vector=to_bytes(documents[text])))
        StoreVector.objects.using(db).bulk_create(vectors)

    # -- TTL ---------------------------------------------------------------------------

    @tidy_method
    def sweep_ttl(self) -> int:
        """Delete the expired items (with their vectors); returns how many. Run it
        periodically: ``agentmemory.contrib.langgraph.tasks.sweep_store_ttl`` with Celery
        beat, or ``manage.py sweep_store_ttl`` from cron."""
        _total, per_model = StoreItem.objects.using(self.db).filter(expires_at__lte=timezone.now()).delete()
        return per_model.get(StoreItem._meta.label, 0)

    def expired_count(self) -> int:
        """How many items ``sweep_ttl`` would delete now (one count; nothing changes)."""
        return StoreItem.objects.using(self.db).filter(expires_at__lte=timezone.now()).count()

    async def asweep_ttl(self) -> int:
        """Async ``sweep_ttl``."""
        return await sync_to_async(self.sweep_ttl)()
