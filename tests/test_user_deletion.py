"""Deleting a user deletes their conversations, messages and summaries: from the admin (a
superuser, on a confirmation page that counts rows instead of listing them) and from code,
also while appends are running (PostgreSQL)."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import connection

from agentmemory.admin import SummarisedDeletionMixin
from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary


def fill(conversation: Conversation, messages: int) -> None:
    """``messages`` stored messages (human/ai pairs), written in batches through the store."""
    history = PersistentChatHistory(conversation)
    batch = []
    for i in range(messages // 2):
        batch += [ChatMessage.human(f"question {i}"), ChatMessage.ai(f"answer {i}")]
        if len(batch) >= 1000:
            history.add_messages(batch)
            batch = []
    if batch:
        history.add_messages(batch)


@pytest.fixture
def owner_with_history(django_user_model):  # type: ignore[no-untyped-def]
    owner = django_user_model.objects.create_user("alice", password="pw")
    keep = django_user_model.objects.create_user("bob", password="pw")
    convs = [Conversation.objects.create(owner=owner, title=f"chat {i}") for i in range(2)]
    for conv in convs:
        fill(conv, 1500)
        Summary.objects.create(conversation=conv, text="earlier", first_seq=1, through_seq=10)
    others = Conversation.objects.create(owner=keep, title="bob's")
    fill(others, 4)
    return owner, keep, others


def test_the_user_admin_gets_the_summarised_confirmation_page():
    assert isinstance(admin.site._registry[get_user_model()], SummarisedDeletionMixin)


@pytest.mark.django_db
def test_superuser_deletes_a_user_with_3000_messages_from_the_admin(
    admin_client, owner_with_history, django_assert_max_num_queries
):
    owner, _keep, others = owner_with_history
    url = f"/admin/auth/user/{owner.pk}/delete/"
    with django_assert_max_num_queries(25):
        page = admin_client.get(url)
    assert page.status_code == 200
    body = page.content.decode()
    assert "Are you sure" in body and not page.context["perms_lacking"]
    assert len(body) < 60_000  # two conversation lines and counts, not 3,000 message lines
    assert "chat 0" in body and "chat 1" in body and "question 7" not in body
    counts = dict(page.context["model_count"])
    assert counts["messages"] == 3000 and counts["summaries"] == 2 and counts["conversations"] == 2

    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not get_user_model().objects.filter(pk=owner.pk).exists()
    assert list(Conversation.objects.values_list("pk", flat=True)) == [others.pk]
    assert Message.objects.count() == 4 and not Summary.objects.exclude(conversation=others).exists()


@pytest.mark.django_db
def test_bulk_delete_action_on_users_uses_the_counts_too(admin_client, owner_with_history):
    owner, keep, _others = owner_with_history
    response = admin_client.post(
        "/admin/auth/user/", {"action": "delete_selected", "_selected_action": [owner.pk, keep.pk]}
    )
    assert response.status_code == 200 and not response.context["perms_lacking"]
    assert dict(response.context["model_count"])["messages"] == 3004
    assert len(response.content) < 60_000


@pytest.mark.django_db
def test_conversation_admin_delete_page_is_small_too(admin_client, owner_with_history):
    conv = Conversation.objects.filter(title="chat 0").get()
    page = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/delete/")
    assert page.status_code == 200 and not page.context["perms_lacking"]
    assert len(page.content) < 60_000


@pytest.mark.django_db
def test_user_delete_from_code_deletes_conversations_messages_and_summaries(owner_with_history):
    owner, _keep, others = owner_with_history
    owner.delete()
    assert list(Conversation.objects.values_list("pk", flat=True)) == [others.pk]
    assert set(Message.objects.values_list("conversation_id", flat=True)) == {others.pk}
    assert not Summary.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["instance", "queryset"])
def test_user_delete_during_appends_neither_fails_nor_leaves_rows(django_user_model, how):
    for attempt in range(4):
        owner = django_user_model.objects.create_user(f"user{attempt}", password="pw")
        convs = [Conversation.objects.create(owner=owner) for _ in range(2)]
        stop = threading.Event()
        errors: list[str] = []
        appended: list[int] = []

        def append(
            conv_pk: int,
            stop: threading.Event = stop,
            errors: list[str] = errors,
            appended: list[int] = appended,
        ) -> None:
            from django.db import connection as thread_connection

            try:
                while not stop.is_set():
                    PersistentChatHistory(conv_pk).add_messages(
                        [ChatMessage.human("still here"), ChatMessage.ai("yes")]
                    )
                    appended.append(conv_pk)
            except ConversationNotFound:
                pass  # the conversation is gone: what a late appender must see
            except Exception as exc:  # any other error is the failure under test
                errors.append(repr(exc))
            finally:
                thread_connection.close()

        threads = [threading.Thread(target=append, args=(c.pk,)) for c in convs for _ in range(3)]
        for thread in threads:
            thread.start()
        while len(appended) < 6:
            time.sleep(0.005)
        if how == "instance":
            owner.delete()
        else:
            django_user_model.objects.filter(pk=owner.pk).delete()
        stop.set()
        for thread in threads:
            thread.join()
        assert errors == []
        with connection.cursor() as cursor:
            ids = [c.pk for c in convs]
            for model in (Message, Summary, Conversation):
                column = "id" if model is Conversation else "conversation_id"
                cursor.execute(f"SELECT COUNT(*) FROM {model._meta.db_table} WHERE {column} = ANY(%s)", [ids])
                assert cursor.fetchone()[0] == 0, model
