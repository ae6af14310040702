"""selectools' ``ConversationMemory`` (seed 000) from ``agentmemory.compat.selectools``: the
seed's code blocks with the import line swapped, its edge cases (the sliding window,
tool-pair-aware trimming, the token limit, ``to_dict``/``from_dict``), and that the memory
lives in the database (whole, whatever the window)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.compat.selectools import ConversationMemory, Message, Role
from agentmemory.compat.types import ToolCall
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


# --------------------------------------------------------------------- stand-ins for the seed's
# ``Agent`` and provider, offline (the compat ``Agent`` and providers are run in
# ``test_compat_selectools_knowledge.py``). They follow the flow the seed documents
# (get_history, add_many(new messages), the model call, add(final)).


class EchoNameProvider:
    """Answers with the name the user gave earlier in the messages it is sent, if any."""

    def complete(self, messages: list[Message]) -> str:
        for message in messages:
            if message.role == Role.USER and message.content.startswith("My name is "):
                return message.content.removeprefix("My name is ")
        return "I don't know."


class LocalProvider(EchoNameProvider):
    pass


class Agent:
    def __init__(
        self, tools: Any = None, provider: Any = None, memory: ConversationMemory | None = None, **_: Any
    ):
        self.provider = provider or LocalProvider()
        self.memory = memory

    def run(self, messages: list[Message]) -> Message:
        history = self.memory.get_history() if self.memory is not None else []
        if self.memory is not None:
            self.memory.add_many(messages)
        reply = Message(role=Role.ASSISTANT, content=self.provider.complete(history + messages))
        if self.memory is not None:
            self.memory.add(reply)
        return reply


# --------------------------------------------------------------------------- the seed's blocks


def test_configuration() -> None:
    memory = ConversationMemory(
        max_messages=20,  # Keep last 20 messages
        max_tokens=4000,  # Optional token-based limit
    )
    assert (memory.max_messages, memory.max_tokens) == (20, 4000)
    assert memory.get_history() == []
    assert Conversation.objects.count() == 0  # nothing stored until the first add


def test_sliding_window_at_limit_drops_the_oldest_even_when_the_window_then_starts_on_an_answer() -> None:
    memory = ConversationMemory(max_messages=3)
    memory.add(Message(role=Role.USER, content="Hello"))
    memory.add(Message(role=Role.ASSISTANT, content="Hi!"))
    memory.add(Message(role=Role.USER, content="What's 2+2?"))
    assert contents(memory.get_history()) == ["Hello", "Hi!", "What's 2+2?"]

    memory.add(Message(role=Role.ASSISTANT, content="4"))

    assert contents(memory.get_history()) == ["Hi!", "What's 2+2?", "4"]
    assert contents(memory._last_trimmed) == ["Hello"]


def test_with_memory_the_second_turn_knows_the_first() -> None:
    provider = EchoNameProvider()
    memory = ConversationMemory(max_messages=20)
    agent = Agent(tools=[...], provider=provider, memory=memory)

    # Turn 1
    agent.run([Message(role=Role.USER, content="My name is Alice")])

    # Turn 2 - Context preserved
    response2 = agent.run([Message(role=Role.USER, content="What's my name?")])
    assert response2.content == "Alice"


def test_without_memory_each_call_is_independent() -> None:
    provider = EchoNameProvider()
    agent = Agent(tools=[...], provider=provider)  # No memory

    agent.run([Message(role=Role.USER, content="My name is Alice")])
    response2 = agent.run([Message(role=Role.USER, content="What's my name?")])
    assert response2.content == "I don't know."


def test_save_and_restore_through_a_json_file(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    memory = ConversationMemory(max_messages=5)
    memory.add_many([Message(role=Role.USER, content="hello"), Message(role=Role.ASSISTANT, content="hi")])
    memory.summary = "They greeted each other."

    # Save
    with open("conversation.json", "w") as f:
        json.dump(memory.to_dict(), f)

    # Restore
    with open("conversation.json") as f:
        data = json.load(f)
        memory = ConversationMemory.from_dict(data)

    # Summary is preserved
    assert memory.summary == "They greeted each other."
    assert contents(memory.get_history()) == ["hello", "hi"]
    assert memory.max_messages == 5


def test_best_practices_blocks() -> None:
    assert ConversationMemory(max_messages=10).max_messages == 10
    assert ConversationMemory(max_messages=50).max_messages == 50
    memory = ConversationMemory(
        max_messages=100,  # High message count
        max_tokens=4000,  # But limit tokens
    )
    for i in range(8):
        memory.add(Message(role=Role.USER, content=f"question {i}"))

    # Get last 5 messages for display
    recent = memory.get_recent(5)
    lines = [f"{msg.role}: {msg.content}" for msg in recent]
    assert lines == [f"user: question {i}" for i in range(3, 8)]

    # Start fresh conversation
    memory.clear()
    assert memory.get_history() == []
    assert len(memory) == 0


def test_memory_sliding_window() -> None:
    """The seed's own test, as written."""
    memory = ConversationMemory(max_messages=3)

    # Add 5 messages
    for i in range(5):
        memory.add(Message(role=Role.USER, content=f"Message {i}"))

    # Should only keep last 3
    history = memory.get_history()
    assert len(history) == 3
    assert history[0].content == "Message 2"
    assert history[2].content == "Message 4"


