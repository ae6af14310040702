"""API views: thin viewsets over ``PersistentChatHistory`` and ``ContextWindowBuilder``, and
what every view of the API shares (``AppAPIView``). Facts and search are in
``agentmemory.api.longterm``, model calls and usage in ``agentmemory.api.calls``.

Every queryset starts from ``Conversation.objects.for_user(request.user)``: another user's
conversation is a 404, never a 403, so its existence does not leak.
"""

from __future__ import annotations

import re
import uuid as uuid_lib
from functools import partial
from typing import Any

from django.db import router, transaction
from django.db.models import QuerySet
from django.http import Http404, QueryDict, StreamingHttpResponse
from django.utils.encoding import smart_str
from django.utils.html import escape
from django.utils.safestring import mark_safe
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import formatting
from rest_framework.viewsets import GenericViewSet

from agentmemory.agent_registry import memory_recall_enabled, memory_scope, window_budget
from agentmemory.api import access
from agentmemory.api import serializers as s
from agentmemory.api.access import (
    FromSettings,
    OpenAIFormatRenderer,
    StrictContentNegotiation,
    request_owner,
    staff_sees_all,
)
from agentmemory.api.errors import (
    BoundedJSONParser,
    JSONAwareFormParser,
    bounded_error_body,
    error_response,
    exception_handler,
    flatten_errors,
    reject_oversized_body,
)
from agentmemory.api.pagination import (
    CheckedCursorPagination,
    ConversationCursorPagination,
    MessageCursorPagination,
    SummaryCursorPagination,
    json_size,
    response_budget,
)
from agentmemory.api.schema import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    OpenApiTypes,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
    view_schema,
)
from agentmemory.api.serializers.common import json_type
from agentmemory.api.windows import bounded_window
from agentmemory.closing import build_closing_gap
from agentmemory.compaction import request_compaction
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.context.builder import GAP_POLICIES
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge.memory import unrecorded_recalls
from agentmemory.managers import ConversationQuerySet
from agentmemory.models import Conversation, Message, Summary
from agentmemory.transfer import InvalidConversationData, export_json, import_conversation
from agentmemory.validation import text_problem

#: most messages one append request may carry
MAX_BATCH = s.MAX_BATCH
#: Any path segment reaches the views, which answer an id that is not a UUID with the API's
#: JSON 404; a narrower pattern would leave such ids to the URL resolver's HTML page.
UUID_REGEX = "[^/]+"

MESSAGE_FORMAT_PARAMETER = OpenApiParameter(
    "message_format",
    OpenApiTypes.STR,
    enum=list(s.MESSAGE_FORMATS),
    default=s.NATIVE,
    description="Message shape: agentmemory's native shape, OpenAI chat-completions messages, "
    "Anthropic messages or LangChain message dicts (messages_to_dict; needs langchain-core on the "
    "server: without it, 501 format_unavailable).",
)
#: DRF's renderer choice (``URL_FORMAT_OVERRIDE``) on the operations that read or write
#: messages in a shape, the only ones with a second JSON renderer (``OpenAIFormatRenderer``);
#: elsewhere JSON is the only format and the schema lists no ``format``.
FORMAT_PARAMETER = OpenApiParameter(
    "format",
    OpenApiTypes.STR,
    enum=["json", "openai"],
    description="Renderer (DRF's format choice); both answer JSON. `openai` also selects the "
    "OpenAI message shape when `message_format` is absent (`message_format` takes precedence).",
)


def message_format(request: Request, allowed: tuple[str, ...] = s.MESSAGE_FORMATS) -> str:
    """The ``message_format`` query parameter (default ``native``); ``?format=openai`` (the
    OpenAI renderer, on ``message_shape_actions``) means ``openai`` when it is absent.

    Raises:
        ValidationError: a value that is not one of ``allowed``.
        FormatUnavailable: a format whose optional package this server lacks (``langchain``
            without langchain-core), a 501 before anything is read or written.
    """
    value = request.query_params.get("message_format")
    if value is None:
        renderer = getattr(request, "accepted_renderer", None)
        return s.OPENAI if getattr(renderer, "format", None) == s.OPENAI else s.NATIVE
    if value not in allowed:
        raise serializers.ValidationError({"message_format": [f"Must be one of: {', '.join(allowed)}."]})
    s.check_format_available(value)
    return value


