"""Tools as plain Python functions: the ``@tool`` decorator, JSON Schema from type hints and
docstrings, argument checking, and execution that turns every failure into a readable result.

A tool is declared once::

    @tool(memory="stub")
    def lookup_order(order_id: str, include_items: bool = False) -> dict:
        \"\"\"Look up an order by its number.

        Args:
            order_id: the order number, like "A-1001".
            include_items: also list the order's items.
        \"\"\"

The model sees ``{"name", "description", "parameters"}`` (the OpenAI function declaration
shape, which the adapters translate for other providers). A parameter annotated
``ToolContext`` (or an unannotated parameter named ``context``) is filled by the agent with the
conversation, chat history, memory compactor and LLM, and is not shown to the model.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from asgiref.sync import async_to_sync, sync_to_async

from agentmemory.conf import app_settings
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage, ToolCall
from agentmemory.validation import safe_str, storable_text

if TYPE_CHECKING:
    from agentmemory.agents.injector import AgentInjector

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "MemoryPolicy",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "parse_docstring",
    "tool",
]

#: key under which a call's arguments are kept when they were not a JSON object (an adapter
#: may also use it for arguments that were not valid JSON); such a call gets an error result
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function name rule; Anthropic's is the same
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?|Attributes)\s*:\s*$"
)
_ARRAYS = (list, tuple, set, frozenset, Sequence, typing.Sequence)
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


class MemoryPolicy(enum.StrEnum):
    """What later context windows keep of a tool's exchanges (earlier turns only).

    - ``REPLAY``: the result is sent again as stored (default).
    - ``STUB``: the result is replaced by a short stub; the call/result pair stays valid.
    - ``OMIT``: the whole exchange (the AI message with the calls and all its results) is
      left out. An AI message that also calls tools of another policy falls back to ``STUB``
      for the omitted tool, so no exchange is ever split (providers reject a
      call without its result).

    Storage always keeps the full result; the policy only shapes what the model sees later.
    """

    REPLAY = "replay"
    STUB = "stub"
    OMIT = "omit"


class ToolError(Exception):
    """Raise from a tool to send the model a message without the exception type in front.

    The result text becomes ``"Error: <message>"``; other exceptions give
    ``"Error: <ExceptionType>: <message>"``.
    """


@dataclass(frozen=True)
class ToolContext:
    """What a tool can reach besides its arguments.

    Attributes:
        injector: the agent's ``AgentInjector`` for this turn.
        call: the ``ToolCall`` being answered (id, name, arguments as the model sent them).
    """

    injector: AgentInjector
    call: ToolCall

    @property
    def agent(self) -> Any:
        return self.injector.agent

    @property
    def conversation(self) -> Any:
        return self.injector.conversation

    @property
    def chat_history(self) -> Any:
        return self.injector.chat_history

    @property
    def memory_compactor(self) -> Any:
        return self.injector.memory_compactor

    @property
    def llm(self) -> Any:
        return self.injector.llm


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one call: the ``tool`` message to store and whether it is an error.

    Attributes:
        message: a ``tool`` ``ChatMessage`` (``tool_call_id``, ``name``, text content,
            metadata ``{"latency_s": float, "error": bool}``).
        error: ``True`` when the tool failed, was unknown, or got invalid arguments.
        value: the tool's return value before conversion to text (``None`` on error).
    """

    message: ChatMessage
    error: bool = False
    value: Any = None


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {parameter: description}).

    The description is the first paragraph, joined into one line. Parameter descriptions
    come from the ``Args:`` (or ``Arguments:``/``Parameters:``) section; continuation lines
    are joined; ``name (type): text`` is accepted.
    """
    text = inspect.cleandoc(doc or "")
    if not text:
        return "", {}
    lines = text.splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        first.append(line.strip())
    description = " ".join(first)

    params: dict[str, str] = {}
    in_args = False
    base_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        section = _SECTION.match(stripped) if not line.startswith((" ", "\t")) else None
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters", "Params")
            base_indent, current = None, None
            continue
        if not in_args:
            continue
        if not stripped:
            current = None
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:  # dedent ends the section
            in_args = False
            continue
        if base_indent is None:
            base_indent = indent
        match = _ARG_LINE.match(stripped)
        if indent <= base_indent and match:
            current = match.group(1)
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return description, params


def _is_context_param(param: inspect.Parameter, hint: Any) -> bool:
    if hint is not inspect.Parameter.empty and hint is not None:
        base = typing.get_args(hint)[0] if get_origin(hint) is typing.Annotated else hint
        return isinstance(base, type) and issubclass(base, ToolContext)
    return param.name == "context"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def schema_for(hint: Any, where: str) -> dict[str, Any]:
    """JSON Schema for a type hint: str, int, float, bool, list/tuple/set/Sequence of X,
    dict[str, X], Literal, Enum, Optional/union, Annotated[X, "description"], Any.

    Raises:
        TypeError: an annotation that has no JSON Schema here (``where`` names it).
    """
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return {}
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is typing.Annotated:
        annotated = schema_for(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            annotated["description"] = notes[0]
        return annotated
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        return {**_type_of_values(values), "enum": values}
    if origin is Literal:
        values = list(args)
        return {**_type_of_values(values), "enum": values}
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        nullable = len(options) < len(args)
        if len(options) == 1:
            inner = schema_for(options[0], where)
            if not nullable:
                return inner
            if isinstance(inner.get("type"), str) and "enum" not in inner:
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        schemas = [schema_for(a, where) for a in options]
        if nullable:
            schemas.append({"type": "null"})
        return {"anyOf": schemas}
    if hint in _ARRAYS or (origin in _ARRAYS and origin is not tuple):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = schema_for(args[0], where)
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for(args[0], where)}
        return {
            "type": "array",
            "prefixItems": [schema_for(a, where) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if hint is dict or origin in (dict, Mapping, typing.Mapping):
        schema = {"type": "object"}
        if len(args) == 2 and schema_for(args[1], where):
            schema["additionalProperties"] = schema_for(args[1], where)
        return schema
    raise TypeError(
        f"{where}: type {hint!r} has no JSON Schema here; use str, int, float, bool, list[...], "
        "dict[str, ...], Literal[...], an Enum or Optional[...]"
    )


def _type_of_values(values: list[Any]) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return {"type": "string"}
    if kinds == {bool}:
        return {"type": "boolean"}
    if kinds == {int}:
        return {"type": "integer"}
    if kinds <= {int, float}:
        return {"type": "number"}
    return {}


class _InvalidArguments(ValueError):
    pass


def _coerce(value: Any, hint: Any, path: str) -> Any:
    """Check ``value`` (decoded JSON) against ``hint``; convert to Enum members and tuples.

    Raises ``_InvalidArguments`` with a message the model can act on.
    """
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return value
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is typing.Annotated:
        return _coerce(value, args[0], path)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, path)
            except _InvalidArguments as exc:
                errors.append(str(exc))
        raise _InvalidArguments(
            errors[0] if len(errors) == 1 else f"{path}: {value!r} matches no allowed type"
        )
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in hint)
            raise _InvalidArguments(f"{path} must be one of {allowed}, not {value!r}") from None
    if origin is Literal:
        if value not in args or (isinstance(value, bool) and not any(a is value for a in args)):
            allowed = ", ".join(repr(a) for a in args)
            raise _InvalidArguments(f"{path} must be one of {allowed}, not {value!r}")
        return value
    expected = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    if hint in expected:
        ok = isinstance(value, hint) and not (hint is not bool and isinstance(value, bool))
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if hint is int and isinstance(value, float) and value.is_integer():
            return int(value)
        if not ok:
            raise _InvalidArguments(f"{path} must be {expected[hint]}, not {json.dumps(value)}")
        return value
    if hint in _ARRAYS or origin in _ARRAYS:
        if not isinstance(value, list):
            raise _InvalidArguments(f"{path} must be an array, not {json.dumps(value)}")
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise _InvalidArguments(f"{path} must have {len(args)} items")
            return tuple(
                _coerce(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))
            )
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        if hint is tuple or origin is tuple:
            return tuple(items)
        if hint in (set, frozenset) or origin in (set, frozenset):
            return (origin or hint)(items)
        return items
    if hint is dict or origin in (dict, Mapping, typing.Mapping):
        if not isinstance(value, dict):
            raise _InvalidArguments(f"{path} must be an object, not {json.dumps(value)}")
        if len(args) == 2:
            return {k: _coerce(v, args[1], f"{path}.{k}") for k, v in value.items()}
        return value
    return value


def _to_text(value: Any) -> str:
    """A tool's return value as the text of its result: strings (and string enums) as they
    are, everything else as JSON (``None`` becomes ``"null"``; sets become arrays, dataclasses
    objects, other objects their ``str``; a value JSON cannot hold, its ``str``; a value
    whose ``str`` fails, a placeholder naming its type). Never raises."""
    try:
        if isinstance(value, enum.Enum):
            value = value.value
        if isinstance(value, str):
            return value
        try:
            return json.dumps(value, ensure_ascii=False, default=_json_fallback)
        except (TypeError, ValueError):
            return safe_str(value)
    except Exception:
        return safe_str(value)


def _json_fallback(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    return str(value)  # dates, decimals, uuids, model instances: their text form


def error_text(exc: BaseException) -> str:
    """``"Error: ..."`` text for a failed call (``ToolError`` messages are sent as they are)."""
    if isinstance(exc, ToolError):
        return f"Error: {safe_str(exc)}"
    detail = safe_str(exc)
    return f"Error: {type(exc).__name__}: {detail}" if detail else f"Error: {type(exc).__name__}"


class Tool:
    """A function the model can call. Made by ``@tool``; calling it calls the function.

    Attributes:
        name: the name the model calls (``[A-Za-z0-9_-]{1,64}``).
        description: what the tool does (the docstring's first paragraph unless given).
        parameters: the JSON Schema object of the arguments.
        memory: the ``MemoryPolicy`` applied to its exchanges in later turns.
        func: the wrapped function; ``is_async`` when it is a coroutine function.
        context_param: the name of the ``ToolContext`` parameter, if any.

    Raises (at declaration):
        TypeError: a parameter type without a JSON Schema, ``*args``/``**kwargs``, or a
            name the providers refuse.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        memory: MemoryPolicy | str = MemoryPolicy.REPLAY,
    ) -> None:
        self.func = func
        self.name = name or func.__name__
        if not _NAME.match(self.name):
            raise TypeError(f"tool name {self.name!r} must match [A-Za-z0-9_-]{{1,64}} (provider rule)")
        self.memory = MemoryPolicy(memory)
        self.is_async = inspect.iscoroutinefunction(func)
        doc_description, arg_docs = parse_docstring(func.__doc__)
        self.description = description if description is not None else doc_description
        try:
            hints = typing.get_type_hints(func, include_extras=True)
        except Exception as exc:  # unresolvable forward references
            raise TypeError(f"tool {self.name!r}: cannot resolve type hints: {exc}") from exc
        self.context_param: str | None = None
        self._hints: dict[str, Any] = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in inspect.signature(func).parameters.values():
            hint = hints.get(param.name, inspect.Parameter.empty)
            if _is_context_param(param, hint):
                self.context_param = param.name
                continue
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args and **kwargs cannot be described to a model")
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(
                    f"tool {self.name!r}: positional-only parameter {param.name!r} is not supported"
                )
            schema = schema_for(hint, f"tool {self.name!r}, parameter {param.name!r}")
            if param.name in arg_docs and "description" not in schema:
                schema["description"] = arg_docs[param.name]
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
            else:
                default = param.default.value if isinstance(param.default, enum.Enum) else param.default
                if default is not None and _jsonable(default):
                    schema["default"] = default
            properties[param.name] = schema
            self._hints[param.name] = hint
        self._required = required
        self.parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            self.parameters["required"] = required
        self.parameters["additionalProperties"] = False
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", self.name)
        self.__module__ = getattr(func, "__module__", __name__)
        self.__qualname__ = getattr(func, "__qualname__", self.name)
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<Tool {self.name} memory={self.memory.value}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The declaration sent to the model: ``{"name", "description", "parameters"}``."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def bind_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check the model's arguments against the signature and types.

        Raises:
            ValueError: a missing required argument, an unknown one, or a value of the wrong
                type; the message names the argument and is meant for the model.
        """
        if not isinstance(arguments, Mapping):
            raise _InvalidArguments(f"arguments must be a JSON object, not {type(arguments).__name__}")
        unknown = sorted(set(arguments) - set(self._hints))
        if unknown:
            raise _InvalidArguments(
                f"unknown argument(s) {', '.join(unknown)}; expected: {', '.join(self._hints) or 'none'}"
            )
        missing = [name for name in self._required if name not in arguments]
        if missing:
            raise _InvalidArguments(f"missing required argument(s): {', '.join(missing)}")
        return {name: _coerce(value, self._hints[name], name) for name, value in arguments.items()}

    def _kwargs(self, call: ToolCall, injector: AgentInjector | None) -> dict[str, Any]:
        kwargs = self.bind_arguments(call.arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = ToolContext(injector=injector, call=call)  # type: ignore[arg-type]
        return kwargs

    def run(self, call: ToolCall, injector: AgentInjector | None = None) -> ToolOutcome:
        """Execute one call synchronously; never raises ``Exception`` (errors become results).

        Async tools are run to completion with ``async_to_sync``.
        """
        started = time.monotonic()
        try:
            kwargs = self._kwargs(call, injector)
            value = async_to_sync(self.func)(**kwargs) if self.is_async else self.func(**kwargs)
        except _InvalidArguments as exc:
            return _outcome(call, f"Error: invalid arguments for {self.name}: {exc}", started, error=True)
        except Exception as exc:
            return _outcome(call, error_text(exc), started, error=True)
        return _outcome(call, _to_text(value), started, value=value)

    async def arun(self, call: ToolCall, injector: AgentInjector | None = None) -> ToolOutcome:
        """Execute one call in async code; never raises ``Exception``.

        Sync tools run through ``sync_to_async`` (Django's thread for sync code, so they
        may use the ORM; they run one at a time), async tools on the event loop.
        """
        started = time.monotonic()
        try:
            kwargs = self._kwargs(call, injector)
            value = await self.func(**kwargs) if self.is_async else await sync_to_async(self.func)(**kwargs)
        except _InvalidArguments as exc:
            return _outcome(call, f"Error: invalid arguments for {self.name}: {exc}", started, error=True)
        except Exception as exc:
            return _outcome(call, error_text(exc), started, error=True)
        return _outcome(call, _to_text(value), started, value=value)


def _outcome(
    call: ToolCall, text: str, started: float, *, error: bool = False, value: Any = None
) -> ToolOutcome:
    metadata = {"latency_s": round(time.monotonic() - started, 6), "error": error}
    # The result is stored whatever the tool returned: a NUL character or a lone surrogate
    # would be refused, and text over MAX_MESSAGE_CHARS is cut (the model is sent at most
    # MAX_TOOL_RESULT_TOKENS of it anyway).
    text = storable_text(text, max_chars=app_settings().MAX_MESSAGE_CHARS)
    message = ChatMessage.tool(text, tool_call_id=call.id, name=call.name, metadata=metadata)
    return ToolOutcome(message=message, error=error, value=value)


def unknown_tool_outcome(call: ToolCall, known: Sequence[str]) -> ToolOutcome:
    """The result for a call naming a tool the agent does not have."""
    names = ", ".join(known) or "none"
    return _outcome(
        call, f"Error: unknown tool {call.name!r}; available tools: {names}", time.monotonic(), error=True
    )


def invalid_json_outcome(call: ToolCall) -> ToolOutcome:
    """The result for a call whose arguments were not a JSON object (``RAW_ARGUMENTS_KEY``)."""
    raw = str(call.arguments.get(RAW_ARGUMENTS_KEY, ""))[:200]
    text = f"Error: the arguments of {call.name} were not a valid JSON object ({raw!r}); call it again"
    return _outcome(call, text, time.monotonic(), error=True)


def not_run_outcome(call: ToolCall, max_rounds: int) -> ToolOutcome:
    """The result for a call made after the turn's tool-round bound: not run."""
    text = (
        f"Error: not run: this turn reached its limit of {max_rounds} tool rounds; answer with what you know"
    )
    return _outcome(call, text, time.monotonic(), error=True)


@typing.overload
def tool(func: Callable[..., Any], /) -> Tool: ...


@typing.overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    memory: MemoryPolicy | str = MemoryPolicy.REPLAY,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    memory: MemoryPolicy | str = MemoryPolicy.REPLAY,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a function as a tool: ``@tool`` or ``@tool(name=..., description=..., memory="stub")``.

    Args:
        name: the name the model calls; defaults to the function name.
        description: defaults to the first paragraph of the docstring.
        memory: ``"replay"`` (default), ``"stub"`` or ``"omit"``: see ``MemoryPolicy``.

    Returns:
        A ``Tool`` (still callable like the function).
    """
    if func is not None:
        return Tool(func, name=name, description=description, memory=memory)

    def decorate(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, memory=memory)

    return decorate
