"""Every case of shared/data/bug-cases.json, with its expected value (see bug-cases.md there).

Each case is a failing input from a peer system's bug report; the tests pin the right value
and the invariants the case stands for.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test import override_settings

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import (
    ContextBudgetExceeded,
    ConversationNotFound,
    InvalidSummaryError,
    TransientLLMError,
)
from agentmemory.formats.openai import from_openai_messages, to_openai
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import LengthTokenCounter, TiktokenCounter
from tests.helpers import TableTokenCounter, load_bug_cases
from tests.helpers_concurrency import ScriptHolder

CASES = {case["id"]: case for case in load_bug_cases()}
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not CASES, reason="shared/data/bug-cases.json not found beside the repository"),
]


def case(case_id: str) -> dict:
    return CASES[case_id]


def counter_for(c: dict):  # type: ignore[no-untyped-def]
    params = c["params"]
    kind = params.get("token_counter", "len")
    if kind == "len":
        return LengthTokenCounter()
    if kind == "table":
        return TableTokenCounter([m.get("content") for m in c["input"]], params["message_tokens"])
    return TiktokenCounter("cl100k_base")


def store(c: dict, counter=None, *, conversation=None):  # type: ignore[no-untyped-def]
    """Import the case's history through the OpenAI converter (relaxed tool-pair check:
    some cases hold orphaned results on purpose)."""
    conv = conversation or Conversation.objects.create(agent_key="bug-case")
    history = PersistentChatHistory(conv, token_counter=counter or counter_for(c), validate_tool_pairs=False)
    history.add_messages(from_openai_messages(c["input"]))
    return conv, history


def labels(window) -> list:  # type: ignore[no-untyped-def]
    """The window as the corpus writes it: input indexes (seq - 1) and "SUMMARY"."""
    out: list = []
    for m in window.messages:
        if m.seq is None and m.role is Role.SYSTEM and m.metadata.get("summary_id"):
            out.append("SUMMARY")
        else:
            out.append(m.seq - 1)
    return out


def build(conv, c: dict, counter=None, **kwargs):  # type: ignore[no-untyped-def]
    builder_kwargs = {"token_counter": counter or counter_for(c), "max_tool_result_tokens": None}
    builder_kwargs.update(kwargs)
    window = ContextWindowBuilder(conv, **builder_kwargs).build(c["params"]["max_tokens"])
    stored = Message.objects.filter(conversation=conv).values_list("seq", flat=True)
    assert window_violations(window, stored_seqs=list(stored), newest_seq=conv.messages.count()) == []
    return window


PLAIN = ["BUG-01", "BUG-02", "BUG-04", "BUG-06", "BUG-08", "BUG-20", "BUG-27", "BUG-28"]


@pytest.mark.parametrize("case_id", PLAIN)
def test_window_matches_expected(case_id: str) -> None:
    c = case(case_id)
    conv, _ = store(c)
    window = build(conv, c)
    assert labels(window) == c["expected"]["context"]


def test_bug02_whole_history_returned_unchanged() -> None:
    c = case("BUG-02")
    conv, _ = store(c)
    window = build(conv, c)
    assert [to_openai(m) for m in window.messages] == c["input"]


def test_bug06_orphan_skipped_reported_and_never_rewritten() -> None:
    c = case("BUG-06")
    conv, _ = store(c)
    before = list(Message.objects.filter(conversation=conv).values())
    first = build(conv, c)
    second = build(conv, c)
    assert first.skipped_orphans == (2,)
    assert labels(first) == labels(second)
    assert all(m.tool_call_id != "toolu_lost01" for m in first.messages)
    assert list(Message.objects.filter(conversation=conv).values()) == before


def test_bug05_units_enter_whole_and_compaction_never_splits_them() -> None:
    c = case("BUG-05")
    conv, history = store(c)
    assert labels(build(conv, c)) == c["expected"]["context"]
    wide = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert labels(wide) == c["expected"]["canonical_order"]
    llm = ScriptedChatModel(["Stock of items 7 and 9 was checked."])
    compactor = LLMMemoryCompactor(
        Conversation.objects, conv.pk, llm, history, keep_recent_messages=5, summarize_every_n_human=1
    )
    summary = compactor.compact()
    # keep_recent_messages=5 would cut inside the exchange 1-4: the boundary moves back to a
    # human message instead, so nothing is summarised yet (k=0), the other valid outcome being k=6.
    assert summary is None or summary.through_seq - 1 == 5


def test_bug09_summary_is_a_separate_system_message_after_the_prompt() -> None:
    c = case("BUG-09")
    conv, history = store(c)
    compaction = c["params"]["compaction"]
    llm = ScriptedChatModel(["The user asked for papers on X; the second is the most recent."])
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        history,
        summarize_every_n_human=compaction["summarize_every_n_human"],
        keep_recent_messages=compaction["keep_recent_messages"],
    )
    assert compactor.needs_compaction(max_tokens=c["params"]["max_tokens"])
    summary = compactor.compact()
    assert [summary.first_seq - 1, summary.through_seq - 1] == c["expected"]["summary_covers"]
    window = build(conv, c)
    assert labels(window) == c["expected"]["context"]
    system_texts = [m.content for m in window.messages if m.content == c["input"][0]["content"]]
    assert len(system_texts) == 1


def test_bug11_oversized_newest_human_raises_typed_error() -> None:
    c = case("BUG-11")
    conv, _ = store(c)
    with pytest.raises(ContextBudgetExceeded) as info:
        ContextWindowBuilder(conv, token_counter=counter_for(c)).build(c["params"]["max_tokens"])
    assert (info.value.seq - 1, info.value.tokens, info.value.available) == (3, 50000, 7980)
    assert "3" in str(info.value) or "seq=4" in str(info.value)


def test_bug11_system_prompt_alone_leaving_no_room_raises_too() -> None:
    c = case("BUG-11")
    conv, _ = store(c)
    with pytest.raises(ContextBudgetExceeded):
        ContextWindowBuilder(conv, token_counter=counter_for(c)).build(21)


def test_bug11_truncate_policy_sends_a_marked_copy_within_budget() -> None:
    c = case("BUG-11")
    c = {**c, "input": [*c["input"][:3], {"role": "user", "content": "word " * 60000}]}
    counter = TableTokenCounter([m["content"] for m in c["input"]], [20, 5, 5, 50000])
    conv, _ = store(c, counter)
    window = ContextWindowBuilder(conv, token_counter=counter, oversized_message_policy="truncate").build(
        c["params"]["max_tokens"]
    )
    newest = window.messages[-1]
    assert newest.truncated and newest.seq == 4 and "truncated" in newest.content
    assert window.truncated == (4,)
    assert window.total_tokens <= c["params"]["max_tokens"]
    assert Message.objects.get(conversation=conv, seq=4).content == c["input"][3]["content"]


def _incremental_compactor(conv, history, compaction, llm, counter):  # type: ignore[no-untyped-def]
    return LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        history,
        summarize_every_n_human=compaction.get("summarize_every_n_human", 10),
        keep_recent_human_turns=compaction.get("keep_recent_human_turns", 1),
        keep_recent_messages=compaction.get("keep_recent_messages"),
        max_summary_tokens=compaction.get("max_summary_tokens", 1000),
        token_counter=counter,
    )


def test_bug12_compaction_is_incremental() -> None:
    c = case("BUG-12")
    counter = counter_for(c)
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    llm = ScriptedChatModel(["S1: the user asked q1.", "S2: the user asked q1 to q3."])
    compactor = _incremental_compactor(conv, history, c["params"]["compaction"], llm, counter)
    compacted_after = []
    for index, message in enumerate(from_openai_messages(c["input"])):
        history.add_message(message)
        if compactor.needs_compaction(max_tokens=c["params"]["max_tokens"]):
            summary = compactor.compact()
            compacted_after.append(index)
            assert summary is not None
    expected = c["expected"]["compactions"]
    assert compacted_after == [x["after_message"] for x in expected]
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert [[s.first_seq - 1, s.through_seq - 1] for s in summaries] == [
        x["summary_covers"] for x in expected
    ]
    assert summaries[1].previous == summaries[0]
    second_prompt = llm.calls[1][0][-1].content
    assert "S1: the user asked q1." in second_prompt
    assert "User: q1" not in second_prompt and "r1" not in second_prompt
    for text in ("q2", "r2", "q3", "r3"):
        assert text in second_prompt
    window = build(conv, c, counter)
    assert labels(window) == c["expected"]["context"]


def test_bug32_second_compaction_folds_what_the_first_kept_verbatim() -> None:
    """The second summary is built from the first plus every message after its boundary,
    including the turns the first compaction kept verbatim; after each compaction every
    stored message is in the summary's span or in the window, never both, never neither."""
    c = case("BUG-32")
    counter = counter_for(c)
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    llm = ScriptedChatModel(["S1: bed with tomatoes, basil, peppers.", "S2: sun, pH 6.5, planting 20 April."])
    compactor = _incremental_compactor(conv, history, c["params"]["compaction"], llm, counter)
    budget = c["params"]["max_tokens"]
    compacted_after = []
    for index, message in enumerate(from_openai_messages(c["input"])):
        history.add_message(message)
        if compactor.needs_compaction(max_tokens=budget):
            summary = compactor.compact()
            assert summary is not None
            compacted_after.append(index)
            window = build(conv, c, counter)
            in_window = {x for x in labels(window) if x != "SUMMARY"}
            in_summary = set(range(summary.first_seq - 1, summary.through_seq))
            assert in_window & in_summary == set()
            assert in_window | in_summary == set(range(index + 1))
            assert index not in in_summary
    expected = c["expected"]["compactions"]
    assert compacted_after == [x["after_message"] for x in expected]
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert [[s.first_seq - 1, s.through_seq - 1] for s in summaries] == [
        x["summary_covers"] for x in expected
    ]
    first_prompt, second_prompt = (call[0][-1].content for call in llm.calls)
    assert c["input"][0]["content"] in first_prompt and c["input"][2]["content"] not in first_prompt
    assert "S1: bed with tomatoes, basil, peppers." in second_prompt
    # The turns the first compaction kept verbatim (2-4) reach the second summariser call.
    for index in range(2, 8):
        assert c["input"][index]["content"] in second_prompt
    for index in (0, 1, 8, 9, 10):
        assert c["input"][index]["content"] not in second_prompt
    assert labels(build(conv, c, counter)) == c["expected"]["context"]


