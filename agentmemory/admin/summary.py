"""The summary admin: read-only, the history of a conversation's summaries."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from agentmemory.admin.utils import (
    PRE_STYLE,
    ReadOnlyAdmin,
    admin_link,
    short_conversation,
    short_datetime,
)
from agentmemory.llm.offline import OFFLINE_MODEL
from agentmemory.models import Summary


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    # Short columns: the list must fit a 1,366 px screen beside the filters.
    list_display = (
        "seqs",
        "conversation_short",
        "tokens",
        "model",
        "prompt_version",
        "created",
    )
    list_display_links = ("seqs",)
    list_select_related = ("conversation",)
    list_filter = ("prompt_version", "model", "created_at")
    search_fields = ("=conversation__uuid", "conversation__title")
    #: a title is at most 200 characters and a uuid 36: a longer search finds nothing
    max_search_chars = 1_000
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
        "summariser_calls",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description=_("conversation"))
    def conversation_short(self, obj: Summary) -> str:
        return short_conversation(obj.conversation)

    @admin.display(description=_("covers seqs"), ordering="through_seq")
    def seqs(self, obj: Summary) -> str:
        return f"{obj.first_seq}-{obj.through_seq}"

    @admin.display(description=_("tokens"), ordering="token_count")
    def tokens(self, obj: Summary) -> int:
        return obj.token_count

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Summary) -> str:
        return short_datetime(obj.created_at)

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj: Summary) -> str:
        return admin_link(obj.conversation)

    @admin.display(description=_("previous summary"))
    def previous_link(self, obj: Summary) -> str:
        return admin_link(obj.previous) if obj.previous_id else "-"

    @admin.display(description=_("summariser calls"))
    def summariser_calls(self, obj: Summary) -> str:
        """``Summary.llm_calls``: calls of the summariser, each a model call, but those of the
        offline extractive summariser, which reads the messages without a model (its summary
        says so in its first line)."""
        if obj.model == OFFLINE_MODEL:
            return ngettext(
                "%(calls)s pass of the offline extractive summariser; no model was called",
                "%(calls)s passes of the offline extractive summariser; no model was called",
                obj.llm_calls,
            ) % {"calls": obj.llm_calls}
        return str(obj.llm_calls)

    @admin.display(description=_("text"))
    def text_display(self, obj: Summary) -> str:
        return format_html('<pre style="{}">{}</pre>', PRE_STYLE, obj.text)

    changelist_title = _("Summaries of %(name)s")
