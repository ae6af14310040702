"""The window's head statement as a server-side function on PostgreSQL
(``agentmemory.store.functions``): created by a migration under a fixed name from the
statement text frozen in it (the live statement's text), called once a connection has found
it, the same rows as the statement sent as text, one query per build either way, and a
database without it (or one that lost it) still answers."""

from __future__ import annotations

import json
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Summary
from agentmemory.store import function_sql, functions
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


def _conversation(*, system: bool = True, summary: bool = False) -> Conversation:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    if system:
        history.add_message(ChatMessage.system("You are terse."))
    for i in range(8):
        history.add_message(ChatMessage.human(f"question {i} " + "word " * i))
        history.add_message(ChatMessage.ai(None, [ToolCall(id=f"c{i}", name="look", arguments={"i": i})]))
        history.add_message(ChatMessage.tool(f"result {i} " + "data " * (40 * i), tool_call_id=f"c{i}"))
        history.add_message(
            ChatMessage.ai(f"answer {i}", metadata={"thinking": [{"type": "thinking", "thinking": f"t{i}"}]})
        )
    # A call still awaiting its result, then a later turn: the gap probe is asked about it.
    history.add_message(ChatMessage.human("book it"))
    history.add_message(ChatMessage.ai(None, [ToolCall(id="wait", name="approve", arguments={})]))
    history.add_message(ChatMessage.human("still there?"))
    history.add_message(ChatMessage.ai("yes"))
    if summary:
        conv.refresh_from_db()
        stored = Summary.objects.create(
            conversation=conv,
            text="They asked about the weather.",
            first_seq=1,
            through_seq=9,
            human_messages_covered=2,
            human_message_count=2,
            tokens_covered=60,
            token_count=9,
            token_counter="approx-v3",
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=stored)
    return conv


def _windows(conv: Conversation) -> list[tuple]:
    """Windows of every variant of the head statement (pinned prompt read or given, tool
    results capped or not) at several budgets, with the gap probe's findings
    (``uncovered``, the default gap policy "report")."""
    out = []
    for system_prompt in (None, "Given here."):
        for cap in (None, 30):
            for budget in (60, 200, 450, 5000):
                try:
                    window = ContextWindowBuilder(
                        conv.pk, system_prompt=system_prompt, max_tool_result_tokens=cap
                    ).build(max_tokens=budget)
                except Exception as exc:  # a budget error is a result to compare too
                    out.append((system_prompt, cap, budget, type(exc).__name__, str(exc)))
                    continue
                out.append(
                    (
                        system_prompt,
                        cap,
                        budget,
                        [(m.seq, m.role, m.content, m.tool_calls, m.metadata) for m in window.messages],
                        window.history_tokens,
                        window.rows_read,
                        window.uncovered,
                    )
                )
    return out


def _as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection behaves as one that has found no head function."""
    monkeypatch.setattr(functions, "known", lambda raw, key: False)


#: the migration that creates the functions, and the one before it
FUNCTIONS_MIGRATION = "0027_window_read_functions_in_migration"
BEFORE = "0026_message_fulltext_no_pending_list"


def _make_again() -> None:
    """Run the migration that creates the functions again (back one step, then forward)."""
    call_command("migrate", "agentmemory", BEFORE, verbosity=0)
    call_command("migrate", "agentmemory", verbosity=0)


def _family() -> list[str]:
    """Every ``agentmemory_window_...`` function on the database, as signatures."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.proname LIKE %s "
            "AND p.pronamespace = ANY(current_schemas(false)::regnamespace[]) ORDER BY 1",
            [r"agentmemory\_window\_%"],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
def test_the_migration_makes_a_function_for_each_variant_of_the_head_statement_and_the_gap_probe() -> None:
    with connection.cursor() as cursor:
        for key in functions.KEYS:
            function = functions.signature(key)
            cursor.execute("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(%s)", [function])
            (source,) = cursor.fetchone()
            # the statement the text path sends, parameters as $n: a release that changes it
            # ships a migration that replaces the function
            assert source == f" BEGIN RETURN QUERY {function_sql.body('default', key)}; END "
    # under fixed names, and nothing else of the family
    assert _family() == sorted(functions.names())
    # (migration 0028 added the floor, the ninth argument)
    head_nu = "agentmemory_window_head_nu(bigint,text,bigint,bigint,bigint,bigint,text,bigint,bigint)"
    assert functions.names()[0] == head_nu


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migration_drops_the_hash_named_functions_of_earlier_versions() -> None:
    """Before the migration a ``post_migrate`` receiver installed them under names carrying a
    hash of their text, one set per version; an upgraded install keeps only the five."""
    call_command("migrate", "agentmemory", BEFORE, verbosity=0)
    try:
        assert _family() == []
        with connection.cursor() as cursor:
            for stale in ("agentmemory_window_head_pu_13a1ea15c63a", "agentmemory_window_gap_0123456789ab"):
                cursor.execute(
                    f"CREATE FUNCTION {stale}(bigint) RETURNS TABLE (c0 integer) LANGUAGE sql STABLE "
                    "AS $$ SELECT 1 $$"
                )
        assert len(_family()) == 2
    finally:
        call_command("migrate", "agentmemory", verbosity=0)
    assert _family() == sorted(functions.names())
    connection.close()
    conv = _conversation()
    _windows(conv)
    assert _called_function(conv)


