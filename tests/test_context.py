"""``ContextWindowBuilder`` and ``pack_history`` beyond the bug corpus: packing rules as a
pure function, the default budget and where it comes from, pinned prompt and summary
placement, read-only building (C6), cost bounded by the window (C7), tool-result caps and
the typed errors."""

from __future__ import annotations

import re
import uuid

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.conf import ENV_TOKEN_LIMIT, app_settings
from agentmemory.context import _META_FIELDS, ContextWindow, ContextWindowBuilder, RowMeta, pack_history
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import ApproximateTokenCounter, LengthTokenCounter
from tests.factories import ConversationFactory, conversation_with_turns, turn

# -- pack_history: pure function, no database --------------------------------------------


def human(seq: int, tokens: int = 1) -> RowMeta:
    return RowMeta(seq=seq, role="human", token_count=tokens)


def ai(seq: int, tokens: int = 1) -> RowMeta:
    return RowMeta(seq=seq, role="ai", token_count=tokens)


def exchange(
    seq: int, results: list[tuple[int, str, int]], *, calls: list[str], tokens: int = 1
) -> list[RowMeta]:
    """An AI message at ``seq`` calling ``calls``, with ``(seq, call_id, tokens)`` results."""
    rows = [RowMeta(seq, "ai", tokens, seq, "", [{"id": c, "name": "t", "arguments": {}} for c in calls])]
    rows += [RowMeta(s, "tool", t, seq, cid) for s, cid, t in results]
    return rows


def newest_first(rows: list[RowMeta]) -> list[RowMeta]:
    return sorted(rows, key=lambda r: r.seq, reverse=True)


def seqs(result) -> list[int]:  # type: ignore[no-untyped-def]
    return [r.seq for r in result.rows]


def test_pack_takes_everything_that_fits() -> None:
    rows = [human(1, 5), ai(2, 5), human(3, 5), ai(4, 5)]
    result = pack_history(newest_first(rows), budget=20)
    assert seqs(result) == [1, 2, 3, 4]
    assert result.tokens == 20 and result.blocked is None
    assert result.rows_consumed == 4


def test_pack_stops_at_the_first_unit_that_does_not_fit() -> None:
    # seq 2 does not fit; the smaller seq 1 would, but taking it would skip the middle (C5)
    rows = [human(1, 1), ai(2, 50), human(3, 5), ai(4, 5)]
    result = pack_history(newest_first(rows), budget=20)
    assert seqs(result) == [3, 4]
    assert result.blocked == (2, 50) and result.available_at_block == 10
    assert result.rows_consumed == 3  # the reader is not drained past the blocking unit


def test_pack_drops_leading_units_until_a_human_message() -> None:
    rows = [human(1, 10), ai(2, 3), ai(3, 3), human(4, 3), ai(5, 3)]
    result = pack_history(newest_first(rows), budget=12)
    assert seqs(result) == [4, 5]
    assert result.dropped_leading == [2, 3]
    assert result.tokens == 6


def test_pack_with_no_human_in_reach_returns_nothing() -> None:
    result = pack_history(newest_first([human(1, 100), ai(2, 1), ai(3, 1)]), budget=10)
    assert result.units == [] and result.tokens == 0
    assert result.dropped_leading == [2, 3]


def test_pack_keeps_a_tool_exchange_whole_and_in_call_order() -> None:
    rows = [
        human(1, 1),
        *exchange(2, [(3, "b", 1), (4, "c", 1), (5, "a", 1)], calls=["a", "b", "c"]),
        ai(6, 1),
    ]
    result = pack_history(newest_first(rows), budget=10)
    assert seqs(result) == [1, 2, 5, 3, 4, 6]  # results in tool_calls order (W4)
    assert [len(u) for u in result.units] == [1, 4, 1]
    tight = pack_history(newest_first(rows), budget=4)  # the exchange (4 tokens) no longer fits whole
    assert seqs(tight) == []
    assert tight.blocked == (2, 4)


def test_pack_skips_orphans_and_incomplete_exchanges_and_reports_them() -> None:
    rows = [
        human(1),
        *exchange(2, [(3, "x", 1)], calls=["x", "y"]),  # y never answered
        RowMeta(4, "tool", 1, None, "lost"),  # orphan
        human(5),
        ai(6),
    ]
    result = pack_history(newest_first(rows), budget=100)
    assert seqs(result) == [1, 5, 6]
    assert result.skipped_orphans == [4]
    assert result.skipped_pending == [2, 3]


