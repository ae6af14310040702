"""Turns of one conversation running at once (two browser tabs, two web processes, a
retried request): no model call is sent with a stored message in neither its window nor
the summary (K1), also when another turn's compaction holds the lease or the summary it
made ends before what was appended meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.compaction.state import claim_lease, release_lease
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, ModelCall, Summary
from agentmemory.tokens import LengthTokenCounter
from tests.factories import conversation_with_turns, turn
from tests.helpers_concurrency import ROOT, ScriptHolder, child_env, stop_process

COUNTER = LengthTokenCounter()  # every message costs one token
INLINE = {"COMPACTION_MODE": "inline", "COMPACTION_LLM": "tests.helpers_concurrency.scripted_model"}


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    """The model compaction runs build (``COMPACTION_LLM``), scripted by the test."""
    ScriptHolder.current = ScriptedChatModel()
    with override_settings(AGENTMEMORY=INLINE):
        yield ScriptHolder.current
    ScriptHolder.current = None


@pytest.mark.django_db(transaction=True)
def test_a_gap_waits_for_the_run_another_turn_holds_then_closes(scripted: Any) -> None:
    # System prompt at seq 1, turn i: human at 2 + 2i, answer at 3 + 2i. A window of 5
    # tokens leaves seqs 2..17 out until a summary covers them. Another turn's run holds the
    # lease (it made its summary before this turn's messages) and ends half a second after
    # this turn asked for its compaction.
    conv, _ = conversation_with_turns(10, token_counter=COUNTER, tool_every=0)
    lease = claim_lease(conv.pk)
    assert lease is not None

    def other_run_ends() -> None:
        try:
            # once this turn has asked for its compaction (and found the lease held)
            deadline = time.monotonic() + 20
            requested = Conversation.objects.filter(pk=conv.pk, compaction_requested_at__isnull=False)
            while not requested.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
            release_lease(conv.pk, lease)
        finally:
            connections.close_all()

    scripted.add("Earlier: ten numbered questions, each answered.")
    ender = threading.Thread(target=other_run_ends)
    ender.start()
    try:
        window = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close").build(5)
    finally:
        ender.join(timeout=10)

    assert window.uncovered.count == 0
    assert window.summary_through_seq == 19 and [m.seq for m in window.history] == [20, 21]
    assert Summary.objects.filter(conversation=conv).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_gap_reopened_by_turns_appended_during_the_compaction_is_closed_again(scripted: Any) -> None:
    conv, history = conversation_with_turns(10, token_counter=COUNTER, tool_every=0)

    def while_summarising(messages: Any) -> str:
        # Three turns of another tab arrive while the model writes the summary of seqs 2..19.
        history.add_messages([m for i in (10, 11, 12) for m in turn(i)])
        return "Earlier: ten numbered questions, each answered."

    scripted.add(while_summarising, "Earlier: thirteen numbered questions, each answered.")
    window = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close").build(5)

    assert window.uncovered.count == 0
    assert window.summary_through_seq == 25 and [m.seq for m in window.history] == [26, 27]
    summaries = Summary.objects.filter(conversation=conv).order_by("through_seq")
    assert [(s.first_seq, s.through_seq) for s in summaries] == [(2, 19), (2, 25)]


class _Answering:
    """A model that answers every call at once, naming the newest human message."""

    model_name = "answering"

    def invoke(self, messages: Any, *, tools: Any = None) -> ChatResponse:
        human = [m for m in messages if m.role == "human"]
        text = f"answer to {human[-1].content if human else 'nothing'}: " + "so " * 20
        return ChatResponse(message=ChatMessage.ai(text), usage=Usage(10, 10), model=self.model_name)

    async def ainvoke(self, messages: Any, *, tools: Any = None) -> ChatResponse:
        return self.invoke(messages, tools=tools)


class _Busy(BaseToolCallingAgent, register=False):
    NAME = "Busy"
    AGENT_KEY = "busy"
    SYSTEM_PROMPT = "Be brief."
    MEMORY_COMPACTOR_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 400


def _turns_at_once(conv: Conversation, mode: str) -> None:
    """Six threads, eight agent turns each, on ``conv``: every model call's history starts
    right after what its summary covers, and each boundary has one summary."""
    errors: list[BaseException] = []
    gate = threading.Barrier(6, timeout=30)

    def turns(worker: int) -> None:
        try:
            agent = _Busy(llm=_Answering())
            gate.wait()
            for i in range(8):
                agent.run(conv.pk, f"w{worker} question {i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    settings = {
        "COMPACTION_MODE": mode,
        "COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 3,
    }
    with override_settings(AGENTMEMORY=settings):
        threads = [threading.Thread(target=turns, args=(k,)) for k in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)

    assert errors == []
    calls = list(ModelCall.objects.filter(conversation=conv).values_list("first_seq", "summary__through_seq"))
    assert len(calls) == 48
    # each call's history starts right after what its summary covers: nothing in between
    assert [(first, through) for first, through in calls if first > (through or 0) + 1] == []
    assert len(PersistentChatHistory(conv.pk).get_messages()) == 96
    through = list(Summary.objects.filter(conversation=conv).values_list("through_seq", flat=True))
    assert len(through) == len(set(through))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_turns_of_one_conversation_at_once_never_send_a_gap() -> None:
    _turns_at_once(Conversation.objects.create(agent_key="busy"), "inline")


@pytest.fixture
def worker(celery_app, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A ``celery -A project worker`` on this run's Redis database, compacting with the
    offline summariser; stopped at teardown whatever happened."""
    env = {
        **child_env(),
        "CELERY_BROKER_URL": celery_app.conf.broker_url,
        "AGENTMEMORY_COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        command = [sys.executable, "-m", "celery", "-A", "project", "worker", "--pool", "solo"]
        command += ["--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        command += ["--hostname", f"agentmemory-turns-{os.getpid()}@%h"]
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop_process(proc)


@pytest.mark.celery_worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_turns_at_once_with_a_celery_worker_never_send_a_gap(worker) -> None:  # type: ignore[no-untyped-def]
    # Each turn that finds a gap enqueues a compaction and waits for it; the summary the
    # worker makes may end before what other turns appended meanwhile.
    _turns_at_once(Conversation.objects.create(agent_key="busy"), "celery")


@pytest.mark.django_db(transaction=True)
def test_a_turn_waits_for_its_compaction_no_longer_than_the_wait_setting(scripted: Any) -> None:
    # An imported conversation of 30 turns and a slow summariser (0.3 s a call, one turn per
    # call): a run may make 20 calls, 6 s, where a turn waits COMPACTION_WAIT_SECONDS (1 s
    # here). The run stores what it folded at the first turn boundary past the wait; the rest
    # is reported on the window and left to later runs.
    conv, _ = conversation_with_turns(30, token_counter=COUNTER, tool_every=0, words=20)

    def slow(messages: Any) -> str:
        time.sleep(0.3)
        return f"Turns up to seq {messages[-1].seq}."

    for _ in range(30):
        scripted.add(slow)
    settings = {**INLINE, "COMPACTION_WAIT_SECONDS": 1, "SUMMARIZER_MAX_INPUT_TOKENS": 2}
    with override_settings(AGENTMEMORY=settings):
        started = time.monotonic()
        window = ContextWindowBuilder(conv, token_counter=COUNTER, gap_policy="close").build(5)
        waited = time.monotonic() - started

    assert waited < 3  # the wait, one call in progress and the storing; 6 s before
    summary = Summary.objects.get(conversation=conv)
    assert window.summary_id == summary.pk and 0 < summary.through_seq < 59
    assert window.uncovered.count == 59 - summary.through_seq  # reported, not silently dropped
    assert 2 <= len(scripted.calls) <= 6
