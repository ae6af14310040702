"""Facts that tie (the same score, importance and time) come back in one order, by id, on
every database: two identical requests must send the same memory block and knowledge
context, byte for byte, or a provider's prompt cache (which matches the request's prefix)
misses. The window of a large scope's newest facts (``recall.fulltext.FACT_WINDOW``) was cut
by time alone, so which of the facts stored at one moment it held was the database's choice;
the memory block listed facts said at one moment in the order of their scores."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from agentmemory.recall import fulltext
from agentmemory.recall.memory import recall_memory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_facts_stored_at_one_moment_beyond_the_window_are_recalled_newest_id_first(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(fulltext, "FACT_WINDOW", 20)  # PostgreSQL's window of the newest facts
    user = UserFactory()
    memory = KnowledgeMemory(user)
    now = timezone.now() - timedelta(hours=1)
    ids = [memory.store(f"Weather note {i}: rain again", "log", now=now).fact.pk for i in range(30)]
    assert Fact.objects.filter(pk__in=ids).values("created_at").distinct().count() == 1

    for _ in range(2):
        assert [h.fact.pk for h in memory.recall("rain", k=10)] == sorted(ids, reverse=True)[:10]


def test_the_memory_block_lists_facts_said_at_one_moment_in_id_order() -> None:
    """The block lists its facts oldest first; facts of one moment by id, not by score (the
    newer fact here scores higher: it is more important)."""
    user = UserFactory()
    memory = KnowledgeMemory(user)
    now = timezone.now() - timedelta(hours=1)
    older = memory.store("Caroline's favourite tea is oolong.", now=now, importance=0.2).fact
    newer = memory.store("Caroline's favourite cake is a lemon tart.", now=now, importance=0.9).fact

    blocks = [
        recall_memory(owner=user, query="Caroline's favourite tea and cake", max_tokens=400) for _ in "ab"
    ]

    assert blocks[0] is not None and blocks[1] is not None
    assert [i.fact_id for i in blocks[0].items if i.kind == "fact"] == [older.pk, newer.pk]
    assert blocks[0].text == blocks[1].text
