"""Drill: PostgreSQL restarts during a stream of appends.

A private PostgreSQL 15 cluster is started for the drill (``initdb`` and ``pg_ctl`` as the
``postgres`` system user, in a temporary directory, on a free port), so that the shared
server other tests use is never restarted. A child process appends to one conversation while
the cluster is restarted (``pg_ctl restart -m fast``). Appends that fail get a database error
(``django.db.utils.OperationalError`` or ``InterfaceError``); every acknowledged message is
stored; seqs stay unique, gapless and in the order the appends were acknowledged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.helpers_concurrency import ROOT

pytestmark = pytest.mark.postgres

BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *args], capture_output=True, text=True, timeout=120, check=True
    )


@pytest.fixture
def private_cluster():  # type: ignore[no-untyped-def]
    """(port, restart): a throwaway cluster; removed at teardown."""
    if not (BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.fail(f"the drill needs PostgreSQL 15's {BIN}/initdb and runuser")
    base = Path(tempfile.mkdtemp(prefix="agentmemory-pg-drill-"))
    shutil.chown(base, "postgres")
    data = base / "data"
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base} -c fsync=off"
    _as_postgres(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"), "-w", "start")
    try:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE drill")

        def restart() -> float:
            started = time.monotonic()
            _as_postgres(
                str(BIN / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(base / "log"),
                "-m",
                "fast",
                "-w",
                "restart",
            )
            return time.monotonic() - started

        yield port, restart
    finally:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(BIN / "pg_ctl"),
                "-D",
                str(data),
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


def test_appends_through_a_postgresql_restart(private_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port, restart = private_cluster
    url = f"postgres://postgres@127.0.0.1:{port}/drill"
    stop = tmp_path / "stop"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("CELERY_BROKER_URL", None)
    errlog = (tmp_path / "appender.err").open("w")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.drill_appender", str(stop)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=errlog,
        text=True,
    )
    events: list[dict] = []

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            events.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while sum("ok" in e for e in events) < 50:
            assert child.poll() is None, (tmp_path / "appender.err").read_text()
            assert time.monotonic() < deadline, "the appender did not start"
            time.sleep(0.05)
        before = sum("ok" in e for e in events)
        downtime = restart()
        while sum("ok" in e for e in events) < before + 50:
            assert child.poll() is None, (tmp_path / "appender.err").read_text()
            assert time.monotonic() < deadline + 60, f"appends did not resume: {events[-5:]}"
            time.sleep(0.05)
    finally:
        stop.touch()
        child.wait(30)
        reader.join(10)
        if child.stdout is not None:
            child.stdout.close()
        errlog.close()

    acknowledged = [(e["ok"], e["content"]) for e in events if "ok" in e]
    errors = [e["error"] for e in events if "error" in e]
    conversation = next(e["conversation"] for e in events if "conversation" in e)
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/drill") as conn:
        stored = conn.execute(
            "SELECT seq, content FROM agentmemory_message WHERE conversation_id = %s ORDER BY seq",
            [conversation],
        ).fetchall()
        last_seq, count = conn.execute(
            "SELECT last_seq, message_count FROM agentmemory_conversation WHERE id = %s", [conversation]
        ).fetchone()
    # every acknowledged message is stored, with the seq it was acknowledged with
    assert set(acknowledged) <= set(stored)
    seqs = [seq for seq, _ in stored]
    assert seqs == list(range(1, len(seqs) + 1))  # unique, gapless, ordered
    assert [seq for seq, _ in acknowledged] == sorted(seq for seq, _ in acknowledged)
    assert (last_seq, count) == (len(seqs), len(seqs))
    # a write that failed was told so with a database error, and was not stored twice
    assert all(
        e.startswith(("django.db.utils.OperationalError", "django.db.utils.InterfaceError")) for e in errors
    ), errors[:5]
    assert len(stored) - len(acknowledged) <= len(errors)
    print(
        f"\npostgresql restart: {len(acknowledged)} appends acknowledged and stored, {len(errors)} failed "
        f"with a database error, restart took {downtime:.1f} s"
    )
