"""App configuration of ``agentmemory.contrib.partitioning``."""

from django.apps import AppConfig


class PartitioningConfig(AppConfig):
    name = "agentmemory.contrib.partitioning"
    label = "agentmemory_partitioning"
    verbose_name = "Agent memory: partitioned history"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.checks import register

        from agentmemory.contrib.partitioning.checks import check_partitioning

        register(check_partitioning)
