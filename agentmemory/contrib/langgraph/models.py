"""Tables of ``agentmemory.contrib.langgraph``: LangGraph checkpoints (with their channel
values and pending writes), store items (with their vectors) and the links of mirrored threads.

The checkpoint tables follow the layout of LangGraph's own PostgreSQL saver
(``langgraph-checkpoint-postgres``): a checkpoint row without its channel values, one blob row
per channel version (a value unchanged between checkpoints is stored once), and the pending
writes of each checkpoint. Values are bytes made by the saver's serializer (``serde``,
LangGraph's ``JsonPlusSerializer`` by default), each with the serializer's type tag.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from agentmemory.fields import StoredJSONField
from agentmemory.models import Conversation


class Checkpoint(models.Model):
    """One LangGraph checkpoint of a thread and checkpoint namespace.

    ``checkpoint`` holds the serialized checkpoint without its channel values (they are
    ``CheckpointBlob`` rows, found by ``channel_versions``); ``metadata`` is JSON so that
    ``list(filter=...)`` can narrow rows in SQL; ``run_id`` is the metadata's run id, indexed
    for ``delete_for_runs``; ``uses_delta`` is set when the thread uses a LangGraph
    ``DeltaChannel`` (see ``DjangoSaver.prune``).
    """

    thread_id = models.TextField(_("thread id"))
    checkpoint_ns = models.TextField(_("checkpoint namespace"), blank=True, default="")
    checkpoint_id = models.TextField(_("checkpoint id"))
    parent_checkpoint_id = models.TextField(_("parent checkpoint id"), blank=True, default="")
    run_id = models.TextField(_("run id"), blank=True, default="")
    type = models.TextField(_("serializer type"))
    checkpoint = models.BinaryField(_("checkpoint"))
    # a number no Python value holds, written by hand, is read as its text (as in every JSON
    # column of the core: ``StoredJSONField``), not a ``ValueError`` on every read of the row
    channel_versions = StoredJSONField(_("channel versions"), default=dict)
    metadata = StoredJSONField(_("metadata"), default=dict, blank=True)
    uses_delta = models.BooleanField(_("uses a delta channel"), default=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("LangGraph checkpoint")
        verbose_name_plural = _("LangGraph checkpoints")
        ordering = ["thread_id", "checkpoint_ns", "-checkpoint_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "checkpoint_id"], name="agentmemory_lg_checkpoint_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["run_id"], name="agentmemory_lg_ckpt_run_idx"),
            models.Index(fields=["checkpoint_id"], name="agentmemory_lg_ckpt_id_idx"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id}"


class CheckpointBlob(models.Model):
    """The serialized value of one channel at one version (``type`` "empty": no value)."""

    thread_id = models.TextField(_("thread id"))
    checkpoint_ns = models.TextField(_("checkpoint namespace"), blank=True, default="")
    channel = models.TextField(_("channel"))
    version = models.TextField(_("version"))
    type = models.TextField(_("serializer type"))
    blob = models.BinaryField(_("value"), null=True, blank=True)

    class Meta:
        verbose_name = _("LangGraph channel value")
        verbose_name_plural = _("LangGraph channel values")
        ordering = ["thread_id", "checkpoint_ns", "channel", "version"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "channel", "version"], name="agentmemory_lg_blob_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} at {self.version}"


class CheckpointWrite(models.Model):
    """One pending write of a task to a checkpoint (``idx`` is the write's position, or
    LangGraph's negative index for the special channels: error, interrupt, resume...)."""

    thread_id = models.TextField(_("thread id"))
    checkpoint_ns = models.TextField(_("checkpoint namespace"), blank=True, default="")
    checkpoint_id = models.TextField(_("checkpoint id"))
    task_id = models.TextField(_("task id"))
    task_path = models.TextField(_("task path"), blank=True, default="")
    idx = models.IntegerField(_("index"))
    channel = models.TextField(_("channel"))
    type = models.TextField(_("serializer type"))
    blob = models.BinaryField(_("value"))

    class Meta:
        verbose_name = _("LangGraph pending write")
        verbose_name_plural = _("LangGraph pending writes")
        ordering = ["thread_id", "checkpoint_ns", "checkpoint_id", "task_path", "task_id", "idx"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="agentmemory_lg_write_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"write {self.task_id}/{self.idx} to {self.channel}"


class StoreItem(models.Model):
    """One item of a ``DjangoStore``: a JSON document under a namespace and key.

    ``namespace`` is the namespace's labels joined with "." (LangGraph forbids "." in a
    label); ``content`` is the item's text for full-text search (the texts at its index
    paths), indexed like facts and messages (PostgreSQL ``search_vector``, SQLite FTS5).
    ``expires_at`` and ``ttl_minutes`` implement LangGraph's TTL (minutes, refreshed on read
    when asked).
    """

    namespace = models.TextField(_("namespace"))
    key = models.TextField(_("key"))
    value = StoredJSONField(_("value"))
    content = models.TextField(_("searchable text"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"))
    updated_at = models.DateTimeField(_("updated at"), db_index=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True, db_index=True)
    ttl_minutes = models.FloatField(_("time to live (minutes)"), null=True, blank=True)

    class Meta:
        verbose_name = _("LangGraph store item")
        verbose_name_plural = _("LangGraph store items")
        ordering = ["namespace", "key"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "key"], name="agentmemory_lg_store_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key}"


class StoreVector(models.Model):
    """The embedding of one text of a store item (``path`` names where in the value the text
    was found; a ``[*]`` path gives one vector per element), as float32 bytes."""

    item = models.ForeignKey(
        StoreItem, verbose_name=_("item"), on_delete=models.CASCADE, related_name="vectors"
    )
    path = models.TextField(_("path"))
    vector = models.BinaryField(_("vector"))

    class Meta:
        verbose_name = _("LangGraph store vector")
        verbose_name_plural = _("LangGraph store vectors")
        ordering = ["item", "path"]
        constraints = [
            models.UniqueConstraint(fields=["item", "path"], name="agentmemory_lg_vector_uniq"),
        ]

    def __str__(self) -> str:
        return f"vector {self.path} of item {self.item_id}"


class MirroredThread(models.Model):
    """The agentmemory conversation that mirrors the messages of one LangGraph thread.

    ``last_error`` records the latest messages that could not be mirrored (the checkpoint was
    saved all the same); it is cleared by the next mirror that succeeds.
    """

    thread_id = models.TextField(_("thread id"), unique=True)
    conversation = models.ForeignKey(
        Conversation,
        verbose_name=_("conversation"),
        on_delete=models.CASCADE,
        related_name="langgraph_threads",
    )
    last_error = models.TextField(_("last error"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("mirrored LangGraph thread")
        verbose_name_plural = _("mirrored LangGraph threads")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"thread {self.thread_id}"


class MirroredMessage(models.Model):
    """A LangGraph message (by its id) already copied into the thread's conversation."""

    thread = models.ForeignKey(
        MirroredThread, verbose_name=_("thread"), on_delete=models.CASCADE, related_name="messages"
    )
    message_id = models.TextField(_("LangGraph message id"))

    class Meta:
        verbose_name = _("mirrored LangGraph message")
        verbose_name_plural = _("mirrored LangGraph messages")
        ordering = ["thread", "id"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "message_id"], name="agentmemory_lg_mirrored_uniq"),
        ]

    def __str__(self) -> str:
        return f"message {self.message_id}"


class DeletedThread(models.Model):
    """A thread whose checkpoints were deleted (``DjangoSaver.delete_thread``, ``prune``
    with ``"delete"``, or the erasure of the conversation that mirrored it), so that a run
    still in flight cannot bring it back (langchain-ai/langgraph#7206).

    ``last_checkpoint_id`` is the newest checkpoint id deleted (ids sort by time): a
    pending write to a missing checkpoint up to it belongs to the deleted thread. Holds no
    text of the thread."""

    thread_id = models.TextField(_("thread id"), unique=True)
    last_checkpoint_id = models.TextField(_("newest checkpoint id deleted"), blank=True, default="")
    deleted_at = models.DateTimeField(_("deleted at"))

    class Meta:
        verbose_name = _("deleted LangGraph thread")
        verbose_name_plural = _("deleted LangGraph threads")
        ordering = ["-deleted_at"]

    def __str__(self) -> str:
        return f"deleted thread {self.thread_id}"
