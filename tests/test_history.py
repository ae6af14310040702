"""``PersistentChatHistory``: ordering, appends at a constant number of queries, refusal of
bad input with nothing stored, tool calls that wait and results that come late, reading,
clearing, async access and deletion."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.history import MessageNotFound, PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary
from tests.factories import ConversationFactory, turn

pytestmark = pytest.mark.django_db


def snapshot(conv: Conversation) -> tuple:
    """Everything an append may change: the messages and the conversation's counters."""
    row = Conversation.objects.values(
        "last_seq",
        "message_count",
        "human_message_count",
        "stored_tokens",
        "pending_tool_calls",
        "has_system_prompt",
    ).get(pk=conv.pk)
    return row, list(Message.objects.filter(conversation=conv).order_by("seq").values())


@pytest.fixture
def history(conversation) -> PersistentChatHistory:  # type: ignore[no-untyped-def]
    return PersistentChatHistory(conversation)


# -- order ---------------------------------------------------------------------------------


def test_seqs_strictly_increase_from_one_across_appends(history, conversation) -> None:  # type: ignore[no-untyped-def]
    stored = [history.add_message(ChatMessage.system("prompt"))]
    stored += history.add_messages(turn(0, tool=True))
    stored.append(history.add_message(ChatMessage.human("alone")))
    stored += history.add_messages(turn(1))
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    assert [m.seq for m in history.get_messages()] == list(range(1, len(stored) + 1))
    conversation.refresh_from_db()
    assert conversation.last_seq == conversation.message_count == len(stored)
    assert conversation.human_message_count == 3
    assert conversation.stored_tokens == sum(m.token_count for m in stored) > 0
    assert conversation.has_system_prompt


def test_round_trip_keeps_every_field(history) -> None:  # type: ignore[no-untyped-def]
    call = ToolCall(id="c1", name="search", arguments={"q": "x", "n": [1, 2], "deep": {"ok": True}})
    sent = [
        ChatMessage.human("hi", metadata={"client": "web"}),
        ChatMessage.ai(None, [call], metadata={"model": "m", "usage": {"input_tokens": 3}}),
        ChatMessage.tool("found", tool_call_id="c1", name="search"),
        ChatMessage.ai(""),
    ]
    history.add_messages(sent)
    got = history.get_messages()
    assert [(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, dict(m.metadata)) for m in got] == [
        (m.role, m.content, m.tool_calls, m.tool_call_id, m.name, dict(m.metadata)) for m in sent
    ]
    assert got[1].content is None and got[3].content == ""


def test_parallel_results_may_arrive_in_later_batches_and_any_order(history, conversation) -> None:  # type: ignore[no-untyped-def]
    calls = [ToolCall(id="a", name="t"), ToolCall(id="b", name="t"), ToolCall(id="c", name="t")]
    history.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, calls)])
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"a": 2, "b": 2, "c": 2}
    history.add_message(ChatMessage.tool("C", tool_call_id="c"))
    history.add_messages([ChatMessage.tool("A", tool_call_id="a"), ChatMessage.tool("B", tool_call_id="b")])
    history.add_message(ChatMessage.ai("done"))
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {}
    rows = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    assert [r.exchange_seq for r in rows] == [None, 2, 2, 2, 2, None]


# -- constant cost -------------------------------------------------------------------------


def _append_queries(n: int) -> int:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.human("warm up"))  # the counter is built once per process
    batch = []
    for i in range(n):
        batch.append(ChatMessage.human(f"q{i}") if i % 2 == 0 else ChatMessage.ai(f"a{i}"))
    with CaptureQueriesContext(connection) as ctx:
        stored = history.add_messages(batch)
    assert len(stored) == n
    return len(ctx.captured_queries)


