"""The message admin: read-only history, newest first, searched by text, filtered by agent,
conversation, role and tool calls, with a count that never scans the whole table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db import connections
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from agentmemory.admin.transcript import pretty_text, reverse_page
from agentmemory.admin.utils import (
    PRE_STYLE,
    BoundedCountPaginator,
    ReadOnlyAdmin,
    admin_link,
    filtered_conversation_id,
    pretty_json,
    short_conversation,
    short_datetime,
)
from agentmemory.models import Conversation, Message
from agentmemory.recall.fulltext import PG_CONFIG
from agentmemory.recall.text import STOP_WORDS, literal_words, query_words, unspaced_terms
from agentmemory.validation import parse_id


def fulltext_filter(queryset: QuerySet[Any], term: str, *, table: str) -> QuerySet[Any]:
    """``queryset`` (messages or facts: the tables with a full-text index, named ``table``)
    narrowed to the rows whose text holds every word of ``term``.

    The words are ``agentmemory.recall.text.query_words(term)`` without stop words (letters
    and digits, lower case), so the same words are searched on every database, and no
    full-text operator can come from the term:

    - PostgreSQL: the stored ``search_vector`` column (English stemming) through its GIN
      index, ``search_vector @@ to_tsquery('english', 'w1 & w2')``;
    - SQLite: the FTS5 table ``<table>_fts`` (Porter stemming), ``MATCH '"w1"
      "w2"'``;
    - any other database: ``content`` containing each word (``icontains``, not indexed).

    A word of a script written without spaces (Chinese, Japanese, Thai, Korean with its
    particles: ``agentmemory.recall.text.unspaced_terms``) is one long token to both indexes,
    never found inside a sentence through them: it is matched as a substring of the content
    as typed (``content__contains``, not indexed), as recall's own search does.

    A term with no word but stop words in it matches nothing.
    """
    # PostgreSQL's English configuration indexes no stop word: leave them out everywhere.
    words = [word for word in query_words(term) if word not in STOP_WORDS and not unspaced_terms([word])]
    inside = [word for word in literal_words(term) if unspaced_terms([word])]
    if not words and not inside:
        return queryset.none()
    for word in inside:
        queryset = queryset.filter(content__contains=word)
    if not words:
        return queryset
    vendor = connections[queryset.db].vendor
    if vendor == "postgresql":
        matched = RawSQL(
            f"{table}.search_vector @@ to_tsquery('{PG_CONFIG}'::regconfig, %s)",
            [" & ".join(words)],
            output_field=BooleanField(),
        )
        return queryset.filter(matched)
    if vendor == "sqlite":
        match = RawSQL(
            f"SELECT rowid FROM {table}_fts WHERE {table}_fts MATCH %s",
            [" ".join(f'"{w}"' for w in words)],
        )
        return queryset.filter(pk__in=match)
    condition = Q()
    for word in words:
        condition &= Q(content__icontains=word)
    return queryset.filter(condition)


def search_message_text(queryset: QuerySet[Message], term: str) -> QuerySet[Message]:
    """Messages of ``queryset`` whose text holds every word of ``term`` (``fulltext_filter``)."""
    return fulltext_filter(queryset, term, table=Message._meta.db_table)


class AgentFilter(admin.SimpleListFilter):
    """The conversation's agent key (one query for the keys in use, over the conversations)."""

    title = _("agent")
    parameter_name = "agent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        keys = (
            Conversation.objects.exclude(agent_key="")
            .order_by("agent_key")
            .values_list("agent_key", flat=True)
            .distinct()[:50]
        )
        return [(key, key) for key in keys]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value = self.value()
        return queryset.filter(conversation__agent_key=value) if value else queryset


