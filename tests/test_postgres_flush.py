"""The memory flush under real concurrency on PostgreSQL: compactions racing for one
conversation keep the facts of exactly one summariser call, and a request that stores a fact
and appends a message in one transaction never deadlocks with a compaction storing facts."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings

from agentmemory.compaction import GONE, LLMMemoryCompactor, run_compaction
from agentmemory.flush import MemoryFlush
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Summary
from agentmemory.tasks import compact_conversation
from tests.factories import UserFactory
from tests.helpers_concurrency import ScriptHolder
from tests.test_memory_flush import AGENT, agents, conversation, fact, reply, scope  # noqa: F401

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run_in_threads(targets: list[Any]) -> list[Any]:
    """Run each target in a thread of its own, released together; results or exceptions."""
    barrier = threading.Barrier(len(targets))
    results: list[Any] = [None] * len(targets)

    def run(k: int) -> None:
        try:
            barrier.wait()
            results[k] = targets[k]()
        except BaseException as exc:
            results[k] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_ten_racing_compactions_keep_the_facts_of_one_call() -> None:
    user = UserFactory()
    conv = conversation(user)

    def slow(n: int) -> Any:
        def answer(messages: list[ChatMessage]) -> str:
            time.sleep(0.3)  # the racers overlap while the model "works"
            return json.dumps(
                reply(facts=[fact(f"Caroline's daughter Lea is allergic to peanuts ({n}).", 3)])
            )

        return answer

    ScriptHolder.current = llm = ScriptedChatModel([slow(n) for n in range(10)])
    try:
        with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.scripted_model"}):
            results = run_in_threads(
                [lambda: compact_conversation(conv.pk) for _ in range(5)]
                + [
                    lambda: LLMMemoryCompactor(
                        Conversation.objects, conv.pk, llm, PersistentChatHistory(conv.pk)
                    ).run()
                    for _ in range(5)
                ]
            )
    finally:
        ScriptHolder.current = None
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert Summary.objects.filter(conversation=conv).count() == 1
    assert len(llm.calls) == 1  # the lease let one run call the model
    assert list(Fact.objects.values_list("content", flat=True)) == [
        "Caroline's daughter Lea is allergic to peanuts (0)."
    ]


def test_a_request_storing_a_fact_then_appending_never_deadlocks_with_a_flush() -> None:
    """A view in ``ATOMIC_REQUESTS`` stores a fact (the scope's lock) and then appends (the
    conversation's row); a compaction storing facts in the same scope takes the scope's lock
    before the row, the same order, so the two take turns instead of deadlocking."""
    user = UserFactory()
    conv = conversation(user)
    stored = threading.Event()

    def request() -> str:
        with transaction.atomic():
            result = scope(user).store("Caroline's home city: Porto", "personal", persistent=True)
            stored.set()
            time.sleep(0.5)  # the compaction reaches its transaction meanwhile
            PersistentChatHistory(conv.pk).add_message(ChatMessage.ai("Noted."))
        return result.action

    def compaction() -> str:
        stored.wait(10)
        llm = ScriptedChatModel([json.dumps(reply())])
        return (
            LLMMemoryCompactor(Conversation.objects, conv.pk, llm, PersistentChatHistory(conv.pk))
            .run()
            .status
        )

    results = run_in_threads([request, compaction])

    assert results == ["created", "stored"], results
    live = scope(user).live_facts().filter(content__startswith="Caroline's home city")
    assert list(live.values_list("content", flat=True)) == ["Caroline's home city: Lisbon"]
    assert KnowledgeMemory(user, namespace="family").all_facts().count() == 3


def test_a_flush_whose_owner_is_deleted_meanwhile_stores_nothing_and_reports_the_conversation_gone(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """The user (with the conversation) is deleted while the summariser works: the flush
    takes the owner's row first, finds it gone and stores no fact; the run reports the
    conversation gone instead of failing with the scope's error."""
    user = UserFactory()
    conv = conversation(user)
    prepare = MemoryFlush.prepare

    def prepare_then_delete_the_user(self: MemoryFlush) -> None:
        prepare(self)
        type(user).objects.filter(pk=user.pk).delete()

    monkeypatch.setattr(MemoryFlush, "prepare", prepare_then_delete_the_user)
    run = run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())]))

    assert run.status == GONE
    assert not Fact.objects.exists() and not Conversation.objects.filter(pk=conv.pk).exists()
