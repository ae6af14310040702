"""Lock order across tables on PostgreSQL (docs/architecture.md, "Lock order"): conversations
before facts, each in ascending id. Deleting a conversation locks it and then sets
``source_message`` to NULL on the facts quoting its messages, and the memory flush locks the
conversation before it writes facts whose foreign key names its messages; the check of a
recorded model call took the facts it quoted first and the conversations after, and
deadlocked with such a delete. Deleting facts let Django's collector lock them in scan order
(the history first, then the rest) and deadlocked with the recall counters.

Each test holds one row in another session, runs the path until it waits for that row, and
asserts what it holds meanwhile: nothing, in the documented order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connections

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message, ModelCall
from agentmemory.recording import redact_if_quoted_gone
from tests.helpers_concurrency import database_url, wait_for_a_lock_wait
from tests.test_postgres_lock_order import _facts, _waits_holding

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _holds_while_waiting(
    held_table: str, held_id: int, probe_table: str, probe_ids: list[int], action: Callable[[], Any]
) -> list[int]:
    """Lock row ``held_id`` of ``held_table`` in another session, run ``action`` in a thread
    until it waits for a lock, and return which of ``probe_ids`` (rows of ``probe_table``) it
    holds meanwhile."""
    holder = psycopg.connect(database_url(), autocommit=False)
    holder.execute("SET lock_timeout = '20s'")
    holder.execute(f"SELECT id FROM {held_table} WHERE id = %s FOR UPDATE", [held_id])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    held = []
    try:
        with psycopg.connect(database_url(), autocommit=True) as probe:
            if not wait_for_a_lock_wait(probe, holder.info.backend_pid):
                raise AssertionError("the action never waited for the held row")
            for pk in probe_ids:
                try:
                    probe.execute(f"SELECT id FROM {probe_table} WHERE id = %s FOR UPDATE NOWAIT", [pk])
                except psycopg.errors.LockNotAvailable:
                    held.append(pk)
    finally:
        holder.rollback()
        holder.close()
        thread.join(30)
    assert errors == []
    return held


def test_checking_a_recorded_call_locks_the_conversation_before_the_facts(django_user_model) -> None:
    """A delete of the conversation holds its row and next clears ``source_message`` on the
    fact: the check must not hold that fact while it waits for the conversation."""
    owner = django_user_model.objects.create(username="recorded")
    conv = Conversation.objects.create(owner=owner)
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("My home city: Porto"), ChatMessage.ai("Noted.")]
    )
    first = Message.objects.get(conversation=conv, seq=1)
    fact = KnowledgeMemory(owner.pk).store("My home city: Porto", source_message=first).fact
    call = ModelCall(
        owner_id=owner.pk,
        window_changes={"memory": {"sources": {"conversations": [conv.pk], "facts": [fact.pk]}}},
    )
    held = _holds_while_waiting(
        Conversation._meta.db_table,
        conv.pk,
        Fact._meta.db_table,
        [fact.pk],
        lambda: redact_if_quoted_gone(call),
    )
    assert held == []


def test_deleting_facts_locks_them_and_their_history_in_id_order(django_user_model) -> None:
    owner = django_user_model.objects.create(username="forgotten")
    ids = _facts(owner)
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)  # its new version now comes last in the heap
    assert (
        _waits_holding(
            Fact._meta.db_table, ids, lambda: Fact.objects.filter(pk__in=ids).delete(), seqscan=True
        )
        == []
    )
    assert not Fact.objects.filter(pk__in=ids).exists()

    memory = KnowledgeMemory(owner.pk)
    old = memory.store("Home city: Porto").fact
    ids = sorted([old.pk, *_facts(owner, 3)])
    head = memory.store("Home city: Lisbon").fact  # supersedes ``old``, which goes with it
    assert Fact.objects.get(pk=old.pk).superseded_by_id == head.pk
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)
    assert (
        _waits_holding(
            Fact._meta.db_table,
            [*ids, head.pk],
            lambda: Fact.objects.filter(pk__in=[*ids[1:], head.pk]).delete(),
            seqscan=True,
        )
        == []
    )
    assert not Fact.objects.filter(pk__in=[*ids, head.pk]).exists()
