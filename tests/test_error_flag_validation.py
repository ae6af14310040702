"""``metadata["is_error"]`` is the flag of a failed tool result that goes to the model
(Anthropic's ``tool_result.is_error``, LangChain's ``ToolMessage.status``). A result stored
with ``"yes"``, ``"true"`` or ``1`` was accepted and then sent as a success; a human message
could carry it too. Both are refused, by the Python API and by the HTTP API, and nothing of
the batch is stored."""

from __future__ import annotations

import pytest

from agentmemory.exceptions import InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db


def _call() -> ChatMessage:
    return ChatMessage.ai(None, tool_calls=[ToolCall(id="c1", name="lookup", arguments={})])


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None, [True], {"v": True}])
def test_a_flag_that_is_not_a_boolean_is_refused_and_nothing_is_stored(value) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(agent_key="flags")
    history = PersistentChatHistory(conv)
    batch = [
        ChatMessage.human("look it up"),
        _call(),
        ChatMessage.tool("lookup failed", tool_call_id="c1", metadata={"is_error": value}),
    ]
    with pytest.raises(InvalidMessageError, match="is_error must be true or false") as caught:
        history.add_messages(batch)
    assert caught.value.index == 2
    assert not Message.objects.filter(conversation=conv).exists()


def test_only_a_tool_result_carries_the_flag() -> None:
    history = PersistentChatHistory(Conversation.objects.create(agent_key="flags"))
    with pytest.raises(InvalidMessageError, match="failed tool result"):
        history.add_message(ChatMessage.human("hi", metadata={"is_error": True}))
    # false says nothing and is taken anywhere; true on a tool result is the flag
    history.add_message(ChatMessage.human("hi", metadata={"is_error": False}))
    history.add_messages(
        [_call(), ChatMessage.tool("lookup failed", tool_call_id="c1", metadata={"is_error": True})]
    )
    assert [m.metadata.get("is_error") for m in history.messages] == [False, None, True]


def test_the_api_answers_400_for_a_flag_that_is_not_a_boolean(api, user) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="flags")
    body = {
        "messages": [
            {"role": "human", "content": "look it up"},
            {"role": "ai", "content": None, "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {}}]},
            {"role": "tool", "content": "failed", "tool_call_id": "c1", "metadata": {"is_error": "yes"}},
        ]
    }
    response = api.post(f"/api/conversations/{conv.uuid}/messages/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "is_error" in response.content.decode()
    assert not Message.objects.filter(conversation=conv).exists()
