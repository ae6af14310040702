"""``KnowledgeMemory``: the knowledge memory's public face.

``KnowledgeMemory(owner)`` follows the knowledge-memory contract of the seed design
(``remember()``, categories, persistent facts, recent entries, ``build_context()``, pruning)
with the storage in the host's database instead of files. Its methods check their arguments
and hand the work to ``agentmemory.knowledge.storage`` (writing, repeats, supersession,
deletion) and ``agentmemory.knowledge.context`` (the context block, the daily log); recall
ranks through the configured ``RecallBackend``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from django.db import IntegrityError, connections, router, transaction
from django.db.models import Case, F, PositiveIntegerField, Q, When
from django.utils import timezone

from agentmemory.agent_registry import agent_scope
from agentmemory.conf import app_settings
from agentmemory.knowledge.context import persistent_facts, recent_entries, render_context
from agentmemory.knowledge.storage import (
    FactHit,
    InvalidFactError,
    PreparedFact,
    RememberResult,
    category_filter,
    check_owner,
    clock,
    days_before,
    delete_ids,
    embed_content,
    lock_touched,
    source_of,
    store_fact,
    take_scope_lock,
    validate_fact,
)
from agentmemory.knowledge.text import content_hash
from agentmemory.models import Fact, FactKind, Message
from agentmemory.recall import MAX_K, MIN_CANDIDATES, boost, fulltext, report_recall
from agentmemory.recall.backends import FullTextBackend, RecallBackend, get_backend, get_embedder
from agentmemory.recall.compiled import Scope
from agentmemory.recall.embedders import Embedder
from agentmemory.recall.said import fact_said_at, said_instant
from agentmemory.recall.scope import MemoryScope
from agentmemory.recall.text import bounded_query
from agentmemory.recording import usage_scope

#: whether recalls mark the facts they return as recalled (``unrecorded_recalls``)
_RECORD_RECALLS: ContextVar[bool] = ContextVar("agentmemory_record_recalls", default=True)


@contextmanager
def unrecorded_recalls() -> Iterator[None]:
    """Inside it, ``KnowledgeMemory.recall`` (and the memory block, which recalls through it)
    leaves ``last_recalled_at`` and ``recall_count`` as they are. For previews of what a
    model would be sent (the API's context endpoint, a GET, which writes nothing: RFC 9110,
    9.2.1; the admin's context page): a fact is counted as recalled when a request sends it,
    not when someone looks at what a request would send. Per thread and per task
    (a ``ContextVar``)."""
    token = _RECORD_RECALLS.set(False)
    try:
        yield
    finally:
        _RECORD_RECALLS.reset(token)


class KnowledgeMemory:
    """Long-term facts of one owner, for one agent key and namespace.

    Args:
        owner: a saved user or a user id (required).
        agent_key: an agent's key; facts of other agent keys are not seen (exact match).
            None means the facts stored without an agent key.
        namespace: a further exact partition (a project, a tenant); None means none.
        max_log_days: transient entries older than this are hidden and pruned (days).
        max_context_entries: most recent entries in ``build_context()``.
        max_entries: most live facts kept in the scope; the least important (then transient,
            then oldest) are deleted when a new fact goes over it. None: no limit.
        max_context_tokens: token bound of ``build_context()``; default
            ``AGENTMEMORY["KNOWLEDGE_CONTEXT_MAX_TOKENS"]``.
        embedder: an ``Embedder`` used to find near-duplicates that a new fact supersedes
            (default ``AGENTMEMORY["EMBEDDER"]``; none: only exact repeats and "key: value"
            facts are recognised).
        backend: the ``RecallBackend`` of ``recall()``; default ``AGENTMEMORY["RECALL_BACKEND"]``.
        kind: which memory's facts this object reads and writes (``Fact.kind``):
            ``"knowledge"`` (the default) or ``"semantic"`` (``SemanticMemory``'s store). The
            two never see each other's facts: no repeat, supersession, recall or delete
            crosses them.

    Raises:
        MemoryScopeError: no owner, or a scope value that is not a string.
        ValueError: a negative ``max_log_days``, a non-positive ``max_context_entries``,
            ``max_entries`` or ``max_context_tokens``, a ``supersede_similarity`` that is
            not a cosine (-1.0 to 1.0), or an unknown ``kind``.
    """

    def __init__(
        self,
        owner: Any,
        *,
        agent_key: str | None = None,
        namespace: str | None = None,
        max_log_days: int = 30,
        max_context_entries: int = 50,
        max_entries: int | None = None,
        max_context_tokens: int | None = None,
        embedder: Embedder | None = None,
        backend: RecallBackend | None = None,
        supersede_similarity: float | Literal["default"] | None = "default",
        using: str | None = None,
        kind: str = FactKind.KNOWLEDGE,
    ) -> None:
        self.scope = MemoryScope.of(owner, agent_key, namespace)
        if kind not in FactKind.values:
            raise ValueError(f"kind must be one of {', '.join(FactKind.values)}, not {kind!r}")
        self.kind = str(kind)
        for name, value, low in (
            ("max_log_days", max_log_days, 0),
            ("max_context_entries", max_context_entries, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
        for name, bound in (("max_entries", max_entries), ("max_context_tokens", max_context_tokens)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                # 0 used to mean the default and a string failed only in build_context()
                raise ValueError(f"{name} must be a positive integer or None, not {bound!r}")
        if supersede_similarity not in (None, "default") and (
            isinstance(supersede_similarity, bool)
            or not isinstance(supersede_similarity, int | float)
            or not -1.0 <= supersede_similarity <= 1.0  # also refuses NaN
        ):
            raise ValueError(
                f"supersede_similarity must be a cosine from -1.0 to 1.0, None or 'default', "
                f"not {supersede_similarity!r}"
            )
        conf = app_settings()
        self.max_log_days = max_log_days
        self.max_context_entries = max_context_entries
        self.max_entries = max_entries
        self.max_context_tokens = (
            conf.KNOWLEDGE_CONTEXT_MAX_TOKENS if max_context_tokens is None else max_context_tokens
        )
        self.embedder = embedder if embedder is not None else get_embedder()
        self._backend = backend
        self.supersede_similarity = (
            conf.FACT_SUPERSEDE_SIMILARITY if supersede_similarity == "default" else supersede_similarity
        )
        self.using = using or router.db_for_write(Fact)
        self._owner_checked = False

    def __repr__(self) -> str:
        s = self.scope
        kind = "" if self.kind == FactKind.KNOWLEDGE else f", kind={self.kind!r}"
        return (
            f"KnowledgeMemory(owner={s.owner_id}, agent_key={s.agent_key!r}, namespace={s.namespace!r}{kind})"
        )

    # -- querysets -------------------------------------------------------------------------

    @property
    def backend(self) -> RecallBackend:
        if self._backend is None:
            self._backend = get_backend(embedder=self.embedder)
        return self._backend

    def all_facts(self) -> Any:
        """Every stored fact of the scope: live, superseded and expired (the history)."""
        return Fact.objects.using(self.using).filter(**self.scope.filter(), kind=self.kind)

    def live_facts(self, now: datetime | None = None) -> Any:
        """Facts in default recall at ``now`` (an aware datetime; default the current time):
        not superseded, not expired, and, for transient entries, not older than
        ``max_log_days``."""
        now = clock(now)
        return _in_recall(self.all_facts(), now, days_before(now, self.max_log_days))

    def facts_as_of(self, now: datetime) -> Any:
        """The facts ``recall(now=now)`` ranks: those that may have been in default recall at
        ``now`` (an aware datetime), as the memory stood then (``_as_of``: stored
        by then, the current fact then, not expired then; for transient entries, stored within
        ``max_log_days`` before it). A fact dated by a transcript (``metadata["said_at"]``) is
        in it whatever its storage time: ``recall`` keeps it only when it had been said by
        ``now`` (``recall.said.fact_said_at``), which the database cannot read.

        Raises:
            ValueError: ``now`` is not an aware datetime.
        """
        now = clock(now)
        return _as_of(self.all_facts(), now, days_before(now, self.max_log_days))

    def live_probe(self, now: datetime | None = None, *, as_of: bool = False) -> Scope | Any:
        """Whether ``live_facts(now)`` (with ``as_of``: ``facts_as_of(now)``) holds a fact, as a
        query to run within another (``recall.lines.read_lines``): a ``Scope`` of the first
        fact's primary key, whose SQL is compiled once per database on PostgreSQL
        (``recall.compiled``), where building and compiling the queryset cost about 0.7 ms a
        recall. A subclass that changes ``all_facts`` or ``live_facts`` gets its queryset
        itself, compiled each time."""
        now = clock(now)
        if type(self).live_facts is not KnowledgeMemory.live_facts or (
            type(self).all_facts is not KnowledgeMemory.all_facts
        ):
            return self.facts_as_of(now) if as_of else self.live_facts(now)
        scope = self.scope
        values = (
            scope.owner_id,
            scope.agent_key,
            scope.namespace,
            self.kind,
            now,
            days_before(now, self.max_log_days),
        )
        if as_of:
            return Scope("knowledge.as_of_probe", _as_of_probe, values, self.using)
        return Scope("knowledge.live_probe", _live_probe, values, self.using)

    # -- writing ---------------------------------------------------------------------------

    def remember(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        supersedes: int | uuid.UUID | None = None,
    ) -> str:
        """Store a fact and return a one-line confirmation for the model or the user, such as
        ``"Remembered (preferences, persistent): Prefers dark mode"``. See ``store()`` for
        the arguments and errors."""
        result = self.store(
            content,
            category,
            persistent,
            importance=importance,
            ttl=ttl,
            source_message=source_message,
            supersedes=supersedes,
        )
        fact = result.fact
        kind = "persistent" if fact.persistent else "recent"
        if result.action == "duplicate":
            return f"Already remembered ({fact.category}): {fact.content}"
        if result.action == "updated":
            return f"Updated memory ({fact.category}, {kind}): {fact.content}"
        if result.action == "superseded":
            return f"Remembered ({fact.category}, {kind}), replacing an older fact: {fact.content}"
        return f"Remembered ({fact.category}, {kind}): {fact.content}"

    def store(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        supersedes: int | uuid.UUID | None = None,
        now: datetime | None = None,
    ) -> RememberResult:
        """Store a fact and say what happened (see ``RememberResult``).

        Args:
            content: the fact, 1 to ``AGENTMEMORY["MAX_FACT_CHARS"]`` characters, no NUL.
            category: a label such as "preferences" (1-100 characters).
            persistent: kept until forgotten (True) or a recent entry that ages out after
                ``max_log_days`` (False).
            importance: 0.0-1.0 (default 0.5); ranks recall and decides eviction.
            ttl: seconds (or a timedelta) until the fact expires, at most ``MAX_TTL_SECONDS``
                (100 years); None: no expiry.
            source_message: the stored message the fact came from (a message of one of the
                owner's conversations). When a transcript gave it a date (its metadata's
                ``session_date_time`` or ``session_date``), a new fact keeps that date as
                ``metadata["said_at"]`` and is shown dated then in the memory block.
            supersedes: a live fact of this scope that the new one replaces: its id (primary
                key) or its public ``uuid``. Checked even when the content is a repeat: then
                the named fact becomes history of the fact already in force ("updated"). A
                fact naming itself is changed in place (its persistence is set either way),
                or, with another category, replaced by a new fact in that category.
            now: the clock (tests and imports); default the current time.

        Returns:
            ``RememberResult``. A live fact of the same scope with the same content (up to
            whitespace, Unicode form and invisible characters: ``text.normalize``) is a
            repeat: nothing new is stored, and the fact is written to the daily log again
            (``storage.log_again``: listed by ``get_recent_entries()`` again, dated ``now``
            when that is later, a transient entry aging from then). Otherwise a new fact is stored and
            supersedes ``supersedes``, a live fact of the same category with the same
            "key:" prefix, or the most similar live fact of the same category at or above
            ``AGENTMEMORY["FACT_SUPERSEDE_SIMILARITY"]`` when an embedder is configured.
            The new content is always stored; a fact that replaces a persistent one by its
            key or its likeness (not named in ``supersedes``) is persistent too.

        Raises:
            InvalidFactError: bad content, category, importance, ttl, ``source_message`` or
                ``supersedes``.
            MemoryScopeError: the owner id names no user.
            ValueError: ``now`` is a naive datetime.
        """
        now = clock(now)
        content, category, importance_value, ttl_seconds = validate_fact(content, category, importance, ttl)
        if not isinstance(persistent, bool):
            raise InvalidFactError(f"persistent must be a bool, not {persistent!r}")
        digest = content_hash(content)
        expires_at = now + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None
        check_owner(self)
        source_id, said_at = source_of(self, source_message)
        vector = embed_content(self, content)
        prepared = PreparedFact(
            content=content,
            category=category,
            persistent=persistent,
            importance_given=importance,
            importance=importance_value,
            expires_at=expires_at,
            source_id=source_id,
            digest=digest,
            vector=vector,
            metadata={},
        )
        for _attempt in range(3):
            try:
                with transaction.atomic(using=self.using):
                    take_scope_lock(self)
                    lock_touched(self, [prepared], now, supersedes=supersedes)
                    result = store_fact(
                        self,
                        content,
                        category,
                        persistent,
                        importance,
                        importance_value,
                        expires_at,
                        source_id,
                        supersedes,
                        digest,
                        vector,
                        now,
                        said_at,
                    )
                    if said_at and result.action in ("created", "superseded"):
                        # dated when its source was said (a transcript's date), as the flush does
                        result.fact.metadata = {**(result.fact.metadata or {}), "said_at": said_at}
                        Fact.objects.using(self.using).filter(pk=result.fact.pk).update(
                            metadata=result.fact.metadata
                        )
                    return result
            except IntegrityError:
                # Two writers stored the same content at once: the unique constraint on live
                # content kept one; the retry reports it as the repeat it now is.
                continue
        raise InvalidFactError("could not store the fact: concurrent writers kept conflicting")

    def prepare(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        metadata: dict[str, Any] | None = None,
        embed: bool = True,
        now: datetime | None = None,
    ) -> PreparedFact:
        """The part of ``store()`` that takes no lock: check the fact (same arguments and
        errors as ``store()``) and embed it (a model call when an embedder is configured).
        ``store_prepared()`` then writes it, inside the caller's transaction. A service that
        writes facts together with rows of its own (compaction stores the facts of the turns
        it folds in the transaction that stores the summary) prepares them first, so that no
        model is called while it holds its locks.

        ``metadata`` is kept on a fact this creates (``Fact.metadata``); a repeat of a live
        fact keeps the live fact's metadata. ``embed=False`` leaves the vector out (an
        embedder that failed: ``manage.py rebuild_recall_index`` adds the missing vectors
        later; until then only the "key:" rule and exact repeats find what it supersedes).
        """
        now = clock(now)
        content, category, importance_value, ttl_seconds = validate_fact(content, category, importance, ttl)
        if not isinstance(persistent, bool):
            raise InvalidFactError(f"persistent must be a bool, not {persistent!r}")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidFactError(f"metadata must be a dict, not {type(metadata).__name__}")
        check_owner(self)
        source_id, said_at = source_of(self, source_message)
        metadata = dict(metadata or {})
        if said_at:
            metadata.setdefault("said_at", said_at)
        return PreparedFact(
            content=content,
            category=category,
            persistent=persistent,
            importance_given=importance,
            importance=importance_value,
            expires_at=now + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None,
            source_id=source_id,
            digest=content_hash(content),
            vector=embed_content(self, content) if embed else None,
            metadata=metadata,
        )

    def store_prepared(self, prepared: PreparedFact, *, now: datetime | None = None) -> RememberResult:
        """Write a fact made by ``prepare()`` by the rules of ``store()`` (repeat, supersede),
        in a savepoint of the caller's transaction (or a transaction of its own outside one),
        after taking the scope's write lock (``lock_scope()``). Queries only: no model call.

        Returns:
            ``RememberResult``, as ``store()``.

        Raises:
            InvalidFactError: concurrent writers kept conflicting (three tries).
        """
        now = clock(now)
        for _attempt in range(3):
            try:
                with transaction.atomic(using=self.using):
                    take_scope_lock(self)
                    lock_touched(self, [prepared], now)
                    result = store_fact(
                        self,
                        prepared.content,
                        prepared.category,
                        prepared.persistent,
                        prepared.importance_given,
                        prepared.importance,
                        prepared.expires_at,
                        prepared.source_id,
                        None,
                        prepared.digest,
                        prepared.vector,
                        now,
                        _said_text(prepared.metadata),
                    )
                    if prepared.metadata and result.action in ("created", "superseded"):
                        Fact.objects.using(self.using).filter(pk=result.fact.pk).update(
                            metadata=prepared.metadata
                        )
                        result.fact.metadata = dict(prepared.metadata)
                    return result
            except IntegrityError:
                continue
        raise InvalidFactError("could not store the fact: concurrent writers kept conflicting")

    def lock_scope(self) -> None:
        """Take the scope's write lock (after the owner's user row) for the rest of the
        caller's transaction (PostgreSQL; see ``agentmemory.knowledge.storage.take_scope_lock``).
        A service that also locks rows of its own takes this lock first, so that it and
        ``store()`` called inside a request's transaction always lock in the same order.

        Raises:
            MemoryScopeError: the owner's user is gone.
        """
        take_scope_lock(self)

    def lock_for_store(self, prepared: Sequence[PreparedFact], *, now: datetime | None = None) -> None:
        """Before storing several facts in one transaction: take the scope's write lock and
        lock, in ascending id, every stored fact that ``store_prepared()`` of ``prepared``, in
        this order and at ``now`` or later (default: the current time), may change or delete
        (``agentmemory.knowledge.storage.lock_touched``). Each ``store_prepared()`` locks what it
        touches as it goes; one after another they would lock a fact of a higher id before
        one of a lower id, the order a forget or the recall counters never take
        (docs/architecture.md, "Lock order"). Queries only: no model call.

        Raises:
            MemoryScopeError: the owner's user is gone.
            ValueError: ``now`` is a naive datetime.
        """
        now = clock(now)
        take_scope_lock(self)
        lock_touched(self, prepared, now)

    def recall(
        self,
        query: str,
        *,
        k: int = 5,
        category: str | None = None,
        now: datetime | None = None,
        as_of: bool = True,
    ) -> list[FactHit]:
        """Live facts of the scope that match ``query``, best first: the backend's relevance
        times importance and recency boosts (see ``agentmemory.recall.boost``). Never changes
        an expiry.

        ``now`` is when the question is asked (an aware datetime). Without it, the current
        time and the memory as it is: the live facts. With it, the memory as it stood then,
        for a user replaying a transcript or evaluating history at a past date
        (``facts_as_of``): a fact said after ``now`` (its transcript date,
        ``metadata["said_at"]``, else when it was stored) was not there yet and is left
        out; a fact superseded after ``now`` (``superseded_at``: when the fact replacing it
        was said) was still the current one and is recalled; one expired by then, or a
        transient entry older than ``max_log_days`` then, is left out. Importance,
        persistence and expiry are read as they are now (a later repeat may have changed
        them; a fact remembered again is dated when it was last remembered, the daily log's
        rule, and counts from then), and recency is measured from ``now``. ``as_of=False``
        reads only expiry and recency from ``now`` and ranks the live facts
        (``live_facts(now)``), whatever their dates.

        The returned facts are marked as recalled (``last_recalled_at`` set to ``now``,
        ``recall_count`` raised by one) when the caller's transaction commits, or at once
        outside a transaction; a transaction rolled back records nothing, and neither does a
        recall inside ``unrecorded_recalls()`` (previews). On PostgreSQL that
        small update commits without waiting for the write-ahead log to reach the disk
        (``synchronous_commit = off`` for that transaction alone): a crash of the database
        server may lose the counters of the last recalls, never a fact. The ``FactHit`` facts
        show the values read, before this recall. Facts read on a replica
        (``AGENTMEMORY_REPLICAS``) have their counters written on the router's write alias:
        a read-only standby is only read.

        Queries: with the full-text backend on PostgreSQL, one statement ranks, reads and (in
        autocommit mode) records the facts (``agentmemory.recall.fulltext.recall_facts``);
        inside a transaction the update is one more statement after the commit. Elsewhere:
        the backend's ranking, a read of the hits and the update.

        Raises:
            ValueError: ``k`` not from 1 to 100, a naive ``now``, or a ``category`` that is
                not text the database can compare (``InvalidFactError``). TypeError: ``query`` not a string.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ValueError(f"k must be an integer from 1 to {MAX_K}, not {k!r}")
        query = bounded_query(query)  # the first MAX_QUERY_CHARS characters are read
        as_of = as_of and now is not None
        now = clock(now)
        facts = self.facts_as_of(now) if as_of else self.live_facts(now)
        if category is not None:
            facts = facts.filter(category=category_filter(category))
        started = time.perf_counter()
        backend = self.backend
        limit = max(k * 5, MIN_CANDIDATES)
        found: list[tuple[Fact, float, float]] | None = None
        recorded = False
        record_on = _recall_record_alias(self.using)
        with usage_scope(owner_id=self.scope.owner_id, agent_key=self.scope.agent_key):
            connection = connections[self.using]
            # outside a transaction the ranking statement records the recall itself (on the
            # alias it reads, so not when that alias is a replica)
            record = _RECORD_RECALLS.get()
            record_now = (
                record
                and not as_of  # the facts said after now are left out after the statement
                and record_on == self.using
                and connection.get_autocommit()
                and not connection.in_atomic_block
            )
            if type(backend) is FullTextBackend:  # a subclass may rank its own way
                found = fulltext.recall_facts(
                    facts, query, candidates=limit, k=limit if as_of else k, now=now, record=record_now
                )
                recorded = record_now and found is not None
            if found is None:
                ranked = backend.rank(facts, query, limit)
                rows = Fact.objects.using(self.using).in_bulk([pk for pk, _score in ranked]) if ranked else {}
                top = max((score for _pk, score in ranked), default=0.0)
                found = [(rows[pk], score, top) for pk, score in ranked if pk in rows]
        if as_of:
            found = [hit for hit in found if _in_recall_then(hit[0], now, self.max_log_days)]
        if not found:
            report_recall("facts", self.scope.owner_id, backend, 0, started)
            return []
        hits = [FactHit(f, boost(score, best, f.created_at, f.importance, now)) for f, score, best in found]
        hits.sort(key=lambda h: (-h.score, -h.fact.pk))
        hits = hits[:k]
        if record and not recorded:
            _record_recall(record_on, [h.fact.pk for h in hits], now)
        report_recall("facts", self.scope.owner_id, backend, len(hits), started)
        return hits

    def get_persistent_facts(self) -> dict[str, list[str]]:
        """Live persistent facts by category (categories and facts in the order stored)."""
        return persistent_facts(self)

    def get_recent_entries(self, days: int = 7, limit: int = 50) -> list[dict[str, Any]]:
        """The daily log: live entries of the last ``days`` days, persistent and transient,
        newest first, at most ``limit``: dicts with ``id``, ``timestamp`` (ISO 8601, UTC,
        "Z"), ``category``, ``content``, ``persistent``, ``importance`` and ``expires_at``
        (ISO 8601 or None).

        The knowledge seed writes every entry to its daily log, a persistent one as well as
        MEMORY.md, so a persistent fact stored in the last ``days`` days is listed here too
        (``persistent`` True); ``build_context()`` names it once, under [Long-term Memory].
        A fact replaced since (a changed "key: value" fact) is not listed."""
        return recent_entries(self, days, limit)

    def build_context(self) -> str:
        """``build_context_with_ids()``'s text: the block put into the system prompt."""
        return self.build_context_with_ids()[0]

    def build_context_with_ids(self) -> tuple[str, tuple[int, ...]]:
        """The block put into the system prompt, and the ids of the facts it shows (so that
        a memory block recalled beside it does not repeat them)::

            [Long-term Memory]
            ## preferences
            - Preferred language: Python

            [Recent Memory]
            - [2026-03-13 10:16] (context) Working on Project Atlas this week

        Long-term memory holds the live persistent facts grouped by category (most important
        first when they do not all fit); recent memory the newest ``max_context_entries``
        transient entries, oldest first. The whole block stays within ``max_context_tokens``
        by the configured token counter: an entry too long for the tokens left is skipped and
        the next ones still fill the rest (one long fact never empties the block). A section
        with nothing in it is left out, and an empty memory gives "". Reading never changes a
        fact.
        """
        return render_context(self)

    # -- deleting --------------------------------------------------------------------------

    def forget(self, fact_id: int | uuid.UUID) -> int:
        """Delete one fact of this scope with its history (the facts it superseded) and its
        embeddings and index entries; returns the number of facts deleted (0 when the id is
        not a fact of this scope). ``fact_id`` is its id (primary key) or its public ``uuid``.

        Raises:
            TypeError: ``fact_id`` is neither an int nor a ``uuid.UUID``.
        """
        if isinstance(fact_id, bool) or not isinstance(fact_id, int | uuid.UUID):
            raise TypeError(f"fact_id must be an int or a uuid.UUID, not {type(fact_id).__name__}")
        with transaction.atomic(using=self.using):
            # Under the scope's lock, as writers: another agent's store must not move the
            # fact's history under a new head between the walk and the delete (it stayed
            # behind), nor delete the head this walk reads (Fact.DoesNotExist).
            take_scope_lock(self)
            found = self.all_facts().filter(
                **({"uuid": fact_id} if isinstance(fact_id, uuid.UUID) else {"pk": fact_id})
            )
            head = found.first()
            if head is None:
                return 0
            while head.superseded_by_id is not None:  # forgetting history forgets the fact it led to
                head = Fact.objects.using(self.using).get(pk=head.superseded_by_id)
            return delete_ids(self, [head.pk])

    def forget_all(self, *, category: str | None = None) -> int:
        """Delete every fact of this scope (or of one category), history included; returns how
        many facts were deleted. Deletes in batches of ``DELETE_BATCH`` until none is left,
        so no page size limits it; other owners' rows are never touched.

        Raises:
            InvalidFactError: ``category`` is not text the database can compare.
        """
        facts = self.all_facts()
        if category is not None:
            facts = facts.filter(category=category_filter(category))
        return delete_ids(self, facts.values_list("pk", flat=True), count_all=True)

    def clear(self) -> None:
        """Forget every fact of this scope (the seed's "remove all knowledge")."""
        self.forget_all()

    def clear_logs(self) -> None:
        """Empty the daily log of this scope: forget the transient entries, and take the
        persistent facts out of ``get_recent_entries()`` while keeping them (the seed's
        MEMORY.md is kept)."""
        delete_ids(
            self, self.all_facts().filter(persistent=False).values_list("pk", flat=True), count_all=True
        )
        _update_in_id_order(self.all_facts().filter(persistent=True, in_daily_log=True), in_daily_log=False)

    def prune_logs(self, max_days: int | None = None) -> int:
        """Delete transient entries older than ``max_days`` (default ``max_log_days``) and
        expired facts of this scope; returns how many facts were deleted. With the default,
        only facts that reads already hide are deleted. Persistent facts older than that
        are kept and leave the daily log (``get_recent_entries()``)."""
        days = self.max_log_days if max_days is None else max_days
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise ValueError(f"max_days must be a non-negative integer, not {max_days!r}")
        now = timezone.now()
        cutoff = days_before(now, days)
        stale = self.all_facts().filter(Q(persistent=False, created_at__lt=cutoff) | Q(expires_at__lte=now))
        deleted = delete_ids(self, stale.values_list("pk", flat=True), count_all=True)
        # the log entries of older persistent facts go too; the facts stay (MEMORY.md)
        _update_in_id_order(
            self.all_facts().filter(persistent=True, in_daily_log=True, created_at__lt=cutoff),
            in_daily_log=False,
        )
        return deleted