def test_pack_respects_max_messages() -> None:
    rows = [human(1), ai(2), human(3), *exchange(4, [(5, "a", 1)], calls=["a"]), ai(6)]
    assert seqs(pack_history(newest_first(rows), budget=100, max_messages=4)) == [3, 4, 5, 6]
    # three messages would split the exchange: only its newest unit fits, and that is not a human
    assert seqs(pack_history(newest_first(rows), budget=100, max_messages=3)) == []
    assert seqs(pack_history(newest_first(rows), budget=100, max_messages=0)) == []


def test_pack_counts_capped_tool_results_at_the_cap() -> None:
    rows = [human(1, 2), *exchange(2, [(3, "a", 5_000)], calls=["a"], tokens=2), ai(4, 2)]
    uncapped = pack_history(newest_first(rows), budget=200)
    assert seqs(uncapped) == []
    capped = pack_history(newest_first(rows), budget=200, max_tool_result_tokens=100)
    assert seqs(capped) == [1, 2, 3, 4]
    assert capped.tokens == 106 and capped.capped == [3]


def test_pack_counts_marker_only_results_at_their_copy_size_and_keeps_every_result() -> None:
    rows = [
        human(1, 2),
        *exchange(2, [(3, "a", 5_000)], calls=["a"], tokens=2),
        *exchange(4, [(5, "b", 40), (6, "c", 5_000)], calls=["b", "c"], tokens=2),
    ]
    at_cap = pack_history(newest_first(rows), budget=150, max_tool_result_tokens=64)
    assert seqs(at_cap) == []  # 6 + 64 + 40 + 64 tokens
    marked = pack_history(newest_first(rows), budget=150, max_tool_result_tokens=64, marker_tokens={3: 30})
    # The exchange keeps its result (as a marker-only copy), in call order.
    assert seqs(marked) == [1, 2, 3, 4, 5, 6] and marked.tokens == 6 + 30 + 40 + 64
    assert marked.marker_only == [3] and marked.capped == [6]


def test_marker_plan_takes_the_oldest_results_first_and_no_more_than_needed() -> None:
    from agentmemory.context.builder import _turn_floor

    # newest first, as the reader yields them: results of 100, 30 (shorter than its marker
    # copy), 100 and 100 tokens; marker-only copies cost 40, 45, 40 and 40.
    turn = newest_first(
        [
            human(1, 10),
            *exchange(2, [(3, "a", 100)], calls=["a"], tokens=10),
            *exchange(4, [(5, "b", 30)], calls=["b"], tokens=10),
            *exchange(6, [(7, "c", 100)], calls=["c"], tokens=10),
            *exchange(8, [(9, "d", 100)], calls=["d"], tokens=10),
        ]
    )
    floor = _turn_floor(turn, 64, {3: 40, 5: 45, 7: 40, 9: 40})
    assert floor.tokens == 50 + 64 + 30 + 64 + 64
    assert floor.marker_plan(floor.tokens) == {}
    assert floor.marker_plan(floor.tokens - 1) == {3: 40}  # the oldest result first
    assert floor.marker_plan(floor.tokens - 25) == {3: 40, 7: 40}  # the short one is skipped
    assert floor.marker_plan(floor.tokens - 72) == {3: 40, 7: 40, 9: 40}  # the newest last
    assert floor.marker_plan(floor.tokens - 73) is None
    error = floor.error(summary_tokens=0, system_tokens=0, max_tokens=100)
    assert (error.marker_results, error.marker_result_tokens) == (3, 120)
    assert (error.short_results, error.short_result_tokens, error.cut_results) == (1, 30, 0)
    assert error.tokens == 50 + 30 + 120
    # Without a cap no copies are made at all: results count whole.
    assert _turn_floor(turn, None, {3: 40}).marker_plan(300) is None


