"""Records of deleted LangGraph threads (``DeletedThread``) are pruned once no run that was in
flight at the delete can still be going: after ``AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS']``
days (default 3). Without it every deleted thread left a row for ever."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks
from django.test import override_settings
from django.utils import timezone

from agentmemory.contrib.langgraph import DjangoSaver
from agentmemory.contrib.langgraph.models import DeletedThread
from agentmemory.contrib.langgraph.receivers import prune_deleted_threads
from agentmemory.contrib.langgraph.tasks import prune_deleted_threads as prune_task
from tests.test_langgraph_deletes import _chat

pytestmark = pytest.mark.django_db


def _aged(thread: str, days: float) -> None:
    DeletedThread.objects.filter(thread_id=thread).update(deleted_at=timezone.now() - timedelta(days=days))


def test_records_older_than_the_setting_are_pruned_and_newer_ones_kept() -> None:
    saver = DjangoSaver()
    for thread in ("t-old", "t-recent", "t-new"):
        _chat(saver, thread)
        saver.delete_thread(thread)
    _aged("t-old", 4)
    _aged("t-recent", 2)

    assert prune_deleted_threads() == 1
    assert sorted(DeletedThread.objects.values_list("thread_id", flat=True)) == ["t-new", "t-recent"]

    with override_settings(AGENTMEMORY={"LANGGRAPH_DELETED_THREAD_DAYS": 1}):
        assert prune_task() == 1
    assert list(DeletedThread.objects.values_list("thread_id", flat=True)) == ["t-new"]
    assert prune_deleted_threads(older_than=timedelta(0)) == 1
    assert not DeletedThread.objects.exists()


def test_a_pruned_thread_id_starts_afresh() -> None:
    saver = DjangoSaver()
    _chat(saver, "t-again")
    saver.delete_thread("t-again")
    _aged("t-again", 10)
    prune_deleted_threads()
    _chat(saver, "t-again", "a new chat")
    assert saver.get_tuple({"configurable": {"thread_id": "t-again"}}) is not None


@pytest.mark.parametrize("days", [0, -1, 1.5, "3", None, True])
def test_a_bad_setting_is_a_system_check_error(days: object) -> None:
    with override_settings(AGENTMEMORY={"LANGGRAPH_DELETED_THREAD_DAYS": days}):
        assert "agentmemory.E052" in [m.id for m in run_checks()]