def test_appending_n_messages_costs_a_constant_number_of_queries(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    one, fifty = _append_queries(1), _append_queries(50)
    assert one == fifty
    # lock the conversation row, insert the batch, update the counters (+ savepoint
    # statements when the caller is already inside a transaction, as tests are)
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    with django_assert_max_num_queries(5):
        history.add_messages([ChatMessage.human(f"q{i}") for i in range(50)])
    assert Message.objects.filter(conversation=conv).count() == 50


@pytest.mark.postgres
def test_appending_thousands_of_messages_is_one_insert_on_postgresql(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    # SQLite caps the parameters of one statement (999), so Django splits bulk inserts
    # there every ~80 rows; PostgreSQL takes the whole batch in one statement.
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    with django_assert_max_num_queries(5):
        history.add_messages([ChatMessage.human(f"q{i}") for i in range(2_000)])
    assert Message.objects.filter(conversation=conv).count() == 2_000


@pytest.mark.postgres
def test_appends_change_the_conversation_row_in_place_on_postgresql() -> None:
    # Every append moves the conversation's counters and ``updated_at``. When none of the
    # columns it changes is indexed, PostgreSQL updates the row heap-only (HOT): no new entry
    # in any of the table's indexes. An index on ``updated_at`` (say, for listing) would
    # double the cost of every append; this pins that no such index comes back.
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)

    def updates() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
                "pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
                [Conversation._meta.db_table] * 2,
            )
            return cursor.fetchone()

    before = updates()
    history.add_message(ChatMessage.system("You are terse."))
    history.add_message(ChatMessage.human("weather?"))
    history.add_message(ChatMessage.ai(None, [ToolCall(id="c1", name="weather", arguments={})]))
    history.add_message(ChatMessage.tool("sunny", tool_call_id="c1"))
    history.add_messages([ChatMessage.ai("Sunny."), ChatMessage.human("thanks")])
    updated, hot = (after - start for after, start in zip(updates(), before, strict=True))
    assert updated == 5
    assert hot == updated


def test_exchange_with_many_results_is_still_constant_cost(history) -> None:  # type: ignore[no-untyped-def]
    calls = [ToolCall(id=f"c{i}", name="t", arguments={"i": i}) for i in range(40)]
    batch = [ChatMessage.human("q"), ChatMessage.ai(None, calls)]
    batch += [ChatMessage.tool(str(i), tool_call_id=f"c{i}") for i in range(40)]
    with CaptureQueriesContext(connection) as ctx:
        history.add_messages(batch)
    assert len(ctx.captured_queries) <= 5


# -- bad input refused, nothing stored -----------------------------------------------------


def _bad(kind: str) -> ChatMessage:
    return {
        "unknown role": ChatMessage(role="robot", content="beep"),  # type: ignore[arg-type]
        "unmatched tool result": ChatMessage.tool("42", tool_call_id="nobody_asked"),
        "arguments as JSON string": ChatMessage.ai(None, [ToolCall(id="c9", name="t", arguments='{"a": 1}')]),  # type: ignore[arg-type]
        "arguments as list": ChatMessage.ai(None, [ToolCall(id="c9", name="t", arguments=[1, 2])]),  # type: ignore[arg-type]
        "arguments not JSON": ChatMessage.ai(
            None, [ToolCall(id="c9", name="t", arguments={"when": object()})]
        ),
        "NUL in content": ChatMessage.human("null\x00byte"),
        "NUL in name": ChatMessage.tool("r", tool_call_id="c0", name="to\x00ol"),
        "NUL in arguments": ChatMessage.ai(None, [ToolCall(id="c9", name="t", arguments={"q": "a\x00b"})]),
        "NUL in argument key": ChatMessage.ai(None, [ToolCall(id="c9", name="t", arguments={"a\x00": 1})]),
        "NUL in tool name": ChatMessage.ai(None, [ToolCall(id="c9", name="t\x00", arguments={})]),
        "duplicate call ids": ChatMessage.ai(None, [ToolCall(id="d", name="t"), ToolCall(id="d", name="t")]),
        "tool calls on a human message": ChatMessage(
            role=Role.HUMAN, content="x", tool_calls=(ToolCall("z", "t"),)
        ),
        "human without content": ChatMessage(role=Role.HUMAN, content=None),
    }[kind]


