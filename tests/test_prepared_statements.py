"""Statements prepared once per connection on PostgreSQL (``agentmemory.db``): the window's
read path and single appends are parsed and planned once, give the same results as text
statements, stay visible to Django's query log, and are not prepared where the settings say
a transaction pooler sits in between."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.test.utils import CaptureQueriesContext

from agentmemory.context import ContextWindowBuilder
from agentmemory.db import prepares_statements, statement_cursor
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _prepared_statements_on(settings):  # type: ignore[no-untyped-def]
    """These tests are about prepared statements: turned on as an operator with no
    transaction pooler in between turns them on."""
    settings.AGENTMEMORY = {**settings.AGENTMEMORY, "PREPARED_STATEMENTS": True}


def _prepared() -> list[str]:
    """The statements this connection has prepared at the protocol level (not SQL PREPARE)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [row[0] for row in cursor.fetchall()]


def _is_head(sql: str) -> bool:
    """The window's head statement: the conversation, summary, pinned prompt and first page."""
    return "UNION ALL" in sql and "LIMIT COALESCE(" in sql


def _conversation() -> Conversation:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.system("You are terse."))
    for i in range(6):
        history.add_message(ChatMessage.human(f"question {i}"))
        history.add_message(ChatMessage.ai(None, [ToolCall(id=f"c{i}", name="look", arguments={"i": i})]))
        history.add_message(ChatMessage.tool(f"result {i}", tool_call_id=f"c{i}"))
        history.add_message(ChatMessage.ai(f"answer {i}"))
    return conv


def _window(conv: Conversation, max_tokens: int = 120) -> list[tuple]:
    window = ContextWindowBuilder(conv.pk).build(max_tokens=max_tokens)
    return [(m.seq, m.role, m.content, m.tool_calls, m.tool_call_id) for m in window.messages]


@pytest.mark.postgres
def test_window_reads_are_prepared_once_and_give_the_same_window(settings) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation()
    settings.AGENTMEMORY = {"PREPARED_STATEMENTS": False}
    as_text = _window(conv)
    assert not [s for s in _prepared() if _is_head(s)]
    settings.AGENTMEMORY = {"PREPARED_STATEMENTS": True}
    windows = [_window(conv) for _ in range(8)]
    assert all(w == as_text for w in windows)
    head = [s for s in _prepared() if _is_head(s)]
    assert len(head) == 1, head  # one statement, prepared on its second run and reused after
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans + custom_plans FROM pg_prepared_statements WHERE statement = %s", [head[0]]
        )
        assert cursor.fetchone()[0] == 7


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_run_once_on_a_connection_is_not_prepared() -> None:
    # Preparing costs a round trip of its own: a web request on a fresh connection
    # (CONN_MAX_AGE = 0) that builds one window would pay it for nothing.
    conv = _conversation()
    connection.close()
    _window(conv)
    assert not [s for s in _prepared() if _is_head(s)]
    _window(conv)
    assert [s for s in _prepared() if _is_head(s)]


@pytest.mark.postgres
def test_single_appends_are_prepared_and_stored_as_before() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.human("weather in Oslo?"))
    history.add_message(ChatMessage.ai(None, [ToolCall(id="w1", name="weather", arguments={"city": "Oslo"})]))
    history.add_message(ChatMessage.tool("sunny", tool_call_id="w1"))
    history.add_message(ChatMessage.ai("Sunny.", metadata={"model": "m"}))
    inserts = [s for s in _prepared() if s.lstrip().startswith("WITH") and "INSERT INTO" in s]
    assert inserts  # the append statements
    stored = list(
        Message.objects.filter(conversation=conv)
        .order_by("seq")
        .values_list("seq", "role", "content", "tool_call_id", "exchange_seq", "metadata")
    )
    assert stored == [
        (1, "human", "weather in Oslo?", "", None, {}),
        (2, "ai", None, "", 2, {}),
        (3, "tool", "sunny", "w1", 2, {}),
        (4, "ai", "Sunny.", "", None, {"model": "m"}),
    ]
    conv.refresh_from_db()
    assert (conv.last_seq, conv.message_count, conv.pending_tool_calls) == (4, 4, {})


@pytest.mark.postgres
def test_prepared_statements_are_in_the_query_log_with_their_values() -> None:
    conv = _conversation()
    _window(conv)
    with CaptureQueriesContext(connection) as queries:
        _window(conv)  # prepared on this second run
    (sql,) = [q["sql"] for q in queries.captured_queries if _is_head(q["sql"])]
    assert "UNION ALL" in sql and f"= {conv.pk}" in sql and "%(" not in sql