def test_memory_with_agent() -> None:
    """The seed's own test, with the stand-in ``Agent`` and ``LocalProvider``."""
    memory = ConversationMemory(max_messages=10)
    agent = Agent(tools=[...], provider=LocalProvider(), memory=memory)

    # First turn
    agent.run([Message(role=Role.USER, content="Hello")])
    assert len(memory.get_history()) > 0

    # Second turn
    agent.run([Message(role=Role.USER, content="Goodbye")])
    assert len(memory.get_history()) > 1


def test_shared_memory_is_one_history_for_both_agents() -> None:
    memory = ConversationMemory()
    agent1 = Agent(provider=EchoNameProvider(), memory=memory)
    agent2 = Agent(provider=EchoNameProvider(), memory=memory)
    agent1.run([Message(role=Role.USER, content="My name is Alice")])
    assert agent2.run([Message(role=Role.USER, content="Who am I?")]).content == "Alice"


def test_clearing_between_users_forgets_the_previous_user() -> None:
    memory = ConversationMemory()
    agent = Agent(provider=EchoNameProvider(), memory=memory)
    previous_user = "a"

    def handle_user(user_id: str, text: str) -> Message:
        if user_id != previous_user:
            memory.clear()
        return agent.run([Message(role=Role.USER, content=text)])

    handle_user("a", "My name is Alice")
    assert handle_user("b", "What's my name?").content == "I don't know."


# ------------------------------------------------------------------------------- edge cases


def tool_exchange(call_id: str) -> list[Message]:
    return [
        Message(
            role=Role.ASSISTANT, content="", tool_calls=[ToolCall("get_weather", {"city": "Paris"}, call_id)]
        ),
        Message(role=Role.TOOL, content="result...", tool_call_id=call_id, tool_name="get_weather"),
    ]


def test_a_window_never_starts_on_a_tool_result_or_a_tool_call() -> None:
    memory = ConversationMemory(max_messages=2)
    memory.add(Message(role=Role.USER, content="weather?"))
    memory.add_many(tool_exchange("call_1"))
    # The last two are the call and its result: the boundary fix leaves the result alone
    # (one message is always kept).
    assert [m.role for m in memory.get_history()] == [Role.TOOL]

    memory.add(Message(role=Role.USER, content="next question"))

    # [TOOL("result..."), USER("next question")] becomes [USER("next question")]
    assert contents(memory.get_history()) == ["next question"]
    assert contents(memory._last_trimmed) == ["result..."]


def test_parallel_results_cut_in_the_middle_are_all_dropped() -> None:
    memory = ConversationMemory(max_messages=3)
    call = Message(
        role=Role.ASSISTANT,
        content="",
        tool_calls=[ToolCall("a", {}, "c1"), ToolCall("b", {}, "c2")],
    )
    memory.add_many(
        [
            Message(role=Role.USER, content="go"),
            call,
            Message(role=Role.TOOL, content="A", tool_call_id="c1"),
            Message(role=Role.TOOL, content="B", tool_call_id="c2"),
            Message(role=Role.ASSISTANT, content="done"),
        ]
    )
    assert contents(memory.get_history()) == ["done"]


def test_the_token_limit_drops_the_oldest_and_keeps_at_least_one() -> None:
    memory = ConversationMemory(max_messages=10, max_tokens=5)
    memory.add(Message(role=Role.USER, content="x" * 12))  # 3 tokens
    memory.add(Message(role=Role.ASSISTANT, content="y" * 12))  # 3 tokens: 6 > 5
    assert contents(memory.get_history()) == ["y" * 12]
    memory.add(Message(role=Role.USER, content="z" * 40))  # 10 tokens alone
    assert contents(memory.get_history()) == ["z" * 40]


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        ConversationMemory(max_messages=0)
    with pytest.raises(ValueError, match="max_tokens"):
        ConversationMemory(max_tokens=0)
    with pytest.raises(ValueError, match="n must be"):
        ConversationMemory().get_recent(0)


