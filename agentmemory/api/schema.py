"""OpenAPI annotations of the API, with drf-spectacular optional.

The API runs on Django REST framework alone. When drf-spectacular is installed (the ``docs``
extra, or the example project), the names below are its own (``extend_schema``,
``OpenApiParameter``...) and ``AppAutoSchema`` documents every operation with a stable
operation id and the API's error answers. Without it they are inert stand-ins: the decorators
return what they decorate, and the views keep DRF's default schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "SPECTACULAR",
    "AppAutoSchema",
    "OpenApiExample",
    "OpenApiParameter",
    "OpenApiResponse",
    "OpenApiTypes",
    "PolymorphicProxySerializer",
    "extend_schema",
    "extend_schema_field",
    "extend_schema_view",
    "inline_serializer",
    "view_schema",
]

try:
    from drf_spectacular.openapi import AutoSchema as _AutoSchema
    from drf_spectacular.types import OpenApiTypes
    from drf_spectacular.utils import (
        OpenApiExample,
        OpenApiParameter,
        OpenApiResponse,
        PolymorphicProxySerializer,
        extend_schema,
        extend_schema_field,
        extend_schema_view,
        inline_serializer,
    )

    SPECTACULAR = True
except ImportError:  # pragma: no cover - exercised by a test in a child process
    SPECTACULAR = False

    def _identity_decorator(*_args: Any, **_kwargs: Any) -> Callable[[Any], Any]:
        def decorate(target: Any) -> Any:
            return target

        return decorate

    extend_schema = extend_schema_view = extend_schema_field = _identity_decorator  # type: ignore[assignment]

    class _Inert:
        """Keeps the annotation's arguments and does nothing with them."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs

    class OpenApiParameter(_Inert):  # type: ignore[no-redef]
        QUERY = "query"
        PATH = "path"

    OpenApiResponse = PolymorphicProxySerializer = OpenApiExample = _Inert  # type: ignore[misc,assignment]

    def inline_serializer(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        return _Inert(*args, **kwargs)

    class OpenApiTypes:  # type: ignore[no-redef]
        STR = INT = BOOL = OBJECT = FLOAT = UUID = DATETIME = None


#: operation ids of the generic actions; a view's own actions use their name
_ACTION_VERBS = {
    "list": "list",
    "create": "create",
    "retrieve": "retrieve",
    "partial_update": "partial_update",
    "update": "update",
    "destroy": "destroy",
}


if SPECTACULAR:

    class AppAutoSchema(_AutoSchema):
        """drf-spectacular's schema with stable operation ids and the API's error answers.

        Operation ids are ``<operation_prefix>_<action>`` (``conversations_list``,
        ``messages_create``, ``facts_partial_update``, ``search``): they name the methods of
        generated clients, whatever path the host mounts the API under. Every operation gets
        the error answers it can give (the API's error shape, ``ErrorSerializer``) where the
        view declares none of its own for that status; those taking ``message_format`` a 501
        (``FormatUnavailable``).
        """

        def get_operation_id(self) -> str:
            prefix = getattr(self.view, "operation_prefix", None)
            if prefix and getattr(self.view, "operation_single", False):
                # a view of one operation (search, usage): no action, and it needs no verb
                return str(prefix)
            action = getattr(self.view, "action", None)
            if not prefix or not action:
                return str(super().get_operation_id())
            return f"{prefix}_{_ACTION_VERBS.get(action, action).rstrip('_')}"

        def map_parsers(self) -> list[Any]:
            # Request bodies are JSON: the form parsers serve DRF's browsable API only, and
            # a form cannot say null, nested objects or lists the way the serializers need.
            return ["application/json"]

        def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]:
            """The serializer's object schema, plus what its own validation enforces beyond
            its fields: ``additionalProperties: false`` for a serializer that refuses unknown
            keys (``strict_input``) and the JSON Schema of its cross-field rules
            (``schema_extra``, e.g. ``anyOf`` of required fields)."""
            result: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
            if direction == "request":
                if getattr(serializer, "strict_input", False):
                    result["additionalProperties"] = False
                extra = getattr(serializer, "schema_extra", None)
                if extra:
                    result.update(extra)
            return result

        def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False) -> Any:
            schema = super()._map_serializer_field(field, direction, bypass_extensions)
            extra = getattr(field, "schema_extra", None)
            if direction == "request" and extra and isinstance(schema, dict):
                schema = {**schema, **extra}
            return schema

        def _get_request_body(self, direction: str = "request") -> Any:
            # A view names the actions whose body is required (an empty body is no message
            # and no document); drf-spectacular cannot tell it from the serializer.
            body = super()._get_request_body(direction)
            action = getattr(self.view, "action", None)
            if isinstance(body, dict) and action in getattr(self.view, "body_required_actions", ()):
                body["required"] = True
            return body

        def _get_parameters(self) -> list[dict[str, Any]]:
            """The operation's parameters; a bound named ``x-maximum-setting`` in a parameter's
            schema becomes ``maximum``: that ``AGENTMEMORY`` setting's value now."""
            from agentmemory.conf import app_settings

            parameters: list[dict[str, Any]] = super()._get_parameters()
            for parameter in parameters:
                schema = parameter.get("schema")
                if isinstance(schema, dict) and "x-maximum-setting" in schema:
                    schema = dict(schema)
                    schema["maximum"] = getattr(app_settings(), schema.pop("x-maximum-setting"))
                    parameter["schema"] = schema
            return parameters

        def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
            # drf-spectacular makes a blank-allowing string with a pattern a oneOf of the
            # pattern and "": with a pattern that matches "" too, no value would be valid.
            pattern = schema.get("pattern")
            keep = pattern if isinstance(pattern, str) and re.search(pattern, "") else None
            if keep is not None:
                del schema["pattern"]
            super()._insert_field_validators(field, schema)
            if keep is not None:
                schema["pattern"] = keep

        def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
            from agentmemory.api.serializers import ErrorSerializer

            responses: dict[str, Any] = super()._get_response_bodies(direction)
            errors = {
                "400": "Invalid input, parameter or body (nothing stored).",
                "401": "Not authenticated.",
                "403": "Not allowed (or, with session authentication, not authenticated).",
                "404": "Not found for this user (or an invalid cursor).",
                "406": "No renderer for the Accept header or ?format= value.",
                "429": "Throttled (the host's throttle rates; Retry-After says when to retry).",
                "503": "The database is unavailable (database_unavailable; Retry-After says when to retry).",
            }
            if self.method in ("POST", "PUT", "PATCH"):
                errors["413"] = "The body is over DATA_UPLOAD_MAX_MEMORY_SIZE."
                errors["415"] = "Unsupported media type (send application/json)."
            if any(getattr(p, "name", None) == "message_format" for p in self.get_override_parameters()):
                errors["501"] = (
                    "A message_format this server cannot read or write: the optional package it "
                    "needs is not installed here (format_unavailable: langchain without "
                    "langchain-core). Nothing stored."
                )
            for code, description in errors.items():
                if code not in responses:
                    responses[code] = self._get_response_for_code(
                        OpenApiResponse(ErrorSerializer, description=description), code, direction=direction
                    )
            return responses

else:  # pragma: no cover - exercised by a test in a child process
    AppAutoSchema = None  # type: ignore[assignment,misc]


def view_schema() -> Any:
    """The ``schema`` attribute of the API's views: ``AppAutoSchema()`` with drf-spectacular,
    DRF's default schema without it."""
    if AppAutoSchema is not None:
        return AppAutoSchema()
    from rest_framework.schemas import DefaultSchema

    return DefaultSchema()
