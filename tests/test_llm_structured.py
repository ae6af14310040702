"""Structured calls: each adapter asks through its provider's contract (OpenAI's strict
``json_schema`` response format, Anthropic's forced tool use, LangChain's
``with_structured_output``), against local fake servers speaking the real APIs, and any other
``ChatModel`` is asked in the prompt; the reply's JSON is checked strictly by the caller."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from agentmemory.exceptions import StructuredOutputError
from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.base import ChatResponse, OutputSchema, StructuredChatModel
from agentmemory.llm.facts import SUMMARY_WITH_FACTS, read_summary_with_facts
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.llm.langchain import LangChainChatModel
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.llm.structured import decode_json, invoke_structured, schema_problems
from agentmemory.messages import ChatMessage
from tests.fake_openai_server import ScriptedReply, _completion
from tests.test_llm_langchain import ScriptedToolModel

REPLY = {
    "summary": "Caroline went to a support group on 7 May 2023.",
    "facts": [
        {
            "content": "Caroline went to an LGBTQ support group on 7 May 2023.",
            "category": "events",
            "source": 3,
            "persistent": True,
            "importance": 0.6,
        }
    ],
}
MESSAGES = [ChatMessage.system("Summarise."), ChatMessage.human("[#3] Caroline: I went yesterday.")]


@pytest.fixture
def openai_model(fake_openai):  # type: ignore[no-untyped-def]
    model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="sk", max_retries=0)
    yield model
    model.close()


@pytest.fixture
def anthropic_model(fake_anthropic):  # type: ignore[no-untyped-def]
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="sk", max_retries=0, max_tokens=4096
    )
    yield model
    model.close()


def test_the_adapters_are_structured_chat_models(openai_model, anthropic_model) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(openai_model, StructuredChatModel)
    assert isinstance(anthropic_model, StructuredChatModel)
    assert isinstance(LangChainChatModel(ScriptedToolModel()), StructuredChatModel)
    assert not isinstance(ScriptedChatModel(), StructuredChatModel)


# -- OpenAI: response_format json_schema, strict ------------------------------------------------


def test_openai_sends_a_strict_json_schema_and_parses_the_content(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    fake_openai.enqueue_text(json.dumps(REPLY))
    response = openai_model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)

    assert response.parsed == REPLY
    sent = fake_openai.requests[-1]["response_format"]
    assert sent == {
        "type": "json_schema",
        "json_schema": {
            "name": "conversation_memory",
            "description": SUMMARY_WITH_FACTS.description,
            "schema": SUMMARY_WITH_FACTS.schema,
            "strict": True,
        },
    }
    assert response.usage is not None and response.usage.input_tokens == 12


def test_the_fake_openai_server_refuses_a_schema_strict_mode_does_not_accept(
    fake_openai, openai_model
) -> None:  # type: ignore[no-untyped-def]
    """The fake answers 400 as the API does for a strict schema with an optional property, so
    the summary-with-facts schema above is known to pass the API's check."""
    from agentmemory.exceptions import PermanentLLMError

    loose = OutputSchema(
        name="loose", schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": []}
    )
    with pytest.raises(PermanentLLMError, match=r"HTTP 400.*'required' is required"):
        openai_model.invoke_structured(MESSAGES, output=loose)


def test_openai_refusal_and_cut_off_replies_carry_no_parsed_value(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    fake_openai.enqueue(
        ScriptedReply(200, _completion({"content": None, "refusal": "I can't help."}, "stop", 5, 3, None))
    )
    fake_openai.enqueue_text('{"summary": "Carol', finish_reason="length")

    refused = openai_model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)
    cut = openai_model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)

    assert refused.refused and refused.parsed is None
    assert cut.cut_off and cut.parsed is None


def test_openai_async_structured_call(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    fake_openai.enqueue_text(json.dumps(REPLY))

    async def call() -> ChatResponse:
        try:
            return await openai_model.ainvoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)
        finally:
            await openai_model.aclose()

    assert asyncio.run(call()).parsed == REPLY
    assert fake_openai.requests[-1]["response_format"]["json_schema"]["strict"] is True


# -- Anthropic: forced tool use ---------------------------------------------------------------


def test_anthropic_forces_the_output_tool_and_reads_its_input(fake_anthropic, anthropic_model) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_message(
        [{"type": "tool_use", "id": "toolu_1", "name": "conversation_memory", "input": REPLY}],
        stop_reason="tool_use",
    )
    response = anthropic_model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)

    assert response.parsed == REPLY
    sent = fake_anthropic.requests[-1]
    assert sent["tool_choice"] == {"type": "tool", "name": "conversation_memory"}
    assert sent["tools"] == [
        {
            "name": "conversation_memory",
            "description": SUMMARY_WITH_FACTS.description,
            "input_schema": SUMMARY_WITH_FACTS.schema,
        }
    ]
    assert sent["system"] == "Summarise."


