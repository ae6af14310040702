"""The benchmark's quick mode (``python -m bench.run --quick``) on the test database: all five
ways of building a context window return the same window, agentmemory builds it in one
query, and compaction prompts stay flat over a LoCoMo replay."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain_community", reason="the bench extra is not installed")
pytest.importorskip("langchain_postgres", reason="the bench extra is not installed")
pytest.importorskip("matplotlib", reason="the bench extra is not installed")

from bench.run import DEFAULT_LOCOMO, parse_args, run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.slow
def test_quick_benchmark_agrees_and_reports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = parse_args(["--quick", "--runs", "3", "--json", str(out_json), "--plot", str(out_png)])
    lines: list[str] = []

    status, summary = run(args, log=lines.append)

    assert status == 0, "\n".join(lines)
    assert sorted(summary["build"]) == ["200", "2000"]
    for row in summary["build"].values():
        assert set(row) == {
            "agentmemory",
            "agentmemory_text",
            "django_naive",
            "langchain_sql",
            "langchain_postgres",
            "lower_bound",
            "lower_bound_prepared",
            "lower_bound_psycopg",
            "agentmemory_report",
            "agentmemory_default",
            "agentmemory_default_prepared",
        }
        windows = {(s["window_messages"], s["first_seq"], s["window_tokens"]) for s in row.values()}
        assert len(windows) == 1, row
        messages, _, tokens = windows.pop()
        assert messages > 10  # a real window, not an empty one that trivially agrees
        assert tokens <= args.budget
        assert all(s["same_window"] and s["n"] == 3 for s in row.values())
    # one statement reads the window; the bench's conversations have no summary and more
    # history than fits, and the gap report finds what the counters cannot say about the
    # stored messages the window leaves out from the same statement's rows
    assert summary["queries_per_build"] == 1
    assert summary["queries_per_report_build"] == 1
    assert summary["appends"]["agentmemory"]["bulk"]["messages"] == 2_000
    appends = summary["appends"]
    for key in (
        "agentmemory",
        "agentmemory_text",
        "raw_sql",
        "raw_sql_prepared",
        "raw_sql_psycopg",
        "django_naive",
        "langchain_postgres",
        "langchain_sql",
    ):
        assert appends[key]["single"]["n"] == 50, key
    assert appends["append_ratio"] == pytest.approx(
        appends["agentmemory"]["single"]["median_ms"] / appends["raw_sql"]["single"]["median_ms"]
    )
    ratios = summary["ratios"]
    assert ratios["append"] == appends["append_ratio"]
    assert set(ratios["builds"]) == {"200", "2000"}
    assert ratios["build_median"] == max(r["median"] for r in ratios["builds"].values())
    report = "\n".join(lines)
    assert f"append {ratios['append']:.2f} of raw (target <= 1.5)" in report
    assert f"build median {ratios['build_median']:.2f} / p95 {ratios['build_p95']:.2f} of raw" in report
    assert f"build with the default gap report median {ratios['report_median']:.2f}" in report
    # beside the targets, the ratios against the same raw statements prepared too
    assert ratios["prepared_append"] == pytest.approx(
        appends["agentmemory"]["single"]["median_ms"] / appends["raw_sql_prepared"]["single"]["median_ms"]
    )
    assert set(ratios["prepared_builds"]) == {"200", "2000"}
    assert f"against the raw statements prepared too: append {ratios['prepared_append']:.2f}" in report
    # the README's default path over the raw bound prepared as psycopg does by default, each
    # line naming its bound, and the append beside the two peers'
    psycopg_raw = appends["raw_sql_psycopg"]["single"]["median_ms"]
    assert ratios["default_append"] == pytest.approx(
        appends["agentmemory_text"]["single"]["median_ms"] / psycopg_raw
    )
    assert ratios["default_prepared_append"] == pytest.approx(
        appends["agentmemory"]["single"]["median_ms"] / psycopg_raw
    )
    assert set(ratios["default_builds"]) == set(ratios["default_prepared_builds"]) == {"200", "2000"}
    assert (
        "default build (gap report, text statements) median over raw prepared (psycopg default): H=200"
        in report
    )
    assert "default build (gap report, text statements) median over raw as text: H=200" in report
    assert (
        "default build with PREPARED_STATEMENTS median over raw prepared (psycopg default): H=200" in report
    )
    assert (
        f"default append over raw prepared (psycopg default): text {ratios['default_append']:.2f}" in report
    )
    assert "langchain-postgres" in report and "naive ORM" in report
    assert set(ratios["text_builds"]) == {"200", "2000"}
    assert f"with statements sent as text (Django's default): append {ratios['text_append']:.2f}" in report
    assert "GC: automatic GC on" in report
    assert json.loads(out_json.read_text())["targets"] == summary["targets"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if DEFAULT_LOCOMO.is_file():  # shared/ ships beside the repository, not in it
        assert summary["compaction"]["compactions"] >= 5
        assert summary["compaction"]["last_to_middle_ratio"] <= 1.25


@pytest.mark.slow
def test_second_run_reuses_the_dataset() -> None:
    first_status, first = run(
        parse_args(["--quick", "--runs", "1", "--skip", "appends,memory,compaction"]), log=print
    )
    lines: list[str] = []
    status, second = run(
        parse_args(["--quick", "--runs", "1", "--skip", "appends,memory,compaction"]), log=lines.append
    )
    assert first_status == status == 0
    assert any("reusing dataset" in line for line in lines)
    assert (
        second["build"]["2000"]["agentmemory"]["first_seq"]
        == first["build"]["2000"]["agentmemory"]["first_seq"]
    )


def test_rounds_rotate_so_every_approach_runs_in_every_position():
    from bench.workloads import rotated

    keys = ["a", "b", "c"]
    orders = [rotated(keys, r) for r in range(6)]
    assert orders[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for key in keys:
        # over len(keys) rounds, each key takes each position once
        assert sorted(order.index(key) for order in orders[:3]) == [0, 1, 2]
    assert rotated([], 4) == []
