"""The message type of the in-process memories the compat classes stand in for: ``Role``
(``user``/``assistant``/``system``/``tool``), ``ToolCall`` and ``Message``, and their
conversion to and from ``agentmemory.messages.ChatMessage``.

One ``Message`` serves both seeds that have one: selectools' dataclass
(``Message(role=Role.USER, content=...)``, ``to_dict()``/``from_dict()`` with the keys
``role``, ``content``, ``tool_result``, ``tool_calls`` as ``{"name", "parameters", "id"}``,
``tool_call_id``; seed 000) and windlass' constructors (``Message.user("hi")``,
``Message.system(...)``, ``msg.role.value``; seed 002).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentmemory.messages import ChatMessage
from agentmemory.messages import Role as StoredRole
from agentmemory.messages import ToolCall as StoredToolCall

__all__ = ["Message", "Role", "ToolCall", "from_chat_message", "to_chat_message"]

#: the key of ``ChatMessage.metadata`` that keeps the fields of a ``Message`` our columns
#: have no place for (``tool_result``), so they come back on reading
COMPAT_KEY = "compat"


class Role(enum.StrEnum):
    """Roles as OpenAI-style frameworks name them (selectools and windlass use these values)."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


_TO_STORED = {
    Role.USER: StoredRole.HUMAN,
    Role.ASSISTANT: StoredRole.AI,
    Role.SYSTEM: StoredRole.SYSTEM,
    Role.TOOL: StoredRole.TOOL,
}
_FROM_STORED = {stored: role for role, stored in _TO_STORED.items()}


def as_role(value: Any) -> Role:
    """``value`` as a ``Role``: a ``Role``, one of our stored roles (``human`` is ``user``,
    ``ai`` is ``assistant``) or their text.

    Raises:
        ValueError: an unknown role.
    """
    if isinstance(value, Role):
        return value
    if isinstance(value, StoredRole):
        return _FROM_STORED[value]
    # another framework's ``(str, Enum)`` member prints as ``Role.USER``: read its value
    text = str(getattr(value, "value", value))
    for stored, role in _FROM_STORED.items():
        if text == stored.value:
            return role
    return Role(text)


@dataclass
class ToolCall:
    """One tool call of an assistant message, in selectools' shape (``tool_name``,
    ``parameters``, ``id``); ``name`` and ``arguments`` read the same fields.

    The id is required when the message is stored: results are paired with their call by id
    (OpenAI's ``tool_call_id``, Anthropic's ``tool_use_id``).
    """

    tool_name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    @property
    def name(self) -> str:
        return self.tool_name

    @property
    def arguments(self) -> dict[str, Any]:
        return self.parameters

    @classmethod
    def coerce(cls, call: Any) -> ToolCall:
        """A ``ToolCall`` from itself, our ``agentmemory.messages.ToolCall`` or a mapping with
        ``name``/``tool_name``, ``parameters``/``arguments`` and ``id``."""
        if isinstance(call, ToolCall):
            return call
        if isinstance(call, StoredToolCall):
            return cls(tool_name=call.name, parameters=dict(call.arguments), id=call.id)
        if isinstance(call, Mapping):
            parameters = call.get("parameters") or call.get("arguments") or {}
            if not isinstance(parameters, Mapping):
                raise TypeError(f"a tool call's parameters are a mapping, not {type(parameters).__name__}")
            return cls(
                tool_name=call.get("name") or call.get("tool_name") or "",
                parameters=dict(parameters),
                id=call.get("id"),
            )
        raise TypeError(f"a tool call is a ToolCall or a mapping, not {type(call).__name__}")


