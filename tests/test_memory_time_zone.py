"""The dates the model reads (memory block, knowledge block) are days of the project's time
zone: a stored time comes back from the database in UTC and was shown as such, so in Tokyo
a message said at 07:30 on 1 March was dated 29 February, and the model answered "when did
I ..." with the day before."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message
from agentmemory.recall.memory import recall_memory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: 07:30 on Friday 1 March 2024 in Tokyo (UTC+9)
MORNING_IN_TOKYO = datetime(2024, 2, 29, 22, 30, tzinfo=UTC)


def said_at(user, text: str, when: datetime, metadata=None) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="a", title="Lockers")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human(text, metadata=metadata or {}), ChatMessage.ai("Noted.")]
    )
    Message.objects.filter(conversation=conv).update(created_at=when)
    return conv


@override_settings(TIME_ZONE="Asia/Tokyo")
def test_a_stored_time_is_dated_in_the_current_time_zone() -> None:
    user = UserFactory()
    said_at(user, "My locker code is 4417.", MORNING_IN_TOKYO)
    block = recall_memory(owner=user, query="locker code", max_tokens=400)
    assert block is not None
    assert '[Fri 1 March 2024 · "Lockers"]' in block.text
    assert "29 February" not in block.text


@override_settings(TIME_ZONE="Asia/Tokyo")
def test_a_transcript_date_without_a_zone_is_shown_as_written() -> None:
    user = UserFactory()
    said_at(
        user,
        "My locker code is 4417.",
        MORNING_IN_TOKYO,
        metadata={"session_date_time": "11:30 pm on 8 May, 2023"},
    )
    block = recall_memory(owner=user, query="locker code", max_tokens=400)
    assert block is not None
    assert "[Mon 8 May 2023 · " in block.text
    # a date naming its zone is moved into the current one: 23:30 UTC is 08:30 the next day
    user2 = UserFactory()
    said_at(
        user2,
        "My locker code is 4417.",
        MORNING_IN_TOKYO,
        metadata={"session_date_time": "2023-05-08T23:30:00+00:00"},
    )
    block = recall_memory(owner=user2, query="locker code", max_tokens=400)
    assert block is not None
    assert "[Tue 9 May 2023 · " in block.text


@override_settings(TIME_ZONE="Asia/Tokyo")
def test_a_fact_is_dated_in_the_current_time_zone() -> None:
    user = UserFactory()
    memory = KnowledgeMemory(user, max_log_days=10**6)
    memory.store("Gate code: 9911", now=MORNING_IN_TOKYO)
    block = recall_memory(owner=user, query="gate code", max_tokens=400, now=MORNING_IN_TOKYO)
    assert block is not None
    assert "[Fri 1 March 2024 · saved fact] Gate code: 9911" in block.text
    assert "- [2024-03-01 07:30] (general) Gate code: 9911" in memory.build_context()
    # a flushed fact's said_at, written in the project's time zone, shows that day too
    Fact.objects.filter(owner=user).update(metadata={"said_at": "2024-03-01 07:30"})
    block = recall_memory(owner=user, query="gate code", max_tokens=400, now=MORNING_IN_TOKYO)
    assert block is not None
    assert "[Fri 1 March 2024 · saved fact]" in block.text
