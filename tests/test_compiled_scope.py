"""The compiled SQL of a scope whose values alone vary (``agentmemory.recall.compiled``) and
the knowledge probe that uses it: the same statement and parameters as the queryset, the
same answers for every owner once cached, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from agentmemory.recall import compiled
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def probe_sql(memory: KnowledgeMemory, now: datetime) -> tuple[str, list[object]]:
    sql, params = memory.live_facts(now).order_by().values("pk")[:1].query.sql_with_params()
    return sql, list(params)


def holds(memory: KnowledgeMemory, now: datetime) -> bool:
    sql, params = memory.live_probe(now).sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS({sql})", params)
        return bool(cursor.fetchone()[0])


def test_probe_is_the_live_facts_statement_for_every_scope() -> None:
    compiled.clear()
    a, b = UserFactory(), UserFactory()
    memories = [
        KnowledgeMemory(a),
        KnowledgeMemory(a, agent_key="support", namespace="billing", max_log_days=3),
        KnowledgeMemory(b, agent_key="x" * 100, kind="semantic"),
        KnowledgeMemory(b, max_log_days=10**9),  # the cut-off at the earliest datetime
    ]
    for now in (NOW, NOW + timedelta(days=400, microseconds=7)):
        for memory in memories:
            assert memory.live_probe(now).sql_with_params() == probe_sql(memory, now)


def test_probe_answers_for_each_owner_once_cached() -> None:
    compiled.clear()
    with_fact, expired, old_log, without = UserFactory(), UserFactory(), UserFactory(), UserFactory()
    KnowledgeMemory(with_fact).remember("prefers tea", persistent=True)
    KnowledgeMemory(expired).remember("in Paris this week", ttl=timedelta(days=1))
    KnowledgeMemory(old_log).remember("asked about invoices")
    later = datetime.now(UTC) + timedelta(days=40)
    for owner, at, expected in [
        (without, later, False),
        (with_fact, later, True),
        (expired, later, False),  # expired by then
        (expired, datetime.now(UTC), True),
        (old_log, later, False),  # older than max_log_days
        (old_log, datetime.now(UTC), True),
    ]:
        memory = KnowledgeMemory(owner)
        assert holds(memory, at) is expected
        assert memory.live_facts(at).exists() is expected


def test_a_none_value_or_another_database_is_compiled_each_time() -> None:
    compiled.clear()

    def build(using: str, owner_id: object, agent_key: object) -> object:
        return Fact.objects.using(using).filter(owner_id=owner_id, agent_key=agent_key).values("pk")

    none = compiled.Scope("test.none", build, (1, None), "default")
    sql, params = none.queryset().query.sql_with_params()
    assert none.sql_with_params() == (sql, list(params))
    assert "IS NULL" in none.sql_with_params()[0]
    assert not compiled._CACHE
    given = compiled.Scope("test.given", build, (1, "a"), "default")
    given.sql_with_params()
    assert bool(compiled._CACHE) is (connection.vendor == "postgresql")
    other = compiled.Scope("test.given", build, (2, "b"), "default")
    sql, params = other.queryset().query.sql_with_params()
    assert other.sql_with_params() == (sql, list(params))
    assert sorted(map(str, params)) == ["2", "b"]


def test_a_subclass_changing_live_facts_gets_its_own_queryset() -> None:
    class Tagged(KnowledgeMemory):
        def live_facts(self, now=None):  # type: ignore[no-untyped-def]
            return super().live_facts(now).filter(category="tagged")

    compiled.clear()
    a, b = Tagged(UserFactory()), Tagged(UserFactory(), agent_key="support")
    for memory in (a, b, a):
        probe = memory.live_probe(NOW)
        sql, params = probe.order_by().values("pk")[:1].query.sql_with_params()
        assert (sql, list(params)) == probe_sql(memory, NOW)
    b.remember("prefers tea", category="tagged", persistent=True)
    assert b.live_probe().exists() and not a.live_probe().exists()
    assert not compiled._CACHE  # nothing of a subclass is kept
