"""Celery tasks: ids in, services called."""

from __future__ import annotations

import logging

from celery import shared_task

from agentmemory.exceptions import InvalidSummaryError, TransientLLMError

logger = logging.getLogger("agentmemory.tasks")


@shared_task(
    bind=True,
    autoretry_for=(TransientLLMError, InvalidSummaryError),
    retry_backoff=True,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=5,
    acks_late=True,
    ignore_result=True,
)
def compact_conversation(  # type: ignore[no-untyped-def]
    self,
    conversation_id: int,
    compactor_class: str | None = None,
    *,
    max_tokens: int | None = None,
    only_if_needed: bool = False,
) -> int | None:
    """Write the next summary of a conversation (K3, K4).

    Retries transient LLM errors and unusable summaries with exponential backoff and
    jitter (at most 5 times); the previous summary stays in force meanwhile. A conversation
    deleted before the task runs is skipped (BUG-23).

    Args:
        conversation_id: primary key of the conversation.
        compactor_class: dotted path of the compactor class; default ``COMPACTOR_CLASS``.
        max_tokens: the window budget the trigger is checked against (tokens).
        only_if_needed: skip unless ``needs_compaction()`` still holds (set by
            ``compact_if_needed``, so that duplicates queued behind a busy worker do nothing).

    Returns:
        The id of the current summary after the run, or ``None``.
    """
    from agentmemory.compaction import build_compactor
    from agentmemory.models import Conversation

    if not Conversation.objects.filter(pk=conversation_id).exists():
        logger.info("conversation %s is gone; nothing to compact", conversation_id)
        return None
    compactor = build_compactor(conversation_id, compactor_class=compactor_class)
    if only_if_needed and not compactor.needs_compaction(max_tokens=max_tokens):
        return None
    try:
        summary = compactor.compact()
    except (TransientLLMError, InvalidSummaryError) as exc:
        if not self.request.is_eager:
            raise  # retried with backoff by autoretry_for
        # In-process (no broker), a retry would run at once inside the caller's request:
        # give up for now; the next turn triggers compaction again.
        logger.warning(
            "compaction of conversation %s failed, will try on a later turn: %s", conversation_id, exc
        )
        return None
    return summary.pk if summary is not None else None