@pytest.mark.parametrize("value", ["3", 2.5, True, None])
def test_limits_that_are_not_whole_numbers_say_so(value: Any) -> None:
    # a "3" failed later with "'<' not supported between instances of 'str' and 'int'"
    with pytest.raises(TypeError, match="max_messages must be a whole number"):
        ConversationMemory(max_messages=value)
    if value is not None:
        with pytest.raises(TypeError, match="max_tokens must be a whole number"):
            ConversationMemory(max_tokens=value)
    with pytest.raises(TypeError, match="n must be a whole number"):
        ConversationMemory().get_recent(value)


def test_every_message_stays_stored_whatever_the_window() -> None:
    memory = ConversationMemory(max_messages=2)
    for i in range(6):
        memory.add(Message(role=Role.USER if i % 2 == 0 else Role.ASSISTANT, content=f"m{i}"))
    assert contents(memory.get_history()) == ["m4", "m5"]
    stored = PersistentChatHistory(memory.conversation).get_messages()
    assert [m.text for m in stored] == [f"m{i}" for i in range(6)]
    assert [m.role.value for m in stored[:2]] == ["human", "ai"]


def test_our_chat_messages_are_accepted_and_read_back_as_messages() -> None:
    memory = ConversationMemory()
    memory.add_many([ChatMessage.human("hi"), ChatMessage.ai("hello")])
    history = memory.get_history()
    assert [(m.role, m.content) for m in history] == [(Role.USER, "hi"), (Role.ASSISTANT, "hello")]
    assert all(m.seq is not None for m in history)


def test_roles_of_another_frameworks_str_enum_are_read_by_value() -> None:
    import enum

    class TheirRole(str, enum.Enum):  # noqa: UP042 (selectools declares its Role this way)
        USER = "user"

    assert Message(role=TheirRole.USER, content="hi").role is Role.USER
    assert Message(role="assistant", content="hi").role is Role.ASSISTANT


def test_to_dict_from_dict_round_trip_keeps_tool_calls_and_summary() -> None:
    memory = ConversationMemory(max_messages=10, max_tokens=1000)
    memory.add(Message(role=Role.USER, content="weather?"))
    memory.add_many(tool_exchange("call_9"))
    memory.add(Message(role=Role.ASSISTANT, content="Sunny."))
    memory.summary = "Asked about the weather."
    data = json.loads(json.dumps(memory.to_dict()))

    assert data["message_count"] == 4
    assert data["messages"][1]["tool_calls"] == [
        {"name": "get_weather", "parameters": {"city": "Paris"}, "id": "call_9"}
    ]
    restored = ConversationMemory.from_dict(data)

    assert restored.to_dict() == data
    assert restored.conversation.pk != memory.conversation.pk
    assert restored._last_trimmed == []


def test_from_dict_does_not_trim_until_the_next_add_but_fixes_the_boundary() -> None:
    data = {
        "max_messages": 2,
        "max_tokens": None,
        "messages": [
            {"role": "tool", "content": "orphan", "tool_call_id": "gone"},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
        "summary": None,
    }
    memory = ConversationMemory.from_dict(data)
    assert contents(memory.get_history()) == ["a", "b", "c"]

    memory.add(Message(role=Role.ASSISTANT, content="d"))
    assert contents(memory.get_history()) == ["c", "d"]
    assert contents(memory._last_trimmed) == ["a", "b"]


def test_from_dict_into_an_existing_conversation_keeps_what_was_there_out_of_the_window(conversation) -> None:
    PersistentChatHistory(conversation).add_messages(
        [ChatMessage.human("old"), ChatMessage.ai("older answer")]
    )
    memory = ConversationMemory.from_dict(
        {"max_messages": 20, "messages": [{"role": "user", "content": "restored"}]}, conversation=conversation
    )
    assert contents(memory.get_history()) == ["restored"]
    assert PersistentChatHistory(conversation).get_messages()[-1].text == "restored"


def test_an_attached_memory_sees_the_same_window(conversation) -> None:
    first = ConversationMemory(max_messages=3, conversation=conversation)
    first.add_many([Message(role=Role.USER, content=f"m{i}") for i in range(5)])
    again = ConversationMemory(max_messages=3, conversation=conversation.uuid)
    assert contents(again.get_history()) == ["m2", "m3", "m4"]


def test_a_round_trip_keeps_each_messages_metadata() -> None:
    memory = ConversationMemory()
    memory.add(Message(role=Role.USER, content="Hello", metadata={"channel": "email", "ticket": [1042]}))
    memory.add(Message(role=Role.ASSISTANT, content="Hi!"))

    data = json.loads(json.dumps(memory.to_dict()))
    restored = ConversationMemory.from_dict(data)

    assert [m.metadata for m in restored.get_history()] == [{"channel": "email", "ticket": [1042]}, {}]
    assert "metadata" not in data["messages"][1]  # selectools' keys only, when there is none


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ({"messages": "Hello"}, TypeError, "messages is a list"),
        ({"messages": {"role": "user"}}, TypeError, "messages is a list"),
        ({"messages": [["user", "Hello"]]}, TypeError, "a message is a mapping"),
        ({"messages": [{"content": "no role"}]}, ValueError, "needs a role"),
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"name": "f", "parameters": "x=1", "id": "a"}]}
                ]
            },
            TypeError,
            "parameters are a mapping",
        ),
        (
            {"messages": [{"role": "user", "content": "Hi"}], "summary": {"a": 1}},
            TypeError,
            "summary must be text",
        ),
        (
            {"messages": [{"role": "user", "content": "Hi"}], "summary": "x" * 31},
            ValueError,
            "MAX_MESSAGE_CHARS",
        ),
    ],
)
def test_from_dict_refuses_a_malformed_document_and_stores_nothing(
    data: dict[str, Any], error: type, match: str, settings: Any
) -> None:
    settings.AGENTMEMORY = {**getattr(settings, "AGENTMEMORY", {}), "MAX_MESSAGE_CHARS": 30}
    with pytest.raises(error, match=match):
        ConversationMemory.from_dict(data)
    assert Conversation.objects.count() == 0


