"""A summary in the window it is sent in: a copy sent cut says so in the window's accounting
(``"summary"`` in ``truncated``, the API, the admin, a recorded call)."""

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
    assert whole.truncated == () and whole.summary_tokens == summary.token_count
    cut = ContextWindowBuilder(conv).build(120)
    assert cut.summary_id == summary.pk and cut.messages[0].truncated
    assert cut.summary_tokens < summary.token_count
    assert cut.truncated == ("summary",)  # and no stored message was cut


def test_the_api_and_the_admin_say_the_summary_was_sent_cut(admin_client) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv, _summary = summarised(user)
    api = APIClient()
    api.force_authenticate(user)
    body = api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 120}).json()
    assert body["truncated"] == ["summary"]
    assert body["messages"][0]["part"] == "summary" and body["messages"][0]["truncated"] is True
    body = api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 2_000}).json()
    assert body["truncated"] == []
    page = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/context/", {"max_tokens": 120})
    assert page.status_code == 200
    assert "<dd>summary</dd>" in page.content.decode()


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
    assert window.summary_id == summary.pk and "summary" in window.truncated
    from agentmemory.calls import recorded_context_window

    assert "summary" in recorded_context_window(result.calls[0].record).truncated


# -- a summary made for another window --------------------------------------------------------


class FullSummaryModel:
    """A summariser that writes as long a summary as it is allowed: the limit its prompt
    states, less a little (``FULL_SUMMARY``, named in ``COMPACTION_LLM``)."""

    model_name = "full-summary"

    def invoke(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
        import re

        from agentmemory.llm.base import ChatResponse, Usage

        limit = int(re.search(r"at most (\d+) tokens", str(messages[0].content)).group(1))
        text = "Summary: " + " ".join(["fact"] * max(limit - 20, 10))
        return ChatResponse(message=ChatMessage.ai(text), usage=Usage(10, 10), model=self.model_name)

    async def ainvoke(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
        return self.invoke(messages, tools=tools)


FULL_SUMMARY = "tests.test_summary_in_window.FullSummaryModel"


def add_turns(conv: Conversation, start: int, count: int, words: int = 30) -> None:
    history = PersistentChatHistory(conv)
    for i in range(start, start + count):
        filler = " ".join(f"w{i}x{k}" for k in range(words))
        history.add_messages(
            [ChatMessage.human(f"question {i}: {filler}"), ChatMessage.ai(f"answer {i}: {filler}")]
        )


@pytest.mark.django_db(transaction=True)
def test_a_request_without_a_budget_sizes_the_summary_for_the_windows_asked_before(settings) -> None:
    """``request_compaction(pk)`` (an API append, the sweep, the admin) sized every summary
    for a 10,000-token window; a conversation read in windows of 1,500 tokens got summaries
    of 1,000 and its recent messages fell out of the window."""
    from agentmemory.compaction import request_compaction, summary_token_budget

    settings.AGENTMEMORY = {"COMPACTION_LLM": FULL_SUMMARY, "COMPACTION_MODE": "inline"}
    conv = Conversation.objects.create(agent_key="t")
    add_turns(conv, 0, 12)
    first = request_compaction(conv.pk, max_tokens=1_500, force=True, wait=5)
    share = summary_token_budget(1_500)
    summary = Summary.objects.get(pk=first.summary_id)
    assert summary.token_count <= share
    add_turns(conv, 12, 12)
    later = request_compaction(conv.pk)  # no budget given: the one asked before holds
    assert later.due and later.summary_id is not None
    assert Summary.objects.get(pk=later.summary_id).token_count <= share
    window = ContextWindowBuilder(conv).build(1_500)
    assert window.uncovered.count == 0 and "summary" not in window.truncated


@pytest.mark.django_db(transaction=True)
def test_a_summary_made_for_a_larger_window_is_cut_to_its_share_rather_than_leave_messages_out(
    settings, caplog
) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.compaction import request_compaction, summary_token_budget

    settings.AGENTMEMORY = {"COMPACTION_LLM": FULL_SUMMARY, "COMPACTION_MODE": "inline"}
    conv = Conversation.objects.create(agent_key="t")
    add_turns(conv, 0, 12)
    made = request_compaction(conv.pk, force=True, wait=5)  # sized for 10,000 tokens
    summary = Summary.objects.get(pk=made.summary_id)
    assert summary.token_count > 900
    add_turns(conv, 12, 3)  # with the turn kept verbatim, about 1,000 tokens after the summary
    with caplog.at_level("WARNING", logger="agentmemory.context"):
        window = ContextWindowBuilder(conv).build(1_500)
    assert window.uncovered.count == 0
    assert "summary" in window.truncated and window.summary_tokens <= summary_token_budget(1_500)
    assert window.total_tokens <= 1_500
    assert "made for a larger window" in caplog.text and "max_tokens=1500" in caplog.text
    # a window with room for the whole summary and what follows sends it whole
    roomy = ContextWindowBuilder(conv).build(4_000)
    assert "summary" not in roomy.truncated and roomy.summary_tokens == summary.token_count
