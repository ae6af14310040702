"""Fact recall at scale: ``python -m bench.recall_scale [--facts 100000] [--users 1] [--queries 200]``.

Stores ``--facts`` long-term facts spread evenly over ``--users`` scratch users: the sentences
of the LoCoMo dialogues, each with a running number so that none is a repeat, one second apart
(the newest last). The first user's facts hold, halfway through, the turns of the first LoCoMo
conversation as they are (each with its ``dia_id`` in the metadata), and the filler comes from
the other conversations. The benchmark then

- times ``KnowledgeMemory(user).recall(question, k=5)`` for LoCoMo questions against the first
  user's facts and reports p50/p95 (milliseconds), the CPU time of this process and of its
  PostgreSQL backend per recall, and, as a measure of how busy the machine is, the p50/p95 of
  a ``SELECT 1`` round trip;
- asks the first conversation's questions (categories 1-4) with ``k=10`` and reports evidence
  recall@5 and @10 among those facts (the share of a question's evidence turns found).

Runs on ``DATABASE_URL``; on PostgreSQL the rows are loaded with ``COPY``. ``--keep`` leaves
the rows for a later run (``--reuse USERNAME``) or for ``EXPLAIN ANALYZE``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.recall import CATEGORIES, DEFAULT_LOCOMO

PREFIX = "bench-scale-"


def turns(sample: dict[str, Any]) -> list[tuple[str, str]]:
    """``(dia_id, "speaker: text")`` of every turn of one LoCoMo sample, in order."""
    conv = sample["conversation"]
    out: list[tuple[str, str]] = []
    n = 1
    while f"session_{n}" in conv:
        out.extend((t["dia_id"], f"{t['speaker']}: {t['text']}") for t in conv[f"session_{n}"])
        n += 1
    return out


def sentences(path: Path) -> tuple[list[str], list[str]]:
    """The filler sentences (every conversation but the first) and the questions of all."""
    data = json.loads(path.read_text())
    texts = [text for sample in data[1:] for _dia, text in turns(sample)]
    questions = [qa["question"] for sample in data for qa in sample["qa"] if qa.get("category") in CATEGORIES]
    return texts, questions


def evidence_questions(path: Path) -> tuple[list[tuple[str, str]], list[tuple[str, set[str]]]]:
    """The first conversation's turns and its questions with their evidence ``dia_id``s."""
    sample = json.loads(path.read_text())[0]
    asked = [
        (qa["question"], set(qa["evidence"]))
        for qa in sample["qa"]
        if qa.get("category") in CATEGORIES and qa.get("evidence")
    ]
    return turns(sample), asked


def fact_rows(
    owner_id: int, filler: list[str], evidence: list[tuple[str, str]], count: int, now: Any
) -> list[Any]:
    """``count`` fact rows of one owner: filler sentences with a running number, with
    ``evidence`` (when given and it fits) in the middle; created one second apart."""
    from agentmemory.knowledge import content_hash

    contents: list[tuple[str, dict[str, str]]] = [
        (f"{filler[i % len(filler)]} ({i})", {}) for i in range(count - (len(evidence) if evidence else 0))
    ]
    if evidence:
        middle = len(contents) // 2
        contents[middle:middle] = [(text, {"dia_id": dia}) for dia, text in evidence]
    start = now - timedelta(seconds=len(contents))
    return [
        (owner_id, content, content_hash(content), meta, start + timedelta(seconds=i))
        for i, (content, meta) in enumerate(contents)
    ]


def populate(
    filler: list[str], evidence: list[tuple[str, str]], facts: int, users: int, log: Any = print
) -> list[Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from agentmemory.models import Fact

    stamp = f"{os.getpid()}-{time.time_ns()}"
    owners = get_user_model().objects.bulk_create(
        [get_user_model()(username=f"{PREFIX}{stamp}-{u}") for u in range(users)]
    )
    if owners[0].pk is None:  # a database that does not return ids from a bulk insert
        owners = list(
            get_user_model().objects.filter(username__startswith=f"{PREFIX}{stamp}-").order_by("pk")
        )
    per_user = facts // users
    with_evidence = per_user >= 2 * len(evidence)
    now = timezone.now()
    started = time.perf_counter()
    for u, owner in enumerate(owners):
        rows = fact_rows(owner.pk, filler, evidence if u == 0 and with_evidence else [], per_user, now)
        if connection.vendor == "postgresql":
            with (
                connection.cursor() as cursor,
                cursor.copy(
                    "COPY agentmemory_fact (uuid, owner_id, agent_key, namespace, content, content_hash, "
                    "category, importance, persistent, metadata, created_at, updated_at, recall_count, "
                    "kind, in_daily_log) "
                    "FROM STDIN"
                ) as copy,
            ):
                for owner_id, content, digest, meta, created in rows:
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            owner_id,
                            "",
                            "",
                            content,
                            digest,
                            "bench",
                            0.5,
                            True,
                            json.dumps(meta),
                            created,
                            created,
                            0,
                            Fact.kind.field.default,
                            True,
                        )
                    )
        else:
            Fact.objects.bulk_create(
                [
                    Fact(
                        owner_id=o,
                        content=c,
                        content_hash=h,
                        metadata=m,
                        category="bench",
                        persistent=True,
                        created_at=t,
                    )
                    for o, c, h, m, t in rows
                ],
                batch_size=5_000,
            )
    log(f"stored {per_user * users} facts for {users} user(s) in {time.perf_counter() - started:.1f}s")
    return owners


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))], 1)


