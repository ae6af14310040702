"""Tests of ``LangChainChatModel`` with small LangChain fake chat models."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from agentmemory.exceptions import LLMError, TransientLLMError
from agentmemory.llm.base import ChatModel, Usage
from agentmemory.llm.langchain import LangChainChatModel
from agentmemory.messages import ChatMessage, ToolCall

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class ScriptedToolModel(BaseChatModel):
    """A LangChain chat model with tool support that replays ``script`` (messages or exceptions)
    and records each call's messages and bound tools, like ``ChatOpenAI.bind_tools`` does."""

    script: list[Any] = Field(default_factory=list)
    calls: list[tuple[list[BaseMessage], Any]] = Field(default_factory=list)
    model_name: str = "scripted-lc"

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls.append((list(messages), kwargs.get("tools")))
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return ChatResult(generations=[ChatGeneration(message=item)])


class RateLimitError(Exception):
    """Shaped like provider SDK errors: an HTTP status on the exception."""

    status_code = 429


def test_is_a_chat_model_named_after_the_wrapped_model():
    model = LangChainChatModel(ScriptedToolModel())

    assert isinstance(model, ChatModel)
    assert model.model_name == "scripted-lc"
    assert LangChainChatModel(ScriptedToolModel(), model_name="x").model_name == "x"
    assert LangChainChatModel(GenericFakeChatModel(messages=iter([]))).model_name == "generic-fake-chat-model"


def test_plain_reply_with_usage_and_metadata():
    reply = AIMessage(
        content="Hello there!",
        usage_metadata={"input_tokens": 17, "output_tokens": 3, "total_tokens": 20},
        response_metadata={"model_name": "gpt-4o-mini-2024", "finish_reason": "stop"},
    )
    fake = ScriptedToolModel(script=[reply])
    model = LangChainChatModel(fake)

    response = model.invoke([ChatMessage.system("Be brief."), ChatMessage.human("Hi")])

    assert response.message == ChatMessage.ai("Hello there!")
    assert response.usage == Usage(input_tokens=17, output_tokens=3)
    assert response.model == "gpt-4o-mini-2024"
    assert response.finish_reason == "stop"
    assert response.raw["content"] == "Hello there!"
    [(sent, tools)] = fake.calls
    assert sent == [SystemMessage(content="Be brief."), HumanMessage(content="Hi")]
    assert tools is None


def test_tools_are_bound_and_parallel_tool_calls_come_back_with_dict_arguments():
    fake = ScriptedToolModel(
        script=[
            AIMessage(
                content="",
                tool_calls=[
                    {"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}, "type": "tool_call"},
                    {"id": "call_2", "name": "get_weather", "args": {"city": "Rome"}, "type": "tool_call"},
                ],
                response_metadata={"stop_reason": "tool_use"},
            ),
            AIMessage(content="Oslo 3°C, Rome 20°C."),
        ]
    )
    model = LangChainChatModel(fake)
    history = [ChatMessage.human("Weather in Oslo and Rome?")]

    first = model.invoke(history, tools=[WEATHER_TOOL])

    assert first.message == ChatMessage.ai(
        None,
        [
            ToolCall("call_1", "get_weather", {"city": "Oslo"}),
            ToolCall("call_2", "get_weather", {"city": "Rome"}),
        ],
    )
    assert first.finish_reason == "tool_use"
    assert first.usage is None  # the model reported none: agentmemory counts it
    assert fake.calls[0][1] == [{"type": "function", "function": WEATHER_TOOL}]

    history += [
        first.message,
        ChatMessage.tool("3°C", tool_call_id="call_1", name="get_weather"),
        ChatMessage.tool("20°C", tool_call_id="call_2", name="get_weather"),
    ]
    second = model.invoke(history, tools=[WEATHER_TOOL])

    assert second.message.content == "Oslo 3°C, Rome 20°C."
    sent = fake.calls[1][0]
    assert [type(m) for m in sent] == [HumanMessage, AIMessage, ToolMessage, ToolMessage]
    assert sent[1].tool_calls[1]["args"] == {"city": "Rome"}
    assert [m.tool_call_id for m in sent[2:]] == ["call_1", "call_2"]


def test_generic_fake_model_without_tools_works_and_with_tools_is_a_clear_error():
    model = LangChainChatModel(GenericFakeChatModel(messages=iter(["one", "two"])))

    assert model.invoke([ChatMessage.human("hi")]).message == ChatMessage.ai("one")
    with pytest.raises(LLMError, match="does not support tool calling"):
        model.invoke([ChatMessage.human("hi")], tools=[WEATHER_TOOL])


def test_async_path_uses_ainvoke():
    fake = ScriptedToolModel(
        script=[
            AIMessage(
                content="async hello",
                usage_metadata={"input_tokens": 8, "output_tokens": 2, "total_tokens": 10},
            ),
            AIMessage(
                content="",
                tool_calls=[
                    {"id": "c1", "name": "get_weather", "args": {"city": "Oslo"}, "type": "tool_call"}
                ],
            ),
        ]
    )
    model = LangChainChatModel(fake)

    async def run():
        first = await model.ainvoke([ChatMessage.human("hi")])
        second = await model.ainvoke([ChatMessage.human("weather?")], tools=[WEATHER_TOOL])
        return first, second

    first, second = asyncio.run(run())

    assert first.message == ChatMessage.ai("async hello")
    assert first.usage == Usage(input_tokens=8, output_tokens=2)
    assert second.message.tool_calls == (ToolCall("c1", "get_weather", {"city": "Oslo"}),)
    assert fake.calls[1][1] == [{"type": "function", "function": WEATHER_TOOL}]


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (RateLimitError("slow down"), True),
        (TimeoutError("read timed out"), True),
        (ValueError("bad request shape"), False),
    ],
)
def test_errors_are_mapped(error, transient):
    model = LangChainChatModel(ScriptedToolModel(script=[error]))

    with pytest.raises(LLMError) as info:
        model.invoke([ChatMessage.human("hi")])

    assert isinstance(info.value, TransientLLMError) is transient
    assert type(error).__name__ in str(info.value)
    assert str(error) in str(info.value)


def test_unparseable_tool_call_in_reply_is_an_llm_error():
    reply = AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "id": "call_cut",
                "name": "get_weather",
                "args": '{"city": "Os',
                "error": None,
                "type": "invalid_tool_call",
            }
        ],
    )
    model = LangChainChatModel(ScriptedToolModel(script=[reply]))

    with pytest.raises(LLMError, match="call_cut") as info:
        model.invoke([ChatMessage.human("hi")], tools=[WEATHER_TOOL])

    assert not isinstance(info.value, TransientLLMError)