BAD_KINDS = [
    "unknown role",
    "unmatched tool result",
    "arguments as JSON string",
    "arguments as list",
    "arguments not JSON",
    "NUL in content",
    "NUL in name",
    "NUL in arguments",
    "NUL in argument key",
    "NUL in tool name",
    "duplicate call ids",
    "tool calls on a human message",
    "human without content",
]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_message_refuses_the_whole_batch(kind: str, history, conversation) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human("before"), ChatMessage.ai("ok")])
    before = snapshot(conversation)
    good = [
        ChatMessage.human("q"),
        ChatMessage.ai(None, [ToolCall(id="c0", name="tool", arguments={})]),
    ]
    with pytest.raises(InvalidMessageError) as info:
        history.add_messages([*good, _bad(kind), ChatMessage.ai("after")])
    assert info.value.index == 2
    assert str(info.value).startswith("message 2: ")
    assert snapshot(conversation) == before


def test_errors_say_what_is_wrong(history) -> None:  # type: ignore[no-untyped-def]
    cases = {
        "unknown role": "unknown role 'robot'",
        "unmatched tool result": "answers no earlier unanswered tool call",
        "arguments as JSON string": "must be a JSON object",
        "NUL in content": "NUL",
        "NUL in arguments": "NUL",
    }
    for kind, words in cases.items():
        with pytest.raises(InvalidMessageError, match=words):
            history.add_message(_bad(kind))
    assert Message.objects.count() == 0


def test_content_over_the_configured_maximum_is_refused(history, conversation) -> None:  # type: ignore[no-untyped-def]
    with override_settings(AGENTMEMORY={"MAX_MESSAGE_CHARS": 10}):
        history.add_message(ChatMessage.human("x" * 10))
        before = snapshot(conversation)
        with pytest.raises(InvalidMessageError, match="MAX_MESSAGE_CHARS") as info:
            history.add_messages([ChatMessage.ai("fine"), ChatMessage.tool("y" * 11, tool_call_id="c")])
        assert info.value.index == 1
        assert snapshot(conversation) == before
    history.add_message(ChatMessage.ai("y" * 11))  # the default maximum is far larger


def test_messages_may_follow_a_pending_tool_call_and_the_late_result_is_linked_to_it(
    history, conversation
) -> None:  # type: ignore[no-untyped-def]
    """An approval flow: the user goes on talking while a call waits; each later message is
    stored in the order it happened, and the result, stored last, still belongs to its call."""
    calls = [ToolCall(id="a", name="t"), ToolCall(id="b", name="t")]
    history.add_messages(
        [ChatMessage.human("go"), ChatMessage.ai(None, calls), ChatMessage.tool("A", tool_call_id="a")]
    )
    stored = history.add_messages(
        [ChatMessage.human("next question"), ChatMessage.ai("plain reply"), ChatMessage.system("note")]
    )
    assert [m.seq for m in stored] == [4, 5, 6]
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"b": 2}
    late = history.add_message(ChatMessage.tool("B", tool_call_id="b"))
    assert late.seq == 7
    rows = {r.seq: r for r in Message.objects.filter(conversation=conversation)}
    assert [rows[s].exchange_seq for s in range(1, 8)] == [None, 2, 2, None, None, None, 2]
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {} and conversation.human_message_count == 2


def test_new_tool_calls_while_earlier_calls_are_pending_open_a_second_exchange(history, conversation) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, [ToolCall(id="a1", name="f")])])
    history.add_messages(
        [ChatMessage.human("and this?"), ChatMessage.ai(None, [ToolCall(id="b1", name="f")])]
    )
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"a1": 2, "b1": 4}
    history.add_messages([ChatMessage.tool("B", tool_call_id="b1"), ChatMessage.tool("A", tool_call_id="a1")])
    rows = {r.seq: r.exchange_seq for r in Message.objects.filter(conversation=conversation)}
    assert rows == {1: None, 2: 2, 3: None, 4: 4, 5: 4, 6: 2}
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {}


