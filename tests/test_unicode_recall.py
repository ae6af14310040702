"""Recall of words whose letters carry combining marks: Indic scripts (vowel signs, viramas),
Arabic with vowel marks (harakat), Hebrew points, decomposed Latin ("Zu\\u0308rich"),
compatibility forms (full width, ligatures), invisible format characters inside a word
(zero-width spaces and joiners, soft hyphens) and letters whose diacritic is not a combining
mark (ß, Ł, ø, the dotless i, œ, the final sigma). Both databases' full-text indexes and the
Python side see text in one normalised form (``agentmemory.recall.text.search_text``), on
the index side and the query side, for rows stored before as well (migrations 0025 and 0033)."""

from __future__ import annotations

import unicodedata

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.recall import fulltext, search_messages
from agentmemory.recall.text import query_words, search_text
from agentmemory.semantic import SemanticMemory
from tests.factories import UserFactory
from tests.helpers_migrations import migrate_to, migrate_to_latest
from tests.helpers_recall import assert_fact_found, assert_message_found

FULL_WIDTH = "\uff46\uff55\uff4c\uff4c"  # "full" in full-width letters

#: (stored text, query, what is looked for): a word written one way, asked for another way
CASES = [
    ("Wir fliegen morgen nach Zu\u0308rich", "Zürich", "decomposed Latin, precomposed query"),
    ("Wir fliegen morgen nach Zürich", "Zu\u0308rich", "precomposed Latin, decomposed query"),
    ("Le café près de la gare", "cafe", "accents, query without them"),
    ("मुझे हिन्दी सीखनी है", "हिन्दी", "Devanagari vowel signs and virama"),
    ("আমি বাংলায় কথা বলি", "বাংলায়", "Bengali"),
    ("நான் தமிழ் பேசுவேன்", "தமிழ்", "Tamil"),
    ("كَتَبَ الطَّالِبُ الدَّرْسَ", "الطالب", "Arabic with harakat, query without"),
    ("كتب الطالب الدرس", "الطَّالِبُ", "Arabic without harakat, query with"),
    ("בְּרֵאשִׁית בָּרָא", "בראשית", "Hebrew points"),
    ("Ελληνικά μαθήματα την Τρίτη", "ελληνικα", "Greek accents"),
    (FULL_WIDTH + " text search is down", "full", "full-width letters"),
    ("The ﬁle server is down", "file", "a ligature"),
    ("The pass\u200bword is in the vault", "password", "a zero-width space"),
    ("می\u200cخواهم بروم", "میخواهم", "a Persian zero-width non-joiner"),  # noqa: RUF001
    ("Ein Super\u00admarkt in der Nähe", "Supermarkt", "a soft hyphen"),
    ("Fahrrad\u2060schloss gekauft", "Fahrradschloss", "a word joiner"),
    ("Die Straße ist gesperrt", "Strasse", "German sharp s, query with ss"),
    ("Die Strasse ist gesperrt", "Straße", "German ss, query with sharp s"),
    ("ΟΔΥΣΣΕΥΣ story", "Οδυσσευς", "Greek upper case, query with a final sigma"),
    ("\u0131spanak yemeği", "ispanak", "Turkish dotless i"),
    ("Łódź city trip", "Lodz", "Polish l with stroke"),
    ("Øresund bridge", "Oresund", "Danish o with stroke"),
    ("Œuvre complète", "oeuvre", "a ligature Unicode does not decompose"),
]
IDS = [case[2] for case in CASES]


@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_query_words_keep_marks_inside_words_in_one_normal_form(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    words = query_words(query)
    assert len(words) == 1, words  # a mark never splits a word
    assert words[0] in query_words(stored)


def test_search_text_is_one_form_for_every_spelling() -> None:
    assert search_text("Zu\u0308rich") == search_text("Zürich") == "Zurich"
    assert search_text("الطَّالِبُ") == "الطالب"
    assert search_text(FULL_WIDTH + " ﬁle") == "full file"
    assert search_text("हिन्दी") == "हिन्दी"  # Indic marks are letters of the word: kept
    assert search_text("plain ASCII") == "plain ASCII"


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_messages_are_found_whatever_form_their_marks_take(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    assert_message_found(stored, query)


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_facts_are_found_whatever_form_their_marks_take(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    owner = UserFactory()
    assert_fact_found(stored, query, owner)
    semantic = SemanticMemory(owner=owner, max_results=1)
    semantic.add(stored)
    assert [entry.content for entry in semantic.search(query, top_k=1)] == [
        unicodedata.normalize("NFC", stored)
    ]


@pytest.mark.django_db
def test_the_admin_message_search_finds_them_too(admin_client) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("मुझे हिन्दी सीखनी है")])
    page = admin_client.get("/admin/agentmemory/message/", {"q": "हिन्दी"})
    assert page.status_code == 200 and "मुझे हिन्दी सीखनी है" in page.content.decode()


@pytest.mark.django_db
def test_an_edit_and_a_delete_keep_the_index_in_step() -> None:
    owner = UserFactory()
    knowledge = KnowledgeMemory(owner)
    fact = knowledge.store("Flight to Zu\u0308rich", "travel", persistent=True).fact
    assert knowledge.recall("Zürich")
    knowledge.forget(fact.pk)
    assert knowledge.recall("Zürich") == []
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    [message] = PersistentChatHistory(conv).add_messages([ChatMessage.human("كَتَبَ الطَّالِبُ")])
    Message.objects.filter(pk=message.id).update(content="ذَهَبَ الْوَلَدُ")
    assert search_messages("الطالب", owner=owner) == []
    assert [h.content for h in search_messages("الولد", owner=owner)] == ["ذَهَبَ الْوَلَدُ"]


@pytest.mark.django_db(transaction=True)
def test_rows_stored_before_are_indexed_in_the_normal_form_by_the_migration() -> None:
    apps = migrate_to([("agentmemory", "0024_conversation_summary_window")])
    try:
        User = apps.get_model("auth", "User")
        Conv = apps.get_model("agentmemory", "Conversation")
        OldMessage = apps.get_model("agentmemory", "Message")
        owner = User.objects.create(username="alice")
        conv = Conv.objects.create(owner_id=owner.pk, agent_key="a")
        texts = ["मुझे हिन्दी सीखनी है", "Nach Zu\u0308rich", "كَتَبَ الطَّالِبُ"]
        for seq, text in enumerate(texts, start=1):
            OldMessage.objects.create(
                conversation_id=conv.pk, seq=seq, role="human", content=text, token_count=5
            )
    finally:
        migrate_to_latest()
    scope = Message.objects.filter(conversation__owner_id=owner.pk)
    for query, expected in (("हिन्दी", 1), ("Zürich", 2), ("الطالب", 3)):
        found = fulltext.search(scope, query, 5)
        assert [Message.objects.get(pk=pk).seq for pk, _score in found] == [expected], query
    # the index is rebuilt the same way by hand
    fulltext.rebuild()
    assert len(fulltext.search(scope, "हिन्दी", 5)) == 1


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
            OldMessage.objects.create(
                conversation_id=conv.pk, seq=seq, role="human", content=text, token_count=5
            )
    finally:
        migrate_to_latest()
    from agentmemory.models import Message

    scope = Message.objects.filter(conversation__owner_id=owner.pk)
    for query, expected in (("Strasse", 1), ("password", 2)):
        found = fulltext.search(scope, query, 5)
        assert [Message.objects.get(pk=pk).seq for pk, _score in found] == [expected], query