def _update_in_id_order(facts: Any, **values: Any) -> int:
    """``facts.update(**values)`` (a queryset of ``Fact``) after locking the rows in ascending
    id, in one transaction; returns the rows changed. An ``UPDATE`` alone locks them in the
    order its scan meets them, which deadlocked with a writer locking two of them in
    ascending id (docs/architecture.md, "Lock order")."""
    connection = connections[facts.db]
    if not connection.features.has_select_for_update:  # SQLite: one writer at a time
        return int(facts.update(**values))
    no_key = connection.features.has_select_for_no_key_update
    with transaction.atomic(using=facts.db):
        ids = list(facts.order_by("pk").select_for_update(no_key=no_key).values_list("pk", flat=True))
        return int(Fact.objects.using(facts.db).filter(pk__in=ids).update(**values)) if ids else 0


def _record_recall(using: str, ids: list[int], now: datetime) -> None:
    """Mark the facts ``ids`` as recalled at ``now`` when the current transaction commits (at
    once in autocommit mode; in a transaction managed by hand, inside it)."""
    connection = connections[using]
    if connection.in_atomic_block or connection.get_autocommit():
        transaction.on_commit(partial(_mark_recalled, using, ids, now), using=using, robust=True)
    else:
        _mark_recalled(using, ids, now, durable=True)


