"""Storing message vectors is all or nothing: a run of ``embed_messages`` that dies after
its vectors are written and before their copies are (``vectors_stored``: the pgvector
tables) leaves nothing, so the task's redelivery, which embeds what has no vector yet, makes
both. Before, the vectors stayed and the copies were never made (pgvector search missed
those messages until ``rebuild_recall_index``)."""

from __future__ import annotations

from typing import Any

import pytest

from agentmemory import signals
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, MessageEmbedding
from agentmemory.recall import embed_stored_messages
from tests.factories import UserFactory


class _Died(Exception):
    """Stands for the worker killed at that point: nothing after it runs."""


@pytest.mark.django_db(transaction=True)
def test_vectors_and_their_copies_are_stored_together_or_not_at_all(settings: Any) -> None:
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    stored = PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("Where is my parcel?"), ChatMessage.ai("It left the depot today.")]
    )
    ids = [m.id for m in stored]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "embedding"}
    copies: list[list[int]] = []
    dies = [True]

    def copy(sender: Any, *, objects: Any, **kwargs: Any) -> None:
        if dies.pop() if dies else False:
            raise _Died
        copies.append(sorted(o.pk for o in objects))

    signals.vectors_stored.connect(copy, dispatch_uid="test-embedding-writes")
    try:
        with pytest.raises(_Died):
            embed_stored_messages(ids)
        assert MessageEmbedding.objects.count() == 0  # nothing half-written

        assert embed_stored_messages(ids) == 2  # the task run again
    finally:
        signals.vectors_stored.disconnect(dispatch_uid="test-embedding-writes")
    assert copies == [sorted(ids)]
    assert sorted(MessageEmbedding.objects.values_list("message_id", flat=True)) == sorted(ids)
