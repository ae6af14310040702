"""Checks a message must pass before it is stored: storable text and JSON, a known role, fields
that fit the role, and the link between tool calls and their results."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from agentmemory.exceptions import InvalidMessageError
from agentmemory.messages import ChatMessage, Role, ToolCall

_MAX_SHORT = 255

#: deepest nesting accepted in tool arguments and metadata (JSON objects and arrays)
MAX_JSON_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``: PostgreSQL refuses NUL bytes and
    no database can encode a lone UTF-16 surrogate (``"\\ud800"``) as UTF-8."""
    if "\x00" in value:
        return "contains a NUL character"
    if _SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a storable JSON value, or ``None``: non-string object keys
    (they would be rewritten as strings), NaN or infinities, nesting deeper than
    ``MAX_JSON_DEPTH``, text that ``text_problem`` refuses, or a non-JSON type."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested deeper than {MAX_JSON_DEPTH} levels"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "contains NaN or an infinity"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a non-string key {key!r}"
            problem = text_problem(key) or json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"holds a {type(value).__name__}, which is not a JSON type"


def _check_json(value: Any, what: str, index: int) -> None:
    problem = json_problem(value)
    if problem:
        raise InvalidMessageError(f"{what} {problem}", index=index)


def coerce_message(message: Any, index: int) -> ChatMessage:
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(
            f"expected a ChatMessage, got {type(message).__name__} (convert provider formats with "
            "agentmemory.formats first)",
            index=index,
        )
    try:
        role = Role(message.role)
    except ValueError as exc:
        allowed = ", ".join(r.value for r in Role)
        raise InvalidMessageError(f"unknown role {message.role!r} (allowed: {allowed})", index=index) from exc
    if role is not message.role:
        message = ChatMessage(
            role=role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=message.name,
            metadata=message.metadata,
        )
    return message


def validate_message(message: ChatMessage, index: int, *, max_chars: int) -> None:
    """Check one message on its own: a known role, the fields that role allows, storable text and
    JSON, content within ``max_chars`` characters, tool calls with ids, names and JSON-object
    arguments.

    Raises:
        InvalidMessageError: with ``index`` set to the message's place in its batch.
    """
    content = message.content
    if content is not None and not isinstance(content, str):
        raise InvalidMessageError(f"content must be text or None, not {type(content).__name__}", index=index)
    if content is not None:
        problem = text_problem(content)
        if problem:
            raise InvalidMessageError(f"content {problem}", index=index)
        if len(content) > max_chars:
            raise InvalidMessageError(
                f"content has {len(content)} characters, over the maximum of {max_chars} "
                "(AGENTMEMORY['MAX_MESSAGE_CHARS'])",
                index=index,
            )
    for field_name in ("tool_call_id", "name"):
        value = getattr(message, field_name)
        if not isinstance(value, str):
            raise InvalidMessageError(f"{field_name} must be a string", index=index)
        problem = text_problem(value)
        if problem:
            raise InvalidMessageError(f"{field_name} {problem}", index=index)
        if len(value) > _MAX_SHORT:
            raise InvalidMessageError(f"{field_name} is longer than {_MAX_SHORT} characters", index=index)
    if not isinstance(message.metadata, Mapping):
        raise InvalidMessageError(
            f"metadata must be a JSON object, not {type(message.metadata).__name__}", index=index
        )
    _check_json(message.metadata, "metadata", index)
    if not isinstance(message.tool_calls, tuple | list):
        raise InvalidMessageError("tool_calls must be a list of ToolCall objects", index=index)
    role = message.role
    if role in (Role.HUMAN, Role.SYSTEM) and content is None:
        raise InvalidMessageError(f"a {role} message needs content (text, possibly empty)", index=index)
    if message.tool_calls and role is not Role.AI:
        raise InvalidMessageError(f"only ai messages carry tool calls, not {role}", index=index)
    if role is Role.AI and content is None and not message.tool_calls:
        raise InvalidMessageError("an ai message needs content or tool calls", index=index)
    if role is Role.TOOL:
        if not message.tool_call_id:
            raise InvalidMessageError(
                "a tool result needs the tool_call_id of the call it answers", index=index
            )
        if content is None:
            raise InvalidMessageError("a tool result needs content (text, possibly empty)", index=index)
    elif message.tool_call_id:
        raise InvalidMessageError(f"only tool messages carry a tool_call_id, not {role}", index=index)
    seen: set[str] = set()
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            raise InvalidMessageError("tool_calls must hold ToolCall objects", index=index)
        if not isinstance(call.id, str) or not call.id or len(call.id) > _MAX_SHORT or text_problem(call.id):
            raise InvalidMessageError(f"tool call id {call.id!r} is empty, too long or not text", index=index)
        if call.id in seen:
            raise InvalidMessageError(f"tool call id {call.id!r} appears twice", index=index)
        seen.add(call.id)
        if (
            not isinstance(call.name, str)
            or not call.name
            or len(call.name) > _MAX_SHORT
            or text_problem(call.name)
        ):
            raise InvalidMessageError(
                f"tool call {call.id!r} needs a name of at most {_MAX_SHORT} characters of text", index=index
            )
        if not isinstance(call.arguments, Mapping):
            raise InvalidMessageError(
                f"arguments of tool call {call.id!r} must be a JSON object, "
                f"not {type(call.arguments).__name__}",
                index=index,
            )
        _check_json(call.arguments, f"arguments of tool call {call.id!r}", index)


def link_tool_message(
    message: ChatMessage, seq: int, index: int, pending: dict[str, int], *, strict: bool
) -> int | None:
    """Link a message to the tool exchange it belongs to, updating ``pending`` in place.

    Messages are stored in the order they happen: a human, system or AI message may follow a
    tool call that still awaits its result (an approval flow, a tool that runs for minutes, a
    client that died), and a result may arrive after later messages. Each tool call stays
    pending until a result with its id arrives.

    Args:
        message: the message about to be stored.
        seq: the seq it will be stored at.
        index: its place in the batch (for the error).
        pending: the conversation's unanswered tool calls, ``{tool_call_id: seq of the AI
            message that made the call}``; calls made by ``message`` are added, the call a
            tool result answers is removed.
        strict: refuse a tool result that answers no pending call; otherwise (importing
            legacy history) it is stored as an orphan, which context windows skip.

    Returns:
        The message's ``exchange_seq``: its own seq for an AI message with tool calls, the
        seq of the AI message whose call it answers for a tool result, ``None`` otherwise
        (and for an orphaned result).

    Raises:
        InvalidMessageError: an AI message reuses the id of a call still pending (a result
            could not tell which call it answers), or, in strict mode, a tool result answers
            no pending call (OpenAI and Anthropic reject a result without its call).
    """
    if message.role is Role.AI and message.tool_calls:
        clash = sorted(c.id for c in message.tool_calls if c.id in pending)
        if clash:
            raise InvalidMessageError(f"tool call id(s) {clash} are already awaiting results", index=index)
        for call in message.tool_calls:
            pending[call.id] = seq
        return seq
    if message.role is Role.TOOL:
        exchange = pending.pop(message.tool_call_id, None)
        if exchange is None and strict:
            raise InvalidMessageError(
                f"tool result for {message.tool_call_id!r} answers no earlier unanswered tool call "
                "(import legacy history with validate_tool_pairs=False to keep it as an orphan)",
                index=index,
            )
        return exchange
    return None
