"""Django admin for conversations, messages and summaries, and a "Context window" page.

History is append-only: messages and summaries are read-only here (they are written by
``PersistentChatHistory`` and the compactor). Message lists are paginated changelists filtered
by conversation, never inlines: a conversation can hold 100,000 messages.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import NestedObjects, quote, unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import router, transaction
from django.db.models import CASCADE, Model, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.formats import date_format, number_format
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator, capfirst
from django.utils.timesince import timesince
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agentmemory.api.serializers import HISTORY_PART, SUMMARY_PART, window_entries
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Conversation, Message, Summary
from agentmemory.validation import json_problem, text_problem

# The admin's <pre> is small and grey (meant for code snippets); stored text is the content.
_PRE_STYLE = (
    "white-space: pre-wrap; word-break: break-word; margin: 0; padding: 0; max-width: 100%; "
    "color: var(--body-fg); font-size: 0.8125rem;"
)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON in a ``<pre>`` block (escaped)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return format_html('<pre style="{}">{}</pre>', _PRE_STYLE, text)


def admin_link(obj: Any, text: Any = None) -> str:
    """A link to the admin change (or view) page of ``obj``."""
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text if text is not None else obj)


def _short_datetime(value: Any) -> str:
    """A narrow date and time for changelist columns (the long form wraps tables off screen)."""
    return date_format(localtime(value), "SHORT_DATETIME_FORMAT") if value else "-"


def _changelist_url(model: type[Model], **filters: Any) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


class BoundedCountPaginator(Paginator):
    """A paginator that counts at most ``MAX_COUNT`` rows.

    The admin counts the (filtered) changelist on every page view; over a message table of
    millions of rows an exact ``COUNT(*)`` is a full index scan. The count here reads at most
    ``MAX_COUNT + 1`` rows, enough for the largest conversations the design plans for.
    """

    MAX_COUNT = 100_000

    @cached_property
    def count(self) -> int:
        object_list = self.object_list
        if isinstance(object_list, QuerySet):
            return object_list[: self.MAX_COUNT].count()
        return len(object_list)


class _SummarisingCollector(NestedObjects):
    """The admin's collector of what a delete removes, except that agentmemory's bulk rows
    (messages, summaries and whatever hangs off them, facts...) are counted, not loaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summarised: dict[Any, int] = {}

    def related_objects(self, related_model: Any, related_fields: Any, objs: Any) -> Any:
        queryset = super().related_objects(related_model, related_fields, objs)
        if (
            related_model._meta.app_label == Conversation._meta.app_label
            and related_model is not Conversation
        ):
            if any(f.remote_field.on_delete is CASCADE for f in related_fields):
                name = related_model._meta.verbose_name_plural
                self.summarised[name] = self.summarised.get(name, 0) + queryset.count()
            return queryset.none()
        return queryset


def summarised_deleted_objects(
    objs: Any, request: HttpRequest, admin_site: admin.AdminSite
) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
    """Django's ``get_deleted_objects`` for a delete confirmation page, but agentmemory's
    messages, summaries and the rows below them are given as counts, one query per model,
    instead of one line (and one permission check) per row: a user with 160,000 stored
    messages gets a page of a few lines. Conversations are listed with their message counts.

    Returns:
        ``(to_delete, model_count, perms_needed, protected)`` as the admin expects.
    """
    objs = list(objs)
    if not objs:
        return [], {}, set(), []
    using = router.db_for_write(objs[0]._meta.model)
    collector = _SummarisingCollector(using=using, origin=objs)
    collector.collect(objs)
    perms_needed: set[Any] = set()

    def format_callback(obj: Any) -> Any:
        opts = obj._meta
        name = capfirst(opts.verbose_name)
        extra = ""
        if isinstance(obj, Conversation):
            count = number_format(obj.message_count, force_grouping=True)
            extra = " " + ngettext("(%(count)s message)", "(%(count)s messages)", obj.message_count) % {
                "count": count
            }
        if not admin_site.is_registered(type(obj)):
            return f"{name}: {obj}{extra}"
        if not admin_site.get_model_admin(type(obj)).has_delete_permission(request, obj):
            perms_needed.add(opts.verbose_name)
        try:
            url = reverse(
                f"{admin_site.name}:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)]
            )
        except NoReverseMatch:
            return f"{name}: {obj}{extra}"
        return format_html('{}: <a href="{}">{}</a>{}', name, url, obj, extra)

    to_delete = collector.nested(format_callback)
    protected = [format_callback(obj) for obj in collector.protected]
    model_count: dict[Any, int] = {
        model._meta.verbose_name_plural: len(rows)  # type: ignore[attr-defined]  # stubs type keys as str
        for model, rows in collector.model_objs.items()
    }
    model_count.update(collector.summarised)
    return to_delete, model_count, perms_needed, protected