def test_a_call_id_still_pending_in_another_exchange_is_refused(history, conversation) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, [ToolCall(id="a1", name="f")])])
    history.add_message(ChatMessage.human("meanwhile"))
    before = snapshot(conversation)
    with pytest.raises(InvalidMessageError, match=r"\['a1'\] are already awaiting results") as info:
        history.add_messages(
            [ChatMessage.ai(None, [ToolCall(id="x", name="f"), ToolCall(id="a1", name="f")])]
        )
    assert info.value.index == 0
    assert snapshot(conversation) == before
    # once answered, the id may be used again: a result then answers the newest call
    history.add_message(ChatMessage.tool("A", tool_call_id="a1"))
    again = history.add_messages([ChatMessage.ai(None, [ToolCall(id="a1", name="f")])])
    assert Message.objects.get(conversation=conversation, seq=again[0].seq).exchange_seq == again[0].seq


def test_a_legacy_import_lets_a_reused_call_id_supersede_the_unanswered_call(history, conversation) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, [ToolCall(id="a1", name="f")])])
    history.add_message(ChatMessage.human("meanwhile"))
    [newer] = history.add_messages(
        [ChatMessage.ai(None, [ToolCall(id="a1", name="f")])], validate_tool_pairs=False
    )
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"a1": newer.seq}
    [result] = history.add_messages([ChatMessage.tool("A", tool_call_id="a1")])
    assert Message.objects.get(conversation=conversation, seq=result.seq).exchange_seq == newer.seq


def test_result_answering_an_already_answered_call_is_refused(history, conversation) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, [ToolCall(id="a", name="t")])])
    history.add_message(ChatMessage.tool("A", tool_call_id="a"))
    before = snapshot(conversation)
    with pytest.raises(InvalidMessageError, match="answers no earlier unanswered"):
        history.add_message(ChatMessage.tool("A again", tool_call_id="a"))
    assert snapshot(conversation) == before


def test_result_before_its_call_in_one_batch_is_refused(history) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidMessageError) as info:
        history.add_messages(
            [ChatMessage.tool("A", tool_call_id="a"), ChatMessage.ai(None, [ToolCall(id="a", name="t")])]
        )
    assert info.value.index == 0
    assert Message.objects.count() == 0


def test_relaxed_import_stores_orphans_explicitly(conversation) -> None:  # type: ignore[no-untyped-def]
    legacy = [
        ChatMessage.human("q"),
        ChatMessage.tool("lost result", tool_call_id="gone"),
        ChatMessage.ai(None, [ToolCall(id="x", name="t"), ToolCall(id="y", name="t")]),
        ChatMessage.tool("X", tool_call_id="x"),
        ChatMessage.human("next, while y never got its result"),
    ]
    strict = PersistentChatHistory(conversation)
    with pytest.raises(InvalidMessageError):
        strict.add_messages(legacy)
    assert Message.objects.filter(conversation=conversation).count() == 0

    PersistentChatHistory(conversation, validate_tool_pairs=False).add_messages(legacy)
    rows = {r.seq: r for r in Message.objects.filter(conversation=conversation)}
    assert len(rows) == 5
    assert rows[2].is_orphan and rows[2].exchange_seq is None
    assert [rows[s].exchange_seq for s in (3, 4)] == [3, 3] and not rows[4].is_orphan
    conversation.refresh_from_db()
    assert conversation.pending_tool_calls == {"y": 3}
    # a late result is linked in either mode; an unanswerable one is an orphan only when relaxed
    assert strict.add_message(ChatMessage.tool("late", tool_call_id="y")).seq == 6
    assert Message.objects.get(conversation=conversation, seq=6).exchange_seq == 3
    strict.add_messages([ChatMessage.tool("late again", tool_call_id="y")], validate_tool_pairs=False)
    assert Message.objects.get(conversation=conversation, seq=7).is_orphan
    with pytest.raises(InvalidMessageError):
        strict.add_message(ChatMessage.tool("late again", tool_call_id="y"))


def test_relaxed_import_still_refuses_malformed_messages(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation, validate_tool_pairs=False)
    for kind in ("unknown role", "NUL in content", "arguments as list"):
        with pytest.raises(InvalidMessageError):
            history.add_messages([ChatMessage.human("ok"), _bad(kind)])
    assert Message.objects.filter(conversation=conversation).count() == 0


