"""``DjangoStore`` answers like LangGraph's ``InMemoryStore``; TTL; full-text and vector search."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.store.base import InvalidNamespaceError
from langgraph.store.memory import InMemoryStore

from agentmemory.contrib.langgraph import DjangoStore
from agentmemory.contrib.langgraph.models import StoreItem, StoreVector

pytestmark = pytest.mark.django_db

NAMESPACES = [("users", "a"), ("users", "b"), ("users", "a", "notes"), ("docs",), ("docs", "x", "y")]
KEYS = ["k0", "k1", "k2", "k3"]
WORDS = ["apple", "river", "mountain", "python", "django", "graph", "memory", "coffee"]


def _value(rng: random.Random) -> dict[str, Any]:
    return {
        "text": " ".join(rng.sample(WORDS, 3)),
        "n": rng.randint(0, 5),
        "tag": rng.choice(["red", "blue"]),
        "nested": {"a": rng.choice([1, 2]), "b": "x"},
        "list": rng.choice([[1, 2], [2, 1], []]),
    }


def _filter(rng: random.Random) -> dict[str, Any] | None:
    return rng.choice(
        [
            None,
            {"tag": "red"},
            {"n": {"$gt": 2}},
            {"n": {"$lte": 1}, "tag": "blue"},
            {"nested": {"a": 1}},
            {"list": [1, 2]},
            {"n": {"$ne": 3}},
            {"tag": {"$eq": "blue"}},
        ]
    )


def _normalize(mem: InMemoryStore) -> None:
    # InMemoryStore keeps a namespace that holds no item (after its last delete, or a get
    # of a missing key) and lists it; namespaces are listed from the items they hold here,
    # as in LangGraph's PostgreSQL store.
    for namespace in [ns for ns, items in mem._data.items() if not items]:
        del mem._data[namespace]


def _plain(items: list[Any] | None) -> Any:
    return [(i.namespace, i.key, i.value) for i in items] if items is not None else None


def test_random_operations_answer_like_the_in_memory_store() -> None:
    rng = random.Random(22)
    ours, reference = DjangoStore(), InMemoryStore()
    last_put: dict[tuple[tuple[str, ...], str], int] = {}
    for step in range(400):
        kind = rng.choices(["put", "delete", "get", "search", "list"], weights=[40, 8, 15, 25, 12])[0]
        namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
        if kind == "put":
            value = _value(rng)
            ours.put(namespace, key, value)
            reference.put(namespace, key, value)
            last_put[(namespace, key)] = step
        elif kind == "delete":
            ours.delete(namespace, key)
            reference.delete(namespace, key)
        elif kind == "get":
            got, expected = ours.get(namespace, key), reference.get(namespace, key)
            assert _plain([got] if got else None) == _plain([expected] if expected else None), step
        elif kind == "search":
            prefix = rng.choice([(), ("users",), ("users", "a"), ("docs",), ("nothing",)])
            filter, limit, offset = _filter(rng), rng.randint(1, 6), rng.choice([0, 0, 1, 3])
            found = ours.search(prefix, filter=filter, limit=limit, offset=offset)
            every = reference.search(prefix, filter=filter, limit=10_000)
            # InMemoryStore lists in insertion order; both order newest update first here
            every.sort(key=lambda i: -last_put[(i.namespace, i.key)])
            assert _plain(found) == _plain(every[offset : offset + limit]), step
            assert all(i.score is None for i in found)
        else:
            _normalize(reference)
            prefix = rng.choice([None, ("users",), ("docs",)])
            suffix = rng.choice([None, ("a",), ("*", "notes"), ("y",)])
            depth, limit, offset = rng.choice([None, 1, 2]), rng.randint(1, 5), rng.choice([0, 1])
            kwargs = {
                "prefix": prefix,
                "suffix": suffix,
                "max_depth": depth,
                "limit": limit,
                "offset": offset,
            }
            assert ours.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs), (step, kwargs)


def test_vector_search_answers_like_the_in_memory_store() -> None:
    rng = random.Random(7)
    index = {"embed": DeterministicFakeEmbedding(size=16), "dims": 16, "fields": ["text"]}
    ours, reference = DjangoStore(index=index), InMemoryStore(index=index)
    for step in range(60):
        namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
        value = {**_value(rng), "text": f"{' '.join(rng.sample(WORDS, 3))} {step}"}
        ours.put(namespace, key, value)
        reference.put(namespace, key, value)
        if step % 3:
            continue
        query = " ".join(rng.sample(WORDS, 2))
        prefix, filter = rng.choice([(), ("users",), ("docs",)]), _filter(rng)
        limit, offset = rng.randint(1, 6), rng.choice([0, 2])
        found = ours.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
        expected = reference.search(prefix, query=query, filter=filter, limit=limit, offset=offset)
        assert _plain(found) == _plain(expected), step
        assert [round(i.score, 5) for i in found] == [round(i.score, 5) for i in expected], step


def test_vector_search_takes_an_agentmemory_embedder() -> None:
    class Embedder:
        model = "letters"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(t.count("a")), float(t.count("e")), 1.0] for t in texts]

    store = DjangoStore(index={"embed": Embedder(), "dims": 3, "fields": ["text"]})
    store.put(("docs",), "a", {"text": "banana and papaya"})
    store.put(("docs",), "e", {"text": "eleven trees"})
    found = store.search(("docs",), query="aaaa")
    assert [i.key for i in found] == ["a", "e"]
    assert found[0].score > found[1].score


def test_items_not_indexed_come_after_the_ranked_ones_without_a_score() -> None:
    index = {"embed": DeterministicFakeEmbedding(size=8), "dims": 8, "fields": ["text"]}
    store = DjangoStore(index=index)
    store.put(("docs",), "plain", {"text": "kept out"}, index=False)
    store.put(("docs",), "indexed", {"text": "river"})
    assert StoreVector.objects.count() == 1
    found = store.search(("docs",), query="river")
    assert [(i.key, i.score is None) for i in found] == [("indexed", False), ("plain", True)]
    assert found[0].score == pytest.approx(1.0, abs=1e-5)


def test_full_text_query_ranks_matching_items_without_an_index() -> None:
    store = DjangoStore()
    store.put(("users", "a"), "p1", {"text": "Prefers Python and Django for web work", "tag": "red"})
    store.put(("users", "a"), "p2", {"text": "Drinks coffee every morning", "tag": "blue"})
    store.put(("users", "b"), "p3", {"text": "Python scripts for data", "tag": "blue"})
    store.put(("users", "a"), "p4", {"text": "unrelated", "note": "python"}, index=["text"])
    found = store.search(("users",), query="python")
    assert {i.key for i in found} == {"p1", "p3"}
    assert all(0 < i.score <= 1 for i in found) and max(i.score for i in found) == 1
    assert [i.key for i in store.search(("users",), query="python", filter={"tag": "blue"})] == ["p3"]
    assert [i.key for i in store.search(("users", "a"), query="coffee mornings")] == ["p2"]
    assert store.search(("users",), query="zebra") == []


def test_a_put_keeps_created_at_and_moves_updated_at() -> None:
    store = DjangoStore()
    store.put(("users", "a"), "k", {"v": 1})
    first = store.get(("users", "a"), "k")
    store.put(("users", "a"), "k", {"v": 2})
    second = store.get(("users", "a"), "k")
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at


def test_bad_namespaces_are_refused_and_nothing_is_stored() -> None:
    store = DjangoStore()
    for namespace in [("a.b",), ("",), (), ("ok", 3)]:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})  # type: ignore[arg-type]
    assert not StoreItem.objects.exists()


def test_reads_in_a_batch_see_the_store_before_its_puts() -> None:
    from langgraph.store.base import GetOp, PutOp

    store = DjangoStore()
    ops = [
        PutOp(("docs",), "k", {"v": 1}),
        GetOp(("docs",), "k"),
        PutOp(("docs",), "k", {"v": 2}),
    ]
    assert store.batch(ops) == [None, None, None]
    assert store.get(("docs",), "k").value == {"v": 2}


# -- TTL ----------------------------------------------------------------------------------


def _expire(namespace: tuple[str, ...], key: str) -> None:
    from django.utils import timezone

    StoreItem.objects.filter(namespace=".".join(namespace), key=key).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_ttl_expires_items_and_reads_refresh_it() -> None:
    store = DjangoStore()
    store.put(("users", "a"), "short", {"v": 1}, ttl=2)
    store.put(("users", "a"), "forever", {"v": 2})
    row = StoreItem.objects.get(key="short")
    assert row.ttl_minutes == 2 and row.expires_at is not None
    assert StoreItem.objects.get(key="forever").expires_at is None
    StoreItem.objects.filter(key="short").update(expires_at=row.expires_at - timedelta(minutes=1))
    assert store.get(("users", "a"), "short", refresh_ttl=False) is not None
    assert StoreItem.objects.get(key="short").expires_at == row.expires_at - timedelta(minutes=1)
    assert store.get(("users", "a"), "short") is not None  # refreshed: now + 2 minutes
    assert StoreItem.objects.get(key="short").expires_at > row.expires_at - timedelta(seconds=5)
    _expire(("users", "a"), "short")
    assert store.get(("users", "a"), "short") is None
    assert [i.key for i in store.search(("users",))] == ["forever"]
    assert store.list_namespaces() == [("users", "a")]
    store.put(("docs",), "gone", {"v": 3}, ttl=1)
    _expire(("docs",), "gone")
    assert store.list_namespaces() == [("users", "a")]
    assert store.sweep_ttl() == 2
    assert list(StoreItem.objects.values_list("key", flat=True)) == ["forever"]


def test_search_refreshes_the_ttl_of_what_it_returns_only() -> None:
    store = DjangoStore()
    for key in ("a", "b"):
        store.put(("docs",), key, {"tag": key}, ttl=10)
    StoreItem.objects.update(expires_at=StoreItem.objects.get(key="a").expires_at - timedelta(minutes=5))
    before = {r.key: r.expires_at for r in StoreItem.objects.all()}
    store.search(("docs",), filter={"tag": "a"})
    after = {r.key: r.expires_at for r in StoreItem.objects.all()}
    assert after["a"] > before["a"] and after["b"] == before["b"]


def test_ttl_config_gives_defaults() -> None:
    store = DjangoStore(ttl={"default_ttl": 5, "refresh_on_read": False})
    store.put(("docs",), "k", {"v": 1})
    expires = StoreItem.objects.get(key="k").expires_at
    assert StoreItem.objects.get(key="k").ttl_minutes == 5
    store.get(("docs",), "k")
    assert StoreItem.objects.get(key="k").expires_at == expires
    store.get(("docs",), "k", refresh_ttl=True)
    assert StoreItem.objects.get(key="k").expires_at >= expires
    store.put(("docs",), "k2", {"v": 1}, ttl=None)
    assert StoreItem.objects.get(key="k2").expires_at is None


def test_omit_expired_false_returns_expired_items_until_swept() -> None:
    store = DjangoStore(ttl={"omit_expired": False})
    store.put(("docs",), "k", {"v": 1}, ttl=1)
    _expire(("docs",), "k")
    assert store.get(("docs",), "k", refresh_ttl=False) is not None
    assert store.sweep_ttl() == 1
    assert store.get(("docs",), "k") is None


def test_async_methods() -> None:
    index = {"embed": DeterministicFakeEmbedding(size=8), "dims": 8, "fields": ["text"]}
    store = DjangoStore(index=index)

    async def scenario() -> Any:
        await store.aput(("docs",), "k", {"text": "river"})
        got = await store.aget(("docs",), "k")
        found = await store.asearch(("docs",), query="river")
        namespaces = await store.alist_namespaces()
        await store.adelete(("docs",), "k")
        return got, found, namespaces, await store.aget(("docs",), "k")

    got, found, namespaces, gone = async_to_sync(scenario)()
    assert got.value == {"text": "river"} and [i.key for i in found] == ["k"]
    assert namespaces == [("docs",)] and gone is None


def test_the_sweep_task_deletes_expired_items() -> None:
    from agentmemory.contrib.langgraph.tasks import sweep_store_ttl

    store = DjangoStore()
    store.put(("docs",), "old", {"v": 1}, ttl=1)
    store.put(("docs",), "new", {"v": 2}, ttl=60)
    _expire(("docs",), "old")
    assert sweep_store_ttl.apply().get() == 1
    assert list(StoreItem.objects.values_list("key", flat=True)) == ["new"]


def test_full_text_finds_words_with_combining_marks_as_recall_does() -> None:
    # the store's index holds the text in recall's normal form (agentmemory.recall.text.search_text)
    store = DjangoStore()
    store.put(("docs",), "zurich", {"text": "Moving to Zu\u0308rich in May"})  # decomposed
    store.put(("docs",), "hindi", {"text": "उसने नमस्ते कहा"})
    store.put(("docs",), "other", {"text": "Staying in Basel"})
    assert [i.key for i in store.search(("docs",), query="Zürich")] == ["zurich"]
    assert [i.key for i in store.search(("docs",), query="नमस्ते")] == ["hindi"]


def test_a_search_prefix_matches_labels_exactly_in_case_too() -> None:
    """A namespace prefix names its labels exactly, as ``InMemoryStore`` compares them: on
    SQLite, whose ``LIKE`` ignores the case of ASCII letters, a search of ("users", "Alice")
    returned the items of ("users", "alice", ...), another user's memories."""
    ours, theirs = DjangoStore(), InMemoryStore()
    for store in (ours, theirs):
        store.put(("users", "alice", "memories"), "k1", {"text": "alice's note"})
        store.put(("users", "Alice", "memories"), "k2", {"text": "Alice's note"})
        store.put(("users", "ALICE"), "k3", {"text": "ALICE's note"})
        store.put(("users", "al_ce", "memories"), "k4", {"text": "a look-alike with a LIKE wildcard"})
    prefixes = [("users", "Alice"), ("users", "alice"), ("users", "ALICE"), ("users", "al_ce"), ("Users",)]
    for prefix in prefixes:
        found = sorted(i.key for i in ours.search(prefix))
        assert found == sorted(i.key for i in theirs.search(prefix)), prefix
        assert ours.list_namespaces(prefix=prefix) == theirs.list_namespaces(prefix=prefix), prefix
