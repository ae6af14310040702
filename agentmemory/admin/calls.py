"""The model-call admin: every recorded call (chat, compaction, embedding) read-only, the
usage totals of what the list shows, and a page that shows a chat call's window exactly as
it was sent, rebuilt from storage (``ModelCall.window()``)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agentmemory.admin.utils import (
    BoundedCountPaginator,
    ReadOnlyAdmin,
    admin_link,
    newest_shown,
    pretty_json,
    short_conversation,
    short_datetime,
)
from agentmemory.calls import (
    WindowUnavailable,
    recorded_knowledge_facts,
    recorded_memory,
    recorded_memory_tokens,
    recorded_provider_changes,
)
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.formats import changes as sent
from agentmemory.messages import ChatMessage
from agentmemory.models import ModelCall, ModelCallKind, UsageSource
from agentmemory.usage import usage_totals

__all__ = ["ModelCallAdmin", "sent_change_notes"]

#: what the window page says of each kind of change the adapter made (``{sent}``, ``{kept}``)
_SENT_CHANGE_TEXTS = {
    sent.IMAGE_PLACEHOLDER: _("sent as its placeholder text, not as an image"),
    sent.AUDIO_PLACEHOLDER: _("sent as its placeholder text, not as audio"),
    sent.FILE_PLACEHOLDER: _("sent as its placeholder text, not as a file"),
    sent.MEDIA_TYPE_CORRECTED: _("sent with the media type {sent}"),
    sent.CONTENT_CUT: _("sent cut: its first {kept} characters, then the cut marker"),
    sent.CACHE_CONTROL_DROPPED: _("its cache breakpoint was left out"),
    sent.CACHE_TTL_SHORTENED: _("its cache breakpoint went with the default lifetime"),
    sent.ERROR_TEXT_ADDED: _("sent as \u201c{sent}\u201d"),
    sent.EMPTY_TEXT_ADDED: _("sent as \u201c{sent}\u201d"),
    sent.TRAILING_WHITESPACE_STRIPPED: _("sent without its trailing whitespace"),
}


def sent_change_notes(
    entries: list[dict[str, Any]], messages: list[ChatMessage]
) -> dict[int | None, list[str]]:
    """The notes the window page shows beside each message the adapter changed, by its
    position in ``messages`` (``None``: changes of no message shown, such as a tool
    declaration's cache breakpoint): ``"part 2 (image): sent as its placeholder text, not as
    an image. Anthropic takes ..."``. ``entries`` are ``recorded_provider_changes(call,
    messages)``."""
    notes: dict[int | None, list[str]] = {}
    for entry in entries:
        index, part = entry.get("message"), entry.get("part")
        change = str(entry["change"])
        if part is None:
            where = str(_("content"))
        else:
            kind = change.removesuffix("_placeholder") if change.endswith("_placeholder") else ""
            if not kind and index is not None and part < len(messages[index].parts):
                kind = messages[index].parts[part].kind.value
            where = f"{_('part')} {part + 1}" + (f" ({kind})" if kind else "")
        template = str(_SENT_CHANGE_TEXTS.get(change, change))
        what = template.format(
            sent=entry.get("sent") or "", kept=number_format(entry.get("kept") or 0, force_grouping=True)
        )
        notes.setdefault(index, []).append(f"{where}: {what}. {entry['reason']}")
    return notes


@admin.register(ModelCall)
class ModelCallAdmin(ReadOnlyAdmin):
    change_list_template = "agentmemory/admin/model_call_change_list.html"
    # Short columns: the list must fit a 1,366 px screen beside the filters.
    list_display = (
        "created",
        "kind_short",
        "conversation_short",
        "agent_key",
        "model",
        "tool_round",
        "tokens",
        "window_link",
    )
    list_display_links = ("created",)
    list_select_related = ("conversation",)
    list_filter = ("kind", "usage_source", "agent_key", "model")
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    show_full_result_count = False
    paginator = BoundedCountPaginator
    ordering = ("-created_at", "-id")
    sortable_by = ("created",)
    fields = (
        "kind",
        "created_at",
        "conversation_link",
        "message_link",
        "owner",
        "agent_key",
        "model",
        "round",
        "finish_reason",
        "latency",
        "input_tokens",
        "cached_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
        "usage_source",
        "cost",
        "window_link",
        "max_tokens",
        "first_seq",
        "last_seq",
        "summary",
        "system_tokens",
        "knowledge_tokens",
        "summary_tokens",
        "memory_tokens",
        "history_tokens",
        "tools_tokens",
        "changes_display",
    )
    readonly_fields = fields

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: ModelCall) -> str:
        return short_datetime(obj.created_at)

    @admin.display(description=_("kind"), ordering="kind")
    def kind_short(self, obj: ModelCall) -> str:
        return str(obj.kind)

    @admin.display(description=_("conversation"))
    def conversation_short(self, obj: ModelCall) -> str:
        return short_conversation(obj.conversation)

    @admin.display(description=_("tokens in / out"))
    def tokens(self, obj: ModelCall) -> str:
        """Input / output tokens, marked when agentmemory counted them (the provider reported
        no usage)."""
        sent = number_format(obj.input_tokens, force_grouping=True)
        text = f"{sent} / {number_format(obj.output_tokens, force_grouping=True)}"
        return f"{text} ({_('counted')})" if obj.usage_source == UsageSource.COUNTED else text

    @admin.display(description=_("round"), ordering="round")
    def tool_round(self, obj: ModelCall) -> int:
        return obj.round

    @admin.display(description=_("window"))
    def window_link(self, obj: ModelCall) -> str:
        if obj.kind != ModelCallKind.CHAT or obj.conversation_id is None:
            return "-"
        url = reverse("admin:agentmemory_modelcall_window", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("as sent"))

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: ModelCall) -> str:
        return admin_link(obj.conversation) if obj.conversation_id else "-"

    @admin.display(description=_("AI message"))
    def message_link(self, obj: ModelCall) -> str:
        message = obj.message
        return admin_link(message, f"#{message.seq}") if message is not None else "-"

    @admin.display(description=_("cost"))
    def cost(self, obj: ModelCall) -> str:
        totals = usage_totals(ModelCall.objects.filter(pk=obj.pk))
        return str(totals.cost) if totals.cost is not None else str(_("no price for this model"))

    @admin.display(description=_("memory block tokens"))
    def memory_tokens(self, obj: ModelCall) -> int:
        return recorded_memory_tokens(obj)

    @admin.display(description=_("window changes"))
    def changes_display(self, obj: ModelCall) -> str:
        return pretty_json(obj.window_changes) if obj.window_changes else "-"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ModelCall]:
        return super().get_queryset(request).select_related("conversation", "message", "owner")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data:
            changelist = response.context_data.get("cl")
            if changelist is not None:
                # the totals of everything the filters select: one aggregate query
                response.context_data["usage_totals"] = usage_totals(changelist.queryset)
        return response

    # -- the window page -------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        urls = [
            path(
                "<path:object_id>/window/",
                self.admin_site.admin_view(self.window_view),
                name="agentmemory_modelcall_window",
            )
        ]
        return urls + super().get_urls()

    def window_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The messages a chat call sent, rebuilt from storage, with its token accounting."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(_("No model call with id %(id)r.") % {"id": object_id})
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        entries: list[dict[str, Any]] = []
        error = None
        tools: list[dict[str, Any]] = []
        try:
            messages = obj.window()
            tools = obj.tools()
        except WindowUnavailable as exc:
            error = str(exc)
            messages = []
        # no notes beside a window that cannot be shown
        notes = sent_change_notes(recorded_provider_changes(obj, messages), messages) if messages else {}
        leading = 1 + (1 if obj.summary_digest else 0) if obj.system_prompt_digest else 0
        for index, message in enumerate(messages):
            part = "history"
            if MEMORY_BLOCK_KEY in message.metadata:
                part = "memory block"
            elif index < leading:
                part = "system" if index == 0 and obj.system_prompt_digest else "summary"
            entries.append(
                {
                    "part": part,
                    "message": message,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "name": call.name,
                            "arguments": json.dumps(dict(call.arguments), indent=2, ensure_ascii=False),
                        }
                        for call in message.tool_calls
                    ],
                    "placeholder": bool(message.metadata.get("pending_tool_call")),
                    "sent_changes": notes.get(index, []),
                }
            )
        entries, left_out = newest_shown(entries)
        context = {
            **self.admin_site.each_context(request),
            "left_out": left_out,
            "shown_from": next((e["message"].seq for e in entries if e["part"] == "history"), None),
            "title": _("Window sent"),
            "subtitle": str(obj),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": obj,
            "entries": entries,
            "error": error,
            "tools": json.dumps(tools, indent=2, ensure_ascii=False) if tools else "",
            "memory_tokens": recorded_memory_tokens(obj),
            "parts": window_parts(obj, messages),
            "unplaced_changes": notes.get(None, []),
            "more_changes": (obj.window_changes or {}).get("provider_changes_more") or 0,
            "window_tokens": obj.system_tokens
            + obj.knowledge_tokens
            + obj.summary_tokens
            + recorded_memory_tokens(obj)
            + obj.history_tokens,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request, "agentmemory/admin/model_call_window.html", context, status=404 if error else 200
        )


def window_parts(call: ModelCall, messages: list[ChatMessage]) -> list[tuple[str, int]]:
    """The window page's accounting of what ``call`` sent, part by part, as ``(label,
    tokens)``: the system prompt's own text, the knowledge block at its end (with how many
    facts it showed), the summary, the memory block (with how many items, and what it quoted
    or that its words were removed since) and the history; they add up to the window's
    tokens (every message sent)."""
    facts = len(recorded_knowledge_facts(call))
    knowledge = str(_("Knowledge block (end of the system prompt)"))
    if facts:
        knowledge = ngettext(
            "Knowledge block (end of the system prompt, %(count)d fact)",
            "Knowledge block (end of the system prompt, %(count)d facts)",
            facts,
        ) % {"count": facts}
    memory_label = str(_("Memory block"))
    block = recorded_memory(call, messages) if messages else None
    if block is not None:
        items = ngettext("%(count)d item", "%(count)d items", block.item_count) % {"count": block.item_count}
        if block.removed:
            quoted = str(_("its words removed since"))
        else:
            conversations = len(block.conversation_ids)
            quoted = str(_("quoting %(conversations)s and %(facts)s")) % {
                "conversations": ngettext("%(count)d conversation", "%(count)d conversations", conversations)
                % {"count": conversations},
                "facts": ngettext("%(count)d fact", "%(count)d facts", len(block.fact_ids))
                % {"count": len(block.fact_ids)},
            }
        memory_label = f"{memory_label} ({items}, {quoted})"
    return [
        (str(_("System prompt (its own text)")), call.system_tokens),
        (knowledge, call.knowledge_tokens),
        (str(_("Summary")), call.summary_tokens),
        (memory_label, recorded_memory_tokens(call)),
    ]
