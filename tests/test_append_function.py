"""The one-message append's statements as server-side functions on PostgreSQL
(``agentmemory.store.append._run_one``, migration ``0029_append_one_functions``): created
from the statement text frozen in the migration (the live statements' text), found by a
connection with its first append and called after, one query per append either way, the
same rows and counters as the statements sent as text, and a database without them (or one
that lost them) still appends."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext

from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.store import function_sql, functions
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db

#: the migration that creates the functions, and the one before it
FUNCTIONS_MIGRATION = "0029_append_one_functions"
BEFORE = "0028_window_head_floor_and_gap"


def _messages() -> list[ChatMessage]:
    """One of each variant: a pinned system prompt, plain messages of every role, a tool
    exchange with its result stored after a later message, and parts and metadata."""
    return [
        ChatMessage.system("You are terse."),
        ChatMessage.system("Answer in French."),  # still only system messages: pinned too
        ChatMessage.human("weather?", name="ann", metadata={"client": "web"}),
        ChatMessage.ai(None, [ToolCall(id="w1", name="weather", arguments={"city": "Oslo"})]),
        ChatMessage.human("and tomorrow?"),
        ChatMessage.tool('{"sky": "clear"}', tool_call_id="w1", name="weather"),
        ChatMessage.ai("Clear.", metadata={"thinking": [{"type": "thinking", "thinking": "easy"}]}),
        ChatMessage.system("a late system note"),  # not pinned: history
    ]


def _append_all(conversation: Conversation) -> list[Any]:
    """Append ``_messages()`` one at a time, then a result answering no pending call (the
    strict check refuses it); the stored rows and the conversation's counters."""
    history = PersistentChatHistory(conversation)
    returned = [history.add_message(m) for m in _messages()]
    with pytest.raises(InvalidMessageError):
        history.add_message(ChatMessage.tool("late", tool_call_id="nobody"))
    columns = (
        "seq",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "name",
        "token_count",
        "exchange_seq",
        "metadata",
        "parts",
    )
    rows = list(Message.objects.filter(conversation=conversation).order_by("seq").values_list(*columns))
    fields = (
        "last_seq",
        "message_count",
        "human_message_count",
        "stored_tokens",
        "has_system_prompt",
        "pinned_seq",
        "pinned_last_seq",
        "pending_tool_calls",
    )
    counters = Conversation.objects.values(*fields).get(pk=conversation.pk)
    return [[(m.seq, m.id is not None, m.token_count) for m in returned], rows, counters]


def _calls_function() -> bool:
    """Whether this connection's next one-message append calls a function."""
    history = PersistentChatHistory(ConversationFactory())
    with CaptureQueriesContext(connection) as queries:
        history.add_message(ChatMessage.human("ping"))
    assert len(queries) == 1
    return functions.APPEND_PREFIX in queries[0]["sql"]


def _drop_functions() -> None:
    with connection.cursor() as cursor:
        for function in functions.append_names():
            cursor.execute(f"DROP FUNCTION IF EXISTS {function}")


def _make_again() -> None:
    call_command("migrate", "agentmemory", BEFORE, verbosity=0)
    call_command("migrate", "agentmemory", verbosity=0)


@pytest.mark.postgres
def test_the_migration_makes_a_function_for_each_one_message_statement() -> None:
    with connection.cursor() as cursor:
        for key in functions.APPEND_KEYS:
            function = functions.signature(key)
            cursor.execute("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(%s)", [function])
            (source,) = cursor.fetchone()
            # the statement the text path sends, parameters as $n: a release that changes it
            # ships a migration that replaces the function
            assert source == f" BEGIN RETURN QUERY {function_sql.body('default', key)}; END "
    assert functions.append_names()[1] == (
        "agentmemory_append_one_human(bigint,bigint,text,text,text,text,text,text)"
    )


