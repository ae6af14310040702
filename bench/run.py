"""Run the benchmarks: ``python -m bench.run [--quick] [--json out.json] [--plot out.png]``.

Needs PostgreSQL (``DATABASE_URL=postgres://...``), the example project's settings
(``project.settings``) and the ``bench`` extra (LangChain, SQLAlchemy, matplotlib). See
docs/benchmarks.md for what is measured and how to read the output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo6.json"

QUICK = {
    "sizes": "200,2000",
    "total_rows": 5_000,
    "runs": 10,
    "warmup": 2,
    "singles": 50,
    "bulk": 2_000,
    "batch": 200,
    "locomo_conversations": 1,
    "locomo_messages": 200,
}
FULL = {
    "sizes": "1000,10000,100000",
    "total_rows": 310_000,
    "runs": 30,
    "warmup": 3,
    "singles": 200,
    "bulk": 20_000,
    "batch": 1_000,
    "locomo_conversations": None,
    "locomo_messages": None,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for CI (well under a minute)")
    parser.add_argument("--sizes", help="target conversation lengths H, comma-separated")
    parser.add_argument("--total-rows", type=int, help="messages in all (targets plus other conversations)")
    parser.add_argument("--seed", type=int, default=20240601, help="seed of the generated data")
    parser.add_argument("--budget", type=int, default=10_000, help="context window budget (tokens)")
    parser.add_argument(
        "--runs", type=int, help="timed builds per approach and length (default 30, quick 10)"
    )
    parser.add_argument("--warmup", type=int, help="warm-up builds per approach (slow approaches: 1)")
    parser.add_argument(
        "--slow-runs",
        type=int,
        help="timed builds of approaches over 100 ms a build (default: as --runs); they only show "
        "how far the peers are, the ratios compare agentmemory with the lower bound",
    )
    parser.add_argument("--json", dest="json_path", help="write the results as JSON to this file")
    parser.add_argument("--plot", dest="plot_path", help="draw build latency against H to this PNG file")
    parser.add_argument("--reset", action="store_true", help="drop all benchmark data and generate it again")
    parser.add_argument("--locomo", default=str(DEFAULT_LOCOMO), help="LoCoMo file for the compaction replay")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: appends, memory, compaction",
    )
    parser.add_argument("--check", action="store_true", help="exit with status 3 when a target is missed")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for name in ("sizes", "total_rows", "runs", "warmup"):
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    for name in ("singles", "bulk", "batch", "locomo_conversations", "locomo_messages"):
        setattr(args, name, preset[name])
    args.sizes = tuple(int(s) for s in str(args.sizes).split(",") if s.strip())
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def setup_django() -> None:
    """Configure Django from ``project.settings`` (query logging off), create the database
    if it does not exist yet, and migrate."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("DJANGO_DEBUG", "0")  # DEBUG keeps every query in memory
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import OperationalError, connection
    from django.test.utils import override_settings

    # The benchmark database is reached directly, never through a transaction pooler: the
    # window's statements are prepared, as a deployment without one turns them on.
    override_settings(
        AGENTMEMORY={**getattr(settings, "AGENTMEMORY", {}), "PREPARED_STATEMENTS": True}
    ).enable()

    if connection.vendor != "postgresql":
        raise SystemExit("the benchmarks need PostgreSQL: set DATABASE_URL=postgres://user@host:5432/name")
    try:
        connection.ensure_connection()
    except OperationalError as exc:
        if "does not exist" not in str(exc):
            raise
        _create_database()
    call_command("migrate", verbosity=0, interactive=False)


def _create_database() -> None:
    import psycopg
    from django.db import connection
    from psycopg import sql

    from bench.approaches import psycopg_conninfo

    name = connection.settings_dict["NAME"]
    conninfo = psycopg_conninfo().replace(f"dbname={name}", "dbname=postgres")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    print(f"created database {name}")


def run(args: argparse.Namespace, *, log: Any = print) -> tuple[int, dict[str, Any]]:
    """Run everything ``args`` asks for; returns the exit status and the results.

    Status 1 when an approach returned a different window, 3 when ``--check`` and a target
    was missed, 0 otherwise.
    """
    from django.db import connection

    from bench import data, report, workloads

    started = time.perf_counter()
    spec = data.DatasetSpec(seed=args.seed, sizes=args.sizes, total_rows=args.total_rows)
    log(f"dataset {spec.fingerprint}")
    dataset = data.get_dataset(spec, reset=args.reset, log=log)
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        server = cur.fetchone()[0]

    log(f"context window builds ({args.runs} per approach and length)")
    builds = workloads.time_builds(
        dataset, budget=args.budget, runs=args.runs, warmup=args.warmup, slow_runs=args.slow_runs, log=log
    )
    largest = dataset.targets[max(dataset.targets)]
    summary: dict[str, Any] = {
        "meta": {
            "fingerprint": spec.fingerprint,
            "seed": spec.seed,
            "rows": dataset.rows,
            "conversations": dataset.conversations,
            "dataset_stats": dataset.stats,
            "generated_seconds": round(dataset.seconds, 1),
            "budget": args.budget,
            "runs": args.runs,
            "warmup": args.warmup,
            "slow_runs": args.slow_runs,
            "quick": bool(args.quick),
            "postgres": server,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "gc": workloads.GC_POLICY,
            "commit": _commit(),
        },
        "build": report.build_summary(builds),
        "queries_per_build": workloads.agentmemory_queries(largest, args.budget),
        "queries_per_report_build": workloads.agentmemory_queries(largest, args.budget, "agentmemory_report"),
    }
    if "memory" not in args.skip:
        log(f"peak memory of one build at H={largest.size:,}")
        summary["memory"] = {"size": largest.size, "peak_bytes": workloads.peak_memory(largest, args.budget)}
    if "appends" not in args.skip:
        log("appends")
        summary["appends"] = workloads.time_appends(
            singles=args.singles, bulk_messages=args.bulk, batch=args.batch, seed=args.seed, log=log
        )
    locomo = Path(args.locomo)
    if "compaction" not in args.skip:
        if locomo.is_file():
            log(f"compaction replay of {locomo.name}")
            summary["compaction"] = workloads.replay_compaction(
                locomo,
                limit_conversations=args.locomo_conversations,
                limit_messages=args.locomo_messages,
                log=log,
            )
        else:
            log(f"compaction replay skipped: {locomo} not found")
    summary["ratios"] = report.ratios(summary)
    summary["targets"] = report.check_targets(summary)
    summary["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    log("")
    log(report.format_report(summary))
    log(f"\ntotal {summary['meta']['seconds']:.0f} s")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        log(f"wrote {args.json_path}")
    if args.plot_path:
        report.plot(summary, args.plot_path)
        log(f"wrote {args.plot_path}")
    same = all(stats["same_window"] for row in summary["build"].values() for stats in row.values())
    if not same:
        return 1, summary
    if args.check and any(check["met"] is False for check in summary["targets"]):
        return 3, summary
    return 0, summary


def _commit() -> str | None:
    """The commit the run measured (with ``+dirty`` for uncommitted changes), when in git."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_django()
    status, _ = run(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
