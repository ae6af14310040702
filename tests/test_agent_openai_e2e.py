"""End to end: the example support agent through the real ``openai`` SDK against the fake
OpenAI server, for 25 turns with parallel tool calls, with compaction run by Celery (eagerly
here, and by a real worker on the Redis broker in the PostgreSQL run)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.signals import task_postrun
from django.db import connection
from kombu import pools as kombu_pools

from agentmemory.conf import app_settings
from agentmemory.llm.offline import OFFLINE_LABEL
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.models import Conversation, Message, Summary
from project.agents import SupportAgent, support_prompt
from project.celery import app as celery_app
from tests.fake_openai_server import FakeOpenAIServer, fake_openai  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
OFFLINE_COMPACTOR = "agentmemory.compaction.OfflineMemoryCompactor"
TOOL_NAMES = ["lookup_order", "search_faq", "create_ticket"]


def assert_valid_openai_request(body: dict[str, Any], *, system_prompt: str, summary: str | None) -> None:
    """The request is one the Chat Completions API accepts, shaped as the agent promises:
    system prompt first, then the summary (when there is one), then a user message; every
    assistant tool call answered right after it, no tool result without its call."""
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": system_prompt}
    history = messages[1:]
    if summary is not None:
        assert history[0] == {"role": "system", "content": app_settings().SUMMARY_MESSAGE_PREFIX + summary}
        history = history[1:]
    assert history[0]["role"] == "user"
    assert all(m["role"] != "system" for m in history)
    pending: list[str] = []
    for m in history:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"orphan tool result {m['tool_call_id']}"
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"unanswered tool calls {pending}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = [c["id"] for c in m["tool_calls"]]
    assert not pending, f"unanswered tool calls {pending}"
    assert [t["function"]["name"] for t in body["tools"]] == TOOL_NAMES


def script_turn(server: FakeOpenAIServer, turn: int) -> int:
    """Queue the model's replies for one turn; returns how many model calls it makes."""
    if turn % 3 == 1:
        server.enqueue_tool_calls(
            [
                ("lookup_order", {"order_id": "A-1001"}),
                ("lookup_order", {"order_id": "A-1002", "include_items": True}),
                ("search_faq", {"topic": "shipping"}),
            ],
            prompt_tokens=100 + turn,
            completion_tokens=30,
        )
        server.enqueue_text(
            f"Answer {turn}: A-1001 is shipped, A-1002 is processing.", prompt_tokens=200 + turn
        )
        return 2
    if turn % 3 == 2:
        server.enqueue_tool_calls(
            [("lookup_order", {"order_id": "Z-9"}), ("search_faq", {"topic": "returns"})]
        )
        server.enqueue_tool_call("create_ticket", {"summary": f"customer issue {turn}", "priority": "normal"})
        server.enqueue_text(f"Answer {turn}: I opened a ticket.")
        return 3
    server.enqueue_text(f"Answer {turn}: you are welcome.")
    return 1


@pytest.fixture
def eager_celery(settings) -> Iterator[list[tuple[str, tuple]]]:  # type: ignore[no-untyped-def]
    """Celery in eager mode (whatever the environment says) with the offline summariser;
    yields the (task name, args) of every task that ran."""
    settings.AGENTMEMORY = {"COMPACTOR_CLASS": OFFLINE_COMPACTOR}
    ran: list[tuple[str, tuple]] = []

    def record(sender=None, args=None, **kwargs):  # type: ignore[no-untyped-def]
        ran.append((sender.name, tuple(args or ())))

    task_postrun.connect(record, weak=False)
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield ran
    finally:
        celery_app.conf.task_always_eager = previous
        task_postrun.disconnect(record)


