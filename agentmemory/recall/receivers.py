"""Signal receivers of recall, connected in ``AgentMemoryConfig.ready()``: upkeep of the
SQLite full-text tables after migrations. Indexing new messages is not a receiver: the append
service calls ``agentmemory.recall.index_new_messages`` itself."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_migrate
from django.dispatch import receiver


@receiver(post_migrate)
def repair_sqlite_fulltext(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """A later migration that rebuilds ``agentmemory_fact`` or ``agentmemory_message`` on
    SQLite (Django copies the table to change it) drops the FTS5 triggers with the old table:
    put them back and rebuild the index, so search never silently misses new rows."""
    if getattr(sender, "name", None) != "agentmemory":
        return
    from agentmemory.recall.fulltext import ensure_sqlite_fulltext

    ensure_sqlite_fulltext(using)
