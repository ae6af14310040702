"""Checks shared by the recall tests of text written in odd forms (``test_unicode_recall``,
``test_recall_punctuation``): a stored text is the first hit of a query among filler."""

from __future__ import annotations

import unicodedata
from typing import Any

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall import search_messages
from tests.factories import UserFactory

FILLER = ["Weather is fine today", "We discussed the budget", "Call the plumber on Monday"]


def assert_message_found(stored: str, query: str) -> None:
    """``stored``, a human message among ``FILLER`` turns of a new user, is ``query``'s first hit."""
    owner = UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    history = PersistentChatHistory(conv)
    for text in FILLER:
        history.add_messages([ChatMessage.human(text), ChatMessage.ai("Noted.")])
    history.add_messages([ChatMessage.human(stored), ChatMessage.ai("Noted.")])
    hits = search_messages(query, owner=owner, k=3)
    assert hits and hits[0].content == stored, [h.content for h in hits]


def assert_fact_found(stored: str, query: str, owner: Any = None) -> None:
    """``stored``, a fact among ``FILLER`` facts of ``owner`` (default: a new user), is
    ``query``'s first recall (facts are stored composed, NFC)."""
    knowledge = KnowledgeMemory(owner or UserFactory())
    for text in FILLER:
        knowledge.remember(text, "notes", persistent=True)
    knowledge.remember(stored, "notes", persistent=True)
    assert [hit.fact.content for hit in knowledge.recall(query, k=1)] == [
        unicodedata.normalize("NFC", stored)
    ]
