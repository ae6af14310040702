"""PostgreSQL: the window's read functions. From this migration to 0026 a ``post_migrate``
receiver of the release installed them after every ``migrate`` (names carrying a hash of
their text); migration 0027 creates them itself. This migration does nothing going forward;
going back past it (``migrate agentmemory zero``) drops every window function (the head
statements and the gap probe, of any version) in the schema they are created in (the current
schema), so that no function is left behind reading tables that are gone. Nothing on other databases."""

from django.db import migrations

#: the window functions of every release (``agentmemory_window_head_{n,p}{u,c}`` and
#: ``agentmemory_window_gap``, with or without a hash suffix) in the current schema: no other
#: function, and none of another schema
DROP_EVERY_VERSION = r"""
DO $agentmemory$
DECLARE
    stale regprocedure;
BEGIN
    FOR stale IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname ~ '^agentmemory_window_(head_[np][uc]|gap)(_[0-9a-f]{12})?$'
        AND p.pronamespace = current_schema()::regnamespace
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
