"""Deleting a conversation while others append to it (S2 under concurrency, PostgreSQL)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("how", ["instance", "queryset"])
def test_delete_during_appends_neither_fails_nor_leaves_rows(how: str) -> None:
    for _ in range(5):
        conv = Conversation.objects.create()
        stop = threading.Event()
        errors: list[str] = []

        def append(conv_pk: int = conv.pk, stop: threading.Event = stop, errors: list[str] = errors) -> None:
            from django.db import connection as thread_connection

            try:
                while not stop.is_set():
                    PersistentChatHistory(conv_pk).add_message(ChatMessage.human("still here"))
            except ConversationNotFound:
                pass  # the conversation is gone: what a late appender must see
            except Exception as exc:  # any other error is the failure under test
                errors.append(repr(exc))
            finally:
                thread_connection.close()

        threads = [threading.Thread(target=append) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.05)
        if how == "instance":
            conv.delete()
        else:
            Conversation.objects.filter(pk=conv.pk).delete()
        stop.set()
        for thread in threads:
            thread.join()
        assert errors == []
        with connection.cursor() as cursor:
            table = Message._meta.db_table
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE conversation_id = %s", [conv.pk])
            assert cursor.fetchone()[0] == 0
