"""A local fake OpenAI-compatible chat-completions server (stdlib only) and its ``fake_openai`` fixture.

It serves ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) closely enough for the real
``openai`` SDK: it validates the request like the OpenAI API does (JSON body, ``model``,
``messages``, tool-call/tool-result pairing, ``arguments`` as a JSON string) and answers 400 with
an OpenAI-style error body when it is invalid, records every request body, and answers valid
requests from a queue of scripted replies (text, one tool call, parallel tool calls, HTTP errors).

The fixture is registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``::

    def test_x(fake_openai):
        fake_openai.enqueue_text("hello")
        model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k")
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from tests.fake_http import FakeHTTPServer, ScriptedReply

__all__ = ["FakeOpenAIServer", "ScriptedReply", "fake_openai"]

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
_MESSAGE_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


class InvalidRequest(Exception):
    """The request would be refused by the OpenAI API (answered with HTTP 400)."""


def validate_chat_request(body: Any) -> None:
    """Check a chat-completions request body like the OpenAI API; raise ``InvalidRequest`` if not.

    Rules (OpenAI chat completions contract): ``model`` a non-empty string; ``messages`` a
    non-empty list of objects with a known role; user/system/developer/tool messages have
    content; an assistant message has content unless it has ``tool_calls``; each tool call is
    ``{"id", "type": "function", "function": {"name", "arguments": <string>}}``; every ``tool``
    message answers an unanswered call of the closest preceding assistant message with
    ``tool_calls``, and all of that message's calls are answered before any other message.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("We could not parse the JSON body of your request. Expected an object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("Invalid 'messages': expected a non-empty array.")
    pending: list[str] = []  # unanswered call ids of the closest assistant message with tool_calls
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"Invalid type for 'messages[{i}]': expected an object.")
        role = message.get("role")
        if role not in _MESSAGE_ROLES:
            raise InvalidRequest(
                f"Invalid value for 'messages[{i}].role': {role!r}. Supported values are: "
                "'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
            )
        content = message.get("content")
        if isinstance(content, str) and len(content) > 10_485_760:
            raise InvalidRequest(
                f"Invalid 'messages[{i}].content': string too long. Expected a string with maximum length "
                f"10485760, but got a string with length {len(content)} instead."
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"Missing required parameter: 'messages[{i}].tool_call_id'.")
            if call_id not in pending:
                raise InvalidRequest(
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    f"message with 'tool_calls' (messages[{i}].tool_call_id={call_id!r})."
                )
            pending.remove(call_id)
            if not isinstance(content, str | list):
                raise InvalidRequest(f"Invalid type for 'messages[{i}].content': expected a string.")
            continue
        if pending:
            raise InvalidRequest(
                "An assistant message with 'tool_calls' must be followed by tool messages responding "
                f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(pending)}"
            )
        if role == "assistant":
            tool_calls = message.get("tool_calls")
            if tool_calls is not None:
                pending = _validate_tool_calls(tool_calls, i)
            if content is None and not tool_calls and message.get("function_call") is None:
                raise InvalidRequest(
                    f"Invalid value for 'messages[{i}].content': expected a string, got null."
                )
        elif not isinstance(content, str | list):
            raise InvalidRequest(f"Invalid type for 'messages[{i}].content': expected a string or array.")
    if pending:
        raise InvalidRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            f"each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            f"{', '.join(pending)}"
        )
    _check_response_format(body.get("response_format"))
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidRequest("Invalid type for 'tools': expected an array.")
        if len(tools) > 128:
            raise InvalidRequest(
                "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an "
                f"array with length {len(tools)} instead."
            )
        for j, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise InvalidRequest(f"Invalid value for 'tools[{j}].type': expected 'function'.")
            function = tool.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise InvalidRequest(f"Missing required parameter: 'tools[{j}].function.name'.")
            _check_pattern(function["name"], f"tools[{j}].function.name", 64)
    for i, message in enumerate(messages):
        if isinstance(message.get("name"), str):
            _check_pattern(message["name"], f"messages[{i}].name", None)
    images = sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )
    if images > 500:
        raise InvalidRequest(
            f"Invalid 'messages': too many images in the request ({images}); the maximum is 500."
        )