class SummarisedDeletionMixin:
    """For the admin of a model whose rows own conversations (the user model): the delete
    confirmation page counts their messages and summaries instead of listing each one."""

    admin_site: admin.AdminSite

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[Any], list[Any]]:
        return summarised_deleted_objects(objs, request, self.admin_site)


def summarise_user_deletions(site: admin.AdminSite = admin.site) -> None:
    """Give the user model's admin on ``site`` the summarised delete confirmation page
    (``SummarisedDeletionMixin``), keeping the admin class the project registered.

    Called for the default site when this module is imported (admin autodiscovery), which
    finds the user admin when its app comes before ``agentmemory`` in ``INSTALLED_APPS``
    (``django.contrib.auth`` usually does). A project that registers its user admin later,
    or on another site, calls this after registering it. Does nothing when the user model has
    no admin, or already has the mixin.
    """
    user_model = get_user_model()
    current = site._registry.get(user_model)
    if current is None or isinstance(current, SummarisedDeletionMixin):
        return
    cls = type(current)
    site.unregister(user_model)
    site.register(
        user_model, type(cls.__name__, (SummarisedDeletionMixin, cls), {"__module__": cls.__module__})
    )


def _cancel_pending(conversation: Conversation, request: HttpRequest) -> list[Any]:
    user = getattr(request.user, "get_username", lambda: "")()
    reason = f"the tool call was cancelled in the admin by {user}" if user else "the tool call was cancelled"
    return PersistentChatHistory(conversation).cancel_pending_tool_calls(reason)


def _query_problem(request: HttpRequest) -> str | None:
    """Why the query string cannot be used as filters, or ``None``: a NUL character or a lone
    surrogate in a name or value (PostgreSQL refuses them in any text comparison)."""
    for key, values in request.GET.lists():
        for text in (key, *values):
            problem = text_problem(text)
            if problem:
                return _("The filter %(name)s %(problem)s.") % {"name": key[:50], "problem": problem}
    return None


class _CheckedQueryAdmin(admin.ModelAdmin):
    """Refuses filters the database cannot compare with a 400, instead of a server error."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        problem = _query_problem(request)
        if problem:
            return HttpResponseBadRequest(problem, content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)


class _ReadOnlyAdmin(_CheckedQueryAdmin):
    """History is written by the services; the admin shows it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    #: title of a changelist filtered to one conversation (``%(name)s``), or None
    changelist_title: Any = None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        conversation = _filtered_conversation(request)
        if conversation is not None and self.changelist_title is not None:
            extra_context = {**(extra_context or {}), "title": self.changelist_title % {"name": conversation}}
        return super().changelist_view(request, extra_context)


class _StorableJSONField(forms.JSONField):
    """A JSON form field that refuses JSON too deep for Python's parser (an error on the form,
    not a server error) and can show back any value it refused: text the page cannot be
    encoded with (a lone surrogate) is shown with JSON escapes."""

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(_("Metadata is nested too deeply.")) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        text = super().prepare_value(value)
        if isinstance(text, str) and text_problem(text):
            return (
                json.dumps(value, ensure_ascii=True)
                if not isinstance(value, str)
                else text.encode("utf-8", "backslashreplace").decode("utf-8")
            )
        return text


class ConversationAdminForm(forms.ModelForm):
    """Refuses metadata the database cannot store: not an object (``null`` included), NUL
    characters, lone surrogates, NaN or infinities, or nesting too deep."""

    metadata = _StorableJSONField(label=_("metadata"), required=False)

    class Meta:
        model = Conversation
        fields = ("title", "agent_key", "owner", "metadata")

    def clean_metadata(self) -> dict[str, Any]:
        value = self.cleaned_data.get("metadata")
        if not isinstance(value, dict):
            raise forms.ValidationError(_("Metadata must be a JSON object, such as {}."))
        problem = json_problem(value)
        if problem:
            raise forms.ValidationError(_("Metadata %(problem)s.") % {"problem": problem})
        return value


