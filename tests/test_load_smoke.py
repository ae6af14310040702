"""A short run of ``bench/load.py`` (gunicorn, concurrent clients, PostgreSQL): no error, every
acknowledged append stored exactly once, seqs without a gap, the workers still the same
processes. The figures of the long run are in docs/operations.md ("Load")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers_concurrency import ROOT, child_env

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_short_load_run_loses_and_duplicates_nothing() -> None:
    env = {**child_env(), "DJANGO_SETTINGS_MODULE": "bench.load_settings"}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.load", "--workers", "2", "--clients", "8", "--duration", "6"),
            *("--warmup", "1", "--conversations", "4", "--max-rss-growth", "200"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "errors: 0" in done.stdout
    assert "each stored exactly once, seqs without a gap" in done.stdout
