"""App configuration of ``agentmemory.contrib.mcp`` (no models: it brings the
``mcp_server`` management command)."""

from django.apps import AppConfig


class MCPConfig(AppConfig):
    name = "agentmemory.contrib.mcp"
    label = "agentmemory_mcp"
    verbose_name = "Agent memory: MCP server"
