"""Erasing LangGraph threads, and the signal receivers of ``agentmemory.contrib.langgraph``
(connected in ``LangGraphConfig.ready``) that erase a thread with the conversation mirroring it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Max
from django.utils import timezone

from agentmemory.conf import app_settings
from agentmemory.contrib.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
    DeletedThread,
    MirroredMessage,
    MirroredThread,
)
from agentmemory.models import Conversation
from agentmemory.retention import cutoff

__all__ = ["delete_mirrored_checkpoints", "erase_threads", "forget_cleared_threads", "prune_deleted_threads"]


def erase_threads(db: str, thread_ids: Iterable[str]) -> None:
    """Delete every checkpoint, channel value and pending write of the threads (all
    namespaces) on the database ``db``, and record each thread as deleted (``DeletedThread``),
    in one transaction.

    The thread's checkpoint rows are locked before anything is deleted, so a ``put`` in
    flight whose parent is one of them (``DjangoSaver.put`` locks it) either commits first and
    its checkpoint is deleted with the others, or finds its parent gone and the thread
    deleted, and stores nothing: a run still in flight cannot bring the thread back
    (langchain-ai/langgraph#7206)."""
    threads = sorted({str(t) for t in thread_ids})
    if not threads:
        return
    with transaction.atomic(using=db):
        checkpoints = Checkpoint._base_manager.using(db).filter(thread_id__in=threads)
        list(checkpoints.select_for_update().values_list("pk", flat=True))
        newest = dict(checkpoints.order_by().values_list("thread_id").annotate(newest=Max("checkpoint_id")))
        for model in (CheckpointWrite, CheckpointBlob, Checkpoint):
            model._base_manager.using(db).filter(thread_id__in=threads).delete()
        known = dict(
            DeletedThread.objects.using(db)
            .filter(thread_id__in=threads)
            .values_list("thread_id", "last_checkpoint_id")
        )
        now = timezone.now()
        DeletedThread.objects.using(db).bulk_create(
            [
                DeletedThread(
                    thread_id=thread,
                    last_checkpoint_id=max(known.get(thread) or "", newest.get(thread) or ""),
                    deleted_at=now,
                )
                for thread in threads
            ],
            update_conflicts=True,
            unique_fields=["thread_id"],
            update_fields=["last_checkpoint_id", "deleted_at"],
        )


def _erase_where_checkpoints_live(thread_ids: Sequence[str], using: str) -> None:
    """``erase_threads`` on the checkpoints' database: now when it is ``using``, else once the
    transaction on ``using`` commits."""
    db = router.db_for_write(Checkpoint)
    if db == using:
        erase_threads(db, thread_ids)
    else:
        transaction.on_commit(lambda: erase_threads(db, thread_ids), using=using)


def delete_mirrored_checkpoints(sender: Any, instance: MirroredThread, using: str, **kwargs: Any) -> None:
    """``pre_delete`` receiver for ``MirroredThread``: delete the checkpoints, channel values
    and pending writes of the thread whose conversation is being deleted (the conversation's
    delete cascades to its link), on the database the routers choose for checkpoints.

    Deleting a conversation (the API, ``forget_user``, ``purge_conversations``, deleting its
    owner) left the checkpoints holding the same transcript, in tables no foreign key cascades
    to (aegra/aegra#499, where deleting a thread left its checkpoint rows); the thread's next
    checkpoint then mirrored the whole transcript again into a new conversation. When the
    checkpoints are on another database, they are deleted once the conversation's delete
    commits."""
    _erase_where_checkpoints_live([instance.thread_id], using)


def forget_cleared_threads(
    sender: Any = None,
    *,
    using: str,
    conversation_ids: Sequence[int] = (),
    kept: bool = False,
    **kwargs: Any,
) -> None:
    """``memory_deleted`` receiver: a mirrored conversation whose messages were erased but
    which is kept (``PersistentChatHistory.clear()``, ``purge_conversations
    --blank-content``) loses the thread's checkpoints, channel values and pending writes too,
    which held the same words; the thread starts afresh at its next run, mirrored into the same
    conversation. The list of messages already mirrored and the last mirroring error go as
    well (an id-less message is known by a digest of its text).

    Only for conversations that stay (``kept=True``): a conversation deleted outright has no
    link left by then (``delete_mirrored_checkpoints`` handled it).

    Source: BUG-23 of the project's bug corpus, langchain-ai/langgraph#8054 (deleting or
    erasing left the transcript in the checkpoints)."""
    if sender is not Conversation or not kept or not conversation_ids:
        return
    links = MirroredThread.objects.using(using).filter(conversation_id__in=list(conversation_ids))
    threads = sorted(links.values_list("thread_id", flat=True))
    if not threads:
        return
    MirroredMessage.objects.using(using).filter(thread__thread_id__in=threads).delete()
    links.exclude(last_error="").update(last_error="")
    _erase_where_checkpoints_live(threads, using)


def prune_deleted_threads(
    *, older_than: timedelta | None = None, using: str | None = None, dry_run: bool = False
) -> int:
    """Delete the records of deleted threads (``DeletedThread``) older than ``older_than``
    (default ``AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS']`` days) on the database ``using``
    (default the routers' choice); returns how many (with ``dry_run``, how many it would
    delete, and nothing changes). A period reaching back past the first day of year 1 finds
    none (``agentmemory.retention.cutoff``).

    A record keeps a run that was in flight when its thread was deleted from bringing the
    thread back (langchain-ai/langgraph#7206); once such runs are over it guards nothing, and
    a thread id used again after it is gone starts afresh, as a new thread would. Deleted in
    one statement (a record is a few short columns). Run it daily: the Celery task
    ``agentmemory.contrib.langgraph.tasks.prune_deleted_threads`` or ``manage.py
    prune_deleted_threads``."""
    if older_than is None:
        older_than = timedelta(days=app_settings().LANGGRAPH_DELETED_THREAD_DAYS)
    before = cutoff(timezone.now(), older_than)
    if before is None:
        return 0
    db = using or router.db_for_write(DeletedThread)
    old = DeletedThread.objects.using(db).filter(deleted_at__lt=before)
    if dry_run:
        return old.count()
    deleted, _per_model = old.delete()
    return deleted
