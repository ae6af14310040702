"""The model's reply made storable: ``storable_reply`` (text, name, metadata) and
``usable_calls`` (tool call ids, names and arguments storage accepts), for the agent loop."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agentmemory.agents.tools import RAW_ARGUMENTS_KEY
from agentmemory.conf import app_settings
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.validation import json_problem, safe_str, storable_json, storable_text, text_problem

logger = logging.getLogger("agentmemory.agents")


def clear_of(ai: ChatMessage, taken: set[str]) -> ChatMessage:
    """``ai`` with fresh ids for its calls whose id is in ``taken``."""
    if not any(call.id in taken for call in ai.tool_calls):
        return ai
    return dataclasses.replace(ai, tool_calls=tuple(usable_calls(ai.tool_calls, taken)))


def _storable_short(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_ID_CHARS and not text_problem(value)


_MAX_ID_CHARS = 255


def storable_reply(message: ChatMessage, metadata: Mapping[str, Any] | None = None) -> ChatMessage:
    """The model's reply as storage takes it, whatever the model sent (refusing it would fail
    the turn after the human message is stored): NUL characters and lone surrogates in its
    text, name and metadata made storable (U+FFFD), text over ``MAX_MESSAGE_CHARS`` cut, an
    empty reply without calls stored as ``""``, its calls cleaned by ``usable_calls``, and
    ``metadata`` (usage, model, ...) merged over the provider's own."""
    provider = message.metadata if isinstance(message.metadata, Mapping) else {}
    content = message.content
    if content is None and not message.tool_calls:
        content = ""
    if content is not None:
        content = storable_text(safe_str(content), max_chars=app_settings().MAX_MESSAGE_CHARS)
    name = storable_text(safe_str(message.name or ""))[:255]
    return ChatMessage.ai(
        content,
        usable_calls(message.tool_calls),
        name=name,
        metadata=storable_json({**provider, **(metadata or {})}),
    )


def usable_calls(calls: Sequence[ToolCall], taken: Collection[str] = ()) -> list[ToolCall]:
    """Tool calls that storage accepts, whatever the model sent: an id that is missing,
    repeated, already awaiting a result in the conversation (``taken``), too long or not
    storable text gets a fresh one (some OpenAI-compatible servers send none, or number
    them from 1 each reply); a name that is not storable text of 1 to 255 characters is
    stored made storable (it names no tool, so the call is answered with an "unknown tool"
    error result); arguments that are not a storable JSON object are kept as text under
    ``RAW_ARGUMENTS_KEY``, so the call is answered with an error result. Only the first
    ``MAX_TOOL_CALLS_PER_MESSAGE`` calls are kept (the rest are logged and never run; the
    model sees the results of those it kept and may call again)."""
    seen: set[str] = set()
    usable = []
    limit = app_settings().MAX_TOOL_CALLS_PER_MESSAGE
    if len(calls) > limit:
        logger.warning(
            "the model asked for %d tool calls in one reply; the first %d are kept "
            "(AGENTMEMORY['MAX_TOOL_CALLS_PER_MESSAGE'])",
            len(calls),
            limit,
        )
        calls = calls[:limit]
    for call in calls:
        fresh = not _storable_short(call.id) or call.id in seen or call.id in taken
        call_id = f"call_{uuid.uuid4().hex}" if fresh else call.id
        seen.add(call_id)
        name = call.name
        if not _storable_short(name):
            name = storable_text(safe_str(name))[:_MAX_ID_CHARS] or "unnamed"
        arguments = call.arguments
        if not isinstance(arguments, Mapping) or json_problem(arguments):
            raw = arguments if isinstance(arguments, str) else safe_str(arguments)
            arguments = {RAW_ARGUMENTS_KEY: storable_text(raw, max_chars=10_000)}
        if call_id != call.id or name is not call.name or arguments is not call.arguments:
            call = ToolCall(id=call_id, name=name, arguments=arguments)
        usable.append(call)
    return usable