@pytest.mark.postgres
@pytest.mark.parametrize(
    "database_settings",
    [{"DISABLE_SERVER_SIDE_CURSORS": True}, {"OPTIONS": {"prepare_threshold": None}}],
    ids=["DISABLE_SERVER_SIDE_CURSORS", "prepare_threshold None"],
)
def test_not_prepared_behind_a_transaction_pooler(monkeypatch, database_settings) -> None:  # type: ignore[no-untyped-def]
    # Django's documentation has PgBouncer's transaction pooling set one of these; a named
    # statement prepared on one server session is unknown on the next.
    for key, value in database_settings.items():
        monkeypatch.setitem(connection.settings_dict, key, value)
    assert not prepares_statements("default")
    before = set(_prepared())
    _window(_conversation())
    assert set(_prepared()) == before


@pytest.mark.postgres
def test_not_prepared_by_default_as_django_leaves_them_off(settings) -> None:  # type: ignore[no-untyped-def]
    # Django opens psycopg 3 connections with prepared statements off "to keep connection
    # poolers working": behind PgBouncer in transaction mode a statement name prepared by
    # one client can name another client's statement on the next server session, which then
    # runs with this client's values (a system prompt stored as a human message). Nothing
    # on the client can tell a pooler is there, so nothing is prepared unless asked.
    settings.AGENTMEMORY = {}
    assert "prepare_threshold" not in connection.settings_dict["OPTIONS"]
    assert not prepares_statements("default")
    conv = _conversation()
    _window(conv)
    assert _prepared() == []


@pytest.mark.postgres
def test_prepared_by_default_where_the_database_options_turn_them_on(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # ``OPTIONS["prepare_threshold"] = <number>``: Django's way to turn psycopg's prepared
    # statements back on, which says no transaction pooler is in the way.
    settings.AGENTMEMORY = {}
    options = {**connection.settings_dict["OPTIONS"], "prepare_threshold": 5}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    assert prepares_statements("default")
    conv = _conversation()
    _window(conv)
    _window(conv)  # prepared on its second run
    assert [s for s in _prepared() if _is_head(s)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_the_server_forgot_is_run_again_as_text() -> None:
    # A pooler that hands the client another server session, or DEALLOCATE run behind
    # psycopg's back: windows are still built, and that connection prepares nothing more.
    conv = _conversation()
    expected = _window(conv)
    assert _window(conv) == expected  # prepared now
    connection.ensure_connection()
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    assert _prepared() == []
    with CaptureQueriesContext(connection) as queries:
        assert _window(conv) == expected
    heads = [q for q in queries.captured_queries if _is_head(q["sql"])]
    assert len(heads) == 1  # the retry is the same statement, logged once
    assert _window(conv) == expected
    assert _prepared() == []
    connection.close()  # a new connection prepares again, from the second run
    assert _window(conv) == expected
    assert _window(conv) == expected
    assert [s for s in _prepared() if _is_head(s)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_column_type_changed_by_another_connection_does_not_break_a_build() -> None:
    # A deploy migrates a column's type while a worker keeps its connection: the worker's
    # cached plan would return another row type ("cached plan must not change result type").
    conv = _conversation()
    expected = _window(conv)
    assert _window(conv) == expected  # prepared now
    table = Message._meta.db_table
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN token_count TYPE bigint")
        assert _window(conv) == expected
        assert _window(conv) == expected
    finally:
        with other.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN token_count TYPE integer")
        other.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_forgotten_statement_inside_a_transaction_raises_and_the_next_one_works() -> None:
    conv = _conversation()
    expected = _window(conv)
    assert _window(conv) == expected  # prepared now
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    with pytest.raises(ProgrammingError, match="does not exist"), transaction.atomic():
        _window(conv)
    with transaction.atomic():
        assert _window(conv) == expected


@pytest.mark.postgres
def test_database_errors_are_djangos() -> None:
    with pytest.raises(ProgrammingError), transaction.atomic(), statement_cursor("default") as cursor:
        cursor.execute("SELECT no_such_column FROM agentmemory_conversation WHERE id = %s", [1])


@pytest.mark.sqlite
def test_other_databases_use_djangos_cursor() -> None:
    assert not prepares_statements("default")
    with statement_cursor("default") as cursor:
        cursor.execute("SELECT %s", [7])
        assert cursor.fetchone() == (7,)


@pytest.mark.parametrize(
    ("value", "refused"), [(None, False), (True, False), (False, False), ("on", True), (1, True)]
)
def test_the_setting_is_none_true_or_false(value, refused) -> None:  # type: ignore[no-untyped-def]
    from django.core.checks import run_checks
    from django.test import override_settings

    with override_settings(AGENTMEMORY={"PREPARED_STATEMENTS": value}):
        assert ("agentmemory.E024" in {problem.id for problem in run_checks()}) is refused
