"""Full-text indexes of facts and messages, per database, and the queries that use them.

- PostgreSQL: expression GIN indexes on ``to_tsvector('english', content)``; queries use the
  same expression (Django's ``SearchVector(..., config="english")``) so the planner uses them.
- SQLite: FTS5 tables with external content (``agentmemory_fact_fts``,
  ``agentmemory_message_fts``, Porter stemming) kept in step by triggers, so an insert, an edit
  and a delete (a forget, a cascade from a deleted user or conversation) reach the index in the
  same transaction. A table rebuilt by a later migration loses its triggers; a ``post_migrate``
  receiver puts them back and rebuilds the index (``ensure_sqlite_fulltext``).
- Any other database: a word match over the content (correct, not indexed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import F, QuerySet

from agentmemory.recall.text import query_words

PG_CONFIG = "english"

#: (FTS5 table, content table) pairs on SQLite
SQLITE_TABLES = (
    ("agentmemory_fact_fts", "agentmemory_fact"),
    ("agentmemory_message_fts", "agentmemory_message"),
)


def _sqlite_statements(fts: str, table: str) -> list[str]:
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(content, content='{table}', "
        f"content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, new.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, old.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF content ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, old.content); "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, new.content); END",
    ]


def _pg_statements(concurrently: bool = False) -> list[str]:
    how = "CONCURRENTLY " if concurrently else ""
    return [
        f"CREATE INDEX {how}IF NOT EXISTS agentmemory_fact_fts_idx ON agentmemory_fact "
        f"USING gin (to_tsvector('{PG_CONFIG}'::regconfig, COALESCE((content)::text, '')))",
        f"CREATE INDEX {how}IF NOT EXISTS agentmemory_msg_fts_idx ON agentmemory_message "
        f"USING gin (to_tsvector('{PG_CONFIG}'::regconfig, COALESCE((content)::text, '')))",
    ]


def install(schema_editor: Any) -> None:
    """Create the full-text indexes for the schema editor's database (migration step)."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for sql in _pg_statements():
            schema_editor.execute(sql)
    elif vendor == "sqlite":
        for fts, table in SQLITE_TABLES:
            for sql in _sqlite_statements(fts, table):
                schema_editor.execute(sql)
            schema_editor.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")


def uninstall(schema_editor: Any) -> None:
    """Drop what ``install`` created (migration reversal)."""
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS agentmemory_fact_fts_idx")
        schema_editor.execute("DROP INDEX IF EXISTS agentmemory_msg_fts_idx")
    elif vendor == "sqlite":
        for fts, _table in SQLITE_TABLES:
            for suffix in ("ai", "ad", "au"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            schema_editor.execute(f"DROP TABLE IF EXISTS {fts}")


def ensure_sqlite_fulltext(using: str = "default") -> bool:
    """Put back FTS5 triggers that a table rebuild dropped and rebuild that index; True when
    something was repaired. A no-op on other databases or before the tables exist."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    repaired = False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        names = {row[0] for row in cursor.fetchall()}
        for fts, table in SQLITE_TABLES:
            if fts not in names or table not in names:
                continue
            if {f"{fts}_ai", f"{fts}_ad", f"{fts}_au"} <= names:
                continue
            for sql in _sqlite_statements(fts, table):
                cursor.execute(sql)
            cursor.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
            repaired = True
    return repaired


def rebuild(using: str = "default") -> None:
    """Rebuild the full-text indexes from the stored rows (``rebuild_recall_index`` command)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            ensure_sqlite_fulltext(using)
            for fts, _table in SQLITE_TABLES:
                cursor.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
        elif connection.vendor == "postgresql":
            cursor.execute("REINDEX INDEX agentmemory_fact_fts_idx")
            cursor.execute("REINDEX INDEX agentmemory_msg_fts_idx")


def _fts5_query(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def _pg_query(words: Sequence[str]) -> str:
    return " | ".join(words)


def search(queryset: QuerySet[Any], query: str, limit: int) -> list[tuple[int, float]]:
    """Ids of rows of ``queryset`` (facts or messages, already scoped) whose content matches
    any word of ``query``, best first, with a relevance score (higher is better; comparable
    only within one call). At most ``limit`` rows."""
    words = query_words(query)
    if not words or limit <= 0:
        return []
    vendor = connections[queryset.db].vendor
    if vendor == "postgresql":
        from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

        vector = SearchVector("content", config=PG_CONFIG)
        ts_query = SearchQuery(_pg_query(words), config=PG_CONFIG, search_type="raw")
        rows = (
            queryset.annotate(_fts=vector)
            .filter(_fts=ts_query)
            .annotate(_rank=SearchRank(vector, ts_query, normalization=1))
            .order_by("-_rank", "-pk")
            .values_list("pk", "_rank")[:limit]
        )
        return [(pk, float(rank)) for pk, rank in rows]
    if vendor == "sqlite":
        model = queryset.model
        table = model._meta.db_table
        fts = f"{table}_fts"
        scope_sql, scope_params = queryset.values("pk").query.sql_with_params()
        sql = (
            f"SELECT {fts}.rowid, bm25({fts}) FROM {fts} "
            f"WHERE {fts} MATCH %s AND {fts}.rowid IN ({scope_sql}) "
            f"ORDER BY bm25({fts}), {fts}.rowid DESC LIMIT %s"
        )
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(sql, [_fts5_query(words), *scope_params, limit])
            # bm25() is lower for better matches; negate so that higher is better everywhere
            return [(pk, -float(score)) for pk, score in cursor.fetchall()]
    return _fallback(queryset, words, limit)


def _fallback(queryset: QuerySet[Any], words: Sequence[str], limit: int) -> list[tuple[int, float]]:
    scored: list[tuple[int, float]] = []
    for pk, content in queryset.order_by("-pk").values_list("pk", F("content")).iterator():
        found = set(query_words(content or ""))
        hits = sum(1 for w in words if w in found)
        if hits:
            scored.append((pk, hits / len(words)))
    scored.sort(key=lambda item: (-item[1], -item[0]))
    return scored[:limit]
