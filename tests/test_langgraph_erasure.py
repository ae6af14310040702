"""Erasing the words of a mirrored conversation erases them from the LangGraph thread too, and
a run still in flight when its thread is deleted cannot bring it back (BUG-23: aegra/aegra#499,
langchain-ai/langgraph#8054, langchain-ai/langgraph#7206)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.db import close_old_connections
from django.utils import timezone
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

from agentmemory.contrib.langgraph import ConversationMirror, DjangoSaver
from agentmemory.contrib.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
    MirroredMessage,
    MirroredThread,
)
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Conversation, Message
from tests.test_langgraph_mirror import chat_graph

pytestmark = pytest.mark.django_db

SECRET = b"4111-1111"


def _chat(saver: DjangoSaver, thread: str, text: str, answer: str = "noted") -> dict[str, Any]:
    graph = chat_graph(saver, [AIMessage(answer)])
    result: dict[str, Any] = async_to_sync(graph.ainvoke)(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}}
    )
    return result


def _words_in_checkpoints(thread: str) -> bool:
    """Whether any checkpoint, value or pending write of the thread holds ``SECRET``."""
    for model, field in ((Checkpoint, "checkpoint"), (CheckpointBlob, "blob"), (CheckpointWrite, "blob")):
        for data in model._base_manager.filter(thread_id=thread).values_list(field, flat=True):
            if data is not None and SECRET in bytes(data):
                return True
    return any(
        SECRET.decode() in str(m) for m in Checkpoint.objects.filter(thread_id=thread).values_list("metadata")
    )


def _texts(thread: str) -> list[str]:
    conversation = ConversationMirror().conversation_for(thread)
    assert conversation is not None
    return list(
        Message.objects.filter(conversation=conversation).order_by("seq").values_list("content", flat=True)
    )


@pytest.mark.parametrize("owned", [True, False], ids=["owner", "no-owner"])
def test_clearing_a_mirrored_conversation_erases_the_thread_and_it_starts_afresh(
    owned: bool, django_user_model: Any
) -> None:
    owner = django_user_model.objects.create_user("alice") if owned else None
    saver = DjangoSaver(mirror=ConversationMirror(owner=owner))
    _chat(saver, "t-1", f"my card is {SECRET.decode()}")
    _chat(saver, "t-other", f"my card is {SECRET.decode()}")
    assert _words_in_checkpoints("t-1")
    conversation = ConversationMirror().conversation_for("t-1")
    assert conversation is not None

    PersistentChatHistory(conversation.pk).clear()

    assert not _words_in_checkpoints("t-1")
    assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
    assert not MirroredMessage.objects.filter(thread__thread_id="t-1").exists()
    assert _words_in_checkpoints("t-other")  # another thread keeps its own
    # the next run starts afresh: the graph does not remember, the conversation gets only it
    state = _chat(saver, "t-1", "hello again", "hi")
    assert [m.content for m in state["messages"]] == ["hello again", "hi"]
    assert _texts("t-1") == ["hello again", "hi"]
    assert ConversationMirror().conversation_for("t-1") == conversation


def test_blanking_content_erases_the_words_from_the_threads_checkpoints(settings: Any) -> None:
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30}
    saver = DjangoSaver(mirror=ConversationMirror())
    _chat(saver, "t-old", f"my card is {SECRET.decode()}")
    _chat(saver, "t-new", f"my card is {SECRET.decode()}")
    old = ConversationMirror().conversation_for("t-old")
    assert old is not None
    Conversation.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=45))

    call_command("purge_conversations", "--blank-content", "--no-progress", stdout=None)

    assert not _words_in_checkpoints("t-old")
    assert saver.get_tuple({"configurable": {"thread_id": "t-old"}}) is None
    assert _words_in_checkpoints("t-new")  # not expired
    # the blanked conversation stays, and the thread's next run does not refill it with the old words
    _chat(saver, "t-old", "hello again", "hi")
    assert _texts("t-old") == ["", "", "hello again", "hi"]


def test_purging_a_mirrored_conversation_deletes_the_thread(settings: Any) -> None:
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30}
    saver = DjangoSaver(mirror=ConversationMirror())
    _chat(saver, "t-old", f"my card is {SECRET.decode()}")
    old = ConversationMirror().conversation_for("t-old")
    assert old is not None
    Conversation.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(days=45))
    call_command("purge_conversations", "--no-progress", stdout=None)
    assert not Conversation.objects.filter(pk=old.pk).exists()
    assert not _words_in_checkpoints("t-old")
    assert not Checkpoint.objects.filter(thread_id="t-old").exists()


# -- a run in flight when its thread is deleted ----------------------------------------------


def _graph_deleting_its_thread(saver: DjangoSaver, delete: Any) -> Any:
    """answer -> (the thread is deleted, as by another request) -> follow-up."""

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"I keep {SECRET.decode()} safe")]}

    async def follow_up(state: MessagesState) -> dict[str, Any]:
        await delete()
        return {"messages": [AIMessage("anything else?")]}

    async def last(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("bye")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_node("follow_up", follow_up)
    builder.add_node("last", last)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "follow_up")
    builder.add_edge("follow_up", "last")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_in_flight_does_not_bring_back_the_thread_delete_thread_deleted(durability: str) -> None:
    saver = DjangoSaver(mirror=ConversationMirror())
    graph = _graph_deleting_its_thread(saver, lambda: saver.adelete_thread("t-1"))
    _chat(saver, "t-2", "another thread")

    result = async_to_sync(graph.ainvoke)(
        {"messages": [HumanMessage(f"my card is {SECRET.decode()}")]},
        {"configurable": {"thread_id": "t-1"}},
        durability=durability,
    )

    assert [m.content for m in result["messages"]][-1] == "bye"  # the run finished
    assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
    for model in (Checkpoint, CheckpointBlob, CheckpointWrite):
        assert not model._base_manager.filter(thread_id="t-1").exists(), model
    assert not MirroredThread.objects.filter(thread_id="t-1").exists()
    assert not Message.objects.filter(content__contains=SECRET.decode()).exists()
    assert saver.get_tuple({"configurable": {"thread_id": "t-2"}}) is not None
    # a new run on the same thread id starts it afresh
    _chat(saver, "t-1", "hello again", "hi")
    assert _texts("t-1") == ["hello again", "hi"]


@pytest.mark.parametrize("erase", ["clear", "delete"])
def test_a_run_in_flight_does_not_bring_back_an_erased_conversation(erase: str) -> None:
    saver = DjangoSaver(mirror=ConversationMirror())

    async def erase_conversation() -> None:
        conversation = await sync_to_async(ConversationMirror().conversation_for)("t-1")
        assert conversation is not None
        if erase == "clear":
            await PersistentChatHistory(conversation.pk).aclear()
        else:
            await sync_to_async(conversation.delete)()

    graph = _graph_deleting_its_thread(saver, erase_conversation)
    async_to_sync(graph.ainvoke)(
        {"messages": [HumanMessage(f"my card is {SECRET.decode()}")]},
        {"configurable": {"thread_id": "t-1"}},
        durability="sync",
    )
    assert not _words_in_checkpoints("t-1")
    assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
    assert not Message.objects.filter(content__contains=SECRET.decode()).exists()
    if erase == "clear":
        assert _texts("t-1") == []
    else:
        assert ConversationMirror().conversation_for("t-1") is None


def test_late_put_and_put_writes_with_a_config_from_before_the_delete_store_nothing() -> None:
    saver = DjangoSaver()
    first = empty_checkpoint()
    config = saver.put({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}, first, {"step": 0}, {})
    saver.delete_thread("t-1")

    # a write to the deleted checkpoint, then the next checkpoint of the run with its writes
    saver.put_writes(config, [("messages", "late words")], "task-1")
    late = saver.put(config, empty_checkpoint(), {"step": 1}, {})
    saver.put_writes(late, [("messages", "later words")], "task-2")
    assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
    assert not CheckpointWrite.objects.filter(thread_id="t-1").exists()
    assert list(saver.list({"configurable": {"thread_id": "t-1"}})) == []

    # a put without parent is a new run: the thread starts afresh, and late writes stay out
    fresh = saver.put({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    saver.put(late, empty_checkpoint(), {"step": 2}, {})
    saver.put_writes(fresh, [("messages", "new words")], "task-3")
    latest = saver.get_tuple({"configurable": {"thread_id": "t-1"}})
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == fresh["configurable"]["checkpoint_id"]
    assert latest.pending_writes == [("task-3", "messages", "new words")]


def test_a_parent_that_was_never_stored_is_not_refused() -> None:
    """Only deleted threads refuse: a run started from a checkpoint id the saver never held
    (LangGraph then starts from an empty state) is stored, as LangGraph's savers store it."""
    saver = DjangoSaver()
    config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": "", "checkpoint_id": "never-stored"}}
    stored = saver.put(config, empty_checkpoint(), {}, {})
    saver.put_writes(stored, [("messages", "words")], "task-1")
    found = saver.get_tuple({"configurable": {"thread_id": "t-1"}})
    assert found is not None and found.pending_writes == [("task-1", "messages", "words")]


