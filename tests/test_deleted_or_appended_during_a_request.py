"""A conversation changed while a request that read it runs: deleted between the lookup and
the write (PATCH) or the export, or appended to while its export streams. The requester gets
a 404, or a document the import restores; never a 500 or a document the import refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentmemory import transfer
from agentmemory.api.views import ConversationViewSet
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support", title="Order 1042")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("Where is my order?"), ChatMessage.ai("Shipped.")]
    )
    conv.refresh_from_db()
    return conv


@pytest.fixture
def deleted_after_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another request deletes the conversation right after this one looked it up."""
    get_object = ConversationViewSet.get_object

    def then_deleted(self: ConversationViewSet) -> Any:
        found = get_object(self)
        Conversation.objects.filter(pk=found.pk).delete()
        return found

    monkeypatch.setattr(ConversationViewSet, "get_object", then_deleted)


@pytest.mark.usefixtures("deleted_after_lookup")
@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [("patch", "", {"title": "Order 1043", "metadata": {"tier": "gold"}}), ("get", "export/", None)],
)
def test_a_conversation_deleted_during_the_request_is_a_404(api, conv, method, suffix, body) -> None:  # type: ignore[no-untyped-def]
    response = getattr(api, method)(f"/api/conversations/{conv.uuid}/{suffix}", body, format="json")
    assert response.status_code == 404, response.content
    assert response.json()["error"] == "not_found"
    assert not Conversation.objects.filter(pk=conv.pk).exists()


def test_a_patch_writes_only_what_it_names(api, conv) -> None:  # type: ignore[no-untyped-def]
    before = Conversation.objects.get(pk=conv.pk)
    PersistentChatHistory(conv.pk).add_message(ChatMessage.human("Any news?"))  # after the PATCH read it
    response = api.patch(f"/api/conversations/{conv.uuid}/", {"title": "Order 1043"}, format="json")
    assert response.status_code == 200 and response.json()["title"] == "Order 1043"
    after = Conversation.objects.get(pk=conv.pk)
    assert after.title == "Order 1043" and after.updated_at > before.updated_at
    assert (after.last_seq, after.message_count) == (3, 3)


def test_an_export_taken_while_the_conversation_goes_on_is_imported(conv, user) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conv.pk)
    history.add_messages(
        [
            ChatMessage.human("Cancel it."),
            ChatMessage.ai(None, [ToolCall("c1", "cancel_order", {"id": 1042})]),
        ]
    )
    pieces = transfer.export_json(conv)  # the head is read now: a call waits for its result
    # the turn goes on while the document streams: the result, and the next question
    history.add_messages(
        [
            ChatMessage.tool("cancelled", tool_call_id="c1", name="cancel_order"),
            ChatMessage.ai("Cancelled."),
            ChatMessage.human("Thanks!"),
        ]
    )
    document = json.loads(b"".join(pieces))

    copy = transfer.import_conversation(document, owner=user, new_uuid=True)

    assert [m["seq"] for m in document["messages"]] == [1, 2, 3, 4]
    assert copy.message_count == 4 and copy.pending_tool_calls == {"c1": 4}
    assert list(Message.objects.filter(conversation=copy).values_list("seq", flat=True)) == [1, 2, 3, 4]
