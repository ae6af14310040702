"""Windows that would leave stored messages in neither themselves nor the summary: the
``uncovered`` accounting, the gap policies ("close" compacts first), the
``messages_left_out`` signal, the builder's seed-contract constructor and ``max_tokens``
validation."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pickle
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db.models import F
from django.test import override_settings

from agentmemory import closing, signals
from agentmemory.agents import BaseToolCallingAgent
from agentmemory.compaction import BaseMemoryCompactor, LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.context.gaps import REASON_NO_COMPACTOR, REASON_NOT_CLOSED, REASON_NOT_REQUESTED
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import LengthTokenCounter
from tests.factories import conversation_with_turns

COUNTER = LengthTokenCounter()  # every message costs one token: the arithmetic stays visible


def ten_turns(**kwargs: Any) -> tuple[Conversation, PersistentChatHistory]:
    """System prompt at seq 1, then turn i: human at 2 + 2i, answer at 3 + 2i (no tools)."""
    return conversation_with_turns(10, token_counter=COUNTER, tool_every=0, **kwargs)


@pytest.fixture
def left_out() -> Any:
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    signals.messages_left_out.connect(receiver)
    yield received
    signals.messages_left_out.disconnect(receiver)


# -- accounting --------------------------------------------------------------------------


@pytest.mark.django_db
def test_window_reports_what_neither_it_nor_the_summary_holds(left_out: Any) -> None:
    conv, _ = ten_turns()

    window = ContextWindowBuilder(conv, token_counter=COUNTER).build(5)

    assert [m.seq for m in window.history] == [18, 19, 20, 21]
    assert window.uncovered.count == 16 and window.uncovered.tokens == 16
    assert window.uncovered.seqs == tuple(range(2, 18))
    [sent] = left_out
    assert sent["conversation_id"] == conv.pk and sent["window"] is window
    assert sent["uncovered"] == window.uncovered
    assert sent["messages_removed"] == 16 and sent["messages_remaining"] == 4
    assert sent["reason"] == REASON_NOT_REQUESTED


@pytest.mark.parametrize(
    ("first", "last", "excluded"),
    [
        (3, 17, frozenset()),
        (3, 17, frozenset({3, 9, 17})),
        (1, 5_000, frozenset()),
        (1, 5_000, frozenset({4_999})),
    ],
)
def test_a_span_of_uncovered_messages_lists_its_newest_seqs(
    first: int, last: int, excluded: frozenset[int]
) -> None:
    from agentmemory.context.window import MAX_LISTED_SEQS, UncoveredMessages

    count = last - first + 1 - len(excluded)
    uncovered = UncoveredMessages.from_span(count, 7 * count, first, last, excluded)
    expected = tuple(s for s in range(first, last + 1) if s not in excluded)[-MAX_LISTED_SEQS:]
    # the bounds the log line names, worked out without listing the span first
    assert uncovered.seq_range == (expected[0], expected[-1])
    assert uncovered.seqs == expected
    assert uncovered.seq_range == (expected[0], expected[-1])
    assert UncoveredMessages().seq_range is None


@pytest.mark.django_db
def test_orphaned_tool_results_are_not_counted_as_uncovered() -> None:
    conv, history = conversation_with_turns(3, token_counter=COUNTER, tool_every=0)
    # A tool result that answers no call, stored around validation (seq 8).
    Message.objects.create(
        conversation=conv, seq=8, role=Role.TOOL.value, content="stray", tool_call_id="lost", token_count=1
    )
    Conversation.objects.filter(pk=conv.pk).update(
        last_seq=F("last_seq") + 1, message_count=F("message_count") + 1
    )
    history.add_messages([ChatMessage.human("q"), ChatMessage.ai("a")])

    window = ContextWindowBuilder(conv, token_counter=COUNTER).build(3)

    assert [m.seq for m in window.history] == [9, 10]
    assert window.uncovered.seqs == (2, 3, 4, 5, 6, 7)  # not 8


@pytest.mark.django_db
def test_a_window_without_a_gap_costs_no_extra_query(django_assert_num_queries: Any) -> None:
    conv, _ = ten_turns()
    with django_assert_num_queries(1):
        whole = ContextWindowBuilder(conv, token_counter=COUNTER).build(100)
    assert not whole.uncovered and whole.uncovered.count == 0
    # the gap is worked out from what the window's statement read with it
    with django_assert_num_queries(1):
        gapped = ContextWindowBuilder(conv, token_counter=COUNTER).build(5)
    assert gapped.uncovered.count == 16
    with django_assert_num_queries(1):  # plain trimming
        ignored = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="ignore").build(5)
    assert ignored.uncovered.count == 0 and ignored.history == gapped.history


@pytest.mark.django_db
def test_a_greeting_before_the_first_question_is_uncovered() -> None:
    conv = Conversation.objects.create(agent_key="t")
    PersistentChatHistory(conv, token_counter=COUNTER).add_messages(
        [ChatMessage.ai("Hello! How can I help?"), ChatMessage.human("hi"), ChatMessage.ai("hello")]
    )

    window = ContextWindowBuilder(conv, token_counter=COUNTER).build(100)

    assert [m.seq for m in window.history] == [2, 3]
    assert window.uncovered.seqs == (1,)


@pytest.mark.django_db
def test_the_summary_covers_what_it_folded() -> None:
    conv, history = ten_turns()
    compactor = LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["The user asked ten questions."]), history
    )
    summary = compactor.compact()
    assert summary is not None and summary.through_seq == 19

    window = ContextWindowBuilder(conv, token_counter=COUNTER).build(10)

    assert window.summary_id == summary.pk and [m.seq for m in window.history] == [20, 21]
    assert window.uncovered.count == 0


# -- the "close" policy --------------------------------------------------------------------


@dataclass(frozen=True)
class FakeRequest:
    """What ``request_compaction`` returns, as far as the builder reads it."""

    due: bool = True
    mode: str = "inline"
    enqueued: bool = False
    ran_inline: bool = True
    summary_id: int | None = None
    error: str | None = None


@pytest.fixture
def compaction_requests(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``request_compaction`` replaced by an inline run of ``LLMMemoryCompactor`` with a
    scripted summariser; each call's arguments are recorded."""
    import agentmemory.compaction as compaction

    calls: list[dict[str, Any]] = []

    def request(conversation_id: int, **kwargs: Any) -> FakeRequest:
        calls.append({"conversation_id": conversation_id, **kwargs})
        if kwargs.get("reason") == "fail":
            return FakeRequest(error="LLMError: down")
        cls = kwargs.get("compactor_class") or LLMMemoryCompactor
        history = PersistentChatHistory(conversation_id, token_counter=COUNTER)
        summary = cls(
            Conversation.objects, conversation_id, ScriptedChatModel(["Earlier: questions."]), history
        ).compact()
        return FakeRequest(summary_id=summary.pk if summary else None)

    monkeypatch.setattr(compaction, "request_compaction", request, raising=False)
    return calls


