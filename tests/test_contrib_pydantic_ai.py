"""``agentmemory.contrib.pydantic_ai`` against the real pydantic-ai: converters both ways, and
a real ``Agent`` (``FunctionModel``, ``TestModel``) running on the context window of a stored
conversation through ``ContextWindowProcessor``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agentmemory.compaction import request_compaction
from agentmemory.conf import get_token_counter
from agentmemory.contrib.pydantic_ai import SEQS_KEY, ContextWindowProcessor, from_pydantic_ai, to_pydantic_ai
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, PartKind, Role, ToolCall
from agentmemory.models import Conversation
from tests.factories import ConversationFactory, turn

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def conversation_of_pydantic_ai() -> list[ModelMessage]:
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You answer questions about orders."),
                UserPromptPart(
                    [
                        "Where is order 1042? Here is the receipt:",
                        BinaryContent(data=PNG, media_type="image/png"),
                        ImageUrl(url="https://example.com/box.png"),
                        DocumentUrl(url="https://example.com/invoice.pdf"),
                    ]
                ),
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart("The user wants the status.", signature="sig"),
                TextPart("Let me look."),
                ToolCallPart("lookup_order", {"order_id": "1042"}, tool_call_id="call_1"),
                ToolCallPart("track", '{"carrier": "DHL"}', tool_call_id="call_2"),
            ],
            model_name="test-model",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("lookup_order", {"status": "shipped"}, tool_call_id="call_1"),
                ToolReturnPart("track", "tracking is down", tool_call_id="call_2", outcome="failed"),
            ]
        ),
        ModelResponse(parts=[TextPart("Order 1042 has shipped.")], model_name="test-model"),
    ]


def test_pydantic_ai_messages_convert_both_ways() -> None:
    stored = from_pydantic_ai(conversation_of_pydantic_ai())
    assert [m.role for m in stored] == [Role.SYSTEM, Role.HUMAN, Role.AI, Role.TOOL, Role.TOOL, Role.AI]
    human = stored[1]
    assert [p.kind for p in human.parts] == [PartKind.TEXT, PartKind.IMAGE, PartKind.IMAGE, PartKind.FILE]
    assert human.parts[1].mime_type == "image/png" and human.parts[2].url == "https://example.com/box.png"
    ai = stored[2]
    assert ai.content == "Let me look."
    assert ai.tool_calls == (
        ToolCall("call_1", "lookup_order", {"order_id": "1042"}),
        ToolCall("call_2", "track", {"carrier": "DHL"}),
    )
    assert ai.metadata["model"] == "test-model"
    assert ai.metadata["pydantic_ai_thinking"][0]["content"] == "The user wants the status."
    assert stored[3].content == '{"status": "shipped"}' and stored[3].name == "lookup_order"
    assert stored[4].metadata == {"pydantic_ai_outcome": "failed", "is_error": True}

    back = to_pydantic_ai(stored)
    assert [type(m) for m in back] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
    assert [p.part_kind for p in back[0].parts] == ["system-prompt", "user-prompt"]
    assert back[0].parts[1].content[1] == BinaryContent(data=PNG, media_type="image/png")
    assert back[0].parts[1].content[2] == ImageUrl(url="https://example.com/box.png")
    response = back[1]
    assert [p.part_kind for p in response.parts] == ["thinking", "text", "tool-call", "tool-call"]
    assert response.parts[0].signature == "sig"
    assert [(p.tool_name, p.args_as_dict(), p.tool_call_id) for p in response.parts[2:]] == [
        ("lookup_order", {"order_id": "1042"}, "call_1"),
        ("track", {"carrier": "DHL"}, "call_2"),
    ]
    assert [(p.tool_call_id, p.outcome) for p in back[2].parts] == [
        ("call_1", "success"),
        ("call_2", "failed"),
    ]
    # and once more through storage's columns: the same messages
    assert from_pydantic_ai(back) == stored


@pytest.mark.django_db
def test_stored_messages_are_marked_and_not_stored_twice() -> None:
    conversation = ConversationFactory()
    stored = PersistentChatHistory(conversation).add_messages(turn(0, tool=True))
    converted = to_pydantic_ai(stored)
    assert [m.metadata for m in converted] == [
        {SEQS_KEY: [1]},
        {SEQS_KEY: [2]},
        {SEQS_KEY: [3]},
        {SEQS_KEY: [4]},
    ]
    assert from_pydantic_ai(converted) == []
    assert len(from_pydantic_ai(converted, include_stored=True)) == 4


def _history(conversation: Conversation) -> list[ChatMessage]:
    return PersistentChatHistory(conversation).get_messages()


@pytest.mark.django_db(transaction=True)
def test_an_agent_runs_on_the_window_and_its_new_messages_are_stored() -> None:
    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    history.add_messages(
        [
            ChatMessage.human("My name is Ann and my order is 1042."),
            ChatMessage.ai(None, [ToolCall("call_0", "lookup_order", {"order_id": "1042"})]),
            ChatMessage.tool('{"status": "packed"}', tool_call_id="call_0", name="lookup_order"),
            ChatMessage.ai("Order 1042 is packed."),
        ]
    )
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        if len(seen) == 1:
            return ModelResponse(
                parts=[ToolCallPart("lookup_order", {"order_id": "1042"}, tool_call_id="call_1")]
            )
        return ModelResponse(parts=[TextPart("Ann, order 1042 has shipped.")])

    window = ContextWindowProcessor(max_tokens=2_000)
    agent = Agent(
        FunctionModel(model),
        system_prompt="You answer questions about orders.",
        capabilities=[window.capability()],
    )

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        return '{"status": "shipped"}'

    result = run(agent.run("What is the status now?", deps=conversation))
    assert result.output == "Ann, order 1042 has shipped."

    # the first model call: the agent's system prompt, the stored turn (tool exchange whole),
    # then the new question
    first = from_pydantic_ai(seen[0], include_stored=True)
    assert [m.text for m in first] == [
        "You answer questions about orders.",
        "My name is Ann and my order is 1042.",
        "",
        '{"status": "packed"}',
        "Order 1042 is packed.",
        "What is the status now?",
    ]
    # the second call has the window once, then the run's tool exchange
    second = from_pydantic_ai(seen[1], include_stored=True)
    assert [m.role for m in second[:5]] == [Role.SYSTEM, Role.HUMAN, Role.AI, Role.TOOL, Role.AI]
    assert [m.role for m in second[5:]] == [Role.HUMAN, Role.AI, Role.TOOL]
    assert second[-1].tool_call_id == "call_1"
    assert len(second) == 8

    # what the run added is stored, and nothing twice
    run(history.aadd_messages(from_pydantic_ai(result.new_messages(), include_system_prompts=False)))
    assert [m.text for m in _history(conversation)[4:]] == [
        "What is the status now?",
        "",
        '{"status": "shipped"}',
        "Ann, order 1042 has shipped.",
    ]
    assert len(_history(conversation)) == 8


@pytest.mark.django_db(transaction=True)
def test_the_window_fits_the_budget_with_the_summary() -> None:
    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    for i in range(30):
        history.add_messages(turn(i, tool=i % 3 == 0, words=30))
    request_compaction(conversation.pk, force=True, max_tokens=600)
    conversation.refresh_from_db()
    assert conversation.summary is not None
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("ok")])

    window = ContextWindowProcessor(conversation, max_tokens=600)
    run(Agent(FunctionModel(model), capabilities=[window.capability()]).run("And now?"))
    sent = from_pydantic_ai(seen[0], include_stored=True)
    counter = get_token_counter()
    assert sum(counter.count_message(m) for m in sent) <= 600
    assert sent[0].role is Role.SYSTEM and sent[0].text.endswith(conversation.summary.text)
    assert sent[1].role is Role.HUMAN  # the history starts on a human message
    assert sent[-1].text == "And now?"
    assert window.last_window is not None and window.last_window.summary_tokens > 0


@pytest.mark.django_db(transaction=True)
def test_a_run_without_a_conversation_is_an_error() -> None:
    agent = Agent(TestModel(), capabilities=[ContextWindowProcessor().capability()])
    with pytest.raises(TypeError, match="needs a conversation"):
        run(agent.run("hello"))


@pytest.mark.django_db(transaction=True)
def test_a_run_larger_than_the_budget_is_an_error() -> None:
    conversation = ConversationFactory()
    window = ContextWindowProcessor(conversation, max_tokens=5)
    agent = Agent(TestModel(), capabilities=[window.capability()])
    with pytest.raises(ContextBudgetExceeded, match="the run's own messages"):
        run(agent.run("a question much longer than five tokens, as it happens"))


@pytest.mark.django_db(transaction=True)
def test_test_model_runs_several_turns_on_a_stored_conversation() -> None:
    """``TestModel`` calls every tool while no tool result is in sight, then answers: three
    turns, each stored after its run, each run seeing the ones before it (so only the first
    calls the tool)."""
    conversation = ConversationFactory()
    history = PersistentChatHistory(conversation)
    window = ContextWindowProcessor(max_tokens=4_000)
    agent = Agent(TestModel(), instructions="Be brief.", capabilities=[window.capability()])

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        return f"order {order_id} shipped"

    sizes = []
    for i in range(3):
        result = run(agent.run(f"question {i}", deps=conversation.uuid))
        sizes.append(len(window.last_window.messages))  # type: ignore[union-attr]
        run(history.aadd_messages(from_pydantic_ai(result.new_messages())))
    assert sizes == [0, 4, 6]
    stored = _history(conversation)
    assert [m.role for m in stored] == [Role.HUMAN, Role.AI, Role.TOOL, Role.AI] + [Role.HUMAN, Role.AI] * 2
    assert [m.text for m in stored if m.role is Role.HUMAN] == ["question 0", "question 1", "question 2"]
    assert stored[1].tool_calls[0].name == "lookup_order"
