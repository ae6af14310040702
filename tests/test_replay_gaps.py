"""Gap-free replays: no window built by the replay, and no model call made by the agent,
leaves stored messages in neither the window nor the summary (short selections of the
shared tau-bench and LoCoMo transcripts; docs/replays.md has the full runs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentmemory.formats.transcripts import load_transcripts
from agentmemory.replay import replay_through_agent, replay_transcripts

# Compaction runs when the caller's transaction commits: these tests need real commits.
replay_db = pytest.mark.django_db(transaction=True)

#: the first 30 tau-bench runs: before windows asked for compaction, 11 of their windows at
#: 3,000 tokens left messages outside window and summary, and through the agent 7 model
#: calls failed with a budget error (long tool loops, tool results of 1,000 tokens and more)
TAU_RUNS = 30


def tau_selection(shared_data: Path, runs: int = TAU_RUNS) -> list:  # type: ignore[type-arg]
    return load_transcripts(shared_data / "tau-bench-airline-gpt-4o.json", limit=runs)


@replay_db
@pytest.mark.parametrize("budget", [3_000, 6_000])
def test_tau_bench_selection_leaves_nothing_uncovered(shared_data: Path, budget: int) -> None:
    report = replay_transcripts(tau_selection(shared_data), max_tokens=budget)

    assert report.windows_built == report.human_messages > 250
    assert report.violation_count == 0, report.violations[:3]
    assert report.budget_error_count == 0, report.budget_errors[:3]
    assert report.left_out_messages == 0, report.left_out[:3]
    assert not report.failed
    if budget == 3_000:
        assert report.gap_compactions > 0  # the builds asked for compactions...
        assert report.gap_summariser_calls > 0  # ...and paid summariser calls for them
        assert report.summariser_calls >= report.gap_summariser_calls


@replay_db
def test_locomo_slice_at_4000_tokens_leaves_nothing_uncovered(shared_data: Path) -> None:
    [conversation] = load_transcripts(shared_data / "locomo6.json", limit=1)
    transcript = dataclasses.replace(conversation, messages=conversation.messages[:300])

    report = replay_transcripts([transcript], max_tokens=4_000)

    assert report.windows_built == report.human_messages > 140
    assert report.summaries_made > 0
    assert not report.failed, (report.violations[:3], report.budget_errors[:3], report.left_out[:3])


@replay_db
def test_no_model_call_of_the_agent_leaves_messages_uncovered(shared_data: Path) -> None:
    """``BaseToolCallingAgent.run()`` with the compactor enabled and a scripted model that
    answers with the recorded messages: every model call inside a turn is checked."""
    selection = tau_selection(shared_data, 15)

    report = replay_through_agent(selection, max_tokens=3_000)

    assert report.windows_built > report.human_messages  # tool loops: several calls a turn
    assert report.violation_count == 0, report.violations[:3]
    assert report.budget_error_count == 0, report.budget_errors[:3]
    assert report.left_out_messages == report.windows_with_left_out == 0, report.left_out[:3]


#: tau-bench runs whose tool loops outgrow a 3,000-token window beside the 1,256-token
#: airline system prompt. Before summaries were limited to the window, and kept before
#: longer tool-result copies, 10 model calls in them were sent without the summary (140
#: messages in neither window nor summary) and 3 failed with an unsized budget error.
LONG_LOOP_RUNS = (
    "task 33 trial 0",
    "task 2 trial 1",
    "task 8 trial 1",
    "task 28 trial 1",
    "task 9 trial 2",
    "task 11 trial 2",
    "task 33 trial 2",
)
#: the runs with a turn that cannot fit even so: its human and AI messages (tool-call
#: arguments are never cut), tool results as copies holding only the truncation marker and,
#: when earlier messages exist, the shortest cut of their summary (64 tokens) need more than
#: the 1,744 tokens left. Task 28 trial 1 and task 11 trial 2, refused while tool results
#: were cut no shorter than 64 tokens, now go out with marker-only copies and their summary.
TOO_LARGE_RUNS = {"task 2 trial 1", "task 9 trial 2", "task 33 trial 2"}


@replay_db
def test_long_tool_loops_through_the_agent_leave_nothing_uncovered(shared_data: Path) -> None:
    selection = [
        t
        for t in load_transcripts(shared_data / "tau-bench-airline-gpt-4o.json")
        if t.title.removeprefix("tau-bench airline ") in LONG_LOOP_RUNS
    ]
    assert len(selection) == len(LONG_LOOP_RUNS)

    report = replay_through_agent(selection, max_tokens=3_000)

    assert report.violation_count == 0, report.violations[:3]
    assert report.left_out_messages == report.windows_with_left_out == 0, report.left_out[:3]
    failed = {f.conversation.removeprefix("tau-bench airline ") for f in report.budget_errors}
    assert failed == TOO_LARGE_RUNS and report.budget_error_count == len(TOO_LARGE_RUNS)
    for finding in report.budget_errors:  # typed and sized: what the turn needs, what is left
        assert finding.text.startswith("the newest turn (seqs "), finding.text
        assert "(tool-call arguments are never cut)" in finding.text
        assert (
            "but max_tokens=3,000 leaves 1,744 for it after the 1,256 tokens of the system prompt"
            in finding.text
        )