@pytest.mark.django_db(transaction=True)  # sqlmigrate: SQLite's schema editor outside a transaction
def test_the_migration_runs_nothing_on_other_databases_and_appends_store_as_before() -> None:
    out = StringIO()
    call_command("sqlmigrate", "agentmemory", FUNCTIONS_MIGRATION, stdout=out)
    assert out.getvalue().count("CREATE FUNCTION agentmemory_append_one_") == (
        4 if connection.vendor == "postgresql" else 0
    )
    backwards = StringIO()
    call_command("sqlmigrate", "agentmemory", FUNCTIONS_MIGRATION, backwards=True, stdout=backwards)
    assert backwards.getvalue().count("DROP FUNCTION IF EXISTS agentmemory_append_one_") == (
        4 if connection.vendor == "postgresql" else 0
    )
    _, rows, counters = _append_all(ConversationFactory())
    assert [row[1] for row in rows] == ["system", "system", "human", "ai", "human", "tool", "ai", "system"]
    assert (counters["pinned_seq"], counters["pinned_last_seq"], counters["pending_tool_calls"]) == (1, 2, {})


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_finds_the_functions_with_its_first_append_and_calls_them_after() -> None:
    history = PersistentChatHistory(ConversationFactory())
    connection.close()  # a new connection: nothing known about the functions yet
    with CaptureQueriesContext(connection) as first:
        history.add_message(ChatMessage.human("hi"))
    with CaptureQueriesContext(connection) as second:
        history.add_message(ChatMessage.ai(None, [ToolCall(id="c1", name="look", arguments={})]))
    with CaptureQueriesContext(connection) as third:
        history.add_message(ChatMessage.tool("found", tool_call_id="c1"))
    # one round trip each: the probe rides on the first statement's RETURNING
    assert len(first) == len(second) == len(third) == 1
    assert "to_regprocedure" in first[0]["sql"] and "INSERT INTO" in first[0]["sql"]
    assert second[0]["sql"].startswith("SELECT * FROM agentmemory_append_one_calls(")
    assert third[0]["sql"].startswith("SELECT * FROM agentmemory_append_one_calls(")
    assert [m.seq for m in history.get_messages()] == [1, 2, 3]
    assert Message.objects.get(conversation_id=history.conversation_id, seq=3).exchange_seq == 2


@pytest.mark.postgres
def test_the_functions_store_what_the_statements_sent_as_text_store(monkeypatch: pytest.MonkeyPatch) -> None:
    _calls_function()  # this connection has found them
    assert _calls_function()
    through_functions = _append_all(ConversationFactory())
    with monkeypatch.context() as patch:
        patch.setattr(functions, "known", lambda raw, key: False)
        assert not _calls_function()
        as_text = _append_all(ConversationFactory())
    assert through_functions == as_text


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_without_the_functions_appends_are_sent_as_text_until_the_migration_makes_them_again() -> None:
    expected = _append_all(ConversationFactory())
    _drop_functions()
    try:
        connection.close()
        assert _append_all(ConversationFactory()) == expected
        # Found missing with the first append: no probe and no call on this connection.
        history = PersistentChatHistory(ConversationFactory())
        with CaptureQueriesContext(connection) as queries:
            history.add_message(ChatMessage.human("hi"))
        assert "to_regprocedure" not in queries[0]["sql"] and functions.APPEND_PREFIX not in queries[0]["sql"]
    finally:
        _make_again()
    connection.close()
    _calls_function()
    assert _calls_function()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_functions_dropped_under_a_connection_that_calls_them_cost_no_append() -> None:
    expected = _append_all(ConversationFactory())
    assert _calls_function()
    _drop_functions()
    try:
        assert _append_all(ConversationFactory()) == expected  # outside a transaction: as text
        assert not _calls_function()
    finally:
        _make_again()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_functions_dropped_under_a_connection_inside_a_transaction_fail_that_append_once() -> None:
    """Inside a transaction the failed call has aborted it: the error is raised with a note
    that says what happened, and the next append is sent as text."""
    expected = _append_all(ConversationFactory())
    assert _calls_function()
    _drop_functions()
    try:
        conversation = ConversationFactory()
        with pytest.raises(ProgrammingError, match="does not exist") as raised, transaction.atomic():
            PersistentChatHistory(conversation).add_message(ChatMessage.human("lost"))
        assert any("roll back and retry" in note for note in raised.value.__notes__)
        assert not Message.objects.filter(conversation=conversation).exists()
        with transaction.atomic():
            assert _append_all(ConversationFactory()) == expected
    finally:
        _make_again()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migration_applies_again_over_the_functions_it_made() -> None:
    """``migrate --fake`` back past the migration (recording it unapplied, a way to repair
    a migration history) leaves its functions in place: applying it again replaces them, as
    the window's function migrations do, rather than failing on "already exists"."""
    call_command("migrate", "agentmemory", BEFORE, fake=True, verbosity=0)
    try:
        call_command("migrate", "agentmemory", verbosity=0)
    except Exception:
        call_command("migrate", "agentmemory", fake=True, verbosity=0)  # the history as it was
        raise
    connection.close()
    _calls_function()
    assert _calls_function()


@pytest.mark.postgres
@pytest.mark.parametrize("conversation_id", [2**63, -(2**63) - 1, 10**30])
def test_an_id_no_bigint_holds_names_no_conversation_through_the_functions(conversation_id: int) -> None:
    """No conversation has an id outside the bigint range: an append to one is refused with
    ``ConversationNotFound``, as the statement sent as text finds no row for it, not with the
    database's "bigint out of range" from the function's argument; the functions stay in use."""
    _calls_function()
    assert _calls_function()
    history = PersistentChatHistory(conversation_id)
    for message in (ChatMessage.human("x"), ChatMessage.ai(None, [ToolCall(id="c", name="f", arguments={})])):
        with pytest.raises(ConversationNotFound):
            history.add_message(message)
    assert _calls_function()
