"""Rows of the window's read statements, decoded: the conversation and summary rows, the
``RowMeta`` tuples the packer works on, and ``ChatMessage`` objects made from raw rows.

A window is built for every model call and decodes every row it reads, so this module makes
its objects the quick way. Each shortcut is kept because it is measured to pay
(``python -m bench.rows`` prints each beside the plain way; per object, on a 2-core machine:
``ChatMessage`` 2.0 us against 13.4, ``ToolCall`` 5.6 against 12.3, ``RowMeta`` 0.7 against
1.4, ``metadata`` 1.0 against 13.7, a JSON column 3.5 against 6.0):

* ``_fast_init`` generates (with ``exec``, from the dataclass's own fields) a positional
  constructor for the frozen, slotted ``ChatMessage`` and ``ToolCall``: the dataclass's
  ``__init__`` sets each field through ``object.__setattr__`` (``tests/test_context_gaps.py``
  checks that the result equals the dataclass's own);
* ``_set_metadata`` writes the ``metadata`` slot of a message the reader has just made
  (not shared yet) rather than making it again with ``dataclasses.replace``;
* ``RowMeta`` tuples are made with ``tuple.__new__`` rather than the named tuple's
  generated ``__new__``;
* ``_loads`` decodes JSON text through ``JSONDecoder.raw_decode`` without ``json.loads``'s
  detection of encodings and whitespace.

Only ``agentmemory.models`` and ``agentmemory.messages`` are imported.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agentmemory.messages import (
    ChatMessage,
    ContentPart,
    Role,
    StoredJSONDecoder,
    ToolCall,
    stored_arguments,
    stored_parts,
    stored_tool_calls,
)
from agentmemory.models import pinned_end

#: the ``Message`` columns a ``RowMeta`` holds, in its order
_META_FIELDS = ("seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls")
_TOOL = Role.TOOL.value


class RowMeta(NamedTuple):
    """What the builder knows of a stored message before reading its content.

    A named tuple: one is made for every row of every window, and a tuple is made in one
    step where a frozen dataclass sets each field in turn. Rows are told apart by identity
    (``is``), never by value.
    """

    seq: int
    role: str
    token_count: int
    exchange_seq: int | None = None
    tool_call_id: str = ""
    tool_calls: Sequence[dict[str, Any]] = ()
    #: a stand-in result for a call still awaiting its own (placeholder mode); never stored,
    #: its ``seq`` is that of the AI message that made the call
    placeholder: bool = False
    name: str = ""

    @property
    def is_orphan(self) -> bool:
        return self.role == _TOOL and self.exchange_seq is None and not self.placeholder


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """The conversation fields the builder needs."""

    pk: int
    message_count: int
    human_message_count: int
    stored_tokens: int
    #: seq of the pinned system prompt (``Conversation.pinned_seq``; ``None``: none)
    pinned_seq: int | None
    #: seq of its last message (``Conversation.pinned_last_seq``; ``None``: none)
    pinned_last_seq: int | None
    #: seqs of the AI messages whose tool calls still await a result
    pending_exchanges: tuple[int, ...] = ()
    #: the seq of that AI message for each call still awaiting its result
    pending_call_seqs: tuple[int, ...] = ()
    #: ``Conversation.summary_id`` as stored (``None``: no current summary); it may name
    #: another conversation's summary where the row was written by hand
    summary_id: int | None = None

    @property
    def has_system_prompt(self) -> bool:
        """A stored system prompt is pinned (``Conversation.has_system_prompt``)."""
        return self.pinned_seq is not None

    @property
    def pinned_through(self) -> int:
        """``Conversation.pinned_through`` of this row (``pinned_end``)."""
        return pinned_end(self.pinned_seq, self.pinned_last_seq)


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """The current summary's fields the builder needs."""

    pk: int
    text: str
    through_seq: int
    token_count: int
    token_counter: str
    human_messages_covered: int


#: numbers no Python value holds are read as their text (``StoredJSONDecoder``): a stored
#: value never makes a window fail
_raw_decode = StoredJSONDecoder().raw_decode


def _loads(value: Any) -> Any:
    """A JSON column as the model field returns it: the raw cursor gives text (PostgreSQL's
    ``jsonb`` too, as Django configures psycopg), decoded here as ``JSONField.from_db_value``
    decodes it (with the fields' ``StoredJSONDecoder``), without its per-call
    lookups: this runs for the JSON columns of every row of every window.

    Text that is one JSON value from its first character to its last (what both databases
    return) goes through ``JSONDecoder.raw_decode``, the scanner ``json.loads`` ends in,
    without the encoding detection and whitespace matching around it (half the cost of a
    short array); anything else takes ``json.loads`` and gets the same value or error."""
    if type(value) is str:
        try:
            decoded, end = _raw_decode(value)
            if end == len(value):
                return decoded
        except json.JSONDecodeError:
            pass  # leading whitespace, or not JSON: ``json.loads`` decides
    if isinstance(value, str | bytes):
        try:
            return json.loads(value, cls=StoredJSONDecoder)
        except json.JSONDecodeError:
            return value  # what from_db_value returns for text that is not JSON
    return value


