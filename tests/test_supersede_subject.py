"""A new fact replaces an old one only when both are about the same subject: a "key: value"
fact's key, never a clock time, a URL or a ratio; and for facts found similar by their
embeddings, the same subject and one changed value, never only similar words."""

from __future__ import annotations

import pytest

from agentmemory import knowledge
from agentmemory.knowledge import KnowledgeMemory, fact_key
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ("Preferred language: Python", "preferred language"),
        ("Preferred  language :  Rust", "preferred language"),
        ("Pickup time: 8:15", "pickup time"),
        ("Wi-Fi password: hunter2", "wi-fi password"),
        ("Pickup at 8:15 for Lea", None),
        ("Meeting moved to 14:30 on Friday", None),
        ("Lunch 12:00-13:00 at the canteen", None),
        ("Docs live at https://example.com/docs", None),
        ("https://example.com/status is the status page", None),
        ("mailto:alice@example.com works best", None),
        ("Screen ratio 16:9 for the slides", None),
        ("The score was 3:2", None),
        ("Bible verse John 3:16 is her favourite", None),
        ("Runs on localhost:8000", None),
    ],
)
def test_a_key_is_text_before_a_colon_and_a_space_never_a_time_url_or_ratio(content, key) -> None:  # type: ignore[no-untyped-def]
    assert fact_key(content) == key


def test_two_pickups_at_different_times_for_different_children_both_stay() -> None:
    km = KnowledgeMemory(UserFactory())
    km.remember("Pickup at 8:15 for Lea", "family", persistent=True)
    result = km.store("Pickup at 8:40 for Tom", "family", persistent=True)
    assert result.action == "created"
    assert km.get_persistent_facts() == {"family": ["Pickup at 8:15 for Lea", "Pickup at 8:40 for Tom"]}


def test_urls_and_ratios_of_different_things_both_stay() -> None:
    km = KnowledgeMemory(UserFactory())
    km.remember("https://status.example.com shows outages", "links", persistent=True)
    km.remember("https://docs.example.com holds the manual", "links", persistent=True)
    km.remember("Slides use 16:9", "formats", persistent=True)
    km.remember("Photos use 4:3", "formats", persistent=True)
    assert len(km.live_facts()) == 4


def test_a_real_key_still_supersedes() -> None:
    km = KnowledgeMemory(UserFactory())
    old = km.store("Pickup time: 8:15", "family", persistent=True).fact
    result = km.store("Pickup time: 8:40", "family", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (old.pk,))


#: one vector for every text in a group: the embedder finds them all alike (cosine 1.0), as
#: sentence embeddings find "my sister lives in Lisbon" and "my brother lives in Lisbon"
ALIKE = [1.0, 0.0, 0.0]


