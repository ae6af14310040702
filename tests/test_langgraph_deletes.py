"""Deleting a LangGraph thread, or the agentmemory conversation that mirrors it, deletes the
transcript everywhere it is kept: checkpoints, channel values, pending writes, the mirrored
conversation, and nothing of another thread (aegra/aegra#499, langchain-ai/langgraph#8054)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from langchain_core.messages import AIMessage, HumanMessage

from agentmemory.contrib.langgraph import ConversationMirror, DjangoSaver
from agentmemory.contrib.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
    MirroredMessage,
    MirroredThread,
)
from agentmemory.deletion import forget_user
from agentmemory.models import Conversation, Message
from tests.test_langgraph_mirror import chat_graph

pytestmark = pytest.mark.django_db


def _chat(saver: DjangoSaver, thread: str, text: str = "my card number is 4111") -> None:
    graph = chat_graph(saver, [AIMessage("noted")])
    async_to_sync(graph.ainvoke)({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}})


def _rows(thread: str) -> dict[str, int]:
    return {
        model.__name__: model._base_manager.filter(thread_id=thread).count()
        for model in (Checkpoint, CheckpointBlob, CheckpointWrite)
    }


def _threads(owner: Any) -> DjangoSaver:
    saver = DjangoSaver(mirror=ConversationMirror(owner=owner))
    _chat(saver, "t-gone")
    _chat(saver, "t-kept", "something else")
    return saver


def _gone(thread: str) -> None:
    assert _rows(thread) == {"Checkpoint": 0, "CheckpointBlob": 0, "CheckpointWrite": 0}
    assert not MirroredThread.objects.filter(thread_id=thread).exists()


def _kept(thread: str) -> None:
    assert all(_rows(thread).values())
    link = MirroredThread.objects.get(thread_id=thread)
    assert Message.objects.filter(conversation_id=link.conversation_id).count() == 2


def test_deleting_the_mirrored_conversation_deletes_the_threads_checkpoints(django_user_model) -> None:  # type: ignore[no-untyped-def]
    alice = django_user_model.objects.create_user("alice")
    saver = _threads(alice)
    conversation = ConversationMirror().conversation_for("t-gone")
    assert conversation is not None
    conversation.delete()
    _gone("t-gone")
    _kept("t-kept")
    # the next step of the thread starts afresh: the deleted transcript does not come back
    _chat(saver, "t-gone", "new start")
    again = ConversationMirror().conversation_for("t-gone")
    assert again is not None
    texts = list(Message.objects.filter(conversation=again).order_by("seq").values_list("content", flat=True))
    assert texts == ["new start", "noted"]
    assert (
        not Message.objects.filter(content__contains="4111")
        .exclude(conversation__metadata__langgraph_thread_id="t-kept")
        .exists()
    )


def test_deleting_conversations_in_bulk_and_forget_user_delete_the_checkpoints(django_user_model) -> None:  # type: ignore[no-untyped-def]
    alice, bob = (django_user_model.objects.create_user(name) for name in ("alice", "bob"))
    _threads(alice)
    saver_b = DjangoSaver(mirror=ConversationMirror(owner=bob))
    _chat(saver_b, "t-bob")
    forget_user(alice)
    _gone("t-gone")
    _gone("t-kept")
    _kept("t-bob")
    Conversation.objects.filter(owner=bob).delete()
    _gone("t-bob")


def test_deleting_the_owner_deletes_the_checkpoints_of_their_mirrored_threads(django_user_model) -> None:  # type: ignore[no-untyped-def]
    alice = django_user_model.objects.create_user("alice")
    _threads(alice)
    alice.delete()
    _gone("t-gone")
    _gone("t-kept")


def test_delete_thread_deletes_the_mirrored_conversation(django_user_model) -> None:  # type: ignore[no-untyped-def]
    alice = django_user_model.objects.create_user("alice")
    saver = _threads(alice)
    conversation = ConversationMirror().conversation_for("t-gone")
    assert conversation is not None
    saver.delete_thread("t-gone")
    _gone("t-gone")
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not Message.objects.filter(conversation_id=conversation.pk).exists()
    assert not MirroredMessage.objects.filter(thread__thread_id="t-gone").exists()
    _kept("t-kept")