def test_pack_truncates_only_the_newest_human_message_when_asked() -> None:
    rows = [human(1, 5), ai(2, 5), human(3, 500)]
    assert pack_history(newest_first(rows), budget=50).units == []
    result = pack_history(newest_first(rows), budget=50, truncate_oversized_human=True)
    assert seqs(result) == [3] and result.truncate == (3, 50) and result.tokens == 50
    older = [human(1, 500), ai(2, 5), human(3, 5)]
    result = pack_history(newest_first(older), budget=50, truncate_oversized_human=True)
    assert seqs(result) == [3] and result.truncate is None  # an older human is never truncated in


# -- the default budget ------------------------------------------------------------------


@pytest.fixture
def clean_settings(monkeypatch):  # type: ignore[no-untyped-def]
    """No token limit in the environment, and the cached settings re-read before and after."""
    monkeypatch.delenv(ENV_TOKEN_LIMIT, raising=False)
    app_settings.cache_clear()
    yield monkeypatch
    app_settings.cache_clear()


@pytest.fixture
def small_conversation(db):  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(30, token_counter=LengthTokenCounter())
    return conv


def _built_budget(conv: Conversation) -> ContextWindow:
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build()
    assert window.total_tokens <= window.max_tokens
    return window


def test_default_budget_is_ten_thousand(clean_settings, small_conversation) -> None:  # type: ignore[no-untyped-def]
    window = _built_budget(small_conversation)
    assert window.max_tokens == 10_000
    assert len(window.messages) == small_conversation.message_count  # 101 one-token messages fit


def test_default_budget_from_settings(clean_settings, small_conversation) -> None:  # type: ignore[no-untyped-def]
    with override_settings(AGENTMEMORY={ENV_TOKEN_LIMIT: 21}):
        window = _built_budget(small_conversation)
    assert window.max_tokens == 21 and window.total_tokens <= 21
    with override_settings(**{ENV_TOKEN_LIMIT: 31}):  # a top-level Django setting works too
        assert _built_budget(small_conversation).max_tokens == 31
    assert _built_budget(small_conversation).max_tokens == 10_000


def test_default_budget_from_the_environment(clean_settings, small_conversation) -> None:  # type: ignore[no-untyped-def]
    clean_settings.setenv(ENV_TOKEN_LIMIT, "17")
    app_settings.cache_clear()
    window = _built_budget(small_conversation)
    assert window.max_tokens == 17
    assert window.history[0].role is Role.HUMAN
    with override_settings(AGENTMEMORY={ENV_TOKEN_LIMIT: 40}):  # the settings dict wins
        assert _built_budget(small_conversation).max_tokens == 40
    clean_settings.setenv(ENV_TOKEN_LIMIT, "not a number")
    app_settings.cache_clear()
    assert _built_budget(small_conversation).max_tokens == 10_000


# -- system prompt and summary placement -------------------------------------------------


@pytest.mark.django_db
def test_max_messages_caps_the_history() -> None:
    conv, _ = conversation_with_turns(10, token_counter=LengthTokenCounter(), tool_every=0)
    builder = ContextWindowBuilder(conv, token_counter=LengthTokenCounter())
    window = builder.build(1_000, max_messages=5)
    # 5 newest messages are a, h, a, h, a: the leading AI answer is dropped (C3)
    assert [m.seq for m in window.history] == [18, 19, 20, 21]
    assert window.messages[0].role is Role.SYSTEM and window.messages[0].seq == 1
    empty = builder.build(1_000, max_messages=0)
    assert empty.history == [] and len(empty.messages) == 1
    with pytest.raises(ValueError, match="max_messages"):
        builder.build(1_000, max_messages=-1)


@pytest.mark.django_db
def test_system_prompt_argument_replaces_the_stored_prompt() -> None:
    counter = ApproximateTokenCounter()
    conv, _ = conversation_with_turns(3, system_prompt="stored prompt from the import", token_counter=counter)
    window = ContextWindowBuilder(conv, token_counter=counter, system_prompt="the agent's own prompt").build(
        5_000
    )
    assert window.messages[0].content == "the agent's own prompt" and window.messages[0].seq is None
    assert all("stored prompt" not in (m.content or "") for m in window.messages)
    assert [m.role for m in window.messages].count(Role.SYSTEM) == 1
    assert window.system_tokens == counter.count_message(ChatMessage.system("the agent's own prompt"))
    assert window.history[0].seq == 2
    assert window_violations(window) == []