@pytest.mark.django_db(transaction=True)  # sqlmigrate: SQLite's schema editor outside a transaction
def test_the_migration_runs_nothing_on_other_databases_and_the_builder_reads_as_before() -> None:
    out = StringIO()
    call_command("sqlmigrate", "agentmemory", FUNCTIONS_MIGRATION, stdout=out)
    creates = out.getvalue().count("CREATE FUNCTION agentmemory_window_")
    assert creates == (5 if connection.vendor == "postgresql" else 0)
    backwards = StringIO()
    call_command("sqlmigrate", "agentmemory", FUNCTIONS_MIGRATION, backwards=True, stdout=backwards)
    drops = backwards.getvalue().count("DROP FUNCTION IF EXISTS agentmemory_window_")
    assert drops == (5 if connection.vendor == "postgresql" else 0)
    conv = _conversation()
    window = ContextWindowBuilder(conv.pk).build(max_tokens=400)
    assert window.messages[0].content == "You are terse."
    assert [m.role.value for m in window.messages[1:3]] == ["human", "ai"]


@pytest.mark.postgres
@pytest.mark.parametrize("summary", [False, True], ids=["no summary", "summary"])
@pytest.mark.parametrize("system", [True, False], ids=["system prompt", "no system prompt"])
def test_the_function_gives_the_windows_the_statement_as_text_gives(
    monkeypatch: pytest.MonkeyPatch, system: bool, summary: bool
) -> None:
    conv = _conversation(system=system, summary=summary)
    through_function = _windows(conv)
    _windows(conv)  # every call after the first on this connection goes through the function
    with monkeypatch.context() as patch:
        _as_text(patch)
        as_text = _windows(conv)
    assert through_function == as_text
    assert any(isinstance(w[3], list) and w[3] for w in as_text)  # windows, not only errors
    assert any(len(w) == 7 and w[6] is not None for w in as_text)  # the gap probe found some


@pytest.mark.postgres
def test_the_head_function_called_with_its_values_in_place_gives_the_windows_of_the_bound_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conv = _conversation(summary=True)
    _windows(conv)  # the connection finds the function
    with CaptureQueriesContext(connection) as queries:
        in_place = _windows(conv)
    calls = [q["sql"] for q in queries.captured_queries if functions.PREFIX + "head_" in q["sql"]]
    assert calls and all(f"({conv.pk}::bigint, " in sql for sql in calls)
    with monkeypatch.context() as patch:
        patch.setattr(functions, "literal_call", lambda key, params: None)  # bound by the driver
        bound = _windows(conv)
    assert in_place == bound


def test_a_call_is_written_in_place_only_with_integers_null_and_role_names() -> None:
    key = (True, True)
    params = {"id": 7, "system": "system", "room": 10, "half": 15, "triple": 30, "max_page": 2**62}
    params.update(tool="tool", cap=4000, floor=None)
    assert functions.literal_call(key, params) == (
        "SELECT * FROM agentmemory_window_head_pc(7::bigint, 'system'::text, 10::bigint, 15::bigint, "
        "30::bigint, 4611686018427387904::bigint, 'tool'::text, 4000::bigint, NULL::bigint)"
    )
    for value in (True, 2**63, -(2**63) - 1, "sys'tem", 1.5):
        assert functions.literal_call(key, {**params, "id": value}) is None
    assert functions.literal_call(key, {**params, "system": "human'); DROP"}) is None