@pytest.mark.django_db(transaction=True)
def test_close_compacts_before_returning_a_window_with_a_gap(compaction_requests: Any, left_out: Any) -> None:
    conv, _ = ten_turns()

    window = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close").build(5)

    [call] = compaction_requests
    assert call["conversation_id"] == conv.pk and call["force"] is True
    assert call["max_tokens"] == 5 and call["wait"] == 30.0
    summary = Summary.objects.get(conversation=conv)
    assert window.summary_id == summary.pk and window.compaction.summary_id == summary.pk
    assert [m.seq for m in window.history] == [20, 21]
    assert window.uncovered.count == 0 and left_out == []


@pytest.mark.django_db(transaction=True)
def test_close_reports_a_gap_compaction_could_not_close(
    compaction_requests: Any, left_out: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    conv, _ = ten_turns()
    builder = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close")
    monkeypatch.setattr(
        closing, "_request_compaction", lambda builder, max_tokens: FakeRequest(error="LLMError: down")
    )

    with caplog.at_level(logging.WARNING, logger="agentmemory.context"):
        window = builder.build(5)

    assert window.uncovered.count == 16 and window.compaction.error == "LLMError: down"
    [sent] = left_out
    assert sent["reason"] == f"{REASON_NOT_CLOSED}: LLMError: down"
    assert "leaves 16 stored messages (16 tokens, seqs 2..17)" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("budget", [5, 80])
def test_a_summary_made_to_close_a_gap_is_fitted_like_any_other(
    budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The compaction that closes the gap makes a summary larger than the room beside the
    # turn. The window over it is then built as any window over a summary: cut to the room
    # (80 tokens), or refused naming the sizes (5), the same answer as a moment later. Seen
    # through the API at max_tokens=40: a 422 blaming "the system prompt and summary".
    from agentmemory.exceptions import TurnTooLarge

    # system prompt at seq 1, turn i: human at 2 + 2i, answer at 3 + 2i; 121 tokens in all
    conv, _ = conversation_with_turns(60, token_counter=COUNTER, tool_every=0)
    builder = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close")

    def compact(builder: Any, max_tokens: int) -> FakeRequest:
        summary = Summary.objects.create(
            conversation=conv,
            text="so far " * 200,
            first_seq=2,
            through_seq=119,
            human_messages_covered=59,
            token_count=100,
            token_counter=COUNTER.id,
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
        return FakeRequest(summary_id=summary.pk)

    monkeypatch.setattr(closing, "_request_compaction", compact)
    if budget == 5:
        with pytest.raises(TurnTooLarge) as first:
            builder.build(budget)
        with pytest.raises(TurnTooLarge) as again:  # the summary is stored now
            ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close").build(budget)
        assert str(first.value) == str(again.value)
        assert "shortest cut of the summary" in str(first.value)
        return
    window = builder.build(budget)
    assert window.compaction is not None and window.summary_id is not None
    assert window.messages[1].truncated and window.summary_tokens <= budget - 3
    assert [m.seq for m in window.history] == [120, 121] and window.uncovered.count == 0
    assert window.total_tokens <= budget


@pytest.mark.django_db(transaction=True)
def test_close_with_the_compactors_own_class(compaction_requests: Any) -> None:
    class KeepTwoTurns(LLMMemoryCompactor):
        pass

    conv, history = ten_turns()
    compactor = KeepTwoTurns(Conversation.objects, conv.pk, None, history, keep_recent_human_turns=2)

    window = ContextWindowBuilder(chat_history=history, memory_compactor=compactor, gap_policy="close").build(
        5
    )

    assert compaction_requests[0]["compactor_class"] is KeepTwoTurns
    assert window.uncovered.count == 0 and [m.seq for m in window.history] == [20, 21]


@pytest.mark.django_db
def test_close_without_a_compactor_only_reports(compaction_requests: Any, left_out: Any) -> None:
    _conv, history = ten_turns()

    window = ContextWindowBuilder(chat_history=history, memory_compactor=None, gap_policy="close").build(5)

    assert compaction_requests == [] and window.uncovered.count == 16
    assert left_out[0]["reason"] == REASON_NO_COMPACTOR


@pytest.mark.django_db
def test_close_with_compaction_off_sends_the_stored_summary_and_warns(
    compaction_requests: Any, left_out: Any, caplog: Any
) -> None:
    conv, _ = ten_turns()
    summary = Summary.objects.create(
        conversation=conv,
        text="Earlier: greetings.",
        first_seq=2,
        through_seq=3,
        token_count=1,
        human_messages_covered=1,
        token_counter=COUNTER.id,
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)

    with caplog.at_level(logging.WARNING, logger="agentmemory.context"):
        window = ContextWindowBuilder(
            conv, token_counter=COUNTER, gap_policy="close", compaction=False
        ).build(6)

    assert compaction_requests == [] and window.summary_id == summary.pk
    assert window.uncovered.count == 14
    assert left_out[0]["reason"] == REASON_NO_COMPACTOR
    assert "leaves 14 stored messages" in caplog.text and REASON_NO_COMPACTOR in caplog.text


class Sliding(BaseToolCallingAgent, register=False):
    """An agent without a memory compactor: a sliding window over its history."""

    AGENT_KEY = "sliding-test"
    SYSTEM_PROMPT = "Be brief."
    CONVERSATION_HISTORY_TOKEN_LIMIT = 60


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("policy", "level", "reason"),
    [("close", logging.WARNING, REASON_NO_COMPACTOR), ("report", logging.INFO, REASON_NOT_REQUESTED)],
)
def test_an_agent_without_a_compactor_reports_what_it_leaves_out_by_the_gap_policy(
    policy: str, level: int, reason: str, compaction_requests: Any, left_out: Any, caplog: Any
) -> None:
    """The README: agents follow ``CONTEXT_GAP_POLICY`` ("close" by default) and what is left
    out is logged as a warning. An agent without a compactor was built with "report"
    whatever the setting: its trimmed turns were logged at INFO, unseen by default."""
    conv = Conversation.objects.create(agent_key=Sliding.AGENT_KEY)
    replies = [f"Answer number {i} to that question." for i in range(8)]
    agent = Sliding(ScriptedChatModel(replies))
    with (
        override_settings(AGENTMEMORY={"CONTEXT_GAP_POLICY": policy}),
        caplog.at_level(logging.INFO, logger="agentmemory.context"),
    ):
        for i in range(8):
            result = agent.run(conv, f"Question number {i}: what do you think of this one?")

    assert compaction_requests == [] and not Summary.objects.filter(conversation=conv).exists()
    assert result.windows[-1].uncovered.count > 0
    assert left_out and {sent["reason"] for sent in left_out} == {reason}
    logged = [r for r in caplog.records if "in neither the window nor the summary" in r.getMessage()]
    assert logged and {r.levelno for r in logged} == {level}


# -- the seed's constructor ------------------------------------------------------------------


class TextCompactor(BaseMemoryCompactor):
    """A compactor written to the seed's contract: ``get_summary()`` returns text or None."""

    text: str | None = "The reader asked about Django."

    def get_summary(self) -> str | None:  # type: ignore[override]  # the seed's contract returns text
        return self.text

    def compact_if_needed(self) -> None:  # type: ignore[override]  # the seed's contract takes no budget
        return None


@pytest.mark.django_db
def test_builder_from_chat_history_and_a_custom_compactor(compaction_requests: Any) -> None:
    conv, history = ten_turns()
    compactor = TextCompactor(Conversation.objects, conv.pk, None, history)

    window = ContextWindowBuilder(chat_history=history, memory_compactor=compactor, gap_policy="close").build(
        max_tokens=6
    )

    assert window.messages[1].role is Role.SYSTEM
    assert window.messages[1].content.endswith("The reader asked about Django.")
    assert window.summary_tokens == 1 and window.total_tokens <= 6
    assert [m.seq for m in window.history] == [18, 19, 20, 21]
    # What a custom summary covers is unknown: no gap is claimed, no compaction asked for.
    assert window.uncovered.count == 0 and compaction_requests == []
    # The window can be used as the list of messages the seed's code expects.
    assert list(window) == window.messages and window[0] == window.messages[0] and len(window) == 6


@pytest.mark.django_db
def test_custom_compactor_without_a_summary_yet_and_no_compactor_send_no_summary() -> None:
    conv, history = ten_turns()
    LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel(["S."]), history).compact()
    empty = TextCompactor(Conversation.objects, conv.pk, None, history)
    empty.text = None

    for compactor in (empty, None):
        window = ContextWindowBuilder(chat_history=history, memory_compactor=compactor).build(5)
        assert window.summary_id is None and window.summary_tokens == 0
        assert [m.role for m in window.messages[:2]] == [Role.SYSTEM, Role.HUMAN]
        assert window.uncovered.count == 16  # nothing is covered without a summary

    ours = LLMMemoryCompactor(Conversation.objects, conv.pk, None, history)
    window = ContextWindowBuilder(chat_history=history, memory_compactor=ours).build(5)
    assert window.summary_id == Summary.objects.get(conversation=conv).pk


@pytest.mark.django_db
def test_builder_needs_one_conversation() -> None:
    conv, history = ten_turns()
    other, _ = ten_turns()
    with pytest.raises(TypeError, match="needs a conversation or chat_history"):
        ContextWindowBuilder()
    with pytest.raises(ValueError, match="different conversations"):
        ContextWindowBuilder(other, chat_history=history)
    with pytest.raises(ValueError, match="gap_policy"):
        ContextWindowBuilder(conv, gap_policy="compact")
    assert ContextWindowBuilder(chat_history=history).token_counter is history.token_counter


# -- max_tokens ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("max_tokens", "error"),
    [
        (math.nan, TypeError),
        (math.inf, TypeError),
        (-math.inf, TypeError),
        (1500.0, TypeError),
        ("10", TypeError),
        (True, TypeError),
        (0, ValueError),
        (-1, ValueError),
        (1_000_001, ValueError),
        (10**30, ValueError),
    ],
)
def test_max_tokens_must_be_a_whole_number_of_tokens_within_the_ceiling(max_tokens: Any, error: type) -> None:
    conv, _ = ten_turns()
    with pytest.raises(error, match="max_tokens"):
        ContextWindowBuilder(conv).build(max_tokens)


