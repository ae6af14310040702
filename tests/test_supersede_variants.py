"""Variants of "a new fact replaces a different fact that is still true" (issue 20) drawn
from peer reports: similar embeddings retired still-true facts about other things
(headroomlabs-ai/headroom#2187, getzep/graphiti#1728, cyzus/suzent#34). A fact replaces
another by similarity only when both are about the same subject; where the subject cannot
be read (a script other than Latin) or the facts name different things (another room
number, another flight code, another "key:"), both stay."""

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


#: pairs about different things, both still true; the local model finds most of them alike
#: above the default 0.85 (in brackets)
DIFFERENT_THINGS = [
    # another numbered thing: the number names which one
    ("The projector in Room 101 is broken", "The projector in Room 205 is broken"),  # 0.90
    ("Room 101: projector broken", "Room 205: projector broken"),  # 0.94
    ("Order #1042 has shipped", "Order #1043 has shipped"),  # 0.95
    ("The team meets in Room 101 on Mondays", "The team meets in Room 205 on Mondays"),
    ("Booked seat 14C on the flight", "Booked seat 22A on the flight"),
    ("Parking spot P12 belongs to Lea", "Parking spot P14 belongs to Lea"),
    # another key: the key is what a "key: value" fact is about
    ("Wi-Fi password (office): hunter2", "Wi-Fi password (home): hunter2"),
    # other languages: the subject is named by words the English rule did not know
    ("Mi hermana vive en Lisboa", "Mi hermano vive en Lisboa"),  # 0.98
    ("Ma sœur habite à Lisbonne", "Mon frère habite à Lisbonne"),  # 0.88
    ("Meine Schwester wohnt in Lissabon", "Mein Bruder wohnt in Lissabon"),
    ("Mia sorella vive a Lisbona", "Mio fratello vive a Lisbona"),
    ("Minha irmã mora em Lisboa", "Meu irmão mora em Lisboa"),
    # scripts the subject rule does not read: the whole sentence was one "word"
    ("Моя сестра живёт в Лиссабоне", "Мой брат живёт в Лиссабоне"),  # 0.92
    ("我妹妹住在里斯本", "我弟弟住在里斯本"),  # 1.0: the model knows neither character
    ("妹は東京に住んでいます", "弟は東京に住んでいます"),
]


@pytest.mark.parametrize(("old", "new"), DIFFERENT_THINGS)
def test_similar_facts_about_different_things_both_stay(old, new) -> None:  # type: ignore[no-untyped-def]
    km = _finding_alike(old, new)
    km.remember(old, "notes", persistent=True)
    result = km.store(new, "notes", persistent=True)
    assert result.action == "created", (old, new)
    assert sorted(f.content for f in km.live_facts()) == sorted([old, new])
    assert not knowledge.same_subject(old, new)


#: the same thing with a changed value: numbers that are amounts, not names
CHANGED_VALUES = [
    ("I have 2 kids", "I have 3 kids"),
    ("Has 2 kids", "Has 3 kids"),
    ("My daughter is 7", "My daughter is 8"),
    ("Weighs 80 kg", "Weighs 75 kg"),
    ("Budget is 500 EUR", "Budget is 700 EUR"),
    ("Lives at 12 Baker Street", "Lives at 221 Baker Street"),
    ("My room is 101", "My room is 205"),
    ("Has a laptop with 8GB of memory", "Has a laptop with 16GB of memory"),
    ("Mi hermana vive en Lisboa", "Mi hermana vive en Oporto"),
    ("Ma sœur habite à Lisbonne", "Ma sœur habite à Porto"),
    # several numbers changed at once: the same list of ages a year later
    # (snaveevans/openbrain#32: "boys ages 8, 5, and 1", a fact with a shelf life)
    ("Boys are 8, 5 and 1", "Boys are 9, 6 and 2"),
    ("My kids are 8 and 5 years old", "My kids are 9 and 6 years old"),
    ("Pickup at 8:15 for Lea", "Pickup at 8:40 for Lea"),
    # a number after a noun that counts or measures is a value of one thing
    ("Favourite number 7", "Favourite number 9"),
    ("Reading chapter 3 of Dune", "Reading chapter 5 of Dune"),
]


@pytest.mark.parametrize(("old", "new"), CHANGED_VALUES)
def test_a_changed_amount_or_place_of_the_same_subject_still_supersedes(old, new) -> None:  # type: ignore[no-untyped-def]
    km = _finding_alike(old, new)
    first = km.store(old, "notes", persistent=True).fact
    result = km.store(new, "notes", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (first.pk,)), (old, new)
    assert [f.content for f in km.live_facts()] == [new]


def test_the_local_model_never_makes_one_chinese_fact_replace_another() -> None:
    """all-MiniLM-L6-v2 has no token for most Chinese characters: two facts of the same
    length in them embed identically (cosine 1.0), so every new one replaced the last."""
    from agentmemory.recall.local import MiniLMEmbedder

    km = KnowledgeMemory(UserFactory(), embedder=MiniLMEmbedder())
    km.remember("我妹妹住在里斯本", "family", persistent=True)
    assert km.store("我弟弟住在里斯本", "family", persistent=True).action == "created"
    assert len(km.live_facts()) == 2


def test_comparing_two_long_similar_facts_takes_milliseconds() -> None:
    """``same_subject`` ran difflib over every word of both facts (``MAX_FACT_CHARS``, 10,000
    characters): 1.5-2.2 s for two long notes or logs alike, once per similar candidate,
    while the scope's write lock was held."""
    import time

    log = "I " + " ".join(["log line ok"] * 800)
    changed = "I " + " ".join(["log line ok"] * 799 + ["log line fail"])
    started = time.perf_counter()
    assert knowledge.same_subject(log, changed)
    assert time.perf_counter() - started < 0.5
