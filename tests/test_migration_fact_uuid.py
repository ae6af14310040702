"""The migration that gives facts their public ``uuid``: every stored fact, history included,
gets its own value, and the column ends unique and non-null."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, transaction

from tests.helpers_migrations import migrate_to, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("agentmemory", "0013_model_calls")]
AFTER = [("agentmemory", "0014_fact_uuid")]


def test_existing_facts_get_distinct_uuids() -> None:
    apps = migrate_to(BEFORE)
    try:
        User = apps.get_model("auth", "User")
        Fact = apps.get_model("agentmemory", "Fact")
        owner = User.objects.create(username="alice")
        # More rows than one batch of the migration, and a superseded fact (history).
        Fact.objects.bulk_create(
            Fact(owner_id=owner.pk, content=f"fact {i}", content_hash=f"{i:064x}") for i in range(1005)
        )
        new = Fact.objects.create(owner_id=owner.pk, content="Lives in Bergen", content_hash="b" * 64)
        old = Fact.objects.create(
            owner_id=owner.pk, content="Lives in Oslo", content_hash="a" * 64, superseded_by_id=new.pk
        )

        apps = migrate_to(AFTER)
        Fact = apps.get_model("agentmemory", "Fact")
        uuids = list(Fact.objects.values_list("uuid", flat=True))
        assert len(uuids) == 1007 and None not in uuids and len(set(uuids)) == 1007
        assert all(isinstance(value, uuid.UUID) and value.version == 4 for value in uuids)
        assert Fact.objects.get(pk=old.pk).superseded_by_id == new.pk
        taken = Fact.objects.get(pk=new.pk).uuid
        with pytest.raises(IntegrityError), transaction.atomic():
            Fact.objects.filter(pk=old.pk).update(uuid=taken)
        with pytest.raises(IntegrityError), transaction.atomic():
            Fact.objects.filter(pk=old.pk).update(uuid=None)
        assert Fact.objects.create(owner_id=owner.pk, content="new", content_hash="c" * 64).uuid not in uuids
    finally:
        migrate_to_latest()
