"""``DjangoSaver``: a LangGraph checkpointer on Django models.

Implements LangGraph's ``BaseCheckpointSaver`` contract (``langgraph-checkpoint``), checked
by LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) for every base
capability (``put``, ``put_writes``, ``get_tuple``, ``list``, ``delete_thread``) and the
extended ones (``delete_for_runs``, ``copy_thread``, ``prune``), on SQLite and PostgreSQL.
Every method has its ``a...`` twin for async graphs (the ORM runs in a worker thread through
``asgiref.sync.sync_to_async``, as Django's own async ORM methods do).

Storage (``agentmemory.contrib.langgraph.models``) follows LangGraph's PostgreSQL saver: a
channel value is stored once per version, so a checkpoint that changes one channel of ten
writes one value; values, checkpoints and pending writes are bytes made by ``serde`` (LangGraph's
``JsonPlusSerializer`` by default, an ``EncryptedSerializer`` where given).
"""

from __future__ import annotations

import builtins
import json
import logging
import random
import threading
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.db import router, transaction
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.base import (
    Checkpoint as LangGraphCheckpoint,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import TASKS, _DeltaSnapshot

from agentmemory.contrib.langgraph.connections import tidy, tidy_method
from agentmemory.contrib.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
    DeletedThread,
    MirroredThread,
)
from agentmemory.contrib.langgraph.receivers import erase_threads
from agentmemory.models import Conversation

if TYPE_CHECKING:
    from agentmemory.contrib.langgraph.mirror import ConversationMirror

logger = logging.getLogger("agentmemory.contrib.langgraph")

__all__ = ["PRUNE_STRATEGIES", "DjangoSaver"]

#: the strategies of ``prune`` (LangGraph's ``BaseCheckpointSaver.prune``)
PRUNE_STRATEGIES = ("keep_latest", "delete")
#: checkpoints read per query by ``list`` (and rows per statement when copying a thread)
PAGE_SIZE = 100
#: checkpoints refused by ``put`` (their thread was deleted) remembered per saver, so that
#: their pending writes arriving later are refused too
REFUSED_MEMORY = 10_000
#: metadata keys that mark a thread using a LangGraph ``DeltaChannel`` (the second is
#: LangGraph.js's, as LangGraph's PostgreSQL saver checks)
_DELTA_METADATA_KEYS = ("counters_since_delta_snapshot", "delta_writes_versioned")

_CHECKPOINT_FIELDS = (
    "pk",
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
)


def _thread(config: RunnableConfig) -> tuple[str, str]:
    configurable = config["configurable"]
    return str(configurable["thread_id"]), str(configurable.get("checkpoint_ns") or "")


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as the JSON the column stores (UUIDs, dates and decimals as strings)."""
    loaded: dict[str, Any] = json.loads(json.dumps(metadata, cls=DjangoJSONEncoder))
    return loaded


def _pushdown(value: Any) -> list[Any] | None:
    """The JSON values a metadata key may hold in SQL for ``value == stored`` to be true in
    Python, or None when SQL cannot narrow safely (the exact test runs in Python anyway):
    strings compare exactly; an integer also equals its float, and 0 and 1 equal False and
    True."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, bool(value)] if value in (0, 1) else [value]
    return None


class DjangoSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps checkpoints in the project's database.

    ``graph = builder.compile(checkpointer=DjangoSaver())``. Needs
    ``"agentmemory.contrib.langgraph"`` in ``INSTALLED_APPS`` and its migrations.

    Args:
        using: the database alias; default the one Django's routers choose for writing the
            checkpoint model (``"default"`` without routers). Reads go to the same database,
            so a checkpoint just written is always found.
        serde: LangGraph's serializer protocol (``dumps_typed``/``loads_typed``); default
            ``JsonPlusSerializer``. Pass an ``EncryptedSerializer`` to encrypt at rest.
        mirror: a ``ConversationMirror`` that copies the graph's messages into agentmemory
            conversations (see ``agentmemory.contrib.langgraph.mirror``).

    Versions are strings that sort in order (``"<32-digit counter>.<random>"``), as LangGraph's
    in-memory and PostgreSQL savers make them.

    Concurrency: a checkpoint is written with its new channel values in one transaction;
    rows are keyed by unique constraints, so a checkpoint written twice is replaced, a
    channel version or a regular pending write written twice is kept once (the first wins,
    as in LangGraph's savers) and the special writes (error, interrupt, resume) are replaced.

    Deleted threads stay deleted: a ``put`` or ``put_writes`` of a run still in flight when
    its thread was deleted (``delete_thread``, ``prune`` with ``"delete"``, erasing the
    mirrored conversation) stores nothing (see ``put``; langchain-ai/langgraph#7206).
    """

    def __init__(
        self,
        *,
        using: str | None = None,
        serde: SerializerProtocol | None = None,
        mirror: ConversationMirror | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.using = using
        self.mirror = mirror
        self._refused: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._refused_lock = threading.Lock()

    @property
    def db(self) -> str:
        """The database alias used (resolved on each call, so routers set up later count)."""
        return self.using or router.db_for_write(Checkpoint)

    # -- reading -----------------------------------------------------------------------

    @tidy_method
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``thread_id``, ``checkpoint_ns``, and
        ``checkpoint_id``: without it the thread's latest in that namespace), with its
        channel values, metadata, parent and pending writes (in ``writes_sort_key`` order);
        None when there is none. Three queries."""
        thread_id, checkpoint_ns = _thread(config)
        rows = Checkpoint.objects.using(self.db).filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns)
        if checkpoint_id := get_checkpoint_id(config):
            rows = rows.filter(checkpoint_id=str(checkpoint_id))
        row = rows.order_by("-checkpoint_id").values(*_CHECKPOINT_FIELDS).first()
        if row is None:
            return None
        return self._tuples([row])[0]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id, which LangGraph makes time-ordered).

        Args:
            config: ``thread_id`` limits to one thread, ``checkpoint_ns`` (when present) to
                one namespace, ``checkpoint_id`` to one checkpoint; None lists every thread.
            filter: metadata that must match: each key's value equals the stored one (as
                LangGraph's in-memory saver compares them).
            before: only checkpoints older than this config's ``checkpoint_id``.
            limit: at most this many.

        Reads ``PAGE_SIZE`` checkpoints per query (plus one query for their values and one
        for their writes), so a long thread is never loaded at once.
        """
        yield from self._list(config, filter=filter, before=before, limit=limit)

    def _list_queryset(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None
    ) -> QuerySet[Checkpoint]:
        rows = Checkpoint.objects.using(self.db).all()
        if config is not None:
            configurable = config["configurable"]
            rows = rows.filter(thread_id=str(configurable["thread_id"]))
            if configurable.get("checkpoint_ns") is not None:
                rows = rows.filter(checkpoint_ns=str(configurable["checkpoint_ns"]))
            if checkpoint_id := get_checkpoint_id(config):
                rows = rows.filter(checkpoint_id=str(checkpoint_id))
        if before is not None and (before_id := get_checkpoint_id(before)):
            rows = rows.filter(checkpoint_id__lt=str(before_id))
        for i, (key, value) in enumerate((filter or {}).items()):
            allowed = _pushdown(value)
            if allowed is None:
                continue
            alias = f"_metadata_{i}"
            rows = rows.alias(**{alias: KeyTransform(str(key), "metadata")})
            match = Q()
            for candidate in allowed:
                match |= Q(**{alias: candidate})
            rows = rows.filter(match)
        return rows

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Iterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        for page in self._pages(config, filter, before, limit):
            for item in page:
                yield item
                if limit is not None:
                    limit -= 1
                    if limit <= 0:
                        return

    def _pages(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None = None,
    ) -> Iterator[builtins.list[CheckpointTuple]]:
        """The matching checkpoints, newest first, a page at a time (keyset pagination on
        checkpoint id, then primary key); pages are no larger than what ``limit`` leaves, so
        a short listing reads and loads only what it returns."""
        rows = self._list_queryset(config, filter, before).order_by("-checkpoint_id", "-pk")
        after: tuple[str, int] | None = None
        remaining = limit
        while True:
            size = PAGE_SIZE if remaining is None else max(1, min(PAGE_SIZE, remaining))
            page_rows = rows
            if after is not None:
                page_rows = rows.filter(
                    Q(checkpoint_id__lt=after[0]) | Q(checkpoint_id=after[0], pk__lt=after[1])
                )
            with tidy(self.db):
                found = list(page_rows.values(*_CHECKPOINT_FIELDS)[:size])
                if not found:
                    return
                page = self._tuples(found)
            after = (found[-1]["checkpoint_id"], found[-1]["pk"])
            if filter:
                page = [t for t in page if all(v == t.metadata.get(k) for k, v in filter.items())]
            if page:
                yield page
                if remaining is not None:
                    remaining -= len(page)
                    if remaining <= 0:
                        return
            if len(found) < size:
                return

    def _tuples(self, rows: builtins.list[dict[str, Any]]) -> builtins.list[CheckpointTuple]:
        """Checkpoint tuples of checkpoint rows, with their values and pending writes read in
        one query each."""
        checkpoints = [self.serde.loads_typed((row["type"], bytes(row["checkpoint"]))) for row in rows]
        wanted: dict[tuple[str, str], tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
        for row, checkpoint in zip(rows, checkpoints, strict=True):
            channels, versions = wanted[(row["thread_id"], row["checkpoint_ns"])]
            for channel, version in checkpoint["channel_versions"].items():
                channels.add(channel)
                versions.add(str(version))
        blobs: dict[tuple[str, str, str, str], tuple[str, Any]] = {}
        blob_query = Q()
        for (thread_id, checkpoint_ns), (channels, versions) in wanted.items():
            if channels:
                blob_query |= Q(
                    thread_id=thread_id,
                    checkpoint_ns=checkpoint_ns,
                    channel__in=channels,
                    version__in=versions,
                )
        if blob_query:
            for thread_id, checkpoint_ns, channel, version, type_, blob in (
                CheckpointBlob.objects.using(self.db)
                .filter(blob_query)
                .values_list("thread_id", "checkpoint_ns", "channel", "version", "type", "blob")
            ):
                blobs[(thread_id, checkpoint_ns, channel, version)] = (type_, blob)
        writes: dict[tuple[str, str, str], builtins.list[tuple[str, str, int, str, str, bytes]]] = (
            defaultdict(builtins.list)
        )
        ids: dict[tuple[str, str], builtins.list[str]] = defaultdict(builtins.list)
        for row in rows:
            ids[(row["thread_id"], row["checkpoint_ns"])].append(row["checkpoint_id"])
        write_query = Q()
        for (thread_id, checkpoint_ns), checkpoint_ids in ids.items():
            write_query |= Q(
                thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id__in=checkpoint_ids
            )
        for thread_id, checkpoint_ns, checkpoint_id, task_path, task_id, idx, channel, type_, blob in (
            CheckpointWrite.objects.using(self.db)
            .filter(write_query)
            .values_list(
                "thread_id",
                "checkpoint_ns",
                "checkpoint_id",
                "task_path",
                "task_id",
                "idx",
                "channel",
                "type",
                "blob",
            )
        ):
            writes[(thread_id, checkpoint_ns, checkpoint_id)].append(
                (task_path, task_id, idx, channel, type_, bytes(blob))
            )
        result = []
        for row, checkpoint in zip(rows, checkpoints, strict=True):
            thread_id, checkpoint_ns, checkpoint_id = (
                row["thread_id"],
                row["checkpoint_ns"],
                row["checkpoint_id"],
            )
            values = {}
            for channel, version in checkpoint["channel_versions"].items():
                stored = blobs.get((thread_id, checkpoint_ns, channel, str(version)))
                if stored is None or stored[0] == "empty":
                    continue
                values[channel] = self.serde.loads_typed((stored[0], bytes(stored[1] or b"")))
            own = sorted(
                writes.get((thread_id, checkpoint_ns, checkpoint_id), ()),
                key=lambda w: writes_sort_key(*w[:3]),
            )
            pending: builtins.list[PendingWrite] = [
                (task_id, channel, self.serde.loads_typed((type_, blob)))
                for _path, task_id, _idx, channel, type_, blob in own
            ]
            parent = row["parent_checkpoint_id"]
            result.append(
                CheckpointTuple(
                    config=_config(thread_id, checkpoint_ns, checkpoint_id),
                    checkpoint={**checkpoint, "channel_values": values},  # type: ignore[typeddict-item]
                    metadata=row["metadata"],
                    parent_config=_config(thread_id, checkpoint_ns, parent) if parent else None,
                    pending_writes=pending,
                )
            )
        return result

    # -- writing -----------------------------------------------------------------------

    @tidy_method
    def put(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint under ``config``'s thread and namespace (its parent is
        ``config``'s ``checkpoint_id``), with the values of the channels in
        ``new_versions``; returns the config naming the stored checkpoint. A checkpoint
        stored again with the same id is replaced. Metadata is stored as JSON (keys of
        ``config``'s ``configurable`` and ``metadata`` that hold plain values are added, as
        LangGraph's savers add them); it must be JSON-serializable (``TypeError``
        otherwise).

        A checkpoint whose parent is no longer stored, in a thread that was deleted, is not
        stored (nor mirrored; a warning is logged) and the config naming it is returned all
        the same: it is the next step of a run that was in flight when the thread was
        deleted, and storing it would bring the deleted thread back, with its transcript
        (langchain-ai/langgraph#7206). The run goes on and stores nothing more: each later
        checkpoint names a parent that was not stored either. A checkpoint without parent (a
        new run on the same thread id) starts the thread afresh, as LangGraph's savers do.
        The parent row is locked until the checkpoint commits, so a concurrent
        ``delete_thread`` deletes the new checkpoint too."""
        thread_id, checkpoint_ns = _thread(config)
        parent_id = config["configurable"].get("checkpoint_id")
        copy = checkpoint.copy()
        values: dict[str, Any] = copy.pop("channel_values")  # type: ignore[misc]
        type_, data = self.serde.dumps_typed(copy)
        stored_metadata = _json_safe(dict(get_serializable_checkpoint_metadata(config, metadata)))
        uses_delta = any(key in stored_metadata for key in _DELTA_METADATA_KEYS) or any(
            isinstance(value, _DeltaSnapshot) for value in values.values()
        )
        blobs: builtins.list[tuple[str, str, str, bytes | None]] = []
        for channel, version in new_versions.items():
            if channel in values:
                blob_type, blob = self.serde.dumps_typed(values[channel])
                blobs.append((channel, str(version), blob_type, blob))
            else:
                blobs.append((channel, str(version), "empty", None))
        row = Checkpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=str(checkpoint["id"]),
            parent_checkpoint_id=str(parent_id) if parent_id else "",
            run_id=str(stored_metadata.get("run_id") or ""),
            type=type_,
            checkpoint=data,
            channel_versions=_json_safe(dict(checkpoint["channel_versions"])),
            metadata=stored_metadata,
            uses_delta=uses_delta,
        )
        db = self.db
        stored_config = _config(thread_id, checkpoint_ns, str(checkpoint["id"]))
        with transaction.atomic(using=db):
            if parent_id and self._parent_deleted(db, thread_id, checkpoint_ns, str(parent_id)):
                self._refuse(db, thread_id, checkpoint_ns, str(checkpoint["id"]))
                return stored_config
            if blobs:
                CheckpointBlob.objects.using(db).bulk_create(
                    [
                        CheckpointBlob(
                            thread_id=thread_id,
                            checkpoint_ns=checkpoint_ns,
                            channel=channel,
                            version=version,
                            type=blob_type,
                            blob=blob,
                        )
                        for channel, version, blob_type, blob in blobs
                    ],
                    ignore_conflicts=True,
                )
            Checkpoint.objects.using(db).bulk_create(
                [row],
                update_conflicts=True,
                unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id"],
                update_fields=[
                    "parent_checkpoint_id",
                    "run_id",
                    "type",
                    "checkpoint",
                    "channel_versions",
                    "metadata",
                    "uses_delta",
                ],
            )
            if self.mirror is not None and checkpoint_ns == "":
                self.mirror.mirror(config, values, new_versions)
        return stored_config

    def _parent_deleted(self, db: str, thread_id: str, checkpoint_ns: str, parent_id: str) -> bool:
        """True when the parent checkpoint is not stored and the thread was deleted; else
        the parent's row (if any) is locked for the caller's transaction."""
        parent = Checkpoint.objects.using(db).filter(
            thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=parent_id
        )
        if builtins.list(parent.select_for_update().values_list("pk", flat=True)[:1]):
            return False
        return DeletedThread.objects.using(db).filter(thread_id=thread_id).exists()

    def _refuse(self, db: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> None:
        """Leave out a checkpoint of a deleted thread: delete the pending writes already
        stored for it, and remember it so that the writes arriving later are refused."""
        logger.warning(
            "LangGraph checkpoint %s of thread %s not stored: the thread was deleted during the run",
            checkpoint_id,
            thread_id,
        )
        key = (thread_id, checkpoint_ns, checkpoint_id)
        with self._refused_lock:
            self._refused[key] = None
            self._refused.move_to_end(key)
            while len(self._refused) > REFUSED_MEMORY:
                self._refused.popitem(last=False)
        CheckpointWrite.objects.using(db).filter(
            thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id
        ).delete()

    def _writes_refused(self, db: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
        """True for writes to a checkpoint of a deleted thread: one ``put`` refused, or one
        not stored (any more) whose id is not newer than the newest checkpoint deleted."""
        with self._refused_lock:
            if (thread_id, checkpoint_ns, checkpoint_id) in self._refused:
                return True
        if (
            Checkpoint.objects.using(db)
            .filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id)
            .exists()
        ):
            return False
        # a newer id may be the first checkpoint of a new run, still being stored
        return (
            DeletedThread.objects.using(db)
            .filter(thread_id=thread_id, last_checkpoint_id__gte=checkpoint_id)
            .exists()
        )

    @tidy_method
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending writes of task ``task_id`` to the checkpoint ``config`` names.

        A write is keyed by the task and its position (``idx``); a regular write stored
        again is kept as first stored, a write to a special channel (error, interrupt,
        resume, scheduled: LangGraph's ``WRITES_IDX_MAP``) is replaced, as LangGraph's savers
        do.

        Writes to a checkpoint of a deleted thread are not stored: to one that ``put`` left
        out (see ``put``), or to one deleted with its thread (its id is not newer than the
        newest checkpoint deleted). Writes may arrive before their checkpoint (LangGraph saves
        both in the background), so writes to a checkpoint not stored yet are otherwise kept;
        a ``put`` that is left out deletes those of its checkpoint."""
        thread_id, checkpoint_ns = _thread(config)
        checkpoint_id = str(config["configurable"]["checkpoint_id"])
        regular: builtins.list[CheckpointWrite] = []
        special: builtins.list[CheckpointWrite] = []
        for idx, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            row = CheckpointWrite(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                task_id=str(task_id),
                task_path=task_path or "",
                idx=WRITES_IDX_MAP.get(channel, idx),
                channel=channel,
                type=type_,
                blob=blob,
            )
            (special if channel in WRITES_IDX_MAP else regular).append(row)
        db = self.db
        with transaction.atomic(using=db):
            if self._writes_refused(db, thread_id, checkpoint_ns, checkpoint_id):
                logger.warning(
                    "LangGraph writes of task %s to checkpoint %s of thread %s not stored: thread deleted",
                    task_id,
                    checkpoint_id,
                    thread_id,
                )
                return
            if regular:
                CheckpointWrite.objects.using(db).bulk_create(regular, ignore_conflicts=True)
            if special:
                CheckpointWrite.objects.using(db).bulk_create(
                    special,
                    update_conflicts=True,
                    unique_fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                    update_fields=["channel", "type", "blob", "task_path"],
                )

    # -- deleting and copying ----------------------------------------------------------

    @tidy_method
    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and pending write of the thread (all namespaces),
        and the agentmemory conversation that mirrors it (``ConversationMirror``) with its
        messages, summaries, search entries and embeddings: deleting a thread deletes its
        transcript wherever it is kept (aegra/aegra#499). Pass
        ``ConversationMirror(keep_on_thread_delete=True)`` to keep the conversation as a
        record; only the thread's link to it goes then. No error for a thread that holds
        nothing. The thread is recorded as deleted (``DeletedThread``): the later steps of a
        run in flight store nothing (see ``put``)."""
        self._delete_threads([str(thread_id)])

    def _delete_threads(self, thread_ids: builtins.list[str]) -> None:
        db = self.db
        # the link and the conversation live where the mirror made them: the conversations'
        # database (the saver's by default, and then all goes in one transaction)
        conversations_db = router.db_for_write(Conversation)
        with transaction.atomic(using=db), transaction.atomic(using=conversations_db):
            erase_threads(db, thread_ids)
            links = MirroredThread.objects.using(conversations_db).filter(thread_id__in=thread_ids)
            if self.mirror is None or not self.mirror.keep_on_thread_delete:
                mirrored = builtins.list(links.values_list("conversation_id", flat=True))
                if mirrored:
                    Conversation.objects.using(conversations_db).filter(pk__in=mirrored).delete()
            links.delete()

    @tidy_method
    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints made by the runs ``run_ids`` (``metadata["run_id"]``), in
        every thread and namespace, with their pending writes and the values no other
        checkpoint uses. A checkpoint of another run whose parent is deleted gets the
        nearest ancestor that stays as its parent (none when none does), so the chain of
        what stays remains whole.

        Raises:
            TypeError: ``run_ids`` is a single string (a sequence of run ids is expected).
        """
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a str")
        run_ids = [str(run_id) for run_id in run_ids]
        if not run_ids:
            return
        db = self.db
        with transaction.atomic(using=db):
            doomed = list(
                Checkpoint.objects.using(db)
                .select_for_update()
                .filter(run_id__in=run_ids)
                .values_list("pk", "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id")
            )
            by_space: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
            for _pk, thread_id, checkpoint_ns, checkpoint_id, parent_id in doomed:
                by_space[(thread_id, checkpoint_ns)][checkpoint_id] = parent_id
            for (thread_id, checkpoint_ns), parents in by_space.items():
                self._delete_checkpoints(db, thread_id, checkpoint_ns, parents)

    def _delete_checkpoints(
        self, db: str, thread_id: str, checkpoint_ns: str, parents: dict[str, str]
    ) -> None:
        """Delete the checkpoints ``parents`` (id -> parent id) of one thread and namespace,
        their writes and the values only they used; re-parent the checkpoints left whose
        parent is deleted onto their nearest ancestor that stays."""
        doomed = list(parents)
        space = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        checkpoints = Checkpoint.objects.using(db).filter(**space)
        freed: set[tuple[str, str]] = set()
        for start in range(0, len(doomed), PAGE_SIZE):
            batch = doomed[start : start + PAGE_SIZE]
            for versions in checkpoints.filter(checkpoint_id__in=batch).values_list(
                "channel_versions", flat=True
            ):
                freed.update((channel, str(version)) for channel, version in versions.items())
            CheckpointWrite.objects.using(db).filter(**space, checkpoint_id__in=batch).delete()
            checkpoints.filter(checkpoint_id__in=batch).delete()

        def surviving(parent: str) -> str:
            seen = set()
            while parent in parents and parent not in seen:
                seen.add(parent)
                parent = parents[parent]
            return parent

        orphans = checkpoints.filter(parent_checkpoint_id__in=doomed).values_list(
            "pk", "parent_checkpoint_id"
        )
        for pk, parent in list(orphans):
            checkpoints.filter(pk=pk).update(parent_checkpoint_id=surviving(parent))
        self._drop_unused_blobs(db, thread_id, checkpoint_ns, freed)

    def _drop_unused_blobs(
        self, db: str, thread_id: str, checkpoint_ns: str, freed: set[tuple[str, str]]
    ) -> None:
        """Delete the values ``freed`` (channel, version) that no checkpoint left in the
        namespace uses."""
        if not freed:
            return
        used: set[tuple[str, str]] = set()
        for versions in (
            Checkpoint.objects.using(db)
            .filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns)
            .values_list("channel_versions", flat=True)
            .iterator(chunk_size=1000)
        ):
            used.update((channel, str(version)) for channel, version in versions.items())
        garbage: dict[str, builtins.list[str]] = defaultdict(builtins.list)
        for channel, version in freed - used:
            garbage[channel].append(version)
        for channel, versions in garbage.items():
            CheckpointBlob.objects.using(db).filter(
                thread_id=thread_id, checkpoint_ns=checkpoint_ns, channel=channel, version__in=versions
            ).delete()

    @tidy_method
    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (all namespaces, the whole parent chain), channel value and
        pending write of one thread to another, in one transaction. The copy is a new
        thread: it is not mirrored into the source's conversation. Copying a thread that
        holds nothing does nothing.

        Raises:
            ValueError: the target thread already holds checkpoints (a copy never mixes two
                threads), or the two ids are the same.
            django.db.IntegrityError: another copy to the same target committed first.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("copy_thread needs two different thread ids")
        db = self.db
        with transaction.atomic(using=db):
            if Checkpoint.objects.using(db).filter(thread_id=target).exists():
                raise ValueError(f"thread {target!r} already holds checkpoints; copy into a new thread id")
            for model, fields in (
                (
                    Checkpoint,
                    (
                        "checkpoint_ns",
                        "checkpoint_id",
                        "parent_checkpoint_id",
                        "run_id",
                        "type",
                        "checkpoint",
                        "channel_versions",
                        "metadata",
                        "uses_delta",
                    ),
                ),
                (CheckpointBlob, ("checkpoint_ns", "channel", "version", "type", "blob")),
                (
                    CheckpointWrite,
                    (
                        "checkpoint_ns",
                        "checkpoint_id",
                        "task_id",
                        "task_path",
                        "idx",
                        "channel",
                        "type",
                        "blob",
                    ),
                ),
            ):
                manager = model._default_manager.using(db)
                rows = manager.filter(thread_id=source).order_by("pk").values("pk", *fields)
                last = 0
                while True:
                    batch = list(rows.filter(pk__gt=last)[:PAGE_SIZE])
                    if not batch:
                        break
                    last = batch[-1].pop("pk")
                    for row in batch:
                        row.pop("pk", None)
                    manager.bulk_create([model(thread_id=target, **row) for row in batch])  # type: ignore[misc]

    @tidy_method
    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the checkpoints of the threads ``thread_ids``.

        ``"delete"``: delete everything of the threads, as ``delete_thread`` does, in one
        transaction. ``"keep_latest"``: keep the latest checkpoint of each namespace (the one
        ``get_tuple`` loads) with its pending writes and the values it uses, and the parent
        it reads its pending sends from when it was written by a LangGraph before checkpoint
        format 4; delete the rest. A kept checkpoint whose parent is deleted is left with
        none. The namespace of a subgraph call (``"name:task-id"``) goes with the root
        checkpoint the call started from, once that checkpoint is saved and deleted. These
        are the rules of LangGraph's PostgreSQL saver. Each thread is pruned in its own
        transaction; checkpoints a run writes meanwhile are kept.

        Raises:
            TypeError: ``thread_ids`` is a single string.
            ValueError: an unknown ``strategy``.
            NotImplementedError: ``"keep_latest"`` on a thread that uses a LangGraph
                ``DeltaChannel``, whose latest value is rebuilt from older checkpoints;
                nothing is pruned then (the other threads neither).
        """
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"Unknown prune strategy: {strategy!r}; use one of {PRUNE_STRATEGIES}")
        threads = list(dict.fromkeys(str(t) for t in thread_ids))
        if not threads:
            return
        if strategy == "delete":
            self._delete_threads(threads)
            return
        db = self.db
        self._refuse_delta_threads(db, threads)
        for thread_id in threads:
            with transaction.atomic(using=db):
                self._keep_latest(db, thread_id)

    def _refuse_delta_threads(self, db: str, threads: builtins.list[str]) -> None:
        delta = sorted(
            set(
                Checkpoint.objects.using(db)
                .filter(thread_id__in=threads, uses_delta=True)
                .values_list("thread_id", flat=True)
            )
        )
        if delta:
            raise NotImplementedError(
                f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(delta)}"
            )

    def _keep_latest(self, db: str, thread_id: str) -> None:
        rows = list(
            Checkpoint.objects.using(db)
            .select_for_update()
            .filter(thread_id=thread_id)
            .values_list(
                "checkpoint_ns",
                "checkpoint_id",
                "parent_checkpoint_id",
                "type",
                "checkpoint",
                "metadata",
                "uses_delta",
            )
        )
        if any(row[6] for row in rows):  # a run started using a DeltaChannel since the check
            raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {thread_id}")
        spaces: dict[str, dict[str, str]] = defaultdict(dict)
        heads: dict[str, tuple[str, str, str, Any, dict[str, Any]]] = {}
        for checkpoint_ns, checkpoint_id, parent_id, type_, data, metadata, _delta in rows:
            spaces[checkpoint_ns][checkpoint_id] = parent_id
            if checkpoint_ns not in heads or checkpoint_id > heads[checkpoint_ns][0]:
                heads[checkpoint_ns] = (checkpoint_id, parent_id, type_, data, metadata)
        kept: dict[str, set[str]] = {}
        for checkpoint_ns, (head, parent_id, type_, data, _metadata) in heads.items():
            kept[checkpoint_ns] = {head}
            # before format 4 a checkpoint's pending sends were its parent's TASKS writes
            old_format = bool(parent_id) and self.serde.loads_typed((type_, bytes(data))).get("v", 4) < 4
            if (
                old_format
                and CheckpointWrite.objects.using(db)
                .filter(
                    thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=parent_id, channel=TASKS
                )
                .exists()
            ):
                kept[checkpoint_ns].add(parent_id)
        roots = spaces.get("", {})
        calls = set()
        for checkpoint_ns, (_head, _parent, _type, _data, metadata) in heads.items():
            root = ((metadata or {}).get("parents") or {}).get("")
            if ":" in checkpoint_ns and root in roots and root not in kept.get("", set()):
                calls.add(checkpoint_ns)
        if calls:
            for model in (CheckpointWrite, CheckpointBlob, Checkpoint):
                model._default_manager.using(db).filter(thread_id=thread_id, checkpoint_ns__in=calls).delete()
        for checkpoint_ns, parents in spaces.items():
            if checkpoint_ns in calls:
                continue
            doomed = {cid: parent for cid, parent in parents.items() if cid not in kept[checkpoint_ns]}
            if not doomed:
                continue
            # kept checkpoints whose parent goes are left with none (not re-parented)
            Checkpoint.objects.using(db).filter(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id__in=kept[checkpoint_ns],
                parent_checkpoint_id__in=list(doomed),
            ).update(parent_checkpoint_id="")
            self._delete_checkpoints(db, thread_id, checkpoint_ns, doomed)

    # -- versions ----------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The version after ``current``: a 32-digit counter and a random fraction, so that
        versions sort as strings (the format of LangGraph's in-memory and PostgreSQL savers)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async twins -------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await sync_to_async(self.get_tuple)(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: reads a page of checkpoints at a time in a worker thread."""
        if limit is not None and limit <= 0:
            return
        pages = self._pages(config, filter, before, limit)
        done = object()
        while True:
            page = await sync_to_async(next)(pages, done)  # type: ignore[call-arg]
            if page is done:
                return
            assert isinstance(page, list)
            for item in page:
                yield item
                if limit is not None:
                    limit -= 1
                    if limit <= 0:
                        return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        return await sync_to_async(self.put)(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes``."""
        await sync_to_async(self.put_writes)(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await sync_to_async(self.delete_thread)(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await sync_to_async(self.delete_for_runs)(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await sync_to_async(self.copy_thread)(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await sync_to_async(self.prune)(thread_ids, strategy=strategy)
