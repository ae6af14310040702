"""PostgreSQL: the stored ``search_vector`` columns of facts and messages are computed by
``agentmemory_tsvector(content)``, which indexes the first 100,000 characters of a text whose
whole ``tsvector`` would be over PostgreSQL's 1 MB limit instead of failing the insert
("string is too long for tsvector": a message within ``MAX_MESSAGE_CHARS`` could not be
stored). Both tables are rewritten once. The statements are written in this module as it
runs them; nothing changes on other databases."""

from django.db import migrations

PG_INSTALL = [
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

PG_UNINSTALL = [
    "ALTER TABLE agentmemory_fact DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE agentmemory_message DROP COLUMN IF EXISTS search_vector",
    "DROP INDEX IF EXISTS agentmemory_fact_fts_idx",
    (
        "ALTER TABLE agentmemory_fact ADD COLUMN IF NOT EXISTS search_vector tsvector GENERATED "
        "ALWAYS AS (to_tsvector('english'::regconfig, COALESCE((content)::text, ''))) STORED"
    ),
    ("CREATE INDEX IF NOT EXISTS agentmemory_fact_fts_idx ON agentmemory_fact USING gin (search_vector)"),
    "DROP INDEX IF EXISTS agentmemory_msg_fts_idx",
    (
        "ALTER TABLE agentmemory_message ADD COLUMN IF NOT EXISTS search_vector tsvector "
        "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, COALESCE((content)::text, ''))) "
        "STORED"
    ),
    ("CREATE INDEX IF NOT EXISTS agentmemory_msg_fts_idx ON agentmemory_message USING gin (search_vector)"),
    "ALTER INDEX agentmemory_fact_fts_idx SET (fastupdate = off)",
    "DROP FUNCTION IF EXISTS agentmemory_tsvector(text)",
]


#: the statements of each database, in order (none elsewhere)
INSTALL = {"postgresql": PG_INSTALL}
UNINSTALL = {"postgresql": PG_UNINSTALL}


def _run(schema_editor, statements):  # type: ignore[no-untyped-def]
    for sql in statements.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(sql)


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, INSTALL)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    _run(schema_editor, UNINSTALL)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0016_pinned_seq"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
