"""Fact recall: its query count, when it records a recall, and on PostgreSQL the bounded
candidates of a large scope (the newest facts, and every fact holding a word rare among them)
without ever reaching another scope."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from agentmemory.recall import fulltext
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: queries of one recall inside a transaction: PostgreSQL ranks and reads in one statement;
#: SQLite ranks with FTS5, then reads the hits
RECALL_QUERIES = 1 if connection.vendor == "postgresql" else 2


@pytest.fixture
def alice():  # type: ignore[no-untyped-def]
    return UserFactory(username="alice")


def counters(*facts: Fact) -> list[tuple[int, bool]]:
    rows = Fact.objects.filter(pk__in=[f.pk for f in facts]).order_by("pk")
    return [(f.recall_count, f.last_recalled_at is not None) for f in rows]


def test_a_recall_costs_a_fixed_number_of_queries_and_is_recorded_on_commit(  # type: ignore[no-untyped-def]
    alice, django_assert_num_queries, django_capture_on_commit_callbacks
) -> None:
    km = KnowledgeMemory(alice)
    for i in range(30):
        km.store(f"Trip note {i}: the ferry to the island leaves at {i} o'clock", "travel")
    with django_capture_on_commit_callbacks() as callbacks, django_assert_num_queries(RECALL_QUERIES):
        hits = km.recall("ferry island", k=5)
    assert len(hits) == 5 and len(callbacks) == 1
    assert counters(*(h.fact for h in hits)) == [(0, False)] * 5  # nothing written yet
    with django_assert_num_queries(1):  # the update, once the transaction commits
        callbacks[0]()
    assert counters(*(h.fact for h in hits)) == [(1, True)] * 5
    others = Fact.objects.filter(owner=alice).exclude(pk__in=[h.fact.pk for h in hits])
    assert set(others.values_list("recall_count", flat=True)) == {0}


def test_a_recall_that_finds_nothing_writes_nothing(  # type: ignore[no-untyped-def]
    alice, django_assert_num_queries, django_capture_on_commit_callbacks
) -> None:
    KnowledgeMemory(alice).store("Likes green tea", "food")
    with django_capture_on_commit_callbacks() as callbacks, django_assert_num_queries(1):
        assert KnowledgeMemory(alice).recall("volcano") == []
    assert callbacks == []


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_recall_is_recorded_at_once_and_a_rollback_records_nothing(  # type: ignore[no-untyped-def]
    django_assert_num_queries,
) -> None:
    bob = UserFactory(username="bob")
    km = KnowledgeMemory(bob)
    fact = km.store("Allergic to peanuts", "health").fact
    # autocommit: on PostgreSQL the ranking statement records the recall itself
    with django_assert_num_queries(1 if connection.vendor == "postgresql" else 3):
        [hit] = km.recall("peanuts")
    assert hit.fact.pk == fact.pk and hit.fact.recall_count == 0  # the row as read
    assert counters(fact) == [(1, True)]
    with pytest.raises(RuntimeError), transaction.atomic():
        assert [h.fact.pk for h in km.recall("peanuts")] == [fact.pk]
        raise RuntimeError("the caller's transaction fails")
    assert counters(fact) == [(1, True)]  # a rolled back recall is not counted
    with transaction.atomic():
        km.recall("peanuts")
    assert counters(fact) == [(2, True)]


def test_boosts_order_the_hits_and_their_scores(alice) -> None:  # type: ignore[no-untyped-def]
    km = KnowledgeMemory(alice)
    now = timezone.now()
    old = km.store(
        "The spare key is under the blue flowerpot", "home", persistent=True, now=now - timedelta(days=300)
    ).fact
    important = km.store("The spare key is with the neighbour", "home", importance=1.0).fact
    plain = km.store("The spare key is in the garage", "home").fact
    hits = km.recall("spare key", now=now + timedelta(seconds=1))
    assert [h.fact.pk for h in hits] == [important.pk, plain.pk, old.pk]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score > hits[1].score > hits[2].score


# -- PostgreSQL: candidates of a large scope -------------------------------------------------


@pytest.fixture
def small_window(monkeypatch):  # type: ignore[no-untyped-def]
    """A window of 20 facts, so that a scope of a few dozen facts is a large one."""
    monkeypatch.setattr(fulltext, "FACT_WINDOW", 20)
    monkeypatch.setattr(fulltext, "FACT_RARE_IN_WINDOW", 2)
    monkeypatch.setattr(fulltext, "FACT_RARE_CAP", 10)


def fill(km: KnowledgeMemory, count: int, start: object, text: str = "Weather note {i}: rain again") -> None:
    for i in range(count):
        km.store(text.format(i=i), "log", now=start + timedelta(minutes=i))  # type: ignore[operator]


@pytest.mark.postgres
def test_an_old_fact_with_a_rare_word_is_found_beyond_the_window(alice, small_window) -> None:  # type: ignore[no-untyped-def]
    km = KnowledgeMemory(alice)
    start = timezone.now() - timedelta(days=2)
    adopted = km.store("Caroline adopted a rescue dog", "family", now=start - timedelta(days=1)).fact
    fill(km, 60, start)
    hits = km.recall("When did Caroline adopt the dog? Was there rain?", k=3)
    assert hits[0].fact.pk == adopted.pk
    # a word common in the window keeps to the window: the rain notes found are the newest
    rain = [h.fact.content for h in km.recall("rain", k=10)]
    assert rain == [f"Weather note {i}: rain again" for i in range(59, 49, -1)]


@pytest.mark.postgres
def test_the_rare_words_of_one_question_share_a_bounded_number_of_old_facts(  # type: ignore[no-untyped-def]
    alice, small_window, monkeypatch
) -> None:
    km = KnowledgeMemory(alice)
    start = timezone.now() - timedelta(days=3)
    words = ["zebra", "violin", "glacier", "pepper"]
    for w, word in enumerate(words):
        for i in range(12):
            km.store(f"Old {word} story {i}", "log", now=start + timedelta(minutes=12 * w + i))
    fill(km, 30, start + timedelta(days=1))  # the window holds none of those words
    facts = km.live_facts()
    # each of the four rare words may bring 10 facts (FACT_RARE_CAP); together at most 20
    monkeypatch.setattr(fulltext, "FACT_RARE_BUDGET", 20)
    found = [pk for pk, _score in fulltext._pg_fact_ids(facts, words, 100)]
    assert len(found) == 20
    per_word = Fact.objects.filter(pk__in=found).values_list("content", flat=True)
    assert sorted(sum(word in c for c in per_word) for word in words) == [5, 5, 5, 5]
    # fewer rare words than the budget allows at the cap each: the cap alone bounds them
    monkeypatch.setattr(fulltext, "FACT_RARE_BUDGET", 40)
    assert len(fulltext._pg_fact_ids(facts, words, 100)) == 40
    assert len(fulltext._pg_fact_ids(facts, words[:2], 100)) == 20


@pytest.mark.postgres
def test_a_scope_within_the_window_is_ranked_exactly(alice, small_window) -> None:  # type: ignore[no-untyped-def]
    km = KnowledgeMemory(alice)
    for i, text in enumerate(
        [
            "Melanie painted a sunset over the lake",
            "Melanie ran a charity race for mental health",
            "Caroline painted a portrait of her grandmother",
            "The lake was cold but the sunset was lovely",
            "Caroline went to a support group",
        ]
        * 3
    ):
        km.store(f"{text} ({i})", "log")
    words = fulltext.query_words("What did Melanie paint at the lake?")
    facts = km.live_facts()
    bounded, exact = fulltext._pg_fact_ids(facts, words, 50), fulltext._pg_bm25(facts, words, 50)
    assert [pk for pk, _ in bounded] == [pk for pk, _ in exact] and len(exact) == 12
    assert [score for _, score in bounded] == pytest.approx([score for _, score in exact])


@pytest.mark.postgres
def test_large_look_alike_scopes_never_leak(small_window) -> None:  # type: ignore[no-untyped-def]
    owner, other = UserFactory(username="owner"), UserFactory(username="other")
    start = timezone.now() - timedelta(days=1)
    scopes = {
        "mine": KnowledgeMemory(owner, agent_key="bot", namespace="ns"),
        "ns_": KnowledgeMemory(owner, agent_key="bot", namespace="ns_"),
        "NS": KnowledgeMemory(owner, agent_key="bot", namespace="NS"),
        "no agent": KnowledgeMemory(owner, namespace="ns"),
        "bot%": KnowledgeMemory(owner, agent_key="bot%", namespace="ns"),
        "other owner": KnowledgeMemory(other, agent_key="bot", namespace="ns"),
    }
    for name, km in scopes.items():
        # each scope is larger than the window and holds a fact with the same rare word
        km.store(f"The zeppelin code of {name} is 1234", "secret", now=start - timedelta(days=1))
        fill(km, 30, start)
    mine = scopes["mine"]
    hits = mine.recall("zeppelin code rain", k=50)
    assert {h.fact.pk for h in hits} <= set(mine.all_facts().values_list("pk", flat=True))
    assert [h.fact.content for h in hits if "zeppelin" in h.fact.content] == [
        "The zeppelin code of mine is 1234"
    ]


@pytest.mark.postgres
def test_words_that_postgresql_drops_find_nothing_and_fail_nothing(alice, small_window) -> None:  # type: ignore[no-untyped-def]
    km = KnowledgeMemory(alice)
    fill(km, 30, timezone.now() - timedelta(days=1))
    fact = km.store("Don fixed the bike", "people").fact
    assert km.recall("don") == []  # "don" is an English stop word for PostgreSQL
    assert [h.fact.pk for h in km.recall("Don's bike")] == [fact.pk]


@pytest.mark.postgres
def test_the_fact_index_has_no_pending_list() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'agentmemory_fact_fts_idx'")
        (options,) = cursor.fetchone()
    assert "fastupdate=off" in options
