"""PostgreSQL: a stored ``search_vector`` column with a GIN index on facts and messages
instead of expression indexes, so ranking reads the stored vector (see
``agentmemory.recall.fulltext``); adding the column rewrites both tables once. The statements
are written in this module as it runs them. Nothing changes on other databases."""

from django.db import migrations

PG_INSTALL = [
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
]

PG_UNINSTALL = [
    "ALTER TABLE agentmemory_fact DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE agentmemory_message DROP COLUMN IF EXISTS search_vector",
    (
        "CREATE INDEX IF NOT EXISTS agentmemory_fact_fts_idx ON agentmemory_fact USING gin "
        "(to_tsvector('english'::regconfig, COALESCE((content)::text, '')))"
    ),
    (
        "CREATE INDEX IF NOT EXISTS agentmemory_msg_fts_idx ON agentmemory_message USING gin "
        "(to_tsvector('english'::regconfig, COALESCE((content)::text, '')))"
    ),
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
        ("agentmemory", "0006_message_content_parts"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
