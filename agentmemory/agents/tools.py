"""Tools as plain Python functions: the ``@tool`` decorator, JSON Schema from type hints and
docstrings, argument checking, and execution that turns every failure into a readable result.

The schema of each parameter and the checking and conversion of the model's arguments are
pydantic's (``TypeAdapter``, strict, on the arguments as JSON); descriptions come from the
docstring, read by ``docstring_parser``.

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
import functools
import inspect
import json
import re
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import docstring_parser
from asgiref.sync import async_to_sync, sync_to_async
from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

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
_ARRAYS = (list, tuple, set, frozenset, Sequence, typing.Sequence)


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
            metadata ``{"latency_s": float, "error": bool}``, and ``"is_error": True`` when
            the call failed: stored with the result and sent back as Anthropic's
            ``tool_result`` ``is_error`` and LangChain's ``status="error"``).
        error: ``True`` when the tool failed, was unknown, or got invalid arguments.
        value: the tool's return value before conversion to text (``None`` on error).
    """

    message: ChatMessage
    error: bool = False
    value: Any = None


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into (description, {parameter: description}) with
    ``docstring_parser`` (Google, NumPy, reST and Epydoc styles).

    The description is the first paragraph, joined into one line. Parameter descriptions
    come from the parameters section (``Args:``, ``Arguments:``, ``Parameters:``...), their
    continuation lines joined; ``name (type): text`` is accepted.
    """
    if not (doc or "").strip():
        return "", {}
    parsed = docstring_parser.parse(inspect.cleandoc(doc or ""))
    first = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        # the first paragraph runs on past the first line
        first = f"{first}\n{_PARAGRAPH.split(parsed.long_description, maxsplit=1)[0]}"
    params = {
        param.arg_name.lstrip("*"): _one_line(param.description or "")
        for param in parsed.params
        if param.args and param.args[0] in ("param", "parameter", "arg", "argument", "key", "keyword")
    }
    return _one_line(first), params


_PARAGRAPH = re.compile(r"\n\s*\n")


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


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


# -- types a tool's parameter may have ---------------------------------------------------------
#
# pydantic makes the JSON Schema of a parameter and checks and converts the model's values
# (``TypeAdapter``); the functions below only say which annotations a tool takes (those with a
# JSON form both providers accept), find the type an error is about, and word pydantic's errors
# as the model has always been sent them.

_SCALARS = (str, int, float, bool, type(None))
_EMPTY = (inspect.Parameter.empty, Any, object)


def _is_union(origin: Any) -> bool:
    return origin in (Union, types.UnionType)


def _check_supported(hint: Any, where: str) -> None:
    """Raise ``TypeError`` naming ``where`` for an annotation without a JSON form here."""
    if hint in _EMPTY or hint in _SCALARS or hint in _ARRAYS or hint is dict:
        return
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return
    if origin is typing.Annotated:
        _check_supported(args[0], where)
        return
    if _is_union(origin) or origin in _ARRAYS or origin in (dict, Mapping, typing.Mapping):
        for arg in args:
            if arg is not Ellipsis:
                _check_supported(arg, where)
        return
    raise TypeError(
        f"{where}: type {hint!r} has no JSON Schema here; use str, int, float, bool, list[...], "
        "dict[str, ...], Literal[...], an Enum or Optional[...]"
    )


def _whole_float_to_int(value: Any) -> Any:
    """A JSON number with nothing after the point (``2.0``) as the ``int`` a parameter
    annotated ``int`` takes; models write whole numbers that way."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


_WholeNumber = Annotated[int, BeforeValidator(_whole_float_to_int)]


def _rewritten(hint: Any, leaf: Callable[[Any], Any]) -> Any:
    """``hint`` with each type inside it replaced by ``leaf(type)`` (``None``: kept, and
    its own arguments rewritten), through ``Annotated``, unions and generic containers."""
    replaced = leaf(hint)
    if replaced is not None:
        return replaced
    origin, args = get_origin(hint), get_args(hint)
    if not args or origin is Literal:
        return hint
    if origin is typing.Annotated:
        return Annotated[(_rewritten(args[0], leaf), *args[1:])]  # type: ignore[valid-type]
    if _is_union(origin):
        return Union[tuple(_rewritten(a, leaf) for a in args)]  # noqa: UP007
    converted = tuple(a if a is Ellipsis else _rewritten(a, leaf) for a in args)
    return origin[converted] if len(converted) > 1 else origin[converted[0]]


