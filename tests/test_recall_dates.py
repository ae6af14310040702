"""Dates named in a conversation search ("on 3 June, 2023", "in May"): the messages written then
come first, and the date's words are not matched as words."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.test import override_settings

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.recall import search_messages
from agentmemory.recall.dates import Period, periods_in, without_dates
from tests.factories import UserFactory


@pytest.mark.parametrize(
    ("query", "first", "last", "any_year"),
    [
        ("What did Gina find on 1 February, 2023?", date(2023, 1, 25), date(2023, 2, 1), False),
        ("What did she show on October 13, 2023?", date(2023, 10, 6), date(2023, 10, 13), False),
        ("the 3rd of June 2023", date(2023, 5, 27), date(2023, 6, 3), False),
        ("What did John attend in March 2023?", date(2023, 3, 1), date(2023, 3, 31), False),
        ("the Feb. 2024 trip", date(2024, 2, 1), date(2024, 2, 29), False),
        ("When did Melanie go camping in June?", date(2000, 6, 1), date(2000, 6, 30), True),
        ("How many times did she go to the beach in 2023?", date(2023, 1, 1), date(2023, 12, 31), False),
    ],
)
def test_named_dates_become_periods(query: str, first: date, last: date, any_year: bool) -> None:
    assert periods_in(query) == [Period(first, last, any_year)]


def test_words_that_are_not_dates_are_left_alone() -> None:
    assert periods_in("May I ask what she said?") == []  # the verb, not the month
    # no such day: its month is read
    assert periods_in("on 31 February, 2023") == [Period(date(2023, 2, 1), date(2023, 2, 28))]
    assert periods_in("flight 2023 to Lisbon") == []  # a number is not a year without "in"
    assert without_dates("flight 2023 to Lisbon") == "flight 2023 to Lisbon"
    assert without_dates("What did John attend in March 2023?") == "What did John attend in ?"
    june = periods_in("in June")[0]
    assert june.holds(date(2019, 6, 30)) and not june.holds(date(2019, 7, 1))


def written(conversation: Conversation, texts: list[tuple[str, datetime]]) -> None:
    history = PersistentChatHistory(conversation)
    history.add_messages([ChatMessage.human(text) for text, _when in texts])
    for seq, (_text, when) in enumerate(texts, start=1):
        Message.objects.filter(conversation=conversation, seq=seq).update(created_at=when)


@pytest.mark.django_db
def test_the_message_written_on_the_named_date_comes_first() -> None:
    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="diary")
    written(
        conv,
        [
            ("We went camping by the lake", datetime(2023, 6, 27, 14, tzinfo=UTC)),
            ("Another filler message about work", datetime(2023, 7, 1, 9, tzinfo=UTC)),
            ("We went camping in the mountains", datetime(2023, 7, 17, 10, tzinfo=UTC)),
        ],
    )
    assert search_messages("camping in June", owner=alice, k=1)[0].seq == 1
    assert search_messages("camping in July 2023", owner=alice, k=1)[0].seq == 3
    assert search_messages("camping on 17 July, 2023", owner=alice, k=1)[0].seq == 3
    with override_settings(AGENTMEMORY={"RECALL_DATE_WEIGHT": 0}):
        # off: "June" is only a word, which no message holds; the newer message wins the tie
        assert search_messages("camping in June", owner=alice, k=1)[0].seq == 3
    # a query that is only a date is still a word search ("june" matches nothing here)
    assert search_messages("June 2023", owner=alice) == []
