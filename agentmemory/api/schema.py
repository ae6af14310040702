"""OpenAPI annotations of the API, with drf-spectacular optional.

The API runs on Django REST framework alone. When drf-spectacular is installed (the ``docs``
extra, or the example project), the names below are its own (``extend_schema``,
``OpenApiParameter``...) and ``AppAutoSchema`` documents every operation with a stable
operation id and the API's error answers. Without it they are inert stand-ins: the decorators
return what they decorate, and the views keep DRF's default schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "SPECTACULAR",
    "AppAutoSchema",
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

    OpenApiResponse = PolymorphicProxySerializer = _Inert  # type: ignore[misc,assignment]

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
        view declares none of its own for that status.
        """

        def get_operation_id(self) -> str:
            prefix = getattr(self.view, "operation_prefix", None)
            action = getattr(self.view, "action", None)
            if not prefix or not action:
                return str(super().get_operation_id())
            if getattr(self.view, "operation_single", False):
                return str(prefix)
            return f"{prefix}_{_ACTION_VERBS.get(action, action).rstrip('_')}"

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
            }
            if self.method in ("POST", "PUT", "PATCH"):
                errors["413"] = "The body is over DATA_UPLOAD_MAX_MEMORY_SIZE."
                errors["415"] = "Unsupported media type (send application/json)."
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
