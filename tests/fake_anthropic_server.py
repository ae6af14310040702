"""A local fake Anthropic Messages API server (stdlib only) and its ``fake_anthropic`` fixture.

It serves ``POST /v1/messages`` on 127.0.0.1 (a free port) closely enough for the real
``anthropic`` SDK: it checks the ``x-api-key`` (or bearer) and ``anthropic-version`` headers,
validates the JSON body like the Messages API does (see ``validate_messages_request``), answers
400 with Anthropic's error body ``{"type": "error", "error": {"type": "invalid_request_error",
"message"}}`` when it is invalid, records every request, and answers valid requests from a queue
of scripted replies (text, one tool call, parallel tool calls, HTTP errors).

The fixture is registered for the whole suite by ``pytest_plugins`` in ``tests/conftest.py``::

    def test_x(fake_anthropic):
        fake_anthropic.enqueue_text("hello")
        model = AnthropicChatModel(model="claude-test", base_url=fake_anthropic.base_url, api_key="k")
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from tests.fake_http import FakeHTTPServer, ScriptedReply

__all__ = [
    "FakeAnthropicServer",
    "InvalidRequest",
    "ScriptedReply",
    "fake_anthropic",
    "validate_messages_request",
]

MESSAGES_PATH = "/v1/messages"
# Tool names and tool_use ids the API accepts (Messages API ``tools[].name``, ``tool_use.id``).
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def error_body(message: str, *, type: str = "invalid_request_error") -> dict[str, Any]:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": type, "message": message}}


class InvalidRequest(Exception):
    """The request would be refused by the Anthropic API (answered with HTTP 400)."""


def _check_text_block(block: Any, where: str) -> None:
    if not isinstance(block.get("text"), str):
        raise InvalidRequest(f"{where}.text: Field required")
    if not block["text"]:
        raise InvalidRequest(f"{where}: text content blocks must be non-empty")


def _check_blocks(content: Any, role: str, i: int) -> list[dict[str, Any]]:
    """Return the message's blocks (a string is one text block) after checking each one."""
    if isinstance(content, str):
        if not content:
            raise InvalidRequest(
                f"messages.{i}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest(f"messages.{i}.content: Input should be a valid list")
    if not content:
        raise InvalidRequest(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    for j, block in enumerate(content):
        where = f"messages.{i}.content.{j}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{where}: Input tag not found; expected a content block with a 'type'")
        kind = block["type"]
        if kind == "text":
            _check_text_block(block, where)
        elif kind == "tool_use":
            if role != "assistant":
                raise InvalidRequest(f"{where}: `tool_use` blocks can only be in `assistant` messages")
            if not isinstance(block.get("id"), str) or not _TOOL_USE_ID.match(block["id"]):
                raise InvalidRequest(f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
            if not isinstance(block.get("name"), str) or not block["name"]:
                raise InvalidRequest(f"{where}.name: Field required")
            if not isinstance(block.get("input"), dict):
                raise InvalidRequest(f"{where}.input: Input should be a valid dictionary")
        elif kind == "tool_result":
            if role != "user":
                raise InvalidRequest(f"{where}: `tool_result` blocks can only be in `user` messages")
            if not isinstance(block.get("tool_use_id"), str) or not block["tool_use_id"]:
                raise InvalidRequest(f"{where}.tool_use_id: Field required")
            result = block.get("content")
            if isinstance(result, list):
                for k, part in enumerate(result):
                    if not isinstance(part, dict) or part.get("type") != "text":
                        raise InvalidRequest(f"{where}.content.{k}: only text blocks are supported here")
                    _check_text_block(part, f"{where}.content.{k}")
            elif result is not None and not isinstance(result, str):
                raise InvalidRequest(f"{where}.content: Input should be a valid string or list")
            if "is_error" in block and not isinstance(block["is_error"], bool):
                raise InvalidRequest(f"{where}.is_error: Input should be a valid boolean")
            if block.get("is_error") and not result:
                raise InvalidRequest(f"{where}.tool_result: content cannot be empty if `is_error` is true")
        elif kind in ("image", "document", "thinking", "redacted_thinking"):
            continue
        else:
            raise InvalidRequest(
                f"{where}: Input tag '{kind}' found using 'type' does not match any expected tag"
            )
    return content


_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
    b"\xff\xd8\xff": "image/jpeg",
}


def _check_image_media_type(media_type: Any, data: str) -> None:
    """The API's checks of an inline image's ``media_type``: one of four, and the one its
    data shows (400 answers quoted)."""
    if media_type not in ("image/jpeg", "image/png", "image/gif", "image/webp"):
        raise InvalidRequest(
            "image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' "
            "or 'image/webp'"
        )
    head = base64.b64decode(data[:32] + "=" * (-len(data[:32]) % 4), validate=False)
    shown = next((kind for sig, kind in _SIGNATURES.items() if head.startswith(sig)), None)
    if shown is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        shown = "image/webp"
    if shown is not None and shown != media_type:
        raise InvalidRequest(
            f"image.source.base64: The image was specified using the {media_type} media type, but the "
            f"image appears to be a {shown} image"
        )


def validate_messages_request(body: Any) -> None:
    """Check a Messages API request body; raise ``InvalidRequest`` with Anthropic's wording if not.

    Rules (Messages API contract, https://docs.anthropic.com/en/api/messages, and the tool-use
    guide; messages quoted from the API's 400 answers):

    - ``model`` a non-empty string, ``max_tokens`` a non-negative integer, ``messages`` a
      non-empty list;
    - roles are ``user`` or ``assistant`` only (a ``system`` role is refused: the system prompt is
      the top-level ``system`` parameter, a string or non-empty text blocks); the first message is
      ``user`` and roles alternate. (Today's API combines consecutive same-role turns; this fake
      keeps the stricter alternation rule that many Anthropic-compatible servers still enforce,
      so a converter that forgets to merge is caught.)
    - content is a non-empty string or a non-empty list of typed blocks; text blocks are
      non-empty; ``tool_use`` (``id``, ``name``, object ``input``) only in assistant messages,
      ``tool_result`` (``tool_use_id``, string or text-block content) only in user messages;
    - every ``tool_use`` of an assistant message is answered by a ``tool_result`` in the next
      (user) message; every ``tool_result`` answers a ``tool_use`` of the message right before
      it; in that user message ``tool_result`` blocks come before any text; ``tool_use`` ids are
      unique;
    - ``tools`` entries have a ``name`` and an object ``input_schema``; ``temperature`` is in
      ``[0, 1]``; a ``tool_choice`` of type ``"tool"`` names one of the ``tools``.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("Request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise InvalidRequest("max_tokens: Field required")
    if max_tokens < 0:
        raise InvalidRequest("max_tokens: Input should be greater than or equal to 0")
    system = body.get("system")
    if system is not None:
        if isinstance(system, list):
            for j, block in enumerate(system):
                if not isinstance(block, dict) or block.get("type") != "text":
                    raise InvalidRequest(f"system.{j}: Input should be a text block")
                _check_text_block(block, f"system.{j}")
        elif not isinstance(system, str):
            raise InvalidRequest("system: Input should be a valid string or list of text blocks")
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or not 0 <= temperature <= 1):
        raise InvalidRequest("temperature: Input should be less than or equal to 1")

    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Field required")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")
    previous_role = None
    pending: list[str] = []  # tool_use ids of the previous assistant message
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages.{i}: Input should be a valid dictionary")
        role = message.get("role")
        if role == "system":
            raise InvalidRequest(
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise InvalidRequest('messages: first message must use the "user" role')
        if role == previous_role:
            raise InvalidRequest(
                f'messages: roles must alternate between "user" and "assistant", but found multiple '
                f'"{role}" roles in a row'
            )
        blocks = _check_blocks(message.get("content"), role, i)
        if role == "assistant":
            pending = []
            for j, block in enumerate(blocks):
                if block["type"] == "tool_use":
                    if block["id"] in seen_ids:
                        raise InvalidRequest(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
                    seen_ids.add(block["id"])
                    pending.append(block["id"])
        else:
            answered: list[str] = []
            text_seen = False
            for j, block in enumerate(blocks):
                if block["type"] != "tool_result":
                    text_seen = True
                    continue
                if text_seen:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: `tool_result` blocks must come before any other "
                        "content in a user message"
                    )
                if block["tool_use_id"] not in pending:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block['tool_use_id']}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
                answered.append(block["tool_use_id"])
            missing = [call_id for call_id in pending if call_id not in answered]
            if missing:
                raise InvalidRequest(
                    f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
            pending = []
        previous_role = role
    last = blocks[-1] if role == "assistant" and blocks else None
    if last is not None and last["type"] == "text" and last["text"] != last["text"].rstrip():
        raise InvalidRequest("messages: final assistant content cannot end with trailing whitespace")

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidRequest("tools: Input should be a valid list")
        for j, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise InvalidRequest(f"tools.{j}: Input should be a valid dictionary")
            if not isinstance(tool.get("name"), str) or not _TOOL_NAME.match(tool["name"]):
                raise InvalidRequest(
                    f"tools.{j}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                )
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                raise InvalidRequest(f"tools.{j}.custom.input_schema: Field required")
            if schema.get("type") != "object":
                raise InvalidRequest(f"tools.{j}.custom.input_schema.type: Input should be 'object'")
            if "description" in tool and not isinstance(tool["description"], str):
                raise InvalidRequest(f"tools.{j}.custom.description: Input should be a valid string")
    _check_tool_choice(body.get("tool_choice"), tools)
    _validate_request_limits(body)


def _check_tool_choice(choice: Any, tools: Any) -> None:
    """``tool_choice`` (tool-use guide, "Forcing tool use"): ``{"type": "auto" | "any" |
    "none"}`` or ``{"type": "tool", "name": <one of the request's tools>}``; it needs ``tools``."""
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise InvalidRequest(
            "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
        )
    if choice["type"] in ("any", "tool") and not tools:
        raise InvalidRequest("tool_choice: tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool":
        names = [tool.get("name") for tool in tools]
        if choice.get("name") not in names:
            raise InvalidRequest(
                f"tool_choice.tool.name: Tool {choice.get('name')!r} not found in the provided tools"
            )


def _cache_marked(blocks: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(path, block)`` of the blocks carrying ``cache_control``, tool results' content too."""
    if not isinstance(blocks, list):
        return
    for j, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        if "cache_control" in block:
            yield f"{where}.{j}", block
        if block.get("type") == "tool_result":
            yield from _cache_marked(block.get("content"), f"{where}.{j}.content")


def _media(blocks: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(blocks, list):
        return
    for block in blocks:
        if isinstance(block, dict) and block.get("type") in ("image", "document"):
            yield block
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            yield from _media(block.get("content"))


def _validate_request_limits(body: Mapping[str, Any]) -> None:
    """The Messages API's per-request limits, with its wording: at most 4 ``cache_control``
    breakpoints (tools, system, messages), no ``ttl`` of "1h" after a shorter one, none on a
    thinking block; at most 100 images and documents; no image over 8000 px on a side or
    over 5 MiB of base64; above 20 images, none over 2000 px on a side."""
    marked = list(_cache_marked(body.get("tools"), "tools"))
    marked += _cache_marked(body.get("system"), "system")
    for i, message in enumerate(body["messages"]):
        marked += _cache_marked(message.get("content"), f"messages.{i}.content")
    for where, block in marked:
        if block.get("type") in ("thinking", "redacted_thinking"):
            raise InvalidRequest(f"{where}.{block['type']}.cache_control: Extra inputs are not permitted")
    if len(marked) > 4:
        raise InvalidRequest(
            f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}."
        )
    shorter = False
    for where, block in marked:
        ttl = block["cache_control"].get("ttl") if isinstance(block["cache_control"], dict) else None
        if ttl == "1h" and shorter:
            raise InvalidRequest(
                f"{where}.cache_control.ttl: a ttl='1h' cache_control block must not come after a "
                "ttl='5m' cache_control block. Note that blocks are processed in the following order: "
                "`tools`, `system`, `messages`."
            )
        shorter = shorter or ttl != "1h"
    media = [block for message in body["messages"] for block in _media(message.get("content"))]
    images = [block for block in media if block.get("type") == "image"]
    documents = len(media) - len(images)
    if len(media) > 100:
        raise InvalidRequest(f"Too much media: {documents} document pages + {len(images)} images > 100")
    from agentmemory.formats.media import image_size

    for block in images:
        source = block.get("source") or {}
        data = source["data"] if source.get("type") == "base64" else ""
        if len(data) > 5 * 1024 * 1024:
            raise InvalidRequest(
                f"image.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > 5242880 bytes"
            )
        if data:
            _check_image_media_type(source.get("media_type"), data)
        size = image_size(data) if data else None
        if size is not None and max(size) > 8000:
            raise InvalidRequest(
                "image.source.base64.data: At least one of the image dimensions exceed max allowed size: "
                "8000 pixels"
            )
        if len(images) > 20 and size is not None and max(size) > 2000:
            raise InvalidRequest(
                "image.source.base64.data: At least one of the image dimensions exceed max allowed "
                "size for many-image requests: 2000 pixels"
            )


class FakeAnthropicServer(FakeHTTPServer):
    """The fake server: start with ``with FakeAnthropicServer() as server`` (or ``start``/``stop``).

    Attributes:
        base_url: ``"http://127.0.0.1:PORT"`` (the SDK's ``base_url``: without ``/v1``).
        requests: every request body received, in arrival order (parsed JSON, or the raw text
            when the body is not JSON), including refused ones.
        request_headers: the matching request headers (dicts, lower-case names).

    Replies are consumed in order by valid requests only (a 400 for an invalid request consumes
    nothing). With the queue empty, a valid request gets a 500 with ``x-should-retry: false``
    whose message says so.
    """

    provider = "Anthropic"
    endpoint = MESSAGES_PATH
    empty_queue_error_type = "api_error"

    def error_body(self, message: str, *, type: str) -> dict[str, Any]:
        return error_body(message, type=type)

    def not_found_body(self, method: str, path: str) -> dict[str, Any]:
        return error_body(f"Not found: {method} {path}", type="not_found_error")

    def is_endpoint(self, path: str) -> bool:
        return path.split("?")[0].rstrip("/") == self.endpoint

    def refusal(self, body: Any, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        if not headers.get("x-api-key") and not headers.get("authorization"):
            return 401, error_body("x-api-key header is required", type="authentication_error")
        if not headers.get("anthropic-version"):
            return 400, error_body("anthropic-version: header is required")
        if int(headers.get("content-length") or 0) > 32_000_000:
            # API overview, "Request size limits": 32 MB for the Messages API
            return 413, error_body(
                "Request exceeds the maximum allowed number of bytes.", type="request_too_large"
            )
        try:
            validate_messages_request(body)
        except InvalidRequest as exc:
            return 400, error_body(str(exc))
        return None

    def stamp(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
        # The API repeats the request id in error bodies.
        request_id = f"req_fake{next(self.ids):06d}"
        if body.get("type") == "error":
            body = {**body, "request_id": request_id}
        return body, {"request-id": request_id}

    # -- scripting -------------------------------------------------------------------------

    def enqueue_message(
        self,
        content: list[dict[str, Any]],
        *,
        stop_reason: str = "end_turn",
        input_tokens: int = 12,
        output_tokens: int = 5,
        model: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue an assistant ``message`` with the given content blocks."""
        self.enqueue(
            ScriptedReply(
                200, _message(content, stop_reason, input_tokens, output_tokens, model), delay=delay
            )
        )

    def enqueue_text(self, text: str, **kwargs: Any) -> None:
        """Queue a plain assistant text reply (``stop_reason`` ``"end_turn"``)."""
        self.enqueue_message([{"type": "text", "text": text}], **kwargs)

    def enqueue_tool_uses(
        self,
        calls: Sequence[tuple[str, Any] | tuple[str, Any, str]],
        *,
        text: str | None = None,
        input_tokens: int = 20,
        output_tokens: int = 9,
        model: str | None = None,
    ) -> list[str]:
        """Queue an assistant reply calling tools in parallel (text block first); return the ids.

        Args:
            calls: ``(name, input)`` or ``(name, input, tool_use_id)``; ``input`` is sent as-is
                (a dict normally; anything else to script a malformed reply).
        """
        ids: list[str] = []
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in calls:
            call_id = call[2] if len(call) > 2 else f"toolu_fake{next(self.ids):04d}"
            ids.append(call_id)
            content.append({"type": "tool_use", "id": call_id, "name": call[0], "input": call[1]})
        self.enqueue_message(
            content,
            stop_reason="tool_use",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
        )
        return ids

    def enqueue_tool_use(
        self, name: str, input: Any, *, tool_use_id: str | None = None, **kwargs: Any
    ) -> str:
        """Queue an assistant reply with a single ``tool_use`` block; return its id."""
        call = (name, input, tool_use_id) if tool_use_id else (name, input)
        return self.enqueue_tool_uses([call], **kwargs)[0]

    def enqueue_error(
        self,
        status: int,
        message: str = "scripted error",
        *,
        type: str = "api_error",
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Queue ``times`` HTTP error replies with Anthropic's error body."""
        for _ in range(times):
            self.enqueue(ScriptedReply(status, error_body(message, type=type), dict(headers or {})))

    def enqueue_rate_limit(self, *, times: int = 1) -> None:
        """Queue 429 ``rate_limit_error`` replies with ``retry-after: 0``.

        ``retry-after-ms: 10`` is sent too: the SDK treats ``retry-after: 0`` as "no hint" and
        would back off for about half a second.
        """
        self.enqueue_error(
            429,
            "Number of request tokens has exceeded your per-minute rate limit (fake).",
            type="rate_limit_error",
            headers={"retry-after": "0", "retry-after-ms": "10"},
            times=times,
        )

    def enqueue_server_error(self, *, times: int = 1) -> None:
        """Queue 500 ``api_error`` replies (``retry-after-ms: 10`` keeps SDK retries fast)."""
        self.enqueue_error(
            500, "Internal server error", type="api_error", headers={"retry-after-ms": "10"}, times=times
        )

    def enqueue_overloaded(self, *, times: int = 1) -> None:
        """Queue 529 ``overloaded_error`` replies (``retry-after-ms: 10``)."""
        self.enqueue_error(
            529, "Overloaded", type="overloaded_error", headers={"retry-after-ms": "10"}, times=times
        )


def _message(
    content: list[dict[str, Any]], stop_reason: str, input_tokens: int, output_tokens: int, model: str | None
) -> dict[str, Any]:
    """A ``message`` object as the Messages API returns it."""
    return {
        "id": f"msg_fake{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": model or "",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "service_tier": "standard",
        },
    }


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropicServer]:
    """A running ``FakeAnthropicServer`` for one test (stopped afterwards)."""
    with FakeAnthropicServer() as server:
        yield server