@pytest.mark.postgres
def test_the_gap_probe_goes_through_its_function() -> None:
    conv = _conversation()
    # A window that starts after the call still waiting: the probe is asked about it (in
    # the common case the head statement's rows say what the gap report needs).
    ContextWindowBuilder(conv.pk).build(max_tokens=20)
    with CaptureQueriesContext(connection) as queries:
        window = ContextWindowBuilder(conv.pk).build(max_tokens=20)
    name = functions.name(functions.GAP)
    (probe,) = [q["sql"] for q in queries.captured_queries if f"{name}(" in q["sql"]]
    assert "::bigint[])" in probe  # the seqs asked about, in one array
    assert window.uncovered is not None and window.uncovered.count > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_finds_the_function_with_its_first_build_and_calls_it_after() -> None:
    conv = _conversation()
    connection.close()  # a new connection: nothing known about the function yet
    with CaptureQueriesContext(connection) as first:
        ContextWindowBuilder(conv.pk, gap_policy="ignore").build(max_tokens=400)
    with CaptureQueriesContext(connection) as second:
        ContextWindowBuilder(conv.pk, gap_policy="ignore").build(max_tokens=400)
    assert len(first) == len(second) == 1  # the probe rides on the head statement
    assert "to_regprocedure" in first[0]["sql"] and "UNION ALL" in first[0]["sql"]
    assert second[0]["sql"].startswith("SELECT * FROM agentmemory_window_head_pc(")
    assert f"{conv.pk}::bigint" in second[0]["sql"]  # logged with its values


def _called_function(conv: Conversation) -> bool:
    """Whether this connection's next build calls a head function."""
    with CaptureQueriesContext(connection) as queries:
        ContextWindowBuilder(conv.pk, gap_policy="ignore").build(max_tokens=400)
    return functions.PREFIX in queries[0]["sql"]


def _drop_functions() -> None:
    with connection.cursor() as cursor:
        for function in functions.names():
            cursor.execute(f"DROP FUNCTION IF EXISTS {function}")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_function_the_statement_is_sent_as_text_until_the_migration_makes_it_again() -> None:
    conv = _conversation()
    expected = _windows(conv)
    _drop_functions()
    try:
        connection.close()
        assert _windows(conv) == expected
        with CaptureQueriesContext(connection) as queries:
            ContextWindowBuilder(conv.pk, gap_policy="ignore").build(max_tokens=400)
        # Found missing once: no probe and no call on this connection any more.
        assert "to_regprocedure" not in queries[0]["sql"] and functions.PREFIX not in queries[0]["sql"]
    finally:
        _make_again()
    connection.close()
    _windows(conv)
    assert _called_function(conv)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_dropped_under_a_connection_that_uses_it_costs_no_window() -> None:
    conv = _conversation()
    expected = _windows(conv)
    _windows(conv)  # this connection now calls the functions
    _drop_functions()
    try:
        assert _windows(conv) == expected  # outside a transaction: sent again as text
    finally:
        _make_again()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_role_without_execute_on_the_function_sends_the_statement_as_text() -> None:
    """Default privileges that revoke ``EXECUTE`` from ``PUBLIC`` (a common hardening):
    the function exists but the application's role may not call it."""
    conv = _conversation()
    expected = _windows(conv)
    role = f"agentmemory_reader_{uuid.uuid4().hex[:8]}"
    heads = functions.names()
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role}")
        cursor.execute(f"GRANT USAGE ON SCHEMA {_schema()} TO {role}")
        cursor.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {_schema()} TO {role}")
    try:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {role}")
        assert _windows(conv) == expected and _called_function(conv)  # may call it: calls it
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            for head in heads:
                cursor.execute(f"REVOKE EXECUTE ON FUNCTION {head} FROM PUBLIC")
            cursor.execute(f"SET ROLE {role}")
        # Revoked under a connection that calls it: sent as text from then on.
        assert _windows(conv) == expected and not _called_function(conv)
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {role}")
        # A new connection finds it not callable with its first window: no error, no call.
        assert _windows(conv) == expected and not _called_function(conv)
    finally:
        connection.close()
        with connection.cursor() as cursor:
            for head in heads:
                cursor.execute(f"GRANT EXECUTE ON FUNCTION {head} TO PUBLIC")
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def _schema() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        return str(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_column_type_changed_under_the_function_costs_no_window() -> None:
    """A column the head statement returns changed type (a migration that does so replaces
    the functions too; one that forgot, or a hand-made ``ALTER``): the function's declared
    result types no longer match ("structure of query does not match function result
    type"), and the statements are sent as text, on the connection that called it and on a
    new one, until the types match again."""
    conv = _conversation()
    expected = _windows(conv)
    assert _called_function(conv)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'agentmemory_message'::regclass AND attname = 'name'"
        )
        (original,) = cursor.fetchone()
        cursor.execute("ALTER TABLE agentmemory_message ALTER COLUMN name TYPE text")
    try:
        # Under a connection that calls it: sent as text from then on.
        assert _windows(conv) == expected and not _called_function(conv)
        # A new connection finds it, fails to use it once, and sends the statements as text.
        connection.close()
        assert _windows(conv) == expected and not _called_function(conv)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE agentmemory_message ALTER COLUMN name TYPE {original}")
    connection.close()
    assert _windows(conv) == expected and _called_function(conv)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_dropped_under_a_connection_inside_a_transaction_fails_that_window_once() -> None:
    """Inside a transaction (``ATOMIC_REQUESTS``) the failed call has aborted it: the error
    is raised, with a note that says what happened, and the next window is read as text."""
    conv = _conversation()
    expected = _windows(conv)
    _windows(conv)  # this connection now calls the functions
    _drop_functions()
    try:
        with pytest.raises(ProgrammingError, match="does not exist") as raised, transaction.atomic():
            ContextWindowBuilder(conv.pk, gap_policy="ignore").build(max_tokens=400)
        assert any("roll back and retry" in note for note in raised.value.__notes__)
        with transaction.atomic():
            assert _windows(conv) == expected
    finally:
        _make_again()


