"""Celery task of ``agentmemory.contrib.langgraph``: ``sweep_store_ttl`` deletes the expired
items of ``DjangoStore`` (schedule it with Celery beat, every few minutes)."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def sweep_store_ttl(using: str | None = None) -> int:
    """Delete the store items whose TTL ran out (on the database ``using``, default the
    routers' choice); returns how many."""
    from agentmemory.contrib.langgraph.store import DjangoStore

    return DjangoStore(using=using).sweep_ttl()
