"""``StoredJSONField``: the JSON column of agentmemory's models, whose reads never fail on a
number (``agentmemory.messages.StoredJSONDecoder``) or on a value of another shape than the
column's (``reader``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models

from agentmemory.messages import StoredJSONDecoder


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
