"""What a window leaves outside itself and the summary is worked out from the
conversation's counters, not by reading the messages left out: a build costs the same
queries at 10 and at 10,000 messages, and the figures equal a count of the stored rows in
every shape of history (pinned prompt, summaries, orphaned results, waiting tool calls,
late results, a cleared conversation, a prompt pinned again after clear)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder, left_out
from agentmemory.context.window import UncoveredMessages
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from tests.factories import conversation_with_turns


@pytest.fixture
def gap_counts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``(after, before)`` for which the builder fell back to counting the gap's rows."""
    calls: list[tuple[int, int]] = []
    original = left_out.read_uncovered

    def recording(using: str, conversation_id: int, **kwargs: Any) -> Any:
        calls.append((kwargs["after"], kwargs["before"]))
        return original(using, conversation_id, **kwargs)

    monkeypatch.setattr(left_out, "read_uncovered", recording)
    return calls


def stored_gap(conv_id: int, window: Any) -> UncoveredMessages:
    """The messages in neither the window nor the summary, counted row by row."""
    conv = Conversation.objects.get(pk=conv_id)
    floor = max(window.summary_through_seq or 0, conv.pinned_through)
    before = window.first_seq if window.first_seq is not None else 2**62
    rows = (
        Message.objects.filter(conversation_id=conv_id, seq__gt=floor, seq__lt=before)
        .exclude(role=Role.TOOL.value, exchange_seq__isnull=True)
        .exclude(exchange_seq__in=set((conv.pending_tool_calls or {}).values()))
        .order_by("seq")
        .values_list("seq", "token_count")
    )
    seqs = [seq for seq, _ in rows]
    return UncoveredMessages(len(seqs), sum(tokens for _, tokens in rows), tuple(seqs[-1000:]))


@pytest.mark.django_db
@pytest.mark.parametrize("turns", [5, 5_000])
def test_a_build_costs_the_same_queries_at_10_and_10000_messages(
    turns: int, django_assert_num_queries: Any, gap_counts: list[tuple[int, int]]
) -> None:
    conv, _ = conversation_with_turns(turns, tool_every=0, words=4, batch_size=5_000)
    assert conv.message_count == 2 * turns + 1

    # one statement: the window, and with it the few index lookups the gap report needs
    with django_assert_num_queries(1):
        window = ContextWindowBuilder(conv).build(200)

    assert window.uncovered == stored_gap(conv.pk, window)
    assert window.uncovered.count == window.first_seq - 2 > 0  # everything after the prompt
    assert gap_counts == []  # the rows left out were not read
    with django_assert_num_queries(1):
        plain = ContextWindowBuilder(conv, gap_policy="ignore").build(200)
    assert plain.history == window.history and not plain.uncovered


@pytest.mark.django_db
def test_seqs_are_listed_newest_first_up_to_a_thousand() -> None:
    conv, _ = conversation_with_turns(700, tool_every=0, words=2, batch_size=5_000)

    window = ContextWindowBuilder(conv).build(100)

    gap = window.uncovered
    assert gap.count == window.first_seq - 2 and len(gap.seqs) == 1_000
    assert gap.seqs == tuple(range(window.first_seq - 1_000, window.first_seq))
    assert gap == stored_gap(conv.pk, window)


@pytest.mark.django_db
def test_a_waiting_call_with_a_result_in_the_gap_is_counted_row_by_row(gap_counts: Any) -> None:
    conv, history = conversation_with_turns(2, tool_every=0)  # seqs 1..5
    calls = [ToolCall(id="a", name="approve", arguments={}), ToolCall(id="b", name="lookup", arguments={})]
    history.add_messages([ChatMessage.human("refund?"), ChatMessage.ai(None, calls)])  # 6, 7
    history.add_messages([ChatMessage.tool("found", tool_call_id="b")])  # 8; "a" still waits
    for i in range(6):
        history.add_messages([ChatMessage.human(f"still there {i}?"), ChatMessage.ai("yes")])

    window = ContextWindowBuilder(conv).build(60)

    assert window.uncovered == stored_gap(conv.pk, window)
    assert 7 not in window.uncovered.seqs and 8 not in window.uncovered.seqs
    assert len(gap_counts) == 1  # where the result of "b" sits is not in any counter


