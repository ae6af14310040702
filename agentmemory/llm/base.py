"""The small ``ChatModel`` protocol agentmemory needs from a language model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

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
    """

    message: ChatMessage
    usage: Usage | None = None
    model: str = ""
    finish_reason: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    refusal: str = ""

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
