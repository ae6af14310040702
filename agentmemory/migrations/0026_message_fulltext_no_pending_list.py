"""PostgreSQL: the GIN index of message text is written on every insert
(``fastupdate = off``, as the fact index is since migration 0017) and its pending list is
emptied (``gin_clean_pending_list``).

With ``fastupdate`` on, new entries wait in a pending list that every search reads in full
until a vacuum (or 4 MB of entries) merges it: after a bulk import with autovacuum behind,
that was about 2 ms per query word of every recall. Nothing on SQLite."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER INDEX agentmemory_msg_fts_idx SET (fastupdate = off)")
        schema_editor.execute("SELECT gin_clean_pending_list('agentmemory_msg_fts_idx'::regclass)")


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER INDEX agentmemory_msg_fts_idx SET (fastupdate = on)")


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0025_fulltext_normal_form"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