def _installed() -> list[str | None]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_regprocedure(f)::text FROM unnest(%s::text[]) WITH ORDINALITY AS t(f, n) ORDER BY n",
            [functions.names()],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_migrating_to_zero_drops_the_functions_and_forward_makes_them_again() -> None:
    assert len(set(functions.names())) == 5
    assert all(_installed())
    try:
        call_command("migrate", "agentmemory", "zero", verbosity=0)
        assert _installed() == [None] * 5  # none left behind reading tables that are gone
        assert _family() == []
    finally:
        # every app: going to zero also unapplied the apps that depend on agentmemory's
        # migrations (agentmemory.contrib.langgraph), whose tables later tests use
        call_command("migrate", verbosity=0)
    assert all(_installed())
    connection.close()
    conv = _conversation()
    assert _windows(conv) == _windows(conv)  # found again and called


@pytest.mark.postgres
def test_a_cap_beyond_the_token_count_range_caps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head statement sums capped counts as integers, the column's type: a cap larger
    than any integer is passed clamped, and the window is the uncapped one, through the
    function and as text."""
    conv = _conversation()

    def window(cap: int | None) -> list[tuple]:
        built = ContextWindowBuilder(conv.pk, max_tool_result_tokens=cap).build(max_tokens=450)
        return [(m.seq, m.content) for m in built.messages]

    uncapped = window(None)
    window(2**40)  # this connection has found the function
    assert window(2**40) == window(2**31 - 1) == uncapped
    with monkeypatch.context() as patch:
        _as_text(patch)
        assert window(2**40) == uncapped


@pytest.mark.postgres
def test_the_head_statement_reads_the_conversation_row_once() -> None:
    """One lookup of the conversation's primary key per window, whatever the variant (each
    branch that needs a value of the row reads it from the statement's ``conv``)."""
    conv = _conversation(summary=True)
    ContextWindowBuilder(conv.pk).build(max_tokens=450)
    for key in functions.VARIANTS:
        params = [conv.pk, "system", 450, 675, 1350, 2**62, "tool", 30, None]
        types = ", ".join(kind for _, kind in functions.HEAD_PARAMS)
        with connection.cursor() as cursor:
            cursor.execute(f"PREPARE agentmemory_test_head ({types}) AS {function_sql.body('default', key)}")
            try:
                cursor.execute(
                    "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) "
                    "EXECUTE agentmemory_test_head (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    params,
                )
                (plan,) = cursor.fetchone()
            finally:
                cursor.execute("DEALLOCATE agentmemory_test_head")
        plan = plan if isinstance(plan, list) else json.loads(plan)
        scans = _scans(plan[0]["Plan"], "agentmemory_conversation")
        assert scans == [1], (functions.code(key), scans)


def _scans(node: dict, table: str) -> list[int]:
    """The loops of every scan of ``table`` in a JSON plan node and below it."""
    own = [node["Actual Loops"]] if node.get("Relation Name") == table else []
    return own + [loops for child in node.get("Plans", ()) for loops in _scans(child, table)]


@pytest.mark.postgres
@pytest.mark.parametrize("conversation_id", [2**63, -(2**63) - 1, 10**30])
def test_an_id_no_bigint_holds_names_no_conversation_through_the_functions(conversation_id: int) -> None:
    """A window of an id outside the bigint range is ``ConversationNotFound``, as the head
    statement sent as text finds no row for it, not the database's "bigint out of range"
    from the function's argument; the functions stay in use."""
    conv = _conversation()
    _windows(conv)  # this connection has found the functions
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(conversation_id).build(max_tokens=450)
    with CaptureQueriesContext(connection) as queries:
        ContextWindowBuilder(conv.pk).build(max_tokens=450)
    assert queries[0]["sql"].startswith("SELECT * FROM agentmemory_window_head_")