@pytest.mark.django_db
def test_summary_follows_the_system_prompt_and_replaces_what_it_covers() -> None:
    counter = ApproximateTokenCounter()
    conv, history = conversation_with_turns(6, token_counter=counter)
    compactor = LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["The user asked questions 0 to 4."]), history
    )
    summary = compactor.compact()
    assert summary is not None
    for builder in (
        ContextWindowBuilder(conv, token_counter=counter),
        ContextWindowBuilder(conv, token_counter=counter, system_prompt="agent prompt"),
    ):
        window = builder.build(5_000)
        assert window_violations(window) == []
        prompt, summary_message, *rest = window.messages
        assert prompt.role is Role.SYSTEM and prompt.content in ("You are a helpful agent.", "agent prompt")
        assert summary_message.role is Role.SYSTEM and summary_message.seq is None
        assert summary_message.content == app_settings().SUMMARY_MESSAGE_PREFIX + summary.text
        assert summary_message.metadata["summary_id"] == summary.pk
        assert rest == window.history
        assert all(m.seq > summary.through_seq for m in rest)
        assert window.first_seq == summary.through_seq + 1 and window.last_seq == conv.last_seq
        assert window.summary_id == summary.pk and window.summary_through_seq == summary.through_seq
        assert window.summary_tokens == summary.token_count


@pytest.mark.django_db
def test_summary_comes_first_without_a_system_prompt() -> None:
    conv, history = conversation_with_turns(4, system_prompt=None)
    LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Earlier: questions 0-2."]), history
    ).compact()
    window = ContextWindowBuilder(conv).build(5_000)
    assert window.messages[0].metadata.get("summary_id") and window.system_tokens == 0
    assert window.messages[1].role is Role.HUMAN
    assert window_violations(window) == []


# -- C6: building never writes -----------------------------------------------------------


def _assert_build_only_reads(conv: Conversation, builder: ContextWindowBuilder, budget: int) -> ContextWindow:
    before_conv = Conversation.objects.filter(pk=conv.pk).values().get()
    before = list(Message.objects.filter(conversation=conv).order_by("seq").values())
    with CaptureQueriesContext(connection) as ctx:
        window = builder.build(budget)
    statements = [q["sql"].lstrip().upper() for q in ctx.captured_queries]
    # reads only: SELECTs, the head statement's with its conversation row in a WITH
    assert statements and all(sql.startswith(("SELECT ", "WITH ")) for sql in statements)
    assert not [sql for sql in statements if re.search(r"\b(INSERT|UPDATE|DELETE)\b", sql)]
    assert list(Message.objects.filter(conversation=conv).order_by("seq").values()) == before
    assert Conversation.objects.filter(pk=conv.pk).values().get() == before_conv
    return window


@pytest.mark.django_db
def test_building_only_reads() -> None:
    conv, history = conversation_with_turns(12, token_counter=ApproximateTokenCounter())
    history.add_messages([ChatMessage.human("last"), ChatMessage.ai(None, [ToolCall(id="big", name="dump")])])
    history.add_messages(
        [ChatMessage.tool("x " * 20_000, tool_call_id="big", name="dump"), ChatMessage.ai("ok")]
    )
    LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Earlier turns."]), history
    ).compact()
    capped = _assert_build_only_reads(conv, ContextWindowBuilder(conv, max_tool_result_tokens=50), 2_000)
    assert capped.truncated  # a truncated copy was made; storage must stay whole
    big = history.add_message(ChatMessage.human("a very long question " * 2_000))
    truncating = ContextWindowBuilder(conv, oversized_message_policy="truncate")
    window = _assert_build_only_reads(conv, truncating, 500)
    assert window.truncated == (big.seq,)


# -- C7: cost is O(window), not O(history) -------------------------------------------------


def _turns_for(messages: int) -> int:
    """Turns of ``conversation_with_turns`` (tool exchange every 3rd turn) giving about
    ``messages`` messages: 8 messages per 3 turns, plus the system prompt."""
    return (messages - 1) * 3 // 8


def _measure(conv: Conversation, budget: int) -> tuple[int, object]:
    builder = ContextWindowBuilder(conv)
    builder.build(budget)  # warm caches that are not per-conversation (counter, settings)
    with CaptureQueriesContext(connection) as ctx:
        window = builder.build(budget)
    return len(ctx.captured_queries), window


