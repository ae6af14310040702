"""Fact recall at scale: ``python -m bench.recall_scale [--facts 100000] [--users 1] [--queries 200]``.

Stores ``--facts`` long-term facts spread over ``--users`` scratch users (the sentences of the
LoCoMo dialogues, each with a running number so that none is a repeat), then times
``KnowledgeMemory(user).recall(question, k=5)`` for LoCoMo questions against the first
user's facts and reports p50/p95 (milliseconds). Runs on ``DATABASE_URL``; ``--keep`` leaves
the rows for a later run (``--reuse``) or for ``EXPLAIN ANALYZE``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.recall import CATEGORIES, DEFAULT_LOCOMO

PREFIX = "bench-scale-"


def sentences(path: Path) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text())
    texts: list[str] = []
    questions: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv:
            texts.extend(f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"])
            n += 1
        questions.extend(qa["question"] for qa in sample["qa"] if qa.get("category") in CATEGORIES)
    return texts, questions


def populate(texts: list[str], facts: int, users: int, log: Any = print) -> list[Any]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from agentmemory.knowledge import content_hash
    from agentmemory.models import Fact

    stamp = f"{os.getpid()}-{time.time_ns()}"
    owners = [get_user_model().objects.create(username=f"{PREFIX}{stamp}-{u}") for u in range(users)]
    per_user = facts // users
    now = timezone.now()
    started = time.perf_counter()
    for owner in owners:
        batch: list[Fact] = []
        for i in range(per_user):
            content = f"{texts[i % len(texts)]} ({i})"
            batch.append(
                Fact(
                    owner=owner,
                    content=content,
                    content_hash=content_hash(content),
                    category="bench",
                    persistent=True,
                    created_at=now,
                )
            )
            if len(batch) == 5_000:
                Fact.objects.bulk_create(batch)
                batch = []
        if batch:
            Fact.objects.bulk_create(batch)
    log(f"stored {per_user * users} facts for {users} user(s) in {time.perf_counter() - started:.1f}s")
    return owners


def measure(owner: Any, questions: list[str], queries: int) -> dict[str, Any]:
    from agentmemory.knowledge import KnowledgeMemory

    memory = KnowledgeMemory(owner)
    memory.recall(questions[0], k=5)  # warm the connection and the caches
    latencies = []
    found = 0
    for question in questions[:queries]:
        started = time.perf_counter()
        hits = memory.recall(question, k=5)
        latencies.append((time.perf_counter() - started) * 1000)
        found += bool(hits)
    latencies.sort()
    return {
        "queries": len(latencies),
        "answered": found,
        "p50_ms": round(latencies[len(latencies) // 2], 1),
        "p95_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_scale", description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=100_000, help="facts in all")
    parser.add_argument("--users", type=int, default=1, help="users they are spread over")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--locomo", default=str(DEFAULT_LOCOMO))
    parser.add_argument("--keep", action="store_true", help="keep the scratch users and facts")
    parser.add_argument("--reuse", help="username of a kept user to measure instead of storing facts")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    texts, questions = sentences(Path(args.locomo))
    if args.reuse:
        owners = [get_user_model().objects.get(username=args.reuse)]
    else:
        owners = populate(texts, args.facts, args.users)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("ANALYZE agentmemory_fact")
    try:
        result = measure(owners[0], questions, args.queries)
        facts = owners[0].agentmemory_facts.count()
        print(
            f"{connection.vendor}: {facts} facts for this user ({args.facts} stored in all), "
            f"recall(k=5) p50={result['p50_ms']} ms p95={result['p95_ms']} ms, "
            f"{result['answered']}/{result['queries']} queries found facts; user {owners[0].username}"
        )
    finally:
        if not args.keep and not args.reuse:
            from agentmemory.deletion import forget_user

            for owner in owners:
                forget_user(owner)
                owner.delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
