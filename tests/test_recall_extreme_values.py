"""Stored values at the edges of their columns never make a recall fail.

The ranking boosts (importance, recency) and the recall counter are computed by the database
on PostgreSQL (``agentmemory.recall.fulltext.recall_facts``), and PostgreSQL raises where
Python gives 0 or infinity: ``0.25 * 5e-324`` and ``power(0.5, 2000)`` are "value out of range:
underflow", ``2147483647 + 1`` is "integer out of range". Any importance from 0.0 to 1.0 (the
column's check constraint), any date and time Python can hold, and any recall count the
column can hold must leave search working, through ``KnowledgeMemory.recall`` and
``GET /api/search/``, on every database.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from django.db import connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: the largest recall count the column holds on this database
MAX_COUNT = connection.ops.integer_field_range("PositiveIntegerField")[1]
FIRST = datetime(1, 1, 2, tzinfo=UTC)
LAST = datetime(9999, 12, 30, tzinfo=UTC)
CENTURY_AGO = datetime(1900, 1, 1, tzinfo=UTC)

importances = st.floats(min_value=0.0, max_value=1.0, allow_subnormal=True)
moments = st.datetimes(min_value=FIRST.replace(tzinfo=None), max_value=LAST.replace(tzinfo=None)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)
counts = st.integers(min_value=0, max_value=MAX_COUNT)


def _stored(memory: KnowledgeMemory, content: str, **columns: object) -> Fact:
    # persistent: a transient entry older than the log's days is out of recall anyway
    fact = memory.store(content, "travel", persistent=True).fact
    Fact.objects.filter(pk=fact.pk).update(**columns)
    return fact


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(importance=importances, created_at=moments, recall_count=counts, last_recalled_at=moments)
@example(importance=5e-324, created_at=FIRST, recall_count=MAX_COUNT, last_recalled_at=LAST)
@example(importance=2.2250738585072014e-308, created_at=LAST, recall_count=0, last_recalled_at=FIRST)
@example(importance=1e-300, created_at=CENTURY_AGO, recall_count=1, last_recalled_at=FIRST)
def test_recall_works_whatever_the_stored_values(  # type: ignore[no-untyped-def]
    importance, created_at, recall_count, last_recalled_at, django_capture_on_commit_callbacks
) -> None:
    owner = UserFactory(username="extremes")
    memory = KnowledgeMemory(owner)
    Fact.objects.filter(owner=owner).delete()
    odd = _stored(
        memory,
        "The ferry to the island leaves at noon",
        importance=importance,
        created_at=created_at,
        recall_count=recall_count,
        last_recalled_at=last_recalled_at,
    )
    plain = memory.store("The ferry back leaves at six", "travel", persistent=True).fact
    with django_capture_on_commit_callbacks(execute=True):
        hits = memory.recall("ferry island", k=5)
    assert {h.fact.pk for h in hits} == {odd.pk, plain.pk}
    assert all(math.isfinite(h.score) and h.score > 0 for h in hits)
    # the recall was recorded: counted up to the column's largest value, never past it
    assert Fact.objects.get(pk=odd.pk).recall_count == min(recall_count + 1, MAX_COUNT)

    client = APIClient()
    client.force_authenticate(owner)
    response = client.get("/api/search/", {"q": "ferry", "include": "facts"})
    assert response.status_code == 200, response.content
    assert {hit["id"] for hit in response.json()["facts"]} == {str(odd.uuid), str(plain.uuid)}


@pytest.mark.django_db(transaction=True)
def test_a_recall_outside_a_transaction_counts_up_to_the_largest_count() -> None:
    # In autocommit mode the ranking statement itself records the recall on PostgreSQL.
    owner = UserFactory(username="counted")
    memory = KnowledgeMemory(owner)
    fact = _stored(
        memory,
        "Allergic to peanuts",
        importance=5e-324,
        created_at=FIRST,
        recall_count=MAX_COUNT,
    )
    for _ in range(2):
        [hit] = memory.recall("peanuts")
        assert hit.fact.pk == fact.pk and math.isfinite(hit.score)
    assert Fact.objects.get(pk=fact.pk).recall_count == MAX_COUNT


def test_the_boost_orders_the_same_as_before_for_ordinary_values() -> None:
    # Bounding the arithmetic changes nothing for values that never came near the edges:
    # with equal relevance, the more important and the newer fact come first.
    owner = UserFactory(username="ordinary")
    memory = KnowledgeMemory(owner)
    now = datetime.now(UTC)
    year_ago = now.replace(year=now.year - 1)
    old = _stored(memory, "Ferry timetable, winter", importance=0.5, created_at=year_ago)
    new = _stored(memory, "Ferry timetable, summer", importance=0.5, created_at=now)
    vital = _stored(memory, "Ferry timetable, holidays", importance=1.0, created_at=year_ago)
    hits = memory.recall("ferry timetable", k=3, now=now)
    assert [h.fact.pk for h in hits] == [new.pk, vital.pk, old.pk]


@pytest.mark.parametrize(
    "boosts",
    [
        {"RECALL_IMPORTANCE_WEIGHT": w, "RECALL_RECENCY_WEIGHT": r, "RECALL_RECENCY_HALF_LIFE_DAYS": days}
        for w, r, days in [(1e6, 1e6, 1e6), (1e-300, 5e-324, 1e-9), (0, 0, 30)]
    ],
)
def test_extreme_values_under_every_setting_the_checks_accept(settings, boosts) -> None:  # type: ignore[no-untyped-def]
    from django.core.checks import run_checks

    settings.AGENTMEMORY = boosts
    assert not [m for m in run_checks() if m.id == "agentmemory.E206"]
    owner = UserFactory(username="boosted")
    memory = KnowledgeMemory(owner)
    facts = [
        _stored(memory, f"Ferry note {i}", importance=importance, created_at=created_at)
        for i, (importance, created_at) in enumerate(
            [(5e-324, FIRST), (1.0, LAST), (1e-300, datetime.now(UTC)), (0.0, CENTURY_AGO)]
        )
    ]
    hits = memory.recall("ferry note", k=10)
    assert {h.fact.pk for h in hits} == {f.pk for f in facts}
    assert all(math.isfinite(h.score) for h in hits)


@pytest.mark.parametrize("last", [2**63 - 1, 2**63 - 2])
def test_messages_at_the_largest_seq_are_found_and_recalled(last) -> None:  # type: ignore[no-untyped-def]
    # the places next to a hit (``RECALL_NEIGHBOUR_WEIGHTS``, the memory block's question
    # and reply) went past the seq column's largest value: SQLite's OverflowError,
    # PostgreSQL's "out of range for type bigint", a 500 on search
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation, Message

    user = UserFactory()
    conversation = Conversation.objects.create(owner=user)
    PersistentChatHistory(conversation).add_messages(
        [ChatMessage.human("hello there"), ChatMessage.ai("hello back")]
    )
    Message.objects.filter(conversation=conversation, seq=2).update(seq=last)
    Message.objects.filter(conversation=conversation, seq=1).update(seq=last - 1)
    Conversation.objects.filter(pk=conversation.pk).update(last_seq=last)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    found = client.get("/api/search/", {"q": "hello"})
    assert found.status_code == 200, found.content[:300]
    assert {hit["seq"] for hit in found.json()["messages"]} == {last - 1, last}
    other = Conversation.objects.create(owner=user)
    PersistentChatHistory(other).add_messages([ChatMessage.human("hello again")])
    window = client.get(f"/api/conversations/{other.uuid}/context/", {"memory_recall": "true"})
    assert window.status_code == 200, window.content[:300]
    assert "hello back" in window.json()["memory"]["text"]
