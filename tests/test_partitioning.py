"""Partitioned history (``agentmemory.contrib.partitioning``): the rebuild both ways, and every
statement of a window build, an append, a search within a conversation and a compaction
pruned to the conversation's partition (EXPLAIN of the statements actually sent)."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib.partitioning import checks
from agentmemory.contrib.partitioning.migrations import _layout as layout
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Fact, Message, MessageEmbedding, ModelCall
from agentmemory.recall import search_messages
from tests.factories import ConversationFactory, turn

PARTITIONS = 4

#: a statement that reads or writes the messages table (not the embedding table), or calls
#: one of the window's server-side functions, which read it, or the one-message append's,
#: which write it
_MESSAGES = re.compile(r'"?agentmemory_message"?(?![a-z_])')
_FUNCTION_CALL = re.compile(r"FROM (agentmemory_(?:window|append_one)_\w+)\((.*)\)\s*$", re.S)
_WINDOW_FUNCTION = "FROM agentmemory_window_"
#: a partition (``agentmemory_message_p3``) or an index of one (``agentmemory_msg_fts_idx_p3``)
_PARTITION = re.compile(r"^agentmemory_\w+_p(\d+)$")


# -- helpers ------------------------------------------------------------------------------


def _partitions_in(node: dict[str, Any]) -> set[int]:
    """Numbers of the partitions a plan node and its children scan or write (tables and
    their indexes)."""
    found = set()
    for key in ("Relation Name", "Index Name"):
        match = _PARTITION.match(node.get(key, ""))
        if match:
            found.add(int(match.group(1)))
    for child in node.get("Plans", ()):
        found |= _partitions_in(child)
    return found


def _explain(cursor: Any, sql: str) -> set[int]:
    cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
    plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # pragma: no cover - psycopg returns json already decoded
        import json

        plan = json.loads(plan)
    return _partitions_in(plan[0]["Plan"])


def _function_plans(cursor: Any, name: str, arguments: str) -> list[set[int]]:
    """The statement a window function runs, prepared with the function's argument types and
    explained with the call's arguments: once as a custom plan, once as the generic plan the
    function's plan cache settles on after five calls (pruned when the executor starts)."""
    cursor.execute("SELECT prosrc, oidvectortypes(proargtypes) FROM pg_proc WHERE proname = %s", [name])
    source, types = cursor.fetchone()
    statement = re.search(r"RETURN QUERY (.*?);\s*END", source, re.S)
    assert statement, source
    cursor.execute(f"PREPARE partition_probe ({types}) AS {statement.group(1)}")
    try:
        found = []
        for mode in ("force_custom_plan", "force_generic_plan"):
            cursor.execute(f"SET LOCAL plan_cache_mode = {mode}")
            found.append(_explain(cursor, f"EXECUTE partition_probe({arguments})"))
        return found
    finally:
        cursor.execute("RESET plan_cache_mode")
        cursor.execute("DEALLOCATE partition_probe")


def _checked(captured: CaptureQueriesContext) -> list[tuple[str, set[int]]]:
    """(statement, partitions of each of its plans) for every statement sent that touches
    messages, in order."""
    out = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            sql = query["sql"]
            call = _FUNCTION_CALL.search(sql)
            if call:
                for found in _function_plans(cursor, call.group(1), call.group(2)):
                    out.append((sql, found))
            elif _MESSAGES.search(sql) and sql.lstrip().upper().startswith(
                ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")
            ):
                out.append((sql, _explain(cursor, sql)))
    return out


def _partition_of(conversation: Conversation) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {layout.TABLE} WHERE conversation_id = %s LIMIT 1",
            [conversation.pk],
        )
        match = _PARTITION.match(cursor.fetchone()[0])
    assert match
    return int(match.group(1))


def assert_one_partition(
    captured: CaptureQueriesContext, conversation: Conversation, *, reads: bool = True
) -> list[str]:
    """Every statement that touches messages scans or writes at most the conversation's own
    partition, and (``reads``) at least one reads it, so that the check is not vacuous;
    returns the statements checked."""
    expected = _partition_of(conversation)
    checked = _checked(captured)
    assert checked, "no statement touched the messages"
    wrong = [(sql[:300], sorted(found)) for sql, found in checked if found - {expected}]
    assert not wrong, f"statements not pruned to partition {expected}: {wrong}"
    if reads:
        assert any(found == {expected} for _sql, found in checked)
    # the window's functions always read messages: their plans, custom and generic, prune
    # (an append's INSERT routes its row when it runs: its plan names no partition)
    assert all(found == {expected} for sql, found in checked if _WINDOW_FUNCTION in sql)
    return [sql for sql, _found in checked]


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def others(db: Any) -> list[Conversation]:
    """Conversations with messages in every partition, so that a statement not pruned has
    somewhere else to look."""
    made = []
    for i in range(4 * PARTITIONS):
        conversation = ConversationFactory()
        PersistentChatHistory(conversation).add_messages(turn(i))
        made.append(conversation)
    return made