@pytest.mark.django_db(transaction=True)
def test_25_turns_with_parallel_tool_calls_and_compaction(fake_openai, eager_celery):  # noqa: F811
    llm = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test", max_retries=0)
    agent = SupportAgent(llm=llm)
    conv = agent.start_conversation(title="e2e")
    system_prompt = support_prompt(agent.get_injector(conv))
    requests_of_turn: dict[int, range] = {}
    summaries_seen: dict[int, list[Summary]] = {}
    try:
        for turn in range(1, 26):
            expected_calls = script_turn(fake_openai, turn)
            start = len(fake_openai.requests)
            result = agent.run(conv, f"Turn {turn}: where are my orders?")
            requests_of_turn[turn] = range(start, len(fake_openai.requests))
            assert len(requests_of_turn[turn]) == expected_calls
            assert result.answer.startswith(f"Answer {turn}:")
            assert result.compaction_enqueued is (turn in (10, 20))
            summaries_seen[turn] = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    finally:
        llm.close()

    assert fake_openai.pending == 0
    # Celery is eager (no broker): compaction ran inline, in process, right after human
    # messages 10 and 20 and only then (the summaries below), not through a Celery task.
    assert not [name for name, _ in eager_celery if name == "agentmemory.tasks.compact_conversation"]
    assert [len(summaries_seen[t]) for t in (9, 10, 19, 20, 25)] == [0, 1, 1, 2, 2]
    first, second = summaries_seen[25]
    assert (first.human_message_count, second.human_message_count) == (10, 20)
    assert second.previous_id == first.pk
    assert first.text.startswith(OFFLINE_LABEL) and "Turn 1: where" in first.text
    first_human_10 = Message.objects.get(conversation=conv, role="human", content__startswith="Turn 10:")
    assert first.through_seq == first_human_10.seq - 1  # the newest turn stays verbatim (K6)

    for turn, indexes in requests_of_turn.items():
        summary = None if turn <= 10 else (first if turn <= 20 else second)
        for index in indexes:
            body = fake_openai.requests[index]
            assert_valid_openai_request(
                body, system_prompt=system_prompt, summary=summary.text if summary else None
            )
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            assert users[-1] == f"Turn {turn}: where are my orders?"
            if summary is not None:
                # History after the summary starts with the first turn the summary does not cover.
                assert body["messages"][2]["content"].startswith(f"Turn {10 if turn <= 20 else 20}:")

    # Parallel results are stored in tool_calls order; provider usage sits on the AI messages.
    ai = Message.objects.filter(conversation=conv, role="ai").exclude(tool_calls=[]).order_by("seq").first()
    results = Message.objects.filter(conversation=conv, exchange_seq=ai.seq, role="tool").order_by("seq")
    assert [r.tool_call_id for r in results] == [c["id"] for c in ai.tool_calls]
    assert ai.metadata["usage"] == {"input_tokens": 101, "output_tokens": 30, "source": "provider"}
    assert ai.metadata["model"] == "gpt-test" and ai.metadata["finish_reason"] == "tool_calls"
    # Tool errors reached the model as results; the turn went on.
    error = Message.objects.filter(
        conversation=conv, role="tool", content__startswith="Error: no order"
    ).first()
    assert error is not None and error.metadata["error"] is True
    # FAQ results (memory="stub") from earlier turns are stubs in later requests.
    last_request = fake_openai.requests[-1]["messages"]
    faq_texts = [
        m["content"] for m in last_request if m["role"] == "tool" and "omitted from memory" in m["content"]
    ]
    assert faq_texts and all(t == "[result of search_faq omitted from memory]" for t in faq_texts)
    conv.refresh_from_db()
    assert len(conv.metadata["tickets"]) == 8  # create_ticket ran in turns 2, 5, ..., 23


# -- a real Celery worker on the Redis broker ------------------------------------------


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _drop_broker_connections() -> None:
    """Close pooled broker connections (the app's and kombu's shared producer pools), so the
    next send, eager or not, connects to the current broker URL."""
    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
        celery_app._pool = None
    amqp = celery_app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    kombu_pools.reset()


@pytest.fixture
def celery_worker_process(transactional_db, broker_url) -> Iterator[subprocess.Popen]:  # type: ignore[no-untyped-def]
    """A ``celery -A project worker`` process sharing the test database and this run's Redis
    broker (``broker_url``); the test process sends tasks to it instead of running them
    eagerly."""
    broker = broker_url
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=_database_url(),
        CELERY_BROKER_URL=broker,
        AGENTMEMORY_COMPACTOR_CLASS=OFFLINE_COMPACTOR,
        AGENTMEMORY_LLM_PROVIDER="none",
    )
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "project",
        "worker",
        "--pool=solo",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--purge",
        "--loglevel=INFO",
    ]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if " ready." in line:
                ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    saved = (celery_app.conf.task_always_eager, celery_app.conf.broker_url)
    try:
        if not ready.wait(60):
            pytest.fail("the Celery worker did not start within 60 s:\n" + "".join(output[-40:]))
        _drop_broker_connections()
        celery_app.conf.task_always_eager = False
        celery_app.conf.broker_url = broker
        proc.output = output  # type: ignore[attr-defined]
        yield proc
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.broker_url = saved
        _drop_broker_connections()
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(5)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.postgres
@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_real_celery_worker_compacts_an_agent_conversation(fake_openai, celery_worker_process, settings):  # noqa: F811
    settings.AGENTMEMORY = {"COMPACTOR_CLASS": OFFLINE_COMPACTOR}
    llm = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test", max_retries=0)
    agent = SupportAgent(llm=llm)
    conv = agent.start_conversation(title="worker")
    try:
        for turn in range(1, 11):
            script_turn(fake_openai, turn)
            result = agent.run(conv, f"Turn {turn}: where are my orders?")
        assert result.compaction_enqueued is True

        deadline = time.monotonic() + 60
        while not Summary.objects.filter(conversation=conv).exists():
            assert celery_worker_process.poll() is None, "".join(celery_worker_process.output[-40:])
            if time.monotonic() > deadline:
                pytest.fail(
                    "no summary after 60 s; worker output:\n" + "".join(celery_worker_process.output[-40:])
                )
            time.sleep(0.2)
        summary = Summary.objects.get(conversation=conv)
        assert summary.text.startswith(OFFLINE_LABEL) and summary.human_message_count == 10
        assert "compact_conversation" in "".join(celery_worker_process.output)

        fake_openai.enqueue_text("Answer 11: anything else?")
        agent.run(conv, "Turn 11: thanks")
        body = fake_openai.requests[-1]
        assert_valid_openai_request(
            body, system_prompt=support_prompt(agent.get_injector(conv)), summary=summary.text
        )
    finally:
        llm.close()
    assert Conversation.objects.get(pk=conv.pk).summary_id == summary.pk
