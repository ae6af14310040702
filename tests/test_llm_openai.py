"""Tests of ``OpenAIChatModel`` through the real ``openai`` SDK against a local fake server."""

from __future__ import annotations

import asyncio
import gc

import openai
import pytest

from agentmemory.exceptions import LLMError, TransientLLMError
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.llm.openai import OpenAIChatModel, from_env
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage, Role, ToolCall
from tests.fake_openai_server import FakeOpenAIServer

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def model(fake_openai):
    chat_model = OpenAIChatModel(
        model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test", timeout=5.0, max_retries=2
    )
    yield chat_model
    chat_model.close()


def test_is_a_chat_model(model):
    assert isinstance(model, ChatModel)
    assert model.model_name == "gpt-test"


def test_plain_reply(fake_openai, model):
    fake_openai.enqueue_text("Hello there!", prompt_tokens=17, completion_tokens=3)

    response = model.invoke([ChatMessage.system("Be brief."), ChatMessage.human("Hi")])

    assert isinstance(response, ChatResponse)
    assert response.message == ChatMessage.ai("Hello there!")
    assert response.usage == Usage(input_tokens=17, output_tokens=3)
    assert response.model == "gpt-test"
    assert response.finish_reason == "stop"
    assert response.raw["object"] == "chat.completion"
    assert response.raw["usage"]["total_tokens"] == 20
    [request] = fake_openai.requests
    assert request["model"] == "gpt-test"
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert "tools" not in request
    assert "temperature" not in request
    assert fake_openai.request_headers[0]["authorization"] == "Bearer sk-test"


def test_single_tool_call(fake_openai, model):
    call_id = fake_openai.enqueue_tool_call("get_weather", {"city": "Oslo"})

    response = model.invoke([ChatMessage.human("Weather in Oslo?")], tools=[WEATHER_TOOL])

    assert response.message == ChatMessage.ai(None, [ToolCall(call_id, "get_weather", {"city": "Oslo"})])
    assert response.finish_reason == "tool_calls"
    assert fake_openai.requests[0]["tools"] == [{"type": "function", "function": WEATHER_TOOL}]


def test_parallel_tool_calls_and_follow_up_request(fake_openai, model):
    fake_openai.enqueue_tool_calls(
        [
            ("get_weather", {"city": "Oslo"}, "call_1"),
            ("get_weather", {"city": "Zürich", "days": [1, 2]}, "call_2"),
        ],
        content="Checking both.",
    )
    fake_openai.enqueue_text("Oslo 3°C, Zürich 9°C.")
    history = [ChatMessage.human("Weather in Oslo and Zürich?")]

    first = model.invoke(history, tools=[WEATHER_TOOL])

    assert first.message.content == "Checking both."
    assert [(c.id, c.name, c.arguments) for c in first.message.tool_calls] == [
        ("call_1", "get_weather", {"city": "Oslo"}),
        ("call_2", "get_weather", {"city": "Zürich", "days": [1, 2]}),
    ]
    assert all(isinstance(c.arguments, dict) for c in first.message.tool_calls)
    history += [
        first.message,
        ChatMessage.tool("3°C", tool_call_id="call_1", name="get_weather"),
        ChatMessage.tool("9°C", tool_call_id="call_2", name="get_weather"),
    ]

    second = model.invoke(history, tools=[WEATHER_TOOL])

    assert second.message.content == "Oslo 3°C, Zürich 9°C."
    sent = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    # Arguments go back as JSON strings, as the API requires (the fake server checks it too).
    assert sent[1]["tool_calls"][1]["function"]["arguments"] == '{"city": "Zürich", "days": [1, 2]}'


def test_bug_20_history_with_null_content_is_accepted(fake_openai, model):
    fake_openai.enqueue_text("It is 03:05 in Oslo.")
    history = [
        ChatMessage.human("What time is it in Tokyo?"),
        ChatMessage.ai(None, [ToolCall("call_t1", "get_time", {"tz": "Asia/Tokyo"})]),
        ChatMessage.tool("14:05", tool_call_id="call_t1"),
        ChatMessage.ai("It is 14:05 in Tokyo."),
        ChatMessage.human("And in Oslo?"),
    ]

    model.invoke(history)

    assert fake_openai.requests[0]["messages"][1]["content"] is None