def test_non_chatmessage_input_is_refused(history) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidMessageError, match="expected a ChatMessage"):
        history.add_messages([ChatMessage.human("ok"), {"role": "user", "content": "dict"}])  # type: ignore[list-item]
    assert Message.objects.count() == 0


def test_append_to_a_missing_conversation_raises(conversation) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conversation.pk)
    Conversation.objects.filter(pk=conversation.pk).delete()
    with pytest.raises(ConversationNotFound):
        history.add_message(ChatMessage.human("anyone?"))
    with pytest.raises(ConversationNotFound):
        PersistentChatHistory(uuid.uuid4())
    assert Message.objects.count() == 0


# -- reading -----------------------------------------------------------------------------


def test_history_accepts_the_public_uuid(conversation) -> None:  # type: ignore[no-untyped-def]
    PersistentChatHistory(conversation.uuid).add_message(ChatMessage.human("by uuid"))
    PersistentChatHistory(str(conversation.uuid)).add_message(ChatMessage.ai("by string"))
    assert [m.content for m in PersistentChatHistory(conversation.pk).get_messages()] == [
        "by uuid",
        "by string",
    ]


def test_messages_after(history, conversation) -> None:  # type: ignore[no-untyped-def]
    stored = history.add_messages(turn(0, tool=True) + turn(1))
    assert [m.seq for m in history.messages_after(None)] == [m.seq for m in stored]
    third = stored[2]
    assert [m.seq for m in history.messages_after(third.id)] == [m.seq for m in stored[3:]]
    assert history.messages_after(stored[-1].id) == []
    other = PersistentChatHistory(ConversationFactory())
    foreign = other.add_message(ChatMessage.human("elsewhere"))
    with pytest.raises(MessageNotFound, match="not in conversation"):
        history.messages_after(foreign.id)
    with pytest.raises(MessageNotFound) as info:
        history.messages_after(10**12)
    assert not isinstance(info.value, ConversationNotFound)  # the conversation exists
    assert other.messages_after(foreign.id) == []


def test_get_messages_limit_returns_the_newest_oldest_first(history) -> None:  # type: ignore[no-untyped-def]
    stored = history.add_messages([ChatMessage.human(f"m{i}") for i in range(30)])
    newest = history.get_messages(limit=5)
    assert [m.content for m in newest] == [f"m{i}" for i in range(25, 30)]
    assert [m.seq for m in newest] == [26, 27, 28, 29, 30]
    assert history.get_messages(limit=0) == []
    assert [m.seq for m in history.get_messages(limit=100)] == [m.seq for m in stored]
    assert history.messages == history.get_messages()
    with pytest.raises(ValueError, match="limit"):
        history.get_messages(limit=-1)


def test_get_messages_limit_reads_only_what_it_returns(history) -> None:  # type: ignore[no-untyped-def]
    history.add_messages([ChatMessage.human(f"m{i}") for i in range(300)])
    with CaptureQueriesContext(connection) as ctx:
        history.get_messages(limit=3)
    assert len(ctx.captured_queries) == 1
    assert "LIMIT 3" in ctx.captured_queries[0]["sql"].upper()


# -- clear -------------------------------------------------------------------------------


def test_clear_deletes_messages_and_summaries_and_never_reuses_seqs(history, conversation) -> None:  # type: ignore[no-untyped-def]
    for i in range(4):
        history.add_messages(turn(i))
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conversation.pk,
        ScriptedChatModel(["The user asked questions 0 to 2."]),
        history,
    )
    summary = compactor.compact()
    assert summary is not None
    other = PersistentChatHistory(ConversationFactory())
    other.add_message(ChatMessage.human("untouched"))

    history.clear()
    conversation.refresh_from_db()
    assert history.get_messages() == []
    assert not Summary.objects.filter(conversation=conversation).exists()
    assert conversation.summary is None
    assert (conversation.message_count, conversation.human_message_count, conversation.stored_tokens) == (
        0,
        0,
        0,
    )
    assert conversation.last_seq == 8
    again = history.add_messages(turn(9))
    assert [m.seq for m in again] == [9, 10]
    assert len(other.get_messages()) == 1


