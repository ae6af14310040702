"""Variants of "a new fact replaces a different fact that is still true" (issue 20) where the
subject is the same and the thing is not: another entry of a to-do list or a calendar
("Call mom at 5pm" and "Call dad at 5pm", 0.85 alike by the local model), another day of
the user's ("Yoga on Monday" and "Yoga on Wednesday", 0.93), another thing liked, spoken or
owned ("Likes hiking" and "Likes swimming"). A changed time or amount of the same entry,
a negation and a single-valued change ("Lives in Berlin", then "Lives in Munich") still
supersede."""

from __future__ import annotations

import pytest

from agentmemory import knowledge
from agentmemory.knowledge import KnowledgeMemory
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _finding_alike(*texts: str) -> KnowledgeMemory:
    """A memory whose embedder finds ``texts`` alike (cosine 1.0)."""
    embedder = StubEmbedder({text: [1.0, 0.0, 0.0] for text in texts})
    return KnowledgeMemory(UserFactory(), embedder=embedder, supersede_similarity=0.85)


BOTH_TRUE = [
    # entries of a to-do list or a calendar written without a verb: every word but an amount
    # or a time names which entry
    ("Call mom at 5pm", "Call dad at 5pm"),  # 0.85 by the local model
    ("Buy milk", "Buy eggs"),
    ("Dentist appointment on Monday", "Haircut appointment on Monday"),
    ("Meeting with Bob at 10:00", "Meeting with Alice at 10:00"),
    ("Team standup at 9:30", "Team retro at 9:30"),
    # another day or date of the user's: another occasion
    ("Yoga on Monday", "Yoga on Wednesday"),  # 0.93
    ("Gym on Mondays", "Gym on Thursdays"),
    ("Meeting 2026-01-05 at 10:00", "Meeting 2026-01-06 at 10:00"),  # 0.99
    ("Dinner reservation at 7pm on Friday", "Dinner reservation at 7pm on Saturday"),  # 0.98
    ("I have a dentist appointment on May 3", "I have a dentist appointment on May 17"),
    # things liked, spoken, played, owned, learnt: they add up
    ("I like tea", "I like coffee"),
    ("I like tea", "I love coffee"),
    ("Likes hiking", "Likes swimming"),
    ("Speaks French", "Speaks German"),
    ("Tom plays piano", "Tom plays guitar"),
    ("Has a cat", "Has a dog"),
    ("I'm allergic to peanuts", "I'm allergic to shellfish"),
    ("User is learning Spanish", "User is learning French"),
    ("Likes \U0001f355", "Likes \U0001f363"),  # emoji are words too
    # a number after a noun that names one of several: another classroom, bus, court, server
    ("Meeting in classroom 12 on Monday", "Meeting in classroom 14 on Monday"),
    ("Take bus 42 at 7:50", "Take bus 17 at 7:50"),
    ("Tennis on court 3 at 6pm", "Tennis on court 5 at 6pm"),
    ("Deploy to server 3 on Friday", "Deploy to server 4 on Friday"),
]


@pytest.mark.parametrize(("old", "new"), BOTH_TRUE)
def test_similar_entries_of_the_same_subject_that_add_up_both_stay(old: str, new: str) -> None:
    km = _finding_alike(old, new)
    km.remember(old, "notes", persistent=True)
    result = km.store(new, "notes", persistent=True)
    assert result.action == "created", (old, new)
    assert sorted(f.content for f in km.live_facts()) == sorted([old, new])
    assert not knowledge.same_subject(old, new)


CHANGES = [
    ("Dinner reservation at 7pm on Friday", "Dinner reservation at 8pm on Friday"),  # the time
    ("Yoga at 7am on Mondays", "Yoga at 8am on Mondays"),
    ("Pickup for Lea at 8:15", "Pickup for Lea at 8:40"),
    ("Likes tea", "Dislikes tea"),  # the verb itself: a change of mind
    ("I like tea", "I don't like tea"),
    ("I'm vegetarian", "I'm not vegetarian"),
    ("Has a laptop with 8GB of memory", "Has a laptop with 16GB of memory"),  # an amount
    ("Lives in Berlin", "Lives in Munich"),  # one place at a time
    ("Works at Northwind", "Works at Contoso"),
    ("Alice's birthday is March 3", "Alice's birthday is March 4"),  # a named subject's date
    ("Uses Python 3.11", "Uses Python 3.12"),
    # an adverb of time ("now", "currently", "still") is no slot of its own
    ("I currently live in Berlin", "I now live in Munich"),
    ("User still works at Northwind", "User now works at Contoso"),
    ("I still eat meat", "I no longer eat meat"),
]


@pytest.mark.parametrize(("old", "new"), CHANGES)
def test_a_changed_time_amount_or_single_value_still_supersedes(old: str, new: str) -> None:
    km = _finding_alike(old, new)
    first = km.store(old, "notes", persistent=True).fact
    result = km.store(new, "notes", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (first.pk,)), (old, new)
    assert [f.content for f in km.live_facts()] == [new]