@pytest.fixture
def partitioned(others: list[Conversation]) -> layout.LayoutChange:
    """The messages table rebuilt as ``PARTITIONS`` hash partitions (rolled back with the test;
    as it is where the app is installed, as in ``.ci/partitions``)."""
    change = layout.partition_messages(connection, PARTITIONS)
    assert layout.partitions(connection) == PARTITIONS
    return change


@pytest.fixture
def plain(others: list[Conversation]) -> None:
    """The plain messages table (rebuilt from the partitioned one where the app is installed;
    rolled back with the test)."""
    layout.unpartition_messages(connection)
    assert layout.partitions(connection) == 0


@pytest.fixture
def owner(db: Any) -> Any:
    return get_user_model().objects.create_user("partition-owner")


def _conversation(owner: Any, turns: int = 30) -> tuple[Conversation, PersistentChatHistory]:
    conversation = ConversationFactory(owner=owner)
    history = PersistentChatHistory(conversation)
    history.add_message(ChatMessage.system("You are a travel agent."))
    for i in range(turns):
        history.add_messages(turn(i, tool=i % 3 == 0, words=30))
    conversation.refresh_from_db()
    return conversation, history


def _forget_window_functions() -> None:
    """Make the next window statement go as text with its probe for the server-side
    functions, as on a new connection (``agentmemory.store.functions``)."""
    from agentmemory.store import functions

    connection.ensure_connection()
    functions._known.pop(connection.connection, None)


# -- the rebuild --------------------------------------------------------------------------


def _schema() -> dict[str, list[Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass ORDER BY conname",
            [layout.TABLE],
        )
        constraints = cursor.fetchall()
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE confrelid = %s::regclass AND contype = 'f' AND conrelid <> confrelid ORDER BY 1, 2",
            [layout.TABLE],
        )
        incoming = cursor.fetchall()
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s ORDER BY 1", [layout.TABLE]
        )
        indexes = cursor.fetchall()
    return {"constraints": constraints, "incoming": incoming, "indexes": indexes}


@pytest.mark.postgres
def test_partitioning_keeps_every_row_and_the_way_back_restores_the_plain_schema(
    plain: None, owner: Any
) -> None:
    conversation, history = _conversation(owner, turns=3)
    source = Message.objects.filter(conversation=conversation).order_by("seq").first()
    assert source is not None
    fact = Fact.objects.create(owner=owner, content="likes aisle seats", source_message=source)
    plain = _schema()
    rows = list(Message.objects.order_by("pk").values_list("pk", "conversation_id", "seq", "content"))

    change = layout.partition_messages(connection, PARTITIONS)

    assert change.partitions == PARTITIONS and change.rows == len(rows)
    assert layout.partitions(connection) == PARTITIONS
    assert list(Message.objects.order_by("pk").values_list("pk", "conversation_id", "seq", "content")) == rows
    partitioned = _schema()
    constraints = dict(partitioned["constraints"])
    assert constraints["agentmemory_message_pkey"] == "PRIMARY KEY (id, conversation_id)"
    assert constraints["agentmemory_msg_conv_seq_uniq"] == "UNIQUE (conversation_id, seq)"
    # no foreign key can point at a table whose unique constraints all hold conversation_id
    assert partitioned["incoming"] == []
    assert len(change.foreign_keys) == len(plain["incoming"]) >= 3
    # the sequence goes on after the copied ids, and the next message lands in its partition
    added = history.add_message(ChatMessage.human("one more"))
    assert added.id is not None and added.id > rows[-1][0]
    assert Message.objects.get(pk=added.id).conversation_id == conversation.pk
    # the same seq twice in one conversation is still refused
    duplicate = r"\(conversation_id, seq\)=\(\d+, 1\) already exists"
    with pytest.raises(IntegrityError, match=duplicate), connection.cursor() as cursor, transaction.atomic():
        cursor.execute(
            f"INSERT INTO {layout.TABLE} (conversation_id, seq, role, content, tool_calls, tool_call_id, "
            "name, token_count, token_counter, metadata, created_at) "
            "VALUES (%s, 1, 'human', 'x', '[]', '', '', 1, 'x', '{}', now())",
            [conversation.pk],
        )

    back = layout.unpartition_messages(connection)

    assert back.partitions == 0 and back.rows == len(rows) + 1
    assert layout.partitions(connection) == 0
    assert _schema() == plain
    fact.refresh_from_db()
    assert fact.source_message_id == source.pk