@pytest.mark.django_db
def test_the_ceiling_is_a_setting() -> None:
    conv, _ = ten_turns()
    assert ContextWindowBuilder(conv).build(1_000_000).uncovered.count == 0
    with override_settings(
        AGENTMEMORY={"MAX_CONTEXT_TOKENS": 50, "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT": 40}
    ):
        assert ContextWindowBuilder(conv, token_counter=COUNTER).build(50).max_tokens == 50
        with pytest.raises(ValueError, match=r"above AGENTMEMORY\['MAX_CONTEXT_TOKENS'\] \(50 tokens\)"):
            ContextWindowBuilder(conv).build(51)
    with pytest.raises(TypeError, match="max_messages"):
        ContextWindowBuilder(conv).build(100, max_messages=2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setting", "error_id"),
    [
        ({"MAX_CONTEXT_TOKENS": 0}, "agentmemory.E003"),
        ({"MAX_CONTEXT_TOKENS": 5_000}, "agentmemory.E020"),
        ({"CONTEXT_GAP_POLICY": "always"}, "agentmemory.E021"),
        ({"COMPACTION_WAIT_SECONDS": -1}, "agentmemory.E022"),
        ({"COMPACTION_WAIT_SECONDS": "30"}, "agentmemory.E022"),
    ],
)
def test_checks_refuse_bad_context_settings(setting: dict[str, Any], error_id: str) -> None:
    with override_settings(AGENTMEMORY=setting):
        assert error_id in {problem.id for problem in run_checks()}


