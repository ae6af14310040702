"""``StoredJSONField``: the JSON column of agentmemory's models, whose reads never fail on a
number (``agentmemory.messages.StoredJSONDecoder``)."""

from __future__ import annotations

from typing import Any

from django.db import models

from agentmemory.messages import StoredJSONDecoder


class StoredJSONField(models.JSONField):  # type: ignore[type-arg]
    """A ``JSONField`` that decodes with ``StoredJSONDecoder`` unless given another decoder:
    a number no Python value holds (``1e400``, an integer of more than 4,300 digits, SQLite's
    ``NaN``), which only a row written by hand holds, is read as its text instead of failing
    every read of the row (a 500 from the API, an admin page, an export, recall). Stored as a
    ``JSONField`` is (the same column type on every database)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("decoder", StoredJSONDecoder)
        super().__init__(*args, **kwargs)
