"""Knowledge memory and semantic memory side by side: what each one's reads and deletes
reach, and the daily log of the knowledge seed (every entry, persistent or not)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from agentmemory.semantic import SemanticMemory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


# -- two memories of one user ------------------------------------------------------------------


def test_semantic_memory_lists_and_clears_only_its_own_entries() -> None:
    """``SemanticMemory(owner).clear()`` deleted the user's knowledge facts (the agent's
    ``remember`` tool writes those) and ``list_all()`` returned them: the two memories shared
    the rows of one scope."""
    user = UserFactory()
    knowledge = KnowledgeMemory(user)
    knowledge.remember("Preferred language: Python", "preferences", persistent=True)
    knowledge.remember("Working on Project Atlas this week", "context")
    semantic = SemanticMemory(owner=user)
    semantic.add("Customer prefers email communication.")
    assert [e.content for e in semantic.list_all()] == ["Customer prefers email communication."]
    assert semantic.search("Python language") == []
    semantic.clear()
    assert semantic.list_all() == []
    assert knowledge.get_persistent_facts() == {"preferences": ["Preferred language: Python"]}
    assert [e["content"] for e in knowledge.get_recent_entries()] == [
        "Working on Project Atlas this week",
        "Preferred language: Python",
    ]


def test_knowledge_memory_never_reads_or_deletes_semantic_entries() -> None:
    user = UserFactory()
    semantic = SemanticMemory(owner=user, agent_key="support", namespace="acme")
    entry_id = semantic.add("Account is on the Enterprise plan since March 2021.")
    knowledge = KnowledgeMemory(user, agent_key="support", namespace="acme")
    assert knowledge.build_context() == ""
    assert knowledge.recall("Enterprise plan") == []
    assert knowledge.get_recent_entries() == []
    assert knowledge.forget(int(entry_id)) == 0
    knowledge.clear()
    assert [e.id for e in semantic.list_all()] == [entry_id]
    # the same text in both memories is one entry in each, not a repeat of the other
    result = knowledge.store("Account is on the Enterprise plan since March 2021.", persistent=True)
    assert result.action == "created"
    assert semantic.add("Account is on the Enterprise plan since March 2021.") == entry_id
    assert Fact.objects.filter(owner=user).count() == 2
    semantic.clear()
    plan = "Account is on the Enterprise plan since March 2021."
    assert knowledge.get_persistent_facts() == {"general": [plan]}


def test_a_changed_semantic_entry_supersedes_only_semantic_entries() -> None:
    user = UserFactory()
    knowledge = KnowledgeMemory(user)
    knowledge.remember("Plan: Team", "general", persistent=True)
    semantic = SemanticMemory(owner=user)
    semantic.add("Plan: Enterprise")
    assert knowledge.get_persistent_facts() == {"general": ["Plan: Team"]}
    semantic.add("Plan: Business")
    assert [e.content for e in semantic.list_all()] == ["Plan: Business"]
    assert knowledge.get_persistent_facts() == {"general": ["Plan: Team"]}


def test_the_api_shows_which_memory_a_fact_belongs_to_and_forgets_either() -> None:
    from rest_framework.test import APIClient

    user = UserFactory()
    KnowledgeMemory(user).remember("Prefers dark mode", "preferences", persistent=True)
    SemanticMemory(owner=user).add("Ships to Norway only")
    client = APIClient()
    client.force_authenticate(user)
    rows = client.get("/api/facts/").json()["results"]
    assert sorted((r["content"], r["kind"]) for r in rows) == [
        ("Prefers dark mode", "knowledge"),
        ("Ships to Norway only", "semantic"),
    ]
    semantic_row = next(r for r in rows if r["kind"] == "semantic")
    assert client.delete(f"/api/facts/{semantic_row['id']}/").status_code == 204
    assert SemanticMemory(owner=user).list_all() == []
    assert KnowledgeMemory(user).get_persistent_facts() == {"preferences": ["Prefers dark mode"]}


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
