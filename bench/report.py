"""Tables, target checks, JSON and the PNG plot of a benchmark run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from bench.approaches import APPROACHES, LOWER_BOUND
from bench.workloads import BuildResult, summarize

LABELS = {a.key: a.label for a in APPROACHES}
SHORT = {
    "agentmemory": "agentmemory",
    "django_naive": "Django naive",
    "langchain_sql": "LC SQLChatMessageHistory",
    "langchain_postgres": "LC PostgresChatMessageHistory",
    "lower_bound": "lower bound (1 SQL query)",
}


def build_summary(results: Mapping[int, Mapping[str, BuildResult]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per length and approach: timing statistics, ratio to the lower bound, window size."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for size, per in sorted(results.items()):
        lower = statistics.median(per[LOWER_BOUND].timings) if LOWER_BOUND in per else None
        row: dict[str, dict[str, Any]] = {}
        for key, result in per.items():
            stats = summarize(result.timings)
            stats["ratio_to_lower_bound"] = stats["median_ms"] / (lower * 1000) if lower else None
            stats["window_messages"] = len(result.window)
            stats["window_tokens"] = result.window_tokens
            stats["first_seq"] = result.window[0][0] if result.window else None
            stats["same_window"] = result.same_as_reference
            stats["difference"] = result.difference
            stats.update(result.extra)
            row[key] = stats
        out[str(size)] = row
    return out


def check_targets(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and whether it is met."""
    builds = summary["build"]
    sizes = sorted(int(s) for s in builds)
    checks: list[dict[str, Any]] = []

    def add(name: str, value: float | None, limit: str, ok: bool | None) -> None:
        checks.append({"target": name, "measured": value, "limit": limit, "met": ok})

    for size in sizes:
        ratio = builds[str(size)]["agentmemory"]["ratio_to_lower_bound"]
        add(
            f"agentmemory within 2x of the lower bound at H={size:,}",
            ratio,
            "<= 2.0x",
            ratio is not None and ratio <= 2.0,
        )
    if len(sizes) >= 2:
        small, large = builds[str(sizes[0])]["agentmemory"], builds[str(sizes[-1])]["agentmemory"]
        flat = large["median_ms"] / small["median_ms"]
        add(f"flat: H={sizes[-1]:,} over H={sizes[0]:,}", flat, "<= 1.5x", flat <= 1.5)
        for key in ("django_naive", "langchain_sql", "langchain_postgres"):
            if key in builds[str(sizes[-1])]:
                speedup = builds[str(sizes[-1])][key]["median_ms"] / large["median_ms"]
                limit = 100 if sizes[-1] >= 100_000 else None
                add(
                    f"agentmemory faster than {SHORT[key]} at H={sizes[-1]:,}",
                    speedup,
                    ">= 100x" if limit else "(100x applies at H=100,000)",
                    speedup >= 100 if limit else None,
                )
    same = all(v["same_window"] for row in builds.values() for v in row.values())
    add("all approaches return the same window", None, "identical", same)
    appends = summary.get("appends", {}).get("agentmemory")
    if appends:
        bulk = appends["bulk"]["messages_per_second"]
        add("bulk appends", bulk, ">= 5,000 messages/s", bulk >= 5_000)
        single = appends["single"]["median_ms"]
        add("single append median", single, "< 3 ms", single < 3.0)
    compaction = summary.get("compaction")
    if compaction and compaction.get("compactions"):
        ratio = compaction.get("last_to_middle_ratio", 0.0)
        add("compaction prompt flat: last third / middle third (median)", ratio, "<= 1.25", ratio <= 1.25)
    return checks


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}{unit}"
    if value >= 10:
        return f"{value:.1f}{unit}"
    return f"{value:.2f}{unit}"


