"""agentspan's message dicts (``{"role", "message"}``, tool calls and results with
``taskReferenceName``) to and from our ``ChatMessage``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmemory.messages import ChatMessage, Role

__all__ = ["as_dict", "from_dict"]


def as_dict(message: ChatMessage) -> dict[str, Any]:
    """A stored message in agentspan's shape: ``{"role", "message"}``, a tool call as
    ``{"role": "tool_call", "message": "", "tool_calls": [{"name", "taskReferenceName",
    "input"}]}``, a tool result with ``toolCallId`` and ``taskReferenceName``."""
    if message.role is Role.AI and message.tool_calls:
        return {
            "role": "tool_call",
            "message": message.content or "",
            "tool_calls": [
                {"name": c.name, "taskReferenceName": c.id, "input": dict(c.arguments)}
                for c in message.tool_calls
            ],
        }
    if message.role is Role.TOOL:
        return {
            "role": "tool",
            "message": message.text,
            "toolCallId": message.tool_call_id,
            "taskReferenceName": message.tool_call_id,
        }
    role = {Role.HUMAN: "user", Role.AI: "assistant", Role.SYSTEM: "system"}[message.role]
    return {"role": role, "message": message.text}


def from_dict(data: Mapping[str, Any]) -> ChatMessage:
    """The inverse of ``as_dict`` (``content`` is read where ``message`` is missing).

    Raises:
        ValueError: an unknown role.
    """
    role = data.get("role")
    text = data.get("message", data.get("content", "")) or ""
    if role == "tool_call":
        calls = [
            {
                "id": c.get("taskReferenceName") or f"{c['name']}_ref",
                "name": c["name"],
                "arguments": c.get("input") or {},
            }
            for c in data.get("tool_calls") or ()
        ]
        return ChatMessage.ai(text or None, tool_calls=calls)
    if role == "tool":
        ref = data.get("toolCallId") or data.get("taskReferenceName") or ""
        return ChatMessage.tool(str(text), tool_call_id=ref)
    stored = {"user": Role.HUMAN, "assistant": Role.AI, "system": Role.SYSTEM}.get(str(role))
    if stored is None:
        raise ValueError(f"unknown role {role!r}")
    return ChatMessage(role=stored, content=str(text))