def memory_finding_alike(*texts: str) -> KnowledgeMemory:
    embedder = StubEmbedder({text: ALIKE for text in texts})
    return KnowledgeMemory(UserFactory(), embedder=embedder, supersede_similarity=0.85)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("My sister lives in Lisbon", "My brother lives in Lisbon"),
        ("Alice's birthday is March 3", "Bob's birthday is March 3"),
        ("Pickup at 8:15 for Lea", "Pickup at 8:40 for Tom"),
        ("Lea's school starts at 8:00", "Tom's school starts at 8:00"),
        ("My older sister works at Google", "My younger sister works at Google"),
        ("Favourite colour is blue", "Favourite food is sushi"),
        ("The dentist is on Monday at 9", "The plumber is on Tuesday at 9"),
        ("James works at Google", "Thomas works at Google"),
        ("Slides use 16:9", "Photos use 4:3"),
        ("Room 101 opens at 9", "Room 205 opens at 9"),
        ("Has two cats", "Has two dogs"),
        ("Has one cat", "Has two dogs"),
        # a number naming which one, before a verb in "-s": another team, group, patient
        ("Team 2 handles billing", "Team 3 handles billing"),
        ("Group 3 meets on Tuesdays", "Group 4 meets on Tuesdays"),
        ("Patient 4 needs surgery", "Patient 5 needs surgery"),
        ("Player 7 scores most goals", "Player 9 scores most goals"),
        ("Owes Tom 50 dollars", "Owes Ann 20 dollars"),
    ],
)
def test_similar_facts_about_different_subjects_both_stay(old, new) -> None:  # type: ignore[no-untyped-def]
    km = memory_finding_alike(old, new)
    km.remember(old, "people", persistent=True)
    result = km.store(new, "people", persistent=True)
    assert result.action == "created", (old, new)
    assert sorted(f.content for f in km.live_facts()) == sorted([old, new])
    assert not knowledge.same_subject(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("My sister lives in Lisbon", "My sister lives in Porto"),
        ("My sister lives in Lisbon", "My sister now lives in Porto"),
        ("I live in Lisbon", "I moved to Porto"),
        ("User prefers dark mode", "User prefers light mode"),
        ("Alice works at Google", "Alice joined Stripe"),
        ("Alice's birthday is March 3", "Alice's birthday is March 4"),
        ("Pickup for Lea at 8:15", "Pickup for Lea at 8:40"),
        ("Likes spicy food", "Dislikes spicy food"),
        ("Works as a data engineer at Northwind", "Started a new job at Contoso as a platform engineer"),
        # an amount in a plural unit: "hours" after a number is no verb naming "works 40"
        ("Works 40 hours a week", "Works 32 hours a week"),
        ("Sleeps 7 hours a night", "Sleeps 6 hours a night"),
        ("Room 101 opens at 9", "Room 101 opens at 10"),
        # numbers written out are amounts, as digits are
        ("Has two cats", "Has three cats"),
        # the unit counted is the same word in the singular and the plural
        ("Has one cat", "Has two cats"),
        ("Has 1 dog", "Has 2 dogs"),
        ("Owns three bikes", "Owns one bike"),
    ],
)
def test_a_changed_value_of_the_same_subject_supersedes(old, new) -> None:  # type: ignore[no-untyped-def]
    km = memory_finding_alike(old, new)
    first = km.store(old, "people", persistent=True).fact
    result = km.store(new, "people", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (first.pk,)), (old, new)
    assert [f.content for f in km.live_facts()] == [new]
    assert knowledge.same_subject(old, new)


def test_the_most_similar_fact_of_the_same_subject_is_the_one_replaced() -> None:
    """A more similar fact about another subject does not shield the one to replace."""
    embedder = StubEmbedder(
        {
            "My brother lives in Porto": [1.0, 0.0, 0.0],
            "My sister lives in Lisbon": [0.9, 0.43589, 0.0],
            "My sister lives in Porto": [1.0, 0.0, 0.0],
        }
    )
    km = KnowledgeMemory(UserFactory(), embedder=embedder, supersede_similarity=0.85)
    brother = km.store("My brother lives in Porto", "family", persistent=True).fact
    sister = km.store("My sister lives in Lisbon", "family", persistent=True).fact
    result = km.store("My sister lives in Porto", "family", persistent=True)
    assert result.superseded_ids == (sister.pk,)
    assert sorted(f.pk for f in km.live_facts()) == sorted([brother.pk, result.fact.pk])


@pytest.mark.parametrize(
    ("content", "subject"),
    [
        ("My sister lives in Lisbon", ("my", "sister")),
        ("My older sister's school is far", ("my", "older")),
        ("Alice's birthday is March 3", ("alice's", "birthday")),
        ("Alice works at Google", ("alice",)),
        ("Lea is 7", ("lea",)),
        ("I live in Lisbon", ("i",)),
        ("User prefers dark mode", ("user",)),
        ("Likes spicy food", ()),
        ("Pickup at 8:15 for Lea", ()),
        ("", ()),
    ],
)
def test_the_subject_is_the_leading_words_that_name_it(content, subject) -> None:  # type: ignore[no-untyped-def]
    assert knowledge.fact_subject(content) == subject


def test_the_local_embedding_model_finds_a_sister_and_a_brother_alike_and_both_stay() -> None:
    """With the real local model the two sentences are 0.88 alike, above the default 0.85:
    the similarity alone made the brother replace the sister."""
    from agentmemory.recall.local import MiniLMEmbedder

    km = KnowledgeMemory(UserFactory(), embedder=MiniLMEmbedder())
    km.remember("My sister lives in Lisbon", "family", persistent=True)
    assert km.store("My brother lives in Lisbon", "family", persistent=True).action == "created"
    both = ["My brother lives in Lisbon", "My sister lives in Lisbon"]
    assert sorted(f.content for f in km.live_facts()) == both
