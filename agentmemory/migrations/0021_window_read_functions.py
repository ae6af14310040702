"""PostgreSQL: the window's read functions. From this migration to 0026 a ``post_migrate``
receiver of the release installed them after every ``migrate`` (names carrying a hash of
their text); migration 0027 creates them itself. This migration does nothing going forward;
going back past it (``migrate agentmemory zero``) drops every ``agentmemory_window_...``
function in the schemas of the search path, of any version, so that no function is left
behind reading tables that are gone. Nothing on other databases."""

from django.db import migrations

#: every ``agentmemory_window_...`` function in the schemas of the search path
DROP_EVERY_VERSION = r"""
DO $agentmemory$
DECLARE
    stale regprocedure;
BEGIN
    FOR stale IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname LIKE 'agentmemory\_window\_%'
        AND p.pronamespace = ANY(current_schemas(false)::regnamespace[])
    LOOP
        EXECUTE 'DROP FUNCTION ' || stale::text;
    END LOOP;
END
$agentmemory$
"""


def drop_functions(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_EVERY_VERSION, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0020_pinned_run"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, drop_functions, elidable=False),
    ]