def _check_window_at_scale(conv: Conversation, window, budget: int) -> None:  # type: ignore[no-untyped-def]
    assert window_violations(window, newest_seq=conv.last_seq) == []
    assert window.total_tokens <= budget
    assert len(window.history) >= 20  # a real tail, not a degenerate window
    # Bound on rows read: the first page is (budget / average tokens per message) * 1.5 + 8
    # rows; the window holds about budget / average messages (less the system prompt and the
    # unit that did not fit), so a uniform conversation needs one page of about 1.5x the
    # messages returned. 2x + 32 leaves room for the unit that did not fit, the leading units
    # dropped to start on a human message and rounding.
    assert window.rows_read <= 2 * len(window.history) + 32
    # The paged tail read gives the same window as packing over every stored row.
    everything = (
        Message.objects.filter(conversation=conv, seq__gt=1).order_by("-seq").values_list(*_META_FIELDS)
    )
    full = pack_history(
        [RowMeta(*row) for row in everything],
        budget=budget - window.system_tokens,
        max_tool_result_tokens=app_settings().MAX_TOOL_RESULT_TOKENS,
    )
    assert [m.seq for m in window.history] == [r.seq for r in full.rows]


def _constant_cost(n_messages: int, django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    budget = 2_000
    small, _ = conversation_with_turns(_turns_for(1_000))
    large, _ = conversation_with_turns(_turns_for(n_messages))
    assert large.message_count >= n_messages - 3
    small_queries, small_window = _measure(small, budget)
    large_queries, large_window = _measure(large, budget)
    assert small_queries == large_queries
    # conversation row, pinned system prompt, one page of the tail, the window's contents
    with django_assert_max_num_queries(4):
        ContextWindowBuilder(large).build(budget)
    _check_window_at_scale(small, small_window, budget)
    _check_window_at_scale(large, large_window, budget)
    assert large_window.rows_read <= small_window.rows_read + 8


@pytest.mark.django_db
def test_build_cost_is_constant_at_2000_messages(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    _constant_cost(2_000, django_assert_max_num_queries)


@pytest.mark.postgres
@pytest.mark.django_db
def test_build_cost_is_constant_at_20000_messages_on_postgresql(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    _constant_cost(20_000, django_assert_max_num_queries)


@pytest.mark.django_db
def test_skewed_sizes_read_at_most_about_twice_the_window() -> None:
    # Large messages early and small ones at the end make the average a poor guide: the
    # first page is too short and later pages double, so the reader still reads at most
    # about twice the rows it returns, in a few queries (log2 of the shortfall).
    counter = LengthTokenCounter()
    conv = ConversationFactory()
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages([ChatMessage.human("x")] + [ChatMessage.ai("y")] * 99)
    Message.objects.filter(conversation=conv).update(token_count=1_000)  # as if counted large
    Conversation.objects.filter(pk=conv.pk).update(stored_tokens=100_000)
    history.add_messages([m for i in range(400) for m in turn(i, words=1)])
    with CaptureQueriesContext(connection) as ctx:
        window = ContextWindowBuilder(conv, token_counter=counter).build(700)
    assert len(window.history) == 700
    assert window.rows_read <= 2 * len(window.history) + 32
    assert len(ctx.captured_queries) <= 3 + 6


# -- tool result cap -----------------------------------------------------------------------


@pytest.mark.django_db
def test_tool_result_cap_truncates_the_copy_only() -> None:
    counter = ApproximateTokenCounter()
    conv = ConversationFactory()
    history = PersistentChatHistory(conv, token_counter=counter)
    huge = "row of data " * 5_000
    history.add_messages(
        [
            ChatMessage.human("dump the table"),
            ChatMessage.ai(None, [ToolCall(id="d", name="dump")]),
            ChatMessage.tool(huge, tool_call_id="d", name="dump"),
            ChatMessage.ai("here it is"),
        ]
    )
    with override_settings(AGENTMEMORY={"MAX_TOOL_RESULT_TOKENS": 200}):
        window = ContextWindowBuilder(conv, token_counter=counter).build(1_000)
    copy = window.history[2]
    assert [m.seq for m in window.history] == [1, 2, 3, 4]
    assert copy.truncated and copy.content.startswith("row of data") and "truncated" in copy.content
    assert counter.count_message(copy) <= 200 and window.truncated == (3,)
    assert window.total_tokens <= 1_000
    assert Message.objects.get(conversation=conv, seq=3).content == huge
    # an explicit builder argument wins over the setting; None sends results whole
    uncapped = ContextWindowBuilder(conv, token_counter=counter, max_tool_result_tokens=None)
    with pytest.raises(ContextBudgetExceeded):
        uncapped.build(1_000)  # the whole exchange cannot fit, and the newest turn needs it
    assert [m.content for m in uncapped.build(100_000).history][2] == huge


# -- errors ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_budget_exceeded_names_the_message_and_the_room_left() -> None:
    counter = ApproximateTokenCounter()
    conv, history = conversation_with_turns(4, token_counter=counter)
    LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Earlier: questions 0-2."]), history
    ).compact()
    big = history.add_message(ChatMessage.human("please read this " * 300))
    builder = ContextWindowBuilder(conv, token_counter=counter)
    fits = builder.build(100_000)
    with pytest.raises(ContextBudgetExceeded) as info:
        builder.build(500)
    error = info.value
    assert error.seq == big.seq and error.tokens == big.token_count
    assert error.available == 500 - fits.system_tokens - fits.summary_tokens
    assert f"seq={big.seq}" in str(error) and "OVERSIZED_MESSAGE_POLICY" in str(error)
    truncated = ContextWindowBuilder(conv, token_counter=counter, oversized_message_policy="truncate").build(
        500
    )
    assert truncated.history[-1].truncated and truncated.total_tokens <= 500


@pytest.mark.django_db
def test_missing_conversation_raises_conversation_not_found() -> None:
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(10**12).build(100)
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(uuid.uuid4()).build(100)
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(str(uuid.uuid4())).build(100)
    conv = ConversationFactory()
    builder = ContextWindowBuilder(conv)
    conv.delete()
    with pytest.raises(ConversationNotFound):
        builder.build(100)


@pytest.mark.django_db
def test_malformed_uuid_raises_conversation_not_found() -> None:
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder("not-a-uuid").build(100)


@pytest.mark.django_db
def test_pinned_prompt_alone_over_the_budget_is_an_error_not_an_oversized_window() -> None:
    conv = ConversationFactory()
    PersistentChatHistory(conv).add_message(ChatMessage.system("You are an agent. " * 50))
    try:
        window = ContextWindowBuilder(conv).build(20)
    except ContextBudgetExceeded:
        return
    assert window.total_tokens <= 20  # C1, when no error is raised


@pytest.mark.django_db
def test_last_seq_is_the_newest_history_seq() -> None:
    # Parallel results stored in reverse call order: the window sends seq 4 (answering a)
    # before seq 3 (answering b), so its last message is not its newest.
    conv = ConversationFactory()
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("look up a and b"),
            ChatMessage.ai(None, [ToolCall(id="a", name="t"), ToolCall(id="b", name="t")]),
            ChatMessage.tool("B", tool_call_id="b"),
            ChatMessage.tool("A", tool_call_id="a"),
        ]
    )
    window = ContextWindowBuilder(conv).build(1_000)
    assert [m.seq for m in window.history] == [1, 2, 4, 3]
    assert (window.first_seq, window.last_seq) == (1, 4)
    assert window_violations(window, newest_seq=4) == []


