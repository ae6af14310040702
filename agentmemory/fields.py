"""``StoredJSONField``: the JSON column of agentmemory's models, whose reads never fail on a
number (``agentmemory.messages.StoredJSONDecoder``)."""

from __future__ import annotations

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
    ``tests/test_migrations.py``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("decoder", StoredJSONDecoder)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        if kwargs.get("decoder") is StoredJSONDecoder:
            del kwargs["decoder"]
        return name, "django.db.models.JSONField", args, kwargs
