"""Knowledge memory and semantic memory side by side: what each one's reads and deletes
reach, and the daily log of the knowledge seed (every entry, persistent or not)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentmemory.knowledge import KnowledgeMemory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


# -- the daily log ------------------------------------------------------------------------------


def test_recent_entries_hold_persistent_entries_too_as_the_seed_daily_log_does() -> None:
    """The knowledge seed writes every entry to the daily log, a persistent one as well as
    MEMORY.md, so ``get_recent_entries()`` lists both kinds, newest first; the context block
    still names a persistent fact once, under [Long-term Memory]."""
    km = KnowledgeMemory(UserFactory())
    now = timezone.now()
    km.store("Preferred language: Python", "preferences", persistent=True, now=now - timedelta(hours=3))
    km.store("Working on Project Atlas this week", "context", now=now - timedelta(hours=2))
    km.store(
        "Uses PostgreSQL for production databases", "technical", persistent=True, now=now - timedelta(hours=1)
    )
    entries = km.get_recent_entries()
    assert [(e["content"], e["persistent"]) for e in entries] == [
        ("Uses PostgreSQL for production databases", True),
        ("Working on Project Atlas this week", False),
        ("Preferred language: Python", True),
    ]
    context = km.build_context()
    assert context.count("Preferred language: Python") == 1
    assert context.count("Uses PostgreSQL") == 1
    recent = context.split("[Recent Memory]\n", 1)[1]
    assert "Python" not in recent and "PostgreSQL" not in recent


def test_recent_entries_keep_to_their_days_and_limit_for_both_kinds() -> None:
    km = KnowledgeMemory(UserFactory(), max_log_days=365)
    now = timezone.now()
    km.store("Old persistent", "facts", persistent=True, now=now - timedelta(days=40))
    km.store("Old transient", "context", now=now - timedelta(days=40))
    for i in range(3):
        km.store(f"Persistent {i}", "facts", persistent=True, now=now - timedelta(minutes=10 - i))
    assert [e["content"] for e in km.get_recent_entries(days=7)] == [
        "Persistent 2",
        "Persistent 1",
        "Persistent 0",
    ]
    assert [e["content"] for e in km.get_recent_entries(days=7, limit=2)] == ["Persistent 2", "Persistent 1"]
    assert {e["content"] for e in km.get_recent_entries(days=60)} >= {"Old persistent", "Old transient"}


def test_a_replaced_persistent_fact_leaves_the_recent_entries() -> None:
    km = KnowledgeMemory(UserFactory())
    km.remember("Preferred editor: Vim", "preferences", persistent=True)
    km.remember("Preferred editor: VS Code", "preferences", persistent=True)
    assert [e["content"] for e in km.get_recent_entries()] == ["Preferred editor: VS Code"]


def test_clearing_or_pruning_the_log_keeps_persistent_facts_out_of_it() -> None:
    """The seed's ``clear_logs()`` removes the daily logs and keeps MEMORY.md: the persistent
    fact stays (context, MEMORY.md) and leaves the recent entries; ``prune_logs()`` does the
    same to the log entries older than its window."""
    km = KnowledgeMemory(UserFactory())
    now = timezone.now()
    km.store("Name: Alice", "personal", persistent=True, now=now - timedelta(days=10))
    km.store("Prefers Python", "preferences", persistent=True)
    km.store("Working on Atlas", "context")
    assert km.prune_logs(max_days=5) == 0
    assert [e["content"] for e in km.get_recent_entries(days=30)] == ["Working on Atlas", "Prefers Python"]
    km.clear_logs()
    assert km.get_recent_entries(days=30) == []
    assert km.get_persistent_facts() == {"personal": ["Name: Alice"], "preferences": ["Prefers Python"]}
    assert "Prefers Python" in km.build_context()
