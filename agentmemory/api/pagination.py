"""Cursor (keyset) pagination for the API: no ``COUNT(*)``, stable under concurrent appends."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from datetime import UTC
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.utils import encoders

from agentmemory.conf import app_settings

_INTEGER = re.compile(r"-?\d{1,18}")
_WHOLE = re.compile(r"[0-9]+")
#: the keys of the query string DRF encodes in a cursor: offset, reverse, position
_CURSOR_KEYS = frozenset({"o", "r", "p"})


def json_size(item: Any) -> int:
    """Bytes of ``item`` as DRF's JSON renderer writes it by default (compact, UTF-8)."""
    text = json.dumps(item, cls=encoders.JSONEncoder, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def response_budget(request: Request | None = None) -> int:
    """Bytes the items of one answer may take: ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` less
    room for the answer's own keys and links (a page's ``next`` and ``previous`` URLs)."""
    url = len(request.build_absolute_uri()) if request is not None else 0
    return app_settings().API_MAX_RESPONSE_BYTES - ENVELOPE_BYTES - 2 * (url + CURSOR_BYTES)


def items_that_fit(sizes: list[int], budget: int, *, from_end: bool = False) -> int:
    """How many of the items of ``sizes`` (bytes), from the start (or from the end), fit in
    ``budget`` bytes with the commas between them; at least one, so that paging goes on."""
    total = 0
    kept = 0
    for size in reversed(sizes) if from_end else sizes:
        total += size + (1 if kept else 0)
        if kept and total > budget:
            break
        kept += 1
    return kept


def bounded_hits(found: dict[str, list[Any]], budget: int) -> tuple[dict[str, list[Any]], dict[str, int]]:
    """The serialized hits of ``found`` (``{kind: hits, best first}``) that fit in
    ``budget`` bytes, taken best first of each kind in turn, so that neither kind crowds the
    other out; at least one. Returns ``(kept, {kind: how many were left out})``: a search of
    100 hits of 2 MB each answered 200 MB."""
    kinds = list(found)
    kept: dict[str, list[Any]] = {kind: [] for kind in kinds}
    total = 0
    taken = 0
    full = False
    for rank in range(max((len(hits) for hits in found.values()), default=0)):
        for kind in kinds:
            if full or rank >= len(found[kind]):
                continue
            size = json_size(found[kind][rank]) + 1
            if taken and total + size > budget:
                full = True
                continue
            kept[kind].append(found[kind][rank])
            total += size
            taken += 1
    return kept, {kind: len(found[kind]) - len(kept[kind]) for kind in kinds}


#: bytes kept for an answer's keys and brackets beside its items and links
ENVELOPE_BYTES = 1_024
#: bytes a cursor adds to a link beside the request's own URL
CURSOR_BYTES = 256


class CheckedCursorPagination(CursorPagination):
    """A cursor pagination that refuses a crafted cursor (404 "Invalid cursor", as DRF does
    for an undecodable one) instead of passing its position to the database: a position must
    be an integer of at most 18 digits for integer orderings, a date and time for ``created_at``
    (with its UTC offset when ``USE_TZ`` is on).

    A page is also bounded in bytes (``paginate_bounded``): it holds as many items as fit in
    ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, at most ``page_size``, and at least one."""

    #: a page size set for one request by ``paginate_bounded``
    _bounded_size: int | None = None

    def paginate_bounded(
        self, queryset: Any, request: Request, view: Any, serialize: Callable[[list[Any]], list[Any]]
    ) -> list[Any]:
        """The serialized items of the requested page, as many as fit in the byte bound.

        The page is read and serialized at ``page_size``; when its items are over the bound,
        it is read again at the number that fits (counted from the cursor's side: from the
        end when paging backwards), so that DRF makes the links of that smaller page and no
        item is skipped. Messages of 2 MB made a page of 50 take 99.5 MB.
        """
        rows = self.paginate_queryset(queryset, request, view) or []
        data = list(serialize(rows))
        backwards = bool(self.cursor is not None and self.cursor.reverse)
        sizes = [json_size(item) for item in data]
        keep = items_that_fit(sizes, response_budget(request), from_end=backwards)
        if keep >= len(data):
            return data
        self._bounded_size = keep
        try:
            rows = self.paginate_queryset(queryset, request, view) or []
        finally:
            self._bounded_size = None
        return list(serialize(rows))

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        paginated: dict[str, Any] = super().get_paginated_response_schema(schema)
        paginated["properties"]["results"] = {
            **schema,
            "description": (
                "At most page_size items, and as many as fit in AGENTMEMORY['API_MAX_RESPONSE_BYTES'] "
                f"({app_settings().API_MAX_RESPONSE_BYTES:,} bytes) for the whole answer; at least "
                "one (an item larger than that alone is sent alone). Follow next for the rest."
            ),
        }
        return paginated

    def get_page_size(self, request: Request) -> int:
        """``?page_size=``: a whole number of at least 1 (values over ``max_page_size`` are
        cut to it); absent, the default.

        Raises:
            ValidationError: any other value, a 400 naming the parameter (DRF's default
                silently falls back to the default size).
        """
        if self._bounded_size is not None:
            return self._bounded_size
        name = self.page_size_query_param
        raw = request.query_params.get(name) if name else None
        if raw is None:
            return int(self.page_size)
        if not _WHOLE.fullmatch(raw) or not raw.strip("0"):
            raise ValidationError({name: ["Must be a whole number of at least 1."]})
        ceiling = self.max_page_size or int(self.page_size)
        # more digits than any ceiling: no need to make a number of them
        return ceiling if len(raw.lstrip("0")) > 18 else min(int(raw), ceiling)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
                parameter["description"] = (
                    f"Results per page (default {self.page_size}; more than {self.max_page_size} "
                    f"gives {self.max_page_size})."
                )
        return parameters

    def decode_cursor(self, request: Request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None and not self.made_by_the_api(encoded):
            raise NotFound(self.invalid_cursor_message)
        cursor = super().decode_cursor(request)
        if cursor is None or cursor.position is None:
            return cursor
        field = self.ordering[0].lstrip("-") if isinstance(self.ordering, tuple | list) else ""
        if not self.position_is_valid(field, cursor.position):
            raise NotFound(self.invalid_cursor_message)
        if field.endswith("_at") and settings.USE_TZ:
            # compared as its instant in UTC: Python reads offsets up to 23:59, PostgreSQL
            # refuses one past 15:59 ("time zone displacement out of range", a 500)
            moment = parse_datetime(cursor.position)
            if moment is not None:
                cursor = cursor._replace(position=moment.astimezone(UTC).isoformat())
        return cursor

    @staticmethod
    def made_by_the_api(encoded: str) -> bool:
        """Whether ``encoded`` can be a cursor this pagination wrote: strict base64 (DRF's
        decoder drops the characters outside base64, so ``!!!!`` decoded to nothing, the
        first page) of a query string of the keys DRF writes (``o``, ``r``, ``p``), each at
        most once."""
        try:
            text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        except (ValueError, UnicodeError):
            return False
        return set(tokens) <= _CURSOR_KEYS and all(len(values) == 1 for values in tokens.values())

    @staticmethod
    def position_is_valid(field: str, position: Any) -> bool:
        if not isinstance(position, str) or "\x00" in position:
            return False
        if field.endswith("_at"):
            try:
                parsed = parse_datetime(position)
                if parsed is not None and parsed.tzinfo is not None:
                    # the database compares it in UTC: year 1 at +14:00 or 9999-12-31 at
                    # -14:00 has no UTC time (OverflowError, a 500 before)
                    parsed.astimezone(UTC)
            except (ValueError, OverflowError):
                return False
            # The cursors this pagination makes carry the offset when time zones are on; a
            # naive position would be compared as local time (and warned about) instead.
            return parsed is not None and (parsed.tzinfo is not None) == settings.USE_TZ
        return bool(_INTEGER.fullmatch(position))


class ConversationCursorPagination(CheckedCursorPagination):
    """Conversations, most recently active (``updated_at``) first, then by ``id`` (newest
    first): conversations can share ``updated_at`` (an import, a bulk update), and PostgreSQL
    sorts tied rows in an order that changes with each page's ``LIMIT``; the unique last key
    keeps every page in one order, so each conversation is listed once.

    A page reads the owner's conversations through the ``owner`` index and sorts them (about
    6 ms for 300 conversations, 60 ms for 100,000 on PostgreSQL). No index holds
    ``updated_at``: every append moves it, and indexing it would cost every append a write
    into each index of the table (see ``Conversation.Meta``). A conversation that receives
    messages while a client pages through the list moves to the front: it can be missed on
    later pages or seen twice; page again from the start to see the new order.
    """

    ordering = ("-updated_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class MessageCursorPagination(CheckedCursorPagination):
    """Messages of one conversation in ``seq`` order (the only order; timestamps can tie or go backwards).

    ``seq`` is unique within a conversation, so the cursor is a plain keyset position on the
    ``(conversation, seq)`` index: a page costs one indexed range read whatever the length of
    the conversation, and appends never shift pages already read.
    """

    ordering = ("seq",)
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class SummaryCursorPagination(CheckedCursorPagination):
    """Summaries of one conversation, newest (highest ``through_seq``) first."""

    ordering = ("-through_seq",)
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class FactCursorPagination(CheckedCursorPagination):
    """Facts, newest first (the ``(owner, agent_key, namespace, -created_at)`` index), ties
    broken by id.

    The cursor holds a ``created_at`` and an offset among the facts sharing it; without a
    tie-breaker their order was the database's choice and changed between pages (PostgreSQL's
    top-N sort is not stable): facts stored with one clock value (an import) were skipped or
    listed twice.
    """

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
