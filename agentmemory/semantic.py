"""Semantic memory: facts recalled by relevance to a query, behind a pluggable ``MemoryStore``.

Follows the semantic-memory contract of the seed design (``add``, ``search``,
``get_context(query)``, ``delete``, ``clear``, ``list_all`` and a ``MemoryStore`` protocol)
with the user's own database as the default store: entries are ``Fact`` rows of the owner's
scope, so they share the knowledge memory's rules (exact repeats add nothing, a changed
"key: value" fact supersedes the old one, forgetting deletes for real) and its recall
backends (full-text by default, embeddings or hybrid by setting) instead of the seed's
word-overlap default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import uuid4

from django.db import transaction

from agentmemory.knowledge import InvalidFactError, KnowledgeMemory
from agentmemory.models import Fact, FactKind
from agentmemory.recall.backends import RecallBackend
from agentmemory.recall.embedders import Embedder
from agentmemory.validation import json_problem

__all__ = ["MemoryEntry", "MemoryStore", "ORMMemoryStore", "SemanticMemory"]

CONTEXT_HEADER = "Relevant context from memory:"


@dataclass
class MemoryEntry:
    """One memory: its ``id`` (a string, as stores assign them), content, metadata and, in
    search results, the ``score`` that ordered it (higher is better)."""

    content: str
    id: str = field(default_factory=lambda: uuid4().hex)
    metadata: dict[str, Any] = field(default_factory=dict)
    score: float | None = None
    created_at: datetime | None = None


@runtime_checkable
class MemoryStore(Protocol):
    """Where a ``SemanticMemory`` keeps its entries (subclass it, or match it structurally)."""

    def add(self, entry: MemoryEntry) -> str:
        """Store ``entry``; return its id (the store may assign its own)."""
        ...

    def search(self, query: str, top_k: int = 5) -> list[MemoryEntry]:
        """The ``top_k`` entries most relevant to ``query``, best first."""
        ...

    def delete(self, memory_id: str) -> bool:
        """Delete one entry; True when it existed."""
        ...

    def clear(self) -> None:
        """Delete every entry of this store."""
        ...

    def list_all(self) -> list[MemoryEntry]:
        """Every live entry, oldest first."""
        ...


class ORMMemoryStore:
    """The default ``MemoryStore``: persistent ``Fact`` rows of one owner's scope, of the
    semantic memory (``Fact.kind = "semantic"``): the knowledge memory of the same scope
    (``KnowledgeMemory``, an agent's ``remember`` tool) keeps its facts apart, so ``clear()``
    and ``list_all()`` reach this store's entries only.

    ``metadata["category"]`` (default "general") and ``metadata["importance"]`` (0.0-1.0)
    are stored in columns; the rest of ``metadata`` in ``Fact.metadata``.

    Raises:
        MemoryScopeError: no owner.
    """

    def __init__(
        self,
        owner: Any,
        *,
        agent_key: str | None = None,
        namespace: str | None = None,
        embedder: Embedder | None = None,
        backend: RecallBackend | None = None,
    ) -> None:
        self.knowledge = KnowledgeMemory(
            owner,
            agent_key=agent_key,
            namespace=namespace,
            embedder=embedder,
            backend=backend,
            kind=FactKind.SEMANTIC,
        )

    def add(self, entry: MemoryEntry) -> str:
        """Store ``entry`` as a persistent fact with its metadata, in one transaction.

        Raises:
            InvalidFactError: bad content, category or importance, or metadata that is not
                storable JSON (NaN, a NUL, a lone surrogate, a date, a set, a non-string key).
        """
        metadata = dict(entry.metadata)
        category = metadata.pop("category", "general")
        importance = metadata.pop("importance", None)
        # checked before anything is written: a refusal by the database used to come after
        # the fact was stored, leaving it without its metadata
        if problem := json_problem(metadata):
            raise InvalidFactError(f"metadata {problem}")
        with transaction.atomic(using=self.knowledge.using):
            result = self.knowledge.store(entry.content, category, persistent=True, importance=importance)
            if metadata and result.action != "duplicate":
                Fact.objects.using(self.knowledge.using).filter(pk=result.fact.pk).update(metadata=metadata)
        return str(result.fact.pk)

    def search(self, query: str, top_k: int = 5) -> list[MemoryEntry]:
        return [_entry(hit.fact, hit.score) for hit in self.knowledge.recall(query, k=top_k)]

    def delete(self, memory_id: str) -> bool:
        try:
            pk = int(memory_id)
        except (TypeError, ValueError):
            return False
        return self.knowledge.forget(pk) > 0

    def clear(self) -> None:
        self.knowledge.forget_all()

    def list_all(self) -> list[MemoryEntry]:
        return [_entry(f) for f in self.knowledge.live_facts().order_by("created_at", "pk")]


def _entry(fact: Fact, score: float | None = None) -> MemoryEntry:
    metadata = {**(fact.metadata or {}), "category": fact.category, "importance": fact.importance}
    return MemoryEntry(
        content=fact.content, id=str(fact.pk), metadata=metadata, score=score, created_at=fact.created_at
    )


class SemanticMemory:
    """Long-term memory recalled by relevance.

    Args:
        owner: a saved user or a user id; required unless ``store`` is given (the default
            ORM store keeps each user's memories apart and refuses to work without one).
        max_results: entries put in ``get_context()``.
        store: a ``MemoryStore``; default ``ORMMemoryStore(owner, ...)``.
        agent_key, namespace: exact scope of the default store.
        embedder, backend: passed to the default store (see ``KnowledgeMemory``).

    Raises:
        MemoryScopeError: no owner and no store.
        ValueError: ``max_results`` below 1.
    """

    def __init__(
        self,
        owner: Any = None,
        max_results: int = 3,
        store: MemoryStore | None = None,
        *,
        agent_key: str | None = None,
        namespace: str | None = None,
        embedder: Embedder | None = None,
        backend: RecallBackend | None = None,
    ) -> None:
        if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
            raise ValueError(f"max_results must be a positive integer, not {max_results!r}")
        self.max_results = max_results
        self.store: MemoryStore = (
            store
            if store is not None
            else ORMMemoryStore(
                owner, agent_key=agent_key, namespace=namespace, embedder=embedder, backend=backend
            )
        )

    def add(self, content: str, metadata: dict[str, Any] | None = None) -> str:
        """Store ``content`` (with optional ``metadata``); returns the entry's id. With the
        default store, adding content that is already stored returns the existing id."""
        return self.store.add(MemoryEntry(content=content, metadata=dict(metadata or {})))

    def search(self, query: str, top_k: int = 5) -> list[MemoryEntry]:
        """The ``top_k`` entries most relevant to ``query``, best first."""
        return self.store.search(query, top_k=top_k)

    def get_context(self, query: str) -> str:
        """The ``max_results`` most relevant entries as a block for a prompt::

            Relevant context from memory:
              1. Account is on the Enterprise plan since March 2021.

        or "" when nothing is relevant."""
        results = self.search(query, top_k=self.max_results)
        if not results:
            return ""
        lines = [CONTEXT_HEADER]
        lines.extend(f"  {i}. {entry.content}" for i, entry in enumerate(results, start=1))
        return "\n".join(lines)

    def delete(self, memory_id: str) -> bool:
        """Delete one entry (and, with the default store, its history and index entries)."""
        return self.store.delete(memory_id)

    def clear(self) -> None:
        """Delete every entry of this memory's store (only this owner's, with the default)."""
        self.store.clear()

    def list_all(self) -> list[MemoryEntry]:
        """Every live entry, oldest first."""
        return self.store.list_all()
