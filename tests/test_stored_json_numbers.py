"""Numbers in JSON columns that no Python value holds never make a read fail.

The API refuses NaN and infinities and numbers it cannot read, but raw SQL (or a data
migration) can store ``1e400`` (Python reads it as infinity, which no JSON renderer writes:
the message list, the conversation, search, facts and exports answered a 500), an integer of
5,000 digits (PostgreSQL's ``jsonb`` holds it; Python refuses to convert more than 4,300
digits, so every read of the row failed: admin pages, search, fact recall, and the memory
block, which came out empty). Each is read as the text it was stored as; a 400-digit integer,
which Python holds, is read as the integer.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, StoredJSONDecoder, ToolCall
from agentmemory.models import Conversation, Fact, Message, ModelCall
from agentmemory.recall import search_messages

pytestmark = pytest.mark.django_db

DIGITS_400 = "4" + "0" * 399
DIGITS_5000 = "5" + "0" * 4999

#: JSON text of a stored number -> what a read gives for it
NUMBERS = {
    "1e400": "1e400",
    "-1e400": "-1e400",
    DIGITS_400: int(DIGITS_400),
    DIGITS_5000: DIGITS_5000,
}


def _stored(number: str) -> object:
    """What a read of ``number`` gives: on PostgreSQL ``jsonb`` keeps a number as ``numeric``
    and writes ``1e400`` back as its 401 digits, an integer Python holds."""
    if connection.vendor == "postgresql" and number.lstrip("-") == "1e400":
        return int(number.replace("1e400", "1" + "0" * 400))
    return NUMBERS[number]


def _write(table: str, column: str, pk: int, text: str) -> None:
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = %s{cast} WHERE id = %s", [text, pk])


@pytest.fixture(params=sorted(NUMBERS, key=len), ids=lambda n: n[:8])
def number(request) -> str:  # type: ignore[no-untyped-def]
    return str(request.param)


@pytest.fixture
def stored(user, number):  # type: ignore[no-untyped-def]
    """A conversation, a tool call, a fact and a model call whose JSON columns hold ``number``
    where a row written by hand would put it."""
    conv = Conversation.objects.create(owner=user, title="Ferry")
    history = PersistentChatHistory(conv)
    history.add_messages(
        [
            ChatMessage.human("When does the ferry to the island leave?"),
            ChatMessage.ai(None, [ToolCall(id="t1", name="timetable", arguments={"route": 1})]),
            ChatMessage.tool("noon", tool_call_id="t1", name="timetable"),
            ChatMessage.ai("The ferry to the island leaves at noon."),
            ChatMessage.human("And the ferry back?"),
        ]
    )
    metadata = (
        f'{{"n": {number}, "session_date": {number}, "is_error": {number}, "thinking": [{{"n": {number}}}]}}'
    )
    for message in Message.objects.filter(conversation=conv):
        _write(Message._meta.db_table, "metadata", message.pk, metadata)
    ai = Message.objects.get(conversation=conv, seq=2)
    _write(
        Message._meta.db_table,
        "tool_calls",
        ai.pk,
        f'[{{"id": "t1", "name": "timetable", "arguments": {{"route": {number}}}}}]',
    )
    _write(Conversation._meta.db_table, "metadata", conv.pk, f'{{"n": {number}}}')
    fact = KnowledgeMemory(user).store("The ferry to the island leaves at noon", "travel").fact
    _write(Fact._meta.db_table, "metadata", fact.pk, f'{{"n": {number}}}')
    call = ModelCall.objects.create(
        kind="chat", usage_source="provider", owner=user, conversation=conv, model="m"
    )
    _write(ModelCall._meta.db_table, "window_changes", call.pk, f'{{"n": {number}}}')
    return conv, fact, call


def test_the_decoder_reads_each_number_as_its_text_or_its_value(number) -> None:  # type: ignore[no-untyped-def]
    assert json.loads(f'{{"n": {number}, "m": [1.5, 2]}}', cls=StoredJSONDecoder) == {
        "n": NUMBERS[number],
        "m": [1.5, 2],
    }
    # JSON text no column of either database holds (SQLite's JSON_VALID refuses it too)
    assert json.loads("[NaN, Infinity, -Infinity]", cls=StoredJSONDecoder) == ["NaN", "Infinity", "-Infinity"]


def test_the_orm_reads_every_json_column(stored, number) -> None:  # type: ignore[no-untyped-def]
    conv, fact, call = stored
    message = Message.objects.get(conversation=conv, seq=1)
    assert message.metadata["n"] == _stored(number)
    assert Message.objects.get(conversation=conv, seq=2).tool_calls[0]["arguments"] == {
        "route": _stored(number)
    }
    assert Conversation.objects.get(pk=conv.pk).metadata == {"n": _stored(number)}
    assert Fact.objects.get(pk=fact.pk).metadata == {"n": _stored(number)}
    assert ModelCall.objects.get(pk=call.pk).window_changes == {"n": _stored(number)}


def test_the_api_answers_every_read(api_forced, stored, number) -> None:  # type: ignore[no-untyped-def]
    conv, fact, _ = stored
    base = f"/api/conversations/{conv.uuid}/"
    for path in (
        "/api/conversations/",
        base,
        f"{base}messages/",
        f"{base}summaries/",
        f"{base}context/",
        f"{base}model-calls/",
        "/api/facts/",
        f"/api/facts/{fact.uuid}/",
        "/api/search/?q=ferry",
    ):
        response = api_forced.get(path)
        assert response.status_code == 200, (path, response.content[:300])
    listed = api_forced.get(f"{base}messages/").json()["results"]
    assert listed[0]["metadata"]["n"] == _stored(number)
    export = api_forced.get(f"{base}export/")
    assert export.status_code == 200
    document = json.loads(b"".join(export.streaming_content))
    assert document["messages"][0]["metadata"]["n"] == _stored(number)


def test_the_admin_shows_every_page(admin_client, stored) -> None:  # type: ignore[no-untyped-def]
    conv, fact, _ = stored
    message = Message.objects.filter(conversation=conv).first()
    assert message is not None
    for path in (
        f"/admin/agentmemory/conversation/{conv.pk}/change/",
        f"/admin/agentmemory/conversation/{conv.pk}/transcript/",
        f"/admin/agentmemory/conversation/{conv.pk}/context/",
        "/admin/agentmemory/message/",
        f"/admin/agentmemory/message/{message.pk}/change/",
        "/admin/agentmemory/fact/",
        f"/admin/agentmemory/fact/{fact.pk}/change/",
        "/admin/agentmemory/modelcall/",
    ):
        response = admin_client.get(path, follow=True)
        assert response.status_code == 200, path


def test_windows_recall_and_the_memory_block_read_them(user, stored) -> None:  # type: ignore[no-untyped-def]
    conv, _, _ = stored
    window = ContextWindowBuilder(conv).build(max_tokens=2000)
    assert [m.role.value for m in window.messages] == ["human", "ai", "tool", "ai", "human"]
    assert search_messages("ferry island", owner=user)
    assert [hit.fact.content for hit in KnowledgeMemory(user).recall("ferry island")] == [
        "The ferry to the island leaves at noon"
    ]
    assert "ferry" in KnowledgeMemory(user).build_context()
    other = Conversation.objects.create(owner=user)
    PersistentChatHistory(other).add_message(ChatMessage.human("When does the ferry to the island leave?"))
    block = ContextWindowBuilder(other, memory_recall=True).build(max_tokens=2000)
    memory = [m.content for m in block.messages if m.content and m.content.startswith("<memory>")]
    assert memory and "leaves at noon" in memory[0]