@pytest.mark.django_db
def test_a_turn_over_max_messages_says_so() -> None:
    conv = ConversationFactory()
    calls = [ToolCall(id=f"c{i}", name="f") for i in range(5)]
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("go"), ChatMessage.ai(None, calls)]
        + [ChatMessage.tool("r", tool_call_id=f"c{i}") for i in range(5)]
    )
    with pytest.raises(ContextBudgetExceeded, match="max_messages=3"):
        ContextWindowBuilder(conv).build(10_000, max_messages=3)


def _tool_loop_then_a_waiting_call(waiting: ToolCall, *, system: str | None = None) -> Conversation:
    """A conversation: (a system message,) a human message, three tool exchanges whose results
    are about 2,000 tokens each, then an AI message whose call ``waiting`` has no result."""
    conv = ConversationFactory()
    messages = [ChatMessage.system(system)] if system else []
    messages.append(ChatMessage.human("go"))
    for i in range(3):
        messages += [
            ChatMessage.ai(None, [ToolCall(id=f"c{i}", name="t")]),
            ChatMessage.tool("data " * 2_000, tool_call_id=f"c{i}", name="t"),
        ]
    messages.append(ChatMessage.ai(None, [waiting]))
    PersistentChatHistory(conv).add_messages(messages)
    return conv


