"""PostgreSQL: the GIN index of message text takes new rows through a short pending list
(``fastupdate = on``, ``gin_pending_list_limit = 64``: 64 kB, PostgreSQL's smallest) instead
of writing each of a message's words into the index at once (``fastupdate = off``, migration
0026).

With ``fastupdate = off`` every append inserted each distinct word of the message into the
index's tree on its own: about 33 WAL records and 150 buffers touched per message of the
benchmark's data (540 characters), and after each checkpoint a full-page image of every leaf
page touched for the first time (25 kB of WAL per append on average over the 150 appends
after a ``CHECKPOINT``), about half of what an append costs the server (``EXPLAIN (ANALYZE,
WAL, BUFFERS)`` of the one-statement raw append, 150 appends: 0.37-0.46 ms, 33 records,
3.3-5.1 kB of WAL at the median). With the pending list, a message's entries are appended to
one page (5 records, 1.7 kB, 12 buffers: 0.20-0.27 ms), and once the list holds more than 64
kB the append that finds it so merges it into the tree in one sorted pass (every 40 or so
messages here), or a vacuum does: 4.7 kB of WAL per append on average, merges included.

Migration 0026 turned the list off because every search reads it whole: 2 ms a query word
after a bulk import left 4 MB (PostgreSQL's default limit) waiting. At 64 kB a search reads
at most about eight pending pages: a few microseconds a word (0.009-0.016 ms for a word
found nowhere, empty list and full). Searches find a row in the list as they find it in the
tree.

On the partitioned layout (``agentmemory.contrib.partitioning``) PostgreSQL sets no storage
parameter on a partitioned index: each partition's index is set instead. Going back turns
the list off again and merges what it holds. Nothing on other databases."""

from django.db import migrations

INDEX = "agentmemory_msg_fts_idx"
#: the storage parameters set going forward, and those going back (migration 0026's)
FORWARD = "fastupdate = on, gin_pending_list_limit = 64"
BACKWARD = "fastupdate = off"


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


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in _indexes(schema_editor):
        schema_editor.execute(f'ALTER INDEX "{name}" SET ({BACKWARD})')
        schema_editor.execute(f'ALTER INDEX "{name}" RESET (gin_pending_list_limit)')
        schema_editor.execute(f"SELECT gin_clean_pending_list('\"{name}\"'::regclass)")


class Migration(migrations.Migration):
    dependencies = [
        ("agentmemory", "0030_window_head_conversation_once"),
    ]

    operations = [
        migrations.RunPython(forward, backward, elidable=False),
    ]
