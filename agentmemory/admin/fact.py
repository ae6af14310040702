"""The fact admin: long-term facts by owner, agent key, namespace and category, searched by
full text, with their superseded history; deleting is ``forget``: the fact with its history,
embeddings and index entries."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from agentmemory.admin.message import fulltext_filter
from agentmemory.admin.transcript import reverse_page
from agentmemory.admin.utils import (
    PRE_STYLE,
    BoundedCountPaginator,
    CheckedQueryAdmin,
    pretty_json,
    query_problem,
    short_datetime,
)
from agentmemory.knowledge import DELETE_BATCH
from agentmemory.management.owners import find_user_by_name
from agentmemory.models import Fact
from agentmemory.recall.scope import MemoryScopeError, scope_key
from agentmemory.validation import parse_id

#: most superseded versions listed on a fact's page
HISTORY_SHOWN = 50


def search_fact_text(queryset: QuerySet[Fact], term: str) -> QuerySet[Fact]:
    """Facts holding every word of ``term``: the same words and indexes as
    ``agentmemory.admin.message.search_message_text``, on the fact table."""
    return fulltext_filter(queryset, term, table=Fact._meta.db_table)


class OwnerFilter(admin.SimpleListFilter):
    """One owner: the one chosen, or one of the first ten owners of facts (by user id)."""

    title = _("owner")
    parameter_name = "owner__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from django.contrib.auth import get_user_model

        user_model = get_user_model()
        ids = list(Fact.objects.order_by("owner_id").values_list("owner_id", flat=True).distinct()[:10])
        value = self.value()
        chosen = parse_id(value or "")
        if chosen is not None and chosen not in ids:
            ids.insert(0, chosen)
        users = {u.pk: u for u in user_model._default_manager.filter(pk__in=ids)}
        return [(str(pk), str(users[pk])) for pk in ids if pk in users]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Fact]) -> QuerySet[Fact]:
        value = self.value()
        if value is None:
            return queryset
        owner_id = parse_id(value)
        return queryset.filter(owner_id=owner_id) if owner_id is not None else queryset.none()


class _ScopeValueFilter(admin.SimpleListFilter):
    """The values of one scope column in use, within the chosen owner when there is one
    (matched exactly, as recall matches them)."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        facts = Fact.objects.all()
        owner = parse_id(request.GET.get(OwnerFilter.parameter_name, ""))
        if owner is not None:
            facts = facts.filter(owner_id=owner)
        values = facts.order_by(self.field).values_list(self.field, flat=True).distinct()[:50]
        return [(value or "-", value or _("(none)")) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Fact]) -> QuerySet[Fact]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(**{self.field: "" if value == "-" else value})


class AgentKeyFilter(_ScopeValueFilter):
    title = _("agent key")
    parameter_name = field = "agent_key"


class NamespaceFilter(_ScopeValueFilter):
    title = _("namespace")
    parameter_name = field = "namespace"


class CategoryFilter(_ScopeValueFilter):
    title = _("category")
    parameter_name = field = "category"