#: largest integer accepted in query parameters (SQLite integers are 64-bit; budgets are far below)
MAX_QUERY_INT = 10**9
_DIGITS = re.compile(r"[0-9]+")  # ASCII: \d also takes other scripts' digits


def _positive_int_param(request: Request, name: str, *, default: int | None) -> int | None:
    """A whole-number query parameter: ASCII digits only (no sign, exponent, ``nan`` or ``inf``),
    at least 1 for ``max_tokens`` (0 for others), at most ``AGENTMEMORY["MAX_CONTEXT_TOKENS"]``
    for ``max_tokens`` and 10^9 for others.

    Raises:
        ValidationError: any other value (a 400 naming the parameter).
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    minimum = 1 if name == "max_tokens" else 0
    if not _DIGITS.fullmatch(raw):
        raise serializers.ValidationError(
            {name: [f"Must be a whole number of {minimum} or more, in ASCII digits (no sign or exponent)."]}
        )
    value = int(raw) if len(raw) <= 18 else None  # more digits: over any ceiling
    if value is not None and value < minimum:
        raise serializers.ValidationError({name: [f"Must be at least {minimum}."]})
    ceiling = app_settings().MAX_CONTEXT_TOKENS if name == "max_tokens" else MAX_QUERY_INT
    if value is None or value > ceiling:
        setting = ' (AGENTMEMORY["MAX_CONTEXT_TOKENS"])' if name == "max_tokens" else ""
        raise serializers.ValidationError({name: [f"At most {ceiling:,}{setting}."]})
    return value


def _bool_param(request: Request, name: str) -> bool:
    """A boolean query parameter: ``true`` or ``false``, as the schema's ``type: boolean``
    says (absent: false).

    Raises:
        ValidationError: any other value (``1``, ``0`` and the empty value included).
    """
    raw = request.query_params.get(name)
    if raw in (None, "false"):
        return False
    if raw == "true":
        return True
    raise serializers.ValidationError({name: ["Must be true or false."]})


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


def visible_conversations(request: Request) -> ConversationQuerySet:
    """The conversations ``request`` may reach: the user's own, or every conversation for
    active staff when ``AGENTMEMORY["API_STAFF_SEES_ALL_CONVERSATIONS"]`` is on; none for an
    anonymous request."""
    if staff_sees_all(request.user):
        return Conversation.objects.all()
    return Conversation.objects.for_user(request.user)


_CODE_SPAN = re.compile(r"``(.+?)``|`([^`]+)`", re.DOTALL)


def view_description(view: Any, html: bool = False) -> str:
    """The description of ``view`` for the browsable API and OPTIONS answers: its
    ``description`` or class docstring, dedented, with the docstrings' code spans
    (double backticks, as in the rest of the code) written as Markdown's single backticks;
    as HTML (``html``): escaped, code spans in ``<code>``, one ``<p>`` per paragraph.

    It does what DRF's ``get_view_description`` does (``VIEW_DESCRIPTION_FUNCTION``) without
    depending on the optional ``markdown`` package, which DRF needs to render any markup and
    without which it shows the backticks as typed. The OpenAPI schema takes the docstrings
    as they are: its descriptions are CommonMark, where double backticks are code spans too.
    """
    description = getattr(view, "description", None)
    if description is None:
        description = view.__class__.__doc__ or ""
    text = formatting.dedent(smart_str(description)).strip()
    if not html:
        return _CODE_SPAN.sub(lambda m: f"`{m.group(1) or m.group(2)}`", text)
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text):
        parts: list[str] = []
        end = 0
        for match in _CODE_SPAN.finditer(paragraph):
            parts.append(escape(paragraph[end : match.start()]))
            parts.append(f"<code>{escape(match.group(1) or match.group(2))}</code>")
            end = match.end()
        parts.append(escape(paragraph[end:]))
        paragraphs.append(f"<p>{' '.join(''.join(parts).split())}</p>")
    return mark_safe("\n".join(paragraphs))  # every piece of text is escaped above


class AppAPIView:
    """What every agentmemory view shares: the API's error shape (its own exception handler,
    so a host project's handler keeps its own views), a JSON parser with size and depth
    bounds, a body-size check made before anything reads the body, and descriptions
    without raw docstring markup (``view_description``)."""

    parser_classes = [BoundedJSONParser, JSONAwareFormParser, MultiPartParser]
    content_negotiation_class = StrictContentNegotiation
    schema = view_schema()
    #: first part of the operation ids of the view's actions in the schema
    operation_prefix = ""
    #: throttle scope of the view's requests (``AppScopedRateThrottle``)
    throttle_scope = ""
    #: actions that take ``message_format``: only they offer ``?format=openai``
    #: (``OpenAIFormatRenderer``), which means the same; other actions answer it with a 404
    message_shape_actions: tuple[str, ...] = ()
    #: DRF's attributes, read from the host's ``REST_FRAMEWORK`` setting when a request reads
    #: them (``agentmemory.api.access``); a subclass may set its own (docs/api.md)
    permission_classes: Any = FromSettings(access.permission_classes)
    throttle_classes: Any = FromSettings(access.throttle_classes)
    renderer_classes: Any = FromSettings(access.renderer_classes)
    request: Request

    def get_view_description(self, html: bool = False) -> str:
        return view_description(self, html)

    def get_renderers(self) -> list[Any]:
        renderers = [renderer() for renderer in self.renderer_classes]
        if getattr(self, "action", None) in self.message_shape_actions and not any(
            renderer.format == OpenAIFormatRenderer.format for renderer in renderers
        ):
            renderers.append(OpenAIFormatRenderer())
        return renderers

    def get_exception_handler(self) -> Any:
        return exception_handler

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            isinstance(response, Response)
            and response.status_code >= 400
            and isinstance(response.data, dict)
            and "error" in response.data
        ):
            response.data = bounded_error_body(response.data)
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        reject_oversized_body(request)
        reject_repeated_parameters(request)
        super().initial(request, *args, **kwargs)  # type: ignore[misc]


#: the API's query parameters that hold one value; ``include`` (search) takes several
SINGLE_VALUE_PARAMETERS = frozenset(
    {
        "after_seq",
        "agent_key",
        "category",
        "conversation",
        "cursor",
        "format",
        "gap_policy",
        "history",
        "k",
        "max_messages",
        "max_tokens",
        "memory_recall",
        "message_format",
        "namespace",
        "page_size",
        "q",
        "since",
        "until",
    }
)


def reject_repeated_parameters(request: Request) -> None:
    """Refuse a query parameter of the API given more than once (``?k=5&k=50``): the schema
    gives it one value, and Django's ``QueryDict`` would quietly take the last.

    Raises:
        ValidationError: a 400 naming each such parameter.
    """
    repeated = sorted(name for name in SINGLE_VALUE_PARAMETERS if len(request._request.GET.getlist(name)) > 1)
    if repeated:
        raise serializers.ValidationError({name: ["Give this parameter once."] for name in repeated})


def _window_data(window: ContextWindow, *, shape: str, counter: Any) -> dict[str, Any]:
    """The answer of ``/context/`` for ``window``, its messages in ``shape``."""
    return dict(
        s.ContextWindowSerializer(window, context={"message_format": shape, "token_counter": counter}).data
    )


class BoundedListMixin(mixins.ListModelMixin):
    """``list`` with a page bounded in bytes as well as in items: the page holds as many
    items as fit in ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, at least one
    (``CheckedCursorPagination.paginate_bounded``)."""

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queryset = self.filter_queryset(self.get_queryset())  # type: ignore[attr-defined]
        paginator = self.paginator  # type: ignore[attr-defined]
        if not isinstance(paginator, CheckedCursorPagination):
            return super().list(request, *args, **kwargs)
        data = paginator.paginate_bounded(
            queryset,
            request,
            self,
            lambda rows: self.get_serializer(rows, many=True).data,  # type: ignore[attr-defined]
        )
        return self.get_paginated_response(data)  # type: ignore[attr-defined,no-any-return]


def batch_extra_keys_response(body: dict[str, Any], message_format: str) -> Response:
    """The 400 for a batch body with keys beside ``messages``, such as a whole provider
    request copied as it is (``model``, ``tools``, Anthropic's top-level ``system``): those
    are not messages, and storing the ``messages`` alone would silently drop them. Each key
    is named in ``fields``; nothing is stored."""
    extra = sorted(str(key) for key in body if key != "messages")
    reason = (
        f'a batch is {{"messages": [...]}} and nothing else; unknown key(s): {", ".join(extra)} '
        "(request parameters such as model or tools are not stored)"
    )
    if "system" in extra:
        reason += (
            "; store a system prompt as a system message: the system messages that open a "
            "conversation are its pinned system prompt"
        )
        if message_format == s.ANTHROPIC:
            reason += " (Anthropic messages have no system role: append it in the native format)"
    return Response(
        {
            "error": "invalid_message",
            "detail": reason,
            "index": None,
            "reason": reason,
            "fields": {key: ["unknown key beside 'messages'"] for key in extra},
        },
        status=status.HTTP_400_BAD_REQUEST,
    )


def _body_shape_problem(body: Any) -> str:
    """Why an append's body that is not a JSON object is refused: the body is one message
    (an object) or a batch (``{"messages": [...]}``); a JSON array of messages is named as
    such, with the batch shape to send instead."""
    if isinstance(body, list):
        return 'the body is a JSON array: send a batch as {"messages": [...]}, or one message as an object'
    kind = json_type(body)
    return f'the body must be one message (a JSON object) or a batch {{"messages": [...]}}, not {kind}'


def invalid_message_response(exc: InvalidMessageError, *, batch: bool) -> Response:
    """A 400 in the API's error shape for a refused message: ``invalid_message`` with its
    ``index`` and ``reason``, and ``fields`` naming the field at fault by its path in the
    body (``messages.1.tool_calls.0.id`` in a batch, ``tool_calls.0.id`` for one message,
    ``messages`` for the batch itself)."""
    if exc.index is None:
        fields = {"messages" if batch else "non_field_errors": [exc.reason]}
    else:
        own = exc.field_errors()
        prefix = f"messages.{exc.index}." if batch else ""
        fields = {
            (f"messages.{exc.index}" if batch and name == "non_field_errors" else prefix + name): texts
            for name, texts in own.items()
        }
    return Response(
        {
            "error": "invalid_message",
            "detail": exc.summary(),
            "index": exc.index,
            "reason": exc.reason,
            "fields": fields,
        },
        status=status.HTTP_400_BAD_REQUEST,
    )


class _ConversationScoped:
    """Resolves the ``conversation_uuid`` URL kwarg among the requesting user's conversations."""

    kwargs: dict[str, Any]
    request: Request

    def get_conversation(self) -> Conversation:
        if not hasattr(self, "_conversation"):
            conversation = (
                visible_conversations(self.request)
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
    BoundedListMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    GenericViewSet,
):
    """The requesting user's conversations, identified by their public ``uuid``."""

    operation_prefix = "conversations"
    body_required_actions = ("import_",)
    message_shape_actions = ("context",)
    pagination_class = ConversationCursorPagination
    lookup_field = "uuid"
    lookup_value_regex = UUID_REGEX
    # PUT would have to resend every field; PATCH edits title and metadata.
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    @property
    def throttle_scope(self) -> str:  # type: ignore[override]
        if getattr(self, "action", None) == "context":
            return "agentmemory.context"
        return "agentmemory.conversations"

    def get_object(self) -> Conversation:
        _conversation_uuid(self.kwargs.get(self.lookup_field))
        return super().get_object()

    def get_queryset(self) -> QuerySet[Conversation]:
        qs = visible_conversations(self.request)
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
        serializer.save(owner=request_owner(self.request))

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        try:
            serializer.save()
        except ConversationNotFound:  # deleted since ``get_object`` read it
            raise Http404("No such conversation.") from None

    def perform_destroy(self, instance: Conversation) -> None:
        # Messages and summaries go with it (CASCADE, under the conversation's row lock); a
        # compaction task enqueued earlier finds the conversation gone and stores nothing.
        with transaction.atomic(using=router.db_for_write(Conversation)):
            instance.delete()

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "max_tokens",
                {"type": "integer", "minimum": 1, "x-maximum-setting": "MAX_CONTEXT_TOKENS"},
                description=(
                    "Token budget (default: the CONVERSATION_HISTORY_TOKEN_LIMIT of the agent registered "
                    "under the conversation's agent key, else the setting; at most "
                    "AGENTMEMORY['MAX_CONTEXT_TOKENS'])."
                ),
            ),
            OpenApiParameter(
                "max_messages",
                {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_INT},
                description="Cap on history messages.",
            ),
            OpenApiParameter(
                "memory_recall",
                bool,
                description="Send a memory block recalled from the owner's past conversations and "
                "facts about the newest human message, in the scope of the agent registered under "
                "the conversation's agent key (true or false; default: that agent's "
                "MEMORY_RECALL_ENABLED, or AGENTMEMORY['MEMORY_RECALL_ENABLED'] for a key no agent "
                "holds); none for a conversation the requester does not own. No fact is marked "
                "recalled.",
            ),
            OpenApiParameter(
                "gap_policy",
                OpenApiTypes.STR,
                enum=list(GAP_POLICIES),
                default="report",
                description="What to do when stored messages would be in neither the window nor "
                "the summary: `report` (the default) only lists them under `uncovered` and writes "
                "nothing; `close` compacts first, as an agent's model call does (writes a summary "
                "made for this budget, which later windows send in place of the turns it covers; "
                "with an LLM summariser, a model call); `ignore` trims silently.",
            ),
            MESSAGE_FORMAT_PARAMETER,
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
        starting on a human message. Reading it writes nothing: stored messages that would be
        in neither the window nor the summary are listed in ``uncovered``; with
        ``gap_policy=close`` they get a compaction first, as an agent's model call does, and
        ``uncovered`` holds what it could not close.
        With ``memory_recall=true`` the owner's memory block follows the summary (``memory``):
        recalled in the scope the agent registered under the conversation's agent key uses
        (``agent_registry.memory_scope``: what that agent sends), else in the scope of the
        conversation's agent key, and only for the owner (staff reading another user's
        conversation get none). The answer is at most ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``:
        a window over it holds the newest history messages that fit (as ``max_messages`` cuts
        it, the newest turn always whole) and ``uncovered`` lists those left out."""
        conversation = self.get_object()
        shape = message_format(request)
        conf = app_settings()
        # by default, the window of the agent registered under the conversation's key
        registered = window_budget(conversation.agent_key)
        default_tokens = registered[0] if registered else conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        max_tokens = _positive_int_param(request, "max_tokens", default=default_tokens)
        max_messages = _positive_int_param(request, "max_messages", default=None)
        # by default, what the agent registered under the conversation's key sends
        memory_recall = (
            _bool_param(request, "memory_recall")
            if "memory_recall" in request.query_params
            else memory_recall_enabled(conversation.agent_key)
        )
        # A GET is safe (RFC 9110, 9.2.1): it only compacts when the client asks for it
        gap_policy = request.query_params.get("gap_policy", "report")
        if gap_policy not in GAP_POLICIES:
            raise serializers.ValidationError({"gap_policy": [f"Must be one of {', '.join(GAP_POLICIES)}."]})
        # Facts and search stay the requester's own: staff reading another user's
        # conversation (API_STAFF_SEES_ALL_CONVERSATIONS) get no memory block.
        if conversation.owner_id != request.user.pk:
            memory_recall = False
        memory_agent_key, memory_namespace = memory_scope(conversation.agent_key)
        counter = get_token_counter()
        try:
            # With gap_policy=close, as for an agent's model call: a window that would leave
            # stored messages in neither itself nor the summary gets a compaction first.
            builder = ContextWindowBuilder(
                conversation,
                token_counter=counter,
                gap_policy=gap_policy,
                memory_recall=memory_recall,
                # the scope the conversation's registered agent recalls in, else the
                # conversations and facts of its agent key (all of the owner's when none)
                memory_agent_key=memory_agent_key,
                memory_namespace=memory_namespace,
            )
            # a GET writes nothing: the facts the block recalls are not marked recalled
            with unrecorded_recalls():
                data = bounded_window(
                    lambda limit: build_closing_gap(builder, max_tokens, max_messages=limit),
                    partial(_window_data, shape=shape, counter=counter),
                    budget=response_budget(request),
                    shape=shape,
                    max_messages=max_messages,
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
        except InvalidMessageError as exc:
            raise serializers.ValidationError(
                {"message_format": [f"This window cannot be sent as {shape} messages: {exc}"]}
            ) from None
        return Response(data)

    @extend_schema(
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="The export document (version 1), streamed: written a message at a "
                "time as it is read, so its size has no bound but the conversation's, and the "
                "server holds one batch of messages at a time. No Content-Length.",
            )
        },
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def export(self, request: Request, uuid: str | None = None) -> StreamingHttpResponse:
        """The conversation as a JSON document that the import endpoint restores exactly:
        messages with seqs, tool calls, metadata and token counts, summaries with their spans,
        counters and pending tool calls (``agentmemory.transfer.export_json``), streamed."""
        conversation = self.get_object()
        try:
            document = export_json(conversation)
        except Conversation.DoesNotExist:  # deleted since ``get_object`` read it
            raise Http404("No such conversation.") from None
        return StreamingHttpResponse(document, content_type="application/json")

    @extend_schema(
        request=s.ImportDocumentSerializer,
        examples=[OpenApiExample("One message", value=s.IMPORT_EXAMPLE, request_only=True)],
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
        document = s.ImportDocumentSerializer(data=request.data)
        if not document.is_valid():
            fields = flatten_errors(document.errors)
            field, texts = next(iter(fields.items()))
            path = s.ImportDocumentSerializer.error_path("" if field == "non_field_errors" else field)
            return error_response(
                "invalid_document",
                f"{path}: {texts[0]}" if path else texts[0],
                status.HTTP_400_BAD_REQUEST,
                path=path,
                fields=fields,
            )
        try:
            conversation = import_conversation(request.data, owner=request_owner(request), new_uuid=True)
        except InvalidConversationData as exc:
            return error_response("invalid_document", str(exc), status.HTTP_400_BAD_REQUEST, path=exc.path)
        conversation = Conversation.objects.select_related("summary").get(pk=conversation.pk)
        return Response(s.ConversationDetailSerializer(conversation).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.CancelPendingToolCallsSerializer,
        responses={200: s.CancelledToolCallsSerializer, 400: s.InvalidMessageErrorSerializer},
    )
    @action(detail=True, methods=["post"], url_path="cancel-pending-tool-calls", pagination_class=None)
    def cancel_pending_tool_calls(self, request: Request, uuid: str | None = None) -> Response:
        """Answer every tool call still awaiting its result with ``"Error: <reason>"``, so a
        conversation whose client died between a call and its results can go on (strict
        validation refuses any other message until then). Returns the results stored, as many
        as fit in ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, and how many it left out: a
        conversation can hold any number of pending calls (38,400 answered 46 MB)."""
        conversation = self.get_object()
        body = s.CancelPendingToolCallsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        try:
            stored = PersistentChatHistory(conversation).cancel_pending_tool_calls(reason)
        except InvalidMessageError as exc:
            return invalid_message_response(exc, batch=False)
        except ConversationNotFound:
            raise Http404("No such conversation.") from None
        listed: list[Any] = []
        if stored:
            # the results are one batch: consecutive seqs, read and sized one at a time
            rows = Message.objects.filter(
                conversation=conversation, seq__gte=stored[0].seq, seq__lte=stored[-1].seq
            ).order_by("seq")
            budget = response_budget(request)
            total = 0
            for row in rows.iterator(chunk_size=100):
                item = s.MessageSerializer(row).data
                total += json_size(item) + 1
                if listed and total > budget:
                    break
                listed.append(item)
        return Response({"messages": listed, "left_out": len(stored) - len(listed)})


@extend_schema(tags=["messages"])
class MessageViewSet(AppAPIView, _ConversationScoped, BoundedListMixin, GenericViewSet):
    """Messages of one conversation, in ``seq`` order; appending goes through
    ``PersistentChatHistory`` (bad input refused with nothing stored, atomic batches, seq under a row
    lock)."""

    pagination_class = MessageCursorPagination
    operation_prefix = "messages"
    throttle_scope = "agentmemory.messages"
    body_required_actions = ("create",)
    message_shape_actions = ("create",)
    serializer_class = s.MessageSerializer

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        # DRF's browsable renderer builds the POST form (and the raw data tab's example) from
        # the view's serializer, asked for under the form's method; ``create`` reads its body
        # itself (one message or a batch, in any message format).
        if self.request is not None and self.request.method == "POST":
            return s.MessageFormSerializer
        return s.MessageSerializer

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
            OpenApiParameter(
                "after_seq",
                {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_INT},
                description="Only messages with a greater seq.",
            ),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Messages oldest first, a page at a time (cursor pagination on ``seq``)."""
        return super().list(request, *args, **kwargs)

    @extend_schema(
        parameters=[MESSAGE_FORMAT_PARAMETER, FORMAT_PARAMETER],
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
        if isinstance(body, QueryDict):
            # A form post (``role=human&content=hi``): one value per field, the last one as
            # Django's ``QueryDict.dict()`` and DRF's form fields take it.
            body = body.dict()
        if not isinstance(body, dict):
            # A JSON array of messages (the shape of a provider request's ``messages``), or a
            # string, number or null: no message to number, so the 400 names the body's shape
            # rather than "message 0".
            return invalid_message_response(InvalidMessageError(_body_shape_problem(body)), batch=False)
        batch = set(body) == {"messages"}
        if "messages" in body and not batch:
            return batch_extra_keys_response(body, message_format(request))
        items = body["messages"] if batch else [body]
        if not isinstance(items, list):
            return invalid_message_response(InvalidMessageError("'messages' must be a list"), batch=True)
        if not items:
            return invalid_message_response(InvalidMessageError("'messages' is empty"), batch=True)
        if len(items) > s.MAX_BATCH:
            return invalid_message_response(
                InvalidMessageError(f"{len(items)} messages in one request; at most {s.MAX_BATCH}"),
                batch=True,
            )
        try:
            messages = s.validated_messages(items, message_format(request))
            if not messages:
                # An Anthropic message whose content is an empty list converts to nothing.
                raise InvalidMessageError("the message has no content: nothing to store", index=0)
            stored = PersistentChatHistory(conversation).add_messages(messages)
        except InvalidMessageError as exc:
            return invalid_message_response(exc, batch=batch)
        except ConversationNotFound:
            raise Http404("No such conversation.") from None
        # After every append, not only one holding a human message: a conversation written as
        # tool exchanges alone is due by its tokens (``needs_compaction``). Never fails the
        # append: broker and model errors are logged and recorded.
        request_compaction(conversation.pk, reason="api append")
        rows = Message.objects.filter(
            conversation=conversation, seq__gte=stored[0].seq, seq__lte=stored[-1].seq
        ).order_by("seq")
        data = s.MessageSerializer(rows, many=True).data
        return Response({"messages": data} if batch else data[0], status=status.HTTP_201_CREATED)


@extend_schema(tags=["summaries"])
class SummaryViewSet(AppAPIView, _ConversationScoped, BoundedListMixin, GenericViewSet):
    """Summaries of one conversation, newest first (the first is the current one)."""

    pagination_class = SummaryCursorPagination
    operation_prefix = "summaries"
    throttle_scope = "agentmemory.conversations"
    serializer_class = s.SummarySerializer

    def get_queryset(self) -> QuerySet[Summary]:
        if getattr(self, "swagger_fake_view", False):
            return Summary.objects.none()
        return Summary.objects.filter(conversation=self.get_conversation()).order_by("-through_seq")


def __getattr__(name: str) -> Any:
    # the long-term memory views lived here; their import path keeps working
    if name in ("FactViewSet", "SearchView", "SearchQuerySerializer"):
        from agentmemory.api import longterm

        return getattr(longterm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
