"""PostgreSQL: the GIN index of message text is written on every insert again
(``fastupdate = off``, as migration 0026 set it), undoing migration 0031's 64 kB pending list.

The list halved an append's server time (0031's docstring), but an append's time is the
commit's flush: the benchmark's appends took the same 3.9-4.4 ms either way. What the list
did change is the memory block's recall over a user's history: with it, 100,000 messages
stored then recalled 200 times (``python -m bench.memory_in_context latency``, fresh
databases, the two settings alternated three times on a nearly idle machine) gave p50
27.1-29.3 ms and p95 37.2-40.0 ms, without it 21.2-26.5 ms and 28.2-35.1 ms. Recall is what a
turn waits for, so the index is written on insert. On the partitioned layout
(``agentmemory.contrib.partitioning``) each partition's index is set. Going back restores
the list. Nothing on other databases."""

from django.db import migrations

INDEX = "agentmemory_msg_fts_idx"
#: the storage parameters set going forward (0026's), and those going back (0031's)
FORWARD = "fastupdate = off"
BACKWARD = "fastupdate = on, gin_pending_list_limit = 64"


def _indexes(schema_editor):  # type: ignore[no-untyped-def]
    """The index itself, or each partition's index when it is a partitioned one."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [INDEX])
        row = cursor.fetchone()
        if row is None:
            return []
        if row[0] != "I":
            return [INDEX]
        cursor.execute(
            "SELECT c.relname FROM pg_partition_tree(%s::regclass) t JOIN pg_class c ON c.oid = t.relid "
            "WHERE t.isleaf ORDER BY c.relname",
            [INDEX],
        )
        return [name for (name,) in cursor.fetchall()]


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in _indexes(schema_editor):
        schema_editor.execute(f'ALTER INDEX "{name}" SET ({FORWARD})')
        schema_editor.execute(f'ALTER INDEX "{name}" RESET (gin_pending_list_limit)')
        schema_editor.execute(f"SELECT gin_clean_pending_list('\"{name}\"'::regclass)")


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in _indexes(schema_editor):
        schema_editor.execute(f'ALTER INDEX "{name}" SET ({BACKWARD})')


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0031_message_fulltext_short_pending_list"),
    ]

    operations = [
        migrations.RunPython(forward, backward, elidable=False),
    ]
