"""API views of long-term memory: facts (``FactViewSet``) and search over messages and facts
(``SearchView``). Scoped like every view: a user reaches only their own facts and
conversations."""

from __future__ import annotations

import uuid as uuid_lib
from typing import Any

from django.db.models import F, Q, QuerySet
from django.http import Http404
from django.utils import timezone
from rest_framework import mixins, serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from agentmemory.api import serializers as s
from agentmemory.api.access import request_owner
from agentmemory.api.pagination import (
    FactCursorPagination,
    bounded_hits,
    json_size,
    response_budget,
)
from agentmemory.api.schema import (
    OpenApiParameter,
    OpenApiResponse,
    OpenApiTypes,
    extend_schema,
    extend_schema_view,
)
from agentmemory.api.views import (
    UUID_REGEX,
    AppAPIView,
    BoundedListMixin,
    _bool_param,
    _text_param,
)
from agentmemory.knowledge import (
    InvalidFactError,
    KnowledgeMemory,
    RememberResult,
    category_filter,
    days_before,
)
from agentmemory.models import Fact
from agentmemory.recall import MAX_K, MemoryScopeError, search_messages

# -- long-term memory ------------------------------------------------------------------------

_FACT_ERROR_FIELDS = ("content", "category", "importance", "ttl", "supersedes", "persistent")


def _fact_error(exc: Exception) -> serializers.ValidationError:
    """``InvalidFactError`` / ``MemoryScopeError`` as a 400 naming the field its message starts with."""
    text = str(exc)
    field = next((name for name in _FACT_ERROR_FIELDS if text.startswith(name)), "non_field_errors")
    if text.startswith("fact "):  # "fact <uuid> is not a live fact of this scope"
        field = "supersedes"
    return serializers.ValidationError({field: [text]})


def _scope_params(request: Request) -> dict[str, str | None]:
    scope: dict[str, str | None] = {}
    for name, longest in (("agent_key", 100), ("namespace", 200)):
        value = _text_param(request, name)
        if value is not None and len(value) > longest:
            raise serializers.ValidationError({name: [f"At most {longest} characters."]})
        scope[name] = value
    return scope


FACT_SCOPE_PARAMETERS = [
    OpenApiParameter("agent_key", OpenApiTypes.STR, description="Only facts of this agent key (exact)."),
    OpenApiParameter("namespace", OpenApiTypes.STR, description="Only facts of this namespace (exact)."),
]
FACT_ID_PARAMETER = OpenApiParameter(
    "id",
    OpenApiTypes.UUID,
    OpenApiParameter.PATH,
    description="The fact's id: its public uuid (`id` of the fact in answers); anything else is a 404.",
)


