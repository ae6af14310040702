"""Recall as of a past time: ``recall_memory(now=...)``, ``rank_messages(now=...)`` and
``KnowledgeMemory.recall(now=...)`` answer as the memory stood at ``now``, the way a user
replaying a transcript or evaluating history asks a question at its own date. A message or a
fact said after ``now`` (the date a transcript gave it, else when it was stored) was not yet
there to recall; a fact superseded after ``now`` (by a fact said after it) was still the
current one then; one that had expired by then was not. Without ``now``, recall is of the
memory as it is.

Before, ``now`` only read relative dates ("four weeks ago") and recency: an evaluation at a
past date was shown the messages and facts of its future (the answer to "where do I work?"
asked in May was the job taken in June), and a fact replaced since was never recalled, even
as of a time it was the current one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message
from agentmemory.recall.memory import rank_messages, recall_memory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MAY_1 = datetime(2023, 5, 1, 10, 0, tzinfo=UTC)
MAY_15 = datetime(2023, 5, 15, 10, 0, tzinfo=UTC)
JUNE_1 = datetime(2023, 6, 1, 10, 0, tzinfo=UTC)
JUNE_15 = datetime(2023, 6, 15, 10, 0, tzinfo=UTC)
FILLER = [f"Small talk number {i} about the weather and nothing else." for i in range(6)]


def _said(owner, turns, *, date=None):  # type: ignore[no-untyped-def]
    """A conversation of ``owner``: ``turns`` as human and AI messages in turn, each a text or
    ``(text, transcript date)``; ``date`` dates the turns given as plain texts."""
    conv = Conversation.objects.create(owner=owner, agent_key="support")
    messages = []
    for i, turn in enumerate(turns):
        text, when = turn if isinstance(turn, tuple) else (turn, date)
        metadata = {"session_date_time": when} if when else {}
        messages.append((ChatMessage.human if i % 2 == 0 else ChatMessage.ai)(text, metadata=metadata))
    PersistentChatHistory(conv).add_messages(messages)
    return conv


# -- messages ---------------------------------------------------------------------------------


def test_messages_said_after_now_are_not_recalled_nor_shown_beside_a_hit() -> None:
    user = UserFactory()
    _said(
        user,
        [
            *[(text, "2023/05/01 (Mon) 10:00") for text in FILLER],
            ("Where did I leave the kayak paddles?", "2023/05/01 (Mon) 10:00"),
            ("Under the pier, by the boathouse.", "2023/05/01 (Mon) 10:00"),
            ("I sold the kayak and its paddles to Tom.", "2023/06/01 (Thu) 10:00"),
            ("Noted: the kayak went to Tom.", "2023/06/01 (Thu) 10:00"),
        ],
    )
    query = "What about the kayak paddles?"
    hits = rank_messages(owner=user, query=query, k=20, now=MAY_15)
    assert "Under the pier, by the boathouse." in [h.content for h in hits]
    assert not [h.content for h in hits if "Tom" in h.content]
    block = recall_memory(owner=user, query=query, max_tokens=600, now=MAY_15)
    assert block is not None and "Under the pier" in block.text
    assert "Tom" not in block.text  # not as a hit, not as the neighbour of one
    later = recall_memory(owner=user, query=query, max_tokens=600, now=JUNE_15)
    assert later is not None and "sold the kayak" in later.text
    # without now: the memory as it is
    assert "sold the kayak" in recall_memory(owner=user, query=query, max_tokens=600).text  # type: ignore[union-attr]


def test_a_message_without_a_transcript_date_exists_from_when_it_was_stored() -> None:
    user = UserFactory()
    conv = _said(user, [*FILLER, "The gate code of the allotment is 4417.", "Saved."])
    stored_at = timezone.now() - timedelta(days=10)
    Message.objects.filter(conversation=conv).update(created_at=stored_at)
    query = "allotment gate code"
    assert rank_messages(owner=user, query=query, k=5, now=stored_at - timedelta(days=1)) == []
    assert recall_memory(owner=user, query=query, max_tokens=400, now=stored_at - timedelta(days=1)) is None
    hits = rank_messages(owner=user, query=query, k=5, now=stored_at + timedelta(days=1))
    assert "The gate code of the allotment is 4417." in [h.content for h in hits]


# -- facts ------------------------------------------------------------------------------------


def test_a_fact_is_recalled_as_the_memory_stood_at_now() -> None:
    user = UserFactory()
    km = KnowledgeMemory(user, max_log_days=10**5)
    alpha = km.store("Employer: Company Alpha", "work", True, now=MAY_1).fact
    beta = km.store("Employer: Company Beta", "work", True, now=JUNE_1)
    assert beta.superseded_ids == (alpha.pk,)

    def recalled(now):  # type: ignore[no-untyped-def]
        return [h.fact.content for h in km.recall("employer company", now=now)]

    assert recalled(MAY_1 - timedelta(days=1)) == []  # nothing was said yet
    assert recalled(MAY_15) == ["Employer: Company Alpha"]  # the current one then
    assert recalled(JUNE_15) == ["Employer: Company Beta"]
    assert [h.fact.content for h in km.recall("employer company")] == ["Employer: Company Beta"]
    assert Fact.objects.get(pk=alpha.pk).superseded_at == JUNE_1
    # the memory block recalls facts by the same rule
    block = recall_memory(owner=user, query="Which company is my employer?", max_tokens=400, now=MAY_15)
    assert block is not None and "Company Alpha" in block.text and "Company Beta" not in block.text


def test_a_fact_taken_from_a_transcript_exists_from_the_date_it_was_said() -> None:
    """Facts kept from a replayed transcript are stored today and dated by the transcript
    (``metadata["said_at"]``): as of a date, those said later are not recalled, and one
    replaced by a fact said later was the current one then."""
    user = UserFactory()
    conv = _said(
        user,
        [
            ("I live in Lisbon now.", "2023/05/01 (Mon) 10:00"),
            ("Lovely city.", "2023/05/01 (Mon) 10:00"),
            ("We moved to Porto last week.", "2023/06/01 (Thu) 10:00"),
            ("Congratulations!", "2023/06/01 (Thu) 10:00"),
        ],
    )
    lisbon_said, porto_said = Message.objects.filter(conversation=conv, role="human").order_by("seq")
    km = KnowledgeMemory(user)
    lisbon = km.store("Home city: Lisbon", "home", True, source_message=lisbon_said).fact
    porto = km.store("Home city: Porto", "home", True, source_message=porto_said)
    assert porto.superseded_ids == (lisbon.pk,)

    def recalled(now):  # type: ignore[no-untyped-def]
        return [h.fact.content for h in km.recall("home city", now=now)]

    assert recalled(datetime(2023, 4, 1, tzinfo=UTC)) == []
    assert recalled(MAY_15) == ["Home city: Lisbon"]
    assert recalled(JUNE_15) == ["Home city: Porto"]
    assert recalled(None) == ["Home city: Porto"]
    block = recall_memory(owner=user, query="Which city is my home city?", max_tokens=400, now=MAY_15)
    assert block is not None and "Lisbon" in block.text and "Porto" not in block.text


def test_a_fact_expired_by_now_or_out_of_the_log_is_not_recalled_as_of_then() -> None:
    user = UserFactory()
    km = KnowledgeMemory(user, max_log_days=30)
    km.store("Parking spot: B12", "travel", ttl=timedelta(days=2), now=MAY_1)
    km.store("Dentist on Friday", "errands", now=MAY_1)
    assert [h.fact.content for h in km.recall("parking spot", now=MAY_1 + timedelta(days=1))] == [
        "Parking spot: B12"
    ]
    assert km.recall("parking spot", now=MAY_1 + timedelta(days=3)) == []
    assert [h.fact.content for h in km.recall("dentist", now=MAY_15)] == ["Dentist on Friday"]
    assert km.recall("dentist", now=JUNE_15) == []  # aged out of the 30-day log by then


def test_as_of_false_reads_only_relative_times_from_now() -> None:
    """A benchmark whose transcript dates do not run in order with its question dates
    (LongMemEval dates some evidence after the question) ranks every message and live fact,
    reading only "four weeks ago" and expiry from ``now``."""
    user = UserFactory()
    _said(
        user, [*FILLER, "I sold the kayak and its paddles to Tom.", "Noted."], date="2023/06/01 (Thu) 10:00"
    )
    km = KnowledgeMemory(user)
    km.store("Employer: Company Alpha", "work", True, now=MAY_1)
    km.store("Employer: Company Beta", "work", True, now=JUNE_1)
    hits = rank_messages(owner=user, query="kayak paddles", k=5, now=MAY_15, as_of=False)
    assert "I sold the kayak and its paddles to Tom." in [h.content for h in hits]
    assert [h.fact.content for h in km.recall("employer company", now=MAY_15, as_of=False)] == [
        "Employer: Company Beta"
    ]
    block = recall_memory(
        owner=user, query="kayak paddles and my employer", max_tokens=600, now=MAY_15, as_of=False
    )
    assert block is not None and "Tom" in block.text and "Company Beta" in block.text


def test_a_fact_told_again_is_recalled_as_of_any_time_since_it_was_first_told() -> None:
    """An exact repeat dates the daily log's entry by the last telling (``created_at`` moves
    forward, and a transient entry ages from then, as docs/longterm.md promises), but the fact
    was known from the first: a recall as of a time between the two missed it."""
    user = UserFactory()
    km = KnowledgeMemory(user, max_log_days=40)
    text = "The spare key is under the blue flowerpot"
    fact = km.store(text, "home", now=MAY_1).fact
    assert km.store(text, "home", now=JUNE_1).action == "duplicate"
    assert km.store(text, "home", now=JUNE_15).action == "duplicate"
    stored = Fact.objects.get(pk=fact.pk)
    assert (stored.first_remembered_at, stored.created_at) == (MAY_1, JUNE_15)  # the log's date

    def recalled(now):  # type: ignore[no-untyped-def]
        return [h.fact.pk for h in km.recall("spare key flowerpot", now=now)]

    assert recalled(MAY_1 - timedelta(days=1)) == []  # not told yet
    assert recalled(MAY_15) == [fact.pk]  # known since May 1 (it was missed)
    assert recalled(MAY_1 + timedelta(days=41)) == [fact.pk]  # in the log from the first telling to the last
    assert recalled(JUNE_15 + timedelta(days=39)) == [fact.pk]  # aged from the last telling
    assert recalled(JUNE_15 + timedelta(days=41)) == []
    block = recall_memory(owner=user, query="Where is the spare key?", max_tokens=400, now=MAY_15)
    assert block is not None and "blue flowerpot" in block.text


def test_a_repeat_told_earlier_than_the_stored_fact_moves_its_first_telling_back() -> None:
    """Transcripts replayed out of order, or an import of older notes, tell a fact at a time
    before the one stored: the fact was known from the earliest telling, whichever order the
    tellings were stored in (the log's date stays the latest)."""
    user = UserFactory()
    km = KnowledgeMemory(user, max_log_days=400)
    text = "The spare key is under the blue flowerpot"
    fact = km.store(text, "home", now=JUNE_1).fact
    assert km.store(text, "home", now=MAY_1).action == "duplicate"
    assert km.store(text, "home", now=JUNE_15).action == "duplicate"
    assert km.store(text, "home", now=MAY_15).action == "duplicate"
    stored = Fact.objects.get(pk=fact.pk)
    assert (stored.first_remembered_at, stored.created_at) == (MAY_1, JUNE_15)
    assert [h.fact.pk for h in km.recall("spare key flowerpot", now=MAY_15)] == [fact.pk]
