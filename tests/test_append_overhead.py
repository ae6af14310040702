"""What a one-message append does besides its statement: the ``message_appended`` receiver
of recall only while an embedder is configured, and the cursor kept on the connection
(``agentmemory.store.connection.statement_cursor``) without one statement ever reading
another's rows."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from agentmemory import signals
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.receivers import INDEX_APPENDED, index_appended_messages
from agentmemory.store.connection import statement_cursor
from tests.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.django_db

EMBEDDER_SETTINGS = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}


def _connected() -> bool:
    return any(key[0] == INDEX_APPENDED for key, *_ in signals.message_appended.receivers)


def test_without_an_embedder_the_recall_receiver_leaves_the_append(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {}
    history = PersistentChatHistory(ConversationFactory())
    history.add_message(ChatMessage.human("hello"))
    assert not _connected()
    history.add_message(ChatMessage.human("again"))
    assert not _connected()


def test_an_embedder_configured_later_embeds_the_next_append(
    settings, monkeypatch, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """The receiver that left the signal without an embedder comes back with the settings
    that name one: the next append is embedded (scheduled on commit)."""
    settings.AGENTMEMORY = {}
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.human("before the embedder"))
    assert not _connected()
    scheduled: list[list[int]] = []
    monkeypatch.setattr("agentmemory.recall.enqueue_message_embedding", scheduled.append)
    settings.AGENTMEMORY = EMBEDDER_SETTINGS
    with django_capture_on_commit_callbacks(execute=True):
        stored = history.add_message(ChatMessage.human("with the embedder"))
    assert scheduled == [[stored.id]]
    assert _connected()


def test_other_receivers_still_hear_every_append(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {}
    heard: list[tuple[int, list[str]]] = []

    def receiver(sender: Any, conversation_id: int, messages: list[ChatMessage], **kwargs: Any) -> None:
        heard.append((conversation_id, [m.text for m in messages]))

    signals.message_appended.connect(receiver, dispatch_uid="test_other_receivers")
    try:
        conv = ConversationFactory()
        history = PersistentChatHistory(conv)
        history.add_message(ChatMessage.human("one"))
        history.add_messages([ChatMessage.human("two"), ChatMessage.ai("three")])
    finally:
        signals.message_appended.disconnect(dispatch_uid="test_other_receivers")
    assert heard == [(conv.pk, ["one"]), (conv.pk, ["two", "three"])]
    assert index_appended_messages is not None


# -- the kept cursor -----------------------------------------------------------------------


def _raw_cursor(alias: str = "default") -> Any:
    with statement_cursor(alias) as cursor:
        return cursor.cursor


@pytest.mark.postgres
@pytest.mark.parametrize("prepared", [False, True])
def test_statements_in_a_row_share_one_cursor(settings, prepared: bool) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"PREPARED_STATEMENTS": prepared}
    first = _raw_cursor()
    assert _raw_cursor() is first and not first.closed
    history = PersistentChatHistory(ConversationFactory())
    history.add_message(ChatMessage.human("hello"))
    assert _raw_cursor() is first


@pytest.mark.postgres
@pytest.mark.parametrize("prepared", [False, True])
def test_a_statement_run_inside_another_ones_hook_reads_its_own_rows(settings, prepared: bool) -> None:  # type: ignore[no-untyped-def]
    """An ``execute_wrapper()`` hook that appends (or builds a window) after the outer
    statement ran, before its rows are read: each reads the rows of its own statement."""
    settings.AGENTMEMORY = {"PREPARED_STATEMENTS": prepared}
    history = PersistentChatHistory(ConversationFactory())
    history.add_message(ChatMessage.human("first"))
    inner: list[ChatMessage] = []

    def hook(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        if "SELECT 41" in sql and not inner:
            inner.append(history.add_message(ChatMessage.ai("inner")))
        return result

    with connection.execute_wrapper(hook), statement_cursor("default") as cursor:
        cursor.execute("SELECT 41 + %s", [1])
        assert cursor.fetchone() == (42,)
    assert inner[0].seq == 2
    assert [m.text for m in history.get_messages()] == ["first", "inner"]


@pytest.mark.postgres
def test_a_connection_shared_between_threads_gives_each_statement_its_cursor() -> None:
    connection.inc_thread_sharing()
    try:
        first = _raw_cursor()
        assert first.closed
        assert _raw_cursor() is not first
    finally:
        connection.dec_thread_sharing()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_new_connection_gets_a_new_cursor() -> None:
    first = _raw_cursor()
    connection.close()
    second = _raw_cursor()
    assert second is not first and not second.closed
    conv = ConversationFactory()
    PersistentChatHistory(conv).add_message(ChatMessage.human("hello"))
    assert len(ContextWindowBuilder(conv.pk).build(max_tokens=500).messages) == 1


@pytest.mark.postgres
def test_each_thread_has_its_own_cursor() -> None:
    mine = _raw_cursor()
    theirs: list[Any] = []

    def other() -> None:
        try:
            theirs.append(_raw_cursor())
        finally:
            connection.close()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert theirs and theirs[0] is not mine


@pytest.mark.postgres
@pytest.mark.parametrize("prepared", [False, True])
def test_a_kept_cursor_holds_no_rows_between_statements(settings, prepared: bool) -> None:  # type: ignore[no-untyped-def]
    """The rows a statement read are the caller's: the cursor kept for the next statement
    holds none of them (a window of long messages was held, megabytes per connection,
    until the connection's next statement), after an error inside the block too."""
    settings.AGENTMEMORY = {"PREPARED_STATEMENTS": prepared}
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("lorem ipsum " * 20_000), ChatMessage.ai("noted")] * 2)
    for _ in range(2):  # the second time prepared, where statements are
        window = ContextWindowBuilder(conv.pk).build(max_tokens=100_000)
    assert len(window.messages) == 4
    kept = _raw_cursor()
    assert kept.pgresult is None
    with pytest.raises(ValueError), statement_cursor("default") as cursor:
        cursor.execute("SELECT generate_series(1, 1000)")
        raise ValueError("the caller failed before reading the rows")
    assert _raw_cursor() is kept and kept.pgresult is None
