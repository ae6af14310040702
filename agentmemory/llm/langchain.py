"""``ChatModel`` adapter over any LangChain chat model (``langchain_core`` ``BaseChatModel``).

Needs ``langchain-core`` (``pip install 'django-agentmemory[langchain]'``) plus the integration package
of the model (``langchain-openai``, ``langchain-anthropic``, ``langchain-ollama``, ...).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentmemory.exceptions import (
    InvalidMessageError,
    LLMContextLengthError,
    LLMError,
    PermanentLLMError,
    TransientLLMError,
)
from agentmemory.formats.langchain import from_langchain_message, to_langchain
from agentmemory.formats.tools import to_openai_tool
from agentmemory.llm._sdk import is_context_overflow
from agentmemory.llm.base import ChatResponse, OutputSchema, Usage
from agentmemory.llm.structured import decode_json, json_only_instructions, prompted, with_instructions
from agentmemory.messages import ChatMessage

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["LangChainChatModel", "langchain_usage"]

# HTTP statuses worth retrying, read from the ``status_code`` that provider SDK errors carry.
_TRANSIENT_STATUSES = frozenset({408, 409, 429})
# Exception class names of provider SDKs (openai, anthropic, httpx, google) that mean "try later".
_TRANSIENT_NAMES = frozenset(
    {
        "RateLimitError",
        "APITimeoutError",
        "APIConnectionError",
        "InternalServerError",
        "OverloadedError",
        "ServiceUnavailableError",
        "ServiceUnavailable",
        "ResourceExhausted",
        "ConnectError",
        "ReadTimeout",
        "ConnectTimeout",
        "TimeoutException",
    }
)


def _is_transient(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if isinstance(status, int) and (status in _TRANSIENT_STATUSES or status >= 500):
            return True
        if isinstance(current, TimeoutError | ConnectionError) or type(current).__name__ in _TRANSIENT_NAMES:
            return True
        current = current.__cause__
    return False


def _is_context_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` or an error it was raised from is a provider SDK's "request over the
    context window" (``agentmemory.llm._sdk.is_context_overflow``: its status and body), or
    LangChain's own ``ContextOverflowError``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "ContextOverflowError":
            return True
        status = getattr(current, "status_code", None)
        if isinstance(status, int) and is_context_overflow(
            status, getattr(current, "body", None), str(getattr(current, "message", "") or "")
        ):
            return True
        current = current.__cause__
    return False


def langchain_usage(usage: Mapping[str, Any] | None) -> Usage | None:
    """``Usage`` from an ``AIMessage.usage_metadata`` (``UsageMetadata``), or ``None``.

    LangChain's ``input_tokens`` is already the sum of every input token type, cache reads
    and writes included; ``input_token_details["cache_read"]`` and ``["cache_creation"]``
    give those parts (``langchain_core.messages.ai.UsageMetadata``).
    """
    if not usage:
        return None
    details = usage.get("input_token_details") or {}
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_input_tokens=int(details.get("cache_read") or 0),
        cache_creation_input_tokens=int(details.get("cache_creation") or 0),
    )


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class LangChainChatModel:
    """A ``ChatModel`` that calls a LangChain chat model.

    Args:
        chat_model: any ``langchain_core.language_models.BaseChatModel`` (``ChatOpenAI``,
            ``ChatAnthropic``, ``ChatOllama``, a fake model in tests).
        model_name: reported as ``model_name``; default: the chat model's ``model_name`` or
            ``model`` attribute, else its ``_llm_type``.

    Tools are bound per call with ``chat_model.bind_tools(tools)`` (OpenAI function shape); the
    messages are converted with ``agentmemory.formats.langchain.to_langchain`` and the returned
    ``AIMessage`` with ``from_langchain_message`` (tool calls with dict arguments; calls without
    an id get a fresh one).

    Errors: ``TransientLLMError`` when the underlying error is a timeout, a connection error, or
    an HTTP 408/409/429/5xx of the provider SDK (found through the exception chain);
    ``PermanentLLMError`` for everything else, including a model without tool support and a reply with
    unparseable tool calls.
    """

    def __init__(self, chat_model: BaseChatModel, *, model_name: str | None = None) -> None:
        self.chat_model = chat_model
        if model_name is None:
            model_name = getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None)
            if not isinstance(model_name, str) or not model_name:
                model_name = getattr(chat_model, "_llm_type", None) or type(chat_model).__name__
        self.model_name = model_name

    def __repr__(self) -> str:
        return f"LangChainChatModel({type(self.chat_model).__name__}, model_name={self.model_name!r})"

    def _runnable(self, tools: Sequence[Mapping[str, Any]] | None) -> Any:
        if not tools:
            return self.chat_model
        try:
            return self.chat_model.bind_tools([to_openai_tool(tool) for tool in tools])
        except NotImplementedError as exc:
            raise PermanentLLMError(
                f"{type(self.chat_model).__name__} does not support tool calling (bind_tools); "
                "use a chat model integration with tool support or call it without tools"
            ) from exc

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Send ``messages`` (and optional tool declarations) through the LangChain model.

        Args:
            messages: the context window, oldest first.
            tools: function declarations ``{"name", "description", "parameters"}``.

        Returns:
            ``ChatResponse`` with the ``ai`` message, usage from ``usage_metadata``
            (``langchain_usage``; ``None`` when the model reports none), the model and finish
            reason from ``response_metadata`` (``model_name``/``model``,
            ``finish_reason``/``stop_reason``) and a JSON-safe dump of the ``AIMessage``.

        Raises:
            InvalidMessageError: a message cannot be converted.
            TransientLLMError, PermanentLLMError: see the class docstring.
        """
        lc_messages = to_langchain(messages)
        runnable = self._runnable(tools)
        try:
            result = runnable.invoke(lc_messages)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._to_response(result)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Async ``invoke`` through the model's ``ainvoke``; same arguments, result and errors."""
        lc_messages = to_langchain(messages)
        runnable = self._runnable(tools)
        try:
            result = await runnable.ainvoke(lc_messages)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._to_response(result)

    def _structured_runnable(self, output: OutputSchema) -> Any | None:
        """``with_structured_output`` of the schema (titled ``output.name``), or ``None`` for a
        chat model that has none (``NotImplementedError``: no tool calling)."""
        schema = {"title": output.name, **dict(output.schema)}
        if output.description:
            schema["description"] = output.description
        try:
            return self.chat_model.with_structured_output(schema, include_raw=True)
        except NotImplementedError:
            return None

    def invoke_structured(self, messages: Sequence[ChatMessage], *, output: OutputSchema) -> ChatResponse:
        """Ask for one JSON object of ``output``'s schema through the chat model's
        ``with_structured_output(schema, include_raw=True)`` (each integration uses its
        provider's contract: ``ChatOpenAI`` a JSON schema response format, ``ChatAnthropic``
        a forced tool call); a model without it (no tool calling) is asked in the prompt
        (``agentmemory.llm.structured.prompted``).

        Returns:
            As ``invoke``, built from the raw ``AIMessage``; ``parsed`` is LangChain's parsed
            output (a dict), ``None`` when it could not parse one. Check it against the
            schema (``agentmemory.llm.structured.schema_problems``).

        Raises:
            InvalidMessageError, TransientLLMError, PermanentLLMError: as ``invoke``.
        """
        runnable = self._structured_runnable(output)
        if runnable is None:
            return prompted(lambda sent: self.invoke(sent), messages, output)
        lc_messages = to_langchain(messages)
        try:
            result = runnable.invoke(lc_messages)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._structured_response(result)

    async def ainvoke_structured(
        self, messages: Sequence[ChatMessage], *, output: OutputSchema
    ) -> ChatResponse:
        """Async ``invoke_structured``; same arguments, result and errors."""
        runnable = self._structured_runnable(output)
        if runnable is None:
            response = await self.ainvoke(with_instructions(messages, json_only_instructions(output)))
            return dataclasses.replace(response, parsed=decode_json(response.message.text))
        lc_messages = to_langchain(messages)
        try:
            result = await runnable.ainvoke(lc_messages)
        except Exception as exc:
            raise self._map_error(exc) from exc
        return self._structured_response(result)

    def _structured_response(self, result: Any) -> ChatResponse:
        if not isinstance(result, Mapping) or "raw" not in result:
            raise PermanentLLMError(
                f"LangChain chat model {self.model_name!r}: with_structured_output(include_raw=True) "
                f"returned {type(result).__name__}, not {{'raw', 'parsed', 'parsing_error'}}"
            )
        response = self._to_response(result["raw"])
        parsed: Any = result.get("parsed")
        if parsed is not None and hasattr(parsed, "model_dump"):  # a Pydantic model
            parsed = parsed.model_dump(mode="json")
        return dataclasses.replace(response, parsed=parsed if isinstance(parsed, Mapping) else None)

    def _map_error(self, exc: Exception) -> LLMError:
        where = f"LangChain chat model {type(self.chat_model).__name__} ({self.model_name!r})"
        detail = f"{type(exc).__name__}: {exc}"
        if _is_transient(exc):
            return TransientLLMError(f"{where} failed, worth retrying later: {detail}")
        if _is_context_overflow(exc):
            return LLMContextLengthError(f"{where} failed, the request is over the model's window: {detail}")
        return PermanentLLMError(f"{where} failed: {detail}")

    def _to_response(self, result: Any) -> ChatResponse:
        from langchain_core.messages import AIMessage

        if not isinstance(result, AIMessage):
            raise PermanentLLMError(
                f"LangChain chat model {self.model_name!r} returned {type(result).__name__}, not an AIMessage"
            )
        try:
            message = from_langchain_message(result, fill_missing_ids=True)
        except InvalidMessageError as exc:
            raise PermanentLLMError(
                f"model {self.model_name!r} returned a reply that cannot be used: {exc.reason}"
            ) from exc
        metadata = result.response_metadata or {}
        return ChatResponse(
            message=message,
            usage=langchain_usage(result.usage_metadata),
            model=str(metadata.get("model_name") or metadata.get("model") or self.model_name),
            finish_reason=str(metadata.get("finish_reason") or metadata.get("stop_reason") or ""),
            raw=_json_safe(result.model_dump()),
        )
