"""``StoredJSONField``: the JSON column of agentmemory's models, whose reads never fail on a
number (``agentmemory.messages.StoredJSONDecoder``) or on a value of another shape than the
column's (``reader``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models

from agentmemory.messages import StoredJSONDecoder, stored_object

__all__ = ["StoredJSONField", "stored_window_changes"]


class StoredJSONField(models.JSONField):  # type: ignore[type-arg]
    """A ``JSONField`` that decodes with ``StoredJSONDecoder`` unless given another decoder:
    a number no Python value holds (``1e400``, an integer of more than 4,300 digits), which
    only a row written by hand holds, is read as its text instead of failing every read of the
    row (a 500 from the API, an admin page, an export, recall).

    The column is a ``JSONField``'s on every database, and migrations see one: ``deconstruct``
    names ``django.db.models.JSONField`` and leaves the default decoder out, since how Python
    reads a value changes nothing in the schema (no migration, and none imports this module:
    ``tests/test_migrations.py``).

    ``reader``: applied to the value of every read of the whole column (a model instance,
    ``values()``, ``values_list()``, a raw read calling ``from_db_value`` without an
    expression; not to a key looked up in it), to give the shape every
    reader of the column takes whatever a row written by hand holds
    (``agentmemory.messages.stored_tool_calls``, ``stored_parts``, ``stored_object``). It
    changes no stored value and no schema either: ``deconstruct`` leaves it out."""

    def __init__(self, *args: Any, reader: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("decoder", StoredJSONDecoder)
        self.reader = reader
        super().__init__(*args, **kwargs)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        decoded = super().from_db_value(value, expression, connection)
        # the whole column (a raw read converting it passes no expression), not a key of it
        if self.reader is None or (
            expression is not None and getattr(expression, "target", None) is not self
        ):
            return decoded
        if value is None and self.null:
            return None  # SQL NULL: the column's "not set"
        return self.reader(decoded)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        if kwargs.get("decoder") is StoredJSONDecoder:
            del kwargs["decoder"]
        return name, "django.db.models.JSONField", args, kwargs


def _whole(value: Any) -> bool:
    return type(value) is int


def _whole_list(value: Any) -> list[int] | None:
    return [v for v in value if type(v) is int] if type(value) is list else None


def _seq_map(value: Any, kind: type) -> dict[str, Any] | None:
    """A recorded ``{seq as text: value}`` object, its entries keyed by a seq's digits with a
    value of ``kind`` only."""
    if type(value) is not dict:
        return None
    return {k: v for k, v in value.items() if k.isascii() and k.isdigit() and type(v) is kind}


def _memory_record(value: Any) -> dict[str, Any] | None:
    if type(value) is not dict:
        return None
    record = {k: v for k, v in value.items() if k not in ("digest", "tokens", "items", "sources")}
    if type(value.get("digest")) is str:
        record["digest"] = value["digest"]
    for key in ("tokens", "items"):
        if _whole(value.get(key)):
            record[key] = value[key]
    sources = value.get("sources")
    if type(sources) is dict:
        kept: dict[str, Any] = {}
        for key in ("conversations", "facts"):
            if (ids := _whole_list(sources.get(key))) is not None:
                kept[key] = ids
        if type(sources.get("messages")) is list:
            kept["messages"] = [
                pair
                for pair in sources["messages"]
                if type(pair) is list and len(pair) == 2 and all(type(v) is int for v in pair)
            ]
        record["sources"] = kept
    return record


def _knowledge_record(value: Any) -> dict[str, Any] | None:
    if type(value) is not dict:
        return None
    record = {k: v for k, v in value.items() if k not in ("facts", "chars")}
    if (ids := _whole_list(value.get("facts"))) is not None:
        record["facts"] = ids
    if _whole(value.get("chars")):
        record["chars"] = value["chars"]
    return record


#: how each key of a model call's ``window_changes`` is read (``agentmemory.calls``
#: writes them): a value read as ``None`` is left out
_WINDOW_CHANGES: dict[str, Callable[[Any], Any]] = {
    "left_out": _whole_list,
    "truncated": lambda value: _seq_map(value, int),
    "stubbed": lambda value: _seq_map(value, str),
    "placeholders": lambda value: (
        {k: v for k, v in value.items() if type(v) is int} if type(value) is dict else None
    ),
    "summary_truncated": lambda value: value if type(value) is bool else None,
    "memory": _memory_record,
    "knowledge": _knowledge_record,
    "provider_changes": lambda value: value if type(value) is list else None,
    "provider_changes_more": lambda value: value if _whole(value) else None,
}


def stored_window_changes(value: Any) -> dict[str, Any]:
    """A stored ``ModelCall.window_changes`` value in the shape ``agentmemory.calls`` writes
    it, whatever a row written by hand holds: a JSON object (``stored_object``) whose known
    keys hold values of their kind (seqs and counts whole numbers, ``truncated`` and
    ``stubbed`` keyed by a seq's digits, the memory and knowledge records' ids lists of whole
    numbers), the entries that are not left out; other keys as stored. A seq key of
    ``truncated`` that was no number failed the call's recorded window (a 500 from the API and
    the admin's window page), a memory block's ``tokens`` that was text the model call list.
    The value itself when nothing needs leaving out."""
    changes = stored_object(value)
    if not changes:
        return changes
    read = {key: reader(changes[key]) for key, reader in _WINDOW_CHANGES.items() if key in changes}
    if all(read[key] == changes[key] for key in read):
        return changes
    return {
        key: read.get(key, stored) for key, stored in changes.items() if read.get(key, stored) is not None
    }
