"""Words written between punctuation are found by any of their words, on both databases.

A query is made of the words between punctuation (``recall.text.word_runs``), as SQLite's
FTS5 tokenizer reads stored text. PostgreSQL's text-search parser read some runs as one
token of their own (an e-mail address, a host, a URL, a file path, a version, a signed or
decimal number) and left out whatever looked like an HTML tag, so on PostgreSQL those words
were never found (migration 0034). Variation selectors (the U+FE0F after an emoji) are left
out like other invisible characters: "coffee\\ufe0f" kept "coffee" from being found."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.recall import fulltext
from agentmemory.recall.text import query_words
from tests.factories import UserFactory
from tests.helpers_migrations import migrate_to, migrate_to_latest
from tests.helpers_recall import FILLER, assert_fact_found, assert_message_found

#: (stored text, query, what is looked for)
CASES = [
    ("My email is bob@example.com", "bob@example.com", "an e-mail address"),
    ("My email is bob@example.com", "example", "a word of an e-mail address"),
    ("The docs are on docs.example.org now", "example", "a host"),
    ("See https://wiki.acme.io/onboarding/laptop for setup", "onboarding laptop", "a URL path"),
    ("The config lives in /etc/nginx/sites.conf", "nginx", "a file path"),
    ("We upgraded to v2.7.1 yesterday", "v2 7", "a version"),
    ("Order #A-1234 arrived", "A-1234", "a code with a hyphen"),
    ("The flight is on 2024-05-01", "2024-05-01", "an ISO date"),
    ("Pi is 3.14159 roughly", "14159", "a decimal number"),
    ("My password hint is <blue cat>", "blue cat", "words in angle brackets"),
    ("Use <b>bold</b> for titles", "bold", "a word inside HTML tags"),
    ("Tom &amp; Jerry were there", "Jerry", "an HTML entity"),
    ("Lea\u2019s bike was stolen", "Lea's bike", "a curly apostrophe"),
    ("Send it by e\u2011mail please", "e-mail", "a non-breaking hyphen"),
    ("I love coffee\ufe0f in the morning", "coffee", "a variation selector"),
    ("\u2764\ufe0fParis forever", "Paris", "an emoji with its variation selector"),
]
IDS = [case[2] for case in CASES]


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_messages_are_found_by_the_words_between_punctuation(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    assert_message_found(stored, query)


@pytest.mark.django_db
@pytest.mark.parametrize(("stored", "query", "_kind"), CASES, ids=IDS)
def test_facts_are_found_by_the_words_between_punctuation(stored, query, _kind) -> None:  # type: ignore[no-untyped-def]
    assert_fact_found(stored, query)


#: texts mixing what the parsers read differently; every word of each must find it
MIXED = [
    "ping ops@team-7.example.co.uk or +1 (555) 010-2030 before 09:30",
    "build 1.2.3-rc.4 failed: see C:\\logs\\build_42.txt and ~/notes/todo.md",
    "<div class='card'>Rent: $1,250.00/mo (50% due 2025-01-15)</div>",
    "tags: #travel #food_court @maria_lopez [draft] {json: true} a|b x^2 `code`",
    "\u201cQuoted\u201d \u2014 dash\u2026 ellipsis \u2022 bullet \u2032prime",
]


@pytest.mark.django_db
def test_every_word_of_a_message_finds_it() -> None:
    owner = UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human(text) for text in FILLER + MIXED])
    scope = Message.objects.filter(conversation__owner=owner)
    missed = []
    for text in MIXED:
        for word in query_words(text):
            found = {Message.objects.get(pk=pk).content for pk, _score in fulltext.search(scope, word, 20)}
            if text not in found:
                missed.append((word, text))
    assert missed == []


@pytest.mark.django_db(transaction=True)
def test_rows_stored_before_are_indexed_again_by_the_migration() -> None:
    apps = migrate_to([("agentmemory", "0033_fulltext_invisible_and_folded_letters")])
    try:
        User = apps.get_model("auth", "User")
        Conv = apps.get_model("agentmemory", "Conversation")
        OldMessage = apps.get_model("agentmemory", "Message")
        OldFact = apps.get_model("agentmemory", "Fact")
        owner = User.objects.create(username="alice")
        conv = Conv.objects.create(owner_id=owner.pk, agent_key="a")
        texts = ["Mail bob@example.com today", "Hint: <blue cat>", "Plain words only"]
        for seq, text in enumerate(texts, start=1):
            OldMessage.objects.create(
                conversation_id=conv.pk, seq=seq, role="human", content=text, token_count=5
            )
        OldFact.objects.create(owner_id=owner.pk, content="Wiki at docs.example.org", category="notes")
    finally:
        migrate_to_latest()
    scope = Message.objects.filter(conversation__owner_id=owner.pk)
    for query, expected in (("example", 1), ("blue", 2), ("plain", 3)):
        found = fulltext.search(scope, query, 5)
        assert [Message.objects.get(pk=pk).seq for pk, _score in found] == [expected], query
    from agentmemory.models import Fact

    facts = Fact.objects.filter(owner_id=owner.pk)
    assert [Fact.objects.get(pk=pk).content for pk, _s in fulltext.search(facts, "example", 5)] == [
        "Wiki at docs.example.org"
    ]
