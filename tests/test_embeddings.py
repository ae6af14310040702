"""Embeddings: the OpenAI-compatible adapter against a fake server on 127.0.0.1, indexing of
new messages off the request path, and the embedding and hybrid backends."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, FactEmbedding, MessageEmbedding
from agentmemory.recall import EmbeddingBackend, HybridBackend, search_messages
from agentmemory.recall.backends import fuse
from agentmemory.recall.embedders import EmbeddingError, OpenAICompatibleEmbedder, from_bytes
from tests.embedders import StubEmbedder, hashed_vector
from tests.factories import UserFactory
from tests.fake_embeddings_server import FakeEmbeddingsServer
from tests.fake_http import ScriptedReply
from tests.fake_openai_server import error_body


@pytest.fixture
def fake_embeddings():  # type: ignore[no-untyped-def]
    with FakeEmbeddingsServer() as server:
        yield server


def test_openai_compatible_embedder_request_and_answer(fake_embeddings, db) -> None:  # type: ignore[no-untyped-def]
    embedder = OpenAICompatibleEmbedder(
        "text-embedding-3-small",
        base_url=fake_embeddings.base_url,
        api_key="sk-test",
        batch_size=2,
        dimensions=3,
    )
    fake_embeddings.enqueue_vectors([[1, 0, 0], [0, 1, 0]], reverse=True)
    fake_embeddings.enqueue_vectors([[0, 0, 1]])
    assert embedder.embed(["a", "b", "c"]) == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert fake_embeddings.requests == [
        {"model": "text-embedding-3-small", "input": ["a", "b"], "dimensions": 3},
        {"model": "text-embedding-3-small", "input": ["c"], "dimensions": 3},
    ]
    assert fake_embeddings.request_headers[0]["authorization"] == "Bearer sk-test"


def test_openai_compatible_embedder_errors_are_embedding_errors(fake_embeddings) -> None:  # type: ignore[no-untyped-def]
    embedder = OpenAICompatibleEmbedder("m", base_url=fake_embeddings.base_url, api_key="k")
    fake_embeddings.enqueue(ScriptedReply(429, error_body("Rate limit reached", type="rate_limit_error")))
    with pytest.raises(EmbeddingError, match="429"):
        embedder.embed(["x"])
    fake_embeddings.enqueue(ScriptedReply(200, {"data": [{"index": 0}]}))
    with pytest.raises(EmbeddingError, match="malformed"):
        embedder.embed(["x"])
    fake_embeddings.enqueue_vectors([[1.0], [2.0]])
    with pytest.raises(EmbeddingError, match="expected 1"):
        embedder.embed(["x"])
    with pytest.raises(EmbeddingError):
        OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9", timeout=1).embed(["x"])


def test_fuse_is_reciprocal_rank_fusion() -> None:
    fused = fuse([[(1, 9.0), (2, 5.0)], [(2, 0.9), (3, 0.8)]])
    assert [pk for pk, _ in fused] == [2, 1, 3]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)


@pytest.mark.django_db(transaction=False)
def test_new_messages_are_embedded_after_commit_and_found_by_meaning(
    settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    car = hashed_vector("car")
    settings.AGENTMEMORY = {
        "EMBEDDER": "tests.embedders.StubEmbedder",
        "EMBEDDER_OPTIONS": {"table": {"My car will not start": car, "automobile trouble": car}},
        "RECALL_BACKEND": "hybrid",
    }
    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        PersistentChatHistory(conv).add_messages(
            [
                ChatMessage.system("prompt"),
                ChatMessage.human("My car will not start"),
                ChatMessage.ai("Check the battery"),
            ]
        )
    assert len(callbacks) == 1
    assert MessageEmbedding.objects.count() == 2  # not the system prompt
    # no word in common: full-text finds nothing, the hybrid backend finds it by meaning
    assert (
        search_messages("automobile trouble", owner=alice, backend=None)[0].content == "My car will not start"
    )
    ownerless = Conversation.objects.create(agent_key="a")
    with django_capture_on_commit_callbacks(execute=True):
        PersistentChatHistory(ownerless).add_messages([ChatMessage.human("never searched")])
    assert MessageEmbedding.objects.count() == 2


@pytest.mark.django_db
def test_a_broker_that_cannot_take_the_task_never_fails_the_append(
    settings, django_capture_on_commit_callbacks, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]

    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "embedding"}

    def down(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("agentmemory.broker.publish", down)
    # a broker is configured (tasks are sent to it, not run here), and it refuses
    monkeypatch.setattr("agentmemory.broker.celery_broker", lambda: ("redis://127.0.0.1:1/0", False))
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    with django_capture_on_commit_callbacks(execute=True):
        stored = PersistentChatHistory(conv).add_messages([ChatMessage.human("hello")])
    assert len(stored) == 1 and MessageEmbedding.objects.count() == 0
    assert "could not enqueue embedding" in caplog.text


@pytest.mark.django_db
def test_full_text_backend_enqueues_nothing(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    with django_capture_on_commit_callbacks() as callbacks:
        PersistentChatHistory(conv).add_messages([ChatMessage.human("hello")])
    assert not any("embedding" in repr(c) for c in callbacks)


@pytest.mark.django_db
def test_fact_vectors_are_stored_per_model_and_deleted_with_the_fact() -> None:
    embedder = StubEmbedder()
    km = KnowledgeMemory(UserFactory(), embedder=embedder, backend=EmbeddingBackend(embedder))
    fact = km.store("Owns a grey cat", "pets").fact
    row = FactEmbedding.objects.get()
    assert (row.fact_id, row.model, row.dimensions) == (fact.pk, "stub-embedder", 16)
    assert list(from_bytes(row.vector)) == pytest.approx(hashed_vector("Owns a grey cat"))
    assert [h.fact.pk for h in km.recall("Owns a grey cat")] == [fact.pk]
    km.forget(fact.pk)
    assert FactEmbedding.objects.count() == 0


@pytest.mark.django_db
def test_hybrid_keeps_full_text_hits_the_embedder_misses() -> None:
    embedder = StubEmbedder({"zeta": [1.0], "alpha zeta": [0.0, 1.0]})
    km = KnowledgeMemory(
        UserFactory(), embedder=embedder, backend=HybridBackend(embedder), supersede_similarity=None
    )
    km.store("alpha zeta", "x")
    km.store("something else", "x")
    assert [h.fact.content for h in km.recall("zeta")] == ["alpha zeta"]


@pytest.mark.django_db
def test_pgvector_backend_without_the_extension_ranks_by_exact_cosine(settings) -> None:  # type: ignore[no-untyped-def]
    """Without ``agentmemory.contrib.pgvector`` (SQLite, PostgreSQL without the extension)
    the "pgvector" backend answers like "embedding" on the same stored vectors."""
    from agentmemory.recall import get_backend

    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "pgvector"}
    embedder = StubEmbedder()
    km = KnowledgeMemory(UserFactory(), embedder=embedder, backend=get_backend(), supersede_similarity=None)
    for text in ("grey cat on the sofa", "red bicycle", "cat food brand", "a grey sky"):
        km.store(text, "x")
    exact = KnowledgeMemory(km.scope.owner_id, embedder=embedder, backend=EmbeddingBackend(embedder))
    assert get_backend().name == "pgvector"
    assert [h.fact.pk for h in km.recall("grey cat", k=3)] == [
        h.fact.pk for h in exact.recall("grey cat", k=3)
    ]
    assert km.recall("grey cat", k=1)[0].fact.content == "grey cat on the sofa"


def test_hybrid_adds_scaled_word_relevance_to_cosine_similarity() -> None:
    from agentmemory.recall.backends import fuse_scores

    words = [(1, 8.0), (2, 4.0)]
    meaning = [(3, 0.9), (2, 0.5), (4, -0.2)]
    fused = fuse_scores(words, meaning)
    assert fused == [(2, pytest.approx(1.0)), (1, pytest.approx(1.0)), (3, pytest.approx(0.9)), (4, 0.0)]
    assert fuse_scores([], [(5, 0.3)]) == [(5, pytest.approx(0.3))]
    with pytest.raises(ValueError, match="fusion"):
        HybridBackend(StubEmbedder(), fusion="max")


@pytest.mark.django_db
def test_vectors_of_another_length_under_the_same_model_name_are_skipped_then_replaced() -> None:
    """An embedder whose ``dimensions`` changed keeps its model name (OpenAI's
    text-embedding-3 models take a ``dimensions`` option). The stored vectors of the old
    length made every remember() and recall() of the scope fail in numpy (ValueError, matmul
    of mismatched sizes), and rebuild_recall_index counted them as present."""
    alice = UserFactory()
    wide, narrow = StubEmbedder(dimensions=16), StubEmbedder(dimensions=8)
    KnowledgeMemory(alice, embedder=wide, backend=EmbeddingBackend(wide)).remember("Likes green tea", "food")
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("I drink green tea every morning")])
    EmbeddingBackend(wide).index(list(conv.messages.all()))

    memory = KnowledgeMemory(alice, embedder=narrow, backend=EmbeddingBackend(narrow))
    assert memory.store("Likes black tea", "food").action == "created"
    assert [h.fact.content for h in memory.recall("black tea")] == ["Likes black tea"]
    hybrid = KnowledgeMemory(alice, embedder=narrow, backend=HybridBackend(narrow))
    assert {h.fact.content for h in hybrid.recall("green tea")} >= {"Likes green tea"}
    assert search_messages("green tea", owner=alice, backend=EmbeddingBackend(narrow)) == []

    # indexing again replaces the vectors of the old length (one probe call tells the length)
    backend = EmbeddingBackend(narrow)
    assert backend.index(list(Fact.objects.all())) == 1
    assert backend.index(list(conv.messages.all())) == 1
    assert backend.index(list(conv.messages.all())) == 0
    assert {e.dimensions for e in FactEmbedding.objects.all()} == {8}
    assert {e.dimensions for e in MessageEmbedding.objects.all()} == {8}
    hits = search_messages("green tea", owner=alice, backend=EmbeddingBackend(narrow))
    assert [h.content for h in hits] == ["I drink green tea every morning"]


def test_openai_compatible_embedder_without_httpx_is_an_embedding_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """httpx is not a dependency of the app: without it the embedder fails as a model does
    (logged, retried by rebuild_recall_index), naming the extra, not with ModuleNotFoundError."""
    monkeypatch.setitem(__import__("sys").modules, "httpx", None)  # import httpx raises ImportError
    with pytest.raises(EmbeddingError, match=r"needs httpx: pip install 'django-agentmemory\[embeddings\]'"):
        OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9").embed(["x"])