def _parts(value: Any) -> tuple[ContentPart, ...]:
    """A ``parts`` column as read (text, or decoded by the ORM) as content parts, whatever a
    row written by hand holds there (``stored_parts``)."""
    if value is None:
        return ()
    return tuple(ContentPart.from_dict(p) for p in stored_parts(_loads(value)) or ())


def _tool_calls(value: Any) -> Any:
    """A ``tool_calls`` column as read (text, or decoded by the ORM) as the list of stored
    calls, whatever a row written by hand holds there (``stored_tool_calls``)."""
    if not value or value == "[]":
        return ()
    return stored_tool_calls(_loads(value)) or ()


_ROLES = {role.value: role for role in Role}


def _fast_init(cls: Any, names: tuple[str, ...]) -> Any:
    """A constructor of the frozen, slotted dataclass ``cls`` taking ``names`` positionally,
    the other fields at their defaults, equal to ``cls(**dict(zip(names, values)))``
    (``tests/test_context_gaps.py`` checks it); rows are built for every message of every
    window, and this costs half of the generated ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__``. Here the fields are
    stored as plain attributes on an instance of a twin class, which has the same slots and
    no ``__setattr__`` of its own, and the instance then becomes a ``cls``: Python allows
    assigning ``__class__`` between classes whose instances have the same layout (the same
    slots, in the same order, on the same base). The object is a ``cls`` before it is
    returned, frozen like any other."""
    if cls.__bases__ != (object,) or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass without bases")
    fields = dataclasses.fields(cls)
    known = {f.name for f in fields}
    if not set(names) <= known:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(set(names) - known)}")
    twin = type(f"_{cls.__name__}Fields", (), {"__slots__": cls.__slots__})
    env: dict[str, Any] = {"new": object.__new__, "twin": twin, "cls": cls}
    args = [f"a{i}" for i in range(len(names))]
    lines = [f"def make({', '.join(args)}):", "    obj = new(twin)"]
    lines += [f"    obj.{name} = a{i}" for i, name in enumerate(names)]
    for i, f in enumerate(f for f in fields if f.name not in names):
        if f.default_factory is not dataclasses.MISSING:
            env[f"d{i}"] = f.default_factory
            lines.append(f"    obj.{f.name} = d{i}()")
        else:
            env[f"d{i}"] = f.default
            lines.append(f"    obj.{f.name} = d{i}")
    lines += ["    obj.__class__ = cls", "    return obj"]
    exec("\n".join(lines), env)  # generated from the dataclass's own fields
    make = env["make"]
    return make


_tuple_new = tuple.__new__


def _new_row(
    seq: int, role: str, token_count: int, exchange_seq: int | None, tool_call_id: str, tool_calls: Any
) -> RowMeta:
    """``RowMeta(seq, role, token_count, exchange_seq, tool_call_id, tool_calls)`` without
    the named tuple's generated ``__new__`` (the reader inlines the same call)."""
    return _tuple_new(RowMeta, (seq, role, token_count, exchange_seq, tool_call_id, tool_calls, False, ""))


_new_chat = _fast_init(
    ChatMessage,
    ("role", "content", "tool_calls", "tool_call_id", "name", "seq", "id", "token_count", "parts"),
)


_new_call = _fast_init(ToolCall, ("id", "name", "arguments"))


def _call_objects(calls: Any) -> tuple[ToolCall, ...]:
    """``tuple(ToolCall.from_stored(c) for c in calls)`` for calls just decoded from a row:
    their ``arguments`` objects are fresh and kept rather than copied (a call stored around
    validation, with arguments that are not a JSON object, is converted as ``from_stored``
    converts it: ``stored_arguments``)."""
    return tuple(
        [
            _new_call(c["id"], c["name"], a if type(a := c.get("arguments")) is dict else stored_arguments(a))
            for c in calls
        ]
    )


#: sets the ``metadata`` slot of a ``ChatMessage`` the reader has just made (not yet shared)
_set_metadata: Any = getattr(ChatMessage, "metadata").__set__  # noqa: B009 - the slot, not the field


def _thinking(raw: Any) -> dict[str, Any] | None:
    """The ``metadata`` a window message of an ``ai`` row carries, from the thinking subtree
    the statement read (``_thinking_expression``; the caller skips NULL, so a row without
    thinking costs no decoding): ``{"thinking": blocks}``, the blocks kept by the Anthropic
    converter, which go back with the turn that made them (``to_anthropic``); ``None`` when
    they are empty. The rest of the metadata (model, usage, provider payload) is never sent
    and never read here."""
    thinking = _loads(raw)
    return {"thinking": thinking} if thinking else None


def _chat(
    pk: int,
    seq: int,
    role: str,
    content: str | None,
    tool_calls: Any,
    tool_call_id: str,
    name: str,
    tokens: int,
    parts: tuple[ContentPart, ...] = (),
) -> ChatMessage:
    return _new_chat(  # type: ignore[no-any-return]
        _ROLES[role],
        content,
        _call_objects(tool_calls) if tool_calls else (),
        tool_call_id,
        name,
        seq,
        pk,
        tokens,
        parts,
    )
