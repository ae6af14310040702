"""The API under many concurrent clients: ``python -m bench.load``.

Starts ``gunicorn`` (``--workers`` sync worker processes, persistent database connections)
serving the example project with ``bench.load_settings``, then ``--clients`` concurrent clients
(asyncio, aiohttp, one token-authenticated user) run for ``--duration`` seconds against
``--conversations`` shared conversations, each request one of:

- ``append``: ``POST /api/conversations/{uuid}/messages/``, one human message with a unique text;
- ``window``: ``GET /api/conversations/{uuid}/context/?max_tokens=2000``;
- ``search``: ``GET /api/search/?q=...&include=messages&k=5``;
- ``plain``: ``GET /plain/{uuid}/``, a plain DRF view doing one indexed read (the yardstick).

Printed: requests per second of the whole run and of each kind, with p50/p95/p99 latency in
milliseconds and each kind's p50 as a ratio of ``plain``'s; every error (any answer other than
the expected 2xx, or a failed connection); then, counted in the database after the run, that
every acknowledged append is stored exactly once, nothing else was stored and each
conversation's seqs run 1..n without a gap; and the resident memory (RSS, MB) of each
gunicorn worker after the warm-up and at the end (with ``--duration 600`` or more, the long
run). Compaction runs inline with the offline summariser (no model, no broker). Exits 1 on an
error, a lost or duplicated message, or a worker whose RSS grew by more than
``--max-rss-growth`` MB.

Needs ``DATABASE_URL`` (PostgreSQL; the schema is migrated) and gunicorn (``pip install
gunicorn``). See docs/operations.md ("Load") for figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid as uuid_lib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = {"append": 4, "window": 3, "search": 2, "plain": 3}
WORDS = ["invoice", "flight", "refund", "password", "delivery", "upgrade", "warranty", "booking"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _workers(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return sorted(int(pid) for pid in children)


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else 0.0


def prepare(conversations: int) -> tuple[str, list[str]]:
    """A user ``load`` with an API token and ``conversations`` conversations holding a system
    prompt and one turn; earlier runs' conversations are deleted. Returns the token and uuids."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation

    user, _ = get_user_model().objects.get_or_create(username="load")
    Conversation.objects.filter(owner=user).delete()
    token, _ = Token.objects.get_or_create(user=user)
    uuids = []
    for i in range(conversations):
        conv = Conversation.objects.create(owner=user, agent_key="load", title=f"load {i}")
        PersistentChatHistory(conv).add_messages(
            [
                ChatMessage.system("You are a support agent."),
                ChatMessage.human("hello"),
                ChatMessage.ai("Hi!"),
            ]
        )
        uuids.append(str(conv.uuid))
    return token.key, uuids


async def client_loop(
    session: Any, base: str, uuids: list[str], deadline: float, rng: random.Random, stats: dict[str, Any]
) -> None:
    kinds = list(WEIGHTS)
    weights = list(WEIGHTS.values())
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        conv = rng.choice(uuids)
        if kind == "append":
            text = (
                f"load-{uuid_lib.uuid4().hex} about the {rng.choice(WORDS)} of order {rng.randrange(10_000)}"
            )
            request = session.post(
                f"{base}/api/conversations/{conv}/messages/", json={"role": "human", "content": text}
            )
            expected = 201
        elif kind == "window":
            request = session.get(f"{base}/api/conversations/{conv}/context/?max_tokens=2000")
            expected = 200
        elif kind == "search":
            request = session.get(f"{base}/api/search/?q={rng.choice(WORDS)}&include=messages&k=5")
            expected = 200
        else:
            request = session.get(f"{base}/plain/{conv}/")
            expected = 200
        started = time.perf_counter()
        try:
            async with request as response:
                await response.read()
                status = response.status
        except Exception as exc:  # a refused or dropped connection is an error of the run
            stats["errors"].append(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        elapsed = (time.perf_counter() - started) * 1000
        if status != expected:
            stats["errors"].append(f"{kind}: HTTP {status}")
            if kind == "append":
                stats["unknown"].append(text)  # may or may not have been stored
            continue
        stats["latency"][kind].append(elapsed)
        if kind == "append":
            stats["acked"].append((conv, text))


async def run_clients(
    base: str, token: str, uuids: list[str], clients: int, duration: float
) -> dict[str, Any]:
    import aiohttp

    stats: dict[str, Any] = {"latency": defaultdict(list), "errors": [], "acked": [], "unknown": []}
    headers = {"Authorization": f"Token {token}"}
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout) as session:
        deadline = time.monotonic() + duration
        started = time.monotonic()
        await asyncio.gather(
            *(client_loop(session, base, uuids, deadline, random.Random(n), stats) for n in range(clients))
        )
        stats["seconds"] = time.monotonic() - started
    return stats


