"""The recall benchmark's quick mode on the test database (SQLite or PostgreSQL)."""

from __future__ import annotations

import argparse

import pytest

from bench.recall import DEFAULT_LOCOMO, run

pytestmark = pytest.mark.django_db


@pytest.mark.slow
def test_quick_recall_benchmark_finds_the_evidence(shared_data) -> None:  # type: ignore[no-untyped-def]
    args = argparse.Namespace(quick=True, backend=["fulltext"], locomo=str(DEFAULT_LOCOMO))
    lines: list[str] = []
    results = run(args, log=lines.append)
    row = results["backends"]["fulltext"]
    assert row["questions"] == 50
    # the first 50 questions of the first conversation; the full run is in docs/benchmarks.md.
    # Plain BM25 finds 0.55 of the evidence; with the neighbours' scores and the dates named
    # in the questions: 0.598 on SQLite, 0.618 on PostgreSQL when written
    assert row["recall@10"] >= 0.58
    assert row["recall@5"] <= row["recall@10"]
    assert len(lines) == 2


@pytest.mark.slow
def test_quick_recall_benchmark_with_the_local_model(shared_data) -> None:  # type: ignore[no-untyped-def]
    """Every stored turn is embedded by the local model; dense retrieval alone is weaker than
    words on these questions, and fusing both is at least as good as words alone."""
    args = argparse.Namespace(
        quick=True, backend=["fulltext", "embedding", "hybrid"], locomo=str(DEFAULT_LOCOMO)
    )
    lines: list[str] = []
    results = run(args, log=lines.append)
    rows = results["backends"]
    assert any(line.startswith("embedded ") for line in lines)
    assert rows["embedding"]["questions"] == rows["hybrid"]["questions"] == 50
    assert rows["embedding"]["recall@10"] >= 0.35  # 0.357 on both databases when written
    assert rows["hybrid"]["recall@10"] >= rows["fulltext"]["recall@10"]
    assert rows["hybrid"]["recall@10"] >= 0.65  # 0.670 on SQLite, 0.660 on PostgreSQL
