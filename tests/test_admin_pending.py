"""The admin shows a conversation's pending tool calls and cancels them (one conversation
from its page, or many with the changelist action)."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(db) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(title="waiting")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("book it"),
            ChatMessage.ai(
                None,
                (
                    ToolCall(id="call_pay", name="charge_card", arguments={"amount": 12}),
                    ToolCall(id="call_mail", name="send_mail", arguments={}),
                ),
            ),
            ChatMessage.tool("sent", tool_call_id="call_mail", name="send_mail"),
        ]
    )
    conv.refresh_from_db()
    assert conv.pending_tool_calls == {"call_pay": 2}
    return conv


def test_change_page_lists_pending_calls_with_tool_seq_and_age(
    admin_client, waiting, django_assert_max_num_queries
):
    with django_assert_max_num_queries(15):
        page = admin_client.get(f"/admin/agentmemory/conversation/{waiting.pk}/change/")
    body = page.content.decode()
    assert page.status_code == 200
    pending_field = body[body.index("field-pending_calls_display") :]
    pending_field = pending_field[: pending_field.index("</table>")]
    assert "call_pay" in pending_field and "charge_card" in pending_field
    assert "call_mail" not in pending_field  # answered
    assert "?page=1#msg-2" in pending_field and " ago" in pending_field  # the AI message in the transcript
    # the transcript marks the call still waiting, and links the answered one to its result
    pay = body[body.index('data-call-id="call_pay"') :]
    assert "pending: no result yet" in pay[: pay.index("</details>")]
    mail = body[body.index('data-call-id="call_mail"') :]
    assert 'href="#msg-3"' in mail[: mail.index("</details>")]
    assert "Cancel pending tool calls" in body


def test_change_page_without_pending_calls_offers_no_cancel(admin_client, db):
    conv = Conversation.objects.create()
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hi")])
    body = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/change/").content.decode()
    assert "Cancel pending tool calls" not in body


def test_cancel_button_answers_the_pending_call(admin_client, waiting):
    url = f"/admin/agentmemory/conversation/{waiting.pk}/cancel-pending-tool-calls/"
    assert admin_client.get(url).status_code == 405
    response = admin_client.post(url)
    assert response.status_code == 302 and response["Location"].endswith(f"/{waiting.pk}/change/")
    waiting.refresh_from_db()
    assert waiting.pending_tool_calls == {}
    result = Message.objects.get(conversation=waiting, seq=4)
    assert (result.role, result.tool_call_id) == (Role.TOOL, "call_pay")
    assert result.content.startswith("Error: the tool call was cancelled in the admin by admin")


def test_cancel_action_on_the_changelist(admin_client, waiting):
    idle = Conversation.objects.create()
    response = admin_client.post(
        "/admin/agentmemory/conversation/",
        {"action": "cancel_pending_tool_calls", "_selected_action": [waiting.pk, idle.pk]},
        follow=True,
    )
    assert "1 pending tool call answered" in response.content.decode()
    waiting.refresh_from_db()
    assert waiting.pending_tool_calls == {} and waiting.last_seq == 4


def test_staff_without_change_permission_cannot_cancel(client, django_user_model, waiting):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client.force_login(viewer)
    url = f"/admin/agentmemory/conversation/{waiting.pk}/cancel-pending-tool-calls/"
    assert client.post(url).status_code == 403
    assert (
        "Cancel pending tool calls"
        not in client.get(f"/admin/agentmemory/conversation/{waiting.pk}/change/").content.decode()
    )
    waiting.refresh_from_db()
    assert waiting.pending_tool_calls == {"call_pay": 2}
