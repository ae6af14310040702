"""Seqs, counts and ids at the edge of their 64-bit columns (2**63 - 1) never make a request
fail with a 500 or a Python call with a driver's error.

- An append to a conversation whose ``last_seq`` is 2**63 - 1 (set by raw SQL or a data
  migration) failed with "bigint out of range" on PostgreSQL and ``OverflowError`` on SQLite:
  a 500 from the API. It is refused with ``ConversationFull`` (a 409 ``conversation_full``),
  and a message or token count at that bound with ``ConversationStateError`` (a 409
  ``conversation_inconsistent``), nothing stored, through the statements sent as text, their
  server-side functions and the locked path alike, inside a transaction too.
- A ``last_seq`` below a stored seq made the next append collide with the unique
  ``(conversation, seq)`` constraint: an ``IntegrityError``, a 500.
- ``?after_seq=`` stopped at 10^9 although the message list shows any seq.
- A window without history in a conversation stored above seq 2**62 reported nothing
  uncovered: every message was left out silently.
- Reads of a conversation id no 64-bit column holds raised ``OverflowError`` on SQLite,
  and ``get_recent_entries(limit=2**64)`` "datatype mismatch".
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.models import F

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import (
    ConversationFull,
    ConversationNotFound,
    ConversationStateError,
    InvalidMessageError,
    MessageNotFound,
)
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.store import functions
from agentmemory.validation import MAX_ID

pytestmark = pytest.mark.django_db


def _conversation(owner, *, top: int = MAX_ID) -> Conversation:  # type: ignore[no-untyped-def]
    """A conversation of four messages whose seqs end at ``top``, as raw SQL leaves it."""
    conv = Conversation.objects.create(owner=owner, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.system("Be brief."),
            ChatMessage.human("hi"),
            ChatMessage.ai("hello"),
            ChatMessage.human("bye"),
        ]
    )
    shift = top - 4
    Message.objects.filter(conversation=conv).update(seq=F("seq") + shift)
    Conversation.objects.filter(pk=conv.pk).update(
        last_seq=top, pinned_seq=1 + shift, pinned_last_seq=1 + shift
    )
    conv.refresh_from_db()
    return conv


def _state(conv: Conversation) -> tuple[object, ...]:
    row = Conversation.objects.values_list(
        "last_seq", "message_count", "human_message_count", "stored_tokens"
    ).get(pk=conv.pk)
    return (*row, Message.objects.filter(conversation=conv).count())


BATCHES = {
    "human": [ChatMessage.human("more")],
    "system": [ChatMessage.system("note")],
    "tool call": [ChatMessage.ai(None, [ToolCall(id="c1", name="lookup", arguments={})])],
    "batch": [ChatMessage.human("more"), ChatMessage.ai("sure")],
    "batch with calls": [
        ChatMessage.ai(None, [ToolCall(id="c1", name="lookup", arguments={})]),
        ChatMessage.tool("found", tool_call_id="c1", name="lookup"),
    ],
}


def _warm_up(owner) -> None:  # type: ignore[no-untyped-def]
    """One append elsewhere: the connection finds the append's functions and calls them after."""
    PersistentChatHistory(Conversation.objects.create(owner=owner)).add_message(ChatMessage.human("warm up"))


def _through_functions_and_text() -> list[bool]:
    """On PostgreSQL, each case runs once through the append's server-side functions and once
    with the statements sent as text; elsewhere once."""
    return [True, False] if connection.vendor == "postgresql" else [False]


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_an_append_past_the_largest_seq_is_refused_and_stores_nothing(user, monkeypatch, batch) -> None:  # type: ignore[no-untyped-def]
    for through_functions in _through_functions_and_text():
        conv = _conversation(user)
        before = _state(conv)
        history = PersistentChatHistory(conv)
        with monkeypatch.context() as patch:
            if through_functions:
                _warm_up(user)
            else:
                patch.setattr(functions, "known", lambda raw, key: False)
            with pytest.raises(ConversationFull) as raised:
                history.add_messages(BATCHES[batch])
        assert isinstance(raised.value, InvalidMessageError)  # refused before anything was stored
        assert "is full" in str(raised.value) and "new conversation" in str(raised.value)
        assert _state(conv) == before


def test_a_batch_that_would_pass_the_largest_seq_is_refused_whole_and_one_that_fits_is_stored(user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user, top=MAX_ID - 1)
    before = _state(conv)
    history = PersistentChatHistory(conv)
    with pytest.raises(ConversationFull, match="1 more message can follow, not 2"):
        history.add_messages([ChatMessage.human("one"), ChatMessage.ai("two")])
    assert _state(conv) == before
    (stored,) = history.add_messages([ChatMessage.human("last")])
    assert stored.seq == MAX_ID
    assert Message.objects.get(conversation=conv, seq=MAX_ID).content == "last"


def test_a_refused_append_leaves_the_callers_transaction_usable(user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user)
    with transaction.atomic():
        with pytest.raises(ConversationFull):
            PersistentChatHistory(conv).add_message(ChatMessage.human("more"))
        other = Conversation.objects.create(owner=user)
        PersistentChatHistory(other).add_message(ChatMessage.human("still works"))
    assert Message.objects.filter(conversation=other).count() == 1


def test_the_api_answers_an_append_past_the_largest_seq_with_a_409(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user)
    before = _state(conv)
    url = f"/api/conversations/{conv.uuid}/messages/"
    for body in ({"role": "human", "content": "more"}, {"messages": [{"role": "human", "content": "more"}]}):
        response = api_forced.post(url, body, format="json")
        assert response.status_code == 409, response.content
        assert response.json()["error"] == "conversation_full"
        assert "new conversation" in response.json()["detail"]
    assert _state(conv) == before