def _same_json_value(allowed: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A check that a value is one of a ``Literal``'s values as JSON tells them apart: ``true``
    is not ``1`` (Python's ``True == 1`` would let it through)."""

    def check(value: Any) -> Any:
        if not any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed):
            raise ValueError("not one of the allowed values")
        return value

    return check


def _validation_leaf(hint: Any) -> Any:
    if hint is int:
        # pydantic's strict mode refuses 2.0 for an int, as it refuses "2" and true, which stay
        # refused; models write whole numbers that way
        return _WholeNumber
    if get_origin(hint) is Literal:
        return Annotated[hint, BeforeValidator(_same_json_value(get_args(hint)))]
    return None


def _schema_leaf(hint: Any) -> Any:
    if get_origin(hint) is typing.Annotated:
        args = get_args(hint)
        notes = [a for a in args[1:] if isinstance(a, str)]
        inner = _rewritten(args[0], _schema_leaf)
        return Annotated[inner, Field(description=notes[0])] if notes else Annotated[(inner, *args[1:])]  # type: ignore[valid-type]
    return None


def _adapter(hint: Any) -> TypeAdapter[Any]:
    """A strict ``TypeAdapter`` of ``hint``, fed the arguments as JSON: a string is not a number
    nor a number a string, and JSON values become enum members, tuples and sets. Adapters are
    shared by the parameters of one type (building one takes milliseconds)."""
    if hint in _EMPTY:
        hint = Any
    try:
        return _cached_adapter(hint)
    except TypeError:  # a hint with unhashable metadata
        return _cached_adapter.__wrapped__(hint)


@functools.lru_cache(maxsize=512)
def _cached_adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(_rewritten(hint, _validation_leaf), config=ConfigDict(strict=True))


@functools.lru_cache(maxsize=512)
def _cached_schema(hint: Any) -> str:
    """pydantic's schema of ``hint``, normalised, as JSON text (a copy per caller)."""
    schema = TypeAdapter(_rewritten(hint, _schema_leaf)).json_schema()
    schema = _normalised(_inlined(schema, schema.pop("$defs", {})))
    if hint in _ARRAYS:  # a bare list: no items schema, as a bare dict has no value schema
        schema.pop("items", None)
    return json.dumps(schema)


#: keys of a schema, in the order the model is sent them
_KEY_ORDER = (
    "type",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "additionalProperties",
    "anyOf",
    "description",
    "default",
)


def _normalised(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema of a parameter in the form tools have always been declared with:
    no titles or ``uniqueItems``; ``const`` as a one-value ``enum`` with the values' type; an
    open ``additionalProperties`` left out; ``X | None`` as
    ``{"type": [X's type, "null"]}`` when X is one plain type; keys in ``_KEY_ORDER``."""
    schema = {k: v for k, v in schema.items() if k not in ("title", "uniqueItems")}
    if "const" in schema:
        schema["enum"] = [schema.pop("const")]
    if "enum" in schema:
        schema.pop("type", None)
        schema.update(_type_of_values(schema["enum"]))
    if "items" in schema:
        schema["items"] = _normalised(schema["items"])
    if "prefixItems" in schema:
        schema["prefixItems"] = [_normalised(s) for s in schema["prefixItems"]]
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        extra = _normalised(extra)
        schema["additionalProperties"] = extra
    if extra is True or extra == {}:
        del schema["additionalProperties"]
    if "anyOf" in schema:
        options = [_normalised(s) for s in schema["anyOf"]]
        plain = [s for s in options if s != {"type": "null"}]
        if len(plain) == 1 and len(options) == 2:
            inner = plain[0]
            if isinstance(inner.get("type"), str) and "enum" not in inner:
                schema.pop("anyOf")
                schema.update({**inner, "type": [inner["type"], "null"]})
            else:
                schema["anyOf"] = [inner, {"type": "null"}]
        else:
            schema["anyOf"] = plain + [s for s in options if s == {"type": "null"}]
    rank = {key: place for place, key in enumerate(_KEY_ORDER)}
    return {k: schema[k] for k in sorted(schema, key=lambda k: rank.get(k, len(rank)))}


def schema_for(hint: Any, where: str) -> dict[str, Any]:
    """JSON Schema for a type hint, made by pydantic (``TypeAdapter.json_schema``) and
    normalised (``_normalised``): str, int, float, bool, list/tuple/set/Sequence of X,
    dict[str, X], Literal, Enum, Optional/union, Annotated[X, "description"], Any.

    Raises:
        TypeError: an annotation that has no JSON Schema here (``where`` names it).
    """
    _check_supported(hint, where)
    if hint in _EMPTY:
        return {}
    try:
        text = _cached_schema(hint)
    except TypeError:  # a hint with unhashable metadata
        text = _cached_schema.__wrapped__(hint)
    schema: dict[str, Any] = json.loads(text)
    return schema


def _inlined(schema: Any, defs: Mapping[str, Any]) -> Any:
    """``schema`` with each ``{"$ref": "#/$defs/Name"}`` replaced by its definition (enums:
    their values are sent where they are used, as before)."""
    if isinstance(schema, list):
        return [_inlined(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _inlined(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    return {key: _inlined(value, defs) for key, value in schema.items()}


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


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "tuple_type": "an array",
    "set_type": "an array",
    "frozen_set_type": "an array",
    "dict_type": "an object",
    "none_required": "null",
}


def _explain(error: Mapping[str, Any], name: str, hint: Any, value: Any) -> str:
    """One of pydantic's errors about argument ``name`` (annotated ``hint``, sent as
    ``value``) in words the model can act on: ``hours[1] must be an integer, not "2"``."""
    path, loc = name, list(error["loc"])
    while True:
        while get_origin(hint) is typing.Annotated:
            hint = get_args(hint)[0]
        origin, args = get_origin(hint), get_args(hint)
        if _is_union(origin):
            options = [a for a in args if a is not type(None)]
            if len(options) > 1:
                return f"{path}: {value!r} matches no allowed type"
            hint = options[0]
            continue
        fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
        if fixed and isinstance(value, list) and len(value) != len(args):
            return f"{path} must have {len(args)} items"
        if not loc:
            break
        step = loc.pop(0)
        if origin in (dict, Mapping, typing.Mapping):
            path, hint, value = f"{path}.{step}", args[1] if len(args) == 2 else Any, value[step]
        elif isinstance(step, int):
            item = args[step] if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis) else args[0]
            path, hint, value = f"{path}[{step}]", item, list(value)[step]
        else:  # pragma: no cover - every location pydantic reports is handled above
            break
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        allowed = ", ".join(repr(m.value) for m in hint)
        return f"{path} must be one of {allowed}, not {value!r}"
    if get_origin(hint) is Literal:
        return f"{path} must be one of {', '.join(repr(a) for a in get_args(hint))}, not {value!r}"
    if error["type"] in _EXPECTED:
        return f"{path} must be {_EXPECTED[error['type']]}, not {json.dumps(value)}"
    return f"{path}: {error['msg']}"


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
        self._adapters: dict[str, TypeAdapter[Any]] = {}
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
            self._adapters[param.name] = _adapter(hint)
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
        checked = {}
        for name, value in arguments.items():
            try:
                checked[name] = self._adapters[name].validate_json(json.dumps(value))
            except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
                if not isinstance(exc, ValidationError):
                    raise _InvalidArguments(f"{name} is not a JSON value") from None
                raise _InvalidArguments(_explain(exc.errors()[0], name, self._hints[name], value)) from None
        return checked

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
    metadata: dict[str, Any] = {"latency_s": round(time.monotonic() - started, 6), "error": error}
    if error:
        # What the window carries and the converters send: Anthropic's tool_result
        # "is_error": true, LangChain's ToolMessage status="error" (Anthropic's tool-use guide:
        # a tool that failed is reported with is_error and its error message as the content).
        metadata["is_error"] = True
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


def prepared_call(call: ToolCall, tools: Mapping[str, Tool]) -> Tool | ToolOutcome:
    """The tool of ``tools`` (by name) that answers ``call``, or the error result of a call
    that cannot run: a name no tool has (``unknown_tool_outcome``), or arguments that were
    not a JSON object (``invalid_json_outcome``)."""
    found = tools.get(call.name)
    if found is None:
        return unknown_tool_outcome(call, list(tools))
    if RAW_ARGUMENTS_KEY in call.arguments:
        return invalid_json_outcome(call)
    return found


def run_call(call: ToolCall, tools: Mapping[str, Tool], injector: AgentInjector | None = None) -> ToolOutcome:
    """Answer ``call`` with the tool of ``tools`` it names (``Tool.run``: arguments checked
    against the signature and types); never raises ``Exception``: an unknown tool, arguments
    that are not a JSON object or do not fit, and the tool's own failure become an
    ``"Error: ..."`` result the model reads."""
    prepared = prepared_call(call, tools)
    return prepared if isinstance(prepared, ToolOutcome) else prepared.run(call, injector)


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
