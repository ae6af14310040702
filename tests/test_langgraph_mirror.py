"""A LangGraph chat graph mirrored into an agentmemory conversation (``ConversationMirror``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib.langgraph import ConversationMirror, DjangoSaver
from agentmemory.contrib.langgraph.models import Checkpoint, MirroredMessage, MirroredThread
from agentmemory.models import Conversation, Message, Summary
from agentmemory.recall import search_messages
from agentmemory.recall.scope import MemoryScopeError

pytestmark = pytest.mark.django_db


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 24 degrees in {city}"


SCRIPT = [
    AIMessage("", tool_calls=[{"id": "call_paris", "name": "get_weather", "args": {"city": "Paris"}}]),
    AIMessage("It is sunny in Paris."),
    AIMessage("", tool_calls=[{"id": "call_rome", "name": "get_weather", "args": {"city": "Rome"}}]),
    AIMessage("Rome is sunny too."),
]


def chat_graph(saver: DjangoSaver, script: list[AIMessage]):  # type: ignore[no-untyped-def]
    """agent -> tools -> agent ..., the agent a fake chat model answering with ``script``."""
    model = GenericFakeChatModel(messages=iter(script))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def _two_turns(graph: Any, config: dict[str, Any], run_async: bool) -> dict[str, Any]:
    if run_async:

        async def turns() -> dict[str, Any]:
            await graph.ainvoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
            return await graph.ainvoke({"messages": [HumanMessage("And in Rome?")]}, config)

        return async_to_sync(turns)()
    graph.invoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
    return graph.invoke({"messages": [HumanMessage("And in Rome?")]}, config)


def _check_mirrored(state: dict[str, Any], owner: Any) -> Conversation:
    conversation = ConversationMirror().conversation_for("weather-1")
    assert conversation is not None
    assert (conversation.owner_id, conversation.agent_key) == (owner.pk, "langgraph")
    rows = list(Message.objects.filter(conversation=conversation).order_by("seq"))
    # every message once, in the graph's order, tool calls and their results linked
    assert [m.metadata["langgraph_message_id"] for m in rows] == [m.id for m in state["messages"]]
    assert [(m.role, m.content) for m in rows] == [
        ("human", "Weather in Paris?"),
        ("ai", None),
        ("tool", "Sunny and 24 degrees in Paris"),
        ("ai", "It is sunny in Paris."),
        ("human", "And in Rome?"),
        ("ai", None),
        ("tool", "Sunny and 24 degrees in Rome"),
        ("ai", "Rome is sunny too."),
    ]
    assert rows[1].tool_calls == [{"id": "call_paris", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert (rows[2].tool_call_id, rows[6].tool_call_id) == ("call_paris", "call_rome")
    assert MirroredMessage.objects.filter(thread__conversation=conversation).count() == 8
    return conversation


def test_a_chat_graph_is_mirrored_in_order_with_tool_calls_and_no_duplicates(django_user_model) -> None:  # type: ignore[no-untyped-def]
    owner = django_user_model.objects.create_user("graph-owner")
    saver = DjangoSaver(mirror=ConversationMirror(owner=lambda config: config["configurable"]["user_id"]))
    config = {"configurable": {"thread_id": "weather-1", "user_id": owner.pk}}
    state = _two_turns(chat_graph(saver, SCRIPT), config, run_async=True)
    conversation = _check_mirrored(state, owner)
    # the conversation works like any other: search, context windows
    hits = search_messages("Rome", owner=owner)
    assert hits and {h.conversation_id for h in hits} == {conversation.pk}
    window = ContextWindowBuilder(conversation).build(max_tokens=2000)
    assert [m.role.value for m in window.messages][:3] == ["human", "ai", "tool"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sync_chat_graph_is_mirrored_the_same_way(django_user_model) -> None:  # type: ignore[no-untyped-def]
    owner = django_user_model.objects.create_user("graph-owner")
    saver = DjangoSaver(mirror=ConversationMirror(owner=owner))
    state = _two_turns(
        chat_graph(saver, SCRIPT), {"configurable": {"thread_id": "weather-1"}}, run_async=False
    )
    _check_mirrored(state, owner)


def test_compaction_runs_on_the_mirrored_conversation(settings, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 1, "COMPACTION_MODE": "inline"}
    saver = DjangoSaver(mirror=ConversationMirror())
    with django_capture_on_commit_callbacks(execute=True):
        _two_turns(chat_graph(saver, SCRIPT), {"configurable": {"thread_id": "weather-1"}}, run_async=True)
    conversation = ConversationMirror().conversation_for("weather-1")
    summary = Summary.objects.filter(conversation=conversation).order_by("-through_seq").first()
    assert summary is not None and summary.through_seq >= 4  # the first turn is folded


def test_the_mirror_asks_for_summaries_made_for_its_windows(
    settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """The mirror's compactions named no window budget, so their summaries were made for
    10,000 tokens (``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``) and took most of a smaller
    window, leaving its messages out (as ``request_compaction(pk)`` did, agentmemory's issue
    tracker). ``window_tokens`` names the budget the windows are built with."""
    from agentmemory.compaction import summary_token_budget

    settings.AGENTMEMORY = {"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 1, "COMPACTION_MODE": "inline"}
    saver = DjangoSaver(mirror=ConversationMirror(window_tokens=1200))
    with django_capture_on_commit_callbacks(execute=True):
        _two_turns(chat_graph(saver, SCRIPT), {"configurable": {"thread_id": "small"}}, run_async=True)
    conversation = ConversationMirror().conversation_for("small")
    assert conversation is not None and conversation.summary_window_tokens == 1200
    summary = Summary.objects.filter(conversation=conversation).order_by("-through_seq").first()
    assert summary is not None and summary.token_count <= summary_token_budget(1200)


@pytest.mark.parametrize("tokens", [0, -5, 1.5, True, "2000"])
def test_a_mirror_window_that_is_no_budget_is_refused(tokens) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="window_tokens"):
        ConversationMirror(window_tokens=tokens)


def test_removed_and_replaced_messages_stay_and_new_ones_are_appended() -> None:
    saver = DjangoSaver(mirror=ConversationMirror())

    def node(state: MessagesState) -> dict[str, Any]:
        if len(state["messages"]) == 1:
            return {"messages": [AIMessage("first answer", id="a1")]}
        # drop the first answer, add a new one
        return {"messages": [RemoveMessage(id="a1"), AIMessage("second answer", id="a2")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "edits"}}

    async def turns() -> dict[str, Any]:
        await graph.ainvoke({"messages": [HumanMessage("hi", id="h1")]}, config)
        return await graph.ainvoke({"messages": [HumanMessage("again", id="h2")]}, config)

    state = async_to_sync(turns)()
    assert [m.id for m in state["messages"]] == ["h1", "h2", "a2"]
    conversation = ConversationMirror().conversation_for("edits")
    stored = list(
        Message.objects.filter(conversation=conversation).order_by("seq").values_list("content", flat=True)
    )
    assert stored == ["hi", "first answer", "again", "second answer"]


def test_a_message_the_conversation_refuses_is_skipped_logged_and_recorded(caplog) -> None:  # type: ignore[no-untyped-def]
    saver = DjangoSaver(mirror=ConversationMirror())

    def node(state: MessagesState) -> dict[str, Any]:
        # a tool result answering no call: a conversation refuses it
        return {
            "messages": [ToolMessage("orphan", tool_call_id="nowhere", id="t1"), AIMessage("done", id="a1")]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "refused"}}
    with caplog.at_level(logging.WARNING, logger="agentmemory.contrib.langgraph"):
        state = async_to_sync(graph.ainvoke)({"messages": [HumanMessage("go", id="h1")]}, config)
    assert [m.id for m in state["messages"]] == ["h1", "t1", "a1"]  # the graph ran on
    assert graph.get_state(config).values["messages"][-1].content == "done"  # and was saved
    conversation = ConversationMirror().conversation_for("refused")
    stored = list(
        Message.objects.filter(conversation=conversation).order_by("seq").values_list("content", flat=True)
    )
    assert stored == ["go", "done"]
    link = MirroredThread.objects.get(thread_id="refused")
    assert "message t1" in link.last_error and "nowhere" in link.last_error
    assert "t1" in caplog.text
    # not tried again on the next checkpoint
    assert MirroredMessage.objects.filter(thread=link, message_id="t1").exists()


def test_threads_get_their_own_conversations_and_delete_thread_can_keep_the_record() -> None:
    saver = DjangoSaver(mirror=ConversationMirror(keep_on_thread_delete=True))
    for thread in ("t-a", "t-b"):
        graph = chat_graph(saver, [AIMessage("hello")])
        async_to_sync(graph.ainvoke)(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}}
        )
    a, b = (ConversationMirror().conversation_for(t) for t in ("t-a", "t-b"))
    assert a is not None and b is not None and a.pk != b.pk
    saver.delete_thread("t-a")
    assert ConversationMirror().conversation_for("t-a") is None
    assert Message.objects.filter(conversation=a).count() == 2


def test_an_owner_that_names_no_user_is_refused_with_a_typed_error() -> None:
    # the foreign key refused it only at the commit, as a bare IntegrityError
    saver = DjangoSaver(mirror=ConversationMirror(owner=lambda config: config["configurable"]["user_id"]))
    graph = chat_graph(saver, [AIMessage("hello")])
    with pytest.raises(MemoryScopeError, match="no user with id 987654"):
        async_to_sync(graph.ainvoke)(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t-x", "user_id": 987654}}
        )
    assert not Conversation.objects.exists()


def test_an_anonymous_owner_is_refused_with_a_typed_error() -> None:
    from django.contrib.auth.models import AnonymousUser

    saver = DjangoSaver(mirror=ConversationMirror(owner=lambda config: AnonymousUser()))
    graph = chat_graph(saver, [AIMessage("hello")])
    with pytest.raises(MemoryScopeError, match="anonymous"):
        async_to_sync(graph.ainvoke)(
            {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t-a"}}
        )
    assert not Conversation.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_checkpoints_of_a_new_thread_mirror_each_message_once() -> None:
    import threading

    from django.db import connection

    mirror = ConversationMirror()
    messages = [HumanMessage("hello", id="h1"), AIMessage("hi there", id="a1")]
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def put() -> None:
        try:
            barrier.wait()
            mirror.mirror({"configurable": {"thread_id": "raced"}}, {"messages": messages}, {"messages": "2"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=put) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert MirroredThread.objects.filter(thread_id="raced").count() == 1
    assert Conversation.objects.filter(metadata__langgraph_thread_id="raced").count() == 1
    conversation = ConversationMirror().conversation_for("raced")
    assert list(Message.objects.filter(conversation=conversation).values_list("content", flat=True)) == [
        "hello",
        "hi there",
    ]


def test_the_admin_shows_checkpoints_store_items_and_mirrored_threads(admin_client) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.contrib.langgraph import DjangoStore

    graph = chat_graph(DjangoSaver(mirror=ConversationMirror()), [AIMessage("hello")])
    async_to_sync(graph.ainvoke)({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "shown"}})
    DjangoStore().put(("users", "1"), "note", {"text": "likes tea"})
    link = MirroredThread.objects.get(thread_id="shown")
    for url in (
        "/admin/agentmemory_langgraph/checkpoint/?q=shown",
        "/admin/agentmemory_langgraph/storeitem/",
        "/admin/agentmemory_langgraph/mirroredthread/",
        f"/admin/agentmemory_langgraph/mirroredthread/{link.pk}/change/",
        f"/admin/agentmemory_langgraph/checkpoint/{Checkpoint.objects.filter(thread_id='shown').first().pk}/change/",
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
    page = admin_client.get(f"/admin/agentmemory_langgraph/mirroredthread/{link.pk}/change/").content.decode()
    assert f"/admin/agentmemory/conversation/{link.conversation_id}/change/" in page
    assert admin_client.get("/admin/agentmemory_langgraph/checkpoint/add/").status_code == 403


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_message_mirrored_after_the_append_functions_went_away_is_stored_with_the_checkpoint() -> None:
    """A connection that has found the one-message append's server-side function calls it;
    dropped under it (``migrate`` back past 0029 while the graph's worker runs), the call fails
    inside the checkpoint's transaction. The mirror appends again, as text: the checkpoint and
    the message are saved, as the module promises (mirroring never fails a graph step)."""
    from django.db import transaction

    from tests.test_append_function import _drop_functions, _make_again

    mirror = ConversationMirror()
    config = {"configurable": {"thread_id": "dropped"}}
    sent = [HumanMessage("one", id="h1"), AIMessage("two", id="a1"), HumanMessage("three", id="h2")]
    mirror.mirror(config, {"messages": sent[:1]}, {"messages": "1"})  # the connection finds them
    mirror.mirror(config, {"messages": sent[:2]}, {"messages": "2"})  # and calls them
    _drop_functions()
    try:
        with transaction.atomic():  # the saver's, around the checkpoint's rows and the mirror
            mirror.mirror(config, {"messages": sent}, {"messages": "3"})
    finally:
        _make_again()
    conversation = ConversationMirror().conversation_for("dropped")
    rows = Message.objects.filter(conversation=conversation).order_by("seq")
    assert [(m.seq, m.content) for m in rows] == [(1, "one"), (2, "two"), (3, "three")]
    assert MirroredMessage.objects.filter(thread__thread_id="dropped").count() == 3
