"""Full-text indexes of facts and messages: GIN expression indexes on PostgreSQL, FTS5 tables
with triggers on SQLite (see ``agentmemory.recall.fulltext``)."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.install(schema_editor)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.uninstall(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0002_longterm_memory"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
