"""The full-text index of ``StoreItem.content``, made the way agentmemory indexes facts and
messages (``agentmemory.recall.fulltext``), so that its ``FullTextBackend`` ranks store
items too: a stored ``search_vector`` column with a GIN index on PostgreSQL (computed by the
``agentmemory_tsvector`` function of agentmemory's migration 0017), an FTS5 table kept in step
by triggers on SQLite (Porter stemming). Other databases rank by a word match over
``content`` (correct, not indexed).

A later migration that rebuilds the table on SQLite (most ``AlterField``) drops the triggers:
it must run ``install`` again.
"""

from __future__ import annotations

from typing import Any

TABLE = "agentmemory_langgraph_storeitem"
FTS = f"{TABLE}_fts"
PG_INDEX = "agentmemory_lg_store_fts_idx"


def _sqlite_statements() -> list[str]:
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS} USING fts5(content, content='{TABLE}', "
        f"content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ai AFTER INSERT ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}(rowid, content) VALUES (new.id, new.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ad AFTER DELETE ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, old.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_au AFTER UPDATE OF content ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, old.content); "
        f"INSERT INTO {FTS}(rowid, content) VALUES (new.id, new.content); END",
        f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",
    ]


def install(apps: Any, schema_editor: Any) -> None:
    """Migration step (``RunPython``): create the index for the schema editor's database."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS search_vector tsvector "
            "GENERATED ALWAYS AS (agentmemory_tsvector((content)::text)) STORED"
        )
        schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON {TABLE} USING gin (search_vector)")
    elif vendor == "sqlite":
        for sql in _sqlite_statements():
            schema_editor.execute(sql)


def uninstall(apps: Any, schema_editor: Any) -> None:
    """Reverse of ``install``."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {PG_INDEX}")
        schema_editor.execute(f"ALTER TABLE {TABLE} DROP COLUMN IF EXISTS search_vector")
    elif vendor == "sqlite":
        for suffix in ("ai", "ad", "au"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {FTS}_{suffix}")
        schema_editor.execute(f"DROP TABLE IF EXISTS {FTS}")