def check_messages(uuids: list[str], acked: list[tuple[str, str]], unknown: list[str]) -> list[str]:
    """Problems found by counting: an acknowledged append missing or stored twice, a stored
    ``load-`` message nobody appended, a seq gap, a ``last_seq`` that disagrees."""
    from django.db.models import Count, Max

    from agentmemory.models import Conversation, Message

    problems = []
    stored = Counter(
        Message.objects.filter(conversation__uuid__in=uuids, content__startswith="load-").values_list(
            "content", flat=True
        )
    )
    expected = Counter(text for _conv, text in acked)
    missing = [t for t in expected if t not in stored]
    doubled = [t for t, n in stored.items() if n > 1]
    extra = [t for t in stored if t not in expected and t not in set(unknown)]
    if missing:
        problems.append(f"{len(missing)} acknowledged appends missing, e.g. {missing[:2]}")
    if doubled:
        problems.append(f"{len(doubled)} messages stored twice, e.g. {doubled[:2]}")
    if extra:
        problems.append(f"{len(extra)} stored messages nobody appended")
    per_conv = Message.objects.filter(conversation__uuid__in=uuids).values("conversation_id")
    for row in per_conv.annotate(n=Count("id"), top=Max("seq")):
        if row["n"] != row["top"]:
            problems.append(
                f"conversation {row['conversation_id']}: {row['n']} messages, seq up to {row['top']}"
            )
    for conv in Conversation.objects.filter(uuid__in=uuids).annotate(n=Count("messages")):
        if conv.last_seq != conv.n:
            problems.append(f"conversation {conv.pk}: last_seq {conv.last_seq}, {conv.n} messages")
    return problems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the start RSS")
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--max-rss-growth", type=float, default=50.0, help="MB a worker may grow by")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.load_settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        parser.error("set DATABASE_URL to a PostgreSQL database")
    call_command("migrate", verbosity=0)
    token, uuids = prepare(args.conversations)
    connection.close()

    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.load_settings",
        "DATABASE_CONN_MAX_AGE": "600",
        "AGENTMEMORY_COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("CELERY_BROKER_URL", None)
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [str(gunicorn), "project.wsgi:application", "--workers", str(args.workers)]
    command += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "120"]
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        warmup = asyncio.run(run_clients(base, token, uuids, args.clients, args.warmup))
        workers = _workers(server.pid)
        rss_start = {pid: _rss_mb(pid) for pid in workers}
        stats = asyncio.run(run_clients(base, token, uuids, args.clients, args.duration))
        rss_end = {pid: _rss_mb(pid) for pid in workers if Path(f"/proc/{pid}").exists()}
        still = _workers(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)

    print(
        f"PostgreSQL {connection.pg_version}; gunicorn {args.workers} sync workers; {args.clients} clients; "
        f"{args.conversations} conversations; {stats['seconds']:.0f} s"
    )
    total = sum(len(v) for v in stats["latency"].values())
    print(f"throughput: {total / stats['seconds']:.0f} requests/s, errors: {len(stats['errors'])}")
    plain_p50 = statistics.median(stats["latency"]["plain"]) if stats["latency"]["plain"] else 0.0
    for kind in WEIGHTS:
        values = stats["latency"][kind]
        if not values:
            continue
        p50 = _percentile(values, 50)
        print(
            f"  {kind:7} {len(values) / stats['seconds']:7.1f}/s  p50 {p50:7.1f} ms  "
            f"p95 {_percentile(values, 95):7.1f} ms  p99 {_percentile(values, 99):7.1f} ms  "
            f"p50/plain {p50 / plain_p50 if plain_p50 else 0:5.2f}x"
        )
    for error, n in Counter(stats["errors"]).most_common(5):
        print(f"  error x{n}: {error}")
    connection.connect()
    acked = warmup["acked"] + stats["acked"]
    problems = check_messages(uuids, acked, warmup["unknown"] + stats["unknown"])
    if warmup["errors"]:
        problems.append(f"{len(warmup['errors'])} errors in the warm-up, e.g. {warmup['errors'][:2]}")
    print(
        f"appends acknowledged (warm-up included): {len(acked)}; counted after the run: "
        + ("each stored exactly once, seqs without a gap" if not problems else "; ".join(problems))
    )
    growth = []
    for pid in workers:
        end = rss_end.get(pid)
        print(
            f"  worker {pid}: RSS {rss_start[pid]:.1f} MB after warm-up, "
            + (f"{end:.1f} MB at the end" if end else "gone")
        )
        if end is not None:
            growth.append(end - rss_start[pid])
    if still != workers:
        problems.append(f"workers replaced during the run: {workers} -> {still}")
    if stats["errors"] or problems or any(g > args.max_rss_growth for g in growth):
        sys.exit(1)


if __name__ == "__main__":
    main()