@admin.register(Conversation)
class ConversationAdmin(_CheckedQueryAdmin):
    list_display = (
        "display_title",
        "agent_key",
        "owner",
        "messages",
        "humans",
        "tokens",
        "has_summary",
        "updated",
    )
    list_select_related = ("owner",)
    list_filter = ("agent_key", "created_at")
    search_fields = ("title", "=uuid")
    raw_id_fields = ("owner",)
    show_full_result_count = False
    paginator = BoundedCountPaginator
    form = ConversationAdminForm
    actions = ["compact_now", "cancel_pending_tool_calls"]
    change_form_template = "agentmemory/admin/conversation_change_form.html"
    readonly_fields = (
        "uuid",
        "message_count",
        "human_message_count",
        "stored_tokens",
        "last_seq",
        "has_system_prompt",
        "pending_calls_display",
        "current_summary",
        "history_links",
        "compaction_started_at",
        "compaction_lease_expires_at",
        "compaction_requested_at",
        "compaction_error",
        "compaction_failed_at",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("uuid", "title", "agent_key", "owner", "metadata")}),
        (
            _("History"),
            {
                "fields": (
                    "history_links",
                    "message_count",
                    "human_message_count",
                    "stored_tokens",
                    "last_seq",
                    "has_system_prompt",
                    "pending_calls_display",
                )
            },
        ),
        (
            _("Memory"),
            {
                "fields": (
                    "current_summary",
                    "compaction_started_at",
                    "compaction_lease_expires_at",
                    "compaction_requested_at",
                    "compaction_error",
                    "compaction_failed_at",
                )
            },
        ),
        (_("Dates"), {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description=_("conversation"), ordering="title")
    def display_title(self, obj: Conversation) -> str:
        return str(obj)

    @admin.display(description=_("messages"), ordering="message_count")
    def messages(self, obj: Conversation) -> str:
        return number_format(obj.message_count, force_grouping=True)

    @admin.display(description=_("human"), ordering="human_message_count")
    def humans(self, obj: Conversation) -> str:
        return number_format(obj.human_message_count, force_grouping=True)

    @admin.display(description=_("tokens"), ordering="stored_tokens")
    def tokens(self, obj: Conversation) -> str:
        return number_format(obj.stored_tokens, force_grouping=True)

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: Conversation) -> str:
        return _short_datetime(obj.updated_at)

    @admin.display(description=_("summary"), boolean=True)
    def has_summary(self, obj: Conversation) -> bool:
        return obj.summary_id is not None

    @admin.display(description=_("current summary"))
    def current_summary(self, obj: Conversation) -> str:
        summary = obj.summary
        if summary is None:
            return "-"
        return format_html(
            '{} <span style="color: var(--body-quiet-color)">({})</span><pre style="{}">{}</pre>',
            admin_link(
                summary,
                _("seq %(first)s to %(through)s")
                % {"first": summary.first_seq, "through": summary.through_seq},
            ),
            _("%(tokens)s tokens, model %(model)s")
            % {"tokens": summary.token_count, "model": summary.model or "-"},
            _PRE_STYLE + " margin-top: 0.5em;",
            Truncator(summary.text).chars(2000),
        )

    @admin.display(description=_("pending tool calls"))
    def pending_calls_display(self, obj: Conversation) -> str:
        """The tool calls still awaiting their result: call id, tool, the seq of the AI
        message that made the call (a link to the messages from there), and how long ago."""
        calls = obj.pending_calls() if obj.pk is not None else []
        if not calls:
            return "-"
        rows = format_html_join(
            "",
            '<tr><td><code>{}</code></td><td>{}</td><td><a href="{}">{}</a></td><td>{}{}</td></tr>',
            (
                (
                    call.tool_call_id,
                    call.name,
                    _changelist_url(Message, conversation__id__exact=obj.pk, seq__gte=call.ai_seq),
                    call.ai_seq,
                    _("%(time)s ago") % {"time": timesince(call.requested_at)},
                    format_html(" <strong>{}</strong>", _("abandoned")) if call.abandoned else "",
                )
                for call in calls
            ),
        )
        return format_html(
            "<table><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            _("call id"),
            _("tool"),
            _("AI message seq"),
            _("waiting"),
            rows,
        )

    @admin.action(description=_("Cancel pending tool calls"), permissions=["change"])
    def cancel_pending_tool_calls(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        """Answer every pending tool call of the selected conversations with an error result
        (``PersistentChatHistory.cancel_pending_tool_calls``), so their exchanges can be sent
        to the model and summarised again."""
        answered = 0
        for conversation in queryset.exclude(pending_tool_calls={}).select_related(None).only("pk"):
            answered += len(_cancel_pending(conversation, request))
        self.message_user(
            request,
            ngettext(
                "%(count)d pending tool call answered with an error result.",
                "%(count)d pending tool calls answered with an error result.",
                answered,
            )
            % {"count": answered},
            messages.SUCCESS,
        )

    def cancel_pending_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST only: cancel one conversation's pending tool calls, then back to its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(_("No conversation with id %(id)r.") % {"id": object_id})
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        stored = _cancel_pending(obj, request)
        self.message_user(
            request,
            ngettext(
                "%(count)d pending tool call answered with an error result.",
                "%(count)d pending tool calls answered with an error result.",
                len(stored),
            )
            % {"count": len(stored)},
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:agentmemory_conversation_change", args=[obj.pk]))

    @admin.display(description=_("browse"))
    def history_links(self, obj: Conversation) -> str:
        if obj.pk is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a> &middot; <a href="{}">{}</a> &middot; <a href="{}">{}</a>',
            _changelist_url(Message, conversation__id__exact=obj.pk),
            ngettext("%(count)s message", "%(count)s messages", obj.message_count)
            % {"count": number_format(obj.message_count, force_grouping=True)},
            _changelist_url(Summary, conversation__id__exact=obj.pk),
            _("summaries"),
            reverse("admin:agentmemory_conversation_context", args=[obj.pk]),
            _("context window"),
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Conversation], search_term: str
    ) -> tuple[QuerySet[Conversation], bool]:
        # "=uuid" only makes sense for a well-formed uuid; anything else searches titles.
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            uuid.UUID(term)
        except ValueError:
            return queryset.filter(title__icontains=term), False
        return super().get_search_results(request, queryset, term)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[Any, int], set, list]:
        """Summarise what a delete removes instead of listing every message.

        Django's default collects and lists each related row (100,000 messages would be
        100,000 lines and as many permission checks). Messages and summaries are read-only
        in the admin, but deleting their conversation deletes them.
        """
        conversations = list(objs)
        summaries = Summary.objects.filter(conversation__in=[c.pk for c in conversations]).count()
        listed = [
            _("Conversation: %(name)s (%(messages)s messages)") % {"name": c, "messages": c.message_count}
            for c in conversations
        ]
        model_count = {
            Conversation._meta.verbose_name_plural: len(conversations),
            Message._meta.verbose_name_plural: sum(c.message_count for c in conversations),
            Summary._meta.verbose_name_plural: summaries,
        }
        return listed, model_count, set(), []

    @admin.action(description=_("Compact now"), permissions=["change"])
    def compact_now(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        """Request a compaction of each selected conversation through ``request_compaction``
        (forced: the run decides whether there is anything to fold), after the transaction
        commits; a broker failure is recorded on the conversation, never an error page."""
        from agentmemory.compaction import request_compaction

        ids = list(queryset.values_list("pk", flat=True))
        with transaction.atomic(using=router.db_for_write(Conversation)):
            for pk in ids:
                request_compaction(pk, force=True, reason="admin compact now")
        self.message_user(
            request,
            ngettext(
                "Compaction queued for %(count)d conversation.",
                "Compaction queued for %(count)d conversations.",
                len(ids),
            )
            % {"count": len(ids)},
            messages.SUCCESS,
        )

    # -- the context-window page ----------------------------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [
            path(
                "<path:object_id>/context/",
                self.admin_site.admin_view(self.context_window_view),
                name="agentmemory_conversation_context",
            ),
            path(
                "<path:object_id>/cancel-pending-tool-calls/",
                self.admin_site.admin_view(self.cancel_pending_view),
                name="agentmemory_conversation_cancel_pending",
            ),
        ]
        return urls + super().get_urls()

    def context_window_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What the model would be sent now: ``ContextWindowBuilder(conversation).build()``
        with ``max_tokens`` (default ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``) and
        ``max_messages`` from the query string, and the window's accounting."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(_("No conversation with id %(id)r.") % {"id": object_id})
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        conf = app_settings()
        default_tokens = min(conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT, conf.MAX_CONTEXT_TOKENS)
        errors: list[str] = []
        max_tokens = _int_param(
            request, "max_tokens", default_tokens, minimum=1, maximum=conf.MAX_CONTEXT_TOKENS, errors=errors
        )
        max_messages = _int_param(request, "max_messages", None, minimum=0, maximum=10**9, errors=errors)
        window = None
        budget_error = None
        entries: list[dict[str, Any]] = []
        if not errors:
            counter = get_token_counter()
            try:
                window = ContextWindowBuilder(obj, token_counter=counter).build(
                    max_tokens, max_messages=max_messages
                )
            except ContextBudgetExceeded as exc:
                budget_error = exc
            else:
                for part, message, tokens in window_entries(window, counter):
                    entries.append(
                        {
                            "part": part,
                            "message": message,
                            "tokens": tokens,
                            "content": (
                                message.text.removeprefix(app_settings().SUMMARY_MESSAGE_PREFIX)
                                if part == SUMMARY_PART
                                else message.content
                            ),
                            "tool_calls": [
                                {
                                    "id": call.id,
                                    "name": call.name,
                                    "arguments": json.dumps(
                                        dict(call.arguments), indent=2, ensure_ascii=False, sort_keys=True
                                    ),
                                }
                                for call in message.tool_calls
                            ],
                            "is_history": part == HISTORY_PART,
                        }
                    )
        left_out = None
        if window is not None and window.first_seq is not None:
            floor = max(window.summary_through_seq or 0, 1 if obj.has_system_prompt else 0)
            if window.first_seq > floor + 1:
                left_out = (floor + 1, window.first_seq - 1)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Context window"),
            "subtitle": str(obj),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": obj,
            "has_view_permission": True,
            "window": window,
            "entries": entries,
            "budget_error": budget_error,
            "errors": errors,
            "max_tokens": max_tokens,
            "max_messages": max_messages,
            "default_tokens": default_tokens,
            "left_out": left_out,
            "remaining": (window.max_tokens - window.total_tokens) if window else None,
            "messages_url": _changelist_url(Message, conversation__id__exact=obj.pk),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "agentmemory/admin/context_window.html", context, status=400 if errors else 200
        )