@pytest.mark.postgres
def test_the_way_back_settles_references_to_messages_deleted_without_the_orm(
    partitioned: layout.LayoutChange, owner: Any
) -> None:
    conversation, _history = _conversation(owner, turns=2)
    message = Message.objects.filter(conversation=conversation).order_by("seq").last()
    assert message is not None
    fact = Fact.objects.create(owner=owner, content="prefers trains", source_message=message)
    embedding = MessageEmbedding.objects.create(message=message, model="m", dimensions=1, vector=b"\0\0\0\0")
    call = ModelCall.objects.create(
        conversation=conversation, message=message, kind="chat", usage_source="provider"
    )
    with connection.cursor() as cursor:  # a raw delete: no ORM to apply on_delete
        cursor.execute(f"DELETE FROM {layout.TABLE} WHERE id = %s", [message.pk])

    layout.unpartition_messages(connection)

    fact.refresh_from_db()
    call.refresh_from_db()
    assert fact.source_message_id is None  # SET_NULL
    assert call.message_id is None  # SET_NULL
    assert not MessageEmbedding.objects.filter(pk=embedding.pk).exists()  # CASCADE


@pytest.mark.postgres
def test_orm_deletes_still_apply_on_delete_without_foreign_keys(
    partitioned: layout.LayoutChange, owner: Any
) -> None:
    conversation, _history = _conversation(owner, turns=2)
    message = Message.objects.filter(conversation=conversation).order_by("seq").last()
    assert message is not None
    fact = Fact.objects.create(owner=owner, content="prefers trains", source_message=message)
    MessageEmbedding.objects.create(message=message, model="m", dimensions=1, vector=b"\0\0\0\0")

    Conversation.objects.filter(pk=conversation.pk).delete()

    fact.refresh_from_db()
    assert fact.source_message_id is None
    assert not MessageEmbedding.objects.filter(message_id=message.pk).exists()
    assert not Message.objects.filter(conversation_id=conversation.pk).exists()


@pytest.mark.postgres
def test_partition_counts_out_of_range_are_refused(plain: None) -> None:
    for bad in (0, 1, 1025, "16", True, None):
        with pytest.raises(layout.PartitioningError, match="AGENTMEMORY_PARTITIONS"):
            layout.partition_messages(connection, bad)  # type: ignore[arg-type]
    assert layout.partitions(connection) == 0


# -- every statement pruned to one partition ----------------------------------------------


@pytest.mark.postgres
def test_window_build_reads_one_partition(partitioned: layout.LayoutChange, owner: Any) -> None:
    conversation, _history = _conversation(owner)
    # the window leaves older messages out (gap report), in both ways the statements are
    # sent: as text (with the probe for the functions), then through the functions
    _forget_window_functions()
    checked = []
    for _round in range(2):
        with CaptureQueriesContext(connection) as captured:
            window = ContextWindowBuilder(conversation).build(max_tokens=1_500)
        assert window.messages and window.messages[0].role == "system"
        assert window.uncovered and window.uncovered.count > 0  # older messages were left out
        checked += assert_one_partition(captured, conversation)
    assert any(_FUNCTION_CALL.search(sql) for sql in checked)
    assert any(_MESSAGES.search(sql) for sql in checked)


@pytest.mark.postgres
def test_appends_write_and_read_one_partition(partitioned: layout.LayoutChange, owner: Any) -> None:
    conversation, history = _conversation(owner, turns=2)
    call = ToolCall(id="call_x", name="lookup", arguments={"q": "seat"})
    for batch in (
        [ChatMessage.human("Which seat do I have?")],
        [ChatMessage.ai(None, [call])],
        [ChatMessage.tool("14C", tool_call_id="call_x", name="lookup"), ChatMessage.ai("You have 14C.")],
    ):
        with CaptureQueriesContext(connection) as captured:
            history.add_messages(batch)
        checked = assert_one_partition(captured, conversation, reads=False)
        # the statement, or the one-message append's function that runs it
        assert any(
            "INSERT INTO agentmemory_message" in sql or "FROM agentmemory_append_one_" in sql
            for sql in checked
        )
    assert Message.objects.filter(conversation=conversation).count() == 1 + 2 * 3 + 4


