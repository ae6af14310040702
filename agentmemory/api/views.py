"""API views: thin viewsets over ``PersistentChatHistory`` and ``ContextWindowBuilder``.

Every queryset starts from ``Conversation.objects.for_user(request.user)``: another user's
conversation is a 404, never a 403, so its existence does not leak.
"""

from __future__ import annotations

import copy
import re
import uuid as uuid_lib
from types import SimpleNamespace
from typing import Any

from django.db import router, transaction
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from agentmemory.api import serializers as s
from agentmemory.api.errors import (
    AppAutoSchema,
    BoundedJSONParser,
    error_response,
    exception_handler,
    reject_oversized_body,
)
from agentmemory.api.pagination import (
    ConversationCursorPagination,
    MessageCursorPagination,
    SummaryCursorPagination,
)
from agentmemory.compaction import request_compaction
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.transfer import InvalidConversationData, export_conversation, import_conversation
from agentmemory.validation import text_problem

#: most messages one append request may carry
MAX_BATCH = 1000
#: Any path segment reaches the views, which answer an id that is not a UUID with the API's
#: JSON 404; a narrower pattern would leave such ids to the URL resolver's HTML page.
UUID_REGEX = "[^/]+"

FORMAT_PARAMETER = OpenApiParameter(
    "format",
    OpenApiTypes.STR,
    enum=list(s.MESSAGE_FORMATS),
    default=s.NATIVE,
    description="Message shape: agentmemory's native shape or OpenAI chat-completions messages.",
)


class MessageFormatNegotiation(DefaultContentNegotiation):
    """Content negotiation that leaves ``?format=native|openai`` to the view.

    DRF reads ``?format=`` as a renderer override (``URL_FORMAT_OVERRIDE``) and would answer
    404 for ``openai``; here those two values pick the message shape instead, and any other
    value (``json``, ``api``) still picks a renderer.
    """

    def select_renderer(self, request: Request, renderers: Any, format_suffix: str | None = None) -> Any:
        param = self.settings.URL_FORMAT_OVERRIDE
        if param and request.query_params.get(param) in s.MESSAGE_FORMATS:
            negotiator = copy.copy(self)
            negotiator.settings = SimpleNamespace(URL_FORMAT_OVERRIDE=None)
            return DefaultContentNegotiation.select_renderer(negotiator, request, renderers, format_suffix)
        return super().select_renderer(request, renderers, format_suffix)


def message_format(request: Request) -> str:
    value = request.query_params.get("format") or s.NATIVE
    if value not in s.MESSAGE_FORMATS:
        # Any other value was consumed by content negotiation as a renderer name.
        return s.NATIVE
    return value


#: largest integer accepted in query parameters (SQLite integers are 64-bit; budgets are far below)
MAX_QUERY_INT = 10**9
_DIGITS = re.compile(r"\d{1,18}")


def _positive_int_param(request: Request, name: str, *, default: int | None) -> int | None:
    """A whole-number query parameter: digits only (no sign, exponent, ``nan`` or ``inf``),
    at least 1 for ``max_tokens`` (0 for others), at most ``AGENTMEMORY["MAX_CONTEXT_TOKENS"]``
    for ``max_tokens`` and 10^9 for others.

    Raises:
        ValidationError: any other value (a 400 naming the parameter).
    """
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if not _DIGITS.fullmatch(raw):
        raise serializers.ValidationError({name: ["Must be a whole number."]})
    value = int(raw)
    minimum = 1 if name == "max_tokens" else 0
    if value < minimum:
        raise serializers.ValidationError({name: [f"Must be at least {minimum}."]})
    ceiling = app_settings().MAX_CONTEXT_TOKENS if name == "max_tokens" else MAX_QUERY_INT
    if value > ceiling:
        setting = ' (AGENTMEMORY["MAX_CONTEXT_TOKENS"])' if name == "max_tokens" else ""
        raise serializers.ValidationError({name: [f"At most {ceiling:,}{setting}."]})
    return value


