"""Concurrency on PostgreSQL: many processes appending to one conversation (W1), many
compaction tasks racing for one conversation (K3), and a failing summariser (K4) run
through the Celery task with its retries.

Children are separate OS processes (``python -m tests.helpers_concurrency``) connected to
the same test database, so these tests need committed data: ``django_db(transaction=True)``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections
from django.test import override_settings

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import InvalidSummaryError, TransientLLMError
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tasks import compact_conversation
from tests.factories import conversation_with_turns, turn
from tests.helpers_concurrency import ROOT, ScriptHolder, SlowSummaryModel, child_env, worker_batches

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WORKERS = 8
PER_WORKER = 200


def test_eight_processes_append_to_one_conversation() -> None:
    conv = Conversation.objects.create(agent_key="concurrency")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers_concurrency",
                "append",
                str(conv.pk),
                str(k),
                str(PER_WORKER),
            ],
            cwd=ROOT,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(WORKERS)
    ]
    try:
        for proc in procs:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.strip() == "ready", proc.communicate(timeout=30)[1]
        for proc in procs:  # release them together: maximum contention on one conversation
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    rows = list(
        Message.objects.filter(conversation=conv)
        .order_by("seq")
        .values_list("seq", "role", "content", "tool_calls", "tool_call_id", "metadata", "token_count")
    )
    total = WORKERS * PER_WORKER
    assert len(rows) == total
    assert [r[0] for r in rows] == list(range(1, total + 1))
    # the seqs each process was given are exactly the rows holding its messages, in its order
    for out in outputs:
        mine = [r for r in rows if r[5]["worker"] == out["worker"]]
        assert [r[0] for r in mine] == out["seqs"]
        assert [r[5]["i"] for r in mine] == list(range(PER_WORKER))
        expected = [m.content for batch in worker_batches(out["worker"], PER_WORKER) for m in batch]
        assert [r[2] for r in mine] == expected
    # a batch is contiguous: every tool exchange sits whole, its results right after the call
    for index, (seq, role, _, calls, *_rest) in enumerate(rows):
        if role == Role.AI and calls:
            following = rows[index + 1 : index + 1 + len(calls)]
            assert sorted(r[4] for r in following) == sorted(c["id"] for c in calls), seq
            assert {r[5]["worker"] for r in following} == {rows[index][5]["worker"]}
    conv.refresh_from_db()
    assert conv.last_seq == conv.message_count == total
    assert conv.human_message_count == sum(1 for r in rows if r[1] == Role.HUMAN)
    assert conv.stored_tokens == sum(r[6] for r in rows)
    assert conv.pending_tool_calls == {}
    window = ContextWindowBuilder(conv).build(3_000)
    assert window_violations(window, newest_seq=total) == []


def _run_in_threads(n: int, target) -> list:  # type: ignore[no-untyped-def]
    """Run ``target()`` in ``n`` threads released together; return results or exceptions."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(k: int) -> None:
        try:
            barrier.wait()
            results[k] = target()
        except BaseException as exc:
            results[k] = exc
        finally:
            connections.close_all()  # each thread has its own connection

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return results


def test_ten_concurrent_compactions_make_one_summary() -> None:
    conv, _ = conversation_with_turns(12)
    SlowSummaryModel.calls = 0
    with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.SlowSummaryModel"}):
        half = _run_in_threads(5, lambda: compact_conversation(conv.pk))
        direct = _run_in_threads(
            5,
            lambda: LLMMemoryCompactor(
                Conversation.objects, conv.pk, SlowSummaryModel(), PersistentChatHistory(conv.pk)
            ).compact(),
        )
    # ten racers released in two waves of five; each wave overlaps inside the slow model
    results = half + direct
    assert not [r for r in results if isinstance(r, BaseException)]
    summary = Summary.objects.get(conversation=conv)
    assert SlowSummaryModel.calls == 1
    assert {r for r in half if r is not None} <= {summary.pk}
    conv.refresh_from_db()
    assert conv.summary == summary and conv.compaction_started_at is None
    newest_human = Message.objects.filter(conversation=conv, role=Role.HUMAN).order_by("-seq").first()
    assert summary.through_seq == newest_human.seq - 1


def test_ten_compactions_released_at_once_make_one_summary() -> None:
    conv, _ = conversation_with_turns(12)
    SlowSummaryModel.calls = 0

    def compact():  # type: ignore[no-untyped-def]
        return LLMMemoryCompactor(
            Conversation.objects, conv.pk, SlowSummaryModel(), PersistentChatHistory(conv.pk)
        ).compact()

    results = _run_in_threads(10, compact)
    assert not [r for r in results if isinstance(r, BaseException)]
    assert Summary.objects.filter(conversation=conv).count() == 1
    assert SlowSummaryModel.calls == 1
    assert sum(1 for r in results if r is not None) >= 1


def _append_from_another_connection(history: PersistentChatHistory, messages: list[ChatMessage]) -> None:
    """Append on a separate connection with a deadline: if compaction held a lock on the
    conversation while the model is called, this would block (K3)."""
    done: list = []

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = '5s'")
            done.append(history.add_messages(messages))
        except BaseException as exc:
            done.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(15)
    assert done and not isinstance(done[0], BaseException), done


