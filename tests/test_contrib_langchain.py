"""``agentmemory.contrib.langchain.DjangoChatMessageHistory`` against the real langchain-core:
driven with the same calls as LangChain's own ``InMemoryChatMessageHistory`` it answers the
same, every message comes back equal to what was added, and ``RunnableWithMessageHistory``
runs on it."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib.langchain import MESSAGE_KEY, DjangoChatMessageHistory, message_from_langchain
from agentmemory.exceptions import InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage as StoredMessage
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message
from agentmemory.recall.scope import MemoryScopeError
from tests.factories import ConversationFactory

# InMemoryChatMessageHistory and RunnableWithMessageHistory are deprecated in langchain-core 1.x
# (still shipped, still the contract of BaseChatMessageHistory users).
pytestmark = [
    pytest.mark.filterwarnings("ignore::langchain_core._api.LangChainDeprecationWarning"),
    pytest.mark.django_db(transaction=True),
]

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def single_messages() -> list[BaseMessage]:
    """Messages of every shape a LangChain app stores one at a time."""
    return [
        HumanMessage("Where is my order 1042?"),
        HumanMessage("hello", id="human-1", name="ann", additional_kwargs={"lang": "en"}),
        HumanMessage(
            content=[
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image", "url": "https://example.com/cat.png"},
                {"type": "image", "base64": PNG, "mime_type": "image/png"},
            ]
        ),
        HumanMessage(content=[{"type": "text", "text": "a block"}, {"type": "provider_only", "x": 1}]),
        SystemMessage("Be brief."),
        AIMessage("Order 1042 has shipped."),
        AIMessage(
            content=[{"type": "text", "text": "Let me think."}],
            id="run-1",
            response_metadata={"model_name": "gpt-test", "finish_reason": "stop"},
            usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
        ),
        AIMessage(
            content=[
                {"type": "thinking", "thinking": "The user wants the order.", "signature": "sig"},
                {"type": "text", "text": "Checking."},
            ]
        ),
        AIMessageChunk(content="streamed answer", id="run-2"),
        ChatMessage(role="assistant", content="generic assistant"),
        ChatMessage(role="user", content="generic user"),
    ]


def exchange(n: int) -> list[BaseMessage]:
    """A tool exchange: an AI message calling two tools and both results (one an error)."""
    return [
        AIMessage(
            content="",
            tool_calls=[
                {"id": f"call_{n}_a", "name": "lookup", "args": {"order_id": str(n)}, "type": "tool_call"},
                {"id": f"call_{n}_b", "name": "track", "args": {}, "type": "tool_call"},
            ],
        ),
        ToolMessage('{"status": "shipped"}', tool_call_id=f"call_{n}_a", name="lookup"),
        ToolMessage("tracking is down", tool_call_id=f"call_{n}_b", name="track", status="error"),
    ]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def step(history: BaseChatMessageHistory, op: str, arg: Any) -> Any:
    """One call on a history; returns what a caller can observe."""
    if op == "add_message":
        history.add_message(arg)
    elif op == "add_messages":
        history.add_messages(arg)
    elif op == "add_user_message":
        history.add_user_message(arg)
    elif op == "add_ai_message":
        history.add_ai_message(arg)
    elif op == "aadd_messages":
        run(history.aadd_messages(arg))
    elif op == "clear":
        history.clear()
    elif op == "aclear":
        run(history.aclear())
    elif op == "aget_messages":
        return run(history.aget_messages())
    elif op == "str":
        return str(history)
    return history.messages


def random_calls(rng: random.Random, n: int) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []
    for i in range(n):
        op = rng.choice(
            ["add_message", "add_messages", "add_user_message", "add_ai_message", "aadd_messages"] * 3
            + ["clear", "aclear", "aget_messages", "str", "messages"]
        )
        if op == "add_message":
            arg: Any = rng.choice(single_messages())
        elif op in ("add_messages", "aadd_messages"):
            arg = rng.sample(single_messages(), rng.randint(0, 3))
            if rng.random() < 0.5:
                arg += exchange(i)
        elif op == "add_user_message":
            arg = rng.choice([f"question {i}", HumanMessage(f"question {i}", id=f"q{i}")])
        elif op == "add_ai_message":
            arg = rng.choice([f"answer {i}", AIMessage(f"answer {i}", response_metadata={"i": i})])
        else:
            arg = None
        calls.append((op, arg))
    return calls


def test_the_same_calls_give_what_the_in_memory_history_gives() -> None:
    rng = random.Random(2203)
    for _ in range(8):
        calls = random_calls(rng, rng.randint(3, 14))
        ours = DjangoChatMessageHistory(ConversationFactory())
        theirs = InMemoryChatMessageHistory()
        for op, arg in calls:
            assert step(ours, op, arg) == step(theirs, op, arg), (op, arg)
        assert ours.messages == theirs.messages
        assert run(ours.aget_messages()) == run(theirs.aget_messages())


def test_every_message_comes_back_equal_and_typed() -> None:
    history = DjangoChatMessageHistory(ConversationFactory())
    messages = single_messages() + exchange(1)
    history.add_messages(messages)
    back = DjangoChatMessageHistory(history.conversation_id).messages
    assert back == messages
    assert [type(m) for m in back] == [type(m) for m in messages]
    # stored in agentmemory's columns: roles, tool calls linked to their results, parts
    stored = PersistentChatHistory(history.conversation_id).get_messages()
    assert [m.role for m in stored[-3:]] == [Role.AI, Role.TOOL, Role.TOOL]
    assert [c.id for c in stored[-3].tool_calls] == ["call_1_a", "call_1_b"]
    assert stored[2].parts and [p.kind.value for p in stored[2].parts] == ["text", "image", "image"]
    assert stored[3].content == "a block\n[provider_only]"
    exchanges = Message.objects.filter(conversation_id=history.conversation_id, role="tool")
    assert all(row.exchange_seq == stored[-3].seq for row in exchanges)


def test_plain_messages_are_stored_without_a_copy() -> None:
    assert MESSAGE_KEY not in message_from_langchain(HumanMessage("hi")).metadata
    assert MESSAGE_KEY not in message_from_langchain(exchange(1)[1]).metadata
    assert MESSAGE_KEY in message_from_langchain(AIMessage("x", id="run-1")).metadata


def test_a_tool_message_answering_no_call_is_refused_unless_importing() -> None:
    conversation = ConversationFactory()
    history = DjangoChatMessageHistory(conversation)
    history.add_user_message("hi")
    orphan = ToolMessage("late", tool_call_id="call_unknown")
    with pytest.raises(InvalidMessageError, match="answers no earlier unanswered tool call"):
        history.add_messages([AIMessage("fine"), orphan])
    assert history.messages == [HumanMessage("hi")]  # nothing of the batch
    importing = DjangoChatMessageHistory(conversation, validate_tool_pairs=False)
    importing.add_message(orphan)
    assert importing.messages[-1] == orphan
    window = ContextWindowBuilder(conversation).build(max_tokens=1_000)
    assert window.skipped_orphans  # stored, never sent


def test_message_types_without_a_role_are_refused() -> None:
    history = DjangoChatMessageHistory(ConversationFactory())
    for message in (FunctionMessage("x", name="f"), ChatMessage(role="critic", content="x")):
        with pytest.raises(InvalidMessageError):
            history.add_message(message)
    with pytest.raises(InvalidMessageError, match="NUL"):
        history.add_user_message("nul \x00")
    with pytest.raises(TypeError):
        history.add_messages(["not a message"])  # type: ignore[list-item]
    assert history.messages == []


def test_sessions_are_owner_scoped_and_made_by_the_first_write(django_user_model) -> None:  # type: ignore[no-untyped-def]
    ann = django_user_model.objects.create_user("ann")
    bob = django_user_model.objects.create_user("bob")
    sid = f"s-{uuid.uuid4().hex[:8]}"
    assert DjangoChatMessageHistory.for_session(sid, owner=ann).messages == []
    assert not Conversation.objects.filter(title=sid).exists()  # reading made nothing
    DjangoChatMessageHistory.for_session(sid, owner=ann).add_user_message("ann's")
    DjangoChatMessageHistory.for_session(sid, owner=bob).add_user_message("bob's")
    assert DjangoChatMessageHistory.for_session(sid, owner=ann.pk).messages == [HumanMessage("ann's")]
    assert DjangoChatMessageHistory.for_session(sid, owner=bob).messages == [HumanMessage("bob's")]
    assert {c.owner for c in Conversation.objects.filter(title=sid)} == {ann, bob}


def test_an_owner_that_names_no_user_is_refused_at_the_first_write() -> None:
    # the foreign key refused it only at the commit, as a bare IntegrityError
    history = DjangoChatMessageHistory.for_session("s-nobody", owner=987654)
    assert history.messages == []
    with pytest.raises(MemoryScopeError, match="no user with id 987654"):
        history.add_user_message("hi")
    assert not Conversation.objects.exists()


def test_an_anonymous_user_owns_no_history() -> None:
    # request.user of a visitor without login has no pk: every visitor of one session id
    # shared one conversation of nobody
    from django.contrib.auth.models import AnonymousUser

    with pytest.raises(MemoryScopeError, match="anonymous"):
        DjangoChatMessageHistory.for_session("support-1042", owner=AnonymousUser())


def test_the_window_option_returns_the_context_window() -> None:
    conversation = ConversationFactory()
    history = DjangoChatMessageHistory(conversation)
    history.add_message(SystemMessage("You are terse."))
    for i in range(40):
        history.add_messages(
            [HumanMessage(f"question {i} " + "words " * 20), *exchange(i), AIMessage(f"a{i}", id=f"r{i}")]
        )
    windowed = DjangoChatMessageHistory(conversation, window_tokens=400)
    window = windowed.messages
    full = history.messages
    assert window[0] == SystemMessage("You are terse.")
    assert window[-5:] == full[-5:]  # the newest turn exactly, ids and all
    assert len(window) < len(full)
    assert isinstance(window[1], HumanMessage)


def test_runnable_with_message_history_runs_on_it(django_user_model) -> None:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("ann")
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
    )

    def chain_and_log(store: Any) -> tuple[Any, list[list[BaseMessage]]]:
        seen: list[list[BaseMessage]] = []

        def model(value: Any) -> AIMessage:
            seen.append(value.to_messages())
            return AIMessage(f"answer {len(seen)}")

        chain = RunnableWithMessageHistory(
            prompt | RunnableLambda(model),
            store,
            input_messages_key="question",
            history_messages_key="history",
        )
        return chain, seen

    sid = f"s-{uuid.uuid4().hex[:8]}"
    ours, seen = chain_and_log(lambda sid: DjangoChatMessageHistory.for_session(sid, owner=user))
    memory: dict[str, InMemoryChatMessageHistory] = {}
    theirs, seen_theirs = chain_and_log(lambda sid: memory.setdefault(sid, InMemoryChatMessageHistory()))
    config = {"configurable": {"session_id": sid}}
    for chain in (ours, theirs):
        assert chain.invoke({"question": "Where is order 1042?"}, config=config).content == "answer 1"
        assert run(chain.ainvoke({"question": "Which order?"}, config=config)).content == "answer 2"
    assert seen == seen_theirs
    assert [m.content for m in seen[1]] == [
        "You are terse.",
        "Where is order 1042?",
        "answer 1",
        "Which order?",
    ]
    conversation = Conversation.objects.get(title=sid)
    assert conversation.owner == user
    assert [m.role for m in PersistentChatHistory(conversation).get_messages()] == [
        Role.HUMAN,
        Role.AI,
        Role.HUMAN,
        Role.AI,
    ]


def test_existing_conversations_read_as_langchain_messages() -> None:
    """A conversation written by agentmemory's own agent (no LangChain copy) reads through
    the converters."""
    conversation = ConversationFactory()
    PersistentChatHistory(conversation).add_messages(
        [
            StoredMessage.human("hi"),
            StoredMessage.ai(None, [{"id": "c1", "name": "t", "arguments": {"a": 1}}]),
            StoredMessage.tool("done", tool_call_id="c1", name="t"),
            StoredMessage.ai("ok"),
        ]
    )
    assert DjangoChatMessageHistory(conversation.uuid).messages == [
        HumanMessage("hi"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "t", "args": {"a": 1}, "type": "tool_call"}]),
        ToolMessage("done", tool_call_id="c1", name="t"),
        AIMessage("ok"),
    ]