def _recall_record_alias(using: str) -> str:
    """Where the recall counters of facts read on ``using`` are written: ``using`` itself,
    unless it is one of ``AGENTMEMORY_REPLICAS["REPLICAS"]`` (read-only standbys, or the
    replica ``replica_reads()`` chose), then the router's write alias for ``Fact``."""
    from agentmemory.routers import replica_settings

    if using in replica_settings().replicas:
        return router.db_for_write(Fact)
    return using


def _mark_recalled(using: str, ids: list[int], now: datetime, durable: bool = False) -> None:
    """``last_recalled_at = now``, ``recall_count + 1`` for the facts ``ids``: one statement.

    On PostgreSQL, unless ``durable``, its transaction commits without waiting for the
    write-ahead log to reach the disk (``synchronous_commit`` off for that transaction only,
    set by ``set_config(..., true)`` inside the statement): a counter is not worth a wait for
    the disk, which took 8-18 ms a recall on a loaded machine (docs/benchmarks.md, "Facts at
    scale"). It runs after the caller's commit or in autocommit mode, so no other write
    shares that transaction. The rows are locked in ascending id first, as every statement
    locking several facts does (docs/architecture.md, "Lock order"): locked in scan order,
    two turns recalling the same facts deadlocked with each other's recording.
    """
    connection = connections[using]
    most = max_recall_count(using)
    if connection.vendor != "postgresql" or durable:
        facts = Fact.objects.using(using).filter(pk__in=ids)
        if not connection.features.has_select_for_update:  # SQLite: one writer at a time
            _update_recalled(facts, now, most)
            return
        with transaction.atomic(using=using):  # ascending id first (docs/architecture.md)
            no_key = connection.features.has_select_for_no_key_update
            list(facts.order_by("pk").select_for_update(no_key=no_key).values("pk"))
            _update_recalled(facts, now, most)
        return
    table = connection.ops.quote_name(Fact._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
            # the rows locked in ascending id first (docs/architecture.md, "Lock order"):
            # an UPDATE alone locks them in scan order and deadlocked with another lock
            f"locked AS MATERIALIZED (SELECT id FROM {table} WHERE id = ANY(%s) ORDER BY id "
            "FOR NO KEY UPDATE) "
            f"UPDATE {table} SET last_recalled_at = %s, recall_count = "
            "CASE WHEN recall_count < %s THEN recall_count + 1 ELSE recall_count END "
            "WHERE id IN (SELECT id FROM locked) AND EXISTS (SELECT 1 FROM async)",
            [list(ids), now, most],
        )


