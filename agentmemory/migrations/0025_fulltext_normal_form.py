"""Full-text indexes of facts and messages hold the content in one normal form
(``agentmemory.recall.text.search_text``: compatibility forms unfolded, diacritics, Hebrew
points and Arabic vowel marks left out), the form queries are made in, and SQLite's tokenizer
keeps combining marks inside words as PostgreSQL's parser does. Words with combining marks
were lost to recall (Indic scripts, Arabic with vowel marks, decomposed "Zu\u0308rich"). Every
stored row is indexed again: on PostgreSQL both tables are rewritten once (the stored
``search_vector`` columns, computed by ``agentmemory_tsvector`` in the normal form, on a
UTF-8 database only: the only encoding ``normalize`` works in), on SQLite the FTS5 tables are
made again and every row is indexed anew through ``agentmemory_search_text``, the function
agentmemory registers on every connection Django opens. The statements are written in this
module as it runs them; going back indexes the content as stored, as migration 0017 left it."""

from django.db import migrations

PG_INSTALL = [
    (
        "CREATE OR REPLACE FUNCTION agentmemory_tsvector(body text) RETURNS tsvector LANGUAGE "
        "plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$ BEGIN RETURN "
        "to_tsvector('english'::regconfig, CASE WHEN COALESCE(body, '') ~ '^[[:ascii:]]*$' THEN "
        "COALESCE(body, '') ELSE normalize(regexp_replace(normalize(COALESCE(body, ''), NFKD), "
        "'[\\u0300-\\u036f\\u0591-\\u05bd\\u05bf\\u05c1-\\u05c2\\u05c4-\\u05c5\\u05c7\\u0610-\\u061a\\u0640\\u064b-\\u065f\\u0670\\u06d6-\\u06dc\\u06df-\\u06e4\\u06e7-\\u06e8\\u06ea-\\u06ed\\u08d3-\\u08e1\\u08e3-\\u08ff\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]',"
        " '', 'g'), NFC) END); EXCEPTION WHEN program_limit_exceeded THEN RETURN "
        "to_tsvector('english'::regconfig, CASE WHEN left(body, 100000) ~ '^[[:ascii:]]*$' THEN "
        "left(body, 100000) ELSE normalize(regexp_replace(normalize(left(body, 100000), NFKD), "
        "'[\\u0300-\\u036f\\u0591-\\u05bd\\u05bf\\u05c1-\\u05c2\\u05c4-\\u05c5\\u05c7\\u0610-\\u061a\\u0640\\u064b-\\u065f\\u0670\\u06d6-\\u06dc\\u06df-\\u06e4\\u06e7-\\u06e8\\u06ea-\\u06ed\\u08d3-\\u08e1\\u08e3-\\u08ff\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]',"
        " '', 'g'), NFC) END); END $$"
    ),
    "DROP INDEX IF EXISTS agentmemory_fact_fts_idx",
    "ALTER TABLE agentmemory_fact DROP COLUMN IF EXISTS search_vector",
    (
        "ALTER TABLE agentmemory_fact ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
        "(agentmemory_tsvector((content)::text)) STORED"
    ),
    (
        "CREATE INDEX agentmemory_fact_fts_idx ON agentmemory_fact USING gin (search_vector) WITH"
        " (fastupdate = off)"
    ),
    "DROP INDEX IF EXISTS agentmemory_msg_fts_idx",
    "ALTER TABLE agentmemory_message DROP COLUMN IF EXISTS search_vector",
    (
        "ALTER TABLE agentmemory_message ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
        "(agentmemory_tsvector((content)::text)) STORED"
    ),
    "CREATE INDEX agentmemory_msg_fts_idx ON agentmemory_message USING gin (search_vector)",
]