_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def _check_pattern(value: str, where: str, max_length: int | None) -> None:
    """OpenAI's checks of a name: the pattern ``^[a-zA-Z0-9_-]+$`` and a maximum length."""
    if max_length is not None and len(value) > max_length:
        raise InvalidRequest(
            f"Invalid '{where}': string too long. Expected a string with maximum length {max_length}, "
            f"but got a string with length {len(value)} instead."
        )
    if not _FUNCTION_NAME.match(value):
        raise InvalidRequest(
            f"Invalid '{where}': string does not match pattern. Expected a string that matches the "
            "pattern '^[a-zA-Z0-9_-]+$'."
        )


_SCHEMA_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _check_response_format(response_format: Any) -> None:
    """``response_format`` (chat completions reference; Structured Outputs guide): ``{"type":
    "text" | "json_object"}`` or ``{"type": "json_schema", "json_schema": {"name", "schema",
    "strict", "description"}}``; with ``strict: true`` every object of the schema lists all its
    properties in ``required`` and sets ``additionalProperties: false`` (the API answers 400
    otherwise, with the wording below)."""
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise InvalidRequest(
            f"Invalid value for 'response_format.type': {kind!r}. Supported values are: 'text', "
            "'json_object' and 'json_schema'."
        )
    if kind != "json_schema":
        return
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequest("Missing required parameter: 'response_format.json_schema'.")
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        raise InvalidRequest("Invalid 'response_format.json_schema.name': string does not match pattern.")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest("Invalid type for 'response_format.json_schema.schema': expected an object.")
    if spec.get("strict") is True:
        _check_strict_schema(schema, name, ())


def _check_strict_schema(schema: dict[str, Any], name: str, context: tuple[str, ...]) -> None:
    where = f"Invalid schema for response_format '{name}': In context={context}, "
    if schema.get("type") == "object":
        properties = schema.get("properties", {})
        missing = [key for key in properties if key not in schema.get("required", [])]
        if missing:
            raise InvalidRequest(
                where + "'required' is required to be supplied and to be an array including every key "
                f"in properties. Missing '{missing[0]}'."
            )
        if schema.get("additionalProperties") is not False:
            raise InvalidRequest(where + "'additionalProperties' is required to be supplied and to be false.")
        for key, sub in properties.items():
            _check_strict_schema(sub, name, (*context, "properties", key))
    items = schema.get("items")
    if isinstance(items, dict):
        _check_strict_schema(items, name, (*context, "items"))


def _validate_tool_calls(tool_calls: Any, i: int) -> list[str]:
    if not isinstance(tool_calls, list):
        raise InvalidRequest(f"Invalid type for 'messages[{i}].tool_calls': expected an array.")
    ids: list[str] = []
    for j, call in enumerate(tool_calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict):
            raise InvalidRequest(f"Invalid type for '{where}': expected an object.")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidRequest(f"Missing required parameter: '{where}.id'.")
        if call.get("type") != "function":
            raise InvalidRequest(f"Invalid value for '{where}.type': expected 'function'.")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest(f"Missing required parameter: '{where}.function.name'.")
        if not isinstance(function.get("arguments"), str):
            raise InvalidRequest(f"Invalid type for '{where}.function.arguments': expected a string.")
        if len(call["id"]) > 40:
            raise InvalidRequest(
                f"Invalid '{where}.id': string too long. Expected a string with maximum length 40, but got a "
                f"string with length {len(call['id'])} instead."
            )
        _check_pattern(function["name"], f"{where}.function.name", 64)
        if call["id"] in ids:
            raise InvalidRequest(f"Duplicate tool call id {call['id']!r} in 'messages[{i}].tool_calls'.")
        ids.append(call["id"])
    return ids


