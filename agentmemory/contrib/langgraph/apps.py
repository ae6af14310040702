"""App configuration of ``agentmemory.contrib.langgraph``."""

from django.apps import AppConfig
from django.db.models.signals import pre_delete


class LangGraphConfig(AppConfig):
    name = "agentmemory.contrib.langgraph"
    label = "agentmemory_langgraph"
    verbose_name = "Agent memory: LangGraph"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentmemory import signals
        from agentmemory.contrib.langgraph.models import MirroredThread
        from agentmemory.contrib.langgraph.receivers import (
            delete_mirrored_checkpoints,
            forget_cleared_threads,
        )

        # A deleted conversation takes the checkpoints of the thread it mirrors with it.
        pre_delete.connect(
            delete_mirrored_checkpoints,
            sender=MirroredThread,
            dispatch_uid="agentmemory_langgraph_mirrored_checkpoints",
        )
        # A conversation cleared or blanked (its words erased, the row kept) takes them from
        # the checkpoints too: the thread starts afresh.
        signals.memory_deleted.connect(
            forget_cleared_threads, dispatch_uid="agentmemory_langgraph_forget_cleared_threads"
        )