# -- async -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_async_variants() -> None:
    conv = Conversation.objects.create(agent_key="async")
    history = PersistentChatHistory(conv)

    async def scenario():  # type: ignore[no-untyped-def]
        try:
            first = await history.aadd_message(ChatMessage.human("async hello"))
            rest = await history.aadd_messages(turn(1, tool=True))
            everything = await history.aget_messages()
            newest = await history.aget_messages(limit=2)
            after = await history.amessages_after(first.id)
            with pytest.raises(InvalidMessageError):
                await history.aadd_messages([ChatMessage.human("fine"), ChatMessage.human("bad\x00")])
            return first, rest, everything, newest, after
        finally:
            # the ORM ran in sync_to_async's worker thread: close that thread's connection
            await sync_to_async(connections.close_all)()

    first, rest, everything, newest, after = asyncio.run(scenario())
    assert first.seq == 1 and [m.seq for m in rest] == [2, 3, 4, 5]
    assert [m.seq for m in everything] == [1, 2, 3, 4, 5]
    assert [m.seq for m in newest] == [4, 5]
    assert [m.seq for m in after] == [2, 3, 4, 5]
    assert Message.objects.filter(conversation=conv).count() == 5

    async def clear():  # type: ignore[no-untyped-def]
        try:
            await history.aclear()
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(clear())
    assert Message.objects.filter(conversation=conv).count() == 0


# -- S2: deletion ------------------------------------------------------------------------


def test_deleting_a_conversation_removes_its_messages_and_summaries(history, conversation) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        history.add_messages(turn(i, tool=True))
    LLMMemoryCompactor(
        Conversation.objects, conversation.pk, ScriptedChatModel(["Earlier turns."]), history
    ).compact()
    assert Summary.objects.filter(conversation=conversation).count() == 1
    kept = PersistentChatHistory(ConversationFactory())
    kept.add_messages(turn(0))
    pk = conversation.pk
    conversation.delete()
    assert not Message.objects.filter(conversation_id=pk).exists()
    assert not Summary.objects.filter(conversation_id=pk).exists()
    assert len(kept.get_messages()) == 2
    with pytest.raises(ConversationNotFound):
        history.add_message(ChatMessage.human("late write"))
    with pytest.raises(ConversationNotFound):
        history.clear()
    assert not Message.objects.filter(conversation_id=pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "message",
    [
        ChatMessage.human("lone surrogate \ud800"),
        ChatMessage.human("hi", metadata={"k": "\udfff"}),
        ChatMessage.human("hi", metadata={1: "a", "1": "b"}),
        ChatMessage.human("hi", metadata="not an object"),  # type: ignore[arg-type]
        ChatMessage.ai(None, [ToolCall(id="\ud800", name="f", arguments={})]),
        ChatMessage.ai(None, [ToolCall(id="c1", name="f" * 300, arguments={})]),
        ChatMessage.ai(None, [ToolCall(id="c1", name="f", arguments={"x": float("nan")})]),
    ],
    ids=[
        "surrogate-content",
        "surrogate-metadata",
        "int-key",
        "metadata-type",
        "surrogate-id",
        "long-name",
        "nan",
    ],
)
def test_unstorable_text_and_json_are_refused_before_anything_is_written(message) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create()
    with pytest.raises(InvalidMessageError):
        PersistentChatHistory(conv).add_messages([ChatMessage.human("first"), message])
    assert not Message.objects.filter(conversation=conv).exists()


@pytest.mark.django_db
def test_deeply_nested_arguments_are_refused_not_a_recursion_error() -> None:
    nested: dict = {}
    for _ in range(1000):
        nested = {"a": nested}
    conv = Conversation.objects.create()
    with pytest.raises(InvalidMessageError, match="nested deeper"):
        PersistentChatHistory(conv).add_message(
            ChatMessage.ai(None, [ToolCall(id="c", name="f", arguments=nested)])
        )