def server_cpu_seconds() -> float | None:
    """CPU seconds used so far by this connection's PostgreSQL backend process, when that
    process runs on this machine and its ``/proc`` entry can be read; else None. The wall
    time of a query on a machine shared with other work says more about the others."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(owner: Any, questions: list[str], queries: int) -> dict[str, Any]:
    from agentmemory.knowledge import KnowledgeMemory

    memory = KnowledgeMemory(owner)
    for question in questions[:5]:  # warm the connection and the caches
        memory.recall(question, k=5)
    latencies = []
    found = 0
    cpu = time.process_time()
    server = server_cpu_seconds()
    for question in questions[:queries]:
        started = time.perf_counter()
        hits = memory.recall(question, k=5)
        latencies.append((time.perf_counter() - started) * 1000)
        found += bool(hits)
    cpu = time.process_time() - cpu
    server_after = server_cpu_seconds()
    count = max(1, len(latencies))
    # the machine's state: a round trip that does nothing, timed the same way
    from django.db import connection

    trips = []
    with connection.cursor() as cursor:
        for _ in range(count):
            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            trips.append((time.perf_counter() - started) * 1000)
    return {
        "queries": len(latencies),
        "answered": found,
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "select1_p50_ms": percentile(trips, 0.5),
        "select1_p95_ms": percentile(trips, 0.95),
        "client_cpu_ms": round(cpu * 1000 / count, 2),
        "server_cpu_ms": round((server_after - server) * 1000 / count, 2)
        if server is not None and server_after is not None
        else None,
    }


def evidence_recall(owner: Any, asked: list[tuple[str, set[str]]]) -> dict[str, float]:
    """Evidence recall@5 and @10 of the first conversation's questions among the facts."""
    from agentmemory.knowledge import KnowledgeMemory

    memory = KnowledgeMemory(owner)
    found: dict[int, list[float]] = {5: [], 10: []}
    for question, evidence in asked:
        ids = [hit.fact.metadata.get("dia_id") for hit in memory.recall(question, k=10)]
        for k in found:
            found[k].append(len(evidence & set(ids[:k])) / len(evidence))
    return {f"recall@{k}": round(statistics.fmean(v), 3) for k, v in found.items() if v}


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
    filler, questions = sentences(Path(args.locomo))
    evidence, asked = evidence_questions(Path(args.locomo))
    if args.reuse:
        owners = [get_user_model().objects.get(username=args.reuse)]
    else:
        owners = populate(filler, evidence, args.facts, args.users)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE agentmemory_fact" if connection.vendor == "postgresql" else "ANALYZE")
    try:
        result = measure(owners[0], questions, args.queries)
        quality = (
            evidence_recall(owners[0], asked)
            if owners[0].agentmemory_facts.filter(metadata__has_key="dia_id").exists()
            else {}
        )
        from agentmemory.models import Fact

        facts = owners[0].agentmemory_facts.count()
        stored = Fact.objects.count()
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"{connection.vendor}: {facts} facts for this user ({stored} in the table), "
            f"recall(k=5) p50={result['p50_ms']} ms p95={result['p95_ms']} ms, "
            f"(SELECT 1: p50={result['select1_p50_ms']} ms p95={result['select1_p95_ms']} ms), "
            f"CPU per recall: client {result['client_cpu_ms']} ms, "
            f"server {result['server_cpu_ms'] if result['server_cpu_ms'] is not None else 'n/a'} ms; "
            f"{result['answered']}/{result['queries']} queries found facts; "
            + (
                f"evidence recall@5={quality['recall@5']} @10={quality['recall@10']} "
                f"({len(asked)} questions); "
                if quality
                else ""
            )
            + f"load average {load}; user {owners[0].username}"
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
