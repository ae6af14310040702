"""App configuration of ``agentmemory.contrib.langgraph``."""

from django.apps import AppConfig


class LangGraphConfig(AppConfig):
    name = "agentmemory.contrib.langgraph"
    label = "agentmemory_langgraph"
    verbose_name = "Agent memory: LangGraph"
    default_auto_field = "django.db.models.BigAutoField"
