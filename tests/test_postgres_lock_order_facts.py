"""Lock order of the writes that change or delete several facts, on PostgreSQL
(docs/architecture.md, "Lock order"): the owner's user row, the scope's lock, conversations,
then facts, each table in ascending id.

The memory flush wrote the facts of one summariser reply in the order the model listed them,
each superseding (and, with ``max_entries``, evicting) an older fact as it came: it held a
fact of a higher id while it waited for a lower one that a forget, the recall counters or a
conversation's delete held, and one of the two was killed with "deadlock detected". A fact
write took its owner's user row last, at the commit (Django's foreign keys are checked then),
while deleting the user takes that row first and the user's facts after it. Each test holds
one row in another session, runs the path until it waits for that row, and asserts what the
path holds meanwhile: nothing it would take later in the documented order."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.test import override_settings

from agentmemory.compaction import run_compaction
from agentmemory.knowledge import KnowledgeMemory, import_memory_md
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.models import Conversation, Fact
from tests.factories import UserFactory
from tests.helpers_concurrency import database_url, wait_for_a_lock_wait
from tests.test_memory_flush import AGENT, agents, conversation, fact, message_id, reply, scope  # noqa: F401
from tests.test_postgres_lock_order import _waits_holding
from tests.test_postgres_lock_order_deletes import _holds_while_waiting

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FACTS = Fact._meta.db_table


def _user_table() -> str:
    return get_user_model()._meta.db_table


def _flush(conv: Conversation, facts: list[dict[str, Any]]) -> Any:
    """A compaction of ``conv`` whose summariser reply lists ``facts`` in this order."""
    llm = ScriptedChatModel([json.dumps(reply(facts=facts))])
    return lambda: run_compaction(conv.pk, llm=llm)


# -- within one write: ascending id, whatever order the work comes in ----------------------


def test_a_flush_locks_the_facts_it_supersedes_in_id_order() -> None:
    """The reply names the successor of the newer fact first: the flush must not hold the
    newer fact while it waits for the older one."""
    user = UserFactory()
    memory = scope(user)
    city = memory.store("Caroline's home city: Porto", "personal", persistent=True).fact
    job = memory.store("Caroline's job: baker", "personal", persistent=True).fact
    conv = conversation(user)
    flush = _flush(conv, [fact("Caroline's job: teacher", 3), fact("Caroline's home city: Lisbon", 1)])

    assert _waits_holding(FACTS, [city.pk, job.pk], flush) == []

    city.refresh_from_db()
    job.refresh_from_db()
    assert Fact.objects.get(pk=city.superseded_by_id).content == "Caroline's home city: Lisbon"
    assert Fact.objects.get(pk=job.superseded_by_id).content == "Caroline's job: teacher"


def test_storing_a_fact_locks_what_it_supersedes_and_evicts_in_id_order() -> None:
    """A new "key:" fact supersedes a newer fact and, over ``max_entries``, evicts an older
    one: both are locked in ascending id before either is written."""
    user = UserFactory()
    memory = KnowledgeMemory(user, max_entries=1)
    unbounded = KnowledgeMemory(user)
    trivia = unbounded.store("Likes the colour teal", importance=0.1).fact
    city = unbounded.store("Home city: Porto", importance=0.9).fact

    assert _waits_holding(FACTS, [trivia.pk, city.pk], lambda: memory.store("Home city: Lisbon")) == []

    assert not Fact.objects.filter(pk=trivia.pk).exists()  # evicted
    assert Fact.objects.get(pk=city.pk).superseded_by.content == "Home city: Lisbon"


def test_importing_memory_md_locks_the_facts_it_supersedes_in_id_order() -> None:
    """The file's bullets replace two "key:" facts, the newer one first."""
    user = UserFactory()
    memory = KnowledgeMemory(user)
    city = memory.store("Home city: Porto", "personal", persistent=True).fact
    job = memory.store("Job: baker", "personal", persistent=True).fact
    text = "# MEMORY.md\n\n## personal\n- Job: teacher\n- Home city: Lisbon\n"

    assert _waits_holding(FACTS, [city.pk, job.pk], lambda: import_memory_md(memory, text)) == []

    assert sorted(memory.live_facts().values_list("content", flat=True)) == [
        "Home city: Lisbon",
        "Job: teacher",
    ]


