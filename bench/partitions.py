"""Partitioned history at scale: ``python -m bench.partitions [--messages 10000000]``.

For each size (``--base`` messages, default 100,000, then ``--messages``, default
10,000,000), in a scratch PostgreSQL database (``--database``, default
``agentmemory_bench_partitions``, made from ``DATABASE_URL``'s server and dropped at the end):

1. ``migrate``, then conversations of ``--conversation-size`` messages (default 100: human
   and AI turns of 12-40 words, token counts stored) written directly in SQL
   (``INSERT ... SELECT`` over ``generate_series``, indexes made after the load), counters
   set, ``VACUUM ANALYZE``.
2. Plain table: window builds (``ContextWindowBuilder(conversation).build(max_tokens=...)``,
   the README's call, gap report on, Django's default settings: statements sent as text)
   of randomly chosen conversations, and one-message appends
   (``PersistentChatHistory(conversation).add_message``, each its own transaction) to other
   randomly chosen ones; median and p95 in ms.
3. ``agentmemory.contrib.partitioning.migrations._layout.partition_messages`` with ``--partitions``
   (the opt-in migration's work: the copy's wall time is how long appends wait), then
   ``VACUUM ANALYZE`` and the same builds and appends.
4. Bytes a stored message costs, per layout: heap, TOAST and each index
   (``pg_relation_size`` over every partition), divided by the messages.

Prints a table and the ratios 10M / 100k per layout; ``--json`` writes the figures.
Run it niced on a shared machine: the 10M load and the copy take minutes of CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: words of the generated messages (a support conversation's vocabulary)
WORDS = (
    "booking",
    "flight",
    "seat",
    "refund",
    "change",
    "baggage",
    "upgrade",
    "ticket",
    "passenger",
    "airport",
    "gate",
    "delay",
    "hotel",
    "room",
    "night",
    "breakfast",
    "invoice",
    "payment",
    "card",
    "receipt",
    "address",
    "email",
    "phone",
    "schedule",
    "monday",
    "tuesday",
    "friday",
    "morning",
    "evening",
    "window",
    "aisle",
    "meal",
    "vegetarian",
    "transfer",
    "taxi",
    "train",
    "station",
    "platform",
    "luggage",
    "lost",
    "found",
    "claim",
    "policy",
    "insurance",
    "cancel",
    "confirm",
    "please",
    "thanks",
    "could",
    "would",
    "need",
    "want",
    "help",
    "check",
    "status",
    "number",
    "reference",
    "travel",
    "return",
    "outbound",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.partitions", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000, help="stored messages of the large run")
    parser.add_argument("--base", type=int, default=100_000, help="stored messages of the small run")
    parser.add_argument("--conversation-size", type=int, default=100, help="messages per conversation")
    parser.add_argument("--partitions", type=int, default=16, help="hash partitions (AGENTMEMORY_PARTITIONS)")
    parser.add_argument("--builds", type=int, default=300, help="timed window builds per layout and size")
    parser.add_argument("--appends", type=int, default=300, help="timed appends per layout and size")
    parser.add_argument("--budget", type=int, default=8_000, help="window budget (tokens)")
    parser.add_argument("--database", default="agentmemory_bench_partitions", help="scratch database")
    parser.add_argument(
        "--convert-limit",
        type=int,
        default=1_000_000,
        help="sizes up to this are partitioned by copying the loaded plain table (timed); larger "
        "ones are loaded into an empty partitioned table",
    )
    parser.add_argument("--keep", action="store_true", help="leave the scratch database in place")
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--json", type=Path, help="write the figures here")
    return parser.parse_args(argv)


def setup_django(database: str) -> None:
    """Point Django's default database at ``database`` on ``DATABASE_URL``'s server (made
    when missing) and configure it from ``project.settings`` with query logging off."""
    import dj_database_url

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("bench.partitions needs PostgreSQL: set DATABASE_URL=postgres://user@host:5432/name")
    parsed = dj_database_url.parse(url)
    base = url.rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/{database}"
    os.environ["SECONDARY_DATABASE_URL"] = f"{base}/{database}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.pop("AGENTMEMORY_PARTITIONS", None)
    os.environ.pop("CELERY_BROKER_URL", None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    _admin(parsed, f'DROP DATABASE IF EXISTS "{database}"')
    _admin(parsed, f'CREATE DATABASE "{database}"')
    import django

    django.setup()


def _admin(parsed: dict[str, Any], sql: str) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    parts = {"dbname": "postgres", "user": parsed.get("USER"), "password": parsed.get("PASSWORD")}
    parts["host"] = parsed.get("HOST")
    if parsed.get("PORT"):
        parts["port"] = str(parsed["PORT"])
    with psycopg.connect(make_conninfo(**{k: v for k, v in parts.items() if v}), autocommit=True) as conn:
        conn.execute(sql)


def reset_schema() -> None:
    """An empty, freshly migrated database."""
    from django.core.management import call_command
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    call_command("migrate", verbosity=0, interactive=False)


def load(messages: int, conversation_size: int, seed: int, log: Any) -> int:
    """Store ``messages`` messages in conversations of ``conversation_size`` in SQL; returns
    the number of conversations."""
    from django.db import connection

    from agentmemory.conf import get_token_counter
    from agentmemory.contrib.partitioning.migrations import _layout as layout

    conversations = max(1, messages // conversation_size)
    rng = random.Random(seed)
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(12, 40))).capitalize() + "." for _ in range(997)]
    counter = get_token_counter().id
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute(
            "INSERT INTO agentmemory_conversation (uuid, agent_key, title, metadata, created_at, updated_at, "
            "last_seq, message_count, human_message_count, stored_tokens, has_system_prompt, "
            "pending_tool_calls, compaction_error, compaction_failures) "
            "SELECT gen_random_uuid(), 'bench', '', '{}', now(), now(), 0, 0, 0, 0, false, '[]', '', 0 "
            "FROM generate_series(1, %s)",
            [conversations],
        )
        # indexes and constraints after the load (much faster than row by row)
        constraints = layout._constraints(cursor)
        indexes = layout._indexes(cursor)
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        for name, kind, _definition in constraints:
            if kind not in ("f", "p"):
                cursor.execute(f'ALTER TABLE agentmemory_message DROP CONSTRAINT "{name}"')
        cursor.execute(
            "INSERT INTO agentmemory_message (conversation_id, seq, role, content, tool_calls, tool_call_id, "
            "name, token_count, token_counter, metadata, created_at) "
            "SELECT c.id, s, CASE WHEN mod(s, 2) = 1 THEN 'human' ELSE 'ai' END, t.body, '[]', '', '', "
            "t.tokens, %s, '{}', now() "
            "FROM agentmemory_conversation c CROSS JOIN generate_series(1, %s) s "
            "JOIN unnest(%s::text[]) WITH ORDINALITY AS t0(body, n) "
            "ON t0.n = 1 + mod(c.id * 31 + s * 7, 997) "
            "CROSS JOIN LATERAL (SELECT t0.body, 4 + array_length(string_to_array(t0.body, ' '), 1) * 4 / 3 "
            "AS tokens) t",
            [counter, conversation_size, sentences],
        )
        stored = cursor.rowcount
        took = time.perf_counter() - started
        log(f"  loaded {stored:,} messages in {conversations:,} conversations ({took:.0f} s)")
        for name, kind, definition in constraints:
            if kind not in ("f", "p"):
                cursor.execute(f'ALTER TABLE agentmemory_message ADD CONSTRAINT "{name}" {definition}')
        for _name, definition in indexes:
            cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
        cursor.execute(
            "UPDATE agentmemory_conversation c SET last_seq = m.last, message_count = m.n, "
            "human_message_count = m.humans, stored_tokens = m.tokens FROM ("
            "SELECT conversation_id, max(seq) AS last, count(*) AS n, "
            "count(*) FILTER (WHERE role = 'human') AS humans, sum(token_count) AS tokens "
            "FROM agentmemory_message GROUP BY conversation_id) m WHERE m.conversation_id = c.id"
        )
    log(f"  indexed and counted ({time.perf_counter() - started:.0f} s)")
    vacuum()
    return conversations


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE agentmemory_message")
        cursor.execute("VACUUM ANALYZE agentmemory_conversation")


def summarize(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000,
        "n": len(ordered),
    }


def time_builds_and_appends(conversations: int, args: argparse.Namespace) -> dict[str, Any]:
    """Builds of randomly chosen conversations (one untimed build of each first), then
    appends to other randomly chosen ones."""
    from django.db import connection

    from agentmemory.context import ContextWindowBuilder
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation

    rng = random.Random(args.seed)
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(id), max(id) FROM agentmemory_conversation")
        low, high = cursor.fetchone()
    picked = rng.sample(range(low, high + 1), min(conversations, 100))
    chosen = list(Conversation.objects.filter(pk__in=picked))
    for conversation in chosen:
        ContextWindowBuilder(conversation).build(max_tokens=args.budget)
    builds: list[float] = []
    sizes: list[int] = []
    while len(builds) < args.builds:
        for conversation in chosen:
            t0 = time.perf_counter()
            window = ContextWindowBuilder(conversation).build(max_tokens=args.budget)
            builds.append(time.perf_counter() - t0)
            sizes.append(len(window.messages))
    appends: list[float] = []
    for _ in range(args.appends):
        conversation_id = rng.randint(low, high)
        history = PersistentChatHistory(conversation_id)
        message = ChatMessage.human(" ".join(rng.choices(WORDS, k=rng.randint(8, 30))))
        t0 = time.perf_counter()
        history.add_message(message)
        appends.append(time.perf_counter() - t0)
    return {
        "build": summarize(builds),
        "append": summarize(appends),
        "window_messages": statistics.median(sizes),
    }


def message_bytes() -> dict[str, float]:
    """Bytes per stored message of ``agentmemory_message`` over all its partitions: heap,
    TOAST, each index and the total."""
    from django.db import connection

    leaves = (
        "SELECT coalesce((SELECT array_agg(relid) FROM pg_partition_tree(%s::regclass) WHERE isleaf), "
        "ARRAY[%s::regclass])"
    )
    with connection.cursor() as cursor:
        rows = _rows()
        cursor.execute(
            f"SELECT sum(pg_relation_size(r)), sum(pg_table_size(r) - pg_relation_size(r)) "
            f"FROM unnest(({leaves})) r",
            ["agentmemory_message", "agentmemory_message"],
        )
        heap, toast = cursor.fetchone()
        cursor.execute(
            "SELECT c.relname, i.indexrelid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'agentmemory_message'::regclass ORDER BY c.relname"
        )
        indexes = {}
        for name, oid in cursor.fetchall():
            cursor.execute(f"SELECT sum(pg_relation_size(r)) FROM unnest(({leaves})) r", [oid, oid])
            indexes[name] = int(cursor.fetchone()[0])
    out = {"heap": float(heap) / rows, "toast": float(toast) / rows}
    out.update({name: size / rows for name, size in indexes.items()})
    out["total"] = (heap + toast + sum(indexes.values())) / rows
    return out


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    """At ``--base`` messages the plain table is loaded and then partitioned by the opt-in
    migration's function (its wall time is the copy's); at sizes above
    ``--convert-limit`` the partitioned table is made empty and loaded the same way as the
    plain one (the copy's time grows with the rows: see the smaller size's figure)."""
    from django.db import connection

    from agentmemory.contrib.partitioning.migrations import _layout as layout

    results: dict[str, Any] = {"partitions": args.partitions, "sizes": {}}
    for size in (args.base, args.messages):
        log(f"{size:,} stored messages")
        reset_schema()
        conversations = load(size, args.conversation_size, args.seed, log)
        rows = _rows()
        entry: dict[str, Any] = {"rows": rows}
        entry["plain"] = time_builds_and_appends(conversations, args)
        entry["plain"]["bytes"] = message_bytes()
        log(f"  plain: {_line(entry['plain'])}")
        if size <= args.convert_limit:
            change = layout.partition_messages(connection, args.partitions)
            entry["partition_seconds"] = change.seconds
            entry["partition_rows"] = change.rows
            log(
                f"  partitioned into {args.partitions}: {change.rows:,} rows copied in {change.seconds:.1f} s"
            )
            vacuum()
        else:
            reset_schema()
            layout.partition_messages(connection, args.partitions)
            load(size, args.conversation_size, args.seed, log)
        entry["partitioned"] = time_builds_and_appends(conversations, args)
        entry["partitioned"]["bytes"] = message_bytes()
        log(f"  partitioned: {_line(entry['partitioned'])}")
        results["sizes"][str(size)] = entry
    return results


def _rows() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM agentmemory_message")
        return int(cursor.fetchone()[0])


def _line(figures: dict[str, Any]) -> str:
    b, a = figures["build"], figures["append"]
    return (
        f"build median {b['median_ms']:.2f} ms p95 {b['p95_ms']:.2f} ms; append median "
        f"{a['median_ms']:.2f} ms p95 {a['p95_ms']:.2f} ms; {figures['bytes']['total']:.0f} bytes a message"
    )


def report(results: dict[str, Any], log: Any = print) -> None:
    sizes = list(results["sizes"])
    small, large = results["sizes"][sizes[0]], results["sizes"][sizes[-1]]
    log("")
    log("| layout | stored | build median / p95 ms | append median / p95 ms | bytes a message |")
    log("|---|---|---|---|---|")
    for layout_name in ("plain", "partitioned"):
        for key in sizes:
            f = results["sizes"][key][layout_name]
            build, append = f["build"], f["append"]
            log(
                f"| {layout_name} | {int(key):,} | {build['median_ms']:.2f} / {build['p95_ms']:.2f} | "
                f"{append['median_ms']:.2f} / {append['p95_ms']:.2f} | {f['bytes']['total']:.0f} |"
            )
    for layout_name in ("plain", "partitioned"):
        b = large[layout_name]["build"]["median_ms"] / small[layout_name]["build"]["median_ms"]
        a = large[layout_name]["append"]["median_ms"] / small[layout_name]["append"]["median_ms"]
        log(f"{layout_name}: {int(sizes[-1]):,} / {int(sizes[0]):,} stored: build x{b:.2f}, append x{a:.2f}")
    for key in sizes:
        if "partition_seconds" in results["sizes"][key]:
            entry = results["sizes"][key]
            rows, seconds = entry["partition_rows"], entry["partition_seconds"]
            log(f"partitioning {rows:,} stored messages took {seconds:.1f} s")
        for layout_name in ("plain", "partitioned"):
            parts = results["sizes"][key][layout_name]["bytes"]
            log(f"  bytes a message, {layout_name}: " + ", ".join(f"{k} {v:.0f}" for k, v in parts.items()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_django(args.database)
    try:
        results = run(args)
        report(results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2, default=float))
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            import dj_database_url

            _admin(
                dj_database_url.parse(os.environ["DATABASE_URL"]),
                f'DROP DATABASE IF EXISTS "{args.database}"',
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
