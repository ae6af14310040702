"""Cursor (keyset) pagination for the API: no ``COUNT(*)``, stable under concurrent appends."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class ConversationCursorPagination(CursorPagination):
    """Conversations, newest created first.

    Ordered by ``created_at`` rather than ``updated_at``: every append moves ``updated_at``,
    which would make a conversation skip or repeat between pages while a client pages through.
    """

    ordering = ("-created_at",)
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class MessageCursorPagination(CursorPagination):
    """Messages of one conversation in ``seq`` order (the only order; timestamps can tie or go backwards).

    ``seq`` is unique within a conversation, so the cursor is a plain keyset position on the
    ``(conversation, seq)`` index: a page costs one indexed range read whatever the length of
    the conversation, and appends never shift pages already read.
    """

    ordering = ("seq",)
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class SummaryCursorPagination(CursorPagination):
    """Summaries of one conversation, newest (highest ``through_seq``) first."""

    ordering = ("-through_seq",)
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
