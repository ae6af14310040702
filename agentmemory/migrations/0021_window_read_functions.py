"""PostgreSQL: the window's read functions (``agentmemory.store.functions``) are installed
after every ``migrate`` by a ``post_migrate`` receiver, from the statements of the installed
version. This migration does nothing going forward; going back past it (``migrate
agentmemory zero``) drops every ``agentmemory_window_...`` function, so that no function is
left behind reading tables that are gone."""

from django.db import migrations


def drop_functions(apps, schema_editor):  # type: ignore[no-untyped-def]
    from agentmemory.store import functions

    functions.uninstall(schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0020_pinned_run"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, drop_functions, elidable=False),
    ]
