"""PostgreSQL: the GIN index of message text is written on every insert
(``fastupdate = off``, as the fact index already is) and its pending list is emptied.

With ``fastupdate`` on, new entries wait in a pending list that every search reads in full
until a vacuum (or 4 MB of entries) merges it: after a bulk import with autovacuum behind,
that was about 2 ms per query word of every recall. See
``agentmemory.recall.fulltext.install_message_index_without_pending_list``."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.install_message_index_without_pending_list(schema_editor)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.uninstall_message_index_without_pending_list(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0025_fulltext_normal_form"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
