"""The pgvector backend on a PostgreSQL with the ``vector`` extension (CI: the embedded
PostgreSQL 18 of ``.ci/pgvector``, with ``agentmemory.contrib.pgvector`` installed).

Deselected on databases without it (SQLite, PostgreSQL without pgvector): there the
``"pgvector"`` backend ranks by exact cosine, which ``tests/test_embeddings.py`` covers."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory.contrib.pgvector.indexes import hnsw_index_name, index_migration
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


def _migration(tmp_path: Path, model: str, dimensions: int) -> Any:
    """The module of the migration ``pgvector_index_migration`` writes for ``model``."""
    path = tmp_path / "0002_hnsw.py"
    path.write_text(index_migration(model, dimensions, dependencies=[("tests", "0001_initial")]))
    spec = importlib.util.spec_from_file_location("hnsw_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _index_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
        return cursor.fetchone() is not None


def test_the_hnsw_index_matches_the_query_the_backend_sends(
    embedding_settings, django_capture_on_commit_callbacks, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    name = hnsw_index_name("msg", "stub-embedder", 16)
    migration = _migration(tmp_path, "stub-embedder", 16)
    with connection.schema_editor() as editor:  # what `migrate` runs
        migration.create_indexes(None, editor)
    alice = UserFactory()
    _store(alice, _texts(300), django_capture_on_commit_callbacks)
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


def test_storing_vectors_makes_no_index_and_rebuild_names_the_missing_ones(
    embedding_settings, django_capture_on_commit_callbacks, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """DDL lives in migrations: a request that stores vectors of a model without an index
    creates none (its searches scan the rows, exactly), and ``rebuild_recall_index`` says
    which migration to generate; after it, the index is there and nothing is missing."""
    alice = UserFactory()
    _store(alice, _texts(20), django_capture_on_commit_callbacks)
    name = hnsw_index_name("msg", "stub-embedder", 16)
    assert not _index_exists(name)
    hits = search_messages("apple mango", owner=alice, k=5, backend=PgVectorBackend(StubEmbedder()))
    exact = search_messages("apple mango", owner=alice, k=5, backend=EmbeddingBackend(StubEmbedder()))
    assert [h.message_id for h in hits] == [h.message_id for h in exact]
    out = io.StringIO()
    call_command("rebuild_recall_index", "--skip-embeddings", stdout=out)  # full-text only
    call_command("rebuild_recall_index", stdout=out)
    assert (
        "no HNSW index of 'stub-embedder' (16 dimensions) on agentmemory_pgvector_messagevector"
        in out.getvalue()
    )
    assert "pgvector_index_migration" in out.getvalue()
    migration = _migration(tmp_path, "stub-embedder", 16)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # rows stored in this test's transaction
    with connection.schema_editor() as editor:
        migration.create_indexes(None, editor)
    assert _index_exists(name)
    out = io.StringIO()
    call_command("rebuild_recall_index", stdout=out)
    assert "no HNSW index" not in out.getvalue()
    with connection.schema_editor() as editor:
        migration.drop_indexes(None, editor)
    assert not _index_exists(name)


def test_the_command_writes_the_migration_for_the_configured_embedder(embedding_settings) -> None:  # type: ignore[no-untyped-def]
    from django.core.management.base import CommandError
    from django.db.migrations.loader import MigrationLoader

    out = io.StringIO()
    call_command("pgvector_index_migration", "agentmemory", "--dry-run", stdout=out)
    (leaf,) = MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes("agentmemory")
    # the model of AGENTMEMORY["EMBEDDER"] and the length of the vectors it returns
    assert out.getvalue().strip() == index_migration("stub-embedder", 16, dependencies=[leaf]).strip()
    out = io.StringIO()
    call_command(
        "pgvector_index_migration",
        "agentmemory",
        "--dry-run",
        "--embedding-model",
        "e5",
        "--dimensions",
        "8",
        stdout=out,
    )
    assert out.getvalue().strip() == index_migration("e5", 8, dependencies=[leaf]).strip()
    with pytest.raises(CommandError, match="no installed app"):
        call_command("pgvector_index_migration", "nosuchapp", "--dry-run")
    with pytest.raises(CommandError, match="1 to 2,000 dimensions"):
        call_command("pgvector_index_migration", "agentmemory", "--dry-run", "--dimensions", "4000")


def test_equal_distances_are_broken_by_id_newest_first(embedding_settings) -> None:  # type: ignore[no-untyped-def]
    """The nearest rows the ANN query keeps (``LIMIT``) at equal distances are the newest, as
    full-text ranking breaks equal scores: which of them the scan reached first decided it
    (the oldest, here), so one recall could give two answers."""
    from agentmemory.models import Fact

    same = [1.0, 0.5] + [0.0] * 14
    user = UserFactory()
    memory = KnowledgeMemory(user)
    for i in range(40):
        memory.store(f"fact number {i}", "general")
    FactVector.objects.filter(fact__owner=user).update(vector=same)
    facts = Fact.objects.filter(owner=user)
    newest = list(facts.order_by("-pk").values_list("pk", flat=True)[:3])
    backend = PgVectorBackend(StubEmbedder({"query": same}))
    assert [pk for pk, _ in backend.ranking(facts, "query").top(3)] == newest
    FactVector.objects.filter(fact_id__in=newest[:2]).update(model="stub-embedder")  # rows moved
    assert [pk for pk, _ in backend.ranking(facts, "query").top(3)] == newest


def test_blanking_a_conversation_deletes_its_vectors(
    embedding_settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    # ``purge_conversations --blank-content`` keeps the messages and deleted their
    # ``MessageEmbedding`` rows, but the pgvector copies (a foreign key to the message, which
    # stays) were left: vectors of the blanked words, which pgvector recall still ranked.
    from datetime import timedelta

    from agentmemory.retention import purge_conversations

    owner = UserFactory()
    blanked = _store(owner, _texts(5), django_capture_on_commit_callbacks)
    kept = _store(owner, _texts(3, offset=1), django_capture_on_commit_callbacks)
    assert MessageVector.objects.count() == 8
    Conversation.objects.filter(pk=blanked.pk).update(updated_at="2000-01-01T00:00:00Z")
    report = purge_conversations(older_than=timedelta(days=30), blank_content=True)
    assert report.conversations == 1
    assert not MessageVector.objects.filter(message__conversation=blanked).exists()
    assert MessageVector.objects.filter(message__conversation=kept).count() == 3
    assert {h.conversation_id for h in search_messages("apple banana", owner=owner, k=10)} == {kept.pk}
