"""Failure drills with a real Celery worker on Redis and PostgreSQL.

- A worker killed with SIGKILL in the middle of a compaction: the request stays recorded, the
  sweep (what Celery beat runs every minute) hands it to a new worker once the dead worker's
  lease has expired, and exactly one summary results, within a bounded time; nothing
  half-written (no summary, no lease left behind).
- A worker killed whole (SIGKILL of the worker itself) with a task in hand: Redis gives the
  unacknowledged task to the next worker after the example project's ``visibility_timeout``
  (five leases, at least 20 s; kombu's default is an hour), with no sweep.
- A pool process killed (SIGKILL, as the OOM killer does): the worker gives the task back at
  once (``task_reject_on_worker_lost``) and runs it again, with no sweep.
- The summariser fails on every try: the task retries with exponential backoff, then the
  failure is recorded on the conversation, the previous summary stays in force, and the next
  trigger (the sweep) tries again and succeeds once the model answers.

The worker's summariser is ``tests.drill_models.DrillModel``; the lease is shortened to
``LEASE`` seconds in the worker and in the test. Figures printed with ``-s``.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentmemory.compaction import request_compaction, run_compaction, sweep
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Conversation, Summary
from tests.drill_models import DRILL_SUMMARY, DrillModel
from tests.factories import conversation_with_turns, turn
from tests.helpers_concurrency import ROOT, child_env, stop_process

pytestmark = [pytest.mark.celery_worker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LEASE = 3  # seconds


@pytest.fixture
def drill(broker_url, tmp_path: Path, settings):  # type: ignore[no-untyped-def]
    """Starts workers sharing the test database and broker; kills them at teardown."""
    settings.AGENTMEMORY = {**settings.AGENTMEMORY, "COMPACTION_LEASE_SECONDS": LEASE}
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []
    calls = tmp_path / "calls"
    fail_flag = tmp_path / "fail"

    def start(
        name: str, *, delay: float = 0.0, pool: str = "solo", max_retries: int | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        env = {
            **child_env(),
            "CELERY_BROKER_URL": broker_url,
            "AGENTMEMORY_COMPACTION_LLM": "tests.drill_models.DrillModel",
            "AGENTMEMORY_COMPACTION_LEASE_SECONDS": str(LEASE),
            "DRILL_CALLS": str(calls),
            "DRILL_PIDS": str(tmp_path / "pids"),
            "DRILL_DELAY": str(delay),
            "DRILL_FAIL_FLAG": str(fail_flag),
            **({"DRILL_MAX_RETRIES": str(max_retries)} if max_retries is not None else {}),
        }
        log_path = tmp_path / f"{name}.log"
        log = log_path.open("w")
        logs.append(log)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--pool",
                pool,
                "--concurrency",
                "1",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"agentmemory-drill-{name}-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc, log_path

    try:
        yield start, calls, fail_flag
    finally:
        for proc in procs:
            if proc.poll() is None:
                # Celery's cold shutdown: a warm one (SIGTERM) waits for a slow call to end
                stop_process(proc, signum=signal.SIGQUIT)
        for log in logs:
            log.close()


def _calls(path: Path) -> list[float]:
    return [float(line) for line in path.read_text().split()] if path.exists() else []


def _wait(condition, timeout: float, what: str, log: Path | None = None) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            pytest.fail(f"{what} not within {timeout} s\n{tail}")
        time.sleep(0.1)
    return time.monotonic() - started


def test_worker_killed_mid_compaction_one_summary_after_the_sweep(celery_app, drill) -> None:  # type: ignore[no-untyped-def]
    start, calls, _fail = drill
    conv, _history = conversation_with_turns(12)
    first, first_log = start("first", delay=30)  # slow enough to be killed inside the model call
    assert request_compaction(conv.pk, force=True).enqueued
    _wait(lambda: len(_calls(calls)) == 1, 60, "the first worker calling the model", first_log)
    row = Conversation.objects.values("compaction_lease", "compaction_lease_expires_at").get(pk=conv.pk)
    assert row["compaction_lease"] is not None  # the run holds the lease while the model works

    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = time.monotonic()
    assert not Summary.objects.filter(conversation=conv).exists()  # nothing half-written

    _second, second_log = start("second")
    # Celery beat runs the sweep every minute; here it runs until the dead lease has expired
    # and the request is handed over again.
    _wait(lambda: sweep(enqueue=True).get("enqueued", 0) >= 1, 4 * LEASE + 30, "the sweep re-enqueueing")
    _wait(lambda: Summary.objects.filter(conversation=conv).exists(), 60, "a summary", second_log)
    recovered = time.monotonic() - killed_at
    time.sleep(1)  # a duplicate delivery, if any, would have run by now
    summaries = list(Summary.objects.filter(conversation=conv))
    assert len(summaries) == 1 and summaries[0].text == DRILL_SUMMARY
    conv.refresh_from_db()
    assert conv.summary_id == summaries[0].pk
    assert conv.compaction_lease is None and conv.compaction_requested_at is None
    assert conv.compaction_error == ""
    assert recovered < 4 * LEASE + 60
    print(f"\nworker killed mid-compaction: one summary {recovered:.1f} s after the kill (lease {LEASE} s)")


def test_worker_killed_whole_the_broker_hands_its_task_to_the_next_worker(celery_app, drill) -> None:  # type: ignore[no-untyped-def]
    start, calls, _fail = drill
    conv, _history = conversation_with_turns(12)
    first, first_log = start("whole", delay=30)
    assert request_compaction(conv.pk, force=True).enqueued
    _wait(lambda: len(_calls(calls)) == 1, 60, "the first worker calling the model", first_log)
    os.kill(first.pid, signal.SIGKILL)  # the worker itself: nothing acknowledges or gives back
    first.wait(10)
    killed_at = time.monotonic()
    _second, second_log = start("next")
    # No sweep: the task itself comes back once it has been out for the visibility timeout
    # (20 s here, 300 s with the default lease; kombu's default, an hour, fails this).
    _wait(lambda: Summary.objects.filter(conversation=conv).exists(), 60, "a summary", second_log)
    recovered = time.monotonic() - killed_at
    assert len(_calls(calls)) == 2 and Summary.objects.filter(conversation=conv).count() == 1
    task_ids = [
        set(re.findall(r"compact_conversation\[([0-9a-f-]+)\] received", log.read_text()))
        for log in (first_log, second_log)
    ]
    assert task_ids[0] and task_ids[0] == task_ids[1]  # the same task, handed out again
    print(f"\nworker killed whole: the task ran again {recovered:.1f} s after the kill (visibility 20 s)")


def test_pool_process_killed_the_worker_gives_the_task_back(celery_app, drill) -> None:  # type: ignore[no-untyped-def]
    start, calls, _fail = drill
    pids = calls.parent / "pids"
    conv, _history = conversation_with_turns(12)
    worker, log = start("prefork", delay=30, pool="prefork")
    assert request_compaction(conv.pk, force=True).enqueued
    _wait(lambda: len(_calls(calls)) == 1, 60, "the pool process calling the model", log)
    child = int(pids.read_text().split()[0])
    assert child != worker.pid
    os.kill(child, signal.SIGKILL)  # what the OOM killer does to one pool process
    killed_at = time.monotonic()
    _wait(lambda: len(_calls(calls)) == 2, 4 * LEASE + 30, "the task running again", log)
    assert "WorkerLostError" in log.read_text()
    # the model is slow in the new pool process too; the lease of the killed one had expired
    assert Conversation.objects.filter(pk=conv.pk, compaction_requested_at__isnull=False).exists()
    print(f"\npool process killed: the task ran again {time.monotonic() - killed_at:.1f} s after the kill")


def test_llm_failing_on_every_try_retries_with_backoff_then_records_and_tries_again(
    celery_app, drill
) -> None:  # type: ignore[no-untyped-def]
    start, calls, fail_flag = drill
    conv, _history = conversation_with_turns(12)
    previous = run_compaction(conv.pk, llm=DrillModel()).summary
    assert previous is not None
    PersistentChatHistory(conv).add_messages([m for i in range(12, 24) for m in turn(i)])
    calls.unlink(missing_ok=True)
    fail_flag.touch()
    retries = 3  # the task's 5 back off for about half a minute; the rule is the same
    _worker, log = start("failing", max_retries=retries)
    assert request_compaction(conv.pk, force=True).enqueued

    tries = retries + 1
    _wait(lambda: len(_calls(calls)) >= tries, 120, f"{tries} model calls", log)
    _wait(
        lambda: "TransientLLMError" in log.read_text() and "raised unexpected" in log.read_text(),
        30,
        "the task giving up",
        log,
    )
    stamps = _calls(calls)
    assert len(stamps) == tries  # no more tries after the last retry
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert log.read_text().count("Retry in") == tries - 1
    conv.refresh_from_db()
    assert "timed out" in conv.compaction_error and conv.compaction_failed_at is not None
    assert conv.summary_id == previous.pk  # the previous summary stays in force
    assert conv.compaction_requested_at is not None  # and the request stays for the next trigger
    # One task giving up after its retries is one failed run for the sweep's pause, not six.
    assert conv.compaction_failures == 1

    fail_flag.unlink()
    settled = _wait(lambda: sweep(enqueue=True).get("enqueued", 0) >= 1, 4 * LEASE + 30, "the sweep")
    _wait(
        lambda: Summary.objects.filter(conversation=conv, previous=previous).exists(),
        60,
        "the next summary",
        log,
    )
    conv.refresh_from_db()
    assert conv.summary.previous_id == previous.pk and conv.compaction_error == ""
    print(
        f"\nsummariser failing: {tries} tries, gaps {[round(g, 1) for g in gaps]} s, "
        f"recorded; next sweep after {settled:.1f} s stored the summary"
    )
