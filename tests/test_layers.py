"""The layers of ``docs/architecture.md`` hold: the storage floor imports only models,
messages and settings; the core never imports an integration; the chat history does not
import recall; the window builder never asks for a compaction (``agentmemory.closing`` does).
Imports inside functions count like those at the top of a module; type-only imports do not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agentmemory"


def imported_modules(path: Path) -> set[str]:
    """Every ``agentmemory`` module ``path`` imports, at any depth, but under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(child) for child in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.update(name for name in names if name.startswith("agentmemory"))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("agentmemory"))
    return found


def modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py")) if (PACKAGE / folder).is_dir() else [PACKAGE / folder]


STORE_MAY_IMPORT = ("agentmemory.models", "agentmemory.messages", "agentmemory.conf", "agentmemory.store")


@pytest.mark.parametrize("path", modules_under("store"), ids=lambda p: p.name)
def test_the_storage_floor_imports_only_models_messages_and_settings(path: Path) -> None:
    outside = {
        name
        for name in imported_modules(path)
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in STORE_MAY_IMPORT)
    }
    assert outside == set()


def test_the_core_never_imports_an_integration() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "contrib" in path.relative_to(PACKAGE).parts:
            continue
        reached = {name for name in imported_modules(path) if name.startswith("agentmemory.contrib")}
        if reached:
            offenders[str(path.relative_to(PACKAGE))] = reached
    assert offenders == {}


def test_the_history_does_not_import_recall_and_the_builder_never_asks_for_a_compaction() -> None:
    history = imported_modules(PACKAGE / "history.py")
    builder = imported_modules(PACKAGE / "context" / "builder.py")
    assert not any(name.startswith("agentmemory.recall") for name in history)
    assert "agentmemory.compaction.request_compaction" not in builder
    assert not any(name.startswith(("agentmemory.tasks", "agentmemory.broker")) for name in builder)