def test_temperature_and_extra_body_are_sent(fake_openai):
    fake_openai.enqueue_text("ok")
    chat_model = OpenAIChatModel(
        model="llama3", base_url=fake_openai.base_url, temperature=0.2, extra_body={"top_k": 20}
    )

    chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()
    assert fake_openai.requests[0]["temperature"] == 0.2
    assert fake_openai.requests[0]["top_k"] == 20


def test_rate_limit_then_success_is_retried_transparently(fake_openai, model):
    fake_openai.enqueue_rate_limit()
    fake_openai.enqueue_text("after the retry")

    response = model.invoke([ChatMessage.human("hi")])

    assert response.message.content == "after the retry"
    assert len(fake_openai.requests) == 2


def test_persistent_server_error_is_transient(fake_openai):
    fake_openai.enqueue_server_error(times=2)
    chat_model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=1)

    with pytest.raises(TransientLLMError) as info:
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()
    message = str(info.value)
    assert "HTTP 500" in message
    assert "max_retries=1" in message
    assert "The server had an error while processing your request" in message
    assert len(fake_openai.requests) == 2


def test_exhausted_rate_limit_is_transient(fake_openai):
    fake_openai.enqueue_rate_limit(times=1)
    chat_model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)

    with pytest.raises(TransientLLMError, match=r"HTTP 429.*Rate limit reached"):
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()


def test_bad_request_is_a_permanent_llm_error(fake_openai, model):
    fake_openai.enqueue_error(400, "Invalid value for 'temperature'.", type="invalid_request_error")

    with pytest.raises(LLMError) as info:
        model.invoke([ChatMessage.human("hi")])

    assert not isinstance(info.value, TransientLLMError)
    assert "HTTP 400" in str(info.value)
    assert "Invalid value for 'temperature'." in str(info.value)
    assert len(fake_openai.requests) == 1


def test_invalid_history_is_refused_by_the_server_as_llm_error(fake_openai, model):
    # An ai tool-call message whose result is missing: the OpenAI API answers 400.
    history = [
        ChatMessage.human("hi"),
        ChatMessage.ai(None, [ToolCall("call_9", "f", {})]),
        ChatMessage.human("?"),
    ]

    with pytest.raises(LLMError, match=r"HTTP 400.*call_9") as info:
        model.invoke(history)

    assert not isinstance(info.value, TransientLLMError)


def test_authentication_error_is_permanent(fake_openai, model):
    fake_openai.enqueue_error(
        401, "Incorrect API key provided.", type="invalid_request_error", code="invalid_api_key"
    )

    with pytest.raises(LLMError, match=r"HTTP 401.*Incorrect API key") as info:
        model.invoke([ChatMessage.human("hi")])

    assert not isinstance(info.value, TransientLLMError)


def test_connection_refused_is_transient():
    with FakeOpenAIServer() as server:
        base_url = server.base_url
    chat_model = OpenAIChatModel(model="gpt-test", base_url=base_url, api_key="k", max_retries=0)

    with pytest.raises(TransientLLMError, match="could not connect"):
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()


def test_timeout_is_transient(fake_openai):
    fake_openai.enqueue_text("too late", delay=1.0)
    chat_model = OpenAIChatModel(
        model="gpt-test", base_url=fake_openai.base_url, api_key="k", timeout=0.2, max_retries=0
    )

    with pytest.raises(TransientLLMError, match=r"timed out after 0\.2 s"):
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()


def test_unparseable_tool_arguments_in_reply_are_kept_as_raw_text(fake_openai, model):
    """A reply cut off mid-arguments does not fail the turn: the call keeps its text under
    RAW_ARGUMENTS_KEY, storable, so the caller answers it with an error result."""
    fake_openai.enqueue_tool_call("get_weather", '{"city": "Os', call_id="call_cut")

    response = model.invoke([ChatMessage.human("Weather?")], tools=[WEATHER_TOOL])
    (call,) = response.message.tool_calls
    assert call.id == "call_cut" and call.name == "get_weather"
    assert call.arguments == {RAW_ARGUMENTS_KEY: '{"city": "Os'}


