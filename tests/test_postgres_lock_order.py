"""Lock order on PostgreSQL: eight threads run agent turns on ONE conversation at once, with
the compactor, knowledge memory and the memory block on; every turn is answered and stored
whole, seqs are gap-free, the counters match the rows, summaries chain without repeats and the
memory flush stores no fact twice. Before every statement that locks several facts or
conversations took them in ascending id order, two turns recording their model calls (and the
recall counters' update) locked the same facts in different orders and one turn failed with
"deadlock detected" (docs/architecture.md, "Lock order")."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.db.models import Sum
from django.test import override_settings
from django.utils import timezone

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.knowledge.memory import _mark_recalled
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Fact, Message, ModelCall, Summary
from agentmemory.recording import redact_if_quoted_gone
from tests.helpers_concurrency import database_url, wait_for_a_lock_wait

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8
TURNS = 4


@tool
def lookup(item: str) -> str:
    """Look an item up.

    Args:
        item: what to look up.
    """
    return f"{item} is in stock"


class BusyAgent(BaseToolCallingAgent, register=False):
    NAME = "busy"
    AGENT_KEY = "busy-break"
    SYSTEM_PROMPT = "Answer briefly."
    TOOLS = [lookup]
    MEMORY_COMPACTOR_ENABLED = True
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 3_000


def _reply(messages: list[ChatMessage]) -> ChatMessage:
    last = messages[-1]
    if last.role == Role.TOOL:
        return ChatMessage.ai("Done: " + (last.content or "")[:40])
    return ChatMessage.ai(None, tool_calls=[ToolCall(f"call_{uuid.uuid4().hex}", "lookup", {"item": "x"})])


class EndlessModel(ScriptedChatModel):
    def _next(self, messages, tools):  # type: ignore[no-untyped-def]
        with self._lock:
            self.calls.append((list(messages), tools))
        return _reply, list(messages)


def test_eight_threads_of_turns_on_one_conversation(django_user_model) -> None:
    owner = django_user_model.objects.create(username="busy")
    conv = BusyAgent(llm=EndlessModel()).start_conversation(owner=owner)
    errors: list[BaseException] = []
    answers: list[str] = []
    barrier = threading.Barrier(THREADS)

    def worker(n: int) -> None:
        try:
            agent = BusyAgent(llm=EndlessModel())
            barrier.wait()
            for t in range(TURNS):
                result = agent.run(
                    conv.pk, f"I went to the harbour number {n}-{t} yesterday and it was lovely."
                )
                answers.append(result.answer)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    with override_settings(AGENTMEMORY={"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 3, "MEMORY_FLUSH": "always"}):
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert errors == []
    assert len(answers) == THREADS * TURNS
    conv.refresh_from_db()
    rows = list(Message.objects.filter(conversation=conv).order_by("seq"))
    assert [m.seq for m in rows] == list(range(1, len(rows) + 1))
    assert conv.message_count == len(rows)
    assert conv.last_seq == len(rows)
    assert conv.human_message_count == sum(m.role == "human" for m in rows)
    assert (
        conv.stored_tokens == (Message.objects.filter(conversation=conv).aggregate(s=Sum("token_count"))["s"])
    )
    humans = [m for m in rows if m.role == "human"]
    assert len(humans) == THREADS * TURNS
    calls = {tc["id"] for m in rows for tc in m.tool_calls}
    results = Counter(m.tool_call_id for m in rows if m.role == "tool")
    assert set(results) == calls and all(v == 1 for v in results.values())
    assert sum(m.role == "ai" and not m.tool_calls for m in rows) == THREADS * TURNS
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    for a, b in itertools.pairwise(summaries):
        assert b.first_seq == a.first_seq or b.previous_id == a.pk
    facts = Counter(f.content for f in Fact.objects.filter(owner=owner, superseded_by__isnull=True))
    assert all(v == 1 for v in facts.values()), facts.most_common(3)


# Deterministic forms of the deadlock above: another transaction holds the row of the lowest
# id (as deletes and forgets take rows, ascending) and waits for a higher one next. A statement
# that locks several rows in any other order holds that higher row while it waits for the
# lowest one, and PostgreSQL kills one of the two ("deadlock detected"). In ascending order
# it holds nothing while it waits.


def _other_connection() -> psycopg.Connection[Any]:
    conn = psycopg.connect(database_url(), autocommit=False)
    conn.execute("SET lock_timeout = '20s'")
    return conn


def _waits_holding(
    table: str, ids: list[int], action: Callable[[], Any], *, seqscan: bool = False
) -> list[int]:
    """Lock ``ids[0]`` elsewhere, run ``action`` in a thread until it waits for that lock,
    and return which of the other ``ids`` it holds meanwhile (none, in ascending order)."""
    holder = _other_connection()
    holder.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", [ids[0]])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            if seqscan:  # a large table's bitmap or sequential scan visits rows in heap order
                with connection.cursor() as cursor:
                    cursor.execute("SET enable_indexscan = off")
            action()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        probe = psycopg.connect(database_url(), autocommit=True)
        wait_for_a_lock_wait(probe, holder.info.backend_pid)
        held = []
        for pk in ids[1:]:
            try:
                probe.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE NOWAIT", [pk])
            except psycopg.errors.LockNotAvailable:
                held.append(pk)
        probe.close()
    finally:
        holder.rollback()
        holder.close()
        thread.join(30)
    assert errors == []
    return held


def _facts(owner: Any, n: int = 6) -> list[int]:
    memory = KnowledgeMemory(owner.pk)
    ids = [memory.store(f"Harbour visit number {i} was lovely").fact.pk for i in range(n)]
    return sorted(ids)


def test_recording_a_call_locks_quoted_facts_and_conversations_in_id_order(django_user_model) -> None:
    owner = django_user_model.objects.create(username="quoted")
    ids = _facts(owner)
    call = ModelCall(owner_id=owner.pk, window_changes={"knowledge": {"facts": ids}})
    assert _waits_holding(Fact._meta.db_table, ids, lambda: redact_if_quoted_gone(call)) == []
    convs = sorted(Conversation.objects.create(owner=owner).pk for _ in range(4))
    call = ModelCall(owner_id=owner.pk, window_changes={"memory": {"sources": {"conversations": convs}}})
    assert _waits_holding(Conversation._meta.db_table, convs, lambda: redact_if_quoted_gone(call)) == []


def test_marking_facts_recalled_locks_them_in_id_order(django_user_model) -> None:
    owner = django_user_model.objects.create(username="recalled")
    ids = _facts(owner)
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)  # its new version now comes last in the heap
    now = timezone.now()
    assert (
        _waits_holding(Fact._meta.db_table, ids, lambda: _mark_recalled("default", ids, now), seqscan=True)
        == []
    )
    assert (
        _waits_holding(
            Fact._meta.db_table, ids, lambda: _mark_recalled("default", ids, now, durable=True), seqscan=True
        )
        == []
    )


def test_a_recall_marking_its_facts_locks_them_in_id_order(django_user_model) -> None:
    owner = django_user_model.objects.create(username="recall-one")
    ids = _facts(owner)
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)
    memory = KnowledgeMemory(owner.pk)
    found: list[Any] = []
    held = _waits_holding(
        Fact._meta.db_table, ids, lambda: found.extend(memory.recall("harbour visit", k=10))
    )
    assert held == []
    assert sorted(hit.fact.pk for hit in found) == ids


def test_deleting_conversations_locks_them_in_id_order(django_user_model) -> None:
    owner = django_user_model.objects.create(username="deleted")
    convs = sorted(Conversation.objects.create(owner=owner).pk for _ in range(4))
    Conversation.objects.filter(pk=convs[0]).update(title="touched")  # now the newest by updated_at
    Conversation.objects.filter(pk=convs[-1]).update(title="touched")
    held = _waits_holding(
        Conversation._meta.db_table, convs, lambda: Conversation.objects.filter(pk__in=convs).delete()
    )
    assert held == []
    assert not Conversation.objects.filter(pk__in=convs).exists()
