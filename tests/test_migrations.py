"""Migrations: none is missing for the models as they are, and each migration stays what it was
when written (it imports Django, the standard library and third-party libraries, never the
app's live code, whose later changes would change what an old migration does)."""

from __future__ import annotations

import ast
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = sorted((ROOT / "agentmemory").glob("**/migrations/0*.py"))
#: the app's own packages: code a migration must not import (other migrations excepted)
LIVE = ("agentmemory", "project", "tests")


def imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            names.append(f"<relative>.{node.module or ''}")
    return names


def live_imports(path: Path) -> list[str]:
    """The modules of ``path``'s imports that are the app's live code: anything of
    ``agentmemory``, ``project`` or ``tests`` but a migration module (relative imports count:
    they reach the package beside the migration)."""
    return [
        name
        for name in imported_modules(path)
        if name.startswith("<relative>") or (name.split(".")[0] in LIVE and ".migrations." not in f"{name}.")
    ]


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(f"makemigrations would write migrations:\n{out.getvalue()}")


def test_the_rule_tells_live_code_from_libraries(tmp_path: Path) -> None:
    migration = tmp_path / "0001_x.py"
    migration.write_text(
        "import uuid\nimport pgvector.django\nfrom django.db import migrations\n"
        "from agentmemory.migrations import _helpers\n"
        "def forwards(apps, schema_editor):\n    from agentmemory.recall import fulltext\n"
    )
    assert live_imports(migration) == ["agentmemory.recall"]
    assert "uuid" in sys.stdlib_module_names


@pytest.mark.parametrize("path", MIGRATIONS, ids=[str(path.relative_to(ROOT)) for path in MIGRATIONS])
def test_a_migration_imports_no_live_app_code(path: Path) -> None:
    assert live_imports(path) == []