@pytest.mark.django_db
def test_cancel_pending_tool_calls_answers_every_pending_exchange_in_call_order() -> None:
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv)
    # "z1" sorts first but was called last: results follow the calls, not the ids
    history.add_messages(
        [
            ChatMessage.human("go"),
            ChatMessage.ai(None, [ToolCall(id="a2", name="f"), ToolCall(id="a1", name="g")]),
        ]
    )
    history.add_messages(
        [ChatMessage.human("are you there?"), ChatMessage.ai(None, [ToolCall(id="0z", name="f")])]
    )
    results = history.cancel_pending_tool_calls("the client disconnected")
    assert [(m.tool_call_id, m.content, m.seq) for m in results] == [
        ("a2", "Error: the client disconnected", 5),
        ("a1", "Error: the client disconnected", 6),
        ("0z", "Error: the client disconnected", 7),
    ]
    assert dict(
        Message.objects.filter(conversation=conv, role="tool").values_list("seq", "exchange_seq")
    ) == {
        5: 2,
        6: 2,
        7: 4,
    }
    conv.refresh_from_db()
    assert conv.pending_tool_calls == {} and conv.pending_calls() == []
    assert history.cancel_pending_tool_calls() == []


@pytest.mark.postgres
def test_every_append_is_one_statement_on_postgresql(
    history, conversation, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    """Plain messages, tool calls, results in the same batch and results arriving later each
    cost one round trip, and store exactly what the locked path would."""
    with django_assert_num_queries(1):
        history.add_messages([ChatMessage.system("prompt"), ChatMessage.human("q")])
    with django_assert_num_queries(1):
        history.add_messages(
            [
                ChatMessage.ai(None, [ToolCall("a", "t"), ToolCall("b", "t")]),
                ChatMessage.tool("A", tool_call_id="a"),
            ]
        )
    with django_assert_num_queries(1):
        history.add_message(ChatMessage.human("meanwhile"))
    with django_assert_num_queries(1):
        late = history.add_message(ChatMessage.tool("B", tool_call_id="b"))
    assert (late.seq, late.tool_call_id) == (6, "b")
    rows = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    assert [(r.seq, r.role, r.exchange_seq) for r in rows] == [
        (1, "system", None),
        (2, "human", None),
        (3, "ai", 3),
        (4, "tool", 3),
        (5, "human", None),
        (6, "tool", 3),
    ]
    assert rows[2].tool_calls == [
        {"id": "a", "name": "t", "arguments": {}},
        {"id": "b", "name": "t", "arguments": {}},
    ]
    conversation.refresh_from_db()
    assert conversation.has_system_prompt and conversation.pending_tool_calls == {}
    assert (conversation.last_seq, conversation.message_count, conversation.human_message_count) == (6, 6, 2)
    assert conversation.stored_tokens == sum(r.token_count for r in rows)
    # a refusal still names the message at fault and stores nothing
    before = snapshot(conversation)
    with pytest.raises(InvalidMessageError, match="answers no earlier unanswered") as info:
        history.add_messages([ChatMessage.human("x"), ChatMessage.tool("B again", tool_call_id="b")])
    assert info.value.index == 1 and snapshot(conversation) == before
    with pytest.raises(ConversationNotFound):
        PersistentChatHistory(conversation.pk + 1000).add_message(ChatMessage.human("nobody"))


def test_ai_message_takes_tool_calls_as_mappings(conversation) -> None:  # type: ignore[no-untyped-def]
    """Tool calls given as plain dicts (as the providers' JSON has them) become ``ToolCall``s
    when the message is made, not an AttributeError later in an agent's tool loop."""
    message = ChatMessage.ai(None, tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}])
    assert message.tool_calls == (ToolCall(id="c1", name="lookup", arguments={"q": "x"}),)
    history = PersistentChatHistory(conversation)
    history.add_messages([ChatMessage.human("find x"), message])
    conversation.refresh_from_db()
    assert [call.tool_call_id for call in conversation.pending_calls()] == ["c1"]