def test_deleting_a_conversation_locks_the_facts_quoting_it_in_id_order() -> None:
    """The delete sets ``source_message`` to NULL on the facts that quote its messages: one
    ``UPDATE`` that locked them in the order its scan met them."""
    user = UserFactory()
    conv = conversation(user)
    memory = scope(user)
    ids = sorted(
        memory.store(f"Caroline's fact number {n}", source_message=message_id(conv, 1)).fact.pk
        for n in range(4)
    )
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)  # its new version now comes last in the heap

    assert (
        _waits_holding(FACTS, ids, lambda: Conversation.objects.filter(pk=conv.pk).delete(), seqscan=True)
        == []
    )

    assert list(Fact.objects.filter(pk__in=ids).values_list("source_message", flat=True)) == [None] * 4


@pytest.mark.parametrize("method", ["clear_logs", "prune_logs"])
def test_clearing_or_pruning_the_daily_log_locks_facts_in_id_order(method: str) -> None:
    user = UserFactory()
    memory = KnowledgeMemory(user)
    ids = sorted(memory.store(f"Standing fact number {n}", persistent=True).fact.pk for n in range(4))
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)

    action = memory.clear_logs if method == "clear_logs" else lambda: memory.prune_logs(max_days=0)
    assert _waits_holding(FACTS, ids, action, seqscan=True) == []

    assert not Fact.objects.filter(pk__in=ids, in_daily_log=True).exists()
    assert Fact.objects.filter(pk__in=ids).count() == 4  # persistent facts stay


# -- the owner's user row first ------------------------------------------------------------


def test_a_fact_write_takes_its_owner_before_any_fact() -> None:
    """Deleting a user locks the user's row and then deletes the user's facts: a write that
    supersedes a fact must not hold it while it waits for the row."""
    user = UserFactory()
    memory = KnowledgeMemory(user)
    old = memory.store("Home city: Porto").fact

    held = _holds_while_waiting(
        _user_table(), user.pk, FACTS, [old.pk], lambda: memory.store("Home city: Lisbon")
    )

    assert held == []
    assert Fact.objects.get(pk=old.pk).superseded_by.content == "Home city: Lisbon"


@pytest.mark.parametrize("probe", ["fact", "conversation"])
def test_a_flush_takes_its_owner_before_the_conversation_and_the_facts(probe: str) -> None:
    """Deleting a user locks the row, then the user's conversations, then the facts; the
    flush locked the conversation and the fact it supersedes, and the row at its commit.
    (Recording the model call is off: its insert would wait for the row before the
    summary's transaction begins.)"""
    user = UserFactory()
    old = scope(user).store("Caroline's home city: Porto", "personal", persistent=True).fact
    conv = conversation(user)
    flush = _flush(conv, [fact("Caroline's home city: Lisbon", 1)])
    table, pk = (FACTS, old.pk) if probe == "fact" else (Conversation._meta.db_table, conv.pk)

    with override_settings(AGENTMEMORY={"RECORD_MODEL_CALLS": False}):
        assert _holds_while_waiting(_user_table(), user.pk, table, [pk], flush) == []

    assert Fact.objects.get(pk=old.pk).superseded_by.content == "Caroline's home city: Lisbon"


def test_a_user_deleted_while_a_request_stores_their_fact_both_finish() -> None:
    """A request in one transaction (``ATOMIC_REQUESTS``) replaces a fact; the user is
    deleted meanwhile. Before, the request held the old fact and took the user's row at its
    commit while the delete held the row and waited for the fact: "deadlock detected"."""
    user = UserFactory()
    memory = KnowledgeMemory(user)
    memory.store("Home city: Porto")
    stored = threading.Event()
    pid: list[int] = []
    errors: list[BaseException] = []

    def request() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pid.append(cursor.fetchone()[0])
                memory.store("Home city: Lisbon")
                stored.set()
                with psycopg.connect(database_url(), autocommit=True) as probe:
                    wait_for_a_lock_wait(probe, pid[0])  # the delete now waits for this request
        except BaseException as exc:
            errors.append(exc)
        finally:
            stored.set()
            connections.close_all()

    def delete() -> None:
        try:
            stored.wait(20)
            get_user_model().objects.get(pk=user.pk).delete()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request), threading.Thread(target=delete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert not get_user_model().objects.filter(pk=user.pk).exists()
    assert not Fact.objects.filter(owner_id=user.pk).exists()


def test_deleting_a_user_locks_their_facts_in_id_order() -> None:
    user = UserFactory()
    memory = KnowledgeMemory(user)
    ids = sorted(memory.store(f"Harbour visit number {n}").fact.pk for n in range(4))
    Fact.objects.filter(pk=ids[0]).update(importance=0.6)

    assert (
        _waits_holding(FACTS, ids, lambda: get_user_model().objects.get(pk=user.pk).delete(), seqscan=True)
        == []
    )

    assert not Fact.objects.filter(pk__in=ids).exists()
