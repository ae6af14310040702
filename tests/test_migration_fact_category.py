"""The migration that composes stored fact categories (NFC), as new ones are stored: a
category stored decomposed before it is found by a filter or a "key: value" fact in either
form after it, and applying it again changes nothing."""

from __future__ import annotations

import pytest

from tests.helpers_migrations import migrate_to, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("agentmemory", "0038_fact_knowledge_block_index")]
AFTER = [("agentmemory", "0039_fact_category_composed")]


def test_stored_categories_are_composed_and_a_second_run_changes_nothing() -> None:
    apps = migrate_to(BEFORE)
    try:
        User = apps.get_model("auth", "User")
        Fact = apps.get_model("agentmemory", "Fact")
        owner = User.objects.create(username="alice")
        decomposed = Fact.objects.create(
            owner_id=owner.pk, content="Wohnort: Zürich", content_hash="a" * 64, category="perso\u0308nlich"
        )
        composed = Fact.objects.create(
            owner_id=owner.pk, content="Name: Alice", content_hash="b" * 64, category="persönlich"
        )
        ascii_only = Fact.objects.create(
            owner_id=owner.pk, content="Uses VS Code", content_hash="c" * 64, category="tools"
        )

        apps = migrate_to(AFTER)
        Fact = apps.get_model("agentmemory", "Fact")
        categories = dict(Fact.objects.values_list("pk", "category"))
        assert categories == {decomposed.pk: "persönlich", composed.pk: "persönlich", ascii_only.pk: "tools"}

        # as after ``migrate --fake`` back: the same operation again
        apps = migrate_to(BEFORE)
        apps = migrate_to(AFTER)
        Fact = apps.get_model("agentmemory", "Fact")
        assert dict(Fact.objects.values_list("pk", "category")) == categories
    finally:
        migrate_to_latest()


def test_a_fact_stored_decomposed_before_is_superseded_by_a_key_in_the_composed_form() -> None:
    from agentmemory.knowledge import KnowledgeMemory
    from tests.factories import UserFactory

    apps = migrate_to(BEFORE)
    try:
        Fact = apps.get_model("agentmemory", "Fact")
        owner = UserFactory()
        from agentmemory.knowledge import content_hash

        Fact.objects.create(
            owner_id=owner.pk,
            content="Wohnort: Zürich",
            content_hash=content_hash("Wohnort: Zürich"),
            category="perso\u0308nlich",
            persistent=True,
        )
        migrate_to_latest()
        km = KnowledgeMemory(owner)
        assert km.store("Wohnort: München", "persönlich", persistent=True).action == "superseded"
        assert km.get_persistent_facts() == {"persönlich": ["Wohnort: München"]}
    finally:
        migrate_to_latest()
