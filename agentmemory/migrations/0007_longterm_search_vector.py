"""PostgreSQL: a stored ``search_vector`` column with a GIN index on facts and messages
instead of expression indexes, so ranking reads the stored vector (see
``agentmemory.recall.fulltext``). Nothing changes on other databases."""

from django.db import migrations


def install(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.install_stored_vectors(schema_editor)


def uninstall(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.recall import fulltext

    fulltext.uninstall_stored_vectors(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0006_message_content_parts"),
    ]

    operations = [
        migrations.RunPython(install, uninstall, elidable=False),
    ]
