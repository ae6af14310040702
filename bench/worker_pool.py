"""Compaction by a pool of Celery workers: ``python -m bench.worker_pool``.

``--conversations`` (default 1,000) conversations of 12 turns each are stored with compaction
off, then all are requested at once (``request_compaction(force=True)``: one task each on the
broker), and ``--workers`` real ``celery worker`` processes (solo pool, one task at a time,
``acks_late``, prefetch 1: the example project's settings) compact them with a slow fake model
(``PoolModel``, ``--delay`` seconds a call). Printed for each pool size (``--workers 1,2,4``):
summaries per second, measured from the first summary stored to the last (worker start-up left
out) and from the first enqueue to the last summary, and the invariants checked after the run:

- every conversation has exactly one summary, through the same boundary (the last human turn
  the trigger folds), and no lease, request or error is left on any conversation (the run
  ends when that holds: a worker killed between storing a summary and releasing its lease
  leaves the request until its task comes back);
- no lease was stolen from a live worker (``--slow-every N``: every Nth conversation's model call
  outlasts the lease, which the worker's lease keeper must renew): each conversation was
  summarised by one model call of a worker that was not killed (calls overlapping on one
  conversation would show a stolen lease),
  and no worker logged a lost lease;
- with ``--kill-after N``: one worker is killed with SIGKILL once N summaries are stored; its
  task in hand and the one it had reserved come back to the others after the broker's
  visibility timeout (``acks_late``; five leases, at least 20 s), and nothing is lost.

Uses the example project's settings: ``DATABASE_URL`` (PostgreSQL; the schema is migrated) and
``CELERY_BROKER_URL`` (a Redis database this run empties). ``tests/test_worker_pool.py`` runs
the same code at a smaller size. See docs/operations.md ("Worker pools") for figures.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TURNS = 12
POOL_SUMMARY = "Pool summary: the user asked numbered questions and got answers."
_TAG = re.compile(r"\[c(\d+)\]")


class PoolModel:
    """A slow summariser for the pool: sleeps ``POOL_DELAY`` seconds, then answers a fixed
    summary; the conversations whose id is a multiple of ``POOL_SLOW_EVERY`` take
    ``POOL_SLOW_DELAY`` seconds instead (longer than the lease: its keeper must renew it).
    Appends two lines per call to the file ``POOL_CALLS``, ``start`` and ``end``, each
    with the worker's pid, the conversation tag found in the messages and the time (epoch
    seconds); a call cut short by a kill has no ``end``."""

    model_name = "pool-model"

    def invoke(self, messages: Sequence[Any], *, tools: Sequence[Mapping[str, Any]] | None = None) -> Any:
        from agentmemory.llm.base import ChatResponse, Usage
        from agentmemory.messages import ChatMessage

        text = " ".join(str(m.content or "") for m in messages)
        match = _TAG.search(text)
        tag = match.group(1) if match else "?"
        calls = os.environ.get("POOL_CALLS")
        if calls:
            with open(calls, "a") as f:
                f.write(f"start {os.getpid()} {tag} {time.time()}\n")
        delay = float(os.environ.get("POOL_DELAY", "0"))
        every = int(os.environ.get("POOL_SLOW_EVERY", "0"))
        if every and tag.isdigit() and int(tag) % every == 0:
            delay = float(os.environ.get("POOL_SLOW_DELAY", "0"))  # longer than the lease
        time.sleep(delay)
        if calls:
            with open(calls, "a") as f:
                f.write(f"end {os.getpid()} {tag} {time.time()}\n")
        return ChatResponse(message=ChatMessage.ai(POOL_SUMMARY), usage=Usage(40, 12), model=self.model_name)

    async def ainvoke(
        self, messages: Sequence[Any], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> Any:
        return self.invoke(messages, tools=tools)


def seed(n: int, tag: str = "pool") -> list[int]:
    """``n`` conversations of ``TURNS`` turns (tool exchanges included) stored with compaction
    off; the human messages carry ``[c<i>]`` so the model's log names the conversation.
    Returns their ids."""
    from django.test import override_settings

    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage, ToolCall
    from agentmemory.models import Conversation

    ids = []
    with override_settings(AGENTMEMORY={"COMPACTION_MODE": "off"}):
        for i in range(n):
            conv = Conversation.objects.create(agent_key=tag, title=f"pool {i}")
            batch = [ChatMessage.system("You are a helpful agent.")]
            for t in range(TURNS):
                batch.append(ChatMessage.human(f"[c{conv.pk}] question {t}: " + "word " * 12))
                if t % 3 == 2:
                    call = ToolCall(id=f"call_{t}", name="lookup", arguments={"turn": t})
                    batch += [
                        ChatMessage.ai(None, [call]),
                        ChatMessage.tool(f"result {t}", tool_call_id=f"call_{t}"),
                    ]
                batch.append(ChatMessage.ai(f"answer {t}: " + "word " * 12))
            PersistentChatHistory(conv).add_messages(batch)
            ids.append(conv.pk)
    return ids


@dataclass
class PoolRun:
    """One run of the pool: sizes, times (seconds), the model calls and what was checked."""

    conversations: int
    workers: int
    delay: float
    enqueue_seconds: float = 0.0
    total_seconds: float = 0.0
    first_to_last_seconds: float = 0.0
    model_calls: int = 0
    killed_pid: int | None = None
    killed_calls: int = 0
    recovered_after_kill_seconds: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def summaries_per_second(self) -> float:
        return (self.conversations - 1) / self.first_to_last_seconds if self.first_to_last_seconds else 0.0

    @property
    def overall_per_second(self) -> float:
        return self.conversations / self.total_seconds if self.total_seconds else 0.0

    def line(self) -> str:
        kill = (
            f", one worker killed (its {self.killed_calls} call(s) redone, all done "
            f"{self.recovered_after_kill_seconds:.1f} s after the kill)"
            if self.killed_pid
            else ""
        )
        return (
            f"{self.workers} worker(s), {self.conversations} conversations, model {self.delay:.2f} s/call: "
            f"{self.summaries_per_second:.1f} summaries/s first-to-last "
            f"({self.first_to_last_seconds:.1f} s), {self.overall_per_second:.1f}/s from enqueue "
            f"({self.total_seconds:.1f} s), {self.model_calls} model calls{kill}; "
            + ("invariants hold" if not self.problems else f"PROBLEMS: {self.problems}")
        )


def start_worker(name: str, env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A ``celery -A project worker`` (solo pool: one task at a time) writing to ``log_path``."""
    with log_path.open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"agentmemory-pool-{name}-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def run_pool(
    *,
    conversations: int,
    workers: int,
    delay: float,
    lease: int,
    env: Mapping[str, str],
    scratch: Path,
    kill_after: int | None = None,
    slow_every: int = 0,
    timeout: float = 600.0,
) -> PoolRun:
    """Seed, enqueue and compact ``conversations`` with ``workers`` workers, in this process's
    database (whose URL ``env["DATABASE_URL"]`` must name for the workers) and on the broker
    ``env["CELERY_BROKER_URL"]``; kill one worker once ``kill_after`` summaries exist; with
    ``slow_every``, every such conversation's model call takes 2.5 leases. Checks
    the invariants of the module docstring and returns them in ``PoolRun.problems``. Raises
    ``TimeoutError`` when the summaries are not all stored within ``timeout`` seconds."""
    from django.test import override_settings

    from agentmemory.compaction import request_compaction
    from agentmemory.models import Conversation, Summary

    run = PoolRun(conversations, workers, delay)
    ids = seed(conversations)
    calls = scratch / f"calls-{workers}"
    calls.unlink(missing_ok=True)
    worker_env = {
        **env,
        "AGENTMEMORY_COMPACTION_LLM": "bench.worker_pool.PoolModel",
        "AGENTMEMORY_COMPACTION_LEASE_SECONDS": str(lease),
        "POOL_CALLS": str(calls),
        "POOL_DELAY": str(delay),
        "POOL_SLOW_EVERY": str(slow_every),
        "POOL_SLOW_DELAY": str(2.5 * lease),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
    started = time.monotonic()
    with override_settings(AGENTMEMORY={"COMPACTION_MODE": "celery", "COMPACTION_LEASE_SECONDS": lease}):
        for pk in ids:
            if not request_compaction(pk, force=True).enqueued:
                run.problems.append(f"conversation {pk} not enqueued")
    run.enqueue_seconds = time.monotonic() - started
    logs = [scratch / f"worker-{workers}-{i}.log" for i in range(workers)]
    procs = [start_worker(f"{workers}-{i}", worker_env, logs[i]) for i in range(workers)]
    killed_at: float | None = None

    def unsettled() -> Any:
        """Conversations still holding a lease, a request or an error."""
        return Conversation.objects.filter(pk__in=ids).exclude(
            compaction_lease=None, compaction_requested_at=None, compaction_error=""
        )

    try:
        while True:
            done = Summary.objects.filter(conversation_id__in=ids).count()
            if kill_after is not None and killed_at is None and done >= kill_after:
                victim = procs[0]
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait(10)
                run.killed_pid, killed_at = victim.pid, time.monotonic()
            if done >= conversations and not unsettled().exists():
                break
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"{done} of {conversations} summaries after {timeout} s; logs in {scratch}"
                )
            time.sleep(0.2)
        run.total_seconds = time.monotonic() - started
        if killed_at is not None:
            run.recovered_after_kill_seconds = time.monotonic() - killed_at
        time.sleep(max(1.0, 3 * delay))  # a duplicate delivery, if any, would have run by now
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    stamps = list(Summary.objects.filter(conversation_id__in=ids).values_list("created_at", flat=True))
    run.first_to_last_seconds = (max(stamps) - min(stamps)).total_seconds()
    per_conv = defaultdict(list)
    for conv_id, through in Summary.objects.filter(conversation_id__in=ids).values_list(
        "conversation_id", "through_seq"
    ):
        per_conv[conv_id].append(through)
    boundaries = {tuple(v) for v in per_conv.values()}
    if len(per_conv) != conversations or any(len(v) != 1 for v in per_conv.values()) or len(boundaries) != 1:
        run.problems.append(
            f"summaries per conversation not exactly one at one boundary: {sorted(boundaries)[:5]}"
        )
    left = list(unsettled().values("pk", "compaction_lease", "compaction_requested_at", "compaction_error"))
    if left:
        run.problems.append(f"conversations keep a lease, a request or an error: {left[:3]}")
    lines = [line.split() for line in calls.read_text().splitlines()] if calls.exists() else []
    started_calls: dict[tuple[str, str], float] = {}
    by_conv: dict[str, list[tuple[int, float, float | None]]] = defaultdict(list)
    for kind, pid, tag, at in lines:
        if kind == "start":
            started_calls[(pid, tag)] = float(at)
        else:
            by_conv[tag].append((int(pid), started_calls.pop((pid, tag)), float(at)))
    for (pid, tag), at in started_calls.items():  # cut short by the kill
        by_conv[tag].append((int(pid), at, None))
    run.model_calls = sum(len(made) for made in by_conv.values())
    for tag, made in by_conv.items():
        live = [c for c in made if c[0] != run.killed_pid]
        by_killed = [c for c in made if c[0] == run.killed_pid]
        if len(live) > 1 or any(c[2] is None for c in live):
            run.problems.append(f"conversation {tag}: {len(live)} calls by live workers, not one finished")
        if not live and not any(c[2] is not None for c in by_killed):
            run.problems.append(f"conversation {tag}: no finished model call")
        if live and by_killed:
            run.killed_calls += 1  # in hand at the kill, redone by a live worker
        made.sort(key=lambda c: c[1])
        for a, b in itertools.pairwise(made):
            # a call may begin only after the previous one on the conversation ended (or its
            # worker was killed and its lease expired)
            if a[2] is not None and b[1] < a[2]:
                run.problems.append(f"conversation {tag}: a call began while a live worker's ran")
    if run.killed_calls > 1:
        run.problems.append(
            f"{run.killed_calls} conversations redone after the kill; a solo worker holds one"
        )
    if set(by_conv) != {str(pk) for pk in ids}:
        run.problems.append("model calls do not cover exactly the conversations")
    lost = sum(log.read_text().count("lost its lease") for log in logs)
    if lost:
        run.problems.append(f"{lost} lost leases logged")
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4", help="pool sizes, comma-separated")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds per model call")
    parser.add_argument("--lease", type=int, default=5, help="COMPACTION_LEASE_SECONDS of the workers")
    parser.add_argument("--kill-after", type=int, default=None, help="SIGKILL one worker after N summaries")
    parser.add_argument(
        "--slow-every", type=int, default=0, help="every Nth conversation's call takes 2.5 leases"
    )
    parser.add_argument("--scratch", default="/tmp/agentmemory-worker-pool")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    if not os.environ.get("CELERY_BROKER_URL"):
        parser.error("set CELERY_BROKER_URL to a Redis database this run may empty")
    import django

    django.setup()
    import redis
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        parser.error("set DATABASE_URL to a PostgreSQL database")
    call_command("migrate", verbosity=0)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    from agentmemory.models import Conversation

    print(f"PostgreSQL {connection.pg_version}; broker {os.environ['CELERY_BROKER_URL']}")
    results = []
    for workers in [int(w) for w in args.workers.split(",")]:
        redis.Redis.from_url(os.environ["CELERY_BROKER_URL"]).flushdb()
        Conversation.objects.filter(agent_key="pool").delete()
        run = run_pool(
            conversations=args.conversations,
            workers=workers,
            delay=args.delay,
            lease=args.lease,
            env=os.environ,
            scratch=scratch,
            kill_after=args.kill_after,
            slow_every=args.slow_every,
        )
        Conversation.objects.filter(agent_key="pool").delete()
        results.append(run)
        print(run.line(), flush=True)
    base = results[0].summaries_per_second
    if base:
        print(
            "speed-up against the first size: "
            + ", ".join(f"{r.workers}: {r.summaries_per_second / base:.2f}x" for r in results)
        )
    print(f"bound set by the model alone: {1 / args.delay:.1f} summaries/s per worker" if args.delay else "")
    if any(r.problems for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
