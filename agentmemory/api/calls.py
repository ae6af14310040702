"""Read-only endpoints of recorded model calls and their usage.

- ``GET conversations/{uuid}/model-calls/``: the conversation's calls, oldest first.
- ``GET conversations/{uuid}/model-calls/{call_uuid}/``: one call.
- ``GET conversations/{uuid}/model-calls/{call_uuid}/window/``: the messages a chat call
  sent, exactly as sent (``ModelCall.window()``, the provider adapter's changes applied and
  listed in ``provider_changes``), with the tool declarations.
- ``GET conversations/{uuid}/model-calls/usage/``: usage and cost of the conversation.
- ``GET usage/``: usage and cost of everything billed to the requesting user
  (``?since=`` / ``?until=``, ISO 8601).

Everything is scoped to the requesting user: another user's conversation or call is a 404.
"""

from __future__ import annotations

import uuid as uuid_lib
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils.dateparse import parse_datetime
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from agentmemory.api import serializers as s
from agentmemory.api.access import request_owner
from agentmemory.api.pagination import CheckedCursorPagination, response_budget
from agentmemory.api.schema import (
    OpenApiParameter,
    OpenApiResponse,
    OpenApiTypes,
    extend_schema,
)
from agentmemory.api.serializers.calls import (
    ModelCallSerializer,
    RecordedWindowSerializer,
    UsageSerializer,
    usage_data,
)
from agentmemory.api.views import (
    FORMAT_PARAMETER,
    MESSAGE_FORMAT_PARAMETER,
    AppAPIView,
    BoundedListMixin,
    _ConversationScoped,
    message_format,
)
from agentmemory.api.windows import bounded_record
from agentmemory.calls import WindowUnavailable, recorded_context_window, recorded_provider_changes
from agentmemory.conf import get_token_counter
from agentmemory.context import ContextWindow
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.tools import tools_in_format
from agentmemory.models import ModelCall, ModelCallKind
from agentmemory.usage import usage_totals

__all__ = ["ModelCallViewSet", "UsageView"]


class ModelCallPagination(CheckedCursorPagination):
    ordering = ("id",)
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


@extend_schema(tags=["model calls"])
class ModelCallViewSet(
    AppAPIView, _ConversationScoped, BoundedListMixin, mixins.RetrieveModelMixin, GenericViewSet
):
    """Recorded model calls of one conversation, oldest first."""

    pagination_class = ModelCallPagination
    operation_prefix = "model_calls"
    message_shape_actions = ("window",)
    throttle_scope = "agentmemory.conversations"
    serializer_class = ModelCallSerializer
    lookup_field = "uuid"
    lookup_value_regex = "[^/]+"

    def get_serializer_context(self) -> dict[str, Any]:
        # each call's answer within the byte bound (``ModelCallSerializer``)
        return {**super().get_serializer_context(), "response_budget": response_budget(self.request)}

    def get_queryset(self) -> QuerySet[ModelCall]:
        if getattr(self, "swagger_fake_view", False):
            return ModelCall.objects.none()
        return (
            ModelCall.objects.filter(conversation=self.get_conversation())
            .select_related("message", "summary")
            .order_by("id")
        )

    def get_object(self) -> ModelCall:
        try:
            call_uuid = uuid_lib.UUID(str(self.kwargs["uuid"]))
        except ValueError:
            raise Http404("No such model call: a call is named by its uuid, the id the list gives.") from None
        call = self.get_queryset().filter(uuid=call_uuid).first()
        if call is None:
            raise Http404("No such model call.")
        return call

    @extend_schema(
        parameters=[MESSAGE_FORMAT_PARAMETER, FORMAT_PARAMETER],
        responses={
            200: RecordedWindowSerializer,
            409: OpenApiResponse(
                s.ErrorSerializer,
                description="Not a chat call, or its messages are no longer stored.",
            ),
        },
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def window(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The messages a chat call sent, exactly as sent, with its accounting and the tool
        declarations, both in the shape ``message_format`` asks for (the tools as OpenAI's
        function tools for ``openai`` and ``langchain``, Anthropic's ``input_schema`` tools for
        ``anthropic``, ``{"name", "description", "parameters"}`` natively); a 409 when it cannot
        be rebuilt (not a chat call, a message deleted)."""
        call = self.get_object()
        shape = message_format(request)
        if call.kind != ModelCallKind.CHAT:
            return Response(
                {"error": "not_a_chat_call", "detail": f"a {call.kind} call sends no context window"},
                status=409,
            )
        try:
            window = recorded_context_window(call)
            tools = call.tools()
        except WindowUnavailable as exc:
            return Response({"error": "window_unavailable", "detail": str(exc)}, status=409)
        more = (call.window_changes or {}).get("provider_changes_more")
        context = {
            "call": call,
            "message_format": shape,
            "token_counter": get_token_counter(),
            # in the shape of the messages beside them, as the provider received them
            "tools": tools_in_format(tools, shape),
            "provider_changes_more": more if isinstance(more, int) and not isinstance(more, bool) else 0,
        }

        def serialize(shown: ContextWindow, left_out: int) -> dict[str, Any]:
            # the changes' positions are those of the messages this answer shows
            changes = recorded_provider_changes(call, shown.messages)
            return dict(
                RecordedWindowSerializer(
                    shown, context={**context, "left_out": left_out, "provider_changes": changes}
                ).data
            )

        try:
            data = bounded_record(window, serialize, budget=response_budget(request), shape=shape)
        except InvalidMessageError as exc:
            raise ValidationError(
                {"message_format": [f"This window cannot be shown as {shape} messages: {exc}"]}
            ) from None
        return Response(data)

    @extend_schema(responses=UsageSerializer)
    @action(detail=False, methods=["get"], pagination_class=None)
    def usage(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Usage and cost of the conversation's calls (chat, compaction, embedding)."""
        totals = usage_totals(conversation=self.get_conversation())
        return Response(usage_data(totals, response_budget(request)))


def _datetime_param(request: Request, name: str) -> datetime | None:
    """An ISO 8601 date and time from the query string, in UTC (a naive one is taken as UTC).

    Raises:
        ValidationError: not a date and time, or one that cannot be expressed in UTC.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = parse_datetime(raw)
        if value is not None:
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError):
        value = None
    if value is None:
        raise ValidationError({name: ["Give a date and time in ISO 8601, such as 2026-01-31T00:00:00Z."]})
    return value


@extend_schema(tags=["usage"])
class UsageView(AppAPIView, GenericAPIView):  # type: ignore[misc]
    """Usage and cost of every model call billed to the requesting user."""

    operation_prefix = "usage"
    operation_single = True
    throttle_scope = "agentmemory.conversations"
    serializer_class = UsageSerializer
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="Calls made at or after this time."),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="Calls made before this time."),
        ],
        responses={200: UsageSerializer},
    )
    def get(self, request: Request) -> Response:
        """Usage (tokens) and cost of the requesting user's calls: chat, compaction and
        embedding, from ``since`` (included) to ``until`` (excluded)."""
        owner = request_owner(request)
        since, until = _datetime_param(request, "since"), _datetime_param(request, "until")
        if since is not None and until is not None and until < since:
            raise ValidationError({"until": ["Must not be earlier than since."]})
        calls = ModelCall.objects.for_user(owner)
        totals = usage_totals(calls, since=since, until=until)
        return Response(usage_data(totals, response_budget(request)))
