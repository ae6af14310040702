"""``PersistentChatHistory`` and the context builder with a database router that keeps
agentmemory on a second database: every write and read goes there, none to ``default``."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import LengthTokenCounter

pytestmark = pytest.mark.django_db(databases=["default", "secondary"], transaction=True)


class MemoryRouter:
    """Sends the agentmemory app to the ``secondary`` database, the rest to ``default``."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "secondary" if model._meta.app_label == "agentmemory" else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return None


ROUTED = override_settings(DATABASE_ROUTERS=[f"{__name__}.MemoryRouter"])


def _rows(alias: str) -> int:
    return Message.objects.using(alias).count()


@ROUTED
def test_appends_reads_and_clear_go_to_the_routed_database() -> None:
    conv = Conversation.objects.create(agent_key="routed")
    assert Conversation.objects.using("secondary").filter(pk=conv.pk).exists()
    history = PersistentChatHistory(conv.uuid, token_counter=LengthTokenCounter())  # found by uuid there
    stored = history.add_messages(
        [ChatMessage.human("hi"), ChatMessage.ai(None, [ToolCall("c1", "lookup"), ToolCall("c2", "lookup")])]
    )
    history.add_message(ChatMessage.tool("one", tool_call_id="c1"))
    history.add_message(ChatMessage.human("and the other?"))
    assert (_rows("secondary"), _rows("default")) == (4, 0)
    assert [m.seq for m in history.get_messages()] == [1, 2, 3, 4]
    assert [m.seq for m in history.messages_after(stored[0].id)] == [2, 3, 4]

    conv = Conversation.objects.get(pk=conv.pk)
    assert [c.tool_call_id for c in conv.pending_calls()] == ["c2"]
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert [m.seq for m in window.history] == [1, 4] and window.skipped_pending == (2, 3)

    cancelled = history.cancel_pending_tool_calls("gone")
    assert [(m.tool_call_id, m.seq) for m in cancelled] == [("c2", 5)]
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert [m.seq for m in window.history] == [1, 2, 3, 5, 4]

    history.clear()
    assert (_rows("secondary"), _rows("default")) == (0, 0)
    assert history.add_message(ChatMessage.human("again")).seq == 6


@ROUTED
def test_a_transaction_open_on_default_does_not_hold_the_append() -> None:
    """An append opens its transaction on the routed database: one open on ``default`` (a
    view under ``ATOMIC_REQUESTS``) neither wraps it nor is needed for its row lock."""
    from django.db import transaction

    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    with transaction.atomic(using="default"):
        history.add_messages([ChatMessage.human("q"), ChatMessage.ai(None, [ToolCall("c", "t")])])
        assert not connections["secondary"].in_atomic_block
    # committed on the routed database although the transaction on default is long gone
    assert Message.objects.using("secondary").filter(conversation_id=conv.pk).count() == 2


def test_new_messages_are_embedded_after_the_routed_database_commits(settings) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from agentmemory.models import MessageEmbedding

    # the router through the settings fixture too: an override made inside an
    # override_settings block would bring the block's settings back when it is undone
    settings.DATABASE_ROUTERS = [f"{__name__}.MemoryRouter"]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "embedding"}
    owner = get_user_model().objects.db_manager("secondary").create(username="routed-owner")
    conv = Conversation.objects.create(owner_id=owner.pk, agent_key="routed")
    with transaction.atomic(using="secondary"):
        PersistentChatHistory(conv).add_messages([ChatMessage.human("hello there")])
        # the model is called after the commit of the database that holds the message
        assert MessageEmbedding.objects.using("secondary").count() == 0
    assert MessageEmbedding.objects.using("secondary").count() == 1
    assert MessageEmbedding.objects.using("default").count() == 0
