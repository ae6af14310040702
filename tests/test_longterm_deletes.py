"""Deleting conversations and users reaches long-term memory rows correctly."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, FactEmbedding, MessageEmbedding
from agentmemory.recall import EmbeddingBackend, search_messages
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_deleting_a_conversation_keeps_facts_from_it_and_drops_its_message_vectors() -> None:
    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    (message,) = PersistentChatHistory(conv).add_messages([ChatMessage.human("I moved to Bergen")])
    EmbeddingBackend(StubEmbedder()).index(list(conv.messages.all()))
    fact = KnowledgeMemory(alice).store("Lives in Bergen", "personal", source_message=message.id).fact
    conv.delete()
    assert MessageEmbedding.objects.count() == 0
    assert Fact.objects.get(pk=fact.pk).source_message_id is None
    assert search_messages("Bergen", owner=alice) == []


def test_deleting_a_user_deletes_their_facts_vectors_and_index_entries() -> None:
    alice, bob = UserFactory(), UserFactory()
    embedder = StubEmbedder()
    KnowledgeMemory(alice, embedder=embedder).remember("Secret: 42", "misc", persistent=True)
    KnowledgeMemory(bob, embedder=embedder).remember("Secret: 7", "misc", persistent=True)
    alice.delete()
    assert list(Fact.objects.values_list("content", flat=True)) == ["Secret: 7"]
    assert FactEmbedding.objects.count() == 1
    assert [h.fact.content for h in KnowledgeMemory(bob).recall("secret")] == ["Secret: 7"]
