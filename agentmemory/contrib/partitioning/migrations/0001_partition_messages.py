"""Rebuild ``agentmemory_message`` as ``AGENTMEMORY_PARTITIONS`` hash partitions by
conversation (forward) or as the plain table (backward), with every row: see
``agentmemory.contrib.partitioning.migrations._layout``. Runs in one transaction; writes to messages wait
for it (reads go on). PostgreSQL only."""

from django.apps import apps as global_apps
from django.db import migrations


def partition(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.contrib.partitioning.migrations import _layout as layout

    message = apps.get_model("agentmemory", "Message")
    if not _allowed(schema_editor, message):
        return
    layout.partition_messages(
        schema_editor.connection, layout.check_partitions(layout.configured_partitions())
    )


def unpartition(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.contrib.partitioning.migrations import _layout as layout

    message = apps.get_model("agentmemory", "Message")
    if not _allowed(schema_editor, message):
        return
    layout.unpartition_messages(schema_editor.connection, message_model=message, schema_editor=schema_editor)


def _allowed(schema_editor, model):  # type: ignore[no-untyped-def]
    from django.db import router

    from agentmemory.contrib.partitioning.migrations import _layout as layout

    if not router.allow_migrate_model(schema_editor.connection.alias, model):
        return False
    layout.require_postgresql(schema_editor.connection)
    return True


# Foreign keys to messages must exist before the rebuild (it drops them): the apps that make
# such keys migrate first when they are installed.
_REFERRING = (
    [("agentmemory_pgvector", "0001_initial")]
    if global_apps.is_installed("agentmemory.contrib.pgvector")
    else []
)


class Migration(migrations.Migration):
    dependencies = [("agentmemory", "0025_fulltext_normal_form"), *_REFERRING]

    operations = [migrations.RunPython(partition, unpartition, elidable=False)]