def _text_param(request: Request, name: str) -> str | None:
    """A text query parameter that the database can compare (no NUL, no lone surrogate).

    Raises:
        ValidationError: the value cannot be stored or compared as text.
    """
    raw = request.query_params.get(name)
    if raw is not None and (problem := text_problem(raw)):
        raise serializers.ValidationError({name: [f"The value {problem}."]})
    return raw


def _conversation_uuid(value: Any) -> uuid_lib.UUID:
    """The URL's conversation id as a UUID; anything else is no conversation (404)."""
    try:
        return uuid_lib.UUID(str(value))
    except ValueError:
        raise Http404("No such conversation.") from None


class AppAPIView:
    """What every agentmemory view shares: the API's error shape (its own exception handler,
    so a host project's handler keeps its own views), a JSON parser with size and depth
    bounds, and a body-size check made before anything reads the body."""

    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]
    schema = AppAutoSchema()

    def get_exception_handler(self) -> Any:
        return exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        reject_oversized_body(request)
        super().initial(request, *args, **kwargs)  # type: ignore[misc]


def invalid_message_response(exc: InvalidMessageError) -> Response:
    return Response(
        {"error": "invalid_message", "detail": str(exc), "index": exc.index, "reason": exc.reason},
        status=status.HTTP_400_BAD_REQUEST,
    )


class _ConversationScoped:
    """Resolves the ``conversation_uuid`` URL kwarg among the requesting user's conversations."""

    kwargs: dict[str, Any]
    request: Request

    def get_conversation(self) -> Conversation:
        if not hasattr(self, "_conversation"):
            conversation = (
                Conversation.objects.for_user(self.request.user)
                .filter(uuid=_conversation_uuid(self.kwargs["conversation_uuid"]))
                .only("id", "uuid", "title")
                .first()
            )
            if conversation is None:
                raise Http404("No such conversation.")
            self._conversation = conversation
        return self._conversation


