"""Conversations of tool calls and results with no human message after the summary (an
autonomous agent or a pipeline writing through the API, an imported run) are compacted too.

Compaction cut summaries at human-turn boundaries only and counted human messages to decide
when one was due, so a conversation of tool exchanges alone was never compacted: no window
sends any of them (a window's history starts on a human message, design invariant C3, which
Anthropic requires), and every one stayed in neither the window nor a summary, reported on
every build. Now such messages are due for compaction when they fill the trigger share of
the window, like any history the window cannot hold, and are folded whole exchange by whole
exchange (an exchange still waiting for a result stays out, W5); the newest human turn is
still never folded (K6), one summary per boundary."""

from __future__ import annotations

import pytest

from agentmemory.compaction import request_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary

pytestmark = pytest.mark.django_db

OFFLINE = {"COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor", "COMPACTION_MODE": "inline"}
WINDOW = 2_000


def exchanges(count: int, start: int = 0) -> list[ChatMessage]:
    """``count`` tool exchanges of about 75 tokens each."""
    messages = []
    for i in range(start, start + count):
        messages += [
            ChatMessage.ai(f"Checking sensor {i}.", [ToolCall(f"c{i}", "read_sensor", {"sensor": i})]),
            ChatMessage.tool(
                f"sensor {i}: temperature {20 + i % 7} C, " + "nominal " * 30,
                tool_call_id=f"c{i}",
                name="read_sensor",
            ),
        ]
    return messages


def compact(conv: Conversation, capture) -> object:  # type: ignore[no-untyped-def]
    with capture(execute=True):
        return request_compaction(conv.pk, max_tokens=WINDOW)


@pytest.fixture
def conv(settings) -> Conversation:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = OFFLINE
    return Conversation.objects.create(agent_key="monitor")


def test_tool_exchanges_without_a_human_message_are_compacted(conv, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conv)
    history.add_messages(exchanges(5))
    # below the trigger share of the window: nothing is due (no summariser call per append)
    assert not compact(conv, django_capture_on_commit_callbacks).due
    history.add_messages(exchanges(45, start=5))

    request = compact(conv, django_capture_on_commit_callbacks)

    assert request.due
    [summary] = Summary.objects.filter(conversation=conv)
    assert (summary.first_seq, summary.through_seq) == (1, 100)
    assert "sensor 49" in summary.text
    window = ContextWindowBuilder(conv).build(max_tokens=WINDOW)
    assert not window.uncovered and window.summary_id == summary.pk
    assert window_violations(window) == []
    # one summary per boundary: asked again, nothing is due and nothing is stored
    assert not compact(conv, django_capture_on_commit_callbacks).due
    assert Summary.objects.filter(conversation=conv).count() == 1


def test_an_exchange_still_waiting_for_its_result_is_not_folded(conv, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conv)
    history.add_messages(exchanges(50))
    history.add_messages([ChatMessage.ai("Calibrating.", [ToolCall("w1", "calibrate", {})])])  # seq 101
    history.add_messages(exchanges(2, start=50))  # seqs 102-105, after the waiting call

    compact(conv, django_capture_on_commit_callbacks)

    [summary] = Summary.objects.filter(conversation=conv)
    assert summary.through_seq == 100
    history.add_messages([ChatMessage.tool("calibrated", tool_call_id="w1", name="calibrate")])
    history.add_messages(exchanges(40, start=52))
    compact(conv, django_capture_on_commit_callbacks)
    newest = Conversation.objects.get(pk=conv.pk).summary
    assert newest.through_seq == Conversation.objects.get(pk=conv.pk).last_seq
    assert newest.previous_id == summary.pk  # the calibration folded once answered


def test_exchanges_before_the_first_human_message_are_folded_after_a_summary(  # type: ignore[no-untyped-def]
    conv, django_capture_on_commit_callbacks
):
    """After a summary of tool exchanges alone, more exchanges and then a human message: those
    exchanges open the rest without a human message, so no window can send them; they are
    folded, the human message is not (the newest turn stays verbatim)."""
    history = PersistentChatHistory(conv)
    history.add_messages(exchanges(50))
    compact(conv, django_capture_on_commit_callbacks)
    assert Conversation.objects.get(pk=conv.pk).summary.through_seq == 100
    history.add_messages(exchanges(3, start=50))  # seqs 101-106
    [human] = history.add_messages([ChatMessage.human("What did the sensors say?")])

    assert compact(conv, django_capture_on_commit_callbacks).due

    summary = Conversation.objects.get(pk=conv.pk).summary
    assert summary.through_seq == human.seq - 1 == 106 and summary.previous is not None
    window = ContextWindowBuilder(conv).build(max_tokens=WINDOW)
    assert not window.uncovered
    assert [m.role for m in window.messages] == [Role.SYSTEM, Role.HUMAN]
    assert window_violations(window) == []


def test_the_api_compacts_a_conversation_appended_as_tool_exchanges(  # type: ignore[no-untyped-def]
    api, user, settings, django_capture_on_commit_callbacks
):
    settings.AGENTMEMORY = {**OFFLINE, "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT": WINDOW}
    created = api.post("/api/conversations/", {"agent_key": "monitor"}, format="json").json()
    url = f"/api/conversations/{created['uuid']}/messages/"
    for start in range(0, 60, 10):
        batch = [
            {"role": m.role.value, "content": m.content, "tool_calls": [c.to_dict() for c in m.tool_calls]}
            if m.role is Role.AI
            else {"role": "tool", "content": m.content, "tool_call_id": m.tool_call_id, "name": m.name}
            for m in exchanges(10, start=start)
        ]
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(url, {"messages": batch}, format="json")
        assert response.status_code == 201, response.content
    conv = Conversation.objects.get(uuid=created["uuid"])
    assert conv.summary is not None
    context = api.get(f"/api/conversations/{created['uuid']}/context/?max_tokens={WINDOW}").json()
    assert context["uncovered"]["count"] < Message.objects.filter(conversation=conv).count() // 2