def max_recall_count(using: str) -> int:
    """The largest ``Fact.recall_count`` the database ``using`` holds (2,147,483,647 on
    PostgreSQL): the counter stops there. Counting past it raised "integer out of range" on
    PostgreSQL, failing the recall that counted, and turned the column into a float on
    SQLite."""
    return fulltext.column_max(Fact, "recall_count", using)


def knowledge_memory_for(agent: Any, conversation: Any) -> KnowledgeMemory | None:
    """The ``KnowledgeMemory`` of the conversation's owner in the agent's scope (its
    ``KNOWLEDGE_MEMORY_AGENT_KEY`` and ``KNOWLEDGE_MEMORY_NAMESPACE``, ``None`` for each it
    does not set), or ``None`` when the conversation has no owner. The scope the agent's
    memory tools and the memory flush both write to."""
    if conversation is None or conversation.owner_id is None:
        return None
    agent_key, namespace = agent_scope(agent)
    return KnowledgeMemory(conversation.owner_id, agent_key=agent_key, namespace=namespace)


def _live_probe(
    using: str, owner_id: int, agent_key: str, namespace: str, kind: str, now: datetime, cutoff: datetime
) -> Any:
    """``KnowledgeMemory.live_facts``'s queryset (its scope, ``now`` and ``cutoff`` given),
    as the primary key of its first fact: the builder of ``KnowledgeMemory.live_probe``."""
    facts = Fact.objects.using(using).filter(
        owner_id=owner_id, agent_key=agent_key, namespace=namespace, kind=kind
    )
    return _in_recall(facts, now, cutoff).order_by().values("pk")[:1]


