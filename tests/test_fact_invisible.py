"""A fact (or its category) of invisible characters only (a zero-width space, a soft hyphen,
a byte order mark, a joiner) is blank: shown as nothing in the knowledge block and in
``MEMORY.md``, and every such fact was a "repeat" of the first. It is refused like an empty
one, by ``remember()`` and by the API, and nothing is stored."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentmemory.knowledge import InvalidFactError, KnowledgeMemory
from agentmemory.models import Fact
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

INVISIBLE = ["\u200b", "\u00ad", "\ufeff", "\u2060\u200b\ufeff", "\u200c", "\u200d", " \u200b\n\u200b "]


@pytest.mark.parametrize("content", INVISIBLE)
def test_remember_refuses_a_fact_of_invisible_characters(content: str) -> None:
    km = KnowledgeMemory(UserFactory())
    with pytest.raises(InvalidFactError, match="content"):
        km.remember(content)
    with pytest.raises(InvalidFactError, match="category"):
        km.remember("Likes tea", category=content)
    assert not Fact.objects.exists()


def test_api_answers_400_for_a_fact_of_invisible_characters() -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    for content in INVISIBLE:
        answer = client.post("/api/facts/", {"content": content}, format="json")
        assert answer.status_code == 400, (content, answer.content)
        assert answer.json()["error"] == "invalid"
    assert not Fact.objects.exists()


def test_visible_text_with_invisible_characters_is_still_a_fact() -> None:
    km = KnowledgeMemory(UserFactory())
    assert km.store("\u200bLikes tea", "general").action == "created"
    assert km.store("\U0001f355", "general").action == "created"  # an emoji is seen
    assert km.store("\u0627\u0644\u0637\u0627\u0644\u0628", "general").action == "created"
