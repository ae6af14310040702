"""The API's error shape, its exception handler, and a JSON parser with bounds.

Every error the API answers is a JSON object ``{"error": code, "detail": text, ...}``:
``code`` is a short stable word (``invalid``, ``not_found``, ``parse_error``, ``too_large``,
``too_many_fields``, ``not_authenticated``, ``permission_denied``, ``method_not_allowed``,
``invalid_message``, ``context_budget_exceeded``, ``database_unavailable``,
``format_unavailable``...), ``detail`` a
sentence for people. Validation errors add ``fields``: ``{field name: [messages]}``, a nested
field named by its dotted path (``tool_calls.0.id``). The handler is used by agentmemory's
views only (``get_exception_handler``), so a host project's
``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` keeps governing its own views.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError, OperationalError, connections
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.parsers import FormParser, JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

__all__ = [
    "MAX_BODY_DEPTH",
    "MAX_ERROR_FIELDS",
    "MAX_ERROR_TEXT",
    "BadRequest",
    "BoundedJSONParser",
    "DatabaseUnavailable",
    "FormatUnavailable",
    "JSONAwareFormParser",
    "PayloadTooLarge",
    "bounded_error_body",
    "error_response",
    "exception_handler",
    "flatten_errors",
    "reject_oversized_body",
]

#: deepest nesting of objects and arrays accepted in a request body
MAX_BODY_DEPTH = 100
#: most characters of one text in an error answer (a message that quotes the value sent)
MAX_ERROR_TEXT = 1_000
#: most entries of an error answer's ``fields`` (a list of 100,000 wrong items has as many)
MAX_ERROR_FIELDS = 100


class DatabaseUnavailable(exceptions.APIException):
    """503: the database could not be reached or gave up on the statement (connection refused
    or lost, server shutting down, a standby being promoted, a timeout); the request may be
    retried after ``Retry-After`` seconds. Nothing the request tried to write was committed
    unless it had already been answered."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = "The database is unavailable; retry shortly."
    retry_after_seconds = 1


class FormatUnavailable(exceptions.APIException):
    """501 ``format_unavailable``: the request asks for a message format this server cannot
    read or write, because the optional package it needs is not installed here (the
    ``langchain`` format without langchain-core). The request is well formed and the fault is
    the server's setup, so not a 400; 501 is HTTP's "the server does not support the
    functionality required to fulfill the request" (RFC 9110, section 15.6.2). Nothing was
    stored."""

    status_code = status.HTTP_501_NOT_IMPLEMENTED
    default_code = "format_unavailable"
    default_detail = (
        "This server cannot read or write that message format: a package it needs is not installed."
    )


class PayloadTooLarge(exceptions.APIException):
    """The request body is over Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (bytes)."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def _body_limit() -> int | None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return limit if isinstance(limit, int) and limit > 0 else None


class BadRequest(exceptions.APIException):
    """400 for a request Django's own request handling refused as suspicious (its
    ``SuspiciousOperation``): more query parameters or form fields than
    ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (``too_many_fields``), more files than
    ``DATA_UPLOAD_MAX_NUMBER_FILES`` (``too_many_files``), a malformed multipart body
    (``bad_request``). Django answers these with its HTML "Bad Request (400)" page."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "The request was refused as malformed."
    default_code = "bad_request"


def _suspicious(exc: SuspiciousOperation, request: Any) -> BadRequest:
    """The API's 400 for ``exc``, logged to ``django.security.<its class>`` as Django logs it
    (a host's security logging keeps seeing these requests)."""
    logging.getLogger(f"django.security.{exc.__class__.__name__}").error(
        str(exc), extra={"status_code": 400, "request": getattr(request, "_request", request)}
    )
    if isinstance(exc, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return BadRequest(
            f"The request sends more than {limit:,} query parameters or form fields "
            "(DATA_UPLOAD_MAX_NUMBER_FIELDS).",
            code="too_many_fields",
        )
    if isinstance(exc, TooManyFilesSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
        return BadRequest(
            f"The request sends more than {limit:,} files (DATA_UPLOAD_MAX_NUMBER_FILES).",
            code="too_many_files",
        )
    return BadRequest(f"The request was refused as malformed: {str(exc)[:MAX_ERROR_TEXT]}")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is over {limit:,} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE).")


def reject_oversized_body(request: Request) -> None:
    """Refuse a body whose declared ``Content-Length`` is over ``DATA_UPLOAD_MAX_MEMORY_SIZE``
    before anything reads it (DRF reads the stream itself, bypassing Django's check).

    Raises:
        PayloadTooLarge: the declared length is over the limit.
    """
    limit = _body_limit()
    if limit is None:
        return
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise exceptions.ParseError("Content-Length is not a number.") from None
    if length > limit:
        raise _too_large(limit)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects/arrays deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with bounds: at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes read
    (413 above), nesting at most ``MAX_BODY_DEPTH`` levels, NaN and infinities refused (they
    are not JSON, RFC 8259), and a body too deep for Python's parser a 400, not a 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if stream is None:
            return None
        limit = _body_limit()
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise _too_large(limit)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(raw, encoding)
            data = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_BODY_DEPTH} levels.") from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        if _depth_exceeds(data, MAX_BODY_DEPTH):
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_BODY_DEPTH} levels.")
        return data


