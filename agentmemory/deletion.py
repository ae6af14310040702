"""Deleting a user deletes their conversations first, under the conversations' row locks.

Django deletes a user's related rows by collecting them first and deleting them afterwards;
an append that stores a message in between makes the conversation's delete fail with a
foreign-key error (``IntegrityError``). The receiver below runs inside the user's delete
transaction, before anything is deleted, and deletes the user's conversations through
``ConversationQuerySet.delete()``: it locks each conversation row first, so an append in flight
finishes before the delete, and a later one finds the conversation gone
(``ConversationNotFound``).
"""

from __future__ import annotations

from typing import Any

from django.db import router

from agentmemory.models import Conversation

__all__ = ["delete_owned_conversations"]


def delete_owned_conversations(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``pre_delete`` receiver for the user model (connected in ``AgentMemoryConfig.ready``):
    delete the conversations ``instance`` owns, with their messages and summaries, on the
    database the routers choose for conversations."""
    if instance.pk is None:
        return
    alias = router.db_for_write(Conversation)
    Conversation.objects.using(alias).filter(owner_id=instance.pk).delete()
