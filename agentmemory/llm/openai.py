"""``ChatModel`` adapter for OpenAI-compatible chat-completions endpoints (OpenAI, Azure, vLLM, Ollama).

Built on the official ``openai`` SDK (an optional dependency: ``pip install django-agentmemory[openai]``).
The SDK retries 408/409/429/5xx responses and connection errors itself (``max_retries``, with
backoff honouring ``retry-after-ms``/``retry-after`` headers); only when those retries are
exhausted does this adapter raise ``TransientLLMError``, so callers (Celery tasks) can retry later.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import weakref
from collections.abc import AsyncGenerator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from agentmemory.exceptions import InvalidMessageError, LLMError, TransientLLMError
from agentmemory.formats.openai import from_openai, to_openai_messages
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_MODEL", "OpenAIChatModel", "from_env"]

DEFAULT_MODEL = "gpt-4o-mini"
# Placeholder key for local OpenAI-compatible servers (Ollama, vLLM, LM Studio) that ignore it;
# the SDK refuses to build a client without some key.
LOCAL_API_KEY = "not-needed"
# HTTP statuses the SDK itself treats as retryable (openai/_base_client.py ``_should_retry``).
_TRANSIENT_STATUSES = frozenset({408, 409, 429})


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise LLMError(
            "the 'openai' package is not installed; install it with: pip install 'django-agentmemory[openai]'"
        ) from exc
    return openai


def _tool_param(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap a ``{"name", "description", "parameters"}`` declaration as an OpenAI function tool."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        return {"type": "function", "function": dict(tool["function"])}
    return {"type": "function", "function": dict(tool)}


class OpenAIChatModel:
    """A ``ChatModel`` over the OpenAI chat-completions API (``POST {base_url}/chat/completions``).

    Args (keyword-only):
        model: the model name sent in each request (``"gpt-4o-mini"``, ``"llama3.1"``, ...).
        base_url: the API root including ``/v1`` (``"http://127.0.0.1:11434/v1"``); ``None``
            lets the SDK use ``OPENAI_BASE_URL`` or ``https://api.openai.com/v1``.
        api_key: ``None`` lets the SDK read ``OPENAI_API_KEY``; when ``base_url`` is given and no
            key is available at all, ``"not-needed"`` is sent (local servers ignore it).
        timeout: per-request timeout, seconds (applies to each SDK attempt).
        max_retries: SDK retries on 408/409/429/5xx and connection errors (0 disables them).
        temperature: sampling temperature; ``None`` leaves the provider default.
        extra_body: extra JSON fields merged into every request body (vLLM/Ollama options).
        client, async_client: pre-built ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients (tests,
            Azure, custom HTTP clients; the caller closes them); otherwise they are created on
            first use: one sync client, and one async client per event loop, closed when that
            loop shuts down (``asyncio.run``, ``async_to_sync``) or by ``aclose``.

    Attributes:
        model_name: the ``model`` argument.

    Errors: ``TransientLLMError`` for rate limits, timeouts, connection errors, 408/409 and 5xx
    responses once the SDK's retries are exhausted; ``LLMError`` for every other failure (bad
    request, authentication, unparseable tool-call arguments in the reply). Messages include the
    HTTP status and the provider's error text.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        client: openai.OpenAI | None = None,
        async_client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not model:
            raise ValueError("OpenAIChatModel needs a model name")
        self.model_name = model
        self.base_url = base_url
        if api_key is None and base_url is not None and not os.environ.get("OPENAI_API_KEY"):
            api_key = LOCAL_API_KEY
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.extra_body = dict(extra_body) if extra_body else None
        self._client = client
        self._owns_client = client is None
        self._async_client = async_client
        self._owns_async_client = async_client is None
        self._async_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model_name!r}, base_url={self.base_url!r})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAIChatModel | None:
        """Build a model from the environment, or return ``None`` when no LLM is configured.

        Reads ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` and ``AGENTMEMORY_LLM_MODEL`` (default
        ``"gpt-4o-mini"``). Returns ``None`` when neither ``OPENAI_API_KEY`` nor
        ``OPENAI_BASE_URL`` is set; with only a base URL (Ollama, vLLM) the key ``"not-needed"``
        is used.

        Args:
            environ: the mapping to read (default ``os.environ``).
            **kwargs: other constructor options (``timeout``, ``max_retries``, ...).
        """
        env = os.environ if environ is None else environ
        api_key = env.get("OPENAI_API_KEY") or None
        base_url = env.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            return None
        model = env.get("AGENTMEMORY_LLM_MODEL") or DEFAULT_MODEL
        return cls(model=model, base_url=base_url, api_key=api_key or LOCAL_API_KEY, **kwargs)

    # -- clients ---------------------------------------------------------------------------

    def _client_options(self) -> dict[str, Any]:
        return {
            "api_key": self._api_key,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
        }

    def _sync_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                sdk = _import_openai()
                try:
                    self._client = sdk.OpenAI(**self._client_options())
                except sdk.OpenAIError as exc:
                    raise LLMError(f"cannot create the OpenAI client: {exc}") from exc
            return self._client

    async def _get_async_client(self) -> openai.AsyncOpenAI:
        if not self._owns_async_client:
            assert self._async_client is not None
            return self._async_client
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async_clients.get(loop)
        if entry is not None:
            return entry[0]
        sdk = _import_openai()
        try:
            client = sdk.AsyncOpenAI(**self._client_options())
        except sdk.OpenAIError as exc:
            raise LLMError(f"cannot create the OpenAI client: {exc}") from exc
        # An httpx connection pool belongs to one event loop (each ``asyncio.run`` or
        # ``async_to_sync`` call makes a new one), so there is one client per loop. The started
        # async generator is finalised by ``loop.shutdown_asyncgens()`` (``asyncio.run`` calls it)
        # and closes the client's sockets before the loop closes, instead of leaking them.
        guard = _close_on_loop_shutdown(client, self._async_clients)
        await anext(guard)  # runs to the ``yield`` without suspending: no other task can interleave
        with self._lock:
            self._async_clients[loop] = (client, guard)
        return client

    def close(self) -> None:
        """Close the sync client if this object created it (idempotent)."""
        with self._lock:
            client, self._client = (self._client, None) if self._owns_client else (None, self._client)
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the async client this object created for the running event loop (idempotent).

        Optional under ``asyncio.run`` (clients are closed when their loop shuts down).
        """
        with self._lock:
            entry = self._async_clients.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    # -- calls -----------------------------------------------------------------------------

    def _request(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model_name, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = [_tool_param(tool) for tool in tools]
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Send ``messages`` (and optional tool declarations) and return the model's reply.

        Args:
            messages: the context window, oldest first.
            tools: function declarations ``{"name", "description", "parameters"}`` (JSON
                Schema); already-wrapped ``{"type": "function", "function": {...}}`` also works.

        Returns:
            ``ChatResponse`` with the ``ai`` message (text and/or parsed tool calls), usage
            (``prompt_tokens`` -> ``input_tokens``, ``completion_tokens`` -> ``output_tokens``),
            the reported model, ``finish_reason`` and the JSON-mode dump of the completion.

        Raises:
            InvalidMessageError: a message cannot be expressed in the OpenAI format.
            TransientLLMError, LLMError: see the class docstring.
        """
        request = self._request(messages, tools)
        client = self._sync_client()
        sdk = _import_openai()
        try:
            completion = client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(completion)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Async ``invoke`` through ``openai.AsyncOpenAI``; same arguments, result and errors."""
        request = self._request(messages, tools)
        client = await self._get_async_client()
        sdk = _import_openai()
        try:
            completion = await client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(completion)

    def _to_response(self, completion: Any) -> ChatResponse:
        if not completion.choices:
            raise LLMError(f"model {self.model_name!r} returned a completion without choices")
        choice = completion.choices[0]
        finish_reason = choice.finish_reason or ""
        try:
            message = from_openai(_keep_malformed_arguments(choice.message.model_dump(mode="json")))
        except InvalidMessageError as exc:
            raise LLMError(
                f"model {self.model_name!r} returned a reply that cannot be used "
                f"(finish_reason={finish_reason!r}): {exc.reason}"
            ) from exc
        usage = completion.usage
        return ChatResponse(
            message=message,
            usage=Usage(
                input_tokens=(usage.prompt_tokens or 0) if usage else 0,
                output_tokens=(usage.completion_tokens or 0) if usage else 0,
            ),
            model=completion.model or self.model_name,
            finish_reason=finish_reason,
            raw=completion.model_dump(mode="json"),
        )

    def _map_error(self, exc: Exception) -> LLMError:
        """Translate an ``openai`` exception into ``TransientLLMError`` or ``LLMError``."""
        sdk = _import_openai()
        where = f"OpenAI chat completion (model {self.model_name!r}, {self.base_url or 'default endpoint'})"
        retries = f"(SDK max_retries={self.max_retries})"
        if isinstance(exc, sdk.APIStatusError):
            status = exc.status_code
            text = _provider_text(exc)
            request_id = f", request id {exc.request_id}" if exc.request_id else ""
            if status in _TRANSIENT_STATUSES or status >= 500:
                return TransientLLMError(f"{where} failed with HTTP {status} {retries}{request_id}: {text}")
            return LLMError(f"{where} failed with HTTP {status}{request_id}: {text}")
        if isinstance(exc, sdk.APITimeoutError):
            return TransientLLMError(f"{where} timed out after {self.timeout} s {retries}")
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__ or exc.message
            return TransientLLMError(f"{where} could not connect {retries}: {cause}")
        return LLMError(f"{where} failed: {exc}")


async def _close_on_loop_shutdown(
    client: openai.AsyncOpenAI, registry: MutableMapping[asyncio.AbstractEventLoop, Any]
) -> AsyncGenerator[None, None]:
    """Yield once; closing the generator (at loop shutdown or ``aclose``) closes ``client``.

    It also drops the loop's entry from ``registry``: the started generator holds its loop
    (through the loop's finaliser hook), so the entry would otherwise keep every loop alive.
    """
    try:
        yield
    finally:
        loop = asyncio.get_running_loop()
        entry = registry.get(loop)
        if entry is not None and entry[0] is client:
            del registry[loop]
        await client.close()


def _provider_text(exc: openai.APIStatusError) -> str:
    """The provider's error text from an ``APIStatusError`` (OpenAI ``{"error": {"message"}}``)."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        kind = body.get("type") or body.get("code")
        if isinstance(message, str) and message:
            return f"{message} ({kind})" if kind else message
    if isinstance(body, str) and body:
        return body[:500]
    return exc.message


def from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAIChatModel | None:
    """``OpenAIChatModel.from_env``: a model from ``OPENAI_*`` variables, or ``None``."""
    return OpenAIChatModel.from_env(environ, **kwargs)


def _keep_malformed_arguments(message: dict[str, Any]) -> dict[str, Any]:
    """Models sometimes emit tool-call arguments that are not a JSON object (cut off by
    ``max_tokens``, or just malformed). Keep such text under ``RAW_ARGUMENTS_KEY`` instead
    of failing the whole reply, so the caller can answer the call with an error result the
    model can read and correct."""
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        raw = function.get("arguments")
        if not isinstance(raw, str) or raw == "":
            continue
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            function["arguments"] = json.dumps({RAW_ARGUMENTS_KEY: raw})
    return message
