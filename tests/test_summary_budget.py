"""The summary budget rule: a summary is made short enough to fit beside the system prompt
and the turn in progress of the window it is sent in (``summary_token_budget``), and the
window builder keeps the summary before longer copies of the turn's tool results."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.calls import window_changes
from agentmemory.compaction import (
    MIN_SUMMARY_BUDGET_TOKENS,
    enqueue_compaction,
    run_compaction,
    summary_token_budget,
)
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.context.builder import MIN_CUT_SUMMARY_TOKENS, MIN_FITTED_TOOL_RESULT_TOKENS
from agentmemory.context.packing import TRUNCATION_MARKER, marker_only_copy
from agentmemory.exceptions import ContextBudgetExceeded, TurnTooLarge
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tasks import compact_conversation
from tests.factories import conversation_with_turns
from tests.helpers_concurrency import ScriptHolder

SCRIPTED = "tests.helpers_concurrency.scripted_model"


def overhead() -> int:
    """What the summary message costs beyond its text."""
    prefix = app_settings().SUMMARY_MESSAGE_PREFIX
    return int(get_token_counter().count_message(ChatMessage.system(prefix)))


def stated_limit(model: ScriptedChatModel, call: int = 0) -> str:
    """The instructions the summariser got on call ``call``."""
    return str(model.calls[call][0][0].content)


# -- the rule ------------------------------------------------------------------------------


def test_a_summary_may_take_a_quarter_of_the_room_left_after_the_system_prompt() -> None:
    # tau-bench's airline prompt is 1,256 tokens: a 3,000-token window leaves 1,744.
    assert summary_token_budget(3_000, system_tokens=1_256, overhead=10) == 1_744 // 4 - 10
    assert summary_token_budget(3_000, system_tokens=1_256) == 436
    # Larger windows: MAX_SUMMARY_TOKENS (1,000) is the limit, as it was.
    assert summary_token_budget(6_000, system_tokens=1_256, overhead=10) == 1_000
    assert summary_token_budget(10_000) == 1_000
    assert summary_token_budget(3_000, system_tokens=1_256, cap=200) == 200
    # Tiny windows: never below the shortest useful summary, nor above the cap.
    assert summary_token_budget(300, system_tokens=280) == MIN_SUMMARY_BUDGET_TOKENS == 64
    assert summary_token_budget(300, system_tokens=280, cap=40) == 40


def test_the_share_is_a_setting_and_the_check_refuses_a_bad_one() -> None:
    with override_settings(AGENTMEMORY={"SUMMARY_WINDOW_SHARE": 0.5}):
        assert summary_token_budget(3_000, system_tokens=1_256) == 872
        assert "agentmemory.E023" not in {p.id for p in run_checks()}
    for bad in (0, 1.5, "0.25", True):
        with override_settings(AGENTMEMORY={"SUMMARY_WINDOW_SHARE": bad}):
            assert "agentmemory.E023" in {p.id for p in run_checks()}


# -- compactions made for a window -------------------------------------------------------


@pytest.fixture
def summariser() -> Any:
    """A scripted summariser the compaction runs build (``COMPACTION_LLM``)."""
    ScriptHolder.current = ScriptedChatModel()
    with override_settings(AGENTMEMORY={"COMPACTION_LLM": SCRIPTED, "COMPACTION_MODE": "inline"}):
        yield ScriptHolder.current
    ScriptHolder.current = None


@pytest.mark.django_db
def test_a_summary_for_a_small_window_is_asked_for_and_kept_short(summariser: Any) -> None:
    conv, _ = conversation_with_turns(6)
    limit = summary_token_budget(3_000, system_tokens=1_256, overhead=overhead())
    assert MIN_SUMMARY_BUDGET_TOKENS < limit < app_settings().MAX_SUMMARY_TOKENS
    too_long = "The user asked about flights. " * 100  # about 600 tokens: under 1,000, over the limit
    assert limit < get_token_counter().count_text(too_long) < 1_000
    summariser.add(too_long, "The user asked six numbered questions; each was answered.")

    run = run_compaction(conv.pk, max_tokens=3_000, system_tokens=1_256)

    assert run.status == "stored"
    assert f"at most {limit} tokens" in stated_limit(summariser, 0)  # the prompt states the limit
    assert "Shorten" in stated_limit(summariser, 1) and f"at most {limit} tokens" in stated_limit(
        summariser, 1
    )
    assert run.summary is not None and run.summary.text.startswith("The user asked six")
    assert run.summary.llm_calls == 2


@pytest.mark.django_db
def test_the_default_window_keeps_the_summary_limit_it_had(summariser: Any) -> None:
    conv, _ = conversation_with_turns(6)
    text = "The user asked about flights. " * 100
    summariser.add(text)

    run = run_compaction(conv.pk)  # no window given: DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT

    assert "at most 1000 tokens" in stated_limit(summariser)
    assert run.summary is not None and run.summary.text == text.strip() and run.summary.llm_calls == 1


@pytest.mark.django_db
def test_a_stored_system_prompt_counts_when_the_caller_gives_none(summariser: Any) -> None:
    prompt = "You are the airline's support agent. " + "Follow the booking policy to the letter. " * 60
    conv, _ = conversation_with_turns(6, system_prompt=prompt)
    pinned = Message.objects.get(conversation=conv, seq=1).token_count
    assert pinned > 400
    summariser.add("The user asked six questions.")

    run_compaction(conv.pk, max_tokens=2_000)

    limit = summary_token_budget(2_000, system_tokens=pinned, overhead=overhead())
    assert limit < summary_token_budget(2_000, overhead=overhead())
    assert f"at most {limit} tokens" in stated_limit(summariser)


@pytest.mark.django_db
def test_offline_summaries_for_a_small_window_stay_within_its_budget(monkeypatch: Any) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    counter = get_token_counter()
    texts = {}
    for window in (3_000, 10_000):
        conv, _ = conversation_with_turns(60, system_prompt=None)
        run = run_compaction(conv.pk, max_tokens=window, system_tokens=1_256)
        assert run.summary is not None and run.summary.model == "offline-extractive"
        texts["small" if window == 3_000 else "large"] = run.summary.text
    limit = summary_token_budget(3_000, system_tokens=1_256, overhead=overhead())
    assert counter.count_text(texts["small"]) <= limit < counter.count_text(texts["large"]) <= 1_000
    # the newest items are kept, the oldest dropped first
    assert texts["small"].splitlines()[-1] == texts["large"].splitlines()[-1]


@pytest.mark.django_db
def test_the_celery_task_gets_and_uses_the_window(summariser: Any, monkeypatch: Any) -> None:
    conv, _ = conversation_with_turns(6)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(compact_conversation, "apply_async", lambda **kwargs: sent.append(kwargs))

    assert enqueue_compaction(conv.pk, max_tokens=3_000, system_tokens=1_256, only_if_needed=False) is None
    kwargs = sent[0]["kwargs"]
    assert (kwargs["max_tokens"], kwargs["system_tokens"]) == (3_000, 1_256)

    summariser.add("The user asked six questions.")
    compact_conversation(conv.pk, None, **kwargs)  # as a worker runs it
    limit = summary_token_budget(3_000, system_tokens=1_256, overhead=overhead())
    assert f"at most {limit} tokens" in stated_limit(summariser)
    assert Summary.objects.filter(conversation=conv).count() == 1


class LongPromptAgent(BaseToolCallingAgent, register=False):
    SYSTEM_PROMPT = "You are the airline's support agent. " + "Follow the booking policy to the letter. " * 60
    MEMORY_COMPACTOR_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 2_000


@pytest.mark.django_db
def test_an_agents_summaries_leave_room_for_its_prompt(
    summariser: Any, django_capture_on_commit_callbacks: Any
) -> None:
    summariser.add("The user asked two questions.")
    agent = LongPromptAgent(llm=ScriptedChatModel(["answer 0", "answer 1"]))
    conv = agent.start_conversation()
    prompt_tokens = agent.token_counter.count_message(ChatMessage.system(LongPromptAgent.SYSTEM_PROMPT))
    assert prompt_tokens > 400

    with (
        override_settings(
            AGENTMEMORY={
                "COMPACTION_LLM": SCRIPTED,
                "COMPACTION_MODE": "inline",
                "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 2,
            }
        ),
        django_capture_on_commit_callbacks(execute=True),
    ):
        for i in range(2):
            agent.run(conv, f"question {i}")

    # The prompt is sent with every window but never stored: the agent names its size.
    assert not Message.objects.filter(conversation=conv, role=Role.SYSTEM).exists()
    limit = summary_token_budget(2_000, system_tokens=prompt_tokens, overhead=overhead())
    assert limit < summary_token_budget(2_000, overhead=overhead())
    assert f"at most {limit} tokens" in stated_limit(summariser)
    assert Summary.objects.filter(conversation=conv).exists()


# -- the window: the summary before longer tool-result copies -----------------------------


def tool_loop(conv: Conversation, steps: int, *, result_words: int, argument_words: int = 5) -> None:
    """A turn in progress: a question, then ``steps`` tool exchanges."""
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("change all my reservations to economy")])
    for i in range(steps):
        call = ToolCall(id=f"c{i}", name="update", arguments={"note": "word " * argument_words, "n": i})
        history.add_messages(
            [
                ChatMessage.ai(None, [call]),
                ChatMessage.tool(f"reservation {i}: " + "detail " * result_words, tool_call_id=f"c{i}"),
            ]
        )


def summarised_tool_loop(
    *, summary_words: int, steps: int, result_words: int
) -> tuple[Conversation, Summary]:
    """Three turns folded into a summary of about ``summary_words`` words, then a tool loop
    in progress (never folded: it is the newest turn)."""
    conv = Conversation.objects.create(agent_key="t")
    history = PersistentChatHistory(conv)
    for i in range(3):
        history.add_messages([ChatMessage.human(f"question {i}"), ChatMessage.ai(f"answer {i}")])
    tool_loop(conv, steps, result_words=result_words)
    text = "The user is Omar Davis; he owns five reservations. " + "Detail. " * summary_words
    run_compaction(conv.pk, llm=ScriptedChatModel([text]), max_tokens=100_000)
    summary = Summary.objects.get(conversation=conv)
    assert summary.through_seq == 6
    return conv, summary


@pytest.mark.django_db
def test_the_summary_goes_before_longer_tool_result_copies() -> None:
    """Through the agent at 3,000 tokens, tau-bench tool loops were sent with their tool
    results cut to fill the window and the summary left out: its messages went uncovered."""
    conv, summary = summarised_tool_loop(summary_words=150, steps=6, result_words=300)
    turn = list(Message.objects.filter(conversation=conv, seq__gt=summary.through_seq).order_by("seq"))
    messages = sum(m.token_count for m in turn if m.role != Role.TOOL)
    floor = messages + 6 * MIN_FITTED_TOOL_RESULT_TOKENS
    builder = ContextWindowBuilder(conv, system_prompt="You change bookings.", gap_policy="close")
    system = builder.token_counter.count_message(ChatMessage.system("You change bookings."))
    # Room for the turn at its shortest and 100 tokens of the summary, not for all of it.
    budget = system + floor + 100
    assert summary.token_count > 100

    window = builder.build(budget)

    assert [m.seq for m in window.history] == [m.seq for m in turn]  # the whole turn
    results = [m for m in window.history if m.role is Role.TOOL]
    assert len(results) == 6 and all(m.truncated for m in results)
    assert all(builder.token_counter.count_message(m) <= MIN_FITTED_TOOL_RESULT_TOKENS for m in results)
    cut = window.messages[1]
    assert cut.truncated and cut.text.startswith(app_settings().SUMMARY_MESSAGE_PREFIX + "The user is Omar")
    assert 90 <= window.summary_tokens <= 100 and window.summary_id == summary.pk
    assert window.uncovered.count == 0 and window.total_tokens <= budget
    assert window_violations(window, max_tokens=budget) == []
    # With room to spare, the summary goes whole and the results get the rest.
    roomy = builder.build(budget + summary.token_count)
    assert roomy.summary_tokens == summary.token_count and not roomy.messages[1].truncated


@pytest.mark.django_db
def test_a_tool_loop_that_cannot_fit_beside_the_prompt_is_a_typed_error_naming_its_sizes() -> None:
    conv = Conversation.objects.create(agent_key="t")
    tool_loop(conv, steps=8, result_words=200, argument_words=60)  # long tool-call arguments
    rows = list(Message.objects.filter(conversation=conv).order_by("seq"))
    messages = sum(m.token_count for m in rows if m.role != Role.TOOL)
    builder = ContextWindowBuilder(conv, system_prompt="You change bookings.", gap_policy="close")
    system = builder.token_counter.count_message(ChatMessage.system("You change bookings."))
    budget = system + messages + 100  # the human and AI messages fit; not with 8 results of 64

    with pytest.raises(TurnTooLarge) as info:
        builder.build(budget)

    error = info.value
    markers = [
        builder.token_counter.count_message(marker_only_copy(m.to_chat_message()))
        for m in rows
        if m.role == Role.TOOL
    ]
    assert isinstance(error, ContextBudgetExceeded)
    assert (error.first_seq, error.last_seq) == (1, rows[-1].seq)
    # The least: every result as a copy holding only the truncation marker.
    assert error.message_tokens == messages and error.short_results == error.cut_results == 0
    assert error.marker_results == 8 and error.marker_result_tokens == sum(markers) > 100
    assert error.tool_result_floor == MIN_FITTED_TOOL_RESULT_TOKENS and error.summary_tokens == 0
    assert error.tokens == messages + sum(markers) and error.available == budget - system
    assert error.system_tokens == system and error.max_tokens == budget
    assert f"{messages:,} for its human and AI messages (tool-call arguments are never cut)" in str(error)
    assert f"{sum(markers):,} for 8 tool results sent as the truncation marker alone" in str(error)
    assert f"leaves {budget - system:,} for it after the {system:,} tokens of the system prompt" in str(error)
    # Room for the results at their shortest cut: the call goes out, nothing is left out.
    window = builder.build(budget + 8 * 64)
    assert len(window.history) == len(rows) and window.uncovered.count == 0
    assert not any(m.text.startswith(TRUNCATION_MARKER[:20]) for m in window.history)


def marker_costs(rows: list[Message]) -> list[int]:
    """Tokens of the marker-only copy of each tool result among ``rows``."""
    counter = get_token_counter()
    return [counter.count_message(marker_only_copy(m.to_chat_message())) for m in rows if m.role == Role.TOOL]


@pytest.mark.django_db
def test_a_turn_that_fits_only_with_marker_only_copies_is_sent_with_them_and_its_summary() -> None:
    """Through the agent at 3,000 tokens, two tau-bench calls missed by 14 and 47 tokens
    with every result cut to 64 tokens and the summary cut to its shortest: they were
    refused, although copies holding only the marker would have made the room."""
    conv, summary = summarised_tool_loop(summary_words=150, steps=6, result_words=300)
    turn = list(Message.objects.filter(conversation=conv, seq__gt=summary.through_seq).order_by("seq"))
    stored = {m.seq: m.content for m in turn}
    messages = sum(m.token_count for m in turn if m.role != Role.TOOL)
    markers = marker_costs(turn)
    savings = [MIN_FITTED_TOOL_RESULT_TOKENS - tokens for tokens in markers]
    assert all(saving > 0 for saving in savings)
    floor = messages + 6 * MIN_FITTED_TOOL_RESULT_TOKENS
    builder = ContextWindowBuilder(conv, gap_policy="close")
    # One token more than the oldest result's marker copy frees: the two oldest go as markers.
    budget = floor + MIN_CUT_SUMMARY_TOKENS - savings[0] - 1

    window = builder.build(budget)

    assert [m.seq for m in window.history] == [m.seq for m in turn]  # every call with its result
    assert window_violations(window, max_tokens=budget) == []
    assert window.summary_id == summary.pk and window.uncovered.count == 0
    assert window.messages[0].truncated and window.summary_tokens >= MIN_CUT_SUMMARY_TOKENS
    assert window.total_tokens <= budget
    results = [m for m in window.history if m.role is Role.TOOL]
    assert [m.tool_call_id for m in results] == [f"c{i}" for i in range(6)]
    counter = builder.token_counter
    for message in results[:2]:  # the oldest: the marker alone, naming what was left out
        total = len(stored[message.seq])
        assert message.text == TRUNCATION_MARKER.format(omitted=total, total=total)
    for i, message in enumerate(results[2:], start=2):  # the newer keep their first words
        assert message.text.startswith(f"reservation {i}: detail")
        assert counter.count_message(message) <= MIN_FITTED_TOOL_RESULT_TOKENS
    # Every copy is reported as one (a recorded call keeps 0 characters of the marker-only
    # ones); storage keeps every message whole.
    assert window.truncated == ("summary", *(m.seq for m in results)) and all(m.truncated for m in results)
    kept = window_changes(window)["truncated"]
    assert [kept[str(m.seq)] for m in results[:2]] == [0, 0] and all(
        kept[str(m.seq)] > 0 for m in results[2:]
    )
    assert {m.seq: m.content for m in Message.objects.filter(conversation=conv, seq__in=stored)} == stored
    # One token more: only the oldest result goes as the marker alone.
    roomier = builder.build(budget + 1)
    cut = [m for m in roomier.history if m.role is Role.TOOL]
    assert cut[0].text.startswith("\n[... truncated") and cut[1].text.startswith("reservation 1:")
    assert roomier.summary_id == summary.pk and roomier.uncovered.count == 0


@pytest.mark.django_db
def test_without_room_for_the_shortest_summary_an_agents_window_is_refused() -> None:
    conv, summary = summarised_tool_loop(summary_words=150, steps=4, result_words=300)
    turn = list(Message.objects.filter(conversation=conv, seq__gt=summary.through_seq))
    markers = marker_costs(turn)
    # The least the turn costs: its results as copies holding only the marker.
    least = sum(m.token_count for m in turn if m.role != Role.TOOL) + sum(markers)
    builder = ContextWindowBuilder(conv, gap_policy="close")
    budget = least + MIN_CUT_SUMMARY_TOKENS - 1

    with pytest.raises(TurnTooLarge) as info:
        builder.build(budget)
    error = info.value
    assert error.summary_tokens == MIN_CUT_SUMMARY_TOKENS and error.cut_results == 0
    assert error.marker_results == 4 and error.marker_result_tokens == sum(markers)
    assert error.tokens == least + MIN_CUT_SUMMARY_TOKENS > budget
    assert f"{sum(markers):,} for 4 tool results sent as the truncation marker alone" in str(error)
    assert f"{MIN_CUT_SUMMARY_TOKENS} for the shortest cut of the summary" in str(error)

    window = builder.build(budget + 1)  # the shortest cut fits beside the markers
    assert window.summary_id == summary.pk and window.uncovered.count == 0
    assert window.summary_tokens <= MIN_CUT_SUMMARY_TOKENS and window.messages[0].truncated
    assert all(m.text.startswith("\n[... truncated") for m in window.history if m.role is Role.TOOL)
    with pytest.raises(ContextBudgetExceeded):  # no cap asked for: no marker-only copies either
        ContextWindowBuilder(conv, max_tool_result_tokens=None).build(budget + 1)
    with pytest.raises(ContextBudgetExceeded):  # too small for even the markers
        ContextWindowBuilder(conv).build(least - 1)
