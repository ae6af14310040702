"""Statements prepared once per connection on PostgreSQL (``agentmemory.store.connection``): the window's
read path and single appends are parsed and planned once, give the same results as text
statements, stay visible to Django's query log, and are not prepared where the settings say
a transaction pooler sits in between."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import DataError, IntegrityError, OperationalError, ProgrammingError
from django.test.utils import CaptureQueriesContext, override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary
from agentmemory.store.connection import prepares_statements, statement_cursor
from tests.factories import ConversationFactory
from tests.helpers import TableTokenCounter
from tests.test_properties import Scenario, scenarios

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
@pytest.mark.django_db(transaction=True)
def test_window_reads_are_prepared_once_and_give_the_same_window(settings) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation()
    connection.close()  # a connection that has not run the window's statements yet
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


def _stored(conv: Conversation) -> list[tuple]:
    fields = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "token_count")
    rows = Message.objects.filter(conversation=conv).order_by("seq").values_list(*fields, "exchange_seq")
    rows = [(*r[:-1], r[-1] is not None and r[-1] - r[0]) for r in rows]  # exchange relative to seq
    conv.refresh_from_db()
    counters = (conv.last_seq, conv.message_count, conv.human_message_count, conv.stored_tokens)
    return [*rows, (counters, conv.pinned_seq, sorted(conv.pending_tool_calls.values()))]


def _outcome(build) -> object:  # type: ignore[no-untyped-def]
    try:
        return build()
    except Exception as exc:  # the same error either way
        return (type(exc).__name__, str(exc))


@pytest.mark.postgres
@hypothesis_settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    s=scenarios(),
    extremes=st.tuples(
        st.sampled_from([1, 2, 16, 2**15, 2**31 - 1, 1_000_000]),
        st.sampled_from([None, 0, 1, 2**15, 2**31, 2**62]),
        st.sampled_from([None, 0, 1, 2**15, 2**40, 2**70]),
    ),
)
def test_prepared_and_text_statements_store_and_build_the_same(s: Scenario, extremes) -> None:  # type: ignore[no-untyped-def]
    # Parameters bound on the server take the smallest integer type that holds them (int2,
    # int4, int8), text statements inline them: both must store the same rows and build the
    # same windows, for every parameter shape the statements get (None, 0, huge numbers, a
    # summary, a pinned prompt, pending calls, orphans).
    counter = TableTokenCounter([m.content for m in s.msgs], [m.tokens for m in s.msgs])
    convs = {}
    for prepared in (True, False):
        conv = convs[prepared] = Conversation.objects.create(agent_key="equivalence")
        history = PersistentChatHistory(conv, token_counter=counter, validate_tool_pairs=not s.relaxed)
        with override_settings(AGENTMEMORY={"PREPARED_STATEMENTS": prepared}):
            for message in s.msgs:  # one at a time: the single-append statements
                history.add_message(message.chat())
    assert _stored(convs[True]) == _stored(convs[False])
    conv = convs[True]
    if s.summary_before is not None:
        through = s.summary_before - 1
        summary = Summary.objects.create(
            conversation=conv,
            text="an earlier summary",
            first_seq=1,
            through_seq=through,
            human_messages_covered=sum(1 for m in s.msgs if m.kind == "human" and m.seq <= through),
            token_count=s.summary_tokens,
            token_counter=counter.id,
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    max_tokens, max_messages, cap = extremes
    for budget, most, tool_cap in ((s.max_tokens, s.max_messages, s.cap), (max_tokens, max_messages, cap)):

        def build(budget=budget, most=most, tool_cap=tool_cap):  # type: ignore[no-untyped-def]
            builder = ContextWindowBuilder(
                conv,
                token_counter=counter,
                max_tool_result_tokens=tool_cap,
                oversized_message_policy="truncate" if s.truncate else "error",
            )
            return builder.build(budget, max_messages=most)

        windows = []
        for prepared in (False, True):
            with override_settings(AGENTMEMORY={"PREPARED_STATEMENTS": prepared}):
                for _ in range(1 + 2 * prepared):  # prepared on the second run: read it as such too
                    windows.append(_outcome(build))
        assert all(w == windows[0] for w in windows), (budget, most, tool_cap)


@pytest.mark.postgres
def test_statements_past_psycopgs_hundred_are_deallocated_and_windows_stay_the_same(settings) -> None:  # type: ignore[no-untyped-def]
    # The gap probe and the uncovered read have one text per number of pending tool
    # exchanges: a conversation with 0 to 150 of them gives more statements than psycopg
    # keeps prepared on a connection (``prepared_max``, 100); the oldest are deallocated.
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.human("start"))
    for i in range(151):
        if i:
            history.add_message(ChatMessage.ai(None, [ToolCall(id=f"p{i}", name="wait", arguments={})]))
            history.add_message(ChatMessage.human(f"still there {i}?"))
        windows = []
        for prepared in (False, True, True):
            settings.AGENTMEMORY = {"PREPARED_STATEMENTS": prepared}
            window = ContextWindowBuilder(conv.pk, max_tool_result_tokens=None).build(max_tokens=40)
            windows.append((window.messages, window.skipped_pending, window.uncovered))
        assert windows[1] == windows[0] and windows[2] == windows[0]
    assert window.uncovered.count > 0 and window.skipped_pending
    # psycopg deallocates the least recently used past ``prepared_max``; a statement moved
    # from its counts to its prepared ones is rotated out on the next one (one over at most).
    assert len(_prepared()) <= connection.connection.prepared_max + 1


class _HugeCounter:
    """Counts every message at more tokens than the ``token_count`` column holds."""

    id = "huge"

    def count_message(self, message: ChatMessage) -> int:
        return 2**40

    def count_text(self, text: str) -> int:
        return 2**40


@pytest.mark.postgres
def test_errors_and_savepoint_rollbacks_inside_a_transaction_leave_prepared_statements_working() -> None:
    # psycopg forgets every prepared statement on a rollback to a savepoint (and deallocates
    # them on the server): what was prepared before, and a statement that failed on its
    # first prepared run, must neither fail the statements after nor leave them unprepared.
    conv = _conversation()
    expected = _window(conv)
    with transaction.atomic():
        assert _window(conv) == expected and _window(conv) == expected
        assert [s for s in _prepared() if _is_head(s)]
        history = PersistentChatHistory(conv)
        history.add_message(ChatMessage.human("one"))
        history.add_message(ChatMessage.human("two"))  # prepared
        with pytest.raises(DataError), transaction.atomic():
            PersistentChatHistory(conv, token_counter=_HugeCounter()).add_message(ChatMessage.human("big"))
        with pytest.raises(IntegrityError), transaction.atomic():
            Conversation.objects.create(uuid=conv.uuid, agent_key="again")
        history.add_message(ChatMessage.human("three"))
        history.add_message(ChatMessage.ai("four"))
        after = _window(conv, max_tokens=1_000)
        assert _window(conv, max_tokens=1_000) == after and _window(conv, max_tokens=1_000) == after
        assert [s for s in _prepared() if _is_head(s)]  # prepared again after the rollbacks
    assert [m[2] for m in after][-4:] == ["one", "two", "three", "four"]
    assert list(Message.objects.filter(conversation=conv, content="big")) == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_closed_by_the_server_fails_like_djangos_and_the_next_one_prepares() -> None:
    conv = _conversation()
    expected = _window(conv)
    assert _window(conv) == expected
    pid = connection.connection.info.backend_pid
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    with pytest.raises(OperationalError):
        _window(conv)
    connection.close_if_unusable_or_obsolete()  # what Django does at the end of a request
    assert _window(conv) == expected and _window(conv) == expected
    assert connection.connection.info.backend_pid != pid
    assert [s for s in _prepared() if _is_head(s)]


@pytest.mark.postgres
def test_a_prepared_statement_that_fails_is_in_the_query_log_with_its_values() -> None:
    # Django logs a statement that raised too (``connection.queries``, DEBUG logging,
    # ``CaptureQueriesContext``), its text a string with the values in place.
    sql = "SELECT %(a)s::int / %(b)s::int"
    with CaptureQueriesContext(connection) as queries:
        for _ in range(2):  # the second run is prepared
            with pytest.raises(DataError), transaction.atomic(), statement_cursor("default") as cursor:
                cursor.execute(sql, {"a": 1, "b": 0})
    logged = [q["sql"] for q in queries.captured_queries if q["sql"] and "::int /" in q["sql"]]
    assert logged == ["SELECT 1::int / 0::int"] * 2, queries.captured_queries


@pytest.mark.postgres
def test_djangos_statements_are_not_kept_by_the_driver_between_prepared_ones() -> None:
    # psycopg keeps the text of the last 100 statements of a connection to count them when
    # the connection has a prepare threshold; Django's statements carry their values in
    # their text (a batch of long messages), so the connection keeps Django's ``None``.
    conv = _conversation()
    _window(conv)
    _window(conv)
    long_text = "x" * 200_000
    PersistentChatHistory(conv).add_messages([ChatMessage.human(long_text), ChatMessage.ai(long_text)])
    PersistentChatHistory(conv).add_message(ChatMessage.human("and now?"))
    _window(conv)
    raw = connection.connection
    assert raw.prepare_threshold is None
    assert not [key for key in raw._prepared._counts if long_text.encode() in key[0]]
    assert [s for s in _prepared() if _is_head(s)]  # still prepared, and used


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_name_the_server_already_holds_is_run_as_text() -> None:
    # Behind a pooler another client's statement can hold the name psycopg gives the next
    # one ("prepared statement ... already exists"): nothing has run, so outside a
    # transaction the statement runs as text and the connection prepares nothing more.
    conv = _conversation()
    expected = _window(conv)
    raw = connection.connection
    taken = f"_pg3_{raw._prepared._prepared_idx}"  # the name psycopg gives the next statement
    raw.pgconn.exec_(f"PREPARE {taken} AS SELECT 1".encode())
    assert _window(conv) == expected  # its second run: prepared under the name taken
    assert _window(conv) == expected
    assert [s for s in _prepared() if _is_head(s)] == []
