"""Semantic memory: the seed's examples as written (owner added), the ORM store, a custom
``MemoryStore``, and isolation between owners."""

from __future__ import annotations

from datetime import datetime

import pytest

from agentmemory.knowledge import InvalidFactError
from agentmemory.models import Fact
from agentmemory.recall import MemoryScopeError
from agentmemory.semantic import MemoryEntry, MemoryStore, ORMMemoryStore, SemanticMemory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_seed_example_get_context() -> None:
    user = UserFactory()
    memory = SemanticMemory(owner=user, max_results=3)

    memory.add("Customer prefers email communication.")
    memory.add("Account is on the Enterprise plan since March 2021.")
    memory.add("Last issue: billing discrepancy on invoice #1042.")

    context = memory.get_context("What plan am I on?")
    assert (
        context == "Relevant context from memory:\n  1. Account is on the Enterprise plan since March 2021."
    )


def test_seed_example_as_a_tool_and_in_a_system_prompt() -> None:
    from agentmemory.agents.tools import tool

    memory = SemanticMemory(owner=UserFactory(), max_results=3)
    memory.add("User prefers Python over JavaScript")
    memory.add("User is a senior engineer with 10 years experience")

    @tool
    def get_context(query: str) -> str:
        """Retrieve relevant context from memory."""
        return memory.get_context(query)

    assert get_context.name == "get_context"
    assert get_context.func("Which language, Python or JavaScript?") == (
        "Relevant context from memory:\n  1. User prefers Python over JavaScript"
    )

    def build_instructions() -> str:
        context = memory.get_context("senior engineer experience")
        return f"You are a support agent.\n\n{context}"

    assert build_instructions().endswith("  1. User is a senior engineer with 10 years experience")


def test_add_search_delete_clear_list_all() -> None:
    memory = SemanticMemory(owner=UserFactory())
    first = memory.add("Ships to Norway only", metadata={"category": "shipping", "source": "faq"})
    second = memory.add("Returns accepted within 30 days")
    assert isinstance(first, str) and memory.add("Ships to Norway only") == first
    assert [e.content for e in memory.list_all()] == [
        "Ships to Norway only",
        "Returns accepted within 30 days",
    ]
    found = memory.search("shipping to norway", top_k=5)
    assert [e.id for e in found] == [first]
    assert found[0].metadata["category"] == "shipping" and found[0].metadata["source"] == "faq"
    assert found[0].score is not None
    assert memory.delete(first) is True and memory.delete(first) is False
    assert memory.delete("not-an-id") is False
    assert [e.id for e in memory.list_all()] == [second]
    memory.clear()
    assert memory.list_all() == [] and memory.get_context("returns") == ""


def test_memories_of_one_owner_never_reach_another() -> None:
    mine, theirs = SemanticMemory(owner=UserFactory()), SemanticMemory(owner=UserFactory())
    entry = theirs.add("The safe combination is 12-34-56")
    assert mine.search("safe combination") == []
    assert mine.delete(entry) is False
    mine.clear()
    assert Fact.objects.count() == 1


def test_no_owner_and_no_store_is_refused() -> None:
    with pytest.raises(MemoryScopeError):
        SemanticMemory(max_results=3)
    with pytest.raises(ValueError):
        SemanticMemory(owner=UserFactory(), max_results=0)


def test_a_custom_store_as_in_the_seed() -> None:
    class DictStore(MemoryStore):
        def __init__(self) -> None:
            self.rows: dict[str, MemoryEntry] = {}

        def add(self, entry: MemoryEntry) -> str:
            self.rows[entry.id] = entry
            return entry.id

        def search(self, query: str, top_k: int = 5) -> list[MemoryEntry]:
            words = set(query.lower().split())
            hits = [e for e in self.rows.values() if words & set(e.content.lower().split())]
            return [MemoryEntry(id=e.id, content=e.content) for e in hits][:top_k]

        def delete(self, memory_id: str) -> bool:
            return self.rows.pop(memory_id, None) is not None

        def clear(self) -> None:
            self.rows.clear()

        def list_all(self) -> list[MemoryEntry]:
            return list(self.rows.values())

    memory = SemanticMemory(store=DictStore())
    memory_id = memory.add("likes tea")
    assert memory.get_context("tea please") == "Relevant context from memory:\n  1. likes tea"
    assert memory.delete(memory_id) and memory.list_all() == []
    assert isinstance(ORMMemoryStore(UserFactory()), MemoryStore)


@pytest.mark.parametrize(
    "metadata",
    [
        {"source": float("nan")},
        {"seen": datetime(2026, 1, 1)},
        {"tags": {"a", "b"}},
        {"note": "a\x00b"},
        {"note": "a\ud800b"},
        {1: "not a string key"},
    ],
)
def test_metadata_that_is_not_storable_json_stores_nothing(metadata) -> None:  # type: ignore[no-untyped-def]
    """The fact used to be stored first and its metadata written after: a refusal by the
    database (NaN, a NUL, a lone surrogate on PostgreSQL) or by the JSON encoder left the
    fact stored without its metadata; SQLite kept a NUL and a lone surrogate."""
    memory = SemanticMemory(UserFactory())
    with pytest.raises(InvalidFactError, match="metadata"):
        memory.add("Customer prefers email communication.", metadata)
    assert Fact.objects.count() == 0
    assert memory.list_all() == []
