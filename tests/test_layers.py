"""The layers of ``docs/architecture.md`` hold: no module imports one of a higher layer, no
import circle spans two folders, no module is over 1,000 lines; the storage floor imports only
models, messages and settings; the core never imports an integration (``contrib``,
``compat``), nor one integration another; the chat history does not import recall; the window
builder never asks for a compaction (``agentmemory.closing`` does). Imports inside functions
count like those at the top of a module, and importing ``a.b.c`` counts as importing the
package ``a.b`` too (Python runs its ``__init__`` first); type-only imports do not count."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
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


#: the integration folders: ``contrib/`` (optional apps) and ``compat/`` (other frameworks' classes)
INTEGRATIONS = ("contrib", "compat")


def test_the_core_never_imports_an_integration_nor_one_integration_another() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        own = path.relative_to(PACKAGE).parts[0]
        others = tuple(f"agentmemory.{name}" for name in INTEGRATIONS if name != own)
        reached = {
            name
            for name in imported_modules(path)
            if any(name == other or name.startswith(other + ".") for other in others)
        }
        if reached:
            offenders[str(path.relative_to(PACKAGE))] = reached
    assert offenders == {}


def test_the_history_does_not_import_recall_and_the_builder_never_asks_for_a_compaction() -> None:
    history = imported_modules(PACKAGE / "history.py")
    builder = imported_modules(PACKAGE / "context" / "builder.py")
    assert not any(name.startswith("agentmemory.recall") for name in history)
    assert "agentmemory.compaction.request_compaction" not in builder
    assert not any(name.startswith(("agentmemory.tasks", "agentmemory.broker")) for name in builder)


# --------------------------------------------------------------------------- the whole graph

#: the layers of docs/architecture.md, low to high, by module prefix (the longest prefix
#: names a module's layer); services are ordered inside their layer
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "messages",
            "validation",
            "tokens",
            "conf",
            "exceptions",
            "signals",
            "broker",
            "formats",
            "llm",
            "routers",
            "extras",
        ),
    ),
    ("models", ("models", "managers", "migrations")),
    ("store", ("store",)),
    ("records", ("history", "recording", "usage", "agent_registry")),
    ("window and recall", ("context", "recall", "invariants")),
    ("knowledge and the memory block", ("knowledge", "recall.memory")),
    (
        "compaction and upkeep",
        ("compaction", "flush", "calls", "semantic", "tasks", "transfer", "deletion", "retention"),
    ),
    ("agent loop", ("agents", "closing")),
    ("surfaces", ("api", "admin", "management", "replay", "checks", "apps")),
    ("integrations", ("contrib", "compat")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    module_name(path): path
    for path in sorted(PACKAGE.rglob("*.py"))
    if "migrations" not in path.relative_to(PACKAGE).parts
}


def resolve(name: str) -> str | None:
    """The module of ``MODULES`` an imported name lives in (``a.b.c.Name`` -> ``a.b.c``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (any depth but type-only), with the packages whose
    ``__init__`` each import runs."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for imported in imported_modules(path):
            target = resolve(imported)
            while target and target != "agentmemory":
                if target != name and not name.startswith(target + "."):
                    graph[name].add(target)
                target = target.rpartition(".")[0]
    return graph


def layer(module: str) -> int:
    best = (-1, -1)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            full = f"agentmemory.{prefix}"
            if (module == full or module.startswith(full + ".")) and len(full) > best[1]:
                best = (rank, len(full))
    return best[0]


def folder(module: str) -> str:
    """The folder of ``agentmemory/`` a module is in (``agentmemory`` for the top-level ones;
    a sub-folder counts as its folder: ``api/serializers/`` is in ``api``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if MODULES[module].name == "__init__.py" or len(parts) > 2 else parts[0]


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in list(MODULES):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_every_module_has_a_layer() -> None:
    assert [name for name in MODULES if name != "agentmemory" and layer(name) < 0] == []


def test_no_import_runs_up_a_layer() -> None:
    graph = import_graph()
    upward = sorted(
        f"{source} -> {target} ({LAYERS[layer(source)][0]} -> {LAYERS[layer(target)][0]})"
        for source, targets in graph.items()
        for target in targets
        if source != "agentmemory" and target != "agentmemory" and layer(target) > layer(source)
    )
    assert upward == []


def test_no_import_circle_spans_two_folders() -> None:
    spanning = [sorted(c) for c in circles(import_graph()) if len({folder(m) for m in c}) > 1]
    assert spanning == []


def test_no_module_is_over_1000_lines() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 1000}
    assert long == {}
