"""The memory block reads the transcript metadata of any stored message without failing:
a session date or speaker of the wrong type, or one that does not parse, is passed over."""

from __future__ import annotations

from typing import Any

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.memory import recall_memory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "metadata",
    [
        {"session_date": {"year": 2023}},
        {"session_date_time": ["2023-05-08"]},
        {"speaker": {"name": "Ann"}},
        {"session_date": "not a date", "speaker": ["Ann"]},
        {"session_date": 1e300},
        {"session_date_time": "0001-01-01T00:00:00-23:59"},
        {"speaker": "]\n" * 100},
    ],
)
def test_a_message_with_odd_metadata_is_recalled(metadata: dict[str, Any]) -> None:
    owner = UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="a", title="home")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("The safe code is 1111 behind the painting.", metadata=metadata),
            ChatMessage.ai("ok"),
        ]
    )
    block = recall_memory(owner=owner, query="what is the safe code behind the painting", max_tokens=500)
    assert block is not None and "1111" in block.text