def test_failing_summariser_through_the_task_never_stores_a_bad_summary() -> None:
    conv, history = conversation_with_turns(6)
    first = LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Turns 0 to 4."]), history
    ).compact()
    history.add_messages(turn(20) + turn(21) + turn(22))
    observed: list = []

    def still_working(label: str, reply):  # type: ignore[no-untyped-def]
        def item(messages):  # type: ignore[no-untyped-def]
            # while the model "works", the conversation takes writes and builds windows on
            # the previous summary
            _append_from_another_connection(
                history, [ChatMessage.human(f"meanwhile {label}"), ChatMessage.ai("ok")]
            )
            window = ContextWindowBuilder(conv).build(5_000)
            observed.append((label, window.summary_id, window.history[-1].content))
            if isinstance(reply, BaseException):
                raise reply
            return reply

        return item

    ScriptHolder.current = ScriptedChatModel(
        [
            still_working("transient", TransientLLMError("503 upstream unavailable")),
            still_working("empty", ""),
            still_working("good", "Turns 0 to 4, then 20 to 22 and two interruptions."),
        ]
    )
    try:
        # apply() runs the task in this process, as eager Celery does: a failed attempt is
        # not retried on the spot (that would block the caller's request); it gives up and
        # the next trigger tries again. Three triggers: transient error, empty text, success.
        with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.scripted_model"}):
            results = [compact_conversation.apply(args=[conv.pk]) for _ in range(3)]
    finally:
        ScriptHolder.current = None
    assert all(result.successful() for result in results), [r.traceback for r in results]
    assert [result.result is None for result in results] == [True, True, False]
    assert [o[0] for o in observed] == ["transient", "empty", "good"]
    assert all(o[1] == first.pk for o in observed)  # the previous summary stayed in force
    assert [o[2] for o in observed] == ["ok", "ok", "ok"]
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert [s.text for s in summaries] == [
        "Turns 0 to 4.",
        "Turns 0 to 4, then 20 to 22 and two interruptions.",
    ]
    final = summaries[-1]
    assert results[-1].result == final.pk and final.previous == first
    conv.refresh_from_db()
    assert conv.summary == final and conv.compaction_started_at is None
    # the appends made during the retries are all stored, in order
    humans = list(
        Message.objects.filter(conversation=conv, content__startswith="meanwhile").values_list(
            "content", flat=True
        )
    )
    assert humans == ["meanwhile transient", "meanwhile empty", "meanwhile good"]
    window = ContextWindowBuilder(conv).build(5_000)
    assert window.summary_id == final.pk and window_violations(window) == []


def test_failing_summariser_called_directly_keeps_the_previous_summary() -> None:
    conv, history = conversation_with_turns(6)
    llm = ScriptedChatModel(["Turns 0 to 4.", TransientLLMError("429"), "", "Turns 0 to 7."])
    compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history)
    first = compactor.compact()
    history.add_messages(turn(6) + turn(7) + turn(8))
    for expected in (TransientLLMError, InvalidSummaryError):
        with pytest.raises(expected):
            compactor.compact()
        conv.refresh_from_db()
        assert conv.summary == first and conv.compaction_started_at is None
        history.add_message(ChatMessage.human("still there?"))
        history.add_message(ChatMessage.ai("yes"))
        assert ContextWindowBuilder(conv).build(5_000).summary_id == first.pk
    final = compactor.compact()
    assert final.text == "Turns 0 to 7." and final.previous == first
    assert Summary.objects.filter(conversation=conv).count() == 2


def test_concurrent_key_facts_leave_one_in_force() -> None:
    """Writers racing to replace one "key: value" fact: each new fact supersedes the one in
    force when it commits, so exactly one stays live and the others are its history (two
    replacing the same old fact at once used to leave both in force)."""
    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.models import Fact
    from tests.factories import UserFactory

    user = UserFactory()
    KnowledgeMemory(user).remember("Hometown: Oslo", category="profile", persistent=True)
    for round_ in range(5):
        values = iter(f"Hometown: City{round_}-{k}" for k in range(4))
        lock = threading.Lock()

        def store(values=values, lock=lock) -> str:  # type: ignore[no-untyped-def]
            with lock:
                content = next(values)
            return KnowledgeMemory(user).store(content, "profile", True).action

        results = _run_in_threads(4, store)
        assert all(r == "superseded" for r in results), results
        live = Fact.objects.filter(owner=user, superseded_by__isnull=True)
        assert live.count() == 1, list(live.values_list("content", flat=True))
        assert Fact.objects.filter(owner=user).count() == 1 + 4 * (round_ + 1)
        # the whole history hangs off the one in force
        assert Fact.objects.filter(owner=user, superseded_by=live.get()).count() == 4 * (round_ + 1)


def test_concurrent_pops_each_take_a_different_message() -> None:
    # openai/openai-agents-python#4205: SQLAlchemySession.pop_item read the newest row, then
    # deleted it, and handed one item to two concurrent callers while another stayed behind
    conversation = Conversation.objects.create()
    history = PersistentChatHistory(conversation)
    history.add_messages([ChatMessage.human(f"m{i}") for i in range(8)])
    barrier = threading.Barrier(8)
    popped: list[str | None] = []

    def pop() -> None:
        try:
            barrier.wait()
            message = PersistentChatHistory(conversation.pk).pop()
            popped.append(None if message is None else message.content)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pop) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(popped) == sorted(f"m{i}" for i in range(8))  # type: ignore[type-var]
    assert not Message.objects.filter(conversation=conversation).exists()
    conversation.refresh_from_db()
    assert conversation.message_count == 0
