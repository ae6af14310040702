"""App configuration: ``ready()`` only wires system checks and signal receivers."""

from django.apps import AppConfig


class AgentMemoryConfig(AppConfig):
    name = "agentmemory"
    verbose_name = "Agent memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_migrate, pre_delete

        from agentmemory import checks, conf  # noqa: F401  (registers checks and receivers)
        from agentmemory.agents import checks as agent_checks  # noqa: F401  (agentmemory.E101-E104)
        from agentmemory.deletion import delete_owned_conversations
        from agentmemory.recall import receivers  # noqa: F401  (full-text index upkeep)
        from agentmemory.store.functions import install_after_migrate

        # A user's conversations go first, under their row locks, so appends running while
        # the user is deleted cannot make the delete fail.
        pre_delete.connect(
            delete_owned_conversations, sender=get_user_model(), dispatch_uid="agentmemory_user_conversations"
        )
        # PostgreSQL: the window's head statement as a server-side function, planned once
        # per server session (agentmemory.store.functions).
        post_migrate.connect(install_after_migrate, dispatch_uid="agentmemory_window_head_functions")