def _said_text(metadata: Any) -> str:
    """``metadata["said_at"]`` when it is text (the date a transcript gave a fact's source),
    else ""."""
    said = metadata.get("said_at") if isinstance(metadata, dict) else None
    return said if isinstance(said, str) else ""


def _as_of_probe(
    using: str, owner_id: int, agent_key: str, namespace: str, kind: str, now: datetime, cutoff: datetime
) -> Any:
    """``KnowledgeMemory.facts_as_of``'s queryset (its scope, ``now`` and ``cutoff`` given), as
    the primary key of its first fact: the builder of ``live_probe(as_of=True)``."""
    facts = Fact.objects.using(using).filter(owner_id=owner_id, agent_key=agent_key, namespace=namespace)
    return _as_of(facts.filter(kind=kind), now, cutoff).order_by().values("pk")[:1]


def _as_of(facts: Any, now: datetime, cutoff: datetime) -> Any:
    """The ``facts`` that may have been in default recall at ``now``, as the memory stood then:
    stored by then, or dated by a transcript (``metadata["said_at"]``, which only Python reads:
    ``_in_recall_then``); the current fact then (not superseded, or superseded after ``now``:
    ``superseded_at``); not expired then; persistent or stored since ``cutoff``."""
    return (
        facts.filter(Q(created_at__lte=now) | Q(metadata__has_key="said_at"))
        .filter(Q(superseded_by__isnull=True) | Q(superseded_at__gt=now))
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(Q(persistent=True) | Q(created_at__gte=cutoff))
    )


