"""Celery tasks: ids in, services called.

``compact_conversation`` runs one bounded compaction of a conversation; ``sweep_compactions``
(for Celery beat) re-enqueues compactions that were requested and never ran;
``purge_expired`` applies retention. ``compact_conversation`` and ``sweep_compactions``
(defined in ``agentmemory.compaction.tasks``) and ``embed_messages`` (defined in
``agentmemory.recall.tasks``) are imported here: a worker finds an app's tasks through
``autodiscover_tasks()``, which imports the ``tasks`` module of each installed app and no
other, so every task of the app must be reachable from this module.
"""

from __future__ import annotations

import logging

from celery import shared_task

from agentmemory.compaction.tasks import compact_conversation, sweep_compactions
from agentmemory.recall.tasks import embed_messages

__all__ = ["compact_conversation", "embed_messages", "purge_expired", "sweep_compactions"]

logger = logging.getLogger("agentmemory.tasks")


@shared_task(ignore_result=True)
def purge_expired() -> dict[str, int | bool]:
    """Delete conversations past their retention period and expired long-term facts
    (``agentmemory.retention.purge_conversations`` with the settings' periods). Schedule it
    with Celery beat, e.g. daily (see ``project/celery.py``); without any retention setting it
    only deletes expired facts and conversations with a ``retention_days`` of their own.

    Returns:
        The ``PurgeReport`` as a dict.
    """
    from agentmemory.retention import purge_conversations

    report = purge_conversations()
    logger.info("retention purge: %s", report.as_dict(), extra={"purge": report.as_dict()})
    return report.as_dict()
