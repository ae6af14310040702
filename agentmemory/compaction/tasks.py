"""The Celery tasks of compaction: ids in, a run or the sweep called.

``compact_conversation`` runs one bounded compaction of a conversation (``runs``);
``sweep_compactions`` (for Celery beat) re-enqueues compactions that were requested and never
ran (``dispatch.sweep``). Their Celery names are ``agentmemory.tasks.compact_conversation``
and ``agentmemory.tasks.sweep_compactions``, as before they moved here: queued messages and
beat schedules keep working. ``agentmemory.tasks`` imports them, so that a worker's
``autodiscover_tasks()`` finds them.
"""

from __future__ import annotations

import logging
import random

from celery import shared_task

# The module, not its names: dispatch enqueues these tasks and these tasks enqueue the next
# run and sweep through dispatch, so either module may be imported first.
from agentmemory.compaction import dispatch
from agentmemory.compaction.runs import run_compaction
from agentmemory.compaction.state import BUSY, PARTIAL
from agentmemory.exceptions import (
    ConversationStateError,
    InvalidSummaryError,
    PermanentLLMError,
    TransientLLMError,
)

__all__ = ["MAX_BUSY_RETRIES", "compact_conversation", "sweep_compactions"]

logger = logging.getLogger("agentmemory.tasks")

#: retries of a compaction refused because another run holds the lease
MAX_BUSY_RETRIES = 10


@shared_task(
    name="agentmemory.tasks.compact_conversation",
    bind=True,
    autoretry_for=(TransientLLMError,),
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
    system_tokens: int | None = None,
) -> int | None:
    """Write the next summary of a conversation (one bounded run, see
    ``agentmemory.compaction.runs.run_compaction``).

    Transient model errors (rate limits, 5xx, timeouts) are retried with exponential backoff
    and jitter, at most 5 times; the previous summary stays in force meanwhile. A rejected
    summary (``InvalidSummaryError``), a permanent model error, or bookkeeping a run refuses
    (``ConversationStateError``: a current summary of another conversation) is recorded on the
    conversation and not retried here: the same input would fail the same way, so the
    sweep or the next trigger tries again later. A run refused because another holds the
    lease is retried once that lease can have expired. A backlog longer than one run
    enqueues the next run. A conversation deleted before the task runs is skipped (BUG-23).

    Args:
        conversation_id: primary key of the conversation.
        compactor_class: dotted path of the compactor class; default ``COMPACTOR_CLASS``.
        max_tokens: the window budget (tokens): the trigger is checked against it and the
            summary is made to fit it.
        only_if_needed: skip unless ``needs_compaction()`` still holds.
        system_tokens: tokens of a system prompt sent with every window but not stored;
            default: the stored pinned prompt, if any.

    Returns:
        The id of the current summary after the run, or ``None``.
    """
    # A transient error this task retries is one failure of the sweep's count, not one per try.
    request = self.request
    last_try = request.is_eager or request.called_directly or request.retries >= self.max_retries
    try:
        run = run_compaction(
            conversation_id,
            compactor_class=compactor_class,
            max_tokens=max_tokens,
            only_if_needed=only_if_needed,
            system_tokens=system_tokens,
            count_transient=last_try,
        )
        while run.status == PARTIAL and self.request.is_eager:
            run = run_compaction(
                conversation_id,
                compactor_class=compactor_class,
                max_tokens=max_tokens,
                system_tokens=system_tokens,
            )
    except (InvalidSummaryError, PermanentLLMError, ConversationStateError) as exc:
        logger.warning("compaction of conversation %s failed and is not retried: %s", conversation_id, exc)
        return None
    except TransientLLMError as exc:
        if not self.request.is_eager:
            raise  # retried with backoff by autoretry_for
        # In process (eager), a retry would run at once inside the caller's request; the
        # failure is recorded and the sweep or the next trigger tries again.
        logger.warning("compaction of conversation %s failed, left for later: %s", conversation_id, exc)
        return None
    if run.status == BUSY and not (self.request.is_eager or self.request.called_directly):
        if self.request.retries < MAX_BUSY_RETRIES:
            countdown = run.retry_after + 1 + random.uniform(0, 5)
            raise self.retry(countdown=countdown, max_retries=MAX_BUSY_RETRIES)
        logger.warning("compaction of conversation %s stayed busy; left for the sweep", conversation_id)
    if run.status == PARTIAL:
        # More backlog: the next bounded run is a task of its own (visible progress: each
        # run stores a summary).
        dispatch.enqueue_compaction(
            conversation_id,
            compactor_class=compactor_class,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            only_if_needed=False,
        )
    return run.summary.pk if run.summary is not None else None


@shared_task(name="agentmemory.tasks.sweep_compactions", ignore_result=True)
def sweep_compactions(limit: int = 500) -> dict[str, int]:
    """Enqueue (mode "celery") or run (otherwise) compactions that were requested and have
    not run: requested more than ``COMPACTION_LEASE_SECONDS`` ago or failed, and not held by
    a live lease. Schedule it with Celery beat (see ``project/celery.py``), e.g. every
    minute.

    Args:
        limit: most conversations handled per sweep.

    Returns:
        Counts by outcome (``{"enqueued": n}``, ``{"stored": n, "failed": n}``...).
    """
    counts = dispatch.sweep(limit=limit)
    if counts:
        logger.info("compaction sweep: %s", counts)
    return counts