@pytest.mark.postgres
def test_search_within_a_conversation_reads_one_partition(
    partitioned: layout.LayoutChange, owner: Any
) -> None:
    conversation, _history = _conversation(owner)
    with CaptureQueriesContext(connection) as captured:
        hits = search_messages("question 7", owner=owner, conversation=conversation)
    assert hits and all(hit.conversation_id == conversation.pk for hit in hits)
    assert_one_partition(captured, conversation)


@pytest.mark.postgres
def test_compaction_reads_one_partition(partitioned: layout.LayoutChange, owner: Any) -> None:
    conversation, history = _conversation(owner, turns=12)
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conversation.pk,
        ScriptedChatModel(["The user asked twelve questions."]),
        history,
    )
    assert compactor.needs_compaction()
    with CaptureQueriesContext(connection) as captured:
        summary = compactor.compact()
    assert summary is not None and summary.through_seq > 0
    assert_one_partition(captured, conversation)


# -- refused elsewhere --------------------------------------------------------------------


def test_the_check_refuses_databases_other_than_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    # the secondary database as SQLite (it is on SQLite runs; on PostgreSQL runs it says so)
    monkeypatch.setattr(connections["secondary"], "vendor", "sqlite")
    errors = [error for error in checks.check_partitioning() if error.id == "agentmemory_partitioning.E001"]
    assert any("'secondary' (sqlite)" in error.msg for error in errors)
    assert all("needs PostgreSQL" in error.msg for error in errors)
    expected = {alias for alias in connections if connections[alias].vendor != "postgresql"}
    assert len(errors) == len(expected)


def test_the_check_refuses_a_bad_partition_count() -> None:
    with override_settings(AGENTMEMORY_PARTITIONS=1):
        errors = [error for error in checks.check_partitioning() if error.id.endswith("E002")]
    assert len(errors) == 1 and "from 2 to 1024" in errors[0].msg


@pytest.mark.sqlite
def test_the_rebuild_is_refused_on_sqlite(db: Any) -> None:
    with pytest.raises(layout.PartitioningError, match="needs PostgreSQL"):
        layout.partition_messages(connection, PARTITIONS)
    with pytest.raises(layout.PartitioningError, match="needs PostgreSQL"):
        layout.unpartition_messages(connection)
    migration = importlib.import_module("agentmemory.contrib.partitioning.migrations.0001_partition_messages")
    with pytest.raises(layout.PartitioningError, match="needs PostgreSQL"):
        migration.partition(django_apps, _Editor(connection))


class _Editor:
    def __init__(self, connection: Any) -> None:
        self.connection = connection


@pytest.mark.postgres
def test_the_migration_uses_the_configured_count_and_goes_back(plain: None) -> None:
    migration = importlib.import_module("agentmemory.contrib.partitioning.migrations.0001_partition_messages")
    rows = Message.objects.count()
    with override_settings(AGENTMEMORY_PARTITIONS=3), connection.schema_editor() as editor:
        migration.partition(django_apps, editor)
    assert layout.partitions(connection) == 3
    assert Message.objects.count() == rows
    with override_settings(AGENTMEMORY_PARTITIONS=5), connection.schema_editor() as editor:
        migration.partition(django_apps, editor)  # partitioned already: nothing to do
    assert layout.partitions(connection) == 3
    with connection.schema_editor() as editor:
        migration.unpartition(django_apps, editor)
    assert layout.partitions(connection) == 0
    assert Message.objects.count() == rows
    with (
        override_settings(AGENTMEMORY_PARTITIONS=0),
        connection.schema_editor() as editor,
        pytest.raises(layout.PartitioningError, match="from 2 to 1024"),
    ):
        migration.partition(django_apps, editor)
    assert layout.partitions(connection) == 0


@pytest.mark.postgres
def test_the_way_back_keeps_the_storage_parameters_set_on_each_partitions_index(
    partitioned: layout.LayoutChange,
) -> None:
    """PostgreSQL sets no storage parameter on a partitioned index, so a migration sets each
    partition's (agentmemory's 0031 and 0032); the plain table rebuilt from the partitions takes
    theirs, not the partitioned index's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_partition_tree('agentmemory_msg_fts_idx'::regclass) t "
            "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'ALTER INDEX "{name}" SET (fastupdate = on, gin_pending_list_limit = 128)')
    layout.unpartition_messages(connection)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'agentmemory_msg_fts_idx'")
        (options,) = cursor.fetchone()
    assert sorted(options) == ["fastupdate=on", "gin_pending_list_limit=128"]
