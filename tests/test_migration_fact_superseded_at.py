"""The migration that gives facts ``superseded_at``: facts superseded before it get the time
their successor was stored (never before their own), facts in force none; it applies again
after ``migrate --fake`` back past it, and going back removes the column and keeps the
full-text index working."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.helpers_migrations import migrate_to, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("agentmemory", "0039_fact_category_composed")]
AFTER = [("agentmemory", "0040_fact_superseded_at")]
MAY = datetime(2023, 5, 1, tzinfo=UTC)
JUNE = datetime(2023, 6, 1, tzinfo=UTC)


def _columns() -> set[str]:
    with connection.cursor() as cursor:
        return {c.name for c in connection.introspection.get_table_description(cursor, "agentmemory_fact")}


def test_superseded_facts_get_their_successors_time_and_the_migration_applies_again() -> None:
    apps = migrate_to(BEFORE)
    try:
        assert "superseded_at" not in _columns()
        User = apps.get_model("auth", "User")
        Fact = apps.get_model("agentmemory", "Fact")
        owner = User.objects.create(username="alice")
        new = Fact.objects.create(
            owner_id=owner.pk, content="Lives in Porto", content_hash="b" * 64, created_at=JUNE
        )
        old = Fact.objects.create(
            owner_id=owner.pk,
            content="Lives in Lisbon",
            content_hash="a" * 64,
            created_at=MAY,
            superseded_by=new,
        )
        # a successor stored before the fact it replaced (an import): never before the fact
        early = Fact.objects.create(
            owner_id=owner.pk, content="Works at Beta", content_hash="d" * 64, created_at=MAY
        )
        late = Fact.objects.create(
            owner_id=owner.pk,
            content="Works at Alpha",
            content_hash="c" * 64,
            created_at=JUNE,
            superseded_by=early,
        )

        apps = migrate_to(AFTER)
        Fact = apps.get_model("agentmemory", "Fact")
        times = dict(Fact.objects.values_list("pk", "superseded_at"))
        assert times == {new.pk: None, old.pk: JUNE, early.pk: None, late.pk: JUNE}

        # ``migrate --fake`` back past it, then forward again: no "already exists"
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(BEFORE, fake=True)
        migrate_to(AFTER)
        assert dict(Fact.objects.values_list("pk", "superseded_at")) == times

        # going back drops the column; the full-text index still follows the table
        migrate_to(BEFORE)
        assert "superseded_at" not in _columns()
        Fact = migrate_to(BEFORE).get_model("agentmemory", "Fact")
        Fact.objects.create(owner_id=owner.pk, content="Zeppelin pilot licence", content_hash="e" * 64)
    finally:
        migrate_to_latest()
    from agentmemory.knowledge import KnowledgeMemory

    assert [h.fact.content for h in KnowledgeMemory(owner.pk).recall("zeppelin licence")] == [
        "Zeppelin pilot licence"
    ]
