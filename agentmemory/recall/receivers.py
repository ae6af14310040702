"""Signal receivers of recall, connected in ``AgentMemoryConfig.ready()``."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.signals import post_migrate
from django.dispatch import receiver

from agentmemory.signals import message_appended

logger = logging.getLogger("agentmemory.recall")


@receiver(post_migrate)
def repair_sqlite_fulltext(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """A later migration that rebuilds ``agentmemory_fact`` or ``agentmemory_message`` on
    SQLite (Django copies the table to change it) drops the FTS5 triggers with the old table:
    put them back and rebuild the index, so search never silently misses new rows."""
    if getattr(sender, "name", None) != "agentmemory":
        return
    from agentmemory.recall.fulltext import ensure_sqlite_fulltext

    ensure_sqlite_fulltext(using)


@receiver(message_appended)
def embed_appended_messages(sender: Any, conversation_id: int, messages: list[Any], **kwargs: Any) -> None:
    """With an embedding or hybrid backend, embed new messages after the commit, in a Celery
    task (in-process when no broker is configured). Full-text needs nothing: the database
    indexes rows as they are written. A broker that cannot take the task never fails the
    append; ``rebuild_recall_index`` embeds what was missed."""
    from agentmemory.recall import SEARCHED_ROLES, embeddings_wanted

    if not embeddings_wanted():
        return
    ids = [m.id for m in messages if m.id is not None and str(m.role) in SEARCHED_ROLES and m.content]
    if ids:
        transaction.on_commit(partial(_enqueue, ids))


def _enqueue(ids: list[int]) -> None:
    from agentmemory.recall.tasks import embed_messages

    try:
        embed_messages.delay(ids)
    except Exception:  # a broker that is down must not break the caller (logged, caught up later)
        logger.exception("could not enqueue embedding of %d message(s)", len(ids))
