"""The message admin: read-only history, paginated, filtered by conversation."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import (
    HttpRequest,
)
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from agentmemory.admin.utils import (
    PRE_STYLE,
    BoundedCountPaginator,
    ReadOnlyAdmin,
    admin_link,
    filtered_conversation_id,
    pretty_json,
    short_datetime,
)
from agentmemory.models import Message


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
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
        return short_datetime(obj.created_at)

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
        return format_html('<pre style="{}">{}</pre>', PRE_STYLE, obj.content)

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
        return format_html('<pre style="{}">{}</pre>', PRE_STYLE, "\n".join(lines))

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
        if filtered_conversation_id(request) is not None:
            return [name for name in self.list_display if name != "conversation"]
        return self.list_display

    changelist_title = _("Messages of %(name)s")
