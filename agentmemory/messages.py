"""In-memory message types used everywhere outside the ORM: ``ChatMessage`` and ``ToolCall``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: key under which the text of tool-call arguments that were not a JSON object is kept
#: (a model's malformed output), so the call can be answered with an error result
RAW_ARGUMENTS_KEY = "_raw_arguments"


class Role(enum.StrEnum):
    """Roles of stored messages (OpenAI calls them system/user/assistant/tool)."""

    SYSTEM = "system"
    HUMAN = "human"
    AI = "ai"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call inside an ``ai`` message.

    ``arguments`` is a JSON object (a ``dict``), never a JSON string inside JSON.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(id=data["id"], name=data["name"], arguments=dict(data.get("arguments") or {}))


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation, framework-neutral.

    Args:
        role: a ``Role`` (``"system"``, ``"human"``, ``"ai"`` or ``"tool"``).
        content: the text; ``None`` is kept distinct from ``""`` so that an OpenAI
            assistant message with ``content: null`` round-trips exactly.
        tool_calls: the calls an ``ai`` message makes, in the model's order.
        tool_call_id: for ``tool`` messages, the id of the call this result answers.
        name: the tool name of a ``tool`` message (or a participant name).
        metadata: model, usage, finish reason, latency, provider payload: never sent.
        seq, id, token_count: set on messages read back from storage.
        truncated: ``True`` on a copy shortened for the context window (storage keeps
            the whole text).
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    seq: int | None = None
    id: int | None = None
    token_count: int | None = None
    truncated: bool = False

    @classmethod
    def system(cls, content: str, **kwargs: Any) -> ChatMessage:
        return cls(role=Role.SYSTEM, content=content, **kwargs)

    @classmethod
    def human(cls, content: str, **kwargs: Any) -> ChatMessage:
        return cls(role=Role.HUMAN, content=content, **kwargs)

    @classmethod
    def ai(
        cls, content: str | None = None, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (), **kwargs: Any
    ) -> ChatMessage:
        return cls(role=Role.AI, content=content, tool_calls=tuple(tool_calls), **kwargs)

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str = "", **kwargs: Any) -> ChatMessage:
        return cls(role=Role.TOOL, content=content, tool_call_id=tool_call_id, name=name, **kwargs)

    @property
    def text(self) -> str:
        """The content as text (``""`` for ``None``)."""
        return self.content or ""
