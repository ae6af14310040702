"""The full-text index of ``StoreItem.content``, made the way agentmemory indexes facts and
messages (``agentmemory.recall.fulltext``), so that its ``FullTextBackend`` ranks store
items too, on the same normal form of text (``agentmemory.recall.text.search_text``):

- PostgreSQL: a stored ``search_vector`` column computed by ``agentmemory_tsvector`` (the
  function of agentmemory's migrations 0017 and 0025), with a GIN index;
- SQLite: an FTS5 table kept in step by triggers that index ``agentmemory_search_text`` of the
  content (the function agentmemory registers on every connection Django opens), with the
  tokenizer of the fact and message indexes (Porter stemming, combining marks kept in words);
- other databases: a word match over ``content`` (correct, not indexed).

A later migration that rebuilds the table on SQLite (most ``AlterField``) drops the triggers:
it must run ``install`` again.
"""

from __future__ import annotations

from typing import Any

from agentmemory.recall.fulltext import SQLITE_SEARCH_TEXT

TABLE = "agentmemory_langgraph_storeitem"
FTS = f"{TABLE}_fts"
PG_INDEX = "agentmemory_lg_store_fts_idx"
#: the tokenizer of agentmemory's fact and message indexes (migration 0025)
TOKENIZER = "\"porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'\""


def _sqlite_statements() -> list[str]:
    new, old = f"{SQLITE_SEARCH_TEXT}(new.content)", f"{SQLITE_SEARCH_TEXT}(old.content)"
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS} USING fts5(content, content='{TABLE}', "
        f"content_rowid='id', tokenize={TOKENIZER})",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ai AFTER INSERT ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}(rowid, content) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_ad AFTER DELETE ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, {old}); END",
        f"CREATE TRIGGER IF NOT EXISTS {FTS}_au AFTER UPDATE OF content ON {TABLE} BEGIN "
        f"INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, {old}); "
        f"INSERT INTO {FTS}(rowid, content) VALUES (new.id, {new}); END",
        # index what the table holds already, in the normal form (FTS5's 'rebuild' would
        # index the content as stored)
        f"INSERT INTO {FTS}({FTS}) VALUES ('delete-all')",
        f"INSERT INTO {FTS}(rowid, content) SELECT id, {SQLITE_SEARCH_TEXT}(content) FROM {TABLE}",
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