@pytest.mark.django_db
def test_a_tool_exchange_still_waiting_for_its_result_is_not_uncovered() -> None:
    from agentmemory.messages import ToolCall

    conv, history = conversation_with_turns(2, token_counter=COUNTER, tool_every=0)  # seqs 1..5
    call = ToolCall(id="approve_1", name="approve", arguments={})
    history.add_messages([ChatMessage.human("refund?"), ChatMessage.ai(None, [call])])  # 6, 7 waits
    history.add_messages([ChatMessage.human("still there?"), ChatMessage.ai("yes")])  # 8, 9
    history.add_messages([ChatMessage.human("ok"), ChatMessage.ai("done")])  # 10, 11

    window = ContextWindowBuilder(conv, token_counter=COUNTER).build(3)

    assert [m.seq for m in window.history] == [10, 11]
    assert window.uncovered.seqs == (2, 3, 4, 5, 6, 8, 9)  # not the waiting call at 7
    assert window.uncovered.count == 7 and window.uncovered.tokens == 7


# -- a tool loop that outgrows the window ---------------------------------------------------


@pytest.mark.django_db
def test_a_tool_loop_that_outgrows_the_window_is_sent_with_shorter_tool_results() -> None:
    """The turn in progress (a question, then tool results piling up) no longer fits: its
    tool results are sent as truncated copies cut to one size instead of failing the call
    (through the agent, tau-bench runs at 3,000 tokens failed this way)."""
    from agentmemory.messages import ToolCall

    conv = Conversation.objects.create(agent_key="t")
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("cancel all my reservations"), ChatMessage.ai("Which ones?")])
    history.add_messages([ChatMessage.human("all of them, please")])  # seq 3
    for i in range(4):
        call = ToolCall(id=f"c{i}", name="cancel", arguments={"n": i})
        history.add_messages(
            [
                ChatMessage.ai(None, [call]),
                ChatMessage.tool(f"cancelled {i}: " + "detail " * 400, tool_call_id=f"c{i}"),
            ]
        )
    stored = {m.seq: m.token_count for m in Message.objects.filter(conversation=conv)}
    turn_tokens = sum(tokens for seq, tokens in stored.items() if seq >= 3)
    assert turn_tokens > 1_500

    window = ContextWindowBuilder(conv).build(1_500)

    assert [m.seq for m in window.history] == list(range(3, 12))  # the whole turn, in order
    assert window.truncated == (5, 7, 9, 11) and window.total_tokens <= 1_500
    assert all(m.truncated for m in window.history if m.role is Role.TOOL)
    assert window.uncovered.seqs == (1, 2)
    with pytest.raises(ContextBudgetExceeded):  # no cap asked for: no truncated copies either
        ContextWindowBuilder(conv, max_tool_result_tokens=None).build(1_500)
    with pytest.raises(ContextBudgetExceeded):  # too small for even marker-only copies
        ContextWindowBuilder(conv).build(100)


