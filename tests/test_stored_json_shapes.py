"""A JSON column holding a value of another shape than agentmemory writes never makes a read
fail.

``Message.tool_calls`` is a list of ``{"id", "name", "arguments"}`` objects, ``Message.parts``
a list of content parts or NULL, ``metadata`` (of messages, conversations, facts) and a model
call's ``window_changes`` JSON objects: validation refuses anything else, but a row written
by hand (the ORM, SQL, a data migration) can hold any JSON value. Read as it was, a string,
a number, a list of numbers or an object without an ``id`` there failed every context window
of the conversation, its message list in every format, the search, the recorded windows that
held the message, and the admin's transcript, context and message pages (500s, and
``TypeError``/``KeyError`` from ``ContextWindowBuilder.build``). Each column is read in its
shape (``agentmemory.messages.stored_tool_calls``, ``stored_parts``, ``stored_object``); the
rows are not changed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall, stored_parts, stored_tool_calls
from agentmemory.models import Conversation, Fact, Message, ModelCall
from agentmemory.retention import purge_conversations
from agentmemory.transfer import export_conversation
from tests.test_recorded_copies_deleted import FILLER, SECRET, asked, stored

pytestmark = pytest.mark.django_db

ODD = ["text", 5, True, {"a": [1, {"b": None}]}, [1, "a", None], [{"id": 5}], [{"type": "text"}]]
ODD_CALLS = [*ODD, [{"id": "x", "name": None, "arguments": "not json"}], [{"name": "no id"}]]
ODD_PARTS = [*ODD, [{"type": "image", "data": 5, "width": "10"}], [{"type": "sound"}]]


def _conversation(user):  # type: ignore[no-untyped-def]
    # a conversation the memory block quotes: the call's record has a memory entry
    stored(user, [*FILLER, SECRET, "Noted."])
    conversation, call = asked(user)
    PersistentChatHistory(conversation).add_messages(
        [
            ChatMessage.human("hello there"),
            ChatMessage.ai(None, [ToolCall(id="t1", name="lookup", arguments={"q": "hello"})]),
            ChatMessage.tool("found hello", tool_call_id="t1", name="lookup"),
            ChatMessage.human("hello again"),
        ]
    )
    return conversation, call


def _reads(user, conversation, call, admin_client) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Status of every read that shows the conversation's messages."""
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(user)
    base = f"/api/conversations/{conversation.uuid}"
    answers = {}
    for path in ("context/", "messages/", f"model-calls/{call.uuid}/window/"):
        for shape in ("native", "openai", "anthropic", "langchain"):
            answers[f"{path}?{shape}"] = api.get(f"{base}/{path}", {"message_format": shape}).status_code
    answers["search"] = api.get("/api/search/", {"q": "hello"}).status_code
    answers["export"] = api.get(f"{base}/export/").status_code
    admin_client.raise_request_exception = False
    message = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    assert message is not None
    for name, url in [
        ("transcript", reverse("admin:agentmemory_conversation_change", args=[conversation.pk])),
        ("context page", reverse("admin:agentmemory_conversation_context", args=[conversation.pk])),
        ("message page", reverse("admin:agentmemory_message_change", args=[message.pk])),
        ("message list", reverse("admin:agentmemory_message_changelist")),
        ("window page", reverse("admin:agentmemory_modelcall_window", args=[call.pk])),
    ]:
        answers[name] = admin_client.get(url).status_code
    return {name: status for name, status in answers.items() if status >= 500}


@pytest.mark.parametrize("value", ODD_CALLS, ids=repr)
def test_tool_calls_of_any_shape(admin_user, admin_client, value) -> None:  # type: ignore[no-untyped-def]
    conversation, call = _conversation(admin_user)
    Message.objects.filter(conversation=conversation, role="ai").update(tool_calls=value)
    assert _reads(admin_user, conversation, call, admin_client) == {}
    ContextWindowBuilder(Conversation.objects.get(pk=conversation.pk)).build(4_000)
    export_conversation(conversation)
    # blanking rewrites the calls it reads: still in their shape
    Conversation.objects.filter(pk=conversation.pk).update(updated_at="2000-01-01T00:00:00Z")
    purge_conversations(older_than=timedelta(days=30), blank_content=True)
    for calls in Message.objects.filter(conversation=conversation).values_list("tool_calls", flat=True):
        assert all(isinstance(c["id"], str) and c["arguments"] == {} for c in calls)