def _bug13(llm: ScriptedChatModel):  # type: ignore[no-untyped-def]
    """BUG-13's history after two older messages (the ones the summary will cover), and a
    compactor that keeps the case's three human turns and caps summaries at 300 tokens."""
    c = case("BUG-13")
    counter = counter_for(c)
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    older = [
        {"role": "user", "content": "an older question about the order"},
        {"role": "assistant", "content": "an older answer about the order"},
    ]
    history.add_messages(from_openai_messages([*older, *c["input"]]))
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        history,
        keep_recent_human_turns=3,
        max_summary_tokens=300,
        token_counter=counter,
    )
    return c, counter, conv, compactor


def test_bug13_overlong_summary_is_condensed_before_it_is_stored() -> None:
    long_summary = " ".join(["word"] * 1200)
    short_summary = " ".join(["fact"] * 250)
    llm = ScriptedChatModel([long_summary, short_summary])
    c, counter, conv, compactor = _bug13(llm)
    summary = compactor.compact()
    assert summary.token_count <= 300
    assert summary.text == short_summary
    assert "Shorten" in llm.calls[1][0][0].content and llm.calls[1][0][-1].content == long_summary
    window = ContextWindowBuilder(conv, token_counter=counter).build(c["params"]["max_tokens"])
    assert [x if x == "SUMMARY" else x - 2 for x in labels(window)] == c["expected"]["context"]
    assert window.total_tokens <= 1000