@pytest.mark.django_db(transaction=True)
def test_a_turn_that_fits_beside_the_prompt_but_not_the_summary_gets_a_cut_summary(
    compaction_requests: Any, left_out: Any
) -> None:
    """Through the agent, tau-bench calls failed with a budget error although the turn in
    progress fitted the window beside the system prompt: the summary took the room."""
    from agentmemory.context.fitting import MIN_CUT_SUMMARY_TOKENS
    from agentmemory.context.gaps import REASON_SUMMARY_CUT
    from agentmemory.exceptions import TurnTooLarge
    from agentmemory.messages import ToolCall

    conv = Conversation.objects.create(agent_key="t")
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("book a flight"), ChatMessage.ai("Where to?")])
    history.add_messages([ChatMessage.human("Paris, and change my seat")])  # seq 3
    for i in range(2):
        call = ToolCall(id=f"c{i}", name="search", arguments={"n": i})
        thinking = f"step {i}: " + "reasoning " * 150  # AI text cannot be cut, tool results are tiny
        history.add_messages([ChatMessage.ai(thinking, [call]), ChatMessage.tool("ok", tool_call_id=f"c{i}")])
    long_summary = "The user booked a flight to Paris and asked about seats. " * 40
    LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([long_summary]), history).compact()
    summary = Summary.objects.get(conversation=conv)
    assert summary.through_seq == 2 and summary.token_count > 300
    turn = sum(Message.objects.filter(conversation=conv, seq__gte=3).values_list("token_count", flat=True))
    builder = ContextWindowBuilder(conv, system_prompt="You book flights.", gap_policy="close")
    budget = turn + 120  # the turn and the prompt fit; with the whole summary they do not

    window = builder.build(budget)

    assert [m.seq for m in window.history] == [3, 4, 5, 6, 7]  # the turn, whole
    cut = window.messages[1]
    assert cut.role is Role.SYSTEM and cut.truncated and "truncated for the context window" in cut.text
    assert window.total_tokens <= budget and window.summary_tokens > 0
    # The cut summary still stands for what it covers: nothing is left out, and no
    # compaction was asked for (it cannot make the summary smaller).
    assert window.summary_id == summary.pk and window.uncovered.count == 0
    assert compaction_requests == [] and left_out == []
    # Below the shortest useful cut, an agent's builder (gap policy "close") sends no window
    # that leaves the summary's messages out: the error names what the turn needs.
    with pytest.raises(TurnTooLarge) as info:
        builder.build(turn + 40)
    error = info.value
    assert (error.first_seq, error.last_seq, error.max_tokens) == (3, 7, turn + 40)
    assert error.message_tokens + error.short_result_tokens == turn and error.short_results == 2
    assert error.cut_results == 0 and error.summary_tokens == MIN_CUT_SUMMARY_TOKENS
    assert error.tokens == turn + MIN_CUT_SUMMARY_TOKENS > error.available == turn + 40 - error.system_tokens
    assert (
        f"the newest turn (seqs 3..7), which a window sends whole, needs at least {turn + 64:,} tokens"
        in str(error)
    )
    assert compaction_requests == [] and left_out == []
    # A read that only reports leaves the summary out and reports what it covered.
    reader = ContextWindowBuilder(conv, system_prompt="You book flights.", gap_policy="report")
    tight = reader.build(turn + 40)
    assert [m.seq for m in tight.history] == [3, 4, 5, 6, 7] and tight.summary_id is None
    assert tight.uncovered.seqs == (1, 2)
    assert left_out[0]["reason"] == REASON_SUMMARY_CUT