def _int_param(
    request: HttpRequest, name: str, default: int | None, *, minimum: int, maximum: int, errors: list[str]
) -> Any:
    """A whole-number query parameter within ``minimum..maximum``; anything else (a sign,
    ``nan``, ``inf``, an exponent, a NUL) adds an error and gives ``default``."""
    raw = request.GET.get(name, "").strip()
    if not raw:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        shown = raw[:40].encode("unicode_escape").decode("ascii")
        errors.append(_("%(name)s must be a whole number, not %(raw)r.") % {"name": name, "raw": shown})
        return default
    value = int(raw)
    if value < minimum:
        errors.append(_("%(name)s must be at least %(minimum)d.") % {"name": name, "minimum": minimum})
        return default
    if value > maximum:
        errors.append(
            _("%(name)s must be at most %(maximum)s (AGENTMEMORY['MAX_CONTEXT_TOKENS'] for max_tokens).")
            % {"name": name, "maximum": number_format(maximum, force_grouping=True)}
        )
        return default
    return value


@admin.register(Message)
class MessageAdmin(_ReadOnlyAdmin):
    list_display = ("conversation", "seq", "role", "preview", "tool_names", "tokens", "created")
    list_display_links = ("seq",)
    list_select_related = ("conversation",)
    list_filter = ("role",)
    # Facet counts would be a COUNT per role over every message of the table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    show_full_result_count = False
    # (conversation_id, seq) is the unique index: the page is an index range read and Django
    # needs no extra "-pk" to make the order total.
    ordering = ("conversation_id", "seq")
    sortable_by = ("seq",)
    paginator = BoundedCountPaginator
    fields = (
        "conversation_link",
        "seq",
        "role",
        "name",
        "tool_call_id",
        "exchange_seq",
        "content_display",
        "parts_display",
        "tool_calls_display",
        "token_count",
        "token_counter",
        "metadata_display",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("content"))
    def preview(self, obj: Message) -> str:
        if obj.content is None:
            return "-"
        return Truncator(" ".join(obj.content.split())).chars(80)

    @admin.display(description=_("tokens"))
    def tokens(self, obj: Message) -> int:
        return obj.token_count

    @admin.display(description=_("created"))
    def created(self, obj: Message) -> str:
        return _short_datetime(obj.created_at)

    @admin.display(description=_("tools"))
    def tool_names(self, obj: Message) -> str:
        if obj.tool_calls:
            return ", ".join(str(call.get("name", "?")) for call in obj.tool_calls)
        return obj.name if obj.role == "tool" else ""

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: Message) -> str:
        return admin_link(obj.conversation)

    @admin.display(description=_("content"))
    def content_display(self, obj: Message) -> str:
        if obj.content is None:
            return format_html("<em>{}</em>", _("null (the message only calls tools)"))
        return format_html('<pre style="{}">{}</pre>', _PRE_STYLE, obj.content)

    @admin.display(description=_("content parts"))
    def parts_display(self, obj: Message) -> str:
        """Each part as one line (kind, type, size or address), never its base64 data."""
        if not obj.parts:
            return "-"
        lines = []
        for part in obj.to_chat_message().parts:
            facts = [part.mime_type, f"{part.data_bytes:,} bytes" if part.data else part.url or part.file_id]
            if part.width and part.height:
                facts.append(f"{part.width} x {part.height} px")
            if part.detail:
                facts.append(f"detail {part.detail}")
            text = part.text if part.text else ", ".join(f for f in facts if f)
            lines.append(f"{part.placeholder if not part.text else part.kind.value}: {text}")
        return format_html('<pre style="{}">{}</pre>', _PRE_STYLE, "\n".join(lines))

    @admin.display(description=_("tool calls"))
    def tool_calls_display(self, obj: Message) -> str:
        return pretty_json(obj.tool_calls) if obj.tool_calls else "-"

    @admin.display(description=_("metadata"))
    def metadata_display(self, obj: Message) -> str:
        return pretty_json(obj.metadata) if obj.metadata else "-"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("conversation")

    def get_list_display(self, request: HttpRequest) -> Any:
        # One conversation's messages: its name is in the title, not on every row.
        if _filtered_conversation_id(request) is not None:
            return [name for name in self.list_display if name != "conversation"]
        return self.list_display

    changelist_title = _("Messages of %(name)s")