@extend_schema(tags=["conversations"])
@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("agent_key", OpenApiTypes.STR, description="Only this agent's conversations.")
        ]
    )
)
class ConversationViewSet(
    AppAPIView,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    GenericViewSet,
):
    """The requesting user's conversations, identified by their public ``uuid``."""

    permission_classes = [IsAuthenticated]
    pagination_class = ConversationCursorPagination
    content_negotiation_class = MessageFormatNegotiation
    lookup_field = "uuid"
    lookup_value_regex = UUID_REGEX
    # PUT would have to resend every field; PATCH edits title and metadata.
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_object(self) -> Conversation:
        _conversation_uuid(self.kwargs.get(self.lookup_field))
        return super().get_object()

    def get_queryset(self) -> QuerySet[Conversation]:
        qs = Conversation.objects.for_user(self.request.user)
        agent_key = _text_param(self.request, "agent_key")
        if self.action == "list" and agent_key is not None:
            qs = qs.for_agent(agent_key)
        if self.action == "retrieve":
            qs = qs.select_related("summary")
        return qs

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action == "retrieve":
            return s.ConversationDetailSerializer
        if self.action == "partial_update":
            return s.ConversationUpdateSerializer
        return s.ConversationSerializer

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        serializer.save(owner=self.request.user)

    def perform_destroy(self, instance: Conversation) -> None:
        # Messages and summaries go with it (CASCADE, under the conversation's row lock); a
        # compaction task enqueued earlier finds the conversation gone and stores nothing.
        with transaction.atomic(using=router.db_for_write(Conversation)):
            instance.delete()

    @extend_schema(
        parameters=[
            OpenApiParameter("max_tokens", OpenApiTypes.INT, description="Token budget (default: setting)."),
            OpenApiParameter("max_messages", OpenApiTypes.INT, description="Cap on history messages."),
            FORMAT_PARAMETER,
        ],
        responses={
            200: s.ContextWindowSerializer,
            422: OpenApiResponse(
                s.ContextBudgetErrorSerializer, description="The newest human message cannot fit."
            ),
        },
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def context(self, request: Request, uuid: str | None = None) -> Response:
        """The context window a model would be sent now: pinned system prompt, summary, the
        newest contiguous history that fits ``max_tokens``: within the budget, tool exchanges whole,
        starting on a human message."""
        conversation = self.get_object()
        max_tokens = _positive_int_param(
            request, "max_tokens", default=app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        )
        max_messages = _positive_int_param(request, "max_messages", default=None)
        counter = get_token_counter()
        try:
            window = ContextWindowBuilder(conversation, token_counter=counter).build(
                max_tokens, max_messages=max_messages
            )
        except ContextBudgetExceeded as exc:
            return Response(
                {
                    "error": "context_budget_exceeded",
                    "detail": str(exc),
                    "seq": exc.seq,
                    "tokens": exc.tokens,
                    "available": exc.available,
                    "max_tokens": max_tokens,
                },
                status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
        except ConversationNotFound:
            raise Http404("No such conversation.") from None
        except ValueError as exc:
            # The default budget itself can be over the ceiling (system check agentmemory.E020
            # says so at startup): the caller has to ask for less.
            raise serializers.ValidationError({"max_tokens": [str(exc)]}) from None
        data = s.ContextWindowSerializer(
            window, context={"message_format": message_format(request), "token_counter": counter}
        ).data
        return Response(data)

    @extend_schema(
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="The export document (version 1).")},
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def export(self, request: Request, uuid: str | None = None) -> Response:
        """The conversation as a JSON document that the import endpoint restores exactly:
        messages with seqs, tool calls, metadata and token counts, summaries with their spans,
        counters and pending tool calls (``agentmemory.transfer.export_conversation``)."""
        conversation = self.get_object()
        return Response(export_conversation(conversation))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            201: s.ConversationDetailSerializer,
            400: OpenApiResponse(s.ErrorSerializer, description="Refused document (`invalid_document`)."),
        },
    )
    @action(detail=False, methods=["post"], url_path="import", pagination_class=None)
    def import_(self, request: Request) -> Response:
        """Create a conversation owned by the requester from an export document, in the exact
        state it describes (nothing re-counted or trimmed), under a fresh uuid. A refused
        document writes nothing and answers 400 with ``path`` naming the offending part."""
        try:
            conversation = import_conversation(request.data, owner=request.user, new_uuid=True)
        except InvalidConversationData as exc:
            return error_response("invalid_document", str(exc), status.HTTP_400_BAD_REQUEST, path=exc.path)
        conversation = Conversation.objects.select_related("summary").get(pk=conversation.pk)
        return Response(s.ConversationDetailSerializer(conversation).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=inline_serializer(
            "CancelPendingToolCalls",
            {"reason": serializers.CharField(required=False, max_length=1000)},
        ),
        responses={200: s.MessageBatchSerializer, 400: s.InvalidMessageErrorSerializer},
    )
    @action(detail=True, methods=["post"], url_path="cancel-pending-tool-calls", pagination_class=None)
    def cancel_pending_tool_calls(self, request: Request, uuid: str | None = None) -> Response:
        """Answer every tool call still awaiting its result with ``"Error: <reason>"``, so a
        conversation whose client died between a call and its results can go on (strict
        validation refuses any other message until then). Returns the results stored."""
        conversation = self.get_object()
        body = request.data
        if not isinstance(body, dict):
            raise serializers.ValidationError({"non_field_errors": ["The body must be a JSON object."]})
        reason = body.get("reason", "the tool call was cancelled")
        if not isinstance(reason, str) or not reason or len(reason) > 1000:
            raise serializers.ValidationError({"reason": ["A text of 1 to 1000 characters."]})
        try:
            stored = PersistentChatHistory(conversation).cancel_pending_tool_calls(reason)
        except InvalidMessageError as exc:
            return invalid_message_response(exc)
        except ConversationNotFound:
            raise Http404("No such conversation.") from None
        rows = Message.objects.filter(conversation=conversation, seq__in=[m.seq for m in stored]).order_by(
            "seq"
        )
        return Response({"messages": s.MessageSerializer(rows, many=True).data})