def test_rows_and_messages_built_for_speed_equal_the_dataclasses_own() -> None:
    from agentmemory.context import packing
    from agentmemory.context.packing import RowMeta
    from agentmemory.store.rows import _new_chat, _new_row

    assert _new_row(3, "tool", 7, 2, "c1", ()) == RowMeta(3, "tool", 7, 2, "c1", ())
    positions = {
        "seq": packing._SEQ,
        "role": packing._ROLE,
        "token_count": packing._TOKENS,
        "exchange_seq": packing._EXCHANGE,
        "tool_call_id": packing._CALL_ID,
        "tool_calls": packing._CALLS,
        "placeholder": packing._PLACEHOLDER,
    }
    assert all(RowMeta._fields[index] == name for name, index in positions.items())
    made = _new_chat(Role.AI, "hi", (), "", "", 4, 9, 2, ())
    assert made == ChatMessage(role=Role.AI, content="hi", seq=4, id=9, token_count=2)
    assert (
        made.metadata == {} and made.metadata is not _new_chat(Role.AI, "", (), "", "", 1, 1, 1, ()).metadata
    )
    # A made message is a frozen ``ChatMessage`` like any other: its type, its pickling.
    assert type(made) is ChatMessage
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.content = "changed"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(made)) == made


@pytest.mark.parametrize(
    "stored",
    [
        [{"id": "c1", "name": "f", "arguments": {"q": [1, {"x": None}]}}],
        [{"id": "c1", "name": "f"}, {"id": "c2", "name": "g", "arguments": None}],
        [{"id": "c1", "name": "f", "arguments": [["k", "v"]]}],  # stored around validation
    ],
)
def test_tool_calls_read_from_a_row_equal_from_stored(stored: list[dict[str, object]]) -> None:
    from agentmemory.messages import ToolCall
    from agentmemory.store.rows import _call_objects

    made = _call_objects(json.loads(json.dumps(stored)))
    assert made == tuple(ToolCall.from_stored(c) for c in stored)
    assert all(type(call) is ToolCall for call in made)


@pytest.mark.parametrize(
    "text",
    [
        '[{"a": 1}]',
        "  [1, 2]  ",
        '{"k": "v"}',
        "NaN",
        '{"big": 1e400}',
        '"text"',
        "not json",
        "[1] trailing",
        "",
        "[",
        b'{"a": 1}',
    ],
)
def test_json_columns_decode_as_the_model_fields_do(text: str | bytes) -> None:
    """As ``JSONField.from_db_value`` with the fields' decoder (``StoredJSONDecoder``:
    ``NaN`` and ``1e400`` read as their text)."""
    from agentmemory.messages import StoredJSONDecoder
    from agentmemory.store.rows import _loads

    try:
        expected = json.loads(text, cls=StoredJSONDecoder)
    except json.JSONDecodeError:
        expected = text  # what JSONField.from_db_value returns for text that is not JSON
    assert _loads(text) == expected
