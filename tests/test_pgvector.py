"""The pgvector backend on a PostgreSQL with the ``vector`` extension (CI: the embedded
PostgreSQL 18 of ``.ci/pgvector``, with ``agentmemory.contrib.pgvector`` installed).

Deselected on databases without it (SQLite, PostgreSQL without pgvector): there the
``"pgvector"`` backend ranks by exact cosine, which ``tests/test_embeddings.py`` covers."""

from __future__ import annotations

import io

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory.contrib.pgvector.indexes import hnsw_index_name
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, FactEmbedding, MessageEmbedding
from agentmemory.recall import EmbeddingBackend, PgVectorBackend, search_messages
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = [pytest.mark.pgvector, pytest.mark.django_db]

if apps.is_installed("agentmemory.contrib.pgvector"):  # a model module imports only when installed
    from agentmemory.contrib.pgvector.models import FactVector, MessageVector

WORDS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "olive", "peach", "pear", "plum"]


@pytest.fixture
def embedding_settings(settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "pgvector"}
    return settings


def _store(owner, texts, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    with django_capture_on_commit_callbacks(execute=True):
        PersistentChatHistory(conv).add_messages([ChatMessage.human(t) for t in texts])
    return conv


def _texts(n: int, offset: int = 0) -> list[str]:
    return [f"{WORDS[i % 10]} {WORDS[(i * 3 + offset) % 10]} {WORDS[(i * 7 + 1) % 10]} {i}" for i in range(n)]


def test_the_migration_created_the_vector_extension() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        (version,) = cursor.fetchone()
    assert tuple(int(x) for x in version.split(".")[:2]) >= (0, 8)


def test_new_messages_get_pgvector_rows_and_rank_like_exact_cosine(
    embedding_settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    alice, bob = UserFactory(), UserFactory()
    _store(alice, _texts(40), django_capture_on_commit_callbacks)
    _store(bob, _texts(40, offset=1), django_capture_on_commit_callbacks)
    assert MessageVector.objects.count() == MessageEmbedding.objects.count() == 80
    embedder = StubEmbedder()
    for query in ("apple mango", "pear plum olive", "cherry"):
        by_pgvector = search_messages(query, owner=alice, k=10, backend=PgVectorBackend(embedder))
        exact = search_messages(query, owner=alice, k=10, backend=EmbeddingBackend(embedder))
        assert [h.message_id for h in by_pgvector] == [h.message_id for h in exact]
        assert [h.score for h in by_pgvector] == pytest.approx([h.score for h in exact], abs=1e-5)
        assert {h.conversation_id for h in by_pgvector} <= set(
            Conversation.objects.filter(owner=alice).values_list("pk", flat=True)
        )


def test_the_hnsw_index_matches_the_query_the_backend_sends(
    embedding_settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    alice = UserFactory()
    _store(alice, _texts(300), django_capture_on_commit_callbacks)
    name = hnsw_index_name(MessageVector, "stub-embedder", 16)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        (definition,) = cursor.fetchone()
    assert "USING hnsw" in definition and "vector(16)" in definition and "vector_cosine_ops" in definition
    assert "'stub-embedder'" in definition  # one partial index per embedding model
    with CaptureQueriesContext(connection) as queries:
        search_messages("apple mango", owner=alice, k=5, backend=PgVectorBackend(StubEmbedder()))
    # the ranking, then the distances of the hits' neighbours (no index needed: given rows)
    ranking, neighbours = [q["sql"] for q in queries.captured_queries if "<=>" in q["sql"]]
    assert "LIMIT" in ranking and "LIMIT" not in neighbours
    with connection.cursor() as cursor:
        # With sorting made expensive, only an index that yields rows in distance order can
        # serve the query: the plan must be the HNSW index, so its expression and its
        # predicate match what the backend sends.
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("EXPLAIN " + ranking)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert name in plan, plan


def test_facts_get_pgvector_rows_and_forget_deletes_them() -> None:
    embedder = StubEmbedder()
    alice = UserFactory()
    km = KnowledgeMemory(
        alice, embedder=embedder, backend=PgVectorBackend(embedder), supersede_similarity=None
    )
    grey = km.store("Owns a grey cat", "pets").fact
    km.store("Drives a red bicycle", "transport")
    KnowledgeMemory(UserFactory(), embedder=embedder, backend=PgVectorBackend(embedder)).store(
        "Owns a grey cat", "pets"
    )
    assert FactVector.objects.filter(fact__owner=alice).count() == 2
    assert [h.fact.pk for h in km.recall("Owns a grey cat", k=1)] == [grey.pk]
    km.forget_all()
    assert not FactVector.objects.filter(fact__owner=alice).exists()
    assert FactVector.objects.count() == 1  # the other owner's


def test_deleting_a_conversation_deletes_its_vectors(
    embedding_settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    conv = _store(UserFactory(), _texts(5), django_capture_on_commit_callbacks)
    assert MessageVector.objects.count() == 5
    conv.delete()
    assert MessageVector.objects.count() == 0


def test_rebuild_recall_index_copies_vectors_stored_before_the_app(embedding_settings) -> None:  # type: ignore[no-untyped-def]
    embedder = StubEmbedder()
    km = KnowledgeMemory(UserFactory(), embedder=embedder, backend=EmbeddingBackend(embedder))
    km.store("Owns a grey cat", "pets")
    FactVector.objects.all().delete()  # as if stored before the app was installed
    assert FactEmbedding.objects.count() == 1
    out = io.StringIO()
    call_command("rebuild_recall_index", stdout=out)
    assert "pgvector: 1 vectors copied (stub-embedder)" in out.getvalue()
    (row,) = FactVector.objects.all()
    assert list(row.vector) == pytest.approx(embedder.embed(["Owns a grey cat"])[0], abs=1e-6)
