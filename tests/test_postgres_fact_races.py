"""Two agents of one owner writing and forgetting the same facts at once (PostgreSQL, where
writers of one scope really run side by side): a forget is serialised with the scope's
writers (``take_scope_lock``), so a store never meets a fact deleted under it and a forget
never walks a history deleted under it.

Each test holds one side at the point where the race used to bite and starts the other
side in a thread: the other side must wait for the scope's lock, so that the first
finishes whole, then the second runs on what it left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact
from tests.factories import UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class _Other:
    """Runs ``action`` in a thread the first time ``start()`` is called, and gives it at
    most ``grace`` seconds to finish (it must wait for the scope's lock, so it does not)."""

    def __init__(self, action: Callable[[], Any], grace: float = 1.0) -> None:
        self.action, self.grace = action, grace
        self.result: list[Any] = []
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            self.result.append(self.action())
        except Exception as exc:
            self.result.append(exc)
        finally:
            connections.close_all()

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run)
            self.thread.start()
            self.thread.join(timeout=self.grace)

    def join(self) -> Any:
        assert self.thread is not None, "the other side never started"
        self.thread.join(timeout=30)
        [result] = self.result
        return result


def test_a_repeat_stored_while_another_agent_forgets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    user = UserFactory()
    fact = KnowledgeMemory(user).store("Allergic to peanuts", "health").fact
    other = _Other(lambda: KnowledgeMemory(user).forget(fact.pk))
    save = Fact.save

    def forget_then_save(self: Fact, *args: Any, **kwargs: Any) -> None:
        # the storing agent found the repeat and is about to mark it persistent; the row
        # deleted under it failed the store with "Save with update_fields did not affect
        # any rows" (a DatabaseError)
        other.start()
        save(self, *args, **kwargs)

    monkeypatch.setattr(Fact, "save", forget_then_save)
    result = KnowledgeMemory(user).store("Allergic to peanuts", "health", persistent=True)
    monkeypatch.undo()

    assert result.action == "updated" and result.fact.pk == fact.pk
    assert other.join() == 1  # then the forget deleted it, as asked
    assert not Fact.objects.filter(owner=user).exists()


def test_forgetting_a_history_fact_while_another_agent_forgets_its_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Forgetting a history fact forgets the fact it led to: the forget walks up to the head.
    # The other agent forgets that head meanwhile; the walk must not find the head gone
    # (it raised Fact.DoesNotExist).
    from agentmemory.knowledge import memory as memory_module

    user = UserFactory()
    memory = KnowledgeMemory(user)
    old = memory.store("Hometown: Oslo", "profile", persistent=True).fact
    head = memory.store("Hometown: Bergen", "profile", persistent=True).fact
    assert Fact.objects.get(pk=old.pk).superseded_by_id == head.pk
    other = _Other(lambda: KnowledgeMemory(user).forget(head.pk))

    class _Manager:
        calls = 0

        def using(self, alias: str) -> Any:
            self.calls += 1
            if self.calls == 2:  # found the old fact; about to read the head it walks to
                other.start()
            return Fact.objects.using(alias)

    class _Fact:
        objects = _Manager()

    monkeypatch.setattr(memory_module, "Fact", _Fact)
    deleted = KnowledgeMemory(user).forget(old.pk)
    monkeypatch.undo()

    assert deleted == 2  # the head and its history
    assert other.join() == 0  # nothing left for the second forget
    assert not Fact.objects.filter(owner=user).exists()


def test_a_fact_forgotten_while_another_agent_replaces_it_takes_its_history_along(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One agent forgets "Hometown: Bergen" (history: "Hometown: Oslo") while the other
    # replaces it with "Hometown: Trondheim". The forget found Bergen as the head; if the
    # replacement moved Bergen's history under the new head before the delete, Oslo stayed
    # behind (L4: forget deletes the fact and its history).
    from agentmemory.knowledge import memory as memory_module

    user = UserFactory()
    memory = KnowledgeMemory(user)
    memory.store("Hometown: Oslo", "profile", persistent=True)
    bergen = memory.store("Hometown: Bergen", "profile", persistent=True).fact
    other = _Other(lambda: KnowledgeMemory(user).store("Hometown: Trondheim", "profile", persistent=True))
    delete_ids = memory_module.delete_ids

    def replace_then_delete(memory: KnowledgeMemory, ids: Any, count_all: bool = False) -> int:
        other.start()
        return delete_ids(memory, ids, count_all)

    monkeypatch.setattr(memory_module, "delete_ids", replace_then_delete)
    deleted = KnowledgeMemory(user).forget(bergen.pk)
    monkeypatch.undo()

    assert deleted == 2  # Bergen and Oslo
    assert other.join().action == "created"  # nothing of the old chain to supersede
    assert list(Fact.objects.filter(owner=user).values_list("content", flat=True)) == ["Hometown: Trondheim"]