@extend_schema(tags=["facts"])
@extend_schema_view(
    list=extend_schema(
        parameters=[
            *FACT_SCOPE_PARAMETERS,
            OpenApiParameter(
                "category",
                OpenApiTypes.STR,
                description="Only this category, read as categories are stored: stripped of white "
                "space at both ends, composed (NFC). Empty or blank: every category.",
            ),
            OpenApiParameter(
                "history",
                OpenApiTypes.BOOL,
                description="Also facts out of default recall: superseded, expired, aged-out entries.",
            ),
        ]
    ),
    retrieve=extend_schema(parameters=[FACT_ID_PARAMETER]),
    destroy=extend_schema(parameters=[FACT_ID_PARAMETER]),
    create=extend_schema(
        request=s.FactWriteSerializer,
        responses={
            201: OpenApiResponse(s.RememberedSerializer, description="A new fact (created or superseded)."),
            200: OpenApiResponse(s.RememberedSerializer, description="A repeat (duplicate or updated)."),
            409: OpenApiResponse(
                s.ErrorSerializer,
                description="The fact was forgotten by another request while this one stored it "
                "(`forgotten`); nothing is kept.",
            ),
        },
    ),
    partial_update=extend_schema(
        parameters=[FACT_ID_PARAMETER],
        request=s.FactUpdateSerializer,
        responses={
            201: OpenApiResponse(
                s.RememberedSerializer, description="Stored as a new fact that supersedes it."
            ),
            200: OpenApiResponse(s.RememberedSerializer, description="Same content: updated in place."),
            409: OpenApiResponse(
                s.ErrorSerializer,
                description="The fact is no longer in force (`not_in_force`): superseded, expired or aged "
                "out. Change the fact that replaced it. Or it was forgotten by another request while "
                "this one changed it (`forgotten`).",
            ),
        },
    ),
)
class FactViewSet(
    AppAPIView,
    BoundedListMixin,
    mixins.RetrieveModelMixin,
    GenericViewSet,
):
    """The requesting user's long-term facts (``agentmemory.knowledge.KnowledgeMemory``).

    Facts are identified by their public ``uuid`` (the ``id`` of the API), never by their
    primary key; another user's fact answers 404. Writing goes through
    ``KnowledgeMemory``: an exact repeat adds nothing, a changed fact supersedes the old one
    (kept as history), deleting forgets the fact with its history, vectors and index entries.
    """

    operation_prefix = "facts"
    throttle_scope = "agentmemory.facts"
    serializer_class = s.FactSerializer
    pagination_class = FactCursorPagination

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        # What a POST or PATCH takes, so that DRF's browsable renderer, which builds its forms
        # from the view's serializer under the form's method, offers those fields (the PATCH
        # example filled from the fact) instead of the read-only fields of an answer.
        method = self.request.method if self.request is not None else None
        if method == "POST":
            return s.FactWriteSerializer
        if method == "PATCH":
            return s.FactUpdateSerializer
        return s.FactSerializer

    lookup_field = "uuid"
    lookup_url_kwarg = "id"
    # Any segment reaches the view, so that one that is not a UUID is the API's JSON 404.
    lookup_value_regex = UUID_REGEX
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Fact]:
        user = self.request.user
        if not getattr(user, "is_authenticated", False):
            return Fact.objects.none()
        qs = Fact.objects.filter(owner_id=user.pk).select_related("source_message__conversation")
        if self.action != "list":
            return self._with_successor(qs)
        for name, value in _scope_params(self.request).items():
            if value is not None:
                qs = qs.filter(**{name: value})
        category = _text_param(self.request, "category")
        if category and category.strip():  # empty or blank: no filter, as on search
            qs = qs.filter(category=category_filter(category))  # in the stored form
        if not _bool_param(self.request, "history"):
            now = timezone.now()
            days = KnowledgeMemory(user).max_log_days
            qs = qs.live(now).filter(Q(persistent=True) | Q(created_at__gte=days_before(now, days)))
        return self._with_successor(qs)

    @staticmethod
    def _with_successor(qs: QuerySet[Fact]) -> QuerySet[Fact]:
        """``qs`` with ``superseded_by_uuid``, the id ``FactSerializer`` shows as
        ``superseded_by``, read in the same query."""
        return qs.annotate(superseded_by_uuid=F("superseded_by__uuid"))

    def get_object(self) -> Fact:
        try:
            uuid_lib.UUID(str(self.kwargs.get(self.lookup_url_kwarg, "")))
        except ValueError:
            raise Http404("No such fact.") from None
        return super().get_object()  # type: ignore[no-any-return]

    def _remembered(self, result: RememberResult) -> Response:
        fact = Fact.objects.select_related("source_message__conversation").filter(pk=result.fact.pk).first()
        if fact is None:
            # Forgotten by another request between the store and this read (a DELETE of the
            # fact a repeat found): nothing of this request is kept, and it says so.
            return Response(
                {
                    "error": "forgotten",
                    "detail": f"Fact {result.fact.uuid} was forgotten by another request while this "
                    "one stored it; nothing is kept. Send the request again to store it anew.",
                },
                status=status.HTTP_409_CONFLICT,
            )
        uuids = dict(Fact.objects.filter(pk__in=result.superseded_ids).values_list("pk", "uuid"))
        superseded = [uuids[pk] for pk in result.superseded_ids if pk in uuids]
        body = {"action": result.action, "fact": fact, "superseded_ids": superseded}
        new = result.action in ("created", "superseded")
        return Response(
            s.RememberedSerializer(body).data, status=status.HTTP_201_CREATED if new else status.HTTP_200_OK
        )

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Remember a fact in the scope of ``agent_key`` and ``namespace`` (both exact; empty:
        none). Answers 201 with what was stored, or 200 when the same content was already in
        force (``duplicate``, or ``updated`` when its persistence, importance or expiry changed)."""
        body = s.FactWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            memory = KnowledgeMemory(
                request_owner(request), agent_key=data["agent_key"], namespace=data["namespace"]
            )
            result = memory.store(
                data["content"],
                data["category"],
                data["persistent"],
                importance=data.get("importance"),
                ttl=data.get("ttl"),
                supersedes=data.get("supersedes"),
            )
        except (InvalidFactError, MemoryScopeError) as exc:
            raise _fact_error(exc) from None
        return self._remembered(result)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Change a fact in force. New content (or category) is stored as a new fact that
        supersedes this one, which stays as history (201); the same content with another
        persistence, importance or ttl is updated in place (200). A fact that is already
        history cannot be changed (409 Conflict, ``not_in_force``: the body is fine, the fact's
        state is not): change the fact that replaced it."""
        fact = self.get_object()
        body = s.FactUpdateSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        memory = KnowledgeMemory(
            request_owner(request), agent_key=fact.agent_key, namespace=fact.namespace, kind=fact.kind
        )
        not_in_force = Response(
            {
                "error": "not_in_force",
                "detail": f"Fact {fact.uuid} is not in force (superseded, expired or aged out); "
                "change the fact that replaced it.",
            },
            status=status.HTTP_409_CONFLICT,
        )
        if not memory.live_facts().filter(pk=fact.pk).exists():
            return not_in_force
        try:
            result = memory.store(
                data.get("content", fact.content),
                data.get("category", fact.category),
                data.get("persistent", fact.persistent),
                importance=data.get("importance", fact.importance),
                ttl=data.get("ttl"),
                supersedes=fact.pk,
            )
        except InvalidFactError as exc:
            if not memory.live_facts().filter(pk=fact.pk).exists():
                # another writer replaced it after the check above: the same 409, not a 400
                # about a "supersedes" field this request does not have
                return not_in_force
            raise _fact_error(exc) from None
        return self._remembered(result)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Forget a fact for real: the fact, its history (the facts it superseded), their
        vectors and index entries. Forgetting a fact of the history forgets the fact that
        replaced it too."""
        fact = self.get_object()
        KnowledgeMemory(
            request_owner(request), agent_key=fact.agent_key, namespace=fact.namespace, kind=fact.kind
        ).forget(fact.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SearchQuerySerializer(serializers.Serializer):
    """Query parameters of the search endpoint."""

    q = s.NonBlankTextField(max_length=1000, help_text="Words to look for (stemmed, stop words ignored).")
    k = serializers.IntegerField(
        min_value=1, max_value=MAX_K, default=10, help_text=f"Hits wanted of each kind, 1 to {MAX_K}."
    )
    include = serializers.MultipleChoiceField(
        choices=["messages", "facts"],
        required=False,
        help_text="What to search (repeat the parameter); default both.",
    )
    conversation = serializers.UUIDField(required=False, help_text="Only messages of this conversation.")
    # exact, white space included, as the scope of every write and read
    agent_key = s.StrictTextField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Messages: only conversations of this agent key. Facts: the agent key of their "
        "scope (default: none). Exact: white space counts.",
    )
    namespace = s.StrictTextField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="Facts: the namespace of their scope. Exact: white space counts.",
    )
    category = s.StorableTextField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Facts: only this category (empty or left out: every category).",
    )


@extend_schema(tags=["search"])
class SearchView(AppAPIView, GenericAPIView):  # type: ignore[misc]
    """Search the requesting user's past conversations and long-term facts."""

    operation_prefix = "search"
    operation_single = True
    throttle_scope = "agentmemory.search"
    serializer_class = s.SearchResultSerializer
    pagination_class = None

    @extend_schema(parameters=[SearchQuerySerializer], responses={200: s.SearchResultSerializer})
    def get(self, request: Request) -> Response:
        """Ranked hits, best first: stored messages (human, AI and tool; what compaction
        condensed included) of the requester's conversations
        (``agentmemory.recall.search_messages``), and facts in force of the requested scope
        (``KnowledgeMemory.recall``, which records that they were recalled). Another user's
        conversation given as ``conversation`` finds nothing."""
        # A plain dict, not the QueryDict: DRF reads an empty value of a form field as "not
        # given" (``k=`` gave the default), where the schema says an integer or a uuid.
        params = SearchQuerySerializer(
            data={
                name: request.query_params.getlist(name) if name == "include" else value
                for name, value in request.query_params.items()
            }
        )
        params.is_valid(raise_exception=True)
        data = params.validated_data
        owner = request_owner(request)
        include = data.get("include") or {"messages", "facts"}
        messages: list[Any] = []
        facts: list[Fact] = []
        if "messages" in include:
            messages = search_messages(
                data["q"],
                owner=owner,
                conversation=data.get("conversation"),
                agent_key=data.get("agent_key"),
                k=data["k"],
            )
        if "facts" in include:
            memory = KnowledgeMemory(owner, agent_key=data.get("agent_key"), namespace=data.get("namespace"))
            for hit in memory.recall(data["q"], k=data["k"], category=data.get("category") or None):
                hit.fact.score = hit.score  # type: ignore[attr-defined]
                facts.append(hit.fact)
        found = {
            "messages": list(s.MessageHitSerializer(messages, many=True).data),
            "facts": list(s.FactHitSerializer(facts, many=True).data),
        }
        kept, left_out = bounded_hits(found, response_budget(request) - json_size(data["q"]))
        return Response({"query": data["q"], **kept, "left_out": left_out})
