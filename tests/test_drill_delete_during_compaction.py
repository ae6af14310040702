"""Drill: a conversation, or its owner, is deleted while its compaction runs (PostgreSQL).

The summariser is held inside its call until the delete has committed; then it answers. The
run must store nothing (status ``"gone"``), and nothing of the conversation may reappear: no
summary, no message, no conversation row, no pending request for the sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from agentmemory.compaction import GONE, pending_compactions, run_compaction
from agentmemory.deletion import forget_user
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary
from tests.factories import conversation_with_turns

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class HeldModel:
    """A summariser that signals when it is called and answers only when released."""

    model_name = "held"

    def __init__(self) -> None:
        self.called = threading.Event()
        self.release = threading.Event()

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        self.called.set()
        assert self.release.wait(30), "the test never released the model"
        return ChatResponse(message=ChatMessage.ai("a summary that must not be stored"), usage=Usage(5, 5))


def _rows(conversation_id: int) -> tuple[int, int, int]:
    with connection.cursor() as cursor:
        counts = []
        for model, column in (
            (Conversation, "id"),
            (Message, "conversation_id"),
            (Summary, "conversation_id"),
        ):
            cursor.execute(
                f"SELECT COUNT(*) FROM {model._meta.db_table} WHERE {column} = %s", [conversation_id]
            )
            counts.append(cursor.fetchone()[0])
    return counts[0], counts[1], counts[2]


@pytest.mark.parametrize("what", ["conversation", "user delete", "forget_user"])
def test_nothing_reappears_after_a_delete_during_compaction(what: str) -> None:
    owner = get_user_model().objects.create_user(f"drill-{what.replace(' ', '-')}")
    conv, _history = conversation_with_turns(12)
    Conversation.objects.filter(pk=conv.pk).update(owner=owner)
    model = HeldModel()
    outcome: dict[str, Any] = {}

    def compact() -> None:
        try:
            outcome["run"] = run_compaction(
                conv.pk, llm=model, compactor_class="agentmemory.compaction.LLMMemoryCompactor"
            )
        except Exception as exc:  # the drill fails on any error
            outcome["error"] = repr(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=compact)
    thread.start()
    assert model.called.wait(30), "the compaction never called the model"
    if what == "conversation":
        Conversation.objects.get(pk=conv.pk).delete()
    elif what == "user delete":
        owner.delete()
    else:
        forget_user(owner)
    model.release.set()
    thread.join(30)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["run"].status == GONE and outcome["run"].summary is None
    assert _rows(conv.pk) == (0, 0, 0)
    # a late task or the sweep finds nothing to bring back
    assert run_compaction(conv.pk, llm=model).status == GONE
    assert conv.pk not in pending_compactions(include_due=True)
    assert _rows(conv.pk) == (0, 0, 0)
