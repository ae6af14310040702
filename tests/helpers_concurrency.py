"""Helpers for tests that cross process boundaries: an appender run as a child process and
deterministic ``ChatModel`` stand-ins that a Celery worker can import by dotted path.

Run as a child process::

    DATABASE_URL=postgres://.../test_x python -m tests.helpers_concurrency append \
        <conversation_id> <worker> <count>

Once Django is set up and connected it prints ``ready`` and waits for a line on stdin (so
that the parent can release every child at the same moment); then it appends ``count``
messages (single appends, small batches and whole tool exchanges) to the conversation and
prints the seqs it got as JSON on stdout. ``chaos <append|build|compact> <conversation_id>
<worker> <count>`` runs one process of a mixed workload (see ``_chaos_main``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.messages import ChatMessage, ToolCall

#: the repository root: working directory and import path of child processes
ROOT = Path(__file__).resolve().parents[1]

FIXED_SUMMARY = "The user asked a series of numbered questions and the assistant answered each of them."


def database_url() -> str:
    """URL of the database the current test runs against (pytest-django's ``test_<name>``,
    not the name in ``DATABASE_URL``), for child processes that must see the same data."""
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def child_env() -> dict[str, str]:
    """Environment of a child process (appender, Celery worker) sharing the test database."""
    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "project.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


class FixedSummaryModel:
    """A ``ChatModel`` that always answers with ``FIXED_SUMMARY`` (for real workers)."""

    model_name = "fixed-summary"

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        return ChatResponse(message=ChatMessage.ai(FIXED_SUMMARY), usage=Usage(10, 10), model=self.model_name)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        return self.invoke(messages, tools=tools)


class SlowSummaryModel(FixedSummaryModel):
    """``FixedSummaryModel`` that takes ``DELAY`` seconds per call and counts its calls
    (process-wide), so that concurrent compactions overlap while the model "works"."""

    model_name = "slow-summary"
    DELAY = 0.5
    calls = 0
    _lock = threading.Lock()

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        with SlowSummaryModel._lock:
            SlowSummaryModel.calls += 1
        time.sleep(self.DELAY)
        return super().invoke(messages, tools=tools)


class ScriptHolder:
    """Holds the ``ChatModel`` a test wants the compaction task to use; ``scripted_model``
    (the factory named in ``AGENTMEMORY['COMPACTION_LLM']``) returns it."""

    current: Any = None


def scripted_model() -> Any:
    """Factory for ``AGENTMEMORY['COMPACTION_LLM']``: the model set in ``ScriptHolder``."""
    if ScriptHolder.current is None:
        raise RuntimeError("set tests.helpers_concurrency.ScriptHolder.current first")
    return ScriptHolder.current


def worker_batches(worker: int, count: int) -> list[list[ChatMessage]]:
    """The batches worker ``worker`` appends: exactly ``count`` messages, in a repeating
    mix of a single human message, a single AI message, a human+AI pair and a whole tool
    exchange with two parallel calls whose results are stored in reverse call order.

    Every message carries ``metadata={"worker": worker, "i": i}`` with ``i`` counting from 0
    in append order, and its content names both.
    """
    batches: list[list[ChatMessage]] = []
    i = 0

    def meta() -> dict[str, int]:
        return {"worker": worker, "i": i}

    def tag() -> str:
        return f"w{worker}m{i}"

    pattern = 0
    while i < count:
        left = count - i
        kind = pattern % 4
        pattern += 1
        batch: list[ChatMessage] = []
        if kind == 3 and left >= 5:
            batch.append(ChatMessage.human(f"{tag()} please look both up", metadata=meta()))
            i += 1
            a, b = f"w{worker}c{i}a", f"w{worker}c{i}b"
            calls = [
                ToolCall(id=a, name="lookup", arguments={"key": "a"}),
                ToolCall(id=b, name="lookup", arguments={"key": "b"}),
            ]
            batch.append(ChatMessage.ai(None, calls, metadata=meta()))
            i += 1
            batch.append(
                ChatMessage.tool(f"{tag()} result b", tool_call_id=b, name="lookup", metadata=meta())
            )
            i += 1
            batch.append(
                ChatMessage.tool(f"{tag()} result a", tool_call_id=a, name="lookup", metadata=meta())
            )
            i += 1
            batch.append(ChatMessage.ai(f"{tag()} both found", metadata=meta()))
            i += 1
        elif kind == 2 and left >= 2:
            batch.append(ChatMessage.human(f"{tag()} a question", metadata=meta()))
            i += 1
            batch.append(ChatMessage.ai(f"{tag()} an answer", metadata=meta()))
            i += 1
        elif kind == 1:
            batch.append(ChatMessage.ai(f"{tag()} a remark", metadata=meta()))
            i += 1
        else:
            batch.append(ChatMessage.human(f"{tag()} hello", metadata=meta()))
            i += 1
        batches.append(batch)
    return batches


def _append_main(conversation_id: int, worker: int, count: int) -> None:
    from django.db import connection

    from agentmemory.history import PersistentChatHistory

    history = PersistentChatHistory(conversation_id)  # connects and finds the conversation
    batches = worker_batches(worker, count)
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    seqs: list[int] = []
    for batch in batches:
        if len(batch) == 1:
            seqs.append(history.add_message(batch[0]).seq)  # type: ignore[arg-type]
        else:
            seqs.extend(m.seq for m in history.add_messages(batch))  # type: ignore[misc]
    elapsed = time.monotonic() - started
    connection.close()
    print(json.dumps({"worker": worker, "seqs": seqs, "seconds": elapsed}), flush=True)


def _unexpected(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _chaos_main(role: str, conversation_id: int, worker: int, count: int) -> None:
    """One process of the mixed workload: ``append`` appends ``count`` messages (as
    ``append`` does), ``build`` builds windows and ``compact`` forces compactions until the
    conversation is gone or ``count`` rounds are done. Each prints JSON: the seqs it was
    given (appenders), rounds done, whether it saw the conversation gone (only ever as
    ``ConversationNotFound``, or a compaction run that reports it), and any other exception."""
    from django.db import connection

    from agentmemory.compaction import GONE, OfflineMemoryCompactor, run_compaction
    from agentmemory.context import ContextWindowBuilder
    from agentmemory.exceptions import ConversationNotFound
    from agentmemory.history import PersistentChatHistory
    from agentmemory.invariants import window_violations

    batches = worker_batches(worker, count)
    history = PersistentChatHistory(conversation_id)
    print("ready", flush=True)
    sys.stdin.readline()
    result: dict[str, Any] = {"role": role, "worker": worker, "seqs": [], "rounds": 0, "gone": False}
    errors: list[str] = []
    violations: list[Any] = []
    try:
        if role == "append":
            for batch in batches:
                result["seqs"].extend(m.seq for m in history.add_messages(batch))
                result["rounds"] += 1
        elif role == "build":
            for _ in range(count):
                window = ContextWindowBuilder(conversation_id).build(1_500)
                violations.extend(window_violations(window))
                result["rounds"] += 1
        elif role == "compact":
            for _ in range(count):
                run = run_compaction(conversation_id, compactor_class=OfflineMemoryCompactor)
                result["rounds"] += 1
                if run.status == GONE:
                    result["gone"] = True
                    break
                time.sleep(0.05)
    except ConversationNotFound:
        result["gone"] = True
    except Exception as exc:
        errors.append(_unexpected(exc))
    finally:
        connection.close()
    result["errors"], result["violations"] = errors, [str(v) for v in violations]
    print(json.dumps(result), flush=True)


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    if argv[:1] == ["append"]:
        _append_main(int(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    if argv[:1] == ["chaos"]:
        _chaos_main(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
        return 0
    print(f"unknown command {argv!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def wait_for_a_lock_wait(probe: Any, holder_pid: int, tries: int = 200) -> bool:
    """Whether a session other than ``holder_pid`` came to wait on a lock within ``tries``
    looks 50 ms apart (PostgreSQL; ``probe`` a psycopg connection in autocommit)."""
    for _ in range(tries):
        waiting = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> %s",
            [holder_pid],
        ).fetchone()
        if waiting and waiting[0]:
            return True
        time.sleep(0.05)
    return False


def stop_process(proc: Any, *, signum: int | None = None, grace: float = 15.0) -> None:
    """Stop a child process (a Celery worker): ``signum`` (default SIGTERM, Celery's warm
    shutdown), then SIGKILL if it has not ended within ``grace`` seconds; reaped either way."""
    import signal
    import subprocess

    proc.send_signal(signal.SIGTERM if signum is None else signum)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
