"""The conversation admin: list, change page, actions, the context-window page."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.db.models import Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import number_format
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agentmemory.admin import transcript
from agentmemory.admin.erasure import forget_owners
from agentmemory.admin.utils import (
    PRE_STYLE,
    BoundedCountPaginator,
    CheckedQueryAdmin,
    StorableJSONField,
    admin_link,
    changelist_url,
    int_param,
    newest_shown,
    short_datetime,
)
from agentmemory.agent_registry import find, memory_recall_enabled, memory_scope, window_budget
from agentmemory.api.serializers import HISTORY_PART, SUMMARY_PART, window_entries
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded, ConversationStateError
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge.memory import unrecorded_recalls
from agentmemory.models import Conversation, Message, ModelCall, Summary
from agentmemory.usage import usage_totals
from agentmemory.validation import json_problem, text_problem


def _cancel_pending(conversation: Conversation, request: HttpRequest) -> list[Any]:
    user = getattr(request.user, "get_username", lambda: "")()
    reason = f"the tool call was cancelled in the admin by {user}" if user else "the tool call was cancelled"
    return PersistentChatHistory(conversation).cancel_pending_tool_calls(reason)


class ConversationAdminForm(forms.ModelForm):
    """Refuses metadata the database cannot store: not an object (``null`` included), NUL
    characters, lone surrogates, NaN or infinities, or nesting too deep. An empty box is no
    metadata (``{}``), which a new conversation starts with."""

    metadata = StorableJSONField(label=_("Metadata"), required=False, initial=dict)

    class Meta:
        model = Conversation
        fields = ("title", "agent_key", "owner", "metadata")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "agent_key" in self.fields:
            # a scope string is kept exactly, as the API and the Python API keep it
            self.fields["agent_key"].strip = False  # type: ignore[attr-defined]

    def clean_metadata(self) -> dict[str, Any]:
        value = self.cleaned_data.get("metadata")
        raw = self.data.get(self.add_prefix("metadata"), "")
        if value is None and isinstance(raw, str) and not raw.strip():
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError(_("Metadata must be a JSON object, such as {}."))
        problem = json_problem(value)
        if problem:
            raise forms.ValidationError(_("Metadata %(problem)s.") % {"problem": problem})
        return value


def _agent_path(cls: type | None) -> str:
    """The dotted path of an agent class (``project.agents.SupportAgent``), or "" for none."""
    return f"{cls.__module__}.{cls.__qualname__}" if cls is not None else ""


@admin.register(Conversation)
class ConversationAdmin(CheckedQueryAdmin):
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
    #: a title is at most 200 characters and a uuid 36: a longer search finds nothing
    max_search_chars = 1_000
    raw_id_fields = ("owner",)
    show_full_result_count = False
    paginator = BoundedCountPaginator
    form = ConversationAdminForm
    actions = ["compact_now", "cancel_pending_tool_calls", forget_owners]
    change_form_template = "agentmemory/admin/conversation_change_form.html"
    readonly_fields = (
        "uuid",
        "message_count",
        "human_message_count",
        "stored_tokens",
        "last_seq",
        "pinned_prompt",
        "pending_calls_display",
        "current_summary",
        "history_links",
        "usage_display",
        "compaction_started_at",
        "compaction_lease_expires_at",
        "compaction_requested_at",
        "compaction_error",
        "compaction_failed_at",
        "compaction_failures",
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
                    "pinned_prompt",
                    "pending_calls_display",
                    "usage_display",
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
                    "compaction_failures",
                )
            },
        ),
        (_("Dates"), {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
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
        return short_datetime(obj.updated_at)

    @admin.display(description=_("summary"), boolean=True)
    def has_summary(self, obj: Conversation) -> bool:
        return obj.summary_id is not None

    @admin.display(description=_("current summary"))
    def current_summary(self, obj: Conversation) -> str:
        summary = obj.own_summary
        if summary is None and obj.summary_id is not None:
            # written by hand to another conversation's summary: its text is not this one's
            return format_html(
                "{}",
                _(
                    "summary %(id)s is another conversation's: run manage.py "
                    "repair_conversations --conversation %(uuid)s"
                )
                % {"id": obj.summary_id, "uuid": obj.uuid},
            )
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
            PRE_STYLE + " margin-top: 0.5em;",
            Truncator(summary.text).chars(2000),
        )

    @admin.display(description=_("pinned system prompt"))
    def pinned_prompt(self, obj: Conversation) -> str:
        # The model field's help text states the rule as a fact, which reads as a contradiction
        # beside a "no"; say which case this conversation is in.
        if obj.pinned_seq is not None and obj.pinned_through > obj.pinned_seq:
            return str(
                _(
                    "yes: the conversation opens with system messages (seq %(first)s to %(last)s), "
                    "sent first, in this order, in every window"
                )
                % {"first": obj.pinned_seq, "last": obj.pinned_through}
            )
        if obj.pinned_seq is not None:
            return str(
                _("yes: the first message (seq %(seq)s) is a system message, sent first in every window")
                % {"seq": obj.pinned_seq}
            )
        if not obj.message_count:
            return str(
                _("no: the conversation holds no messages (a system message stored first would be pinned)")
            )
        return str(_("no: the first message is not a system message (agents send their SYSTEM_PROMPT)"))

    @admin.display(description=_("pending tool calls"))
    def pending_calls_display(self, obj: Conversation) -> str:
        """The tool calls still awaiting their result: call id, tool, the seq of the AI
        message that made the call (a link to the messages from there), and how long ago."""
        calls = self._pending_calls(obj)
        if not calls:
            return "-"
        rows = format_html_join(
            "",
            '<tr><td><code>{}</code></td><td>{}</td><td><a href="{}">{}</a></td><td>{}{}</td></tr>',
            (
                (
                    call.tool_call_id,
                    call.name,
                    transcript.reverse_page(
                        reverse("admin:agentmemory_conversation_change", args=[obj.pk]), call.ai_seq
                    ),
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

    @admin.display(description=_("model usage"))
    def usage_display(self, obj: Conversation) -> str:
        """What the conversation's recorded model calls (agent turns, summaries, embeddings)
        used, in tokens, and cost at ``MODEL_PRICES``, with a link to the calls: one
        aggregate query (``agentmemory.usage.usage_totals``)."""
        if obj.pk is None:
            return "-"
        totals = usage_totals(conversation=obj)
        if not totals.calls:
            return str(_("no model calls recorded"))
        unpriced = ", ".join(totals.unpriced_models)
        if totals.cost is None:
            cost = _("no price for %(models)s") % {"models": unpriced}
        elif unpriced:
            cost = _("cost %(cost)s (priced models only; no price for %(models)s)") % {
                "cost": totals.cost,
                "models": unpriced,
            }
        else:
            cost = _("cost %(cost)s") % {"cost": totals.cost}
        return format_html(
            '<a href="{}">{}</a>: {} &middot; {} &middot; {}',
            changelist_url(ModelCall, conversation__id__exact=obj.pk),
            ngettext("%(count)s model call", "%(count)s model calls", totals.calls)
            % {"count": number_format(totals.calls, force_grouping=True)},
            _("%(input)s input tokens (%(cached)s cached), %(output)s output tokens")
            % {
                "input": number_format(totals.input_tokens, force_grouping=True),
                "cached": number_format(totals.cached_input_tokens, force_grouping=True),
                "output": number_format(totals.output_tokens, force_grouping=True),
            },
            cost,
            _("%(count)s counted, not reported") % {"count": totals.counted_calls}
            if totals.counted_calls
            else _("all reported by the provider"),
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
            changelist_url(Message, conversation__id__exact=obj.pk),
            ngettext("%(count)s message", "%(count)s messages", obj.message_count)
            % {"count": number_format(obj.message_count, force_grouping=True)},
            changelist_url(Summary, conversation__id__exact=obj.pk),
            _("summaries"),
            reverse("admin:agentmemory_conversation_context", args=[obj.pk]),
            _("context window"),
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Conversation], search_term: str
    ) -> tuple[QuerySet[Conversation], bool]:
        # "=uuid" only makes sense for a well-formed uuid. The first hex digits of one, as
        # every conversation's name shows them ("Refund (1a2b3c4d)"), find the uuids that
        # start with them (a range on the uuid's index) and titles holding the text; anything
        # else searches titles.
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            uuid.UUID(term)
        except ValueError:
            titles = Q(title__icontains=term)
            digits = term.replace("-", "").lower()
            if 8 <= len(digits) < 32 and all(c in "0123456789abcdef" for c in digits):
                low = uuid.UUID(digits.ljust(32, "0"))
                high = uuid.UUID(digits.ljust(32, "f"))
                return queryset.filter(titles | Q(uuid__range=(low, high))), False
            return queryset.filter(titles), False
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
            modes = {request_compaction(pk, force=True, reason="admin compact now").mode for pk in ids}
        # The message says what the mode in force does: "queued" only where a worker takes it.
        count = {"count": len(ids)}
        if "off" in modes:
            self.message_user(
                request,
                _(
                    "Nothing was compacted: AGENTMEMORY['COMPACTION_MODE'] is 'off', so "
                    "compactions run only when you run manage.py compact_conversations."
                ),
                messages.WARNING,
            )
        elif "celery" in modes:
            text = ngettext(
                "Compaction queued for %(count)d conversation, for the Celery worker.",
                "Compaction queued for %(count)d conversations, for the Celery worker.",
                len(ids),
            )
            self.message_user(request, text % count, messages.SUCCESS)
        else:
            text = ngettext(
                "Compaction ran in this process for %(count)d conversation (compaction mode inline): "
                "its Memory section shows the summary, or the error.",
                "Compaction ran in this process for %(count)d conversations (compaction mode inline): "
                "their Memory sections show the summaries, or the errors.",
                len(ids),
            )
            self.message_user(request, text % count, messages.SUCCESS)

    # -- the context-window page ----------------------------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [
            path(
                "<path:object_id>/context/",
                self.admin_site.admin_view(self.context_window_view),
                name="agentmemory_conversation_context",
            ),
            path(
                "<path:object_id>/transcript/tool-result/",
                self.admin_site.admin_view(self.tool_result_view),
                name="agentmemory_conversation_tool_result",
            ),
            path(
                "<path:object_id>/cancel-pending-tool-calls/",
                self.admin_site.admin_view(self.cancel_pending_view),
                name="agentmemory_conversation_cancel_pending",
            ),
        ]
        return urls + super().get_urls()

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Conversation | None = None,
    ) -> HttpResponse:
        """Adds one page of the conversation's transcript, drawn below the form (``?page=N``;
        the last page, the newest messages, by default)."""
        if obj is not None and obj.pk is not None:
            change_url = reverse("admin:agentmemory_conversation_change", args=[obj.pk])
            count = max(1, math.ceil(obj.last_seq / transcript.PAGE_SIZE))
            calls = self._pending_calls(obj)
            context["transcript"] = transcript.build_page(
                obj,
                transcript.parse_page(request.GET.get("page"), count),
                change_url=change_url,
                result_url=reverse("admin:agentmemory_conversation_tool_result", args=[obj.pk]),
                abandoned_ids=frozenset(call.tool_call_id for call in calls if call.abandoned),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    @staticmethod
    def _pending_calls(obj: Conversation) -> list[Any]:
        """``obj.pending_calls()``, read once per page (the field and the transcript use it)."""
        cached = getattr(obj, "_admin_pending_calls", None)
        if cached is None:
            cached = obj.pending_calls() if obj.pk is not None else []
            obj._admin_pending_calls = cached  # type: ignore[attr-defined]
        return cached

    def tool_result_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Redirects to the transcript page and anchor of the result of tool call ``?call=``
        made at seq ``?after=``; back to the call, with a message, when none is stored."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(_("No conversation with id %(id)r.") % {"id": object_id})
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        call_id = request.GET.get("call", "")
        after = request.GET.get("after", "")
        if (
            not call_id
            or text_problem(call_id)
            or not after.isascii()
            or not after.isdigit()
            or len(after) > 18
        ):
            return HttpResponseBadRequest(
                _("Give ?call=<tool call id>&after=<seq of the AI message>."),
                content_type="text/plain; charset=utf-8",
            )
        change_url = reverse("admin:agentmemory_conversation_change", args=[obj.pk])
        target = transcript.result_redirect(obj, call_id, after=int(after), change_url=change_url)
        if target is None:
            self.message_user(
                request,
                _("No result is stored for tool call %(id)s.") % {"id": call_id},
                messages.WARNING,
            )
            anchor = transcript.call_anchor(int(after), call_id)
            return HttpResponseRedirect(f"{change_url}?page={transcript.page_of(int(after))}#{anchor}")
        return HttpResponseRedirect(target)

    def context_window_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What the model would be sent now: ``ContextWindowBuilder(conversation).build()``
        with ``max_tokens`` (default the ``CONVERSATION_HISTORY_TOKEN_LIMIT`` of the agent
        registered under the conversation's key, ``agent_registry.window_budget``, else
        ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``),
        ``max_messages`` and ``memory_recall`` (``on``, ``off``, or when absent what the agent
        registered under the conversation's key sends, ``agent_registry.memory_recall_enabled``)
        from the query string, and the window's accounting. Facts the block recalls are not
        marked recalled (``unrecorded_recalls``)."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(_("No conversation with id %(id)r.") % {"id": object_id})
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        conf = app_settings()
        # by default, the window of the agent registered under the conversation's key
        registered = window_budget(obj.agent_key)
        default_tokens = min(
            registered[0] if registered else conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT,
            conf.MAX_CONTEXT_TOKENS,
        )
        errors: list[str] = []
        max_tokens = int_param(
            request, "max_tokens", default_tokens, minimum=1, maximum=conf.MAX_CONTEXT_TOKENS, errors=errors
        )
        max_messages = int_param(request, "max_messages", None, minimum=0, maximum=10**9, errors=errors)
        recall_choice = request.GET.get("memory_recall", "").strip()
        if recall_choice not in ("", "on", "off"):
            errors.append(str(_("memory_recall must be on or off.")))
            recall_choice = ""
        # by default, what the agent registered under the conversation's key sends
        recall_default = memory_recall_enabled(obj.agent_key)
        memory_recall = recall_default if not recall_choice else recall_choice == "on"
        recall_scope = memory_scope(obj.agent_key)
        window = None
        budget_error = None
        entries: list[dict[str, Any]] = []
        if not errors:
            counter = get_token_counter()
            try:
                # the memory block in the scope the API's context endpoint uses: that of
                # the agent registered under the conversation's agent key, else the
                # conversations and facts of that key (all of the owner's when it has none)
                builder = ContextWindowBuilder(
                    obj,
                    token_counter=counter,
                    memory_recall=memory_recall,
                    memory_agent_key=recall_scope[0],
                    memory_namespace=recall_scope[1],
                )
                with unrecorded_recalls():  # a preview: no fact is marked recalled
                    window = builder.build(max_tokens, max_messages=max_messages)
            except ContextBudgetExceeded as exc:
                budget_error = exc
            except ConversationStateError as exc:
                # bookkeeping written by hand (the API's 409 conversation_inconsistent): the
                # page says what disagrees and how to repair it, instead of a server error
                errors.append(str(exc))
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
                                else transcript.pretty_text(message.content)[0]
                                if message.role == "tool"
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
        entries, hidden = newest_shown(entries)
        left_out = None
        if window is not None and window.first_seq is not None:
            floor = max(window.summary_through_seq or 0, obj.pinned_through)
            if window.first_seq > floor + 1:
                # Seqs below the oldest stored message were deleted (``clear()``, retention):
                # not left out. Apart from the pinned run, the stored seqs run without a
                # hole up to ``last_seq`` (appends number them in order; deletions take the
                # oldest), so the conversation row gives the oldest without a query.
                kept = obj.message_count - obj.pinned_count
                floor = max(floor, obj.last_seq - kept)
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
            "recall_choice": recall_choice,
            "recall_scope": recall_scope,
            # which rule chose the scope: the registered agent's (named), else the key's own
            "recall_agent": _agent_path(find(obj.agent_key)),
            "memory_recall": memory_recall,
            "recall_default": recall_default,
            "left_out": left_out,
            "hidden": hidden,
            "shown_from": next((e["message"].seq for e in entries if e["is_history"]), None),
            "remaining": (window.max_tokens - window.total_tokens) if window else None,
            "messages_url": changelist_url(Message, conversation__id__exact=obj.pk),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "agentmemory/admin/context_window.html", context, status=400 if errors else 200
        )
