"""ASGI entry point of the example project: Django, and the agentmemory MCP server at ``/mcp``
(streamable HTTP, authenticated like the API: ``Authorization: Token ...``) when the ``mcp``
extra is installed. Serve it with ``uvicorn project.asgi:application`` (docs/mcp.md)."""

import os

from django.apps import apps
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_asgi_application()

if apps.is_installed("agentmemory.contrib.mcp"):
    from agentmemory.contrib.mcp.asgi import MemoryMCPApp

    application = MemoryMCPApp(application, path="/mcp")
