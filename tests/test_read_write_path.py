"""The hot paths of a model call: a single append and a window build (docs/benchmarks.md).

Their cost is pinned in queries and in calls to the token counter, not in time; what they
store and return is compared with what the slower general paths give.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from agentmemory.context import ContextWindowBuilder
from agentmemory.context.packing import RowMeta
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.store.rows import _loads, _new_row
from agentmemory.store.window import read_head
from agentmemory.tokens import LengthTokenCounter
from tests.factories import ConversationFactory, turn

pytestmark = pytest.mark.django_db


class CountingCounter(LengthTokenCounter):
    """Counts as ``LengthTokenCounter`` and records the messages it was asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[ChatMessage] = []

    def count_message(self, message: ChatMessage) -> int:
        self.asked.append(message)
        return super().count_message(message)


def test_a_builder_counts_its_system_prompt_once() -> None:
    conversation = ConversationFactory()
    PersistentChatHistory(conversation).add_messages(turn(0) + turn(1))
    counter = CountingCounter()
    prompt = "You are a careful booking assistant. " * 20
    builder = ContextWindowBuilder(conversation, system_prompt=prompt, token_counter=counter)
    first, second = builder.build(2_000), builder.build(2_000)
    assert [m.text for m in counter.asked].count(prompt) == 1
    assert first.system_tokens == second.system_tokens == counter.count_message(ChatMessage.system(prompt))
    assert first.messages[0] == second.messages[0] and first.messages[0] is not second.messages[0]

    builder.system_prompt = "A shorter prompt."
    third = builder.build(2_000)
    assert third.messages[0].text == "A shorter prompt."
    assert third.system_tokens == counter.count_message(ChatMessage.system("A shorter prompt."))


def test_rows_are_named_tuples_told_apart_by_identity() -> None:
    row = _new_row(3, "tool", 7, 2, "c1", ())
    assert row == RowMeta(3, "tool", 7, 2, "c1", ()) and row.placeholder is False and row.name == ""
    assert not row.is_orphan and _new_row(4, "tool", 7, None, "c2", ()).is_orphan
    assert row is not _new_row(3, "tool", 7, 2, "c1", ())


def test_json_columns_decode_as_the_model_fields_do() -> None:
    calls = [{"id": "c1", "name": "t", "arguments": {}}]
    assert _loads(json.dumps(calls)) == calls
    assert _loads(b'{"a": 1}') == {"a": 1}
    assert _loads([1, 2]) == [1, 2]  # a driver that decodes JSON itself
    assert _loads("not json") == "not json"  # as JSONField.from_db_value leaves it
    assert _loads(None) is None


def test_the_head_page_is_the_newest_rows_newest_first() -> None:
    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    history.add_message(ChatMessage.system("pinned"))
    stored = history.add_messages([m for i in range(30) for m in turn(i, tool=i % 3 == 0)])
    head = read_head(
        "default",
        conversation.pk,
        with_pinned=True,
        budget=400,
        max_messages=None,
        max_tool_result_tokens=None,
    )
    assert head is not None and [m.text for m in head.pinned] == ["pinned"]
    seqs = [row[1] for row in head.page]
    assert seqs == sorted(seqs, reverse=True) and seqs[0] == stored[-1].seq == head.newest_seq
    # The page: the rows that start inside the room (400 tokens: the running sum before
    # them is within it), then on to the oldest AI message whose tool result is among
    # those; nothing else the packer could use.
    newest_first = sorted(history.get_messages(), key=lambda m: m.seq, reverse=True)[: head.page_size]
    before, starts_inside = 0, []
    for m in newest_first:
        if before <= 400:
            starts_inside.append(m)
        before += m.token_count or 0
    # (each result here answers the AI message stored just before it)
    reach = min((m.seq - 1 for m in starts_inside if m.role is Role.TOOL), default=None)
    expected = [m.seq for m in newest_first if m in starts_inside or (reach is not None and m.seq >= reach)]
    assert seqs == expected and head.room == 400
    assert len(seqs) < head.page_size  # trimmed: the rows past it are not sent


@pytest.mark.django_db
def test_the_head_rows_in_any_order_give_the_same_head(monkeypatch: pytest.MonkeyPatch) -> None:
    # UNION ALL promises no order: ``read_head`` puts the rows in order itself.
    import random

    from agentmemory.models import Summary
    from agentmemory.store import window as read_path

    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    history.add_messages([ChatMessage.system("pinned"), ChatMessage.system("pinned too")])
    history.add_messages([m for i in range(30) for m in turn(i, tool=i % 3 == 0)])
    summary = Summary.objects.create(
        conversation=conversation, text="so far", first_seq=1, through_seq=9, token_count=3
    )
    Conversation.objects.filter(pk=conversation.pk).update(summary=summary)
    returned: list[list[Any]] = []
    run_head = read_path._run_head

    def recording(*args: Any, **kwargs: Any) -> list[Any]:
        rows = run_head(*args, **kwargs)
        returned.append(list(rows))
        return rows

    def head() -> Any:
        return read_head(
            "default",
            conversation.pk,
            with_pinned=True,
            budget=300,
            max_messages=None,
            max_tool_result_tokens=None,
        )

    monkeypatch.setattr(read_path, "_run_head", recording)
    expected = head()
    assert expected is not None and expected.summary is not None
    assert [m.text for m in expected.pinned] == ["pinned", "pinned too"]
    rows = returned[0]
    shuffler = random.Random(7)
    for _ in range(20):
        shuffled = list(rows)
        shuffler.shuffle(shuffled)
        monkeypatch.setattr(read_path, "_run_head", lambda *args, rows=shuffled, **kwargs: list(rows))
        assert head() == expected


