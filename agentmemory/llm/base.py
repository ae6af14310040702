"""The small ``ChatModel`` protocol agentmemory needs from a language model."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentmemory.formats.changes import SentChange
from agentmemory.messages import ChatMessage


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one call (tokens), as the provider reported it.

    Attributes:
        input_tokens: every input token of the call, cached ones included (OpenAI's
            ``usage.prompt_tokens``; Anthropic's ``input_tokens + cache_read_input_tokens +
            cache_creation_input_tokens``; LangChain's ``usage_metadata["input_tokens"]``).
        output_tokens: tokens of the reply (OpenAI's ``completion_tokens``, reasoning tokens
            included; Anthropic's and LangChain's ``output_tokens``).
        cached_input_tokens: the part of ``input_tokens`` read from the provider's prompt
            cache (OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's
            ``cache_read_input_tokens``, LangChain's ``input_token_details["cache_read"]``).
        cache_creation_input_tokens: the part of ``input_tokens`` written to the prompt cache
            (Anthropic's ``cache_creation_input_tokens``, LangChain's
            ``input_token_details["cache_creation"]``; OpenAI reports none).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """What one model call returned.

    Attributes:
        message: the ``ai`` message (text and/or tool calls).
        usage: the token usage the provider reported, or ``None`` when it reported none
            (agentmemory then counts the tokens itself and marks them as counted).
        model: the model name the provider reports.
        finish_reason: the provider's stop reason as it reports it (OpenAI's
            ``finish_reason``: ``"stop"``, ``"tool_calls"``, ``"length"``,
            ``"content_filter"``; Anthropic's ``stop_reason``: ``"end_turn"``, ``"tool_use"``,
            ``"max_tokens"``, ``"refusal"``).
        raw: the provider payload, as a JSON-compatible dict, where useful.
        refusal: the provider's refusal text when it sends one apart from the content
            (OpenAI's ``message.refusal``), else ``""``.
        parsed: for a structured call (``StructuredChatModel.invoke_structured``), the JSON
            value the reply holds: OpenAI's message content decoded, the input of Anthropic's
            forced tool call, LangChain's parsed output; ``None`` when the reply holds none
            (refused, cut off, not JSON) and for plain calls. Checking it against the schema
            is the caller's part (``agentmemory.llm.structured.schema_problems``).
        sent_changes: how the request the adapter sent differed from the messages it was
            given, one ``agentmemory.formats.changes.SentChange`` per changed message or part,
            in the order made (an image sent as its placeholder text, a media type corrected,
            text cut, a cache breakpoint left out, ...): what a recorded call shows as sent.
            Empty when the request carried the messages as given, and from adapters that
            change nothing themselves (LangChain, the offline and test models).
    """

    message: ChatMessage
    usage: Usage | None = None
    model: str = ""
    finish_reason: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    refusal: str = ""
    parsed: Any = None
    sent_changes: tuple[SentChange, ...] = ()

    @property
    def refused(self) -> bool:
        """The provider declined to answer: a refusal text, or a finish reason in
        ``REFUSAL_FINISH_REASONS`` (OpenAI's content filter, Anthropic's refusal)."""
        return bool(self.refusal) or self.finish_reason in REFUSAL_FINISH_REASONS

    @property
    def cut_off(self) -> bool:
        """The reply stopped at the model's output token limit (OpenAI's ``"length"``,
        Anthropic's ``"max_tokens"``): its text may be incomplete."""
        return self.finish_reason in CUT_OFF_FINISH_REASONS


#: finish reasons meaning the provider declined to answer (OpenAI, Anthropic)
REFUSAL_FINISH_REASONS = frozenset({"content_filter", "refusal"})
#: finish reasons meaning the reply hit the output token limit (OpenAI, Anthropic)
CUT_OFF_FINISH_REASONS = frozenset({"length", "max_tokens"})


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """The JSON object a structured call asks the model for.

    Attributes:
        name: names the output: OpenAI's ``response_format.json_schema.name``, the name of
            the tool Anthropic is made to call; 1 to 64 letters, digits, ``_`` or ``-`` (the
            pattern both APIs accept).
        schema: a JSON Schema of an object, within what the providers' strict modes accept
            (OpenAI Structured Outputs, "Supported schemas"): ``type``, ``properties``,
            ``required`` naming every property, ``additionalProperties: false`` on every
            object, ``items``, ``enum``, ``description``.
        description: what the output is, sent to the model with the schema.

    Raises:
        ValueError: a name outside that pattern, or a schema that is not an object schema.
    """

    name: str
    schema: Mapping[str, Any]
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SCHEMA_NAME.fullmatch(self.name):
            raise ValueError(f"an output name is 1-64 letters, digits, '_' or '-', not {self.name!r}")
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise ValueError("an output schema must be a JSON Schema with type 'object'")


_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: takes ``ChatMessage``s (and optional tool schemas), returns one reply.

    ``tools`` are JSON Schema function declarations in the OpenAI shape
    ``{"name", "description", "parameters"}``. Implementations raise
    ``agentmemory.exceptions.TransientLLMError`` for errors worth retrying (rate limits,
    timeouts, 5xx) and ``agentmemory.exceptions.PermanentLLMError`` for the rest (both are
    ``LLMError``s). A provider that declines to answer is reported through ``finish_reason``
    (or ``refusal``), never by the reply's wording.
    """

    model_name: str

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse: ...

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse: ...


@runtime_checkable
class StructuredChatModel(ChatModel, Protocol):
    """A ``ChatModel`` that can also be made to answer with one JSON object of a given schema,
    through the provider's own structured-output contract: OpenAI's ``response_format``
    of type ``json_schema`` with ``strict: true``, Anthropic's forced tool use
    (``tool_choice`` naming the one tool whose ``input_schema`` is the schema), LangChain's
    ``with_structured_output``. The adapters in ``agentmemory.llm`` implement it; for any
    other ``ChatModel``, ``agentmemory.llm.structured.invoke_structured`` asks for the JSON
    in the prompt instead.

    The reply's JSON value is ``ChatResponse.parsed`` (``None`` when there is none); refusals
    and replies cut at the output limit are reported as for ``invoke`` (``refused``,
    ``cut_off``). Errors are those of ``invoke``.
    """

    def invoke_structured(self, messages: Sequence[ChatMessage], *, output: OutputSchema) -> ChatResponse: ...

    async def ainvoke_structured(
        self, messages: Sequence[ChatMessage], *, output: OutputSchema
    ) -> ChatResponse: ...