def test_bug13_summary_that_stays_too_long_is_never_stored() -> None:
    from agentmemory.exceptions import InvalidSummaryError

    _, _, conv, compactor = _bug13(ScriptedChatModel([" ".join(["word"] * 1200)] * 3))
    with pytest.raises(InvalidSummaryError):
        compactor.compact()
    assert not Summary.objects.filter(conversation=conv).exists()


@pytest.mark.parametrize("case_id", ["BUG-15", "BUG-16"])
def test_compaction_keeps_the_newest_turns_verbatim(case_id: str) -> None:
    c = case(case_id)
    counter = counter_for(c)
    conv, history = store(c, counter)
    llm = ScriptedChatModel(["Greetings exchanged." if case_id == "BUG-15" else "Hosts A and B checked."])
    compactor = _incremental_compactor(conv, history, c["params"]["compaction"], llm, counter)
    assert compactor.needs_compaction(max_tokens=c["params"]["max_tokens"])
    summary = compactor.compact()
    assert [summary.first_seq - 1, summary.through_seq - 1] == c["expected"]["summary_covers"]
    window = build(conv, c, counter)
    assert labels(window) == c["expected"]["context"]
    newest = c["input"][-1]["content"]
    assert window.messages[-1].content == newest
    assert Message.objects.filter(conversation=conv).count() == len(c["input"])