class JSONAwareFormParser(FormParser):
    """DRF's form parser, refusing a form whose field name is JSON: what ``curl -d '{...}'``
    sends without ``-H 'Content-Type: application/json'`` (curl's default content type is
    ``application/x-www-form-urlencoded``). The JSON would otherwise reach the serializer as
    a field named ``{"role": ...`` and be refused as an unknown key, which says nothing of
    the cause. No field of the API's forms starts with ``{`` or ``[``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if any(key.lstrip()[:1] in ("{", "[") for key in data):
            raise exceptions.ParseError(
                "The body is JSON sent as a form (Content-Type: application/x-www-form-urlencoded, "
                "curl's default for -d); send it with Content-Type: application/json."
            )
        return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def error_response(
    error: str, detail: str, status_code: int, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """A ``Response`` in the API's error shape."""
    return Response({"error": error, "detail": detail, **extra}, status=status_code, headers=headers)


def _printable(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    """``text`` as an error answer can carry it: lone surrogates (which a body may send as
    ``"\\ud800"`` and no UTF-8 encoder writes) as their escape, and at most ``limit``
    characters, cut with a note of how many were left out."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return _printable(value)
    if isinstance(value, dict):
        return {_printable(str(key)): _bounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(item) for item in value[:MAX_ERROR_FIELDS]]
    return value


def bounded_error_body(body: dict[str, Any]) -> dict[str, Any]:
    """An error answer bounded in size and writable as UTF-8, whatever the request sent: each
    text at most ``MAX_ERROR_TEXT`` characters (the ``detail`` four times that), ``fields``
    and each of its lists at most ``MAX_ERROR_FIELDS`` entries (the ``detail`` says how many
    more there were), lone surrogates written as their escapes. Validation messages quote
    what was sent (an unknown role, a field name), so without this a 200 kB body of 100,000
    wrong items answered 7 MB after 5 s, and a key ``"\\ud800"`` made the JSON renderer
    fail with a 500."""
    out = dict(body)
    fields = out.get("fields")
    left_out = 0
    if isinstance(fields, dict) and len(fields) > MAX_ERROR_FIELDS:
        left_out = len(fields) - MAX_ERROR_FIELDS
        out["fields"] = dict(list(fields.items())[:MAX_ERROR_FIELDS])
    for key, value in out.items():
        if key != "detail":
            out[key] = _bounded(value)
    detail = out.get("detail")
    if isinstance(detail, str):
        detail = _printable(detail, 4 * MAX_ERROR_TEXT)
        if left_out:
            detail += f" ({left_out:,} more fields with errors are left out.)"
        out["detail"] = detail
    return out


def _flatten(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [f"{key}: {text}" for key, value in detail.items() for text in _flatten(value)]
    if isinstance(detail, list):
        return [text for item in detail for text in _flatten(item)]
    return [str(detail)]


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation errors as ``{dotted field path: [messages]}``:
    ``{"tool_calls": {0: {"id": [...]}}}`` becomes ``{"tool_calls.0.id": [...]}`` (errors of
    the object itself, DRF's ``non_field_errors``, keep the path of the object)."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            path = f"{prefix}.{name}" if prefix and name else (prefix or name or "non_field_errors")
            for field, texts in flatten_errors(value, path).items():
                out.setdefault(field, []).extend(texts)
        return out
    if isinstance(detail, list) and detail and all(isinstance(item, dict | list) for item in detail):
        out = {}
        for position, item in enumerate(detail):
            path = f"{prefix}.{position}" if prefix else str(position)
            for field, texts in flatten_errors(item, path).items() if item else ():
                out.setdefault(field, []).extend(texts)
        return out
    texts = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(text) for text in texts]}


#: Django's text for a lookup that found nothing ("No Conversation matches the given query.")
_NO_MATCH = re.compile(r"^No (?P<model>.+) matches the given query\.$")


def _not_found_text(exc: Http404) -> str:
    """One wording for every 404 of the API: Django's ``get_object_or_404`` text ("No Fact
    matches the given query.") becomes the API's own ("No such fact.")."""
    text = str(exc.args[0]) if exc.args else ""
    match = _NO_MATCH.match(text)
    if match:
        return f"No such {match['model'].lower()}."
    return text or "Not found."


def _close_broken_connections() -> None:
    """Close the connections of this thread that a failed server left unusable, outside a
    transaction, so the next request connects again (to a promoted standby, say) even where no
    request signal closes them (threads, test clients)."""
    for connection in connections.all(initialized_only=True):
        if (
            connection.connection is not None
            and not connection.in_atomic_block
            and not connection.is_usable()
        ):
            connection.close()


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, answering in the API's error shape; also turns Django's
    ``RequestDataTooBig`` into a 413, its other ``SuspiciousOperation`` refusals of a request
    (too many fields or files, a malformed multipart body) into a 400 (``BadRequest``), a
    Django ``ValidationError`` into a 400 and a database
    that cannot be reached (``OperationalError``, ``InterfaceError``) into a 503
    ``database_unavailable`` with ``Retry-After``. Anything else unhandled stays a server
    error (returns ``None``), so real bugs are not hidden."""
    unavailable = isinstance(exc, (OperationalError, InterfaceError))
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(_not_found_text(exc))
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    elif isinstance(exc, RequestDataTooBig):
        exc = _too_large(_body_limit() or 0)
    elif isinstance(exc, SuspiciousOperation):
        exc = _suspicious(exc, context.get("request"))
    elif isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.messages)
    elif unavailable:
        _close_broken_connections()
        exc = DatabaseUnavailable()
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(data if isinstance(data, dict) else {"non_field_errors": data})
        body = {"error": "invalid", "detail": " ".join(_flatten(fields)), "fields": fields}
    else:
        detail = exc.detail
        code = getattr(detail, "code", None) or exc.default_code
        text = data.get("detail", detail) if isinstance(data, dict) else detail
        body = {"error": str(code), "detail": " ".join(_flatten(text))}
    response.data = body
    if unavailable:
        response["Retry-After"] = str(DatabaseUnavailable.retry_after_seconds)
    return response
