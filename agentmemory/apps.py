"""App configuration: ``ready()`` wires system checks, signal receivers, and the steps lower
layers hand to higher ones (docs/architecture.md): the builder's gap closer and memory
recall (``agentmemory.context.hooks``) and the rebuild of a recorded call's window
(``ModelCall.window()``)."""

from django.apps import AppConfig


class AgentMemoryConfig(AppConfig):
    name = "agentmemory"
    verbose_name = "Agent memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps
        from django.contrib.auth import get_user_model
        from django.db.models.signals import pre_delete

        from agentmemory import calls, checks, closing, conf, recording, signals  # noqa: F401  (registers checks and receivers)
        from agentmemory.agents import checks as agent_checks  # noqa: F401  (agentmemory.E101-E104)
        from agentmemory.context import hooks
        from agentmemory.deletion import delete_owned_conversations, scrub_admin_log
        from agentmemory.models import ModelCall
        from agentmemory.recall import (
            memory,
            receivers,  # noqa: F401  (full-text index upkeep)
        )

        def recall_memory(**arguments):  # type: ignore[no-untyped-def]
            # looked up at each call, so a replaced ``recall_memory`` is the one used
            return memory.recall_memory(**arguments)

        hooks.connect_gap_closer(closing.build_closing_gap)
        hooks.connect_memory_recall(recall_memory)
        ModelCall.window_reader = calls.recorded_window

        # Deleted conversations, messages and facts leave no copy in recorded model calls.
        signals.memory_deleted.connect(
            recording.redact_recorded_copies, dispatch_uid="agentmemory_redact_recorded_copies"
        )
        # ... nor their titles in the admin's log.
        if apps.is_installed("django.contrib.admin"):
            signals.memory_deleted.connect(scrub_admin_log, dispatch_uid="agentmemory_scrub_admin_log")
        # A user's conversations go first, under their row locks, so appends running while
        # the user is deleted cannot make the delete fail.
        pre_delete.connect(
            delete_owned_conversations, sender=get_user_model(), dispatch_uid="agentmemory_user_conversations"
        )
