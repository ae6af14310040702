"""App configuration of ``agentmemory.contrib.pgvector``."""

from django.apps import AppConfig


class PgVectorConfig(AppConfig):
    name = "agentmemory.contrib.pgvector"
    label = "agentmemory_pgvector"
    verbose_name = "Agent memory: pgvector"
    default_auto_field = "django.db.models.BigAutoField"