def test_anthropic_reply_cut_at_max_tokens_has_no_parsed_value(fake_anthropic, anthropic_model) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_message(
        [{"type": "tool_use", "id": "toolu_1", "name": "conversation_memory", "input": {"summary": "Car"}}],
        stop_reason="max_tokens",
    )
    response = anthropic_model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)
    assert response.cut_off and response.parsed is None


def test_anthropic_async_structured_call(fake_anthropic, anthropic_model) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.enqueue_message(
        [{"type": "tool_use", "id": "toolu_2", "name": "conversation_memory", "input": REPLY}],
        stop_reason="tool_use",
    )

    async def call() -> ChatResponse:
        try:
            return await anthropic_model.ainvoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)
        finally:
            await anthropic_model.aclose()

    assert asyncio.run(call()).parsed == REPLY


# -- LangChain: with_structured_output, or the prompt ----------------------------------------------


def test_langchain_uses_with_structured_output() -> None:
    chat = ScriptedToolModel(
        script=[
            AIMessage(content="", tool_calls=[{"name": "conversation_memory", "args": REPLY, "id": "c1"}])
        ]
    )
    response = LangChainChatModel(chat).invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)

    assert response.parsed == REPLY
    [(_messages, tools)] = chat.calls
    assert [t["function"]["name"] for t in tools] == ["conversation_memory"]


def test_langchain_model_without_tools_is_asked_in_the_prompt() -> None:
    chat = GenericFakeChatModel(messages=iter([json.dumps(REPLY)]))
    model = LangChainChatModel(chat)

    response = model.invoke_structured(MESSAGES, output=SUMMARY_WITH_FACTS)

    assert response.parsed == REPLY


# -- any other model: the prompt ----------------------------------------------------------------


def test_a_plain_model_gets_the_schema_in_its_system_message() -> None:
    llm = ScriptedChatModel(["```json\n" + json.dumps(REPLY) + "\n```", "Sure! " + json.dumps(REPLY)])

    fenced = invoke_structured(llm, MESSAGES, SUMMARY_WITH_FACTS)
    chatty = invoke_structured(llm, MESSAGES, SUMMARY_WITH_FACTS)

    assert fenced.parsed == REPLY
    assert chatty.parsed is None  # text around the JSON: no value
    system = llm.calls[0][0][0].content
    assert system.startswith("Summarise.\n\nAnswer with one JSON object")
    assert json.dumps(SUMMARY_WITH_FACTS.schema) in system


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        (' \n```\n{"a": 1}\n```\n', {"a": 1}),
        ('{"a": 1} {"b": 2}', None),
        ("The summary is ...", None),
        ("", None),
        (None, None),
    ],
)
def test_decode_json_takes_one_whole_value(text: Any, value: Any) -> None:
    assert decode_json(text) == value


def test_schema_problems_are_strict() -> None:
    schema = SUMMARY_WITH_FACTS.schema
    assert schema_problems(REPLY, schema) == []
    fact = REPLY["facts"][0]
    assert schema_problems({"summary": "s"}, schema) == ["$: 'facts' is missing"]
    assert schema_problems({**REPLY, "extra": 1}, schema) == ["$: 'extra' is not allowed"]
    assert schema_problems({**REPLY, "facts": [{**fact, "source": True}]}, schema) == [
        "$.facts[0].source: expected integer, got boolean"
    ]
    assert schema_problems({**REPLY, "facts": [{**fact, "importance": float("nan")}]}, schema) == [
        "$.facts[0].importance: nan is not a JSON number"
    ]
    assert schema_problems({**REPLY, "facts": [{**fact, "category": "gossip"}]}, schema)[0].startswith(
        "$.facts[0].category: 'gossip' is not one of"
    )
    assert schema_problems([REPLY], schema) == ["$: expected object, got array"]
    bounded = {"type": "array", "maxItems": 1, "items": {"type": "number", "minimum": 0, "maximum": 1}}
    assert schema_problems([0.5, 1.5], bounded) == ["$: more than 1 items", "$[1]: 1.5 is above 1"]


def test_the_schema_keeps_to_what_every_strict_mode_accepts() -> None:
    """No numeric or length bounds in the schema sent (OpenAI-compatible servers differ on
    them): the importance's range and the number of facts are checked on reading."""
    text = json.dumps(SUMMARY_WITH_FACTS.schema)
    assert not any(word in text for word in ('"minimum"', '"maximum"', '"maxItems"', '"minLength"'))
    fact = REPLY["facts"][0]
    with pytest.raises(StructuredOutputError, match=r"importance: 1.5 is not from 0 to 1"):
        read_summary_with_facts({**REPLY, "facts": [{**fact, "importance": 1.5}]}, {3})
    with pytest.raises(StructuredOutputError, match=r"\$.facts: more than 40 items"):
        read_summary_with_facts({**REPLY, "facts": [fact] * 41}, {3})
    summary, facts = read_summary_with_facts(REPLY, {3}, extracted_by="m")
    assert summary == REPLY["summary"] and facts[0].source_seq == 3 and facts[0].extracted_by == "m"
