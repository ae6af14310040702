"""Running the project's migrations to a point inside a test (``transaction=True`` tests)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(targets: list[tuple[str, str]]) -> Any:
    """Migrate the test database to ``targets`` (``[(app_label, migration_name)]``) and
    return the historical apps registry of that state, for ``apps.get_model()``."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    """Migrate the test database forward to every app's last migration again."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