@dataclass
class Message:
    """One message as selectools and windlass hold it.

    Args:
        role: a ``Role`` (or its text; our ``human``/``ai`` are read as ``user``/``assistant``).
        content: the text.
        tool_name: the tool a ``tool`` message answers for (stored as ``ChatMessage.name``).
        tool_result: selectools' separate result field (kept in the stored metadata).
        tool_calls: an assistant message's calls (``ToolCall`` objects or mappings).
        tool_call_id: the call a ``tool`` message answers.
        metadata: kept with the stored message; never sent to a model.
        seq, id: set on messages read back from storage (seq within the conversation,
            primary key of the stored row).

    selectools' ``image_path`` (a file read at construction) is not supported.
    """

    role: Role
    content: str = ""
    tool_name: str | None = None
    tool_result: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    seq: int | None = field(default=None, compare=False)
    id: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.role = as_role(self.role)
        if self.tool_calls is not None:
            self.tool_calls = [ToolCall.coerce(c) for c in self.tool_calls]

    # windlass' constructors
    @classmethod
    def user(cls, content: str, **kwargs: Any) -> Message:
        return cls(role=Role.USER, content=content, **kwargs)

    @classmethod
    def assistant(cls, content: str = "", **kwargs: Any) -> Message:
        return cls(role=Role.ASSISTANT, content=content, **kwargs)

    @classmethod
    def system(cls, content: str, **kwargs: Any) -> Message:
        return cls(role=Role.SYSTEM, content=content, **kwargs)

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, **kwargs: Any) -> Message:
        return cls(role=Role.TOOL, content=content, tool_call_id=tool_call_id, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """selectools' plain-JSON form: ``role`` (its value), ``content``, ``image_base64``
        (always ``None`` here), ``tool_result``, ``tool_calls`` (``[{"name", "parameters",
        "id"}]`` or ``None``), ``tool_call_id``; ``tool_name`` and ``metadata`` when set (so
        ``from_dict`` gives back what was stored)."""
        out: dict[str, Any] = {
            "role": self.role.value,
            "content": self.content,
            "image_base64": None,
            "tool_result": self.tool_result,
            "tool_calls": (
                [{"name": c.tool_name, "parameters": dict(c.parameters), "id": c.id} for c in self.tool_calls]
                if self.tool_calls
                else None
            ),
            "tool_call_id": self.tool_call_id,
        }
        if self.tool_name is not None:
            out["tool_name"] = self.tool_name
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """The inverse of ``to_dict``.

        Raises:
            TypeError: ``data`` is not a mapping, or a tool call or its parameters are not.
            ValueError: a missing or unknown role.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a message is a mapping, not {type(data).__name__}")
        if "role" not in data:
            raise ValueError(f"a message needs a role: {sorted(map(str, data))!r}")
        return cls(
            role=as_role(data["role"]),
            content=data.get("content") or "",
            tool_name=data.get("tool_name"),
            tool_result=data.get("tool_result"),
            tool_calls=[ToolCall.coerce(c) for c in data["tool_calls"]] if data.get("tool_calls") else None,
            tool_call_id=data.get("tool_call_id"),
            metadata=dict(data.get("metadata") or {}),
        )


def to_chat_message(message: Message | ChatMessage) -> ChatMessage:
    """What is stored for ``message``: a ``ChatMessage`` passes unchanged; a ``Message`` maps
    its role (``user`` is ``human``, ``assistant`` is ``ai``), its tool calls and its
    ``tool_name`` (as ``name``); ``tool_result`` goes in ``metadata["compat"]``.

    Raises:
        TypeError: neither a ``Message`` nor a ``ChatMessage``.
    """
    if isinstance(message, ChatMessage):
        return message
    if not isinstance(message, Message):
        raise TypeError(f"expected a Message or a ChatMessage, got {type(message).__name__}")
    role = _TO_STORED[as_role(message.role)]
    metadata = dict(message.metadata or {})
    if message.tool_result is not None:
        metadata[COMPAT_KEY] = {"tool_result": message.tool_result}
    calls = tuple(
        StoredToolCall(id=c.id or "", name=c.tool_name, arguments=dict(c.parameters))
        for c in message.tool_calls or ()
    )
    content: str | None = message.content
    if role is StoredRole.AI and calls and not content:
        content = None
    return ChatMessage(
        role=role,
        content=content if content is not None or role is StoredRole.AI else "",
        tool_calls=calls,
        tool_call_id=message.tool_call_id or "",
        name=message.tool_name or "",
        metadata=metadata,
    )


def from_chat_message(message: ChatMessage) -> Message:
    """The ``Message`` for a stored ``ChatMessage`` (the inverse of ``to_chat_message``)."""
    metadata = dict(message.metadata or {})
    extra = metadata.pop(COMPAT_KEY, None) or {}
    return Message(
        role=_FROM_STORED[StoredRole(message.role)],
        content=message.content or "",
        tool_name=message.name or None,
        tool_result=extra.get("tool_result"),
        tool_calls=[
            ToolCall(tool_name=c.name, parameters=dict(c.arguments), id=c.id) for c in message.tool_calls
        ]
        or None,
        tool_call_id=message.tool_call_id or None,
        metadata=metadata,
        seq=message.seq,
        id=message.id,
    )