@pytest.mark.parametrize("value", ODD_PARTS, ids=repr)
def test_parts_of_any_shape(admin_user, admin_client, value) -> None:  # type: ignore[no-untyped-def]
    conversation, call = _conversation(admin_user)
    Message.objects.filter(conversation=conversation).update(parts=value)
    assert _reads(admin_user, conversation, call, admin_client) == {}
    ContextWindowBuilder(Conversation.objects.get(pk=conversation.pk)).build(4_000)


@pytest.mark.parametrize("value", [v for v in ODD if not isinstance(v, dict)], ids=repr)
def test_metadata_of_any_shape(admin_user, admin_client, value) -> None:  # type: ignore[no-untyped-def]
    conversation, call = _conversation(admin_user)
    Message.objects.filter(conversation=conversation).update(metadata=value)
    Conversation.objects.filter(pk=conversation.pk).update(metadata=value)
    Fact.objects.filter(owner=admin_user).update(metadata=value)
    ModelCall.objects.filter(pk=call.pk).update(window_changes=value)
    assert _reads(admin_user, conversation, call, admin_client) == {}
    api = APIClient()
    api.force_authenticate(admin_user)
    assert api.get(f"/api/conversations/{conversation.uuid}/model-calls/").status_code == 200
    assert api.get(f"/api/conversations/{conversation.uuid}/").json()["metadata"] == {}


def test_what_is_in_its_shape_is_read_as_stored() -> None:
    calls = [{"id": "t1", "name": "lookup", "arguments": {"q": 1}}]
    assert stored_tool_calls(calls) is calls
    parts = [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "width": 2, "height": 3}]
    assert stored_parts(parts) is parts
    # what can be read of an entry is kept: a numeric id as its digits, a JSON string's object
    assert stored_tool_calls([{"id": 7, "name": "f", "arguments": '{"a": 1}'}, "x", {"name": "no id"}]) == [
        {"id": "7", "name": "f", "arguments": {"a": 1}}
    ]
    assert stored_parts([{"type": "text", "text": 5}, {"type": "sound"}, 3]) == [{"type": "text"}]
    assert stored_parts([]) is None and stored_parts("x") is None


ODD_CHANGES = [
    {"truncated": {"a": 1}},
    {"truncated": {"1": "x"}},
    {"stubbed": {"1": 5}},
    {"stubbed": {"x": "y"}},
    {"left_out": [1, "a", None]},
    {"memory": "x"},
    {"memory": {"digest": 5, "tokens": "x", "sources": {"conversations": ["a"], "messages": [1]}}},
    {"knowledge": {"facts": "x", "chars": "y"}},
    {"provider_changes": "x"},
    {"provider_changes_more": "x"},
]


@pytest.mark.parametrize("value", ODD_CHANGES, ids=repr)
def test_window_changes_of_any_shape(admin_user, admin_client, value) -> None:  # type: ignore[no-untyped-def]
    # written by ``agentmemory.calls`` in its shape; a record edited by hand failed the
    # call's recorded window (``int()`` of a seq key that is no number), its admin page and
    # the model call list (a memory block's ``tokens`` as text)
    conversation, call = _conversation(admin_user)
    stored = ModelCall.objects.get(pk=call.pk).window_changes
    ModelCall.objects.filter(pk=call.pk).update(window_changes={**stored, **value})
    assert _reads(admin_user, conversation, call, admin_client) == {}
    api = APIClient()
    api.force_authenticate(admin_user)
    assert api.get(f"/api/conversations/{conversation.uuid}/model-calls/").status_code == 200
    admin_client.raise_request_exception = False
    assert admin_client.get(reverse("admin:agentmemory_modelcall_changelist")).status_code == 200
    # what is in its shape is read as stored
    read = ModelCall.objects.get(pk=call.pk).window_changes
    assert {k: v for k, v in read.items() if k not in value} == {
        k: v for k, v in stored.items() if k not in value
    }