class _HeldMirror(ConversationMirror):
    """A mirror that holds the checkpoint's transaction open until told to go on."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def mirror(self, config: Any, values: Any, new_versions: Any) -> None:
        super().mirror(config, values, new_versions)
        self.inside.set()
        assert self.go_on.wait(10)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_delete_thread_waits_for_a_checkpoint_being_written_and_deletes_it_too() -> None:
    """A ``put`` whose parent is being deleted either finds it gone or commits first and is
    deleted with the thread: ``delete_thread`` waits for the parent row it locks."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    mirror = _HeldMirror()
    saver = DjangoSaver(mirror=mirror)
    mirror.go_on.set()
    parent = saver.put(
        {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}},
        {**empty_checkpoint(), "channel_versions": {"messages": "1"}},
        {},
        {"messages": "1"},
    )
    mirror.go_on.clear()
    mirror.inside.clear()
    late = {**empty_checkpoint(), "channel_values": {"messages": [HumanMessage("late words", id="m1")]}}
    late["channel_versions"] = {"messages": "2"}
    errors: list[BaseException] = []

    def put() -> None:
        try:
            saver.put(parent, late, {"step": 1}, {"messages": "2"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            close_old_connections()

    def delete() -> None:
        try:
            DjangoSaver().delete_thread("t-1")
        finally:
            close_old_connections()

    writer = threading.Thread(target=put)
    writer.start()
    assert mirror.inside.wait(10)
    deleter = threading.Thread(target=delete)
    deleter.start()
    deleter.join(0.5)
    assert deleter.is_alive()  # waits for the checkpoint being written
    mirror.go_on.set()
    writer.join(10)
    deleter.join(10)
    assert not errors
    assert not Checkpoint.objects.filter(thread_id="t-1").exists()
    assert not CheckpointBlob.objects.filter(thread_id="t-1").exists()
    assert not MirroredThread.objects.filter(thread_id="t-1").exists()
    assert not Message.objects.filter(content="late words").exists()
