"""Variants of faults fixed before, found by trying the same kind of input elsewhere.

Each test names the kind it belongs to; the fixed fault it varies has its own test module
(``test_blank_content_copies``, ``test_recall_extreme_values``, ``test_response_bounds``).
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, ModelCall, Summary
from agentmemory.retention import purge_conversations
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


# --- purge_conversations --blank-content: every copy of what was said -----------------------


def _stored_through_adapters(conversation: Conversation) -> None:
    """Messages as the contrib adapters store them: the whole item or message kept in the
    metadata beside the columns, because the columns cannot give it back exactly."""
    pytest.importorskip("agents")
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage
    from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart

    from agentmemory.contrib.langchain import message_from_langchain
    from agentmemory.contrib.openai_agents import item_to_message
    from agentmemory.contrib.pydantic_ai import from_pydantic_ai

    item = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "The zeppelin leaves at dawn", "annotations": []}],
    }
    lc = AIMessage("The zeppelin hangar is open", response_metadata={"model_name": "m"}, id="lc1")
    response = ModelResponse(parts=[ThinkingPart("pondering the zeppelin"), TextPart("A zeppelin it is")])
    history = PersistentChatHistory(conversation)
    history.add_messages([item_to_message(item), message_from_langchain(lc), *from_pydantic_ai([response])])
    kept = {key for m in Message.objects.filter(conversation=conversation) for key in m.metadata}
    assert {"openai_item", "langchain_message", "pydantic_ai_thinking"} <= kept  # the copies


def test_blanking_reaches_the_copies_the_adapters_keep_in_metadata() -> None:
    conversation = ConversationFactory()
    _stored_through_adapters(conversation)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now() - timedelta(days=400))

    purge_conversations(older_than=timedelta(days=30), blank_content=True)

    rows = list(Message.objects.filter(conversation=conversation))
    assert rows and all(m.content in ("", None) for m in rows)
    assert not any("zeppelin" in str(m.metadata).lower() for m in rows), [m.metadata for m in rows]
    # what the adapters read back is blanked too, not the kept copy
    from agentmemory.contrib.openai_agents import message_to_items

    items = [item for m in PersistentChatHistory(conversation).get_messages() for item in message_to_items(m)]
    assert "zeppelin" not in str(items).lower()


def test_the_blanked_metadata_keys_are_the_adapters_own() -> None:
    pytest.importorskip("agents")
    pytest.importorskip("langchain_core")
    from agentmemory.contrib.langchain import MESSAGE_KEY
    from agentmemory.contrib.openai_agents import ITEM_KEY
    from agentmemory.retention import WORD_KEYS

    assert {ITEM_KEY, MESSAGE_KEY} <= set(WORD_KEYS)


# --- stored values at the edges of their columns never make a read fail ----------------------


@pytest.mark.parametrize("latency", [float("inf"), float("-inf"), float("nan")])
def test_a_model_call_whose_latency_is_not_finite_is_listed(api_forced, user, latency) -> None:  # type: ignore[no-untyped-def]
    conversation = ConversationFactory(owner=user)
    call = ModelCall.objects.create(
        kind="chat", usage_source="provider", owner=user, conversation=conversation, model="m", latency=1.5
    )
    if connection.vendor == "sqlite" and math.isnan(latency):
        # SQLite stores NaN as NULL, which the column refuses: no such row can be read
        with pytest.raises(IntegrityError), transaction.atomic():
            ModelCall.objects.filter(pk=call.pk).update(latency=latency)
        return
    ModelCall.objects.filter(pk=call.pk).update(latency=latency)
    base = f"/api/conversations/{conversation.uuid}/model-calls/"
    listed = api_forced.get(base)
    assert listed.status_code == 200, listed.content[:200]
    assert [c["latency"] for c in listed.json()["results"]] == [None]
    one = api_forced.get(f"{base}{call.uuid}/")
    assert one.status_code == 200 and one.json()["latency"] is None


def test_usage_adds_up_token_counts_at_the_columns_largest_value(api_forced, user, admin_client) -> None:  # type: ignore[no-untyped-def]
    # SQLite's SUM raised "integer overflow" past 2**63 - 1, which two such rows reach there
    most = connection.ops.integer_field_range("PositiveIntegerField")[1]
    conversation = ConversationFactory(owner=user)
    for _ in range(2):
        ModelCall.objects.create(
            kind="chat",
            usage_source="provider",
            owner=user,
            conversation=conversation,
            model="m",
            input_tokens=most,
            output_tokens=most,
            cached_input_tokens=most,
            cache_creation_input_tokens=most,
        )
    for url in ("/api/usage/", f"/api/conversations/{conversation.uuid}/model-calls/usage/"):
        answer = api_forced.get(url)
        assert answer.status_code == 200, (url, answer.content[:200])
        assert answer.json()["calls"] == 2 and answer.json()["input_tokens"] >= most
    for page in (
        reverse("admin:agentmemory_conversation_change", args=[conversation.pk]),
        reverse("admin:agentmemory_modelcall_changelist"),
    ):
        assert admin_client.get(page).status_code == 200, page


def test_a_context_window_over_token_counts_at_the_columns_largest_value(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    # the running sums of the window's statements overflowed on SQLite, as usage's did
    most = connection.ops.integer_field_range("PositiveIntegerField")[1]
    conversation = ConversationFactory(owner=user)
    PersistentChatHistory(conversation).add_messages(
        [ChatMessage.human("first"), ChatMessage.ai("second"), ChatMessage.human("third")]
    )
    Message.objects.filter(conversation=conversation, seq__lt=3).update(token_count=most)
    for query in ("", "?gap_policy=ignore", "?memory_recall=true"):
        answer = api_forced.get(f"/api/conversations/{conversation.uuid}/context/{query}")
        assert answer.status_code == 200, (query, answer.content[:300])
        history = [m["content"] for m in answer.json()["messages"] if m["part"] == "history"]
        assert history == ["third"]


# --- answers bounded in bytes ---------------------------------------------------------------


def test_a_transcript_page_of_long_messages_is_bounded(admin_client, user) -> None:  # type: ignore[no-untyped-def]
    # A page showed every message whole: 50 messages of 2 MB made a 100 MB admin page.
    SHOWN_CHARS = 20_000  # agentmemory.admin.transcript.SHOWN_CHARS

    conversation = ConversationFactory(owner=user)
    long = 5 * SHOWN_CHARS
    PersistentChatHistory(conversation).add_messages(
        [
            ChatMessage.human("q" * long),
            ChatMessage.ai(None, [ToolCall("c1", "look", {"text": "a" * long})]),
            ChatMessage.tool("r" * long, tool_call_id="c1", name="look"),
            ChatMessage.ai("s" * long),
        ]
    )
    summary = Summary.objects.create(conversation=conversation, text="u" * long, first_seq=1, through_seq=3)
    Conversation.objects.filter(pk=conversation.pk).update(summary=summary)
    page = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[conversation.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    # each of the six long texts (the summary twice: the field and the transcript) at most
    # SHOWN_CHARS, where whole they were 30 times that
    assert len(body) < 8 * SHOWN_CHARS + 100_000
    assert (
        body.count(f"{long - SHOWN_CHARS:,} more characters")
        + body.count(f"{long - SHOWN_CHARS} more characters")
        >= 4
    )
    first = Message.objects.get(conversation=conversation, seq=1)
    assert reverse("admin:agentmemory_message_change", args=[first.pk]) in body


# --- text the database refuses (NUL, lone surrogates) ----------------------------------------

ODD_SESSION_IDS = ["chat\x00one", "chat\ud800one", "tab\tand space "]


@pytest.mark.parametrize("session_id", ODD_SESSION_IDS)
def test_a_session_id_of_any_text_names_a_session(user, session_id) -> None:  # type: ignore[no-untyped-def]
    # PostgreSQL refused the session id's copies in the title and metadata (DataError)
    pytest.importorskip("agents")
    pytest.importorskip("langchain_core")
    from langchain_core.messages import HumanMessage

    from agentmemory.contrib.langchain import DjangoChatMessageHistory
    from agentmemory.contrib.openai_agents import AgentMemorySession

    session = AgentMemorySession(session_id, owner=user)
    async_to_sync(session.add_items)([{"role": "user", "content": "hello"}])
    again = AgentMemorySession(session_id, owner=user)
    assert async_to_sync(again.get_items)() == [{"role": "user", "content": "hello"}]
    # another id, however alike, is another session
    assert async_to_sync(AgentMemorySession(session_id + "x", owner=user).get_items)() == []
    history = DjangoChatMessageHistory.for_session(session_id, owner=user)
    history.add_messages([HumanMessage("hello")])
    assert [m.content for m in DjangoChatMessageHistory.for_session(session_id, owner=user).messages] == [
        "hello"
    ]


@pytest.mark.parametrize("agent_key", ["k\x00", "k\udc00", "k" * 101, 7])
def test_a_session_agent_key_the_column_cannot_hold_is_refused_before_any_query(
    user, agent_key, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("agents")
    pytest.importorskip("langchain_core")
    from agentmemory.contrib.langchain import DjangoChatMessageHistory
    from agentmemory.contrib.openai_agents import AgentMemorySession

    with django_assert_num_queries(0):
        with pytest.raises((TypeError, ValueError), match="agent_key"):
            AgentMemorySession("s", owner=user, agent_key=agent_key)
        with pytest.raises((TypeError, ValueError), match="agent_key"):
            DjangoChatMessageHistory.for_session("s", owner=user, agent_key=agent_key)


def test_the_langgraph_store_refuses_what_no_database_stores_alike_on_every_database() -> None:
    # PostgreSQL raised DataError for NUL and NaN, in a put and in a get; SQLite stored them
    pytest.importorskip("langgraph")
    from agentmemory.contrib.langgraph.store import DjangoStore

    store = DjangoStore()
    store.put(("notes",), "ferry", {"text": "leaves at noon"})
    for key, value in (
        ("k\x00", {"v": 1}),
        ("k\ud800", {"v": 1}),
        ("k", {"v": float("nan")}),
        ("k", {"v\x00": "x"}),
    ):
        with pytest.raises(ValueError, match="cannot store"):
            store.put(("notes",), key, value)
    assert store.get(("notes",), "ferry\x00") is None
    assert store.get(("notes",), "ferry") is not None
    assert store.search(("notes",), filter={"text": "leaves\x00"}) == []
    assert [i.key for i in store.search(("notes",), query="noon", limit=2**70, offset=0)] == ["ferry"]


@pytest.mark.parametrize("ttl", [1e20, float("inf"), 2**70])
def test_a_langgraph_ttl_past_the_last_date_never_expires(ttl) -> None:  # type: ignore[no-untyped-def]
    # an expiry past year 9999 raised OverflowError, on the put and on each read refreshing it
    pytest.importorskip("langgraph")
    from agentmemory.contrib.langgraph.store import DjangoStore

    store = DjangoStore()
    store.put(("notes",), "ferry", {"text": "leaves at noon"}, ttl=ttl)
    assert store.get(("notes",), "ferry", refresh_ttl=True) is not None
    assert [i.key for i in store.search(("notes",), refresh_ttl=True)] == ["ferry"]


@pytest.mark.parametrize(
    ("title", "metadata"),
    [
        ("t\x00", {}),
        ("t\ud800", {}),
        ("t" * 201, {}),
        ("", {"a": float("nan")}),
        ("", {"a\x00": "b"}),
        (7, {}),
    ],
)
def test_an_agents_conversation_refuses_what_the_api_refuses(user, title, metadata) -> None:  # type: ignore[no-untyped-def]
    # the database refused them at the INSERT, each its own way (SQLite kept a long title)
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel

    class Agent(BaseToolCallingAgent, register=False):
        AGENT_KEY = "variants"
        SYSTEM_PROMPT = "You help."

    agent = Agent(llm=ScriptedChatModel([]))
    with pytest.raises(ValueError, match=r"title|metadata"):
        agent.start_conversation(owner=user, title=title, metadata=metadata)
    assert not Conversation.objects.filter(agent_key="variants").exists()
    assert agent.start_conversation(owner=user, title="t" * 200, metadata={"a": 1.5}).title == "t" * 200


def test_blanking_reaches_what_the_compat_memories_keep_in_metadata() -> None:
    # selectools' ``tool_result`` is kept in the message's metadata (``"compat"``), and the
    # summary of trimmed messages (selectools' ``summary``, windlass' ``SummaryMemory``) in
    # the conversation's (``"compat_state"``): blanking left both, words of the conversation
    from agentmemory.compat.selectools import ConversationMemory
    from agentmemory.compat.selectools import Message as CompatMessage
    from agentmemory.compat.selectools import Role as CompatRole
    from agentmemory.compat.store import STATE_KEY
    from agentmemory.compat.types import COMPAT_KEY
    from agentmemory.retention import WORD_KEYS

    conversation = ConversationFactory()
    memory = ConversationMemory(conversation=conversation)
    memory.add(CompatMessage(role=CompatRole.USER, content="Book the zeppelin"))
    memory.add(
        CompatMessage(
            role=CompatRole.ASSISTANT,
            content="",
            tool_calls=[{"id": "c1", "name": "book", "parameters": {"what": "zeppelin"}}],
        )
    )
    memory.add(
        CompatMessage(
            role=CompatRole.TOOL,
            content="ok",
            tool_name="book",
            tool_call_id="c1",
            tool_result="zeppelin booked, hangar 4",
        )
    )
    memory.summary = "The user booked a zeppelin from hangar 4."
    assert "zeppelin" in str(Conversation.objects.get(pk=conversation.pk).metadata)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now() - timedelta(days=400))

    purge_conversations(older_than=timedelta(days=30), blank_content=True)

    rows = list(Message.objects.filter(conversation=conversation))
    assert rows and not any("zeppelin" in str(m.metadata).lower() for m in rows)
    kept = Conversation.objects.get(pk=conversation.pk).metadata
    assert "zeppelin" not in str(kept).lower()
    assert STATE_KEY in kept  # the rest of the state stays, as the other metadata does
    assert COMPAT_KEY in WORD_KEYS and STATE_KEY == "compat_state"
    assert ConversationMemory(conversation=conversation).summary in (None, "")