def test_bug18_order_is_seq_whatever_the_timestamps() -> None:
    c = case("BUG-18")
    conv, _ = store(c)
    for seq, stamp in enumerate(c["params"]["created_at"], start=1):
        Message.objects.filter(conversation=conv, seq=seq).update(
            created_at=datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        )
    results = {tuple(labels(build(conv, c))) for _ in range(100)}
    assert results == {tuple(c["expected"]["context"])}


@pytest.mark.parametrize("counter_name", ["tokenizer", "approximate"])
def test_bug19_cjk_and_emoji_are_not_undercounted(counter_name: str) -> None:
    from agentmemory.tokens import ApproximateTokenCounter

    c = case("BUG-19")
    counter = counter_for(c) if counter_name == "tokenizer" else ApproximateTokenCounter()
    conv, _ = store(c, counter)
    window = build(conv, c, counter)
    assert labels(window) == c["expected"]["context"]


def test_bug20_tool_only_ai_message_round_trips_exactly() -> None:
    c = case("BUG-20")
    conv, _ = store(c)
    stored = Message.objects.get(conversation=conv, seq=2)
    assert stored.content is None
    reloaded = PersistentChatHistory(conv).get_messages()[1]
    assert to_openai(reloaded) == c["input"][1]
    assert json.dumps(to_openai(reloaded)) == json.dumps(c["input"][1])
    from agentmemory.tokens import ApproximateTokenCounter

    counter = ApproximateTokenCounter()
    bare = counter.count_message(reloaded.__class__(role=Role.AI, content=None))
    assert counter.count_message(reloaded) > bare + 5


def test_bug21_oversized_tool_result_without_cap_leaves_the_newest_turn() -> None:
    c = case("BUG-21")
    conv, _ = store(c)
    window = build(conv, c, max_tool_result_tokens=None)
    assert labels(window) == c["expected"]["context"]


def test_bug21_tool_result_cap_truncates_the_copy_only() -> None:
    c = case("BUG-21")
    conv, _ = store(c)
    cap = c["expected"]["context_if_tool_result_truncation"]["max_tool_result_tokens"]
    window = build(conv, c, max_tool_result_tokens=cap)
    assert labels(window) == [0, 1, 2, 3, 4, 5, 6]
    copy = window.messages[4]
    assert copy.truncated and "truncated" in copy.content
    assert counter_for(c).count_message(copy) <= cap
    assert window.truncated == (5,)
    assert Message.objects.get(conversation=conv, seq=5).content == c["input"][4]["content"]


def test_bug27_parallel_results_follow_call_order_and_serialise_identically() -> None:
    c = case("BUG-27")
    conv, _ = store(c)
    first = build(conv, c)
    second = build(conv, c)
    assert labels(first) == c["expected"]["context"]
    dump = lambda w: json.dumps([to_openai(m) for m in w.messages])  # noqa: E731
    assert dump(first) == dump(second)


