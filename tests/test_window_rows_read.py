"""A window reads no row its summary already covers: the rows read are those after the
summary (and after a pinned prompt), whatever the budget, and the default gap report costs
no statement of its own beside the window's."""

from __future__ import annotations

from typing import Any

import pytest

from agentmemory.compaction import run_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Summary

pytestmark = pytest.mark.django_db


def summarised(turns: int, *, system_prompt: str | None = None) -> tuple[Conversation, Summary]:
    """``turns`` turns (a tool exchange in every fifth) folded into a summary, then a new
    question and its answer, never folded."""
    conv = Conversation.objects.create(agent_key="t")
    history = PersistentChatHistory(conv)
    if system_prompt is not None:
        history.add_message(ChatMessage.system(system_prompt))
    for i in range(turns):
        batch = [ChatMessage.human(f"question {i} about the booking")]
        if i % 5 == 4:
            call = ToolCall(id=f"c{i}", name="lookup", arguments={"i": i})
            batch += [ChatMessage.ai(None, [call]), ChatMessage.tool(f"found {i}", tool_call_id=call.id)]
        batch.append(ChatMessage.ai(f"answer {i}: the booking is confirmed"))
        history.add_messages(batch)
    run_compaction(conv.pk, llm=ScriptedChatModel(["The user asked about bookings."]), max_tokens=100_000)
    history.add_messages(
        [ChatMessage.human("And the newest question?"), ChatMessage.ai("The newest answer.")]
    )
    conv.refresh_from_db()
    return conv, Summary.objects.get(pk=conv.summary_id)


@pytest.mark.parametrize("system_prompt", [None, "You are a booking agent."])
def test_a_window_reads_only_the_rows_after_its_summary_at_any_budget(
    system_prompt: str | None, django_assert_num_queries: Any
) -> None:
    conv, summary = summarised(120, system_prompt=system_prompt)
    after_summary = conv.last_seq - summary.through_seq
    assert 2 <= after_summary < 10 and summary.through_seq > 100

    for budget in (2_000, 10_000, 100_000):
        # the README's default: the gap report on, in one statement
        with django_assert_num_queries(1):
            window = ContextWindowBuilder(conv).build(budget)
        assert window.summary_id == summary.pk and not window.uncovered
        assert [m.seq for m in window.history] == list(range(summary.through_seq + 1, conv.last_seq + 1))
        # rows the summary covers are not read, however many the budget could hold
        assert window.rows_read == after_summary


def test_without_a_summary_the_rows_read_are_the_window_and_the_gap_report_is_one_statement(
    django_assert_num_queries: Any,
) -> None:
    conv, summary = summarised(60)
    # memory_compactor=None: no summary sent, so the rows it covers are history again
    with django_assert_num_queries(1):
        window = ContextWindowBuilder(conv, memory_compactor=None).build(400)
    assert window.summary_id is None and window.first_seq is not None
    assert window.first_seq <= summary.through_seq
    assert window.uncovered.count == window.first_seq - 1
    assert window.rows_read <= len(window.history) + 16
