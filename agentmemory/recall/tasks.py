"""Celery task of recall: embed newly stored messages off the request path."""

from __future__ import annotations

import logging

from celery import shared_task

from agentmemory.recall.embedders import EmbeddingError

logger = logging.getLogger("agentmemory.recall")


@shared_task(
    bind=True,
    autoretry_for=(EmbeddingError,),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=5,
    acks_late=True,
    ignore_result=True,
)
def embed_messages(self, message_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    """Store embeddings for the given messages (those of owned conversations, searched
    roles, with content, without a vector of the configured model yet); returns how many.

    Embedding errors are retried with backoff (5 times); run in-process (no broker), a
    failure is logged and left for ``manage.py rebuild_recall_index``.
    """
    from agentmemory.recall import embed_stored_messages

    try:
        return embed_stored_messages(message_ids)
    except EmbeddingError as exc:
        if not self.request.is_eager:
            raise
        logger.warning(
            "embedding %d message(s) failed; rebuild_recall_index will retry: %s", len(message_ids), exc
        )
        return 0
