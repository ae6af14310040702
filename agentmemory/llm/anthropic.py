"""``ChatModel`` adapter for the Anthropic Messages API (``POST {base_url}/v1/messages``).

Built on the official ``anthropic`` SDK (an optional dependency: ``pip install
'django-agentmemory[anthropic]'``). The SDK retries 408/409/429/5xx (529 "overloaded" included) and
connection errors itself (``max_retries``, exponential backoff honouring ``retry-after-ms`` and
``retry-after``); only when those retries are exhausted does this adapter raise
``TransientLLMError``, so callers (Celery tasks) can retry later.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentmemory.exceptions import InvalidMessageError, LLMError, PermanentLLMError
from agentmemory.formats.anthropic import (
    from_anthropic_message,
    limit_cache_breakpoints,
    limit_request_size,
    to_anthropic,
)
from agentmemory.formats.changes import SentChange, collecting
from agentmemory.formats.tools import to_anthropic_tool
from agentmemory.llm._sdk import SDKClients, create_client, import_sdk, map_sdk_error, provider_text
from agentmemory.llm.base import ChatResponse, OutputSchema, Usage
from agentmemory.messages import ChatMessage

if TYPE_CHECKING:
    import anthropic

__all__ = ["DEFAULT_MODEL", "AnthropicChatModel", "anthropic_usage", "from_env"]

DEFAULT_MODEL = "claude-haiku-4-5"
# Placeholder key for local Anthropic-compatible servers and proxies that ignore it; the SDK
# refuses to send a request without some credential.
LOCAL_API_KEY = "not-needed"


def _import_anthropic() -> Any:
    return import_sdk("anthropic")


#: an Anthropic tool of a ``{"name", "description", "parameters"}`` declaration (kept importable)
tool_param = to_anthropic_tool


class AnthropicChatModel:
    """A ``ChatModel`` over the Anthropic Messages API.

    Args (keyword-only):
        model: the model name sent in each request (``"claude-haiku-4-5"``, ...).
        api_key: ``None`` lets the SDK read ``ANTHROPIC_API_KEY``; when ``base_url`` is given and
            no key is available at all, ``"not-needed"`` is sent (local proxies ignore it).
        base_url: the API root without ``/v1`` (``None``: ``ANTHROPIC_BASE_URL`` or
            ``https://api.anthropic.com``).
        max_tokens: the most output tokens one reply may use (the API requires it).
        timeout: per-request timeout, seconds (applies to each SDK attempt).
        max_retries: SDK retries on 408/409/429/5xx/529 and connection errors (0 disables them).
        temperature: sampling temperature; ``None`` leaves the provider default. Sent in the
            request body (``extra_body``): recent SDK versions do not take it as a keyword.
        client, async_client: pre-built ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic``
            clients (tests, Bedrock/Vertex clients, custom HTTP clients; the caller closes them);
            otherwise they are created on first use: one sync client, and one async client per
            event loop, closed when that loop shuts down (``asyncio.run``) or by ``aclose``.

    Attributes:
        model_name: the ``model`` argument.

    Errors: ``TransientLLMError`` for rate limits (429), overload (529), 408/409 and other 5xx,
    timeouts and connection errors once the SDK's retries are exhausted; ``PermanentLLMError`` for every
    other failure (bad request, authentication, a reply that cannot be read). Messages include
    the HTTP status, the provider's error type and text, and the request id.
    """

    #: the SDK package every call imports (an optional extra); ``manage.py chat`` checks it first
    SDK_PACKAGE = "anthropic"

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 1024,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        client: anthropic.Anthropic | None = None,
        async_client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        if not model:
            raise ValueError("AnthropicChatModel needs a model name")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive number of output tokens, not {max_tokens!r}")
        self.model_name = model
        self.base_url = base_url
        if api_key is None and base_url is not None and not os.environ.get("ANTHROPIC_API_KEY"):
            api_key = LOCAL_API_KEY
        self._api_key = api_key
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self._clients: SDKClients[anthropic.Anthropic, anthropic.AsyncAnthropic] = SDKClients(
            client=client, async_client=async_client
        )

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model_name!r}, base_url={self.base_url!r})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> AnthropicChatModel | None:
        """Build a model from the environment, or return ``None`` when Anthropic is not configured.

        Reads ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL`` and ``AGENTMEMORY_LLM_MODEL``
        (default ``"claude-haiku-4-5"``). Returns ``None`` when neither ``ANTHROPIC_API_KEY`` nor
        ``ANTHROPIC_BASE_URL`` is set; with only a base URL (a local proxy) the key
        ``"not-needed"`` is sent.

        Args:
            environ: the mapping to read (default ``os.environ``).
            **kwargs: other constructor options (``max_tokens``, ``timeout``, ...).
        """
        env = os.environ if environ is None else environ
        api_key = env.get("ANTHROPIC_API_KEY") or None
        base_url = env.get("ANTHROPIC_BASE_URL") or None
        if api_key is None and base_url is None:
            return None
        model = env.get("AGENTMEMORY_LLM_MODEL") or DEFAULT_MODEL
        return cls(model=model, api_key=api_key or LOCAL_API_KEY, base_url=base_url, **kwargs)

    # -- clients ---------------------------------------------------------------------------

    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": self.timeout, "max_retries": self.max_retries}
        if self._api_key is not None:
            options["api_key"] = self._api_key
        if self.base_url is not None:
            options["base_url"] = self.base_url
        return options

    def _new_client(self, class_name: str) -> Any:
        sdk = _import_anthropic()
        return create_client(
            getattr(sdk, class_name),
            self._client_options(),
            errors=(sdk.AnthropicError, ValueError, TypeError),
            provider="Anthropic",
        )

    def close(self) -> None:
        """Close the sync client if this object created it (idempotent)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the async client this object created for the running event loop (idempotent)."""
        await self._clients.aclose()

    # -- calls -----------------------------------------------------------------------------

    def _request(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        sized: bool = True,
    ) -> tuple[dict[str, Any], list[SentChange]]:
        """The request body, and the changes made to the messages in it (a live list: a
        caller inside the same ``collecting()`` block adds its own)."""
        with collecting() as changes:
            return self._body(messages, tools, sized=sized), changes

    def _body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        sized: bool,
    ) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        if not turns:
            raise InvalidMessageError(
                "nothing to send: the Anthropic Messages API needs at least one human message "
                "besides the system prompt"
            )
        request: dict[str, Any] = {"model": self.model_name, "max_tokens": self.max_tokens, "messages": turns}
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = [to_anthropic_tool(tool) for tool in tools]
            # the tools' breakpoints count toward the request's four, ahead of the history's
            limit_cache_breakpoints(request["tools"], system, turns)
        if self.temperature is not None:
            request["extra_body"] = {"temperature": self.temperature}
        if sized:
            # the oldest inline media go as placeholders while the body is over the API's 32 MB
            limit_request_size(request)
        return request

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Send ``messages`` (and optional tool declarations) and return the model's reply.

        Args:
            messages: the context window, oldest first; system messages go to the ``system``
                parameter (see ``agentmemory.formats.anthropic.to_anthropic``). A request
                over the API's 32 MB sends its oldest inline images and documents as
                placeholder text (``limit_request_size``).
            tools: function declarations ``{"name", "description", "parameters"}`` (JSON
                Schema), sent as ``{"name", "description", "input_schema"}``.

        Returns:
            ``ChatResponse`` with the ``ai`` message (text and ``tool_use`` blocks as tool calls
            with dict arguments), usage (``anthropic_usage``: cache reads and writes counted in
            ``input_tokens`` and reported apart), the reported model,
            ``finish_reason`` = Anthropic's ``stop_reason`` (``"end_turn"``, ``"tool_use"``,
            ``"max_tokens"``, ...), the JSON-mode dump of the response, and ``sent_changes``:
            what the request changed in ``messages`` to meet the API's limits (images sent
            as placeholders, media types corrected, cache breakpoints left out, ...).

        Raises:
            InvalidMessageError: the messages cannot be expressed in the Anthropic format.
            TransientLLMError, PermanentLLMError: see the class docstring.
        """
        request, changes = self._request(messages, tools)
        client = self._clients.sync(functools.partial(self._new_client, "Anthropic"))
        sdk = _import_anthropic()
        try:
            response = client.messages.create(**request)
        except sdk.AnthropicError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(response, changes)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Async ``invoke`` through ``anthropic.AsyncAnthropic``; same arguments, result and errors."""
        request, changes = self._request(messages, tools)
        client = await self._clients.get_async(functools.partial(self._new_client, "AsyncAnthropic"))
        sdk = _import_anthropic()
        try:
            response = await client.messages.create(**request)
        except sdk.AnthropicError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(response, changes)

    def _structured_request(
        self, messages: Sequence[ChatMessage], output: OutputSchema
    ) -> tuple[dict[str, Any], list[SentChange]]:
        tool: dict[str, Any] = {"name": output.name, "input_schema": dict(output.schema)}
        if output.description:
            tool["description"] = output.description
        with collecting():
            request, changes = self._request(messages, None, sized=False)  # sized once, with its tool
            request["tools"] = [tool]
            request["tool_choice"] = {"type": "tool", "name": output.name}
            limit_request_size(request)
        return request, changes

    def invoke_structured(self, messages: Sequence[ChatMessage], *, output: OutputSchema) -> ChatResponse:
        """Ask for one JSON object of ``output``'s schema through forced tool use: one tool
        named ``output.name`` whose ``input_schema`` is the schema, and ``tool_choice``
        ``{"type": "tool", "name": ...}`` so the model must call it (Anthropic tool use
        guide, "Forcing tool use"; "JSON output": the tool's input is the structured output).

        Returns:
            As ``invoke``; ``parsed`` is the ``input`` of the reply's ``tool_use`` block
            for that tool, ``None`` when there is none (a refusal, or a reply cut at
            ``max_tokens``: ``stop_reason`` ``"max_tokens"``, then ``cut_off`` is true).
            The schema is not enforced by the API: check ``parsed``
            (``agentmemory.llm.structured.schema_problems``). Give the model a ``max_tokens``
            large enough for the whole object.

        Raises:
            InvalidMessageError, TransientLLMError, PermanentLLMError: as ``invoke``.
        """
        request, changes = self._structured_request(messages, output)
        client = self._clients.sync(functools.partial(self._new_client, "Anthropic"))
        sdk = _import_anthropic()
        try:
            response = client.messages.create(**request)
        except sdk.AnthropicError as exc:
            raise self._map_error(exc) from exc
        return _tool_input(self._to_response(response, changes), output.name)

    async def ainvoke_structured(
        self, messages: Sequence[ChatMessage], *, output: OutputSchema
    ) -> ChatResponse:
        """Async ``invoke_structured``; same arguments, result and errors."""
        request, changes = self._structured_request(messages, output)
        client = await self._clients.get_async(functools.partial(self._new_client, "AsyncAnthropic"))
        sdk = _import_anthropic()
        try:
            response = await client.messages.create(**request)
        except sdk.AnthropicError as exc:
            raise self._map_error(exc) from exc
        return _tool_input(self._to_response(response, changes), output.name)

    def _to_response(self, response: Any, changes: Sequence[SentChange] = ()) -> ChatResponse:
        raw = response.model_dump(mode="json", warnings=False)
        stop_reason = raw.get("stop_reason") or ""
        try:
            [message] = from_anthropic_message({"role": "assistant", "content": raw.get("content") or []})
        except InvalidMessageError as exc:
            raise PermanentLLMError(
                f"model {self.model_name!r} returned a reply that cannot be used "
                f"(stop_reason={stop_reason!r}): {exc.reason}"
            ) from exc
        return ChatResponse(
            message=message,
            usage=anthropic_usage(raw.get("usage")),
            model=raw.get("model") or self.model_name,
            finish_reason=stop_reason,
            raw=raw,
            sent_changes=tuple(changes),
        )

    def _map_error(self, exc: Exception) -> LLMError:
        """Translate an ``anthropic`` exception into ``TransientLLMError`` or ``PermanentLLMError``."""
        where = f"Anthropic messages call (model {self.model_name!r}, {self.base_url or 'default endpoint'})"
        return map_sdk_error(
            exc,
            _import_anthropic(),
            where=where,
            retries=f"after the SDK's retries (max_retries={self.max_retries})",
            timeout=self.timeout,
            describe=_provider_text,
        )


def _tool_input(response: ChatResponse, name: str) -> ChatResponse:
    """``response`` with ``parsed`` set to the arguments of its call of the tool ``name``."""
    if response.refused or response.cut_off:
        return response
    for call in response.message.tool_calls:
        if call.name == name:
            return dataclasses.replace(response, parsed=dict(call.arguments))
    return response


def anthropic_usage(usage: Mapping[str, Any] | None) -> Usage | None:
    """``Usage`` from a Messages API ``usage`` dict, or ``None`` when there is none.

    Anthropic's ``input_tokens`` leaves out the tokens read from and written to the prompt
    cache (Messages API reference, "usage"; prompt caching guide, "Tracking cache
    performance"); ``Usage.input_tokens`` counts every input token, so it is
    ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``, with the two
    cache figures also reported apart.
    """
    if not usage:
        return None
    read = int(usage.get("cache_read_input_tokens") or 0)
    created = int(usage.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0) + read + created,
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_input_tokens=read,
        cache_creation_input_tokens=created,
    )


# Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}`` -> "message (type)".
_provider_text = functools.partial(provider_text, envelope="error")


def from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> AnthropicChatModel | None:
    """``AnthropicChatModel.from_env``: a model from ``ANTHROPIC_*`` variables, or ``None``."""
    return AnthropicChatModel.from_env(environ, **kwargs)