class ToolCallsFilter(admin.SimpleListFilter):
    """AI messages that call tools (they open a tool exchange), tool results, or neither."""

    title = _("tool calls")
    parameter_name = "tools"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("calls", _("calls tools")),
            ("results", _("tool results")),
            ("none", _("no tools")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        # An AI message with tool calls is the only message whose exchange seq is its own seq.
        calls = Q(role="ai", exchange_seq__isnull=False)
        value = self.value()
        if value == "calls":
            return queryset.filter(calls)
        if value == "results":
            return queryset.filter(role="tool")
        if value == "none":
            return queryset.exclude(calls).exclude(role="tool")
        return queryset


class ConversationFilter(admin.SimpleListFilter):
    """One conversation: the one chosen, or one of the ten updated last (its pk in
    ``conversation__id__exact``, the parameter the conversation page links with)."""

    title = _("conversation")
    parameter_name = "conversation__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        recent = list(Conversation.objects.order_by("-updated_at", "-id").only("id", "uuid", "title")[:10])
        chosen = getattr(request, "_agentmemory_conversation", None)
        if chosen is not None and all(c.pk != chosen.pk for c in recent):
            recent.insert(0, chosen)
        return [(str(c.pk), c.label(28)) for c in recent]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value = self.value()
        if value is None:
            return queryset
        conversation_id = parse_id(value)
        return (
            queryset.filter(conversation_id=conversation_id)
            if conversation_id is not None
            else queryset.none()
        )


#: characters of a message's content the list reads for its preview column
PREVIEW_READ_CHARS = 1_000


class MessageChangeList(ChangeList):
    """The message list reads what its columns show: the first ``PREVIEW_READ_CHARS``
    characters of each content, not the content, its parts or its metadata (100 messages
    of 2 MB, ``MAX_MESSAGE_CHARS``, read 200 MB to show 72 characters of each)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Message]:
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer("content", "parts", "metadata").annotate(
            content_preview=Substr("content", 1, PREVIEW_READ_CHARS)
        )


class MessagePaginator(BoundedCountPaginator):
    """Counts at most 10,000 messages (100 pages of 100): past that the list says "10000+";
    search or filter to narrow it."""

    MAX_COUNT = 10_000


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("conversation_short", "seq", "role", "preview", "tool_names", "tokens", "created")
    list_display_links = ("seq",)
    change_list_template = "agentmemory/admin/message_change_list.html"
    list_select_related = ("conversation",)
    list_filter = (AgentFilter, "role", ToolCallsFilter, ConversationFilter)
    # Facet counts would be a COUNT per choice over every message of the table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    show_full_result_count = False
    # Newest first, read backwards on an index: the primary key over the whole table, the
    # unique (conversation, seq) index within one conversation (both orders are total, so
    # Django adds no tie-breaker that would defeat the index).
    ordering = ("-id",)
    sortable_by = ()
    paginator = MessagePaginator
    search_fields = ("content",)
    search_help_text = _(
        "Finds messages holding every word (whole words, any form: 'booking' finds 'booked')."
    )
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
        "model_call_link",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("conversation"))
    def conversation_short(self, obj: Message) -> str:
        return short_conversation(obj.conversation)

    @admin.display(description=_("content"))
    def preview(self, obj: Message) -> str:
        head = (
            getattr(obj, "content_preview", None) if "content" in obj.get_deferred_fields() else obj.content
        )
        if head is None:
            return "-"
        text = " ".join(head.split())
        if len(head) >= PREVIEW_READ_CHARS:
            text += " ..."  # more than was read: the cut is marked even when the rest was spaces
        return Truncator(text).chars(72)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return MessageChangeList

    @admin.display(description=_("tokens"))
    def tokens(self, obj: Message) -> int:
        return obj.token_count

    @admin.display(description=_("created"))
    def created(self, obj: Message) -> str:
        return short_datetime(obj.created_at)

    @admin.display(description=_("tools"))
    def tool_names(self, obj: Message) -> str:
        """The tool names, escaped, with a break opportunity after each "_" and "." so that
        "update_customer_address" wraps between its words in a narrow column."""
        if obj.tool_calls:
            names = ", ".join(str(call.get("name", "?")) for call in obj.tool_calls)
        else:
            names = obj.name if obj.role == "tool" else ""
        if not names:
            return ""
        return mark_safe(escape(names).replace("_", "_<wbr>").replace(".", ".<wbr>"))

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: Message) -> str:
        change_url = reverse("admin:agentmemory_conversation_change", args=[obj.conversation_id])
        return format_html(
            '{} &middot; <a href="{}">{}</a>',
            admin_link(obj.conversation),
            reverse_page(change_url, obj.seq),
            _("in the transcript"),
        )

    @admin.display(description=_("model call"))
    def model_call_link(self, obj: Message) -> str:
        """For an AI message an agent stored: the model call that produced it, with the window
        that call sent (one query, on the change page only)."""
        if obj.role != "ai":
            return "-"
        call = obj.model_calls.order_by("pk").only("pk", "kind", "conversation_id").first()
        if call is None:
            return "-"
        window = reverse("admin:agentmemory_modelcall_window", args=[call.pk])
        return format_html(
            '<a href="{}">{}</a> &middot; <a href="{}">{}</a>',
            reverse("admin:agentmemory_modelcall_change", args=[call.pk]),
            _("call %(id)s") % {"id": call.pk},
            window,
            _("the window as sent"),
        )

    @admin.display(description=_("content"))
    def content_display(self, obj: Message) -> str:
        if obj.content is None:
            return format_html("<em>{}</em>", _("null (the message only calls tools)"))
        text, _is_json = pretty_text(obj.content)
        return format_html('<pre style="{}">{}</pre>', PRE_STYLE, text)

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
            return [name for name in self.list_display if name != "conversation_short"]
        return self.list_display

    def get_ordering(self, request: HttpRequest) -> Any:
        if filtered_conversation_id(request) is not None:
            return ("-conversation_id", "-seq")
        return self.ordering

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        """Full-text search on the message text (``search_message_text``), a ``LIKE`` scan of
        the table only for a word of a script written without spaces; no duplicates are
        possible, so no ``DISTINCT``."""
        if not search_term.strip():
            return queryset, False
        return search_message_text(queryset, search_term), False

    changelist_title = _("Messages of %(name)s")
