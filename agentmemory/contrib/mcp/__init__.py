"""A memory server for assistants that speak the Model Context Protocol (MCP).

Tools (``agentmemory.contrib.mcp.server``): ``remember``, ``recall``,
``search_conversations``, ``list_conversations``, ``get_context_window`` and ``forget``,
every call scoped to one user; bad input, ids of another user's memory and failures come back
as tool errors (``isError`` results), never as a crash of the server.

Two transports:

- stdio: ``manage.py mcp_server --user USERNAME`` (add ``"agentmemory.contrib.mcp"`` to
  ``INSTALLED_APPS`` for the command), for clients that start the server themselves.
- streamable HTTP: ``agentmemory.contrib.mcp.asgi.MemoryMCPApp``, an ASGI app the host mounts
  (around its Django ASGI app), authenticated by the host's DRF authentication classes.

Needs the ``mcp`` extra (``pip install 'django-agentmemory[mcp]'``); importing this module
without it raises ``ImportError`` with that hint. See ``docs/mcp.md``.
"""

from __future__ import annotations

from importlib.util import find_spec

# Found, not imported: Django imports this module while it loads INSTALLED_APPS, for every
# management command, and importing the MCP SDK takes a while.
try:
    _found = find_spec("mcp") is not None
except ModuleNotFoundError:  # pragma: no cover - a broken installation
    _found = False
if not _found:
    raise ImportError("agentmemory.contrib.mcp needs the MCP SDK: pip install 'django-agentmemory[mcp]'")
