"""Latency of ``DjangoSaver`` beside LangGraph's own savers, operation by operation.

Run from the project root on a scratch PostgreSQL database (its tables are made by ``migrate``
and by ``PostgresSaver.setup()``; the threads written are deleted at the end)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/langgraph_checkpoints.py

The workload is a chat thread as LangGraph writes it: each checkpoint appends two messages to
a ``messages`` channel (a new version of it, so its blob grows) and bumps a ``step`` channel,
with two pending writes. For each saver it prints the median and p95 in milliseconds of
``put``, ``put_writes``, ``get_tuple`` of the latest checkpoint and of an old one, ``list``
of the newest 10 and of the whole thread. ``InMemorySaver`` is the floor (no I/O);
``PostgresSaver`` (``langgraph-checkpoint-postgres``, when installed) is LangGraph's own
PostgreSQL saver on the same database, with one connection in autocommit mode as its
documentation sets it up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


COLUMNS = ("put", "put_writes", "get latest", "get old", "list 10", "list all")


def _thread(saver: Any, thread_id: str, length: int, timings: dict[str, list[float]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    messages: list[Any] = []
    configs = []
    parent: dict[str, Any] | None = None
    versions: dict[str, Any] = {}
    for step in range(length):
        messages = [*messages, HumanMessage(f"question {step}"), AIMessage(f"answer {step} " * 20)]
        checkpoint = empty_checkpoint()
        new = {ch: saver.get_next_version(versions.get(ch), None) for ch in ("messages", "step")}
        versions.update(new)
        checkpoint["channel_versions"] = dict(versions)
        checkpoint["channel_values"] = {"messages": messages, "step": step}
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        metadata = {"source": "loop", "step": step, "parents": {}, "run_id": "bench"}
        start = time.perf_counter()
        parent = saver.put(config, checkpoint, metadata, new)
        timings["put"].append(time.perf_counter() - start)
        start = time.perf_counter()
        saver.put_writes(parent, [("messages", [AIMessage("pending")]), ("step", step + 1)], f"task-{step}")
        timings["put_writes"].append(time.perf_counter() - start)
        configs.append(parent)
    return configs


def measure(name: str, saver: Any, length: int, reads: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {k: [] for k in COLUMNS}
    thread_id = f"bench-{uuid.uuid4().hex[:8]}"
    configs = _thread(saver, thread_id, length, timings)
    latest = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    operations: dict[str, Callable[[], Any]] = {
        "get latest": lambda: saver.get_tuple(latest),
        "get old": lambda: saver.get_tuple(configs[length // 10]),
        "list 10": lambda: list(saver.list(latest, limit=10)),
        "list all": lambda: list(saver.list(latest)),
    }
    for label, operation in operations.items():
        for _ in range(reads if label != "list all" else max(3, reads // 10)):
            start = time.perf_counter()
            operation()
            timings[label].append(time.perf_counter() - start)
    saver.delete_thread(thread_id)
    return timings


def _row(name: str, timings: dict[str, list[float]]) -> str:
    cells = []
    for values in timings.values():
        values = sorted(values)
        p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
        cells.append(f"{statistics.median(values) * 1000:7.2f} / {p95 * 1000:7.2f}")
    return f"{name:<16}" + " ".join(f"{c:>19}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=200, help="checkpoints in the thread")
    parser.add_argument("--reads", type=int, default=50, help="repetitions of each read")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from langgraph.checkpoint.memory import InMemorySaver

    from agentmemory.contrib.langgraph import DjangoSaver

    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor}; thread of {args.length} checkpoints; median / p95 in ms")
    print(f"{'saver':<16}" + " ".join(f"{h:>19}" for h in COLUMNS))
    savers: list[tuple[str, Any]] = [("InMemorySaver", InMemorySaver()), ("DjangoSaver", DjangoSaver())]
    for name, saver in savers:
        print(_row(name, measure(name, saver, args.length, args.reads)), flush=True)
    if connection.vendor == "postgresql":
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError:
            print("PostgresSaver: not installed (pip install langgraph-checkpoint-postgres)")
            return
        s = connection.settings_dict
        dsn = f"postgresql://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
        with PostgresSaver.from_conn_string(dsn) as saver:
            saver.setup()
            print(_row("PostgresSaver", measure("PostgresSaver", saver, args.length, args.reads)), flush=True)


if __name__ == "__main__":
    main()