def test_tool_arguments_too_deep_to_parse_are_kept_as_raw_text(fake_openai, model):
    nested = '{"a": ' + "[" * 5_000 + "]" * 5_000 + "}"
    fake_openai.enqueue_tool_call("get_weather", nested, call_id="call_deep")

    response = model.invoke([ChatMessage.human("Weather?")], tools=[WEATHER_TOOL])
    (call,) = response.message.tool_calls
    assert call.arguments == {RAW_ARGUMENTS_KEY: nested}


def test_async_path(fake_openai, model):
    fake_openai.enqueue_text("async hello", prompt_tokens=8, completion_tokens=2)
    fake_openai.enqueue_tool_calls(
        [("get_weather", {"city": "Oslo"}, "c1"), ("get_weather", {"city": "Rome"}, "c2")]
    )
    fake_openai.enqueue_text("second loop")

    async def run():
        first = await model.ainvoke([ChatMessage.human("hi")])
        second = await model.ainvoke([ChatMessage.human("weather?")], tools=[WEATHER_TOOL])
        return first, second

    first, second = asyncio.run(run())
    # A new event loop gets a new client (an httpx pool cannot cross loops); each loop's client is
    # closed at loop shutdown, so no pooled keep-alive socket is left to a ResourceWarning.
    third = asyncio.run(model.ainvoke([ChatMessage.human("again")]))
    gc.collect()

    assert first.message == ChatMessage.ai("async hello")
    assert first.usage == Usage(input_tokens=8, output_tokens=2)
    assert [c.arguments for c in second.message.tool_calls] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert third.message.content == "second loop"
    assert third.message.role == Role.AI


def test_async_errors_are_mapped(fake_openai):
    fake_openai.enqueue_server_error(times=1)
    chat_model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)

    async def run():
        try:
            await chat_model.ainvoke([ChatMessage.human("hi")])
        finally:
            await chat_model.aclose()

    with pytest.raises(TransientLLMError, match="HTTP 500"):
        asyncio.run(run())


def test_injected_clients_are_used_and_left_open(fake_openai):
    fake_openai.enqueue_text("sync")
    fake_openai.enqueue_text("async")
    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="injected", max_retries=0)
    async_client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="injected-async")
    chat_model = OpenAIChatModel(model="gpt-test", client=client, async_client=async_client)

    assert chat_model.invoke([ChatMessage.human("hi")]).message.content == "sync"

    async def run():
        response = await chat_model.ainvoke([ChatMessage.human("hi")])
        await chat_model.aclose()
        assert not async_client.is_closed()
        await async_client.close()
        return response

    assert asyncio.run(run()).message.content == "async"
    chat_model.close()
    assert not client.is_closed()
    client.close()
    assert [h["authorization"] for h in fake_openai.request_headers] == [
        "Bearer injected",
        "Bearer injected-async",
    ]


def test_from_env_returns_none_without_configuration():
    assert from_env({}) is None
    assert OpenAIChatModel.from_env({"AGENTMEMORY_LLM_MODEL": "gpt-4o"}) is None


def test_from_env_reads_os_environ(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert from_env() is None

    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    chat_model = from_env()

    assert chat_model is not None
    assert chat_model.model_name == "gpt-4o-mini"


def test_from_env_for_a_local_server_uses_a_dummy_key(fake_openai):
    fake_openai.enqueue_text("local")
    chat_model = from_env({"OPENAI_BASE_URL": fake_openai.base_url, "AGENTMEMORY_LLM_MODEL": "qwen2.5"})

    assert chat_model is not None
    response = chat_model.invoke([ChatMessage.human("hi")])
    chat_model.close()

    assert response.message.content == "local"
    assert fake_openai.requests[0]["model"] == "qwen2.5"
    assert fake_openai.request_headers[0]["authorization"] == "Bearer not-needed"


def test_fake_server_refuses_invalid_sequences_with_openai_error_body(fake_openai):
    import json
    import urllib.error
    import urllib.request

    body = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "orphan"}]}
    request = urllib.request.Request(
        fake_openai.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)

    error = json.loads(info.value.read())
    info.value.close()
    assert info.value.code == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] is None
    assert "preceeding message with 'tool_calls'" in error["error"]["message"]
    assert fake_openai.pending == 0