class FakeOpenAIServer(FakeHTTPServer):
    """The fake server: start with ``with FakeOpenAIServer() as server`` (or ``start``/``stop``).

    Attributes:
        base_url: ``"http://127.0.0.1:PORT/v1"`` (pass it to the SDK as ``base_url``).
        requests: every body POSTed to ``/v1/chat/completions``, in arrival order (parsed JSON,
            or the raw text when the body is not JSON), including refused ones.
        request_headers: the matching request headers (dicts, lower-case names).

    Replies are consumed in order by valid requests only (a 400 for an invalid request consumes
    nothing). With the queue empty, a valid request gets a 500 with ``x-should-retry: false``
    whose message says so.
    """

    provider = "OpenAI"
    endpoint = CHAT_COMPLETIONS_PATH
    url_suffix = "/v1"
    empty_queue_error_type = "fake"

    def error_body(self, message: str, *, type: str) -> dict[str, Any]:
        return error_body(message, type=type)

    def not_found_body(self, method: str, path: str) -> dict[str, Any]:
        return error_body(f"Invalid URL ({method} {path})", code="unknown_url")

    def refusal(self, body: Any, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        try:
            validate_chat_request(body)
        except InvalidRequest as exc:
            return 400, error_body(str(exc))
        return None

    def stamp(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
        return body, {"x-request-id": f"req_fake_{next(self.ids)}"}

    # -- scripting -------------------------------------------------------------------------

    def enqueue_text(
        self,
        content: str,
        *,
        finish_reason: str = "stop",
        prompt_tokens: int = 12,
        completion_tokens: int = 5,
        model: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue a plain assistant text reply (sent after ``delay`` seconds)."""
        self.enqueue(
            ScriptedReply(
                200,
                _completion({"content": content}, finish_reason, prompt_tokens, completion_tokens, model),
                delay=delay,
            )
        )

    def enqueue_tool_calls(
        self,
        calls: Sequence[tuple[str, Any] | tuple[str, Any, str]],
        *,
        content: str | None = None,
        prompt_tokens: int = 20,
        completion_tokens: int = 9,
        model: str | None = None,
    ) -> list[str]:
        """Queue an assistant reply calling tools in parallel; return the call ids.

        Args:
            calls: ``(name, arguments)`` or ``(name, arguments, call_id)``; ``arguments`` is a
                dict (serialised to a JSON string like OpenAI does) or a raw string sent as-is
                (to script malformed arguments).
        """
        ids: list[str] = []
        tool_calls = []
        for call in calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"call_fake{next(self.ids):04d}"
            ids.append(call_id)
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    },
                }
            )
        message = {"content": content, "tool_calls": tool_calls}
        self.enqueue(
            ScriptedReply(200, _completion(message, "tool_calls", prompt_tokens, completion_tokens, model))
        )
        return ids

    def enqueue_tool_call(
        self, name: str, arguments: Any, *, call_id: str | None = None, **kwargs: Any
    ) -> str:
        """Queue an assistant reply with a single tool call; return its id."""
        call = (name, arguments, call_id) if call_id else (name, arguments)
        return self.enqueue_tool_calls([call], **kwargs)[0]

    def enqueue_error(
        self,
        status: int,
        message: str = "scripted error",
        *,
        type: str = "server_error",
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Queue ``times`` HTTP error replies with an OpenAI-style error body."""
        for _ in range(times):
            self.enqueue(
                ScriptedReply(status, error_body(message, type=type, code=code), dict(headers or {}))
            )

    def enqueue_rate_limit(self, *, times: int = 1) -> None:
        """Queue 429 replies asking the client to retry after 10 ms (``retry-after-ms: 10``)."""
        self.enqueue_error(
            429,
            "Rate limit reached for requests (fake). Please try again in 10ms.",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after-ms": "10", "retry-after": "0"},
            times=times,
        )

    def enqueue_server_error(self, *, times: int = 1) -> None:
        """Queue 500 replies (``retry-after-ms: 10`` keeps SDK retries fast)."""
        self.enqueue_error(
            500,
            "The server had an error while processing your request. Sorry about that!",
            headers={"retry-after-ms": "10"},
            times=times,
        )


def _completion(
    message: Mapping[str, Any],
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    model: str | None,
) -> dict[str, Any]:
    """A ``chat.completion`` object as the OpenAI API returns it."""
    full_message: dict[str, Any] = {"role": "assistant", "refusal": None, "annotations": [], **message}
    return {
        "id": f"chatcmpl-fake{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "",
        "choices": [{"index": 0, "message": full_message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A running ``FakeOpenAIServer`` for one test (stopped afterwards)."""
    with FakeOpenAIServer() as server:
        yield server
