"""The migration a host generates for the HNSW indexes of its embedding model
(``agentmemory.contrib.pgvector.indexes.index_migration``, written out by ``manage.py
pgvector_index_migration``): self-contained, the SQL the backend's query needs, nothing on
other databases, bad input refused. The index itself is checked on PostgreSQL with pgvector
(``tests/test_pgvector.py``, ``.ci/pgvector``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentmemory.contrib.pgvector.indexes import create_index_sql, hnsw_index_name, index_migration
from tests.test_migrations import live_imports


def _module(tmp_path: Path, text: str) -> tuple[Path, Any]:
    path = tmp_path / "0007_agentmemory_hnsw.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("generated_hnsw_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_the_generated_migration_holds_its_sql_and_imports_only_django(tmp_path: Path) -> None:
    path, module = _module(
        tmp_path, index_migration("text-embedding-3-small", 1536, dependencies=[("shop", "0006_orders")])
    )
    assert live_imports(path) == []
    assert [
        create_index_sql("fact", "text-embedding-3-small", 1536),
        create_index_sql("msg", "text-embedding-3-small", 1536),
    ] == module.CREATE
    fact = module.CREATE[0]
    assert fact.startswith(
        f'CREATE INDEX IF NOT EXISTS "{hnsw_index_name("fact", "text-embedding-3-small", 1536)}"'
    )
    assert (
        'ON "agentmemory_pgvector_factvector" USING hnsw ((vector::vector(1536)) vector_cosine_ops)' in fact
    )
    assert fact.endswith("WHERE model = 'text-embedding-3-small' AND vector_dims(vector) = 1536")
    assert [
        f'DROP INDEX IF EXISTS "{hnsw_index_name(kind, "text-embedding-3-small", 1536)}"'
        for kind in ("fact", "msg")
    ] == module.DROP
    assert module.Migration.dependencies == [
        ("agentmemory_pgvector", "0001_initial"),
        ("shop", "0006_orders"),
    ]


def test_the_generated_migration_runs_nothing_on_other_databases(tmp_path: Path) -> None:
    _, module = _module(tmp_path, index_migration("all-MiniLM-L6-v2", 384))
    ran: list[str] = []
    editor = SimpleNamespace(
        connection=SimpleNamespace(vendor="sqlite"), execute=lambda sql, params=(): ran.append(sql)
    )
    module.create_indexes(None, editor)
    module.drop_indexes(None, editor)
    assert ran == []
    editor.connection.vendor = "postgresql"
    module.create_indexes(None, editor)
    module.drop_indexes(None, editor)
    assert ran == [*module.CREATE, *module.DROP]


def test_a_model_name_is_a_quoted_literal_and_bad_input_is_refused() -> None:
    assert "WHERE model = 'o''brien-embed' AND" in create_index_sql("msg", "o'brien-embed", 8)
    for dimensions in (0, 2001):
        with pytest.raises(ValueError, match="1 to 2,000 dimensions"):
            index_migration("m", dimensions)
    for model in ("", "a\x00b"):
        with pytest.raises(ValueError, match="without NUL"):
            create_index_sql("fact", model, 8)