def random_history(rng: random.Random, history: PersistentChatHistory, conv_id: int, step: int) -> None:
    """One random step of a conversation's life."""
    kind = rng.choices(
        ["turn", "tools", "wait", "answer", "orphan", "compact", "clear"], [40, 15, 8, 8, 2, 10, 1]
    )[0]
    words = " ".join(f"w{step}_{k}" for k in range(rng.randint(1, 40)))
    conv = Conversation.objects.get(pk=conv_id)
    if kind == "turn":
        history.add_messages([ChatMessage.human(f"q{step} {words}"), ChatMessage.ai(f"a{step} {words}")])
    elif kind == "tools":
        call = ToolCall(id=f"t{step}", name="lookup", arguments={"q": step})
        history.add_messages(
            [
                ChatMessage.human(f"q{step}"),
                ChatMessage.ai(None, [call]),
                ChatMessage.tool(f"r{step} {words}", tool_call_id=f"t{step}"),
                ChatMessage.ai(f"a{step}"),
            ]
        )
    elif kind == "wait":
        calls = [ToolCall(id=f"w{step}_{i}", name="approve", arguments={}) for i in range(rng.randint(1, 2))]
        history.add_messages([ChatMessage.human(f"q{step} {words}"), ChatMessage.ai(None, calls)])
    elif kind == "answer" and conv.pending_tool_calls:
        call_id = rng.choice(sorted(conv.pending_tool_calls))
        history.add_messages([ChatMessage.tool(f"late {words}", tool_call_id=call_id)])
    elif kind == "orphan":
        history.add_messages(
            [ChatMessage.tool(f"stray {words}", tool_call_id=f"lost{step}")], validate_tool_pairs=False
        )
    elif kind == "compact":
        LLMMemoryCompactor(
            Conversation.objects,
            conv_id,
            ScriptedChatModel([f"Summary {step}."] * 50),
            history,
            max_input_tokens=400,
        ).compact()
    elif kind == "clear":
        history.clear()
        # Half the time the prompt is stored again, pinned at the next seq (its own random
        # stream, so the steps of every seed stay as they were).
        if random.Random(step).random() < 0.5:
            history.add_messages([ChatMessage.system(f"You are terse, take {step}.")])


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(4))
def test_the_gap_equals_a_count_of_the_stored_rows(seed: int, gap_counts: Any) -> None:
    rng = random.Random(seed)
    conv = Conversation.objects.create(agent_key="t")
    history = PersistentChatHistory(conv)
    if seed % 2 == 0:
        history.add_messages([ChatMessage.system("You are terse.")])
    checked = counted = 0
    for step in range(120):
        random_history(rng, history, conv.pk, step)
        budget = rng.choice([60, 150, 400, 1_500])
        prompt = rng.choice([None, "You answer briefly."])
        try:
            window = ContextWindowBuilder(conv, system_prompt=prompt).build(budget)
        except ContextBudgetExceeded:
            continue
        assert window.uncovered == stored_gap(conv.pk, window), (seed, step)
        checked += 1
        if len(gap_counts) > counted:
            counted = len(gap_counts)
            assert counted_for_a_reason(conv.pk, window), (seed, step)
    assert checked > 60 and counted < checked / 2


def counted_for_a_reason(conv_id: int, window: Any) -> bool:
    """Whether the counters could not tell the gap of ``window``: a tool exchange still
    waiting for a result has a stored result and sits before the window, or a summary
    covers orphaned tool results (compaction and ``recount_tokens`` disagree on their
    tokens)."""
    conv = Conversation.objects.get(pk=conv_id)
    before = window.first_seq if window.first_seq is not None else 2**62
    waiting = {seq for seq in (conv.pending_tool_calls or {}).values() if seq < before}
    messages = Message.objects.filter(conversation_id=conv_id)
    if messages.filter(role=Role.TOOL.value, exchange_seq__in=waiting).exists():
        return True
    summary = conv.summary
    return summary is not None and (
        messages.filter(
            role=Role.TOOL.value,
            exchange_seq__isnull=True,
            seq__gte=summary.first_seq,
            seq__lte=summary.through_seq,
        ).exists()
    )
