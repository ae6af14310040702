"""The test database for a child process (a management command run as its own process)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from tests.helpers_concurrency import ROOT, database_url


def child_database_url(tmp_path: Path) -> str:
    """A URL of the current test database that a child process can open: on SQLite a file
    copy of the in-memory test database (what the child writes stays in the copy), on
    PostgreSQL the test database itself. Data must be committed (``transaction=True``)."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return database_url()
    target = tmp_path / "child.sqlite3"
    connection.ensure_connection()
    with sqlite3.connect(target) as copy:
        connection.connection.backup(copy)
    copy.close()
    return f"sqlite:///{target}"


def child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment of a child ``manage.py`` on the test database (only what it needs)."""
    return {
        "DATABASE_URL": child_database_url(tmp_path),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "PYTHONPATH": str(ROOT),
        "PATH": os.environ.get("PATH", ""),
        **extra,
    }
