"""Tests of ``AnthropicChatModel`` through the real ``anthropic`` SDK against a local fake server."""

from __future__ import annotations

import asyncio
import gc

import anthropic
import pytest

from agentmemory.exceptions import InvalidMessageError, LLMError, TransientLLMError
from agentmemory.llm.anthropic import AnthropicChatModel, from_env, tool_param
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.messages import ChatMessage, ToolCall
from tests.fake_anthropic_server import FakeAnthropicServer

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def api_key_of(headers: dict[str, str]) -> str | None:
    """The key the SDK sent (``x-api-key`` in older SDK versions, a bearer token in newer ones)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers.get("authorization", "").removeprefix("Bearer ") or None


@pytest.fixture
def model(fake_anthropic):
    chat_model = AnthropicChatModel(
        model="claude-test",
        base_url=fake_anthropic.base_url,
        api_key="sk-ant-test",
        timeout=5.0,
        max_retries=2,
    )
    yield chat_model
    chat_model.close()


def test_is_a_chat_model(model):
    assert isinstance(model, ChatModel)
    assert model.model_name == "claude-test"


def test_plain_reply(fake_anthropic, model):
    fake_anthropic.enqueue_text("Hello there!", input_tokens=17, output_tokens=3)

    response = model.invoke(
        [
            ChatMessage.system("Be brief."),
            ChatMessage.system("Summary of the earlier conversation:\nNothing yet."),
            ChatMessage.human("Hi"),
        ]
    )

    assert isinstance(response, ChatResponse)
    assert response.message == ChatMessage.ai("Hello there!")
    assert response.usage == Usage(input_tokens=17, output_tokens=3)
    assert response.model == "claude-test"
    assert response.finish_reason == "end_turn"
    assert response.raw["type"] == "message"
    assert response.raw["usage"]["output_tokens"] == 3
    [request] = fake_anthropic.requests
    assert request == {
        "model": "claude-test",
        "max_tokens": 1024,
        "system": "Be brief.\n\nSummary of the earlier conversation:\nNothing yet.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert api_key_of(fake_anthropic.request_headers[0]) == "sk-ant-test"
    assert fake_anthropic.request_headers[0]["anthropic-version"]


def test_single_tool_call(fake_anthropic, model):
    call_id = fake_anthropic.enqueue_tool_use("get_weather", {"city": "Oslo"})

    response = model.invoke([ChatMessage.human("Weather in Oslo?")], tools=[WEATHER_TOOL])

    assert response.message == ChatMessage.ai(None, [ToolCall(call_id, "get_weather", {"city": "Oslo"})])
    assert response.finish_reason == "tool_use"
    assert fake_anthropic.requests[0]["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER_TOOL["parameters"],
        }
    ]


def test_parallel_tool_calls_and_follow_up_request(fake_anthropic, model):
    fake_anthropic.enqueue_tool_uses(
        [
            ("get_weather", {"city": "Oslo"}, "toolu_1"),
            ("get_weather", {"city": "Zürich", "days": [1, 2]}, "toolu_2"),
        ],
        text="Checking both.",
    )
    fake_anthropic.enqueue_text("Oslo 3°C, Zürich 9°C.")
    history = [ChatMessage.system("You are a weather bot."), ChatMessage.human("Weather in Oslo and Zürich?")]

    first = model.invoke(history, tools=[WEATHER_TOOL])

    assert first.message.content == "Checking both."
    assert [(c.id, c.name, c.arguments) for c in first.message.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Oslo"}),
        ("toolu_2", "get_weather", {"city": "Zürich", "days": [1, 2]}),
    ]
    history += [
        first.message,
        ChatMessage.tool("9°C", tool_call_id="toolu_2", name="get_weather"),
        ChatMessage.tool("3°C", tool_call_id="toolu_1", name="get_weather"),
    ]

    second = model.invoke(history, tools=[WEATHER_TOOL])

    assert second.message.content == "Oslo 3°C, Zürich 9°C."
    sent = fake_anthropic.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3°C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "9°C"},
    ]


def test_temperature_and_max_tokens_are_sent(fake_anthropic):
    fake_anthropic.enqueue_text("ok")
    chat_model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", temperature=0.2, max_tokens=64
    )

    chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()
    assert fake_anthropic.requests[0]["temperature"] == 0.2
    assert fake_anthropic.requests[0]["max_tokens"] == 64


def test_rate_limit_then_success_is_retried_transparently(fake_anthropic, model):
    fake_anthropic.enqueue_rate_limit()
    fake_anthropic.enqueue_text("after the retry")

    response = model.invoke([ChatMessage.human("hi")])

    assert response.message.content == "after the retry"
    assert len(fake_anthropic.requests) == 2


@pytest.mark.parametrize(
    ("enqueue", "status", "text"),
    [
        ("enqueue_server_error", 500, "Internal server error (api_error)"),
        ("enqueue_overloaded", 529, "Overloaded (overloaded_error)"),
        ("enqueue_rate_limit", 429, "rate limit (fake). (rate_limit_error)"),
    ],
)
def test_persistent_transient_errors_surface_as_transient_llm_error(fake_anthropic, enqueue, status, text):
    getattr(fake_anthropic, enqueue)(times=2)
    chat_model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=1
    )

    with pytest.raises(TransientLLMError) as info:
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()
    message = str(info.value)
    assert f"HTTP {status}" in message
    assert "max_retries=1" in message
    assert text in message
    assert "request id req_fake" in message
    assert len(fake_anthropic.requests) == 2


def test_bad_request_is_a_permanent_llm_error(fake_anthropic, model):
    fake_anthropic.enqueue_error(400, "max_tokens: 100000 > 8192, the maximum", type="invalid_request_error")

    with pytest.raises(LLMError) as info:
        model.invoke([ChatMessage.human("hi")])

    assert not isinstance(info.value, TransientLLMError)
    assert "HTTP 400" in str(info.value)
    assert "max_tokens: 100000 > 8192, the maximum (invalid_request_error)" in str(info.value)
    assert len(fake_anthropic.requests) == 1


def test_authentication_error_is_permanent(fake_anthropic, model):
    fake_anthropic.enqueue_error(401, "invalid x-api-key", type="authentication_error")

    with pytest.raises(LLMError, match=r"HTTP 401.*invalid x-api-key") as info:
        model.invoke([ChatMessage.human("hi")])

    assert not isinstance(info.value, TransientLLMError)


def test_history_that_cannot_start_with_a_user_turn_is_refused_before_sending(fake_anthropic, model):
    with pytest.raises(InvalidMessageError, match="user turn"):
        model.invoke([ChatMessage.system("S"), ChatMessage.ai("Hello!")])
    with pytest.raises(InvalidMessageError, match="at least one human message"):
        model.invoke([ChatMessage.system("S")])

    assert fake_anthropic.requests == []


def test_connection_refused_is_transient():
    with FakeAnthropicServer() as server:
        base_url = server.base_url
    chat_model = AnthropicChatModel(model="claude-test", base_url=base_url, api_key="k", max_retries=0)

    with pytest.raises(TransientLLMError, match="could not connect"):
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()


def test_timeout_is_transient(fake_anthropic):
    fake_anthropic.enqueue_message([{"type": "text", "text": "too late"}], delay=1.0)
    chat_model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", timeout=0.2, max_retries=0
    )

    with pytest.raises(TransientLLMError, match=r"timed out after 0\.2 s"):
        chat_model.invoke([ChatMessage.human("hi")])

    chat_model.close()


def test_unusable_tool_input_in_reply_is_an_llm_error(fake_anthropic, model):
    fake_anthropic.enqueue_tool_use("get_weather", ["not", "an", "object"], tool_use_id="toolu_bad")

    with pytest.raises(LLMError, match=r"toolu_bad.*JSON object"):
        model.invoke([ChatMessage.human("Weather?")], tools=[WEATHER_TOOL])


def test_async_path(fake_anthropic, model):
    fake_anthropic.enqueue_text("async hello", input_tokens=8, output_tokens=2)
    fake_anthropic.enqueue_tool_uses(
        [("get_weather", {"city": "Oslo"}, "t1"), ("get_weather", {"city": "Rome"}, "t2")]
    )
    fake_anthropic.enqueue_text("second loop")

    async def run():
        first = await model.ainvoke([ChatMessage.human("hi")])
        second = await model.ainvoke([ChatMessage.human("weather?")], tools=[WEATHER_TOOL])
        return first, second

    first, second = asyncio.run(run())
    # A new event loop gets a new client; each loop's client is closed at loop shutdown.
    third = asyncio.run(model.ainvoke([ChatMessage.human("again")]))
    gc.collect()

    assert first.message == ChatMessage.ai("async hello")
    assert first.usage == Usage(input_tokens=8, output_tokens=2)
    assert [c.arguments for c in second.message.tool_calls] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert third.message.content == "second loop"


def test_async_errors_are_mapped(fake_anthropic):
    fake_anthropic.enqueue_overloaded(times=1)
    chat_model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )

    async def run():
        try:
            await chat_model.ainvoke([ChatMessage.human("hi")])
        finally:
            await chat_model.aclose()

    with pytest.raises(TransientLLMError, match="HTTP 529"):
        asyncio.run(run())


def test_injected_clients_are_used_and_left_open(fake_anthropic):
    fake_anthropic.enqueue_text("sync")
    fake_anthropic.enqueue_text("async")
    client = anthropic.Anthropic(base_url=fake_anthropic.base_url, api_key="injected", max_retries=0)
    async_client = anthropic.AsyncAnthropic(base_url=fake_anthropic.base_url, api_key="injected-async")
    chat_model = AnthropicChatModel(model="claude-test", client=client, async_client=async_client)

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
    assert [api_key_of(h) for h in fake_anthropic.request_headers] == ["injected", "injected-async"]


def test_tool_param_shapes():
    assert tool_param({"name": "ping"}) == {
        "name": "ping",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert (
        tool_param({"type": "function", "function": WEATHER_TOOL})["input_schema"]
        == WEATHER_TOOL["parameters"]
    )
    native = {"name": "x", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
    assert tool_param(native) == native
    with pytest.raises(ValueError, match="without a 'name'"):
        tool_param({"parameters": {}})


def test_constructor_refuses_bad_options():
    with pytest.raises(ValueError, match="model name"):
        AnthropicChatModel(model="")
    with pytest.raises(ValueError, match="max_tokens"):
        AnthropicChatModel(model="claude-test", max_tokens=0)


def test_from_env_returns_none_without_configuration():
    assert from_env({}) is None
    assert AnthropicChatModel.from_env({"AGENTMEMORY_LLM_MODEL": "claude-sonnet-4-6"}) is None


def test_from_env_reads_os_environ(monkeypatch, fake_anthropic):
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("AGENTMEMORY_LLM_MODEL", raising=False)
    assert from_env() is None

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.base_url)
    chat_model = from_env()

    assert chat_model is not None
    assert chat_model.model_name == "claude-haiku-4-5"
    fake_anthropic.enqueue_text("from env")
    assert chat_model.invoke([ChatMessage.human("hi")]).message.content == "from env"
    chat_model.close()
    assert api_key_of(fake_anthropic.request_headers[0]) == "sk-ant-env"
    assert fake_anthropic.requests[0]["model"] == "claude-haiku-4-5"


def test_from_env_with_only_a_base_url_and_a_model(fake_anthropic):
    fake_anthropic.enqueue_text("local")
    chat_model = from_env(
        {"ANTHROPIC_BASE_URL": fake_anthropic.base_url, "AGENTMEMORY_LLM_MODEL": "claude-sonnet-4-6"}
    )

    assert chat_model is not None
    chat_model.invoke([ChatMessage.human("hi")])
    chat_model.close()
    assert fake_anthropic.requests[0]["model"] == "claude-sonnet-4-6"
    assert api_key_of(fake_anthropic.request_headers[0]) == "not-needed"


def test_reused_and_foreign_tool_call_ids_are_sent_as_the_api_accepts_them(fake_anthropic, model):
    """Some models number their calls ``call_0`` afresh each turn, and other providers' ids hold
    dots and colons; the Messages API refuses both ("`tool_use` ids must be unique", "String
    should match pattern '^[a-zA-Z0-9_-]+$'"), and the fake server refuses them the same way."""
    history = [
        ChatMessage.human("Weather in Oslo?"),
        ChatMessage.ai(None, [ToolCall("call_0", "get_weather", {"city": "Oslo"})]),
        ChatMessage.tool("3°C", tool_call_id="call_0", name="get_weather"),
        ChatMessage.ai("3°C in Oslo."),
        ChatMessage.human("And Rome, then Bergen?"),
        ChatMessage.ai(
            None,
            [
                ToolCall("call_0", "get_weather", {"city": "Rome"}),
                ToolCall("functions.get_weather:1", "get_weather", {"city": "Bergen"}),
            ],
        ),
        ChatMessage.tool("7°C", tool_call_id="functions.get_weather:1", name="get_weather"),
        ChatMessage.tool("20°C", tool_call_id="call_0", name="get_weather"),
    ]
    fake_anthropic.enqueue_text("Rome 20°C, Bergen 7°C.")

    reply = model.invoke(history, tools=[WEATHER_TOOL])

    assert reply.message.content == "Rome 20°C, Bergen 7°C."
    sent = fake_anthropic.requests[0]["messages"]
    calls = [
        (b["id"], b["input"]["city"])
        for m in sent
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert calls == [("call_0", "Oslo"), ("call_0_2", "Rome"), ("functions_get_weather_1", "Bergen")]
    results = [
        (b["tool_use_id"], b["content"])
        for m in sent
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert results == [("call_0", "3°C"), ("call_0_2", "20°C"), ("functions_get_weather_1", "7°C")]
    # The history itself keeps the ids the model gave.
    assert [c.id for c in history[5].tool_calls] == ["call_0", "functions.get_weather:1"]
