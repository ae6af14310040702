"""Signal receivers of ``agentmemory.contrib.langgraph`` (connected in ``LangGraphConfig.ready``)."""

from __future__ import annotations

from typing import Any

from django.db import router, transaction

from agentmemory.contrib.langgraph.models import Checkpoint, CheckpointBlob, CheckpointWrite, MirroredThread

__all__ = ["delete_mirrored_checkpoints"]


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
    thread_id = instance.thread_id
    db = router.db_for_write(Checkpoint)

    def delete() -> None:
        with transaction.atomic(using=db):
            for model in (CheckpointWrite, CheckpointBlob, Checkpoint):
                model._base_manager.using(db).filter(thread_id=thread_id).delete()

    if db == using:
        delete()
    else:
        transaction.on_commit(delete, using=using)