def test_the_head_page_reaches_back_to_the_call_of_every_result_inside_the_room() -> None:
    # A tool exchange whose results start inside the room but whose AI message starts past
    # it: the page goes on to that AI message, so the packer can cost the unit.
    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    history.add_message(ChatMessage.human("look it up"))
    history.add_message(ChatMessage.ai(None, [ToolCall(id="c1", name="t", arguments={})]))
    history.add_message(ChatMessage.tool("result " * 200, tool_call_id="c1"))
    for i in range(3):
        history.add_messages([ChatMessage.human(f"q{i}"), ChatMessage.ai(f"a{i}")])
    stored = history.get_messages()
    result = next(m for m in stored if m.role.value == "tool")
    after = sum(m.token_count or 0 for m in stored if m.seq > result.seq)
    head = read_head(
        "default",
        conversation.pk,
        with_pinned=True,
        budget=after + 1,  # the result starts inside the room and ends far past it
        max_messages=None,
        max_tool_result_tokens=None,
    )
    assert head is not None
    assert [row[1] for row in head.page][-2:] == [result.seq, result.seq - 1]  # and its AI message
    window = ContextWindowBuilder(conversation.pk).build(max_tokens=after + 1)
    assert [m.seq for m in window.history] == [m.seq for m in stored if m.seq > result.seq]


ROLE_CASES = [
    # messages appended one at a time, and the counters they leave
    ([ChatMessage.system("prompt"), ChatMessage.human("hi"), ChatMessage.ai("hello")], (3, 1, True)),
    ([ChatMessage.human("hi"), ChatMessage.system("late system note")], (2, 1, False)),
    ([ChatMessage.ai("I start"), ChatMessage.human("ok"), ChatMessage.human("again")], (3, 2, False)),
]


@pytest.mark.parametrize(("messages", "expected"), ROLE_CASES)
def test_one_message_appends_keep_the_counters_of_a_batch(messages: list[ChatMessage], expected: Any) -> None:
    one_by_one, batch = ConversationFactory(), ConversationFactory()
    singles = [PersistentChatHistory(one_by_one).add_message(m) for m in messages]
    together = PersistentChatHistory(batch).add_messages(messages)
    fields = ("last_seq", "human_message_count", "has_system_prompt", "stored_tokens", "pending_tool_calls")
    first, second = (Conversation.objects.values(*fields).get(pk=c.pk) for c in (one_by_one, batch))
    assert first == second
    assert (first["last_seq"], first["human_message_count"], first["has_system_prompt"]) == expected
    columns = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "token_count", "metadata")
    rows = [
        list(Message.objects.filter(conversation=c).order_by("seq").values_list(*columns))
        for c in (one_by_one, batch)
    ]
    assert rows[0] == rows[1]
    assert [(m.seq, m.role, m.token_count) for m in singles] == [
        (m.seq, m.role, m.token_count) for m in together
    ]


@pytest.mark.postgres
def test_a_single_append_stamps_the_message_and_the_conversation_alike() -> None:
    # One statement, one reading of the clock: the row's time is the conversation's.
    conversation = ConversationFactory()
    before = timezone.now()
    stored = PersistentChatHistory(conversation).add_message(ChatMessage.human("when?"))
    conversation.refresh_from_db()
    message = Message.objects.get(pk=stored.id)
    assert before <= message.created_at == conversation.updated_at <= timezone.now()
    assert message.conversation_id == conversation.pk


@pytest.mark.postgres
def test_a_single_append_is_one_statement_for_every_kind_of_message(django_assert_num_queries: Any) -> None:
    history = PersistentChatHistory(ConversationFactory())
    call = ToolCall(id="c1", name="lookup", arguments={"q": "x"})
    sent = [
        ChatMessage.system("prompt"),
        ChatMessage.human("hi", name="ann", metadata={"client": "web"}),
        ChatMessage.ai(None, [call], metadata={"model": "m"}),
        ChatMessage.tool(json.dumps({"ok": True}), tool_call_id="c1", name="lookup"),
        ChatMessage.ai("done"),
    ]
    returned = []
    for message in sent:
        with django_assert_num_queries(1):
            returned.append(history.add_message(message))
    back = history.get_messages()
    # what an append returns is the message as stored, read back
    assert returned == back
    assert [(m.role, m.text, m.name, dict(m.metadata)) for m in back] == [
        (m.role, m.text, m.name, dict(m.metadata)) for m in sent
    ]
    assert back[2].tool_calls == (call,) and back[3].tool_call_id == "c1"
    assert Message.objects.get(pk=back[3].id).exchange_seq == back[2].seq
    assert [m.role for m in back] == [Role.SYSTEM, Role.HUMAN, Role.AI, Role.TOOL, Role.AI]