@pytest.mark.parametrize("field", ["message_count", "human_message_count", "stored_tokens"])
def test_a_count_at_the_columns_largest_value_is_named_not_a_500(api_forced, user, field) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user, top=10)
    Conversation.objects.filter(pk=conv.pk).update(**{field: MAX_ID})
    before = _state(conv)
    for through_functions in _through_functions_and_text():
        if through_functions:
            _warm_up(user)
        with pytest.raises(ConversationStateError) as raised:
            PersistentChatHistory(conv).add_message(ChatMessage.human("more"))
        assert raised.value.field == field and raised.value.value == MAX_ID
        assert "repair_conversations" in str(raised.value)
    response = api_forced.post(
        f"/api/conversations/{conv.uuid}/messages/", {"role": "human", "content": "more"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"] == "conversation_inconsistent"
    assert field in response.json()["detail"]
    assert _state(conv) == before


@pytest.mark.parametrize("batch", ["human", "tool call", "batch", "batch with calls"])
@pytest.mark.django_db(transaction=True)  # each append in its own transaction, as an API request's
def test_a_last_seq_below_a_stored_seq_is_named_not_a_500(api_forced, user, batch) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user, top=10)
    Conversation.objects.filter(pk=conv.pk).update(last_seq=7)  # seqs 8, 9 and 10 are stored
    before = _state(conv)
    for through_functions in _through_functions_and_text():
        if through_functions:
            _warm_up(user)
        with pytest.raises(ConversationStateError) as raised:
            PersistentChatHistory(conv).add_messages(BATCHES[batch])
        assert raised.value.field == "last_seq" and raised.value.value == 7
        assert _state(conv) == before
    response = api_forced.post(
        f"/api/conversations/{conv.uuid}/messages/", {"role": "human", "content": "more"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"] == "conversation_inconsistent"
    assert "last_seq" in response.json()["detail"]
    assert _state(conv) == before


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_last_seq_below_a_stored_seq_inside_a_transaction_is_named(user) -> None:  # type: ignore[no-untyped-def]
    """The one-statement append fails on the constraint and aborts the transaction: the error
    says why, and the transaction rolls back whole."""
    conv = _conversation(user, top=10)
    Conversation.objects.filter(pk=conv.pk).update(last_seq=7)
    with pytest.raises(ConversationStateError, match=r"last_seq.*roll it back"), transaction.atomic():
        PersistentChatHistory(conv).add_message(ChatMessage.human("more"))
    assert Message.objects.filter(conversation=conv).count() == 4


@pytest.mark.sqlite
def test_a_last_seq_below_a_stored_seq_inside_a_transaction_of_sqlite_is_named(user) -> None:  # type: ignore[no-untyped-def]
    """Where the append runs under its row lock in a savepoint, the caller's transaction
    goes on (on PostgreSQL the one-statement append aborts it: the test above)."""
    conv = _conversation(user, top=10)
    Conversation.objects.filter(pk=conv.pk).update(last_seq=7)
    with transaction.atomic():
        with pytest.raises(ConversationStateError, match=r"last_seq \(7\)"):
            PersistentChatHistory(conv).add_message(ChatMessage.human("more"))
        assert Message.objects.filter(conversation=conv).count() == 4


def test_after_seq_takes_any_seq_the_message_list_shows(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user)
    url = f"/api/conversations/{conv.uuid}/messages/"
    seqs = [m["seq"] for m in api_forced.get(url).json()["results"]]
    assert seqs == [MAX_ID - 3, MAX_ID - 2, MAX_ID - 1, MAX_ID]
    after = api_forced.get(url, {"after_seq": seqs[1]})
    assert after.status_code == 200
    assert [m["seq"] for m in after.json()["results"]] == seqs[2:]
    assert api_forced.get(url, {"after_seq": MAX_ID}).json()["results"] == []
    for too_large in (MAX_ID + 1, 10**30):
        refused = api_forced.get(url, {"after_seq": too_large})
        assert refused.status_code == 400
        assert refused.json()["fields"]["after_seq"] == [f"At most {MAX_ID:,}."]


def test_a_window_without_history_reports_every_message_stored_above_seq_2_to_the_62(user) -> None:  # type: ignore[no-untyped-def]
    for top in (4, MAX_ID):
        conv = _conversation(user, top=top)
        window = ContextWindowBuilder(conv).build(max_tokens=1000, max_messages=0)
        assert [m.role.value for m in window.messages] == ["system"]
        assert window.uncovered.seqs == (top - 2, top - 1, top)


@pytest.mark.parametrize("conversation_id", [MAX_ID + 1, -MAX_ID - 2, 10**30])
def test_reads_of_an_id_no_64_bit_column_holds_find_no_conversation(conversation_id) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation_id)
    assert history.get_messages() == []
    assert history.get_messages(limit=5) == []
    assert history.messages_after(None) == []
    with pytest.raises(MessageNotFound):
        history.messages_after(1)
    with pytest.raises(ConversationNotFound):
        ContextWindowBuilder(conversation_id).build(max_tokens=100)


def test_the_daily_log_takes_any_limit(user) -> None:  # type: ignore[no-untyped-def]
    memory = KnowledgeMemory(user)
    memory.store("The ferry leaves at noon", "travel")
    for limit in (MAX_ID, MAX_ID + 1, 10**30):
        assert [e["content"] for e in memory.get_recent_entries(limit=limit)] == ["The ferry leaves at noon"]
