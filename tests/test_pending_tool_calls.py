"""Tool calls that wait and results that come late: what is stored, the windows they give
(pending exchanges left out, or sent with a placeholder result), and compaction that does
not fold an exchange until it is answered or abandoned."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder, RowMeta, pack_history
from agentmemory.context.packing import PENDING_RESULT_PLACEHOLDER
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory, last_foldable_seq
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, PendingToolCall
from agentmemory.tokens import LengthTokenCounter

pytestmark = pytest.mark.django_db

COUNTER = LengthTokenCounter()  # every message costs one token: budgets count messages


def store(conv: Conversation, *messages: ChatMessage) -> list[ChatMessage]:
    return PersistentChatHistory(conv, token_counter=COUNTER).add_messages(messages)


def build(conv: Conversation, max_tokens: int = 100, **kwargs):  # type: ignore[no-untyped-def]
    window = ContextWindowBuilder(conv, token_counter=COUNTER, **kwargs).build(max_tokens)
    stored = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
    assert window_violations(window, stored_seqs=stored, newest_seq=max(stored)) == []
    return window


def shape(window) -> list[str]:  # type: ignore[no-untyped-def]
    """The history as ``role:seq`` (``tool:<call id>`` for results, ``*`` for placeholders)."""
    out = []
    for m in window.history:
        if m.role is Role.TOOL:
            out.append(f"tool:{m.tool_call_id}{'*' if m.metadata.get('pending_tool_call') else ''}@{m.seq}")
        else:
            out.append(f"{m.role.value}:{m.seq}")
    return out


def approval_flow(conv: Conversation) -> None:
    """seq 1 human, 2 AI calling a (answered at 3) and b (waiting for approval), then the user
    goes on: 4 human, 5 AI answer."""
    store(
        conv,
        ChatMessage.human("refund order 1042"),
        ChatMessage.ai("Checking.", [ToolCall("a", "lookup", {"order": 1042}), ToolCall("b", "refund", {})]),
        ChatMessage.tool("order found", tool_call_id="a", name="lookup"),
    )
    store(conv, ChatMessage.human("how long will it take?"), ChatMessage.ai("Usually a day."))


# -- storage -------------------------------------------------------------------------------


def test_pending_calls_describe_what_waits_and_for_how_long(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"b": 2}
    made_at = Message.objects.get(conversation=conversation, seq=2).created_at
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": 3600}):
        fresh = conversation.pending_calls(now=made_at + timedelta(seconds=10))
        old = conversation.pending_calls(now=made_at + timedelta(hours=2))
    assert fresh == [
        PendingToolCall(
            tool_call_id="b",
            name="refund",
            arguments={},
            ai_seq=2,
            requested_at=made_at,
            age_seconds=10.0,
            abandoned=False,
        )
    ]
    assert old[0].abandoned and old[0].age_seconds == 7200.0
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": None}):
        assert not conversation.pending_calls(now=made_at + timedelta(days=365))[0].abandoned


# -- windows -------------------------------------------------------------------------------


def test_a_pending_exchange_is_left_out_and_the_turns_after_it_are_sent(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    window = build(conversation)
    assert shape(window) == ["human:1", "human:4", "ai:5"]
    assert window.skipped_pending == (2, 3)
    assert window.placeholders == ()


def test_placeholder_mode_sends_the_pending_exchange_with_a_marked_result_never_stored(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    before = list(Message.objects.filter(conversation=conversation).values())
    window = build(conversation, pending_tool_calls="placeholder")
    assert shape(window) == ["human:1", "ai:2", "tool:a@3", "tool:b*@None", "human:4", "ai:5"]
    placeholder = window.history[3]
    assert placeholder.content == PENDING_RESULT_PLACEHOLDER and placeholder.name == "refund"
    assert window.placeholders == ("b",) and window.skipped_pending == ()
    # the placeholder is paid for in the budget, and nothing was written
    assert window.history_tokens == 6 and window.total_tokens <= window.max_tokens
    assert list(Message.objects.filter(conversation=conversation).values()) == before
    # the setting chooses the default mode
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALLS": "placeholder"}):
        assert shape(build(conversation)) == shape(window)
    # and a budget too small for the exchange with its placeholder starts at the next turn
    assert shape(build(conversation, max_tokens=5, pending_tool_calls="placeholder")) == ["human:4", "ai:5"]


def test_a_late_result_is_sent_right_after_its_call_in_tool_calls_order(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    late = store(conversation, ChatMessage.tool("refund approved", tool_call_id="b", name="refund"))
    assert late[0].seq == 6
    assert Message.objects.get(conversation=conversation, seq=6).exchange_seq == 2
    window = build(conversation)
    assert shape(window) == ["human:1", "ai:2", "tool:a@3", "tool:b@6", "human:4", "ai:5"]
    assert (window.first_seq, window.last_seq) == (1, 6)
    assert window.skipped_pending == () and window.skipped_late == ()
    # results arriving in reverse order over several appends still follow the call order
    store(
        conversation,
        ChatMessage.human("check both"),
        ChatMessage.ai(None, [ToolCall("x", "t"), ToolCall("y", "t"), ToolCall("z", "t")]),
    )
    store(conversation, ChatMessage.tool("Z", tool_call_id="z"))
    store(conversation, ChatMessage.human("still there?"))
    store(conversation, ChatMessage.tool("Y", tool_call_id="y"), ChatMessage.tool("X", tool_call_id="x"))
    tail = shape(build(conversation))[6:]
    assert tail == ["human:7", "ai:8", "tool:x@12", "tool:y@11", "tool:z@9", "human:10"]


def test_the_exchange_costs_its_ai_message_and_every_result_wherever_stored(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    store(conversation, ChatMessage.tool("refund approved", tool_call_id="b"))
    # 6 messages: the whole history fits in 6, and not in 5 (the turn 1-3+6 goes out whole)
    assert shape(build(conversation, max_tokens=6)) == [
        "human:1",
        "ai:2",
        "tool:a@3",
        "tool:b@6",
        "human:4",
        "ai:5",
    ]
    five = build(conversation, max_tokens=5)
    assert shape(five) == ["human:4", "ai:5"]
    # the late result is inside the window's seqs but belongs to an exchange left out: reported
    assert five.skipped_late == (6,)


def test_a_late_result_of_an_exchange_folded_into_the_summary_is_not_sent_alone(conversation) -> None:  # type: ignore[no-untyped-def]
    approval_flow(conversation)
    store(conversation, ChatMessage.human("third"), ChatMessage.ai("ok"))
    Message.objects.filter(conversation=conversation, seq=2).update(
        created_at=timezone.now() - timedelta(days=2)
    )
    llm = ScriptedChatModel(["The user asked for a refund of order 1042; approval was pending."])
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": 3600}):
        compactor = LLMMemoryCompactor(
            Conversation.objects, conversation.pk, llm, None, summarize_every_n_human=1
        )
        summary = compactor.compact()
    assert summary is not None and summary.through_seq == 5  # the abandoned exchange was folded
    store(conversation, ChatMessage.tool("refund approved", tool_call_id="b"))
    window = build(conversation)
    assert shape(window) == ["human:6", "ai:7"]
    assert window.skipped_late == (8,)


def test_a_human_message_right_after_a_pending_call_opens_the_window_on_it(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("book it"), ChatMessage.ai(None, [ToolCall("c1", "book")]))
    store(conversation, ChatMessage.human("are you there?"))
    window = build(conversation)
    assert shape(window) == ["human:1", "human:3"]
    assert window.skipped_pending == (2,)
    assert shape(build(conversation, pending_tool_calls="placeholder")) == [
        "human:1",
        "ai:2",
        "tool:c1*@None",
        "human:3",
    ]


def test_two_pending_exchanges_are_both_left_out(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("q1"), ChatMessage.ai(None, [ToolCall("a1", "f")]))
    store(conversation, ChatMessage.human("q2"), ChatMessage.ai(None, [ToolCall("b1", "f")]))
    store(conversation, ChatMessage.tool("B", tool_call_id="b1"), ChatMessage.ai("b done"))
    window = build(conversation)
    assert shape(window) == ["human:1", "human:3", "ai:4", "tool:b1@5", "ai:6"]
    assert window.skipped_pending == (2,)


def test_pack_history_holds_a_late_result_until_its_exchange_is_read() -> None:
    calls = [{"id": "a", "name": "f", "arguments": {}}, {"id": "b", "name": "f", "arguments": {}}]
    rows = [
        RowMeta(1, "human", 1),
        RowMeta(2, "ai", 1, 2, "", calls),
        RowMeta(3, "tool", 1, 2, "b"),
        RowMeta(4, "human", 1),
        RowMeta(5, "ai", 1),
        RowMeta(6, "tool", 3, 2, "a"),
    ]
    result = pack_history(reversed(rows), budget=10)
    assert [r.seq for r in result.rows] == [1, 2, 6, 3, 4, 5]
    assert result.tokens == 8
    # the newest unit that fits is [4, 5]; the exchange costs 1 + 1 + 3: with 6 tokens it is blocked
    blocked = pack_history(reversed(rows), budget=6)
    assert [r.seq for r in blocked.rows] == [4, 5]
    assert blocked.blocked == (2, 5) and blocked.skipped_late == [6]


# -- compaction ----------------------------------------------------------------------------


def _turns(conv: Conversation, n: int) -> None:
    for i in range(n):
        store(conv, ChatMessage.human(f"later question {i}"), ChatMessage.ai(f"later answer {i}"))


def _compactor(conv: Conversation) -> LLMMemoryCompactor:
    llm = ScriptedChatModel(["A summary of the earlier conversation."] * 5)
    return LLMMemoryCompactor(Conversation.objects, conv.pk, llm, None, summarize_every_n_human=1)


def test_compaction_does_not_fold_a_pending_exchange(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("first"), ChatMessage.ai("hello"))  # 1-2
    approval_flow_start = store(
        conversation, ChatMessage.human("refund it"), ChatMessage.ai(None, [ToolCall("r1", "refund")])
    )
    assert [m.seq for m in approval_flow_start] == [3, 4]
    _turns(conversation, 3)  # 5-10
    conversation.refresh_from_db()
    compactor = _compactor(conversation)
    # the newest turn starts at 9: without the pending call the summary would reach 8
    assert compactor.target_boundary(conversation) == 2
    summary = compactor.compact()
    assert summary is not None and (summary.first_seq, summary.through_seq) == (1, 2)
    window = build(conversation)
    assert window.skipped_pending == (4,) and shape(window)[0] == "human:3"


def test_compaction_folds_the_exchange_once_answered_with_its_late_result(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("refund it"), ChatMessage.ai(None, [ToolCall("r1", "refund")]))
    _turns(conversation, 2)  # 3-6
    store(conversation, ChatMessage.tool("refunded", tool_call_id="r1"))  # 7, answers seq 2
    conversation.refresh_from_db()
    # the result sits after the newest turn's start (5): folding through 4 would split it
    # from its call, so nothing is folded yet
    assert _compactor(conversation).target_boundary(conversation) is None
    _turns(conversation, 1)  # 8-9: now the result is before the newest turn
    conversation.refresh_from_db()
    compactor = _compactor(conversation)
    assert compactor.target_boundary(conversation) == 7
    summary = compactor.compact()
    assert summary is not None and summary.through_seq == 7
    prompt = compactor.llm.calls[0]  # type: ignore[attr-defined]
    assert "refunded" in str(prompt)
    assert shape(build(conversation)) == ["human:8", "ai:9"]


def test_an_abandoned_call_no_longer_holds_compaction_back(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("refund it"), ChatMessage.ai(None, [ToolCall("r1", "refund")]))
    _turns(conversation, 2)  # 3-6
    conversation.refresh_from_db()
    made = Message.objects.get(conversation=conversation, seq=2).created_at
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": 600}):
        assert last_foldable_seq(conversation, floor=0, target=4, now=made + timedelta(seconds=599)) == 0
        assert last_foldable_seq(conversation, floor=0, target=4, now=made + timedelta(seconds=600)) == 4
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": None}):
        assert last_foldable_seq(conversation, floor=0, target=4, now=made + timedelta(days=3650)) == 0
    Message.objects.filter(conversation=conversation, seq=2).update(created_at=made - timedelta(seconds=601))
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALL_TIMEOUT": 600}):
        summary = _compactor(conversation).compact()
    assert summary is not None and summary.through_seq == 4
    # the call is still pending in storage: abandonment only lets the summary pass it
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"r1": 2}


def test_cancelling_pending_calls_lets_compaction_fold_the_exchange(conversation) -> None:  # type: ignore[no-untyped-def]
    store(conversation, ChatMessage.human("refund it"), ChatMessage.ai(None, [ToolCall("r1", "refund")]))
    _turns(conversation, 1)  # 3-4
    PersistentChatHistory(conversation, token_counter=COUNTER).cancel_pending_tool_calls("no approval")  # 5
    _turns(conversation, 1)  # 6-7
    conversation.refresh_from_db()
    compactor = _compactor(conversation)
    assert compactor.target_boundary(conversation) == 5
    window = build(conversation)
    assert shape(window)[:3] == ["human:1", "ai:2", "tool:r1@5"]
    assert window.history[2].content == "Error: no approval"


def test_cancelled_results_carry_the_name_of_the_tool_they_answer(conversation) -> None:  # type: ignore[no-untyped-def]
    store(
        conversation,
        ChatMessage.human("refund and notify"),
        ChatMessage.ai(None, [ToolCall("r1", "refund", {"order": 7}), ToolCall("n1", "notify")]),
    )
    results = PersistentChatHistory(conversation, token_counter=COUNTER).cancel_pending_tool_calls("gone")
    assert [(m.tool_call_id, m.name) for m in results] == [("r1", "refund"), ("n1", "notify")]
    stored = Message.objects.filter(conversation=conversation, role="tool").order_by("seq")
    assert [(m.tool_call_id, m.name) for m in stored] == [("r1", "refund"), ("n1", "notify")]


# -- any order of calls, results and turns -------------------------------------------------


@st.composite
def event_streams(draw):  # type: ignore[no-untyped-def]
    """Messages in the order they happen: turns, AI messages calling 1-3 tools (also while
    earlier calls wait), and results answering any pending call, whenever they arrive."""
    messages = [ChatMessage.human("start")]
    pending: list[str] = []
    calls = 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["human", "ai", "call", "result", "result"]))
        if kind == "result" and pending:
            call_id = pending.pop(draw(st.integers(0, len(pending) - 1)))
            messages.append(ChatMessage.tool(f"result {call_id}", tool_call_id=call_id))
        elif kind == "call":
            ids = []
            for _ in range(draw(st.integers(1, 3))):
                calls += 1
                ids.append(f"c{calls}")
            messages.append(ChatMessage.ai(None, [ToolCall(i, "t") for i in ids]))
            pending.extend(ids)
        elif kind == "ai":
            messages.append(ChatMessage.ai("text"))
        else:
            messages.append(ChatMessage.human("question"))
    return messages


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(messages=event_streams(), budget=st.integers(1, 30), placeholder=st.booleans())
def test_windows_keep_every_rule_whatever_order_results_arrive_in(messages, budget, placeholder) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=COUNTER)
    cut = len(messages) // 2  # two appends: some results arrive in a later batch
    history.add_messages(messages[:cut] or messages[:1])
    if messages[cut:] and cut:
        history.add_messages(messages[cut:])
    conv.refresh_from_db()
    mode = "placeholder" if placeholder else "omit"
    stored = list(Message.objects.filter(conversation=conv).values_list("seq", "role"))
    newest_human = max(s for s, role in stored if role == "human")
    # the newest turn as stored, and a placeholder for each of its pending calls at most
    newest_turn = sum(1 for s, _ in stored if s >= newest_human) + (
        sum(1 for s in conv.pending_tool_calls.values() if s >= newest_human) if placeholder else 0
    )
    builder = ContextWindowBuilder(conv, token_counter=COUNTER, pending_tool_calls=mode)
    if budget < newest_turn:
        try:
            window = builder.build(budget)
        except ContextBudgetExceeded:
            return
    else:
        window = builder.build(budget)
    assert window_violations(window, stored_seqs=[s for s, _ in stored], newest_seq=len(stored)) == []
    assert newest_human in {m.seq for m in window.history}
    pending = set(conv.pending_tool_calls)
    sent_calls = {c.id for m in window.history for c in m.tool_calls}
    if placeholder:
        assert set(window.placeholders) == sent_calls & pending and not window.skipped_pending
    else:
        assert not sent_calls & pending and not window.placeholders
    # placeholders, and only they, are marked and carry no seq
    assert all(bool(m.metadata.get("pending_tool_call")) == (m.seq is None) for m in window.history)


@pytest.mark.parametrize(
    ("setting", "value", "check_id"),
    [
        ("PENDING_TOOL_CALLS", "drop", "agentmemory.E040"),
        ("PENDING_TOOL_CALL_TIMEOUT", 0, "agentmemory.E041"),
        ("PENDING_TOOL_CALL_TIMEOUT", "1h", "agentmemory.E041"),
    ],
)
def test_checks_refuse_bad_pending_settings(settings, setting: str, value: object, check_id: str) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.checks import check_settings

    def pending_problems() -> list[str]:
        return [p.id for p in check_settings() if p.id in ("agentmemory.E040", "agentmemory.E041")]

    settings.AGENTMEMORY = {setting: value}
    assert pending_problems() == [check_id]
    settings.AGENTMEMORY = {"PENDING_TOOL_CALLS": "placeholder", "PENDING_TOOL_CALL_TIMEOUT": None}
    assert pending_problems() == []
    with pytest.raises(ValueError, match="pending_tool_calls"):
        ContextWindowBuilder(Conversation.objects.create(), pending_tool_calls="drop")