def _filtered_conversation_id(request: HttpRequest) -> int | None:
    pk = request.GET.get("conversation__id__exact", "")
    return int(pk) if pk.isdigit() else None


def _filtered_conversation(request: HttpRequest) -> Conversation | None:
    pk = _filtered_conversation_id(request)
    if pk is None:
        return None
    return Conversation.objects.only("id", "uuid", "title").filter(pk=pk).first()


@admin.register(Summary)
class SummaryAdmin(_ReadOnlyAdmin):
    list_display = (
        "__str__",
        "conversation",
        "first_seq",
        "through_seq",
        "token_count",
        "model",
        "prompt_version",
        "created_at",
    )
    list_select_related = ("conversation",)
    list_filter = ("prompt_version", "model", "created_at")
    search_fields = ("=conversation__uuid", "conversation__title")
    search_help_text = _("Search by conversation title or exact uuid.")
    show_full_result_count = False
    ordering = ("conversation_id", "-through_seq")
    fields = (
        "conversation_link",
        "first_seq",
        "through_seq",
        "previous_link",
        "text_display",
        "token_count",
        "token_counter",
        "human_messages_covered",
        "human_message_count",
        "tokens_covered",
        "model",
        "prompt_version",
        "input_tokens",
        "output_tokens",
        "llm_calls",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: Summary) -> str:
        return admin_link(obj.conversation)

    @admin.display(description=_("previous summary"))
    def previous_link(self, obj: Summary) -> str:
        return admin_link(obj.previous) if obj.previous_id else "-"

    @admin.display(description=_("text"))
    def text_display(self, obj: Summary) -> str:
        return format_html('<pre style="{}">{}</pre>', _PRE_STYLE, obj.text)

    changelist_title = _("Summaries of %(name)s")


summarise_user_deletions()
