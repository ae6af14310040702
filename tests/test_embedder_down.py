"""An embedding service that is down never loses a fact nor fails the write that stores it:
the fact is stored without its vector (a warning is logged), found by full text, and
``manage.py rebuild_recall_index`` adds the vector later."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact, FactEmbedding
from agentmemory.recall.embedders import EmbeddingError
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

DOWN = {"EMBEDDER": "tests.test_embedder_down.DownEmbedder", "RECALL_BACKEND": "hybrid"}


class DownEmbedder:
    """An embedder whose service times out (what ``OpenAICompatibleEmbedder`` raises)."""

    model = "down"

    def embed(self, texts):  # type: ignore[no-untyped-def]
        raise EmbeddingError("embedding request failed: timed out")


def test_remember_with_a_failing_embedder_stores_the_fact_without_a_vector(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = DOWN
    user = UserFactory()
    KnowledgeMemory(user).remember("Lives in Oslo", "home", True)
    assert list(Fact.objects.values_list("content", flat=True)) == ["Lives in Oslo"]
    assert FactEmbedding.objects.count() == 0
    assert "stored without a vector" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the "key:" rule still supersedes without vectors
    KnowledgeMemory(user).store("city: Oslo")
    changed = KnowledgeMemory(user).store("city: Bergen")
    assert changed.action == "superseded" and len(changed.superseded_ids) == 1

    settings.AGENTMEMORY = {"RECALL_BACKEND": "fulltext"}
    assert [h.fact.content for h in KnowledgeMemory(user).recall("Oslo")][:1] == ["Lives in Oslo"]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}
    call_command("rebuild_recall_index", stdout=io.StringIO())
    assert FactEmbedding.objects.filter(fact__content="Lives in Oslo").count() == 1


def test_post_fact_with_a_failing_embedder_answers_201(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = DOWN
    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    created = client.post("/api/facts/", {"content": "Preferred language: Python"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["fact"]["content"] == "Preferred language: Python"
    assert Fact.objects.filter(owner=user, content="Preferred language: Python").exists()
    assert FactEmbedding.objects.count() == 0