class StatusFilter(admin.SimpleListFilter):
    """In force (what recall can return), superseded (history), or expired."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("live", _("in force")), ("superseded", _("superseded")), ("expired", _("expired"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Fact]) -> QuerySet[Fact]:
        now = timezone.now()
        value = self.value()
        if value == "live":
            return queryset.live(now)  # type: ignore[attr-defined]
        if value == "superseded":
            return queryset.filter(superseded_by__isnull=False)
        if value == "expired":
            return queryset.filter(expires_at__lte=now)
        return queryset


def heads_of(facts: QuerySet[Fact] | list[Fact]) -> list[int]:
    """Ids of the facts in force at the end of each given fact's chain (a superseded fact's
    successor, its successor's...): forgetting a version forgets the fact it led to, as
    ``KnowledgeMemory.forget`` does. One query per step of the longest chain."""
    ids = {f.pk for f in facts} if isinstance(facts, list) else set(facts.values_list("pk", flat=True))
    heads: set[int] = set()
    frontier = ids
    while frontier:
        rows = list(Fact.objects.filter(pk__in=frontier).values_list("pk", "superseded_by_id"))
        heads |= {pk for pk, successor in rows if successor is None}
        frontier = {successor for _pk, successor in rows if successor is not None} - heads
    return sorted(heads)


@admin.register(Fact)
class FactAdmin(CheckedQueryAdmin):
    list_display = (
        "preview",
        "owner",
        "agent_key",
        "namespace",
        "category",
        "importance",
        "status",
        "created",
    )
    list_display_links = ("preview",)
    list_select_related = ("owner",)
    list_filter = (
        OwnerFilter,
        AgentKeyFilter,
        NamespaceFilter,
        CategoryFilter,
        StatusFilter,
        "persistent",
        "kind",
    )
    show_facets = admin.ShowFacets.NEVER
    show_full_result_count = False
    paginator = BoundedCountPaginator
    list_per_page = 100
    search_fields = ("content",)
    search_help_text = _(
        "Finds facts holding every word (whole words, any form), or the fact with this public id "
        "(the id the API shows)."
    )
    fields = (
        "uuid",
        "owner",
        "agent_key",
        "namespace",
        "kind",
        "category",
        "content_display",
        "importance",
        "persistent",
        "expires_at",
        "status",
        "superseded_by_link",
        "superseded_at",
        "history",
        "source_message_link",
        "recall_count",
        "last_recalled_at",
        "metadata_display",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    change_list_template = "agentmemory/admin/fact_change_list.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # facts are written by KnowledgeMemory (supersession, repeats, eviction)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("content"))
    def preview(self, obj: Fact) -> str:
        return Truncator(" ".join(obj.content.split())).chars(56)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Fact) -> str:
        return short_datetime(obj.created_at)

    @admin.display(description=_("status"))
    def status(self, obj: Fact) -> str:
        if obj.superseded_by_id is not None:
            return str(_("superseded"))
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return str(_("expired"))
        return str(_("in force"))

    @admin.display(description=_("content"))
    def content_display(self, obj: Fact) -> str:
        return format_html('<pre style="{}">{}</pre>', PRE_STYLE, obj.content)

    @admin.display(description=_("metadata"))
    def metadata_display(self, obj: Fact) -> str:
        return pretty_json(obj.metadata) if obj.metadata else "-"

    @admin.display(description=_("superseded by"))
    def superseded_by_link(self, obj: Fact) -> str:
        if obj.superseded_by_id is None:
            return "-"
        url = reverse("admin:agentmemory_fact_change", args=[obj.superseded_by_id])
        return format_html('<a href="{}">{}</a>', url, _("fact %(id)s") % {"id": obj.superseded_by_id})

    @admin.display(description=_("earlier versions"))
    def history(self, obj: Fact) -> str:
        """The versions this fact superseded, newest first (one query per generation)."""
        versions: list[Fact] = []
        frontier = [obj.pk]
        while frontier and len(versions) < HISTORY_SHOWN:
            rows = list(
                Fact.objects.filter(superseded_by__in=frontier)
                .order_by("-created_at", "-id")
                .only("id", "content", "created_at", "superseded_by_id")[: HISTORY_SHOWN - len(versions)]
            )
            versions += rows
            frontier = [row.pk for row in rows]
        if not versions:
            return "-"
        return format_html(
            "<ol>{}</ol>",
            format_html_join(
                "",
                '<li><a href="{}">{}</a> <span style="color: var(--body-quiet-color)">{}</span>'
                '<pre style="{}">{}</pre></li>',
                (
                    (
                        reverse("admin:agentmemory_fact_change", args=[v.pk]),
                        _("fact %(id)s") % {"id": v.pk},
                        short_datetime(v.created_at),
                        PRE_STYLE,
                        v.content,
                    )
                    for v in versions
                ),
            ),
        )

    @admin.display(description=_("source message"))
    def source_message_link(self, obj: Fact) -> str:
        message = obj.source_message
        if message is None:
            return "-"
        change_url = reverse("admin:agentmemory_conversation_change", args=[message.conversation_id])
        return format_html(
            '<a href="{}">{}</a>',
            reverse_page(change_url, message.seq),
            _("seq %(seq)s in its transcript") % {"seq": message.seq},
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Fact], search_term: str
    ) -> tuple[QuerySet[Fact], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        try:  # a public id, as the API shows it: that fact
            return queryset.filter(uuid=uuid.UUID(term)), False
        except ValueError:
            return search_fact_text(queryset, search_term), False

    # -- forgetting ------------------------------------------------------------------------

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = dict(super().get_actions(request))
        selected = actions.get("delete_selected")
        if selected is not None:
            function, name, _description = selected
            actions["delete_selected"] = (function, name, _("Forget selected facts, with their history"))
        return actions

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        """The confirmation lists what forgetting removes: the facts in force that the chosen
        ones belong to, and under each its history and embeddings."""
        heads = list(Fact.objects.filter(pk__in=heads_of(list(objs))))
        return super().get_deleted_objects(heads, request)

    def delete_model(self, request: HttpRequest, obj: Fact) -> None:
        self._forget(heads_of([obj]))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Fact]) -> None:
        self._forget(heads_of(queryset))

    @staticmethod
    def _forget(ids: list[int]) -> None:
        """Delete the facts ``ids`` for real, in batches of ``DELETE_BATCH``: their history
        (``superseded_by`` cascades), embeddings and full-text entries go with them."""
        using = router.db_for_write(Fact)
        for start in range(0, len(ids), DELETE_BATCH):
            with transaction.atomic(using=using):
                Fact.objects.using(using).filter(pk__in=ids[start : start + DELETE_BATCH]).delete()

    # -- recall search ---------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        return [
            path(
                "recall/",
                self.admin_site.admin_view(self.recall_view),
                name="agentmemory_fact_recall",
            ),
            *super().get_urls(),
        ]

    def recall_view(self, request: HttpRequest) -> HttpResponse:
        """What recall finds for one user: ``?owner=`` (a user id or exact username, required:
        recall never searches across users), ``?q=`` and optionally ``?agent_key=`` (exact).
        Lists the user's facts in force that match, scored as ``KnowledgeMemory.recall``
        scores them (relevance scaled to the best, with the importance and recency boosts),
        and ``search_messages`` over the user's conversations.
        Reads only: no fact is marked as recalled. Needs the view permissions on facts and on
        messages."""
        from django.contrib.auth import get_user_model

        from agentmemory.models import Conversation, Message
        from agentmemory.recall import MAX_K, boost, get_backend, search_messages

        if not (
            self.has_view_permission(request)
            and self.admin_site.get_model_admin(Message).has_view_permission(request)
        ):
            raise PermissionDenied
        problem = query_problem(request)
        if problem:
            return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
        owner_text = request.GET.get("owner", "").strip()
        query = request.GET.get("q", "").strip()
        agent_key = request.GET.get("agent_key", "")  # exact, as every scope string
        errors: list[Any] = []
        owner: Any = None
        if owner_text:
            users = get_user_model()._default_manager
            owner_id = parse_id(owner_text)
            owner = users.filter(pk=owner_id).first() if owner_id is not None else None
            if owner is None:  # a name, read as the management commands read it
                owner = find_user_by_name(owner_text)
            if owner is None:
                errors.append(_("No user %(owner)s.") % {"owner": owner_text[:100]})
        elif query:
            errors.append(_("Choose an owner: recall never searches across users."))
        try:
            scope_key(agent_key, "agent_key", Fact._meta.get_field("agent_key").max_length or 100)
        except MemoryScopeError as exc:  # no fact has it; message recall refused it with a 500
            errors.append(str(exc))
        facts: list[tuple[Fact, float]] = []
        hits: list[Any] = []
        if owner is not None and query and not errors:
            live = Fact.objects.live().filter(owner_id=owner.pk)
            if agent_key:
                live = live.filter(agent_key=agent_key)
            ranked = get_backend().rank(live, query, MAX_K)
            by_id = {f.pk: f for f in Fact.objects.filter(pk__in=[pk for pk, _score in ranked])}
            # scored as KnowledgeMemory.recall scores them (relevance scaled to the best, then
            # importance and recency), without marking them recalled: the backend's raw score
            # of an owner's only fact is about 0 (BM25 weighs a word every fact holds at 0)
            top = max((score for _pk, score in ranked), default=0.0)
            now = timezone.now()
            scored = [
                (fact, boost(score, top, fact.created_at, fact.importance, now))
                for pk, score in ranked
                if (fact := by_id.get(pk)) is not None
            ]
            facts = sorted(scored, key=lambda item: (-item[1], -item[0].pk))[:20]
            found = search_messages(query, owner=owner.pk, agent_key=agent_key or None, k=20)
            # which conversation each hit is in, named as everywhere in the admin
            # (Conversation.label: title and uuid digits), linked to its page
            names = {
                conv.pk: conv.label()
                for conv in Conversation.objects.filter(pk__in={hit.conversation_id for hit in found}).only(
                    "pk", "title", "uuid"
                )
            }
            for hit in found:
                change_url = reverse("admin:agentmemory_conversation_change", args=[hit.conversation_id])
                name = names.get(hit.conversation_id) or str(hit.conversation_uuid)
                hits.append((hit, reverse_page(change_url, hit.seq), change_url, name))
        context = {
            **self.admin_site.each_context(request),
            "title": _("Recall search"),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "owner": owner,
            "owner_text": owner_text,
            "query": query,
            "agent_key": agent_key,
            "errors": errors,
            "facts": facts,
            "hits": hits,
            "searched": owner is not None and bool(query) and not errors,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "agentmemory/admin/recall.html", context, status=400 if errors else 200
        )