PG_UNINSTALL = [
    (
        "CREATE OR REPLACE FUNCTION agentmemory_tsvector(body text) RETURNS tsvector LANGUAGE "
        "plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$ BEGIN RETURN "
        "to_tsvector('english'::regconfig, COALESCE(body, '')); EXCEPTION WHEN "
        "program_limit_exceeded THEN RETURN to_tsvector('english'::regconfig, left(body, "
        "100000)); END $$"
    ),
    "DROP INDEX IF EXISTS agentmemory_fact_fts_idx",
    "ALTER TABLE agentmemory_fact DROP COLUMN IF EXISTS search_vector",
    (
        "ALTER TABLE agentmemory_fact ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
        "(agentmemory_tsvector((content)::text)) STORED"
    ),
    (
        "CREATE INDEX agentmemory_fact_fts_idx ON agentmemory_fact USING gin (search_vector) WITH"
        " (fastupdate = off)"
    ),
    "DROP INDEX IF EXISTS agentmemory_msg_fts_idx",
    "ALTER TABLE agentmemory_message DROP COLUMN IF EXISTS search_vector",
    (
        "ALTER TABLE agentmemory_message ADD COLUMN search_vector tsvector GENERATED ALWAYS AS "
        "(agentmemory_tsvector((content)::text)) STORED"
    ),
    "CREATE INDEX agentmemory_msg_fts_idx ON agentmemory_message USING gin (search_vector)",
]

SQLITE_INSTALL = [
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_ai",
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_ad",
    "DROP TRIGGER IF EXISTS agentmemory_fact_fts_au",
    "DROP TABLE IF EXISTS agentmemory_fact_fts",
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
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ai",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ad",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_au",
    "DROP TABLE IF EXISTS agentmemory_message_fts",
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
    (
        "CREATE VIRTUAL TABLE IF NOT EXISTS agentmemory_fact_fts USING fts5(content, "
        "content='agentmemory_fact', content_rowid='id', tokenize='porter unicode61 "
        "remove_diacritics 2')"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_ai AFTER INSERT ON agentmemory_fact "
        "BEGIN INSERT INTO agentmemory_fact_fts(rowid, content) VALUES (new.id, new.content); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_ad AFTER DELETE ON agentmemory_fact "
        "BEGIN INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts, rowid, content) VALUES "
        "('delete', old.id, old.content); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_fact_fts_au AFTER UPDATE OF content ON "
        "agentmemory_fact BEGIN INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts, rowid, "
        "content) VALUES ('delete', old.id, old.content); INSERT INTO agentmemory_fact_fts(rowid,"
        " content) VALUES (new.id, new.content); END"
    ),
    "INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts) VALUES ('rebuild')",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ai",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_ad",
    "DROP TRIGGER IF EXISTS agentmemory_message_fts_au",
    "DROP TABLE IF EXISTS agentmemory_message_fts",
    (
        "CREATE VIRTUAL TABLE IF NOT EXISTS agentmemory_message_fts USING fts5(content, "
        "content='agentmemory_message', content_rowid='id', tokenize='porter unicode61 "
        "remove_diacritics 2')"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_ai AFTER INSERT ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(rowid, content) VALUES "
        "(new.id, new.content); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_ad AFTER DELETE ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(agentmemory_message_fts, "
        "rowid, content) VALUES ('delete', old.id, old.content); END"
    ),
    (
        "CREATE TRIGGER IF NOT EXISTS agentmemory_message_fts_au AFTER UPDATE OF content ON "
        "agentmemory_message BEGIN INSERT INTO agentmemory_message_fts(agentmemory_message_fts, "
        "rowid, content) VALUES ('delete', old.id, old.content); INSERT INTO "
        "agentmemory_message_fts(rowid, content) VALUES (new.id, new.content); END"
    ),
    "INSERT INTO agentmemory_message_fts(agentmemory_message_fts) VALUES ('rebuild')",
]


#: the statements of each database, in order (none elsewhere)
INSTALL = {"postgresql": PG_INSTALL, "sqlite": SQLITE_INSTALL}
UNINSTALL = {"postgresql": PG_UNINSTALL, "sqlite": SQLITE_UNINSTALL}


def _run(schema_editor, statements):  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_encoding")
            utf8 = cursor.fetchone()[0].upper().replace("-", "") == "UTF8"
        if not utf8:
            return
    for sql in statements.get(connection.vendor, ()):
        schema_editor.execute(sql)


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, INSTALL)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, UNINSTALL)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0024_conversation_summary_window"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
