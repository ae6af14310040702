"""Celery tasks of ``agentmemory.contrib.langgraph``: ``sweep_store_ttl`` deletes the expired
items of ``DjangoStore`` (schedule it with Celery beat, every few minutes) and
``prune_deleted_threads`` the old records of deleted threads (daily)."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def sweep_store_ttl(using: str | None = None) -> int:
    """Delete the store items whose TTL ran out (on the database ``using``, default the
    routers' choice); returns how many."""
    from agentmemory.contrib.langgraph.store import DjangoStore

    return DjangoStore(using=using).sweep_ttl()


@shared_task(ignore_result=True)
def prune_deleted_threads(using: str | None = None) -> int:
    """Delete the records of deleted threads older than
    ``AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS']`` (on the database ``using``); returns how
    many (``agentmemory.contrib.langgraph.receivers.prune_deleted_threads``)."""
    from agentmemory.contrib.langgraph.receivers import prune_deleted_threads as prune

    return prune(using=using)