def _in_recall_then(fact: Fact, now: datetime, max_log_days: int) -> bool:
    """Whether ``fact``, one of ``facts_as_of(now)``, was in recall at ``now`` by the time it
    was said (``fact_said_at``: a transcript's date, else when it was stored): said by then,
    and, for a transient entry, said within ``max_log_days`` before then."""
    said = fact_said_at(fact)
    if said is None:
        return True
    said = said_instant(said)
    return said <= now and (fact.persistent or said >= days_before(now, max_log_days))


def _in_recall(facts: Any, now: datetime, cutoff: datetime) -> Any:
    """The ``facts`` in default recall at ``now``: live (not superseded, not expired), and
    persistent or written since ``cutoff`` (``KnowledgeMemory.live_facts``'s rule, which
    its probe shares)."""
    return facts.live(now).filter(Q(persistent=True) | Q(created_at__gte=cutoff))


def _update_recalled(facts: Any, now: datetime, most: int) -> None:
    """The counters' update of ``_mark_recalled`` through the ORM (``facts`` a queryset)."""
    facts.update(
        last_recalled_at=now,
        recall_count=Case(
            When(recall_count__lt=most, then=F("recall_count") + 1),
            default=F("recall_count"),
            output_field=PositiveIntegerField(),
        ),
    )
