"""``manage.py chat_frameworks_demo``: each framework's two scripted turns end up stored as a
conversation of the owner, tool exchanges included."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from agentmemory.models import Conversation


@pytest.mark.django_db(transaction=True)
def test_the_demo_stores_each_frameworks_turns(django_user_model) -> None:  # type: ignore[no-untyped-def]
    ann = django_user_model.objects.create_user("ann")
    out = StringIO()
    call_command("chat_frameworks_demo", "--owner", "ann", stdout=out)
    text = out.getvalue()
    assert "openai-agents: conversation" in text and "6 messages" in text
    assert "langchain: conversation" in text and "4 messages" in text
    assert "pydantic-ai: conversation" in text
    assert "[calls lookup_order" in text
    assert Conversation.objects.filter(owner=ann).count() == 3
    # run again: the sessions start afresh instead of growing
    call_command("chat_frameworks_demo", "--owner", "ann", "--framework", "openai-agents", stdout=StringIO())
    assert (
        Conversation.objects.filter(owner=ann, agent_key="support", title="demo-order-1042")
        .get()
        .message_count
        == 6
    )
