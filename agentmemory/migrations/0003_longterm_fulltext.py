"""Full-text indexes of facts and messages: GIN expression indexes on PostgreSQL, FTS5 tables
with triggers on SQLite (``agentmemory.recall.fulltext`` searches them). The statements are
written in this module as it runs them. The SQLite triggers index
``agentmemory_search_text(content)``, the function agentmemory registers on every connection
Django opens (``agentmemory.recall.fulltext.register_sqlite_functions``)."""

from django.db import migrations

PG_INSTALL = [
    (
        "CREATE INDEX IF NOT EXISTS agentmemory_fact_fts_idx ON agentmemory_fact USING gin "
        "(to_tsvector('english'::regconfig, COALESCE((content)::text, '')))"
    ),
    (
        "CREATE INDEX IF NOT EXISTS agentmemory_msg_fts_idx ON agentmemory_message USING gin "
        "(to_tsvector('english'::regconfig, COALESCE((content)::text, '')))"
    ),
]

PG_UNINSTALL = [
    "DROP INDEX IF EXISTS agentmemory_fact_fts_idx",
    "DROP INDEX IF EXISTS agentmemory_msg_fts_idx",
]

SQLITE_INSTALL = [
    (
        "CREATE VIRTUAL TABLE IF NOT EXISTS agentmemory_fact_fts USING fts5(content, "
        "content='agentmemory_fact', content_rowid='id', tokenize=\"porter unicode61 "
        "remove_diacritics 2 categories 'L* N* Co M*'\")"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_ai AFTER INSERT ON agentmemory_fact "
        "BEGIN INSERT INTO agentmemory_fact_fts(rowid, content) VALUES (new.id, "
        "agentmemory_search_text(new.content)); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_ad AFTER DELETE ON agentmemory_fact "
        "BEGIN INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts, rowid, content) VALUES "
        "('delete', old.id, agentmemory_search_text(old.content)); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_au AFTER UPDATE OF content ON "
        "agentmemory_fact BEGIN INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts, rowid, "
        "content) VALUES ('delete', old.id, agentmemory_search_text(old.content)); INSERT INTO "
        "agentmemory_fact_fts(rowid, content) VALUES (new.id, "
        "agentmemory_search_text(new.content)); END"
    ),
    "INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts) VALUES ('delete-all')",
    (
        "INSERT INTO agentmemory_fact_fts(rowid, content) SELECT id, "
        "agentmemory_search_text(content) FROM agentmemory_fact"
    ),
    (
        "CREATE VIRTUAL TABLE IF NOT EXISTS agentmemory_message_fts USING fts5(content, "
        "content='agentmemory_message', content_rowid='id', tokenize=\"porter unicode61 "
        "remove_diacritics 2 categories 'L* N* Co M*'\")"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_ai AFTER INSERT ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(rowid, content) VALUES "
        "(new.id, agentmemory_search_text(new.content)); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_ad AFTER DELETE ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(agentmemory_message_fts, "
        "rowid, content) VALUES ('delete', old.id, agentmemory_search_text(old.content)); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_au AFTER UPDATE OF content ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(agentmemory_message_fts, "
        "rowid, content) VALUES ('delete', old.id, agentmemory_search_text(old.content)); INSERT "
        "INTO agentmemory_message_fts(rowid, content) VALUES (new.id, "
        "agentmemory_search_text(new.content)); END"
    ),
    "INSERT INTO agentmemory_message_fts(agentmemory_message_fts) VALUES ('delete-all')",
    (
        "INSERT INTO agentmemory_message_fts(rowid, content) SELECT id, "
        "agentmemory_search_text(content) FROM agentmemory_message"
    ),
]

SQLITE_UNINSTALL = [
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_ai",
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_ad",
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_au",
    "DROP TABLE IF EXISTS agentmemory_fact_fts",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ai",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ad",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_au",
    "DROP TABLE IF EXISTS agentmemory_message_fts",
]


#: the statements of each database, in order (none elsewhere)
INSTALL = {"postgresql": PG_INSTALL, "sqlite": SQLITE_INSTALL}
UNINSTALL = {"postgresql": PG_UNINSTALL, "sqlite": SQLITE_UNINSTALL}


def _run(schema_editor, statements):  # type: ignore[no-untyped-def]
    for sql in statements.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(sql)


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, INSTALL)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, UNINSTALL)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0002_longterm_memory"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