def test_an_owner_given_by_user_id_owns_the_conversation_created() -> None:
    user = UserFactory()
    memory = ConversationMemory(owner=user.pk)
    memory.add(Message(role=Role.USER, content="Hello"))
    assert memory.conversation.owner_id == user.pk


def test_a_window_larger_than_any_sql_limit_returns_every_message() -> None:
    memory = ConversationMemory(max_messages=10**30)
    memory.add_many([Message(role=Role.USER, content="a"), Message(role=Role.ASSISTANT, content="b")])
    assert [m.content for m in memory.get_history()] == ["a", "b"]


def test_an_owner_owns_the_conversation_created() -> None:
    user = UserFactory()
    memory = ConversationMemory(owner=user)
    memory.add(Message(role=Role.USER, content="hi"))
    assert memory.conversation.owner == user
    assert memory.conversation.metadata["compat"] == "selectools"


def test_reading_the_window_is_one_query_of_at_most_max_messages_rows(django_assert_num_queries) -> None:
    memory = ConversationMemory(max_messages=4)
    memory.add_many([Message(role=Role.USER, content=f"m{i}") for i in range(50)])
    with django_assert_num_queries(1) as captured:
        history = memory.get_history()
    assert contents(history) == ["m46", "m47", "m48", "m49"]
    assert "LIMIT 4" in captured.captured_queries[0]["sql"]


def test_an_add_is_the_append_and_two_window_reads(django_assert_num_queries) -> None:
    """The window before (for ``_last_trimmed``), one append (one statement on PostgreSQL;
    a locked read, an insert and an update in a savepoint elsewhere), the window after."""
    from django.db import connection

    memory = ConversationMemory(max_messages=3)
    memory.add(Message(role=Role.USER, content="first"))
    with django_assert_num_queries(3 if connection.vendor == "postgresql" else 7):
        memory.add(Message(role=Role.ASSISTANT, content="second"))


# ------------------------------------------------- the view against the seed's own algorithm


