"""Variants of fixed faults of memory that still failed: words lost to recall where an
invisible format character sits inside them or a letter's diacritic is not a combining mark
(``agentmemory.recall.text.search_text``, migration 0033)."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall import fulltext, search_messages
from agentmemory.recall.text import query_words
from agentmemory.semantic import SemanticMemory
from tests.factories import UserFactory
from tests.helpers_migrations import migrate_to, migrate_to_latest

#: (stored text, query, what is looked for): a word written one way, asked for another way
CASES = [
    ("The pass\u200bword is in the vault", "password", "a zero-width space"),
    ("می\u200cخواهم بروم", "میخواهم", "a Persian zero-width non-joiner"),
    ("Ein Super\u00admarkt in der Nähe", "Supermarkt", "a soft hyphen"),
    ("Fahrrad\u2060schloss gekauft", "Fahrradschloss", "a word joiner"),
    ("Die Straße ist gesperrt", "Strasse", "German sharp s, query with ss"),
    ("Die Strasse ist gesperrt", "Straße", "German ss, query with sharp s"),
    ("ΟΔΥΣΣΕΥΣ story", "Οδυσσευς", "Greek upper case, query with a final sigma"),
    ("ıspanak yemeği", "ispanak", "Turkish dotless i"),
    ("Łódź city trip", "Lodz", "Polish l with stroke"),
    ("Øresund bridge", "Oresund", "Danish o with stroke"),
    ("Œuvre complète", "oeuvre", "a ligature Unicode does not decompose"),
]
IDS = [case[2] for case in CASES]
FILLER = ["Weather is fine today", "We discussed the budget", "Call the plumber on Monday"]


@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_query_words_are_one_word_in_the_stored_texts_form(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    words = query_words(query)
    assert len(words) == 1 and words[0] in query_words(stored), (words, query_words(stored))


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_messages_and_facts_are_found_however_the_word_is_written(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    owner = UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    history = PersistentChatHistory(conv)
    knowledge = KnowledgeMemory(owner)
    for text in FILLER:
        history.add_messages([ChatMessage.human(text), ChatMessage.ai("Noted.")])
        knowledge.remember(text, "notes", persistent=True)
    history.add_messages([ChatMessage.human(stored), ChatMessage.ai("Noted.")])
    knowledge.remember(stored, "notes", persistent=True)
    hits = search_messages(query, owner=owner, k=3)
    assert hits and hits[0].content == stored, [h.content for h in hits]
    assert [hit.fact.content for hit in knowledge.recall(query, k=1)] == [stored]
    semantic = SemanticMemory(owner=owner, max_results=1)
    semantic.add(stored)
    assert [entry.content for entry in semantic.search(query, top_k=1)] == [stored]


@pytest.mark.django_db(transaction=True)
def test_rows_stored_before_are_indexed_again_by_the_migration() -> None:
    apps = migrate_to([("agentmemory", "0032_message_fulltext_no_pending_list_again")])
    try:
        User = apps.get_model("auth", "User")
        Conv = apps.get_model("agentmemory", "Conversation")
        OldMessage = apps.get_model("agentmemory", "Message")
        owner = User.objects.create(username="alice")
        conv = Conv.objects.create(owner_id=owner.pk, agent_key="a")
        for seq, text in enumerate(["Die Straße ist gesperrt", "The pass\u200bword"], start=1):
            OldMessage.objects.create(conversation_id=conv.pk, seq=seq, role="human", content=text, token_count=5)
    finally:
        migrate_to_latest()
    from agentmemory.models import Message

    scope = Message.objects.filter(conversation__owner_id=owner.pk)
    for query, expected in (("Strasse", 1), ("password", 2)):
        found = fulltext.search(scope, query, 5)
        assert [Message.objects.get(pk=pk).seq for pk, _score in found] == [expected], query