def format_report(summary: Mapping[str, Any]) -> str:
    """The human-readable report: build table, memory, appends, compaction, targets."""
    lines: list[str] = []
    meta = summary["meta"]
    lines.append(
        f"agentmemory benchmarks: {meta['rows']:,} messages in {meta['conversations']:,} conversations, "
        f"budget {meta['budget']:,} tokens, {meta['runs']} builds per approach after warm-up"
    )
    lines.append(f"PostgreSQL {meta.get('postgres', '?')}, Python {meta['python']}, {meta['cpus']} CPUs")
    lines.append("")
    header = f"{'H':>9}  {'approach':<31} {'median ms':>10} {'p95 ms':>9} {'x lower bound':>14} {'window':>8}"
    lines.append("Context window build")
    lines.append(header)
    lines.append("-" * len(header))
    for size, row in summary["build"].items():
        for key, stats in row.items():
            ratio = stats["ratio_to_lower_bound"]
            window = f"{stats['window_messages']} msg" + ("" if stats["same_window"] else " (!)")
            lines.append(
                f"{int(size):>9,}  {SHORT.get(key, key):<31} {_fmt(stats['median_ms']):>10} "
                f"{_fmt(stats['p95_ms']):>9} {_fmt(ratio, 'x'):>14} {window:>8}"
            )
        lines.append("")
    differences = [
        f"  H={size}: {SHORT.get(k, k)}: {s['difference']}"
        for size, row in summary["build"].items()
        for k, s in row.items()
        if s["difference"]
    ]
    if differences:
        lines.append("Windows that differ from agentmemory's:")
        lines.extend(differences)
        lines.append("")
    if summary.get("queries_per_build") is not None:
        lines.append(f"agentmemory queries per build: {summary['queries_per_build']}")
    memory = summary.get("memory")
    if memory:
        lines.append(f"Peak Python memory of one build at H={memory['size']:,} (tracemalloc):")
        for key, peak in memory["peak_bytes"].items():
            lines.append(f"  {SHORT.get(key, key):<31} {peak / 1024:>12,.0f} KiB")
        lines.append("")
    appends = summary.get("appends")
    if appends:
        lines.append("Appends")
        lines.append(
            f"  {'store':<31} {'single median ms':>17} {'single p95 ms':>14} {'bulk messages/s':>16}"
        )
        for key, stats in appends.items():
            lines.append(
                f"  {SHORT.get(key, key):<31} {_fmt(stats['single']['median_ms']):>17} "
                f"{_fmt(stats['single']['p95_ms']):>14} {stats['bulk']['messages_per_second']:>16,.0f}"
            )
        lines.append("")
    compaction = summary.get("compaction")
    if compaction and compaction.get("compactions"):
        lines.append(
            f"Compaction replay ({compaction['conversations']} LoCoMo conversations, "
            f"{compaction['compactions']} "
            f"compactions, {compaction['summarizer']})"
        )
        c = compaction
        lines.append(
            f"  prompt tokens per compaction: median {_fmt(c['prompt_median'])}, max {_fmt(c['prompt_max'])}"
        )
        lines.append(
            f"  by third of each conversation: {_fmt(c['first_third_median'])}, "
            f"{_fmt(c['middle_third_median'])}, {_fmt(c['last_third_median'])} "
            f"(last / middle {_fmt(c['last_to_middle_ratio'])})"
        )
        if c.get("slope_per_1000_tokens") is not None:
            lines.append(
                f"  second halves: {c['slope_per_1000_tokens']:+.2f} prompt tokens per 1,000 tokens of "
                f"conversation, {c['second_half_growth']:+.1%} over the half"
            )
        lines.append("")
    lines.append("Targets")
    for check in summary["targets"]:
        mark = {True: "met   ", False: "MISSED", None: "n/a   "}[check["met"]]
        measured = "" if check["measured"] is None else _fmt(check["measured"])
        lines.append(f"  [{mark}] {check['target']}: {measured} ({check['limit']})")
    return "\n".join(lines)


def plot(summary: Mapping[str, Any], path: str) -> None:
    """Build latency against H (log-log, median with p95 whiskers) for every approach and,
    when the replay ran, each compaction's prompt size against the conversation's length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compaction = summary.get("compaction") or {}
    panels = 2 if compaction.get("records") else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.8), squeeze=False)
    ax = axes[0][0]
    sizes = [int(s) for s in summary["build"]]
    markers = dict(zip(SHORT, ("o", "s", "^", "v", "D"), strict=False))
    for key in SHORT:
        points = [(s, summary["build"][str(s)][key]) for s in sizes if key in summary["build"][str(s)]]
        if not points:
            continue
        xs = [p[0] for p in points]
        medians = [p[1]["median_ms"] for p in points]
        upper = [p[1]["p95_ms"] - p[1]["median_ms"] for p in points]
        ax.errorbar(
            xs, medians, yerr=[[0] * len(xs), upper], marker=markers[key], capsize=3, label=SHORT[key]
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("messages in the conversation (H)")
    ax.set_ylabel("build latency, ms (median, whisker to p95)")
    ax.set_title(f"Context window of {summary['meta']['budget']:,} tokens")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if panels == 2:
        ax2 = axes[0][1]
        records = compaction["records"]
        for conv in sorted({r["conversation"] for r in records}):
            rows = [r for r in records if r["conversation"] == conv]
            ax2.plot(
                [r["messages"] for r in rows],
                [r["prompt_tokens"] for r in rows],
                marker=".",
                label=f"#{conv + 1}",
            )
        ax2.set_xlabel("messages in the conversation at compaction")
        ax2.set_ylabel("prompt tokens of the compaction")
        ax2.set_title("Compaction prompt size (LoCoMo replay)")
        ax2.set_ylim(bottom=0)
        ax2.grid(True, alpha=0.3)
        ax2.legend(fontsize=7, title="conversation", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