@extend_schema(tags=["messages"])
class MessageViewSet(AppAPIView, _ConversationScoped, mixins.ListModelMixin, GenericViewSet):
    """Messages of one conversation, in ``seq`` order; appending goes through
    ``PersistentChatHistory`` (bad input refused with nothing stored, atomic batches, seq under a row
    lock)."""

    permission_classes = [IsAuthenticated]
    pagination_class = MessageCursorPagination
    content_negotiation_class = MessageFormatNegotiation
    serializer_class = s.MessageSerializer

    def get_queryset(self) -> QuerySet[Message]:
        if getattr(self, "swagger_fake_view", False):
            return Message.objects.none()
        qs = Message.objects.filter(conversation=self.get_conversation())
        after_seq = _positive_int_param(self.request, "after_seq", default=None)
        if after_seq is not None:
            qs = qs.filter(seq__gt=after_seq)
        return qs.order_by("seq")

    @extend_schema(
        parameters=[
            OpenApiParameter("after_seq", OpenApiTypes.INT, description="Only messages with a greater seq."),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Messages oldest first, a page at a time (cursor pagination on ``seq``)."""
        return super().list(request, *args, **kwargs)

    @extend_schema(
        parameters=[FORMAT_PARAMETER],
        request=PolymorphicProxySerializer(
            component_name="MessageAppend",
            serializers=[s.NativeMessageInputSerializer, s.MessageBatchInputSerializer],
            resource_type_field_name=None,
        ),
        responses={
            201: PolymorphicProxySerializer(
                component_name="MessageAppended",
                serializers=[s.MessageSerializer, s.MessageBatchSerializer],
                resource_type_field_name=None,
            ),
            400: OpenApiResponse(s.InvalidMessageErrorSerializer, description="Refused; nothing stored."),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Append one message (a message object) or a batch (``{"messages": [...]}``),
        atomically. A single message is answered with the stored message, a batch with
        ``{"messages": [...]}``."""
        conversation = self.get_conversation()
        body = request.data
        batch = isinstance(body, dict) and set(body) == {"messages"}
        items = body["messages"] if batch else [body]
        if not isinstance(items, list):
            return invalid_message_response(InvalidMessageError("'messages' must be a list"))
        if not items:
            return invalid_message_response(InvalidMessageError("'messages' is empty"))
        if len(items) > MAX_BATCH:
            return invalid_message_response(
                InvalidMessageError(f"{len(items)} messages in one request; at most {MAX_BATCH}")
            )
        try:
            messages = s.messages_from_request(items, message_format(request))
            stored = PersistentChatHistory(conversation).add_messages(messages)
        except InvalidMessageError as exc:
            return invalid_message_response(exc)
        except ConversationNotFound:
            raise Http404("No such conversation.") from None
        if any(m.role is Role.HUMAN for m in stored):
            # Never fails the append: broker and model errors are logged and recorded.
            request_compaction(conversation.pk, reason="api append")
        rows = Message.objects.filter(
            conversation=conversation, seq__gte=stored[0].seq, seq__lte=stored[-1].seq
        ).order_by("seq")
        data = s.MessageSerializer(rows, many=True).data
        return Response({"messages": data} if batch else data[0], status=status.HTTP_201_CREATED)


@extend_schema(tags=["summaries"])
class SummaryViewSet(AppAPIView, _ConversationScoped, mixins.ListModelMixin, GenericViewSet):
    """Summaries of one conversation, newest first (the first is the current one)."""

    permission_classes = [IsAuthenticated]
    pagination_class = SummaryCursorPagination
    serializer_class = s.SummarySerializer

    def get_queryset(self) -> QuerySet[Summary]:
        if getattr(self, "swagger_fake_view", False):
            return Summary.objects.none()
        return Summary.objects.filter(conversation=self.get_conversation()).order_by("-through_seq")
