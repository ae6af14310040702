"""A summary in the window it is sent in: a copy sent cut says so in the window's accounting
(``summary_truncated``, the API, the admin, a recorded call)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentmemory.compaction import run_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Summary
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

LONG_SUMMARY = "The user is Omar Davis; he owns five reservations. " + "Detail of the booking. " * 120


def summarised(owner=None, *, summary: str = LONG_SUMMARY, turns: int = 3) -> tuple[Conversation, Summary]:  # type: ignore[no-untyped-def]
    """``turns`` turns folded into one summary (made for a 100,000-token window), then a new
    question, never folded."""
    conv = Conversation.objects.create(agent_key="t", owner=owner)
    history = PersistentChatHistory(conv)
    for i in range(turns):
        history.add_messages([ChatMessage.human(f"question {i}"), ChatMessage.ai(f"answer {i}")])
    history.add_messages([ChatMessage.human("And the newest question?")])
    run_compaction(conv.pk, llm=ScriptedChatModel([summary]), max_tokens=100_000)
    return conv, Summary.objects.get(conversation=conv)


def test_a_summary_sent_cut_is_listed_as_truncated() -> None:
    conv, summary = summarised()
    assert summary.token_count > 300
    whole = ContextWindowBuilder(conv).build(2_000)
    assert not whole.summary_truncated and whole.summary_tokens == summary.token_count
    cut = ContextWindowBuilder(conv).build(120)
    assert cut.summary_id == summary.pk and cut.messages[0].truncated
    assert cut.summary_tokens < summary.token_count
    assert cut.summary_truncated
    assert cut.truncated == ()  # seqs of stored messages only: none was cut


def test_the_api_and_the_admin_say_the_summary_was_sent_cut(admin_client) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv, _summary = summarised(user)
    api = APIClient()
    api.force_authenticate(user)
    body = api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 120}).json()
    assert body["summary_truncated"] is True and body["truncated"] == []
    assert body["messages"][0]["part"] == "summary" and body["messages"][0]["truncated"] is True
    body = api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 2_000}).json()
    assert body["summary_truncated"] is False
    page = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/context/", {"max_tokens": 120})
    assert page.status_code == 200
    assert "summary (cut)" in page.content.decode()


def test_a_recorded_model_call_gives_back_that_the_summary_was_cut() -> None:
    from agentmemory.agents import BaseToolCallingAgent

    class Agent(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "Be brief."
        MEMORY_COMPACTOR_ENABLED = True
        CONVERSATION_HISTORY_TOKEN_LIMIT = 140

    conv, summary = summarised(UserFactory())
    agent = Agent(llm=ScriptedChatModel(["Fine."]))
    result = agent.run(conv, "One more?")
    window = result.windows[0]
    assert window.summary_id == summary.pk and window.summary_truncated
    from agentmemory.calls import recorded_context_window

    assert recorded_context_window(result.calls[0].record).summary_truncated
