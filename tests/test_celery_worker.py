"""A real Celery worker, fed through Redis, compacts a conversation (K3 end to end).

The worker is ``celery -A project worker`` in a child process, connected to the same test
database (data is committed: ``django_db(transaction=True)``) and to the run's Redis
database on the server of ``TEST_REDIS_URL`` (``broker_url``). Its summariser is
``tests.helpers_concurrency.FixedSummaryModel``, set through ``AGENTMEMORY_COMPACTION_LLM``.
Locally the test skips when Redis is unreachable; in CI (``CI`` set) it fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary
from tests.factories import conversation_with_turns, turn
from tests.helpers_concurrency import FIXED_SUMMARY, ROOT, child_env, stop_process

pytestmark = [pytest.mark.celery_worker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SUMMARY_TIMEOUT = 60  # seconds


@pytest.fixture
def worker(broker_url, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A running ``celery -A project worker``; killed at teardown whatever happened."""
    env = {
        **child_env(),
        "CELERY_BROKER_URL": broker_url,
        "AGENTMEMORY_COMPACTION_LLM": "tests.helpers_concurrency.FixedSummaryModel",
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--pool",
                "solo",
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"agentmemory-test-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc, log_path
        finally:
            stop_process(proc)


def wait_for_summary(conv: Conversation, proc, log_path: Path, *, after: int = 0) -> Summary:  # type: ignore[no-untyped-def]
    """The newest summary through a seq above ``after``, once the run that wrote it has also
    released its lease (a separate statement after the summary's commit)."""
    deadline = time.monotonic() + SUMMARY_TIMEOUT
    while time.monotonic() < deadline:
        summary = (
            Summary.objects.filter(conversation=conv, through_seq__gt=after).order_by("-through_seq").first()
        )
        released = not Conversation.objects.filter(pk=conv.pk, compaction_lease__isnull=False).exists()
        if summary is not None and released:
            return summary
        assert proc.poll() is None, f"the worker exited:\n{log_path.read_text()[-4000:]}"
        time.sleep(0.2)
    pytest.fail(f"no summary after {SUMMARY_TIMEOUT}s; worker log:\n{log_path.read_text()[-4000:]}")


def test_a_real_worker_compacts_after_commit(celery_app, worker) -> None:  # type: ignore[no-untyped-def]
    proc, log_path = worker
    conv, history = conversation_with_turns(9)
    compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, None, history)
    assert not compactor.compact_if_needed()  # nine human messages: not yet
    history.add_messages(turn(9, tool=True))
    # autocommit: the on-commit hook publishes to Redis at once; the worker picks it up
    assert compactor.compact_if_needed()
    summary = wait_for_summary(conv, proc, log_path)

    newest_human = Message.objects.filter(conversation=conv, role=Role.HUMAN).order_by("-seq").first()
    assert summary.text == FIXED_SUMMARY and summary.model == "fixed-summary"
    assert (summary.first_seq, summary.through_seq) == (2, newest_human.seq - 1)  # after the pinned prompt
    assert summary.human_messages_covered == 9 and summary.human_message_count == 10
    conv.refresh_from_db()
    assert conv.summary == summary and conv.compaction_started_at is None
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.summary_id == summary.pk and window.first_seq == newest_human.seq
    assert window_violations(window, newest_seq=conv.last_seq) == []

    # a task for a conversation deleted before the worker runs it does nothing, and the
    # worker goes on with the next task
    doomed, _ = conversation_with_turns(11)
    doomed_pk = doomed.pk
    from agentmemory.tasks import compact_conversation

    doomed.delete()
    compact_conversation.delay(doomed_pk)
    PersistentChatHistory(conv).add_messages([m for i in range(10, 20) for m in turn(i)])
    assert compactor.compact_if_needed()
    second = wait_for_summary(conv, proc, log_path, after=summary.through_seq)
    assert second.previous == summary and second.first_seq == 2
    assert not Summary.objects.filter(conversation_id=doomed_pk).exists()
    assert not Message.objects.filter(conversation_id=doomed_pk).exists()
