"""The admin's message list and transcript read what they show of long messages, never the
whole contents: a page of two 50 MB messages (stored with a raised ``MAX_MESSAGE_CHARS``)
took 133 s and 720 MB to draw, and 40 tool results of 2 MB (the default maximum) made the
message list take 14 s."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agentmemory.admin.message import PREVIEW_READ_CHARS
from agentmemory.admin.transcript import READ_CHARS, SHOWN_CHARS
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db

#: longer than what either page reads
LONG = "<p>" + "rows of a fetched page " * 20_000 + "</p>"


@pytest.fixture
def fetched(admin_user) -> Conversation:  # type: ignore[no-untyped-def]
    assert len(LONG) > READ_CHARS
    conv = Conversation.objects.create(owner=admin_user, agent_key="web", title="Fetched")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Read https://example.com please."),
            ChatMessage.ai(None, [ToolCall("c1", "fetch", {"url": "https://example.com"})]),
            ChatMessage.tool(LONG, tool_call_id="c1", name="fetch"),
            ChatMessage.ai("It lists rows of a fetched page."),
        ]
    )
    return conv


def _whole_content_read(queries: list[dict[str, str]]) -> list[str]:
    """The statements that select a message's content whole (outside SUBSTR and LENGTH)."""
    column = re.compile(r'(SUBSTR(?:ING)?\(|LENGTH\()?\s*"agentmemory_message"\."content"', re.I)
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().upper().startswith("SELECT")
        and any(m.group(1) is None for m in column.finditer(q["sql"].split(" WHERE ")[0]))
    ]


def test_the_transcript_reads_what_it_shows_of_a_long_message(admin_client, fetched) -> None:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[fetched.pk]))
    assert response.status_code == 200
    assert _whole_content_read(queries.captured_queries) == []
    body = response.content.decode()
    assert "rows of a fetched page " * 10 in body and "It lists rows of a fetched page." in body
    # how much is left out counts the whole message, and links to it
    assert f"and {len(LONG) - SHOWN_CHARS} more characters" in body
    tool = Message.objects.get(conversation=fetched, role="tool")
    assert reverse("admin:agentmemory_message_change", args=[tool.pk]) in body


def test_a_json_result_the_transcript_reads_whole_is_still_reindented(admin_client, admin_user) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=admin_user, agent_key="web")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Status?"),
            ChatMessage.ai(None, [ToolCall("c1", "status", {})]),
            ChatMessage.tool('{"status": "shipped", "carrier": "DHL"}', tool_call_id="c1", name="status"),
        ]
    )
    body = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[conv.pk])).content.decode()
    assert "{\n  &quot;status&quot;: &quot;shipped&quot;," in body


def test_the_message_list_reads_only_the_preview_of_each_content(admin_client, fetched) -> None:  # type: ignore[no-untyped-def]
    for path in (
        reverse("admin:agentmemory_message_changelist"),
        reverse("admin:agentmemory_message_changelist") + f"?conversation__id__exact={fetched.pk}",
    ):
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(path)
        assert response.status_code == 200
        assert _whole_content_read(queries.captured_queries) == []
        body = response.content.decode()
        assert "&lt;p&gt;rows of a fetched page rows of a fetched page" in body
        assert "Read https://example.com please." in body


def test_a_preview_cut_after_spaces_is_marked_cut(admin_client, admin_user) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=admin_user, agent_key="web")
    PersistentChatHistory(conv).add_message(ChatMessage.human("Hello" + " " * PREVIEW_READ_CHARS + "world"))
    body = admin_client.get(reverse("admin:agentmemory_message_changelist")).content.decode()
    assert "Hello ..." in body and "world" not in body
