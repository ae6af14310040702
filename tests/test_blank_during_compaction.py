"""A conversation blanked (``purge_conversations --blank-content``) while a compaction run's
model worked: the run must not store the summary (or the flushed facts) it made of the
words the purge removed, or a later window and memory block send them again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings

from agentmemory.compaction import STORED, SUPERSEDED, OfflineMemoryCompactor, run_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Summary
from agentmemory.recall.memory import recall_memory
from agentmemory.retention import purge_conversations
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SECRET = "I moved to Reykjavik with my greyhound Pixel last spring."


class PurgedMeanwhile(OfflineMemoryCompactor):
    """Blanks every conversation (as the nightly purge with ``--blank-content`` would) while
    it summarises, as if the purge ran while a model worked."""

    def summarize(self, previous: str | None, messages: Any) -> Any:
        draft = super().summarize(previous, messages)
        purge_conversations(older_than=timedelta(seconds=1), blank_content=True, now=_later())
        return draft


def _later() -> Any:
    from django.utils import timezone

    return timezone.now() + timedelta(days=1)


def _conversation(owner: Any) -> Conversation:
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    turns = []
    for i in range(6):
        turns += [ChatMessage.human(f"{SECRET} Turn {i}."), ChatMessage.ai(f"Noted, turn {i}.")]
    PersistentChatHistory(conv).add_messages(turns)
    return conv


@override_settings(AGENTMEMORY={"MEMORY_FLUSH": "always", "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 2})
def test_a_summary_made_before_the_purge_blanked_the_conversation_is_not_stored() -> None:
    user = UserFactory()
    conv = _conversation(user)

    run = run_compaction(conv.pk, compactor_class=PurgedMeanwhile)

    assert run.status == SUPERSEDED
    conv.refresh_from_db()
    assert conv.content_purged_at is not None
    assert all("Reykjavik" not in text for text in Summary.objects.values_list("text", flat=True))
    assert not Fact.objects.filter(owner=user, content__contains="Reykjavik").exists()
    window = ContextWindowBuilder(conv, memory_recall=True, memory_agent_key="a").build(2_000)
    assert all("Reykjavik" not in m.text for m in window.messages)
    other = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(other).add_message(ChatMessage.human("Where did I move to with Pixel?"))
    block = recall_memory(
        owner=user, query="Where did I move to with Pixel?", max_tokens=2_000, agent_key="a"
    )
    assert block is None or "Reykjavik" not in block.text


@override_settings(AGENTMEMORY={"MEMORY_FLUSH": "always", "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 2})
def test_a_conversation_blanked_before_the_run_is_still_compacted_afterwards() -> None:
    user = UserFactory()
    conv = _conversation(user)
    purge_conversations(older_than=timedelta(seconds=1), blank_content=True, now=_later())
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human(f"New turn {i}.") if i % 2 == 0 else ChatMessage.ai("Ok.") for i in range(6)]
    )

    assert run_compaction(conv.pk, compactor_class=OfflineMemoryCompactor).status == STORED
