"""A pool of real Celery workers compacting many due conversations at once, one of them killed
with SIGKILL mid-run (``bench.worker_pool`` at a smaller size): every conversation gets exactly
one summary at its boundary, no lease is taken from a live worker (a tenth of the model calls
outlast the lease, which the worker's keeper renews), and the killed worker's
conversations are compacted by the others once the broker hands its unacknowledged tasks back
(``acks_late``; visibility timeout five leases, at least 20 s). Figures printed with ``-s``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.worker_pool import run_pool
from tests.helpers_concurrency import child_env

pytestmark = [pytest.mark.celery_worker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_three_workers_one_killed_compact_every_conversation_once(
    celery_app, broker_url, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    run = run_pool(
        conversations=60,
        workers=3,
        delay=0.1,
        lease=3,
        env={**child_env(), "CELERY_BROKER_URL": broker_url},
        scratch=tmp_path,
        kill_after=12,
        slow_every=15,  # four calls of 7.5 s, each longer than the 3 s lease
        timeout=180,
    )
    print("\n" + run.line())
    assert run.problems == []
    assert run.killed_pid is not None
    # the killed worker's calls (the one in hand at the kill, at most) were made again by others
    assert run.model_calls == 60 + run.killed_calls
    assert run.killed_calls <= 1
