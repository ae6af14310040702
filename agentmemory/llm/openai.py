"""``ChatModel`` adapter for OpenAI-compatible chat-completions endpoints (OpenAI, Azure, vLLM, Ollama).

Built on the official ``openai`` SDK (an optional dependency: ``pip install django-agentmemory[openai]``).
The SDK retries 408/409/429/5xx responses and connection errors itself (``max_retries``, with
backoff honouring ``retry-after-ms``/``retry-after`` headers); only when those retries are
exhausted does this adapter raise ``TransientLLMError``, so callers (Celery tasks) can retry later.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentmemory.exceptions import InvalidMessageError, LLMError, PermanentLLMError
from agentmemory.formats.changes import SentChange, collecting
from agentmemory.formats.openai import from_openai, to_openai_messages
from agentmemory.formats.tools import to_openai_tool
from agentmemory.llm._sdk import SDKClients, create_client, import_sdk, map_sdk_error, provider_text
from agentmemory.llm.base import ChatResponse, OutputSchema, Usage
from agentmemory.llm.structured import decode_json, json_only_instructions, prompted, with_instructions
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_MODEL", "OpenAIChatModel", "from_env", "openai_usage"]

DEFAULT_MODEL = "gpt-4o-mini"
#: the values of ``OpenAIChatModel(structured_output=...)``
STRUCTURED_OUTPUT_MODES = ("json_schema", "prompt")
# Placeholder key for local OpenAI-compatible servers (Ollama, vLLM, LM Studio) that ignore it;
# the SDK refuses to build a client without some key.
LOCAL_API_KEY = "not-needed"


def _import_openai() -> Any:
    return import_sdk("openai")


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
        structured_output: how ``invoke_structured`` asks for JSON: ``"json_schema"`` (the
            ``response_format`` of OpenAI's Structured Outputs, which OpenAI, Azure, vLLM,
            Ollama and LM Studio accept) or ``"prompt"`` (the schema in the system message,
            for a server that refuses ``response_format``).
        client, async_client: pre-built ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients (tests,
            Azure, custom HTTP clients; the caller closes them); otherwise they are created on
            first use: one sync client, and one async client per event loop, closed when that
            loop shuts down (``asyncio.run``, ``async_to_sync``) or by ``aclose``.

    Attributes:
        model_name: the ``model`` argument.

    Errors: ``TransientLLMError`` for rate limits, timeouts, connection errors, 408/409 and 5xx
    responses once the SDK's retries are exhausted; ``PermanentLLMError`` for every other failure (bad
    request, authentication, unparseable tool-call arguments in the reply). Messages include the
    HTTP status and the provider's error text.
    """

    #: the SDK package every call imports (an optional extra); ``manage.py chat`` checks it first
    SDK_PACKAGE = "openai"

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
        structured_output: str = "json_schema",
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
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            modes = ", ".join(STRUCTURED_OUTPUT_MODES)
            raise ValueError(f"structured_output must be one of {modes}, not {structured_output!r}")
        self.structured_output = structured_output
        self._clients: SDKClients[openai.OpenAI, openai.AsyncOpenAI] = SDKClients(
            client=client, async_client=async_client
        )

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

    def _new_client(self, class_name: str) -> Any:
        sdk = _import_openai()
        return create_client(
            getattr(sdk, class_name), self._client_options(), errors=(sdk.OpenAIError,), provider="OpenAI"
        )

    def close(self) -> None:
        """Close the sync client if this object created it (idempotent)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the async client this object created for the running event loop (idempotent).

        Optional under ``asyncio.run`` (clients are closed when their loop shuts down).
        """
        await self._clients.aclose()

    # -- calls -----------------------------------------------------------------------------

    def _request(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[dict[str, Any], list[SentChange]]:
        """The request body, and the changes made to the messages in it."""
        with collecting() as changes:
            request: dict[str, Any] = {"model": self.model_name, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = [to_openai_tool(tool) for tool in tools]
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.extra_body:
            request["extra_body"] = self.extra_body
        return request, changes

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
            (``openai_usage``: ``prompt_tokens`` -> ``input_tokens``, ``completion_tokens`` ->
            ``output_tokens``, cached tokens; ``None`` when the server sent no usage),
            the reported model, ``finish_reason``, the JSON-mode dump of the completion, and
            ``sent_changes``: what the request changed in ``messages`` to meet the API's
            limits (text cut, images sent as placeholders).

        Raises:
            InvalidMessageError: a message cannot be expressed in the OpenAI format.
            TransientLLMError, PermanentLLMError: see the class docstring.
        """
        request, changes = self._request(messages, tools)
        client = self._clients.sync(functools.partial(self._new_client, "OpenAI"))
        sdk = _import_openai()
        try:
            completion = client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(completion, changes)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Async ``invoke`` through ``openai.AsyncOpenAI``; same arguments, result and errors."""
        request, changes = self._request(messages, tools)
        client = await self._clients.get_async(functools.partial(self._new_client, "AsyncOpenAI"))
        sdk = _import_openai()
        try:
            completion = await client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._to_response(completion, changes)

    def _structured_request(
        self, messages: Sequence[ChatMessage], output: OutputSchema
    ) -> tuple[dict[str, Any], list[SentChange]]:
        request, changes = self._request(messages, None)
        json_schema: dict[str, Any] = {"name": output.name, "schema": dict(output.schema), "strict": True}
        if output.description:
            json_schema["description"] = output.description
        request["response_format"] = {"type": "json_schema", "json_schema": json_schema}
        return request, changes

    def invoke_structured(self, messages: Sequence[ChatMessage], *, output: OutputSchema) -> ChatResponse:
        """Ask for one JSON object of ``output``'s schema through OpenAI's Structured Outputs:
        ``response_format={"type": "json_schema", "json_schema": {"name", "description",
        "schema", "strict": true}}`` (chat completions API reference, "response_format").

        Returns:
            As ``invoke``; ``parsed`` is the message content decoded as JSON, ``None`` when
            the model refused (``refusal``, then ``refused`` is true), was cut off at its output
            limit (``finish_reason`` ``"length"``) or sent no JSON value. Servers that only
            claim OpenAI compatibility may ignore ``strict``: check ``parsed`` against the
            schema (``agentmemory.llm.structured.schema_problems``). With
            ``structured_output="prompt"`` the schema goes in the system message instead
            (``agentmemory.llm.structured.prompted``).

        Raises:
            InvalidMessageError, TransientLLMError, PermanentLLMError: as ``invoke``; a server
                that does not support ``response_format`` answers 400, a ``PermanentLLMError``.
        """
        if self.structured_output == "prompt":
            return prompted(lambda sent: self.invoke(sent), messages, output)
        request, changes = self._structured_request(messages, output)
        client = self._clients.sync(functools.partial(self._new_client, "OpenAI"))
        sdk = _import_openai()
        try:
            completion = client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._parsed(self._to_response(completion, changes))

    async def ainvoke_structured(
        self, messages: Sequence[ChatMessage], *, output: OutputSchema
    ) -> ChatResponse:
        """Async ``invoke_structured``; same arguments, result and errors."""
        if self.structured_output == "prompt":
            response = await self.ainvoke(with_instructions(messages, json_only_instructions(output)))
            return dataclasses.replace(response, parsed=decode_json(response.message.text))
        request, changes = self._structured_request(messages, output)
        client = await self._clients.get_async(functools.partial(self._new_client, "AsyncOpenAI"))
        sdk = _import_openai()
        try:
            completion = await client.chat.completions.create(**request)
        except sdk.OpenAIError as exc:
            raise self._map_error(exc) from exc
        return self._parsed(self._to_response(completion, changes))

    @staticmethod
    def _parsed(response: ChatResponse) -> ChatResponse:
        if response.refused or response.cut_off:
            return response
        return dataclasses.replace(response, parsed=decode_json(response.message.content))

    def _to_response(self, completion: Any, changes: Sequence[SentChange] = ()) -> ChatResponse:
        if not completion.choices:
            raise PermanentLLMError(f"model {self.model_name!r} returned a completion without choices")
        choice = completion.choices[0]
        finish_reason = choice.finish_reason or ""
        try:
            message = from_openai(_keep_malformed_arguments(choice.message.model_dump(mode="json")))
        except InvalidMessageError as exc:
            raise PermanentLLMError(
                f"model {self.model_name!r} returned a reply that cannot be used "
                f"(finish_reason={finish_reason!r}): {exc.reason}"
            ) from exc
        return ChatResponse(
            message=message,
            usage=openai_usage(completion.usage),
            model=completion.model or self.model_name,
            finish_reason=finish_reason,
            raw=completion.model_dump(mode="json"),
            refusal=getattr(choice.message, "refusal", None) or "",
            sent_changes=tuple(changes),
        )

    def _map_error(self, exc: Exception) -> LLMError:
        """Translate an ``openai`` exception into ``TransientLLMError`` or ``PermanentLLMError``."""
        where = f"OpenAI chat completion (model {self.model_name!r}, {self.base_url or 'default endpoint'})"
        return map_sdk_error(
            exc,
            _import_openai(),
            where=where,
            retries=f"(SDK max_retries={self.max_retries})",
            timeout=self.timeout,
            describe=_provider_text,
        )


# The ``openai`` SDK unwraps ``{"error": {"message", "type", "param", "code"}}`` into ``body``.
_provider_text = functools.partial(provider_text, kind_keys=("type", "code"))


def from_env(environ: Mapping[str, str] | None = None, **kwargs: Any) -> OpenAIChatModel | None:
    """``OpenAIChatModel.from_env``: a model from ``OPENAI_*`` variables, or ``None``."""
    return OpenAIChatModel.from_env(environ, **kwargs)


def openai_usage(usage: Any) -> Usage | None:
    """``Usage`` from an OpenAI ``usage`` object (SDK model or JSON dict), or ``None`` when the
    server sent none (some OpenAI-compatible servers do not).

    ``prompt_tokens`` -> ``input_tokens`` (cached tokens included), ``completion_tokens`` ->
    ``output_tokens``, ``prompt_tokens_details.cached_tokens`` -> ``cached_input_tokens``
    (OpenAI API reference, "The chat completion object").
    """
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        usage = usage.model_dump(mode="json") if hasattr(usage, "model_dump") else vars(usage)
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cached_input_tokens=int(details.get("cached_tokens") or 0),
    )


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
        except (ValueError, RecursionError):  # RecursionError: nested ~1,000 levels deep
            parsed = None
        if not isinstance(parsed, dict):
            function["arguments"] = json.dumps({RAW_ARGUMENTS_KEY: raw})
    return message
