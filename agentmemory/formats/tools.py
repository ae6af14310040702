"""Tool declarations in each shape: agentmemory's native ``{"name", "description",
"parameters"}`` (a JSON Schema object), OpenAI's function tools and Anthropic's tools.

The provider adapters send their ``tools`` with these functions, so a recorded call's
declarations shown in a provider's shape are what that provider received.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["to_anthropic_tool", "to_native_tool", "to_openai_tool", "tools_in_format"]

#: the schema of a tool that takes no arguments, where a provider requires one
_NO_ARGUMENTS = {"type": "object", "properties": {}}


def to_openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration as an OpenAI chat-completions function tool, ``{"type": "function",
    "function": {"name", "description", "parameters"}}`` (OpenAI's ``tools`` request
    parameter; LangChain's ``bind_tools`` takes the same shape). One already in that shape is
    copied as it is."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        return {"type": "function", "function": dict(tool["function"])}
    return {"type": "function", "function": dict(tool)}


def to_anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration as an Anthropic tool, ``{"name", "description", "input_schema"}`` (the
    Messages API's ``tools`` parameter). An OpenAI function tool is unwrapped first, one that
    already has ``input_schema`` is copied as it is, and a missing ``parameters`` becomes
    ``{"type": "object", "properties": {}}`` (the API requires an object schema).

    Raises:
        ValueError: the declaration has no ``name``.
    """
    if "input_schema" in tool:
        return dict(tool)
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool declaration without a 'name': {dict(tool)!r}")
    result: dict[str, Any] = {"name": name, "input_schema": dict(tool.get("parameters") or _NO_ARGUMENTS)}
    if tool.get("description"):
        result["description"] = tool["description"]
    return result


def to_native_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration in the native shape, ``{"name", "description", "parameters"}``: an
    OpenAI function tool unwrapped, an Anthropic tool's ``input_schema`` as ``parameters``;
    one in the native shape copied as it is."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        return dict(tool["function"])
    if "input_schema" in tool:
        native = {key: value for key, value in tool.items() if key != "input_schema"}
        return {**native, "parameters": tool["input_schema"]}
    return dict(tool)


def tools_in_format(tools: Iterable[Mapping[str, Any]], message_format: str) -> list[dict[str, Any]]:
    """``tools`` in the shape of ``message_format``: ``"openai"`` and ``"langchain"`` (what
    LangChain's chat models are given) OpenAI's, ``"anthropic"`` Anthropic's, anything else the
    native shape. A declaration a shape cannot hold (an Anthropic tool needs a name) is
    given as it is."""
    out = []
    for tool in tools:
        if message_format in ("openai", "langchain"):
            out.append(to_openai_tool(tool))
        elif message_format == "anthropic":
            try:
                out.append(to_anthropic_tool(tool))
            except ValueError:
                out.append(dict(tool))
        else:
            out.append(to_native_tool(tool))
    return out