class SeedMemory:
    """The seed's list-based ``ConversationMemory`` as its document prints it
    (``_enforce_limits``, ``_fix_tool_pair_boundary``), the reference for the view."""

    def __init__(self, max_messages: int, max_tokens: int | None) -> None:
        self.max_messages, self.max_tokens = max_messages, max_tokens
        self._messages: list[Message] = []

    def add_many(self, messages: list[Message]) -> None:
        self._messages.extend(messages)
        if len(self._messages) > self.max_messages:
            self._messages = self._messages[len(self._messages) - self.max_messages :]
        if self.max_tokens is not None:
            while len(self._messages) > 1:
                if sum(len(m.content) // 4 for m in self._messages) <= self.max_tokens:
                    break
                self._messages.pop(0)
        while len(self._messages) > 1:
            first = self._messages[0]
            if first.role == Role.TOOL or (first.role == Role.ASSISTANT and first.tool_calls):
                self._messages.pop(0)
                continue
            break


@st.composite
def batches(draw: Any) -> list[list[Message]]:
    """Batches of user and assistant text and tool exchanges (parallel calls included)."""
    out: list[list[Message]] = []
    for b in range(draw(st.integers(1, 8))):
        batch: list[Message] = []
        for i in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["user", "assistant", "tools"]))
            text = "w" * draw(st.integers(0, 40))
            if kind == "tools":
                ids = [f"c{b}_{i}_{j}" for j in range(draw(st.integers(1, 3)))]
                batch.append(
                    Message(role=Role.ASSISTANT, content="", tool_calls=[ToolCall("t", {}, c) for c in ids])
                )
                batch += [Message(role=Role.TOOL, content=text, tool_call_id=c) for c in ids]
            else:
                batch.append(Message(role=Role(kind), content=text))
        out.append(batch)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=batches(),
    max_messages=st.integers(1, 6),
    max_tokens=st.one_of(st.none(), st.integers(1, 25)),
)
def test_the_view_is_what_the_seeds_list_holds_after_every_add(
    db: Any, history: list[list[Message]], max_messages: int, max_tokens: int | None
) -> None:
    seed = SeedMemory(max_messages, max_tokens)
    memory = ConversationMemory(max_messages=max_messages, max_tokens=max_tokens)
    for batch in history:
        seed.add_many(batch)
        memory.add_many(batch)
        got = [(m.role, m.content, m.tool_call_id) for m in memory.get_history()]
        assert got == [(m.role, m.content, m.tool_call_id) for m in seed._messages]


# -- nothing stored when refused, and typed errors instead of raw database errors -------------


@pytest.mark.parametrize("summary", ["s\x00", "s\udc00"], ids=["nul", "lone-surrogate"])
def test_from_dict_with_a_summary_storage_cannot_hold_stores_nothing(summary: str) -> None:
    """The messages and a conversation were stored, then PostgreSQL's ``DataError`` was
    raised for the summary, although nothing is to be stored when ``from_dict`` raises."""
    from agentmemory.exceptions import InvalidMessageError

    data = {"messages": [{"role": "user", "content": "ok"}], "summary": summary}
    with pytest.raises(InvalidMessageError, match="summary"):
        ConversationMemory.from_dict(data)
    assert Conversation.objects.count() == 0


@pytest.mark.parametrize("summary", ["a\x00", "a\ud800"], ids=["nul", "lone-surrogate"])
def test_a_summary_storage_cannot_hold_is_refused(summary: str) -> None:
    from agentmemory.exceptions import InvalidMessageError

    memory = ConversationMemory()
    memory.add(Message(role=Role.USER, content="hi"))
    with pytest.raises(InvalidMessageError, match="summary"):
        memory.summary = summary
    assert ConversationMemory(conversation=memory.conversation).summary is None


@pytest.mark.parametrize("data", [[1, 2], "abc", None], ids=["list", "str", "none"])
def test_from_dict_of_what_is_not_a_mapping_is_a_type_error(data: Any) -> None:
    with pytest.raises(TypeError, match="mapping"):
        ConversationMemory.from_dict(data)


def test_a_conversation_key_naming_none_is_conversation_not_found() -> None:
    """It was Django's ``Conversation.DoesNotExist``."""
    from agentmemory.exceptions import ConversationNotFound

    with pytest.raises(ConversationNotFound):
        ConversationMemory(conversation=-1)


def test_an_owner_id_naming_no_user_is_refused_and_stores_nothing() -> None:
    """The foreign key refused it only at the commit, as an ``IntegrityError``."""
    from agentmemory.recall.scope import MemoryScopeError

    with pytest.raises(MemoryScopeError, match="no user"):
        ConversationMemory(owner=999_999).add(Message(role=Role.USER, content="x"))
    assert Conversation.objects.count() == 0
    user = UserFactory()
    ConversationMemory(owner=user.pk).add(Message(role=Role.USER, content="x"))
    assert Conversation.objects.get().owner_id == user.pk


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage.human("a\x00b"),
        Message(role=Role.ASSISTANT, content="", tool_calls=[ToolCall("t", {"a": float("nan")}, id="c1")]),
    ],
    ids=["nul-content", "nan-tool-argument"],
)
def test_a_refused_first_add_leaves_no_conversation(message: Any) -> None:
    """The conversation was created before the batch was refused, and left empty."""
    from agentmemory.exceptions import InvalidMessageError

    memory = ConversationMemory()
    with pytest.raises(InvalidMessageError):
        memory.add(message)
    assert Conversation.objects.count() == 0
    memory.add(Message(role=Role.USER, content="fine"))
    assert contents(memory.get_history()) == ["fine"]
    assert Conversation.objects.count() == 1
