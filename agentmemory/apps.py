"""App configuration: ``ready()`` only wires system checks and signal receivers."""

from django.apps import AppConfig


class AgentMemoryConfig(AppConfig):
    name = "agentmemory"
    verbose_name = "Agent memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentmemory import checks, conf  # noqa: F401  (registers checks and receivers)
        from agentmemory.agents import checks as agent_checks  # noqa: F401  (agentmemory.E101-E104)
        from agentmemory.recall import receivers  # noqa: F401  (full-text index upkeep)
