"""Django admin of ``agentmemory.contrib.langgraph``: checkpoints and store items to look at,
and the mirrored threads with their conversations and last mirroring error. Read-only, except
that a store item may be deleted: checkpoints are deleted through ``DjangoSaver``
(``delete_thread``, ``prune``), which keeps a thread's chain and values consistent."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agentmemory.admin import BoundedCountPaginator, CheckedQueryAdmin, admin_link, pretty_json
from agentmemory.contrib.langgraph.models import Checkpoint, MirroredThread, StoreItem


class _ReadOnly(CheckedQueryAdmin):
    """A list that refuses, with a 400, filters the database cannot compare and searches
    longer than ``max_search_chars`` (``CheckedQueryAdmin``), as the core admins do."""

    paginator = BoundedCountPaginator
    show_full_result_count = False
    max_search_chars = 1_000

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Checkpoint)
class CheckpointAdmin(_ReadOnly):
    list_display = ("thread_id", "checkpoint_ns", "checkpoint_id", "source", "step", "run_id", "created_at")
    search_fields = ("=thread_id", "=run_id", "=checkpoint_id")
    fields = (
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "run_id",
        "created_at",
        "metadata_json",
        "channel_versions_json",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="source")
    def source(self, obj: Checkpoint) -> str:
        # metadata written by hand may be another JSON value than an object
        return str(obj.metadata.get("source", "")) if isinstance(obj.metadata, dict) else ""

    @admin.display(description="step")
    def step(self, obj: Checkpoint) -> Any:
        return obj.metadata.get("step") if isinstance(obj.metadata, dict) else None

    @admin.display(description="metadata")
    def metadata_json(self, obj: Checkpoint) -> str:
        return pretty_json(obj.metadata)

    @admin.display(description="channel versions")
    def channel_versions_json(self, obj: Checkpoint) -> str:
        return pretty_json(obj.channel_versions)


@admin.register(StoreItem)
class StoreItemAdmin(_ReadOnly):
    list_display = ("namespace", "key", "updated_at", "expires_at")
    search_fields = ("namespace", "=key")
    fields = ("namespace", "key", "value_json", "created_at", "updated_at", "expires_at", "ttl_minutes")
    readonly_fields = fields

    @admin.display(description="value")
    def value_json(self, obj: StoreItem) -> str:
        return pretty_json(obj.value)


@admin.register(MirroredThread)
class MirroredThreadAdmin(_ReadOnly):
    list_display = ("thread_id", "conversation_link", "has_error", "created_at")
    list_select_related = ("conversation",)
    search_fields = ("=thread_id",)
    fields = ("thread_id", "conversation_link", "last_error", "created_at")
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="conversation")
    def conversation_link(self, obj: MirroredThread) -> str:
        return admin_link(obj.conversation)

    @admin.display(description="mirroring error", boolean=True)
    def has_error(self, obj: MirroredThread) -> bool:
        return bool(obj.last_error)
