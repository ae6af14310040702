"""Pseudo-relevance feedback for questions about every instance (``agentmemory.recall.feedback``):
a count or a list finds the conversations that name an instance without the question's
words, through the words the first results share; other questions are searched once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.feedback import FEEDBACK_WORDS, asks_for_every, expansion_words, mixed, topic_words
from agentmemory.recall.memory import rank_messages, recall_memory
from tests.factories import UserFactory


def stored(owner: Any, *turns: str) -> Conversation:
    conv = Conversation.objects.create(owner=owner, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [(ChatMessage.human if i % 2 == 0 else ChatMessage.ai)(text) for i, text in enumerate(turns)]
    )
    return conv


def doctors(owner: Any) -> Conversation:
    """Two conversations that say "doctor" and one that only names a specialist, sharing
    the words "appointment", "specialist" and "prescribed" with the first two; and others."""
    stored(
        owner,
        "I went to see my doctor about the allergies; the specialist prescribed a nasal spray "
        "at the appointment.",
        "I hope it helps.",
    )
    stored(
        owner,
        "Another doctor visit today: at the appointment the specialist prescribed a cream for the rash.",
        "Good that you went.",
    )
    unnamed = stored(
        owner,
        "The cardiology specialist saw me at my appointment and prescribed pills for my blood pressure.",
        "Take them every morning.",
    )
    for topic in ("garden", "kayak", "pottery", "violin", "chess"):
        stored(owner, f"I spent the weekend on my {topic} and it was lovely.", "Sounds fun.")
    return unnamed


@pytest.mark.django_db
def test_a_count_question_finds_an_instance_that_shares_no_word_with_it() -> None:
    user = UserFactory()
    unnamed = doctors(user)
    hits = rank_messages(owner=user, query="How many doctors did I visit?", k=20)
    assert unnamed.pk in {hit.conversation_id for hit in hits}, [hit.content for hit in hits]
    block = recall_memory(owner=user, query="How many doctors did I visit?", max_tokens=2000)
    assert block is not None and "cardiology specialist" in block.text


@pytest.mark.django_db
def test_a_question_about_one_thing_is_searched_once(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    """The second search runs only for a question about every instance: it costs the
    search's statements again (full text: the ranking and the hits, and on SQLite the
    places); any other question costs what it did."""
    user = UserFactory()
    doctors(user)
    search = 2 if connection.vendor == "postgresql" else 3
    with django_assert_num_queries(search):
        rank_messages(owner=user, query="Which doctor prescribed the nasal spray?", k=20)
    with django_assert_num_queries(2 * search):
        rank_messages(owner=user, query="How many doctors did I visit?", k=20)


@pytest.mark.django_db
def test_no_second_search_when_the_first_results_share_no_word(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    stored(user, "My doctor is kind.", "Good.")
    stored(user, "Weekend plans: a long walk.", "Nice.")
    search = 2 if connection.vendor == "postgresql" else 3
    with django_assert_num_queries(search):
        hits = rank_messages(owner=user, query="How many doctors have I had?", k=20)
    assert [hit.content for hit in hits if hit.role == "human"] == ["My doctor is kind."]


@pytest.mark.parametrize(
    "query",
    [
        "How many doctors did I visit?",
        "how much did I spend on the trip in total?",
        "What is the total weight of the feed I bought?",
        "What is the order of the museums I visited?",
        "List all the books I read this year.",
        "How MANY\ttimes did I go running?",
    ],
)
def test_questions_about_every_instance(query: str) -> None:
    assert asks_for_every(query)


@pytest.mark.parametrize(
    "query",
    ["Which doctor prescribed the spray?", "When is the pottery class?", "What did I order at the cafe?", ""],
)
def test_questions_about_one_thing(query: str) -> None:
    assert not asks_for_every(query)


@dataclass(frozen=True)
class Hit:
    message_id: int
    content: str
    score: float
    role: str = "human"


def test_expansion_words_are_those_the_best_human_messages_share() -> None:
    hits = [
        Hit(1, "The specialist prescribed drops at my appointment, and the doctor agreed.", 3.0),
        Hit(2, "An assistant answer about the specialist and the appointment.", 2.9, role="ai"),
        Hit(3, "At the appointment 2024 the specialist prescribed a cream; the doctor smiled.", 2.0),
        Hit(4, "A lone word: giraffe.", 1.0),
    ]
    words = expansion_words("How many doctors did I visit?", hits)
    # shared by the two human messages; "doctor" is the question's own word (its rough stem),
    # "2024" a number, "the"/"at" stop words, "giraffe" in one message only
    assert set(words) == {"specialist", "prescribed", "appointment"}
    assert len(words) <= FEEDBACK_WORDS
    assert expansion_words("How many doctors?", hits[:1]) == []


def test_mixed_sums_each_searchs_scaled_scores() -> None:
    first = [Hit(1, "a", 4.0), Hit(2, "b", 2.0)]
    second = [Hit(3, "c", 10.0), Hit(2, "b", 10.0)]
    ranked = mixed(first, second, k=3)
    assert [hit.message_id for hit in ranked] == [2, 1, 3]
    assert [round(hit.score, 3) for hit in ranked] == [1.0, 1.0, 0.5]
    assert [hit.message_id for hit in mixed(first, [], k=1)] == [1]


def test_hits_keep_their_other_fields() -> None:
    when = datetime(2024, 5, 1, tzinfo=UTC)

    @dataclass(frozen=True)
    class Dated(Hit):
        created_at: datetime = when

    ranked = mixed([Dated(1, "a", 2.0)], [Dated(1, "a", 1.0)], k=1)
    assert ranked[0].created_at == when and ranked[0].content == "a"


def test_topic_words_are_the_question_words_most_first_results_hold() -> None:
    hits = [
        Hit(1, "I bought watercolor paper and finished two paintings.", 3.0),
        Hit(2, "An assistant answer about watercolor paintings.", 2.9, role="ai"),
        Hit(3, "The watercolor painting of the harbour is done.", 2.5),
        Hit(4, "Framing my watercolor paintings takes a week.", 2.0),
        Hit(5, "Another watercolor painting, of the bridge.", 1.5),
        Hit(6, "I bought chicken and paintings at the fair.", 1.0),
    ]
    # of the five best human messages (the assistant's is not one), four hold "watercolor" and
    # all five "paintings" (by rough stem, "paint"); two hold "bought": the verb names no topic
    assert topic_words("How many watercolor paintings have I finished or bought?", hits) == [
        "watercolor",
        "paintings",
    ]
    assert topic_words("How many watercolor paintings?", hits[:1]) == []
    assert topic_words("How many giraffes did I see?", hits) == []


def first_sessions(owner: Any, query: str) -> list[int]:
    """The conversations of ``owner``'s human messages ``rank_messages`` ranks for ``query``,
    in the order each first appears (LongMemEval's session ranking)."""
    order: list[int] = []
    for hit in rank_messages(owner=owner, query=query, k=100):
        if hit.role == "human" and hit.conversation_id not in order:
            order.append(hit.conversation_id)
    return order


@pytest.mark.django_db
def test_a_count_question_searches_again_by_its_topic_not_its_verbs() -> None:
    """LongMemEval's "How many model kits have I worked on or bought?": the session about
    "model tanks" shares the topic and the first results' words, sessions about other things
    bought share the verb. Searched again with the question's own words and the expansion, the
    things bought ranked above it (outside the first five sessions); with the topic words in
    their place it is among them."""
    user = UserFactory()
    kits = [
        stored(user, text, "Nice.")
        for text in (
            "I bought a Revell model kit of an F-15 and I am weathering it with washes.",
            "The model kit of the B-29 bomber is done: the weathering and the decals took a week.",
            "Another model kit on the bench, a Tamiya Spitfire; weathering the model kit is next.",
            "My model kit of a Zero fighter needs weathering and a coat of varnish.",
        )
    ]
    tanks = stored(
        user, "Any tips on weathering my model tanks? The Tiger needs rust and mud.", "Try pigments."
    )
    for thing in (
        "chicken breasts and a meal kit",
        "a 2TB hard drive",
        "new running shoes",
        "a first aid kit",
        "a bread maker",
        "a sewing kit",
    ):
        stored(user, f"I bought {thing} yesterday and I have been using it since.", "Great.")
    order = first_sessions(user, "How many model kits have I worked on or bought?")
    assert set(order[:5]) == {tanks.pk, *(kit.pk for kit in kits)}, order


@pytest.mark.django_db
def test_with_an_embedder_a_count_question_weighs_conversations_by_its_topic(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an embedding backend each hit is raised by its conversation's text as one
    document (``conversation_scores``). For a question about every instance that text is
    weighed by the question's topic, as the second search is: weighed by all its words, the
    conversations about other things bought rose with the verb "bought" (LongMemEval-S,
    hybrid: session recall_all@5 0.944 -> 0.949). Any other question is weighed by its words."""
    import agentmemory.recall.memory as memory

    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}
    weighed: list[str] = []
    scores = memory.conversation_scores

    def recording(hits: Any, query: str) -> dict[int, float]:
        weighed.append(query)
        return scores(hits, query)

    monkeypatch.setattr(memory, "conversation_scores", recording)
    user = UserFactory()
    for text in (
        "I bought a model kit of an F-15.",
        "The model kit of the B-29 is done.",
        "A model kit of a Spitfire, finished with a wash.",
        "My model kit of a Zero needs varnish.",
        "I bought chicken and a meal kit.",
    ):
        stored(user, text, "Nice.")
    rank_messages(owner=user, query="How many model kits have I worked on or bought?", k=20)
    rank_messages(owner=user, query="Which model kit needs varnish?", k=20)
    assert weighed == ["model", "Which model kit needs varnish?"]