def test_bug23_deleted_conversation_stays_deleted(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    from django.test import override_settings

    c = case("BUG-23")
    conv, history = store(c, LengthTokenCounter())
    other, _ = store(c, LengthTokenCounter())
    other_messages = Message.objects.filter(conversation=other).count()
    with override_settings(AGENTMEMORY={"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 2}):
        compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([]), history)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            assert compactor.compact_if_needed()
        assert len(callbacks) == 1
        conv_pk = conv.pk
        conv.delete()
        for callback in callbacks:
            callback()  # the queued task runs late, eagerly
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(conv_pk).build(100)
    with connection.cursor() as cursor:
        for table in (Message._meta.db_table, Summary._meta.db_table):
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE conversation_id = %s", [conv_pk])
            assert cursor.fetchone()[0] == 0
    assert Message.objects.filter(conversation=other).count() == other_messages


@pytest.mark.django_db(transaction=True)
def test_bug25_async_build_matches_sync_build() -> None:
    c = case("BUG-25")
    conv, _ = store(c)
    builder = ContextWindowBuilder(conv, token_counter=counter_for(c))

    async def run():  # type: ignore[no-untyped-def]
        try:
            return await builder.abuild(c["params"]["max_tokens"])
        finally:
            # The build ran in a worker thread with its own connection: close it, or the
            # test database cannot be dropped at teardown on PostgreSQL.
            await sync_to_async(connections.close_all)()

    async_window = asyncio.run(run())
    sync_window = builder.build(c["params"]["max_tokens"])
    assert labels(async_window) == labels(sync_window) == c["expected"]["context"]
    assert async_window.messages == sync_window.messages


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_bug33_two_tabs_appending_at_once_lose_nothing_and_request_one_compaction(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two requests append to one conversation from their own connections, both having read
    it before either inserts (a barrier forces the overlap), repeated as the case says: both
    appends succeed with distinct, gap-free seqs, the counters are exact, and exactly one
    compaction is requested, by whichever append stored the third human message."""
    from agentmemory.compaction import dispatch, request_compaction

    c = case("BUG-33")
    messages = from_openai_messages(c["input"])
    every = c["params"]["compaction"]["summarize_every_n_human"]
    counter = counter_for(c)
    enqueued: list[int] = []
    lock = threading.Lock()

    def enqueue(conversation_id: int, **kwargs) -> None:  # type: ignore[no-untyped-def]
        with lock:
            enqueued.append(conversation_id)

    monkeypatch.setattr(dispatch, "enqueue_compaction", enqueue)

    def append(conversation_id: int, message, ready: threading.Event | None, go: threading.Barrier) -> int:  # type: ignore[no-untyped-def]
        with transaction.atomic():
            Conversation.objects.get(pk=conversation_id)  # the request reads the conversation
            if ready is not None:
                ready.set()  # A's transaction is open first
            go.wait(timeout=10)  # both have read before either inserts
            stored = PersistentChatHistory(conversation_id, token_counter=counter).add_message(message)
            request_compaction(conversation_id, reason="BUG-33")
        return stored.seq  # type: ignore[return-value]

    def request_b(conversation_id: int, message, a_open: threading.Event, go: threading.Barrier) -> int:  # type: ignore[no-untyped-def]
        a_open.wait(timeout=10)
        return append(conversation_id, message, None, go)

    repeats = 200
    settings = {"COMPACTION_MODE": "celery", "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": every}
    with override_settings(AGENTMEMORY=settings), ThreadPoolExecutor(max_workers=2) as pool:
        try:
            for _ in range(repeats):
                conv = Conversation.objects.create(agent_key="bug-case")
                PersistentChatHistory(conv, token_counter=counter).add_messages(messages[:2])
                a_open, go = threading.Event(), threading.Barrier(2)
                a = pool.submit(append, conv.pk, messages[2], a_open, go)
                b = pool.submit(request_b, conv.pk, messages[3], a_open, go)
                assert sorted([a.result(timeout=30), b.result(timeout=30)]) == [3, 4]
                conv.refresh_from_db()
                assert (conv.last_seq, conv.message_count, conv.human_message_count) == (4, 4, 3)
                seqs = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
                assert seqs == [1, 2, 3, 4]
                assert enqueued.count(conv.pk) == 1
        finally:
            # Each pool thread holds its own connection: close both before the database goes.
            closing = threading.Barrier(2)

            def close() -> None:
                closing.wait(timeout=10)
                connections.close_all()

            for future in [pool.submit(close), pool.submit(close)]:
                future.result(timeout=30)
    assert len(enqueued) == repeats
    window = build(conv, c)
    assert labels(window) == c["expected"]["context"]
    assert [m.role.value for m in window.messages] == ["human", "ai", "human", "human"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_bug33_requests_made_after_both_appends_committed_enqueue_one_task(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """As the API does it: each request appends (committed at once), then asks for a
    compaction; both may see the third human message, but one task is enqueued."""
    from agentmemory.compaction import dispatch, request_compaction

    c = case("BUG-33")
    messages = from_openai_messages(c["input"])
    counter = counter_for(c)
    enqueued: list[int] = []
    lock = threading.Lock()

    def enqueue(conversation_id: int, **kwargs) -> None:  # type: ignore[no-untyped-def]
        with lock:
            enqueued.append(conversation_id)

    monkeypatch.setattr(dispatch, "enqueue_compaction", enqueue)

    def request(conversation_id: int, message, appended: threading.Barrier) -> None:  # type: ignore[no-untyped-def]
        PersistentChatHistory(conversation_id, token_counter=counter).add_message(message)
        appended.wait(timeout=10)  # both appends committed: both requests see 3 human messages
        request_compaction(conversation_id, reason="BUG-33")

    settings = {"COMPACTION_MODE": "celery", "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 3}
    repeats = 100
    with override_settings(AGENTMEMORY=settings), ThreadPoolExecutor(max_workers=2) as pool:
        try:
            for _ in range(repeats):
                conv = Conversation.objects.create(agent_key="bug-case")
                PersistentChatHistory(conv, token_counter=counter).add_messages(messages[:2])
                appended = threading.Barrier(2)
                futures = [pool.submit(request, conv.pk, m, appended) for m in messages[2:4]]
                for future in futures:
                    future.result(timeout=30)
                assert enqueued.count(conv.pk) == 1
        finally:
            closing = threading.Barrier(2)

            def close() -> None:
                closing.wait(timeout=10)
                connections.close_all()

            for future in [pool.submit(close), pool.submit(close)]:
                future.result(timeout=30)


def test_every_case_is_covered() -> None:
    import sys
    from pathlib import Path

    source = Path(sys.modules[__name__].__file__).read_text()
    missing = [case_id for case_id in CASES if f'"{case_id}"' not in source]
    assert missing == []


# -- long-term memory cases: operation lists mapped to KnowledgeMemory --------------------------


def _at(op: dict):  # type: ignore[no-untyped-def]
    from django.utils.dateparse import parse_datetime

    return parse_datetime(op["at"]) if "at" in op else None


def test_bug34_changed_fact_is_stored_and_ranks_first_never_dropped_as_duplicate() -> None:
    from django.contrib.auth import get_user_model

    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.models import Fact
    from agentmemory.recall import EmbeddingBackend
    from tests.embedders import StubEmbedder, vectors_with_similarities

    c = case("BUG-34")
    ops = {op["ref"]: op for op in c["input"]}
    f1, f2, query = vectors_with_similarities(0.91, 0.80, 0.78)  # the case's fixed similarities
    embedder = StubEmbedder({ops["F1"]["text"]: f1, ops["F2"]["text"]: f2, ops["R1"]["query"]: query})
    users = {name: get_user_model().objects.create(username=name) for name in ("u1", "someone-else")}
    # another owner's identical and near-identical facts are never dedup candidates
    other = KnowledgeMemory(users["someone-else"], embedder=embedder, max_log_days=365)
    other.store(ops["F1"]["text"], "work", now=_at(ops["F1"]))

    def memory(threshold):  # type: ignore[no-untyped-def]
        return KnowledgeMemory(
            users["u1"],
            embedder=embedder,
            backend=EmbeddingBackend(embedder),
            supersede_similarity=threshold,
            max_log_days=365,
        )

    km = memory(c["params"]["dedup_threshold"])
    results = {}
    for op in c["input"]:
        if op["op"] == "remember":
            rows_before = Fact.objects.count()
            results[op["ref"]] = (
                km.store(op["text"], op["category"], now=_at(op)),
                Fact.objects.count() - rows_before,
            )
    expected = c["expected"]["results"]
    created, _ = results["F1"]
    assert created.action == expected["F1"]["action"]
    again, new_rows = results["F1_again"]
    assert again.action == expected["F1_again"]["action"]
    assert again.fact.pk == created.fact.pk and new_rows == expected["F1_again"]["new_rows"]
    changed, new_rows = results["F2"]
    assert changed.action in expected["F2"]["action_in"]
    assert changed.action == "superseded" and changed.superseded_ids == (created.fact.pk,)
    assert new_rows == 1  # the action matches what was stored: one new row
    assert expected["F2"]["stored_text_contains"] in Fact.objects.get(pk=changed.fact.pk).content
    # the stale fact is kept as history, out of default recall
    assert Fact.objects.get(pk=created.fact.pk).superseded_by_id == changed.fact.pk
    r1 = ops["R1"]
    hits = km.recall(r1["query"], k=r1["k"], now=_at(r1))
    assert expected["R1"]["top_1_text_contains"] in hits[0].fact.content
    assert all("Northwind" not in h.fact.content for h in hits)
    assert other.live_facts().get().content == ops["F1"]["text"]

    # Without supersede (threshold off) both facts stay live: recency still puts the newer
    # Contoso fact above the stale one that pure cosine would rank first.
    Fact.objects.filter(owner=users["u1"]).delete()
    km = memory(None)
    for op in c["input"]:
        if op["op"] == "remember":
            km.store(op["text"], op["category"], now=_at(op))
    hits = km.recall(r1["query"], k=r1["k"], now=_at(r1))
    assert [("Contoso" in h.fact.content) for h in hits] == [True, False]


def test_bug35_forget_all_is_scoped_has_no_page_cap_and_refuses_no_owner() -> None:
    from django.contrib.auth import get_user_model

    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.models import Fact, FactEmbedding
    from agentmemory.recall import MemoryScopeError
    from tests.embedders import StubEmbedder

    c = case("BUG-35")
    embedder = StubEmbedder()
    users = {name: get_user_model().objects.create(username=name) for name in ("user_a", "user_b")}

    def memory(owner):  # type: ignore[no-untyped-def]
        return KnowledgeMemory(users[owner] if owner else None, embedder=embedder, supersede_similarity=None)

    refs: dict[str, int] = {}
    results: dict[str, dict] = {}
    b_before = None
    for op in c["input"]:
        if op["op"] == "seed":
            km = memory(op["owner"])
            for n in range(op["count"]):
                km.store(op["text_pattern"].format(n=n), op["category"])
        elif op["op"] == "remember":
            refs[op["ref"]] = memory(op["owner"]).store(op["text"], op["category"]).fact.pk
        elif op["op"] == "forget_all":
            if b_before is None:
                b_before = list(
                    FactEmbedding.objects.filter(fact__owner=users["user_b"]).values_list("fact_id", "vector")
                )
            before = Fact.objects.count()
            try:
                results[op["ref"]] = {
                    "deleted_count": memory(op.get("owner")).forget_all(category=op.get("category"))
                }
            except (MemoryScopeError, ValueError) as exc:
                results[op["ref"]] = {
                    "error": type(exc).__name__,
                    "deleted_count": before - Fact.objects.count(),
                }
        elif op["op"] == "recall":
            hits = memory(op["owner"]).recall(op["query"], k=op["k"])
            results[op["ref"]] = {"ids": [h.fact.pk for h in hits]}
    expected = c["expected"]["results"]
    assert results["D1"] == expected["D1"]
    assert results["D2"] == expected["D2"]
    assert results["D3"]["deleted_count"] == 0 and results["D3"]["error"] == "MemoryScopeError"
    assert results["R1"]["ids"] == [refs[ref] for ref in expected["R1"]["ids"]]
    # nothing of user_a is left, by raw queries: facts, history, embeddings, full-text rows
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM agentmemory_fact WHERE owner_id = %s", [users["user_a"].pk])
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM agentmemory_factembedding")
        assert cursor.fetchone()[0] == 3
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT count(*) FROM agentmemory_fact_fts WHERE agentmemory_fact_fts MATCH 'note OR oslo'"
            )
            assert cursor.fetchone()[0] == 0
            cursor.execute("SELECT count(*) FROM agentmemory_fact_fts_docsize")
            assert cursor.fetchone()[0] == 3
    # user_b keeps B1, B2 and B3 with their ids and embeddings
    kept = Fact.objects.filter(owner=users["user_b"]).values_list("pk", flat=True)
    assert sorted(kept) == sorted(refs[r] for r in ("B1", "B2", "B3"))
    assert sorted(
        FactEmbedding.objects.filter(fact__owner=users["user_b"]).values_list("fact_id", "vector")
    ) == sorted(b_before)


def _bug31_after_message_6(llm: ScriptedChatModel):  # type: ignore[no-untyped-def]
    """BUG-31 up to message 6: summary v1 (made after message 2) covers messages 0-1, and the
    compaction after message 6 is due. Runs go through ``run_compaction`` (what the Celery
    task and inline requests call) with the case's compactor settings and ``llm``."""
    from agentmemory.compaction import run_compaction

    c = case("BUG-31")
    counter = counter_for(c)
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    messages = from_openai_messages(c["input"])
    settings = c["params"]["compaction"]

    class Bug31Compactor(LLMMemoryCompactor):
        def __init__(self, repo, cid, model, chat_history=None, **kwargs):  # type: ignore[no-untyped-def]
            kwargs.update(
                summarize_every_n_human=settings["summarize_every_n_human"],
                keep_recent_human_turns=settings["keep_recent_human_turns"],
                token_counter=counter,
            )
            super().__init__(repo, cid, model, chat_history, **kwargs)

    def compact():  # type: ignore[no-untyped-def]
        return run_compaction(conv.pk, compactor_class=Bug31Compactor, llm=llm)

    history.add_messages(messages[:3])
    first = ScriptedChatModel(["S1: flight to Lisbon on 12 May at 07:40."])
    v1 = run_compaction(conv.pk, compactor_class=Bug31Compactor, llm=first).summary
    assert (
        v1 is not None and [v1.first_seq - 1, v1.through_seq - 1] == c["params"]["existing_summary"]["covers"]
    )
    history.add_messages(messages[3:7])
    assert Bug31Compactor(Conversation.objects, conv.pk, None).needs_compaction()
    return SimpleNamespace(
        c=c, counter=counter, conv=conv, history=history, messages=messages, v1=v1, compact=compact
    )


@pytest.mark.parametrize(
    "failure",
    [TransientLLMError("Connection reset by peer (mid-stream)"), "   \n\t  "],
    ids=["summariser-raises", "whitespace-summary"],
)
def test_bug31_a_failed_summary_changes_nothing(failure) -> None:  # type: ignore[no-untyped-def]
    """Variant A (the summariser raises on every attempt) and B (it returns whitespace): no
    summary is stored, v1 stays in force with its text, no message is touched, the failure
    is recorded on the conversation, and the window after message 8 is v1 plus 2-8."""
    llm = ScriptedChatModel([failure] * 3)
    s = _bug31_after_message_6(llm)
    c, conv, v1, compact = s.c, s.conv, s.v1, s.compact
    before = list(Message.objects.filter(conversation=conv).order_by("seq").values())
    expected_error = TransientLLMError if isinstance(failure, Exception) else InvalidSummaryError
    for _ in range(3):  # every attempt fails the same way
        with pytest.raises(expected_error):
            compact()
    conv.refresh_from_db()
    assert Summary.objects.filter(conversation=conv).count() == 1
    assert conv.summary == v1 and conv.summary.text == v1.text
    assert [conv.summary.first_seq - 1, conv.summary.through_seq - 1] == c["expected"]["summary_covers"]
    assert list(Message.objects.filter(conversation=conv).order_by("seq").values()) == before
    assert expected_error.__name__ in conv.compaction_error and conv.compaction_requested_at is not None
    assert "Connection reset" not in conv.summary.text
    s.history.add_messages(s.messages[7:])
    window = build(conv, c, s.counter)
    assert labels(window) == c["expected"]["context"]
    assert window.summary_id == v1.pk


def test_bug31_the_task_retries_model_errors_but_not_rejected_summaries() -> None:
    """The Celery retry policy: transient model errors are retried with backoff and jitter,
    a bounded number of times; a rejected summary is recorded and not retried blindly."""
    from agentmemory.tasks import compact_conversation

    assert compact_conversation.autoretry_for == (TransientLLMError,)
    assert compact_conversation.retry_backoff and compact_conversation.retry_jitter
    assert 0 < compact_conversation.max_retries <= 5
    llm = ScriptedChatModel(["  ", "S2: must not be asked for"])
    s = _bug31_after_message_6(llm)
    conv, v1 = s.conv, s.v1
    ScriptHolder.current = llm
    try:
        with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.scripted_model"}):
            compact_conversation.apply(args=[conv.pk, f"{__name__}._Bug31TaskCompactor"], throw=True)
    finally:
        ScriptHolder.current = None
    assert len(llm.calls) == 1  # one call: the rejection was not retried
    conv.refresh_from_db()
    assert conv.summary == v1 and "InvalidSummaryError" in conv.compaction_error


class _Bug31TaskCompactor(LLMMemoryCompactor):
    """BUG-31's compactor settings, importable by the task."""

    def __init__(self, repo, cid, model, chat_history=None, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.update(
            summarize_every_n_human=2, keep_recent_human_turns=1, token_counter=LengthTokenCounter()
        )
        super().__init__(repo, cid, model, chat_history, **kwargs)


def test_bug31_a_retry_that_succeeds_stores_exactly_one_summary_from_the_old_boundary() -> None:
    llm = ScriptedChatModel(
        [TransientLLMError("Connection reset by peer"), "S2: Lisbon trip, hotel, dinner."]
    )
    s = _bug31_after_message_6(llm)
    c, conv, v1, compact = s.c, s.conv, s.v1, s.compact
    with pytest.raises(TransientLLMError):
        compact()
    run = compact()  # the retry
    assert run.status == "stored"
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert len(summaries) == 2 and summaries[0] == v1
    v2 = summaries[1]
    assert [v2.first_seq - 1, v2.through_seq - 1] == [0, 5] and v2.previous == v1
    # The retry started from the old boundary: v1 plus messages 2-5, not messages 0-1 again.
    prompt = llm.calls[-1][0][-1].content
    assert v1.text in prompt
    assert all(c["input"][i]["content"] in prompt for i in range(2, 6))
    assert all(c["input"][i]["content"] not in prompt for i in (0, 1, 6))
    conv.refresh_from_db()
    assert conv.summary == v2 and conv.compaction_error == "" and conv.compaction_requested_at is None
    assert compact().status == "nothing"  # a second retry stores no duplicate
    assert Summary.objects.filter(conversation=conv).count() == 2
