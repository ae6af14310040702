"""The LangGraph app's upkeep runs without Celery beat: ``manage.py prune_deleted_threads``
deletes the records of deleted threads (``DeletedThread``) past
``AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS']`` and ``manage.py sweep_store_ttl`` the store
items whose TTL ran out, from cron, a systemd timer or a Kubernetes CronJob. Both were only
Celery tasks: a host without beat had no way to run them, and every deleted thread left a row
for ever."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from agentmemory.contrib.langgraph import DjangoStore
from agentmemory.contrib.langgraph.models import DeletedThread, StoreItem

pytestmark = pytest.mark.django_db(databases=["default", "secondary"])


def _deleted(thread: str, days: float, using: str = "default") -> None:
    DeletedThread.objects.using(using).create(
        thread_id=thread, last_checkpoint_id="", deleted_at=timezone.now() - timedelta(days=days)
    )


def _threads(using: str = "default") -> list[str]:
    return sorted(DeletedThread.objects.using(using).values_list("thread_id", flat=True))


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("prune_deleted_threads", *args, stdout=out)
    return out.getvalue()


def test_records_past_the_setting_are_pruned_and_the_command_says_how_many() -> None:
    _deleted("t-old", 4)
    _deleted("t-recent", 2)
    assert "deleted 1 record of deleted threads" in _run()
    assert _threads() == ["t-recent"]
    with override_settings(AGENTMEMORY={"LANGGRAPH_DELETED_THREAD_DAYS": 1}):
        assert "deleted 1 record" in _run()
    assert _threads() == []


def test_older_than_replaces_the_setting_and_dry_run_changes_nothing() -> None:
    _deleted("t-hours", 0.5)
    _deleted("t-days", 2)
    assert "would delete 1 record" in _run("--older-than", "1d", "--dry-run")
    assert _threads() == ["t-days", "t-hours"]
    assert "deleted 2 records" in _run("--older-than", "6h")
    assert _threads() == []


def test_database_names_where_the_records_are() -> None:
    _deleted("t-default", 10)
    _deleted("t-secondary", 10, using="secondary")
    assert "deleted 1 record" in _run("--database", "secondary")
    assert _threads("secondary") == [] and _threads() == ["t-default"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "soon"], "is not a period"),
        (["--older-than", "0d"], "is not a period"),
        (["--older-than", "800000d"], "first day of year 1"),
        (["--database", "nowhere"], "no database 'nowhere'"),
        (["--database", "bad\udcff"], "UTF-8"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_deleted(args: list[str], message: str) -> None:
    _deleted("t-old", 10)
    with pytest.raises(CommandError, match=message):
        _run(*args)
    assert _threads() == ["t-old"]


def test_sweep_store_ttl_deletes_expired_items_only() -> None:
    store = DjangoStore()
    store.put(("notes",), "expired", {"text": "old"}, ttl=1)
    store.put(("notes",), "kept", {"text": "new"})
    StoreItem.objects.filter(key="expired").update(expires_at=timezone.now() - timedelta(minutes=1))
    out = io.StringIO()
    call_command("sweep_store_ttl", "--dry-run", stdout=out)
    assert "would delete 1 expired store item" in out.getvalue()
    assert StoreItem.objects.count() == 2
    call_command("sweep_store_ttl", stdout=out)
    assert "deleted 1 expired store item" in out.getvalue()
    assert list(StoreItem.objects.values_list("key", flat=True)) == ["kept"]
    with pytest.raises(CommandError, match="no database 'nowhere'"):
        call_command("sweep_store_ttl", "--database", "nowhere", stdout=out)
