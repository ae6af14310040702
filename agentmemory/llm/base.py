"""The small ``ChatModel`` protocol agentmemory needs from a language model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentmemory.messages import ChatMessage


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider for one call (tokens)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """What one model call returned.

    Attributes:
        message: the ``ai`` message (text and/or tool calls).
        usage: provider-reported token usage.
        model: the model name the provider reports.
        finish_reason: the provider's stop reason (``"stop"``, ``"tool_calls"``, ...).
        raw: the provider payload, as a JSON-compatible dict, where useful.
    """

    message: ChatMessage
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: takes ``ChatMessage``s (and optional tool schemas), returns one reply.

    ``tools`` are JSON Schema function declarations in the OpenAI shape
    ``{"name", "description", "parameters"}``. Implementations raise
    ``agentmemory.exceptions.TransientLLMError`` for errors worth retrying (rate limits,
    timeouts, 5xx) and ``LLMError`` for the rest.
    """

    model_name: str

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse: ...

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse: ...
