"""The tool-calling loop of the compat agents (selectools' ``Agent``, agentspan's ``Agent`` run
by its ``AgentRuntime``), their tools, and the models named by their provider objects and
model strings.

The loop is the frameworks' own: their memories decide what is sent (selectools sends its
``ConversationMemory`` window, agentspan prepends ``memory.messages``), so the turn does
not go through ``BaseToolCallingAgent`` (which builds our token-budgeted window over a
stored conversation, and is a layer above this package). The models are our adapters
(``agentmemory.llm``), so a compat agent reaches the same providers as ours.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmemory.conf import app_settings
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage, Role, ToolCall
from agentmemory.validation import safe_str, storable_json, storable_text

__all__ = ["FunctionTool", "LoopResult", "as_tool", "model_from_string", "run_loop", "tool"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def _schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a parameter annotation: the plain JSON types, ``list[...]``,
    ``dict[...]`` and ``X | None``; anything else is left open (``{}``)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _schema(args[0]) if len(args) == 1 else {}
    base = origin or hint
    kind = _JSON_TYPES.get(base)
    return {"type": kind} if kind else {}


class FunctionTool:
    """A function a compat agent's model can call: ``name``, ``description`` (the docstring's
    first paragraph unless given), ``parameters`` (a JSON Schema object built from the
    signature); calling it calls the function.

    Raises:
        TypeError: a name outside ``[A-Za-z0-9_-]{1,64}`` (the providers' rule), or
            ``*args``/``**kwargs``.
    """

    def __init__(
        self, func: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> None:
        self.func = func
        self.name = name or func.__name__
        if not _NAME.match(self.name):
            raise TypeError(f"tool name {self.name!r} must match [A-Za-z0-9_-]{{1,64}} (provider rule)")
        doc = inspect.getdoc(func) or ""
        self.description = description if description is not None else doc.split("\n\n")[0].strip()
        try:
            hints = typing.get_type_hints(func)
        except Exception:  # unresolvable annotations: parameters are left open
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in inspect.signature(func).parameters.values():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args and **kwargs cannot be described to a model")
            schema = _schema(hints.get(param.name))
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            elif isinstance(param.default, str | int | float | bool):
                schema["default"] = param.default
            properties[param.name] = schema
        self.parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            self.parameters["required"] = required
        self._required = required
        self.__doc__ = func.__doc__
        self.__name__ = self.name
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The declaration sent to the model: ``{"name", "description", "parameters"}``."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def run(self, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Call the function with the model's arguments; returns ``(text, error)``. Never
        raises ``Exception``: a bad argument or a failure becomes an ``"Error: ..."`` text the
        model can read (a ``str`` result is sent as is, anything else as JSON)."""
        if RAW_ARGUMENTS_KEY in arguments:
            return f"Error: the arguments of {self.name} were not a JSON object", True
        known = self.parameters["properties"]
        unknown = sorted(set(arguments) - set(known))
        missing = [n for n in self._required if n not in arguments]
        if unknown or missing:
            problem = f"unknown argument(s) {', '.join(unknown)}" if unknown else ""
            problem += ("; " if problem and missing else "") + (
                f"missing required argument(s): {', '.join(missing)}" if missing else ""
            )
            return f"Error: invalid arguments for {self.name}: {problem}", True
        try:
            value = self.func(**arguments)
        except Exception as exc:
            return f"Error: {type(exc).__name__}: {exc}", True
        if isinstance(value, str):
            return value, False
        try:
            return json.dumps(value, default=str), False
        except (TypeError, ValueError):
            return str(value), False


def tool(
    func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """``@tool`` and ``@tool(name=..., description=...)``: the function as a ``FunctionTool``
    (agentspan's and selectools' decorator spelling)."""

    def decorate(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description)

    return decorate(func) if func is not None else decorate


def as_tool(item: Any) -> FunctionTool:
    """A ``FunctionTool`` from itself, any object with ``name``, ``schema()`` and a callable
    ``func`` (our ``agentmemory.agents.tool``), or a plain function.

    Raises:
        TypeError: not callable.
    """
    if isinstance(item, FunctionTool):
        return item
    func = getattr(item, "func", None)
    if callable(func) and isinstance(getattr(item, "name", None), str):
        return FunctionTool(func, name=item.name, description=getattr(item, "description", None))
    if callable(item):
        return FunctionTool(item)
    raise TypeError(f"a tool is a function or a @tool, not {type(item).__name__}")


@dataclass
class LoopResult:
    """One run of ``run_loop``.

    Attributes:
        added: the messages the run produced, in order: each tool-calling AI message with its
            results, then the final AI message (or none when ``max_iterations`` ran out).
        final: the final AI message, or ``None``.
        calls: every tool call made, as ``(call, result text, error)``.
        iterations: model calls made.
        usage: summed token usage (tokens) of the calls that reported it.
    """

    added: list[ChatMessage] = field(default_factory=list)
    final: ChatMessage | None = None
    calls: list[tuple[ToolCall, str, bool]] = field(default_factory=list)
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""


def storable_reply(message: ChatMessage) -> ChatMessage:
    """The model's reply as storage takes it, whatever the model sent: NUL characters and
    lone surrogates in its text and arguments replaced by U+FFFD (``storable_text``), text
    over ``MAX_MESSAGE_CHARS`` cut, and a tool call id that is empty or repeated within the
    reply replaced by a fresh one (some OpenAI-compatible servers send none). Refusing the
    reply would fail the run after the user's messages were stored."""
    seen: set[str] = set()
    calls = []
    for call in message.tool_calls:
        call_id = call.id if call.id and call.id not in seen and "\x00" not in call.id else ""
        call_id = call_id or f"call_{uuid.uuid4().hex}"
        seen.add(call_id)
        arguments = storable_json(call.arguments) if isinstance(call.arguments, Mapping) else call.arguments
        calls.append(ToolCall(id=call_id, name=storable_text(call.name), arguments=arguments))
    content = message.content
    if content is not None:
        content = storable_text(safe_str(content), max_chars=app_settings().MAX_MESSAGE_CHARS)
    metadata = storable_json(dict(message.metadata)) if isinstance(message.metadata, Mapping) else {}
    return dataclasses.replace(message, content=content, tool_calls=tuple(calls), metadata=metadata)


def run_loop(
    llm: ChatModel,
    messages: Sequence[ChatMessage],
    tools: Sequence[FunctionTool],
    *,
    max_iterations: int,
    on_step: Callable[[list[ChatMessage]], None] | None = None,
) -> LoopResult:
    """Call ``llm`` with ``messages`` and the tools' declarations; run the tools it calls
    (one after another, in its order), send their results back, and repeat until it answers
    without calling a tool or ``max_iterations`` model calls were made.

    ``on_step`` gets each step as it is made (an AI message with its results, or the final
    answer), for a memory to store it. An unknown tool name is answered with an error result.

    Raises:
        LLMError: a model call failed (``on_step`` has had the steps made before).
    """
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools] or None
    sent = list(messages)
    result = LoopResult()
    while result.iterations < max_iterations:
        response: ChatResponse = llm.invoke(sent, tools=schemas)
        result.iterations += 1
        if response.usage is not None:
            result.usage = result.usage + response.usage
        result.finish_reason = response.finish_reason
        ai = storable_reply(response.message)
        if not ai.tool_calls:
            result.final = ai
            result.added.append(ai)
            if on_step is not None:
                on_step([ai])
            break
        step = [ai]
        for call in ai.tool_calls:
            found = by_name.get(call.name)
            if found is None:
                text, error = f"Error: unknown tool {call.name!r}; available: {', '.join(by_name)}", True
            else:
                text, error = found.run(call.arguments)
            # a tool's text is stored whatever it holds (a NUL character, a lone surrogate)
            text = storable_text(text, max_chars=app_settings().MAX_MESSAGE_CHARS)
            result.calls.append((call, text, error))
            step.append(ChatMessage.tool(text, tool_call_id=call.id, name=call.name))
        sent.extend(step)
        result.added.extend(step)
        if on_step is not None:
            on_step(step)
    return result


def model_from_string(spec: str | ChatModel) -> ChatModel:
    """The ``ChatModel`` for agentspan's ``"provider/model"`` strings: ``"openai/gpt-4o"``
    is ``OpenAIChatModel(model="gpt-4o")`` (``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` read
    as the OpenAI SDK reads them), ``"anthropic/claude-..."`` is ``AnthropicChatModel``
    (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``). A ``ChatModel`` passes unchanged.

    Raises:
        ValueError: no ``provider/`` prefix, or a provider other than those two.
    """
    if not isinstance(spec, str):
        return spec
    provider, _, name = spec.partition("/")
    if not name:
        raise ValueError(f"a model is 'provider/name' (e.g. 'openai/gpt-4o'), not {spec!r}")
    if provider == "openai":
        from agentmemory.llm.openai import OpenAIChatModel

        return OpenAIChatModel(model=name, base_url=os.environ.get("OPENAI_BASE_URL") or None)
    if provider == "anthropic":
        from agentmemory.llm.anthropic import AnthropicChatModel

        return AnthropicChatModel(model=name, base_url=os.environ.get("ANTHROPIC_BASE_URL") or None)
    raise ValueError(
        f"model provider {provider!r} is not supported here; use 'openai/...' or 'anthropic/...'"
    )


def last_human_text(messages: Sequence[ChatMessage]) -> str:
    """The text of the newest human message ("" when there is none)."""
    for message in reversed(messages):
        if message.role is Role.HUMAN:
            return message.text
    return ""