@pytest.mark.django_db
@pytest.mark.parametrize("max_tokens", [300, 1_000, 2_000, 5_000])
def test_a_tool_loop_with_an_unanswered_call_fits_with_placeholders(max_tokens: int) -> None:
    # With pending_tool_calls="placeholder" the placeholder result of the newest call counts
    # in the turn's cost: the turn is sent with its results cut (or as markers), as with "omit".
    conv = _tool_loop_then_a_waiting_call(ToolCall(id="pending", name="t"), system="You are terse.")

    window = ContextWindowBuilder(conv, pending_tool_calls="placeholder").build(max_tokens)

    assert window.placeholders == ("pending",)
    assert [m.tool_call_id for m in window.messages if m.role is Role.TOOL] == ["c0", "c1", "c2", "pending"]
    assert window.truncated == (4, 6, 8)
    assert window_violations(window, max_tokens=max_tokens) == []


@pytest.mark.django_db
def test_a_tool_loop_fits_beside_a_call_still_waiting_for_its_result() -> None:
    # The exchange waiting for its result is left out ("omit"), so its AI message must not
    # count against the turn's tool results: every budget from the turn's floor up fits.
    conv = _tool_loop_then_a_waiting_call(ToolCall(id="waiting", name="t", arguments={"q": "word " * 100}))
    builder = ContextWindowBuilder(conv)
    with pytest.raises(ContextBudgetExceeded, match="needs at least 137 tokens"):
        builder.build(136)

    for max_tokens in range(137, 400, 7):
        window = builder.build(max_tokens)

        assert [m.seq for m in window.messages] == [1, 2, 3, 4, 5, 6, 7]
        assert window.skipped_pending == (8,)
        assert window_violations(window, max_tokens=max_tokens) == []


@pytest.mark.django_db
def test_the_turn_floor_counts_a_waiting_exchange_sent_with_placeholders() -> None:
    # With placeholders, the waiting exchange is sent: its AI message and placeholder count in
    # the least the turn costs, so the error names the real floor and every budget above fits.
    conv = _tool_loop_then_a_waiting_call(ToolCall(id="waiting", name="t", arguments={"q": "word " * 100}))
    builder = ContextWindowBuilder(conv, pending_tool_calls="placeholder")
    with pytest.raises(ContextBudgetExceeded) as refused:
        builder.build(200)
    floor = int(str(refused.value).split("needs at least ")[1].split(" tokens")[0])
    assert floor > 137 + 118  # the turn's floor without the waiting exchange, and its AI message

    for max_tokens in range(floor, floor + 150, 7):
        window = builder.build(max_tokens)

        assert window.placeholders == ("waiting",)
        assert window_violations(window, max_tokens=max_tokens) == []
    with pytest.raises(ContextBudgetExceeded):
        builder.build(floor - 1)


def test_budget_errors_suggest_only_what_can_help() -> None:
    # A system prompt and summary over the budget: truncation never applies to them.
    fixed = ContextBudgetExceeded(seq=1, tokens=309, available=30, what="the system prompt and summary")
    assert "need 309 tokens" in str(fixed) and "truncat" not in str(fixed)
    # A message with room for a truncated copy: truncation is one way out.
    roomy = ContextBudgetExceeded(seq=7, tokens=900, available=400)
    assert "message seq=7 needs 900 tokens" in str(roomy) and "OVERSIZED_MESSAGE_POLICY" in str(roomy)
    # Less room than the truncation marker itself: truncating cannot make it fit.
    tight = ContextBudgetExceeded(seq=2, tokens=309, available=22)
    assert "truncat" not in str(tight) and "raise max_tokens" in str(tight)
