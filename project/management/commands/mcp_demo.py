"""``manage.py mcp_demo``: what an MCP client does with ``manage.py mcp_server``, offline."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Start 'manage.py mcp_server --user USER' the way an MCP client (Claude Desktop, an IDE) "
        "starts it, over stdio with the mcp package's client, then list its tools, remember a "
        "fact, recall it and search the user's conversations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user", default="demo", help="the user whose memory is served (created when missing)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import anyio
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        get_user_model()._default_manager.get_or_create(**{get_user_model().USERNAME_FIELD: options["user"]})
        server = StdioServerParameters(
            command=sys.executable,
            args=[str(settings.BASE_DIR / "manage.py"), "mcp_server", "--user", options["user"]],
            env=dict(os.environ),  # the same settings and database as this command
            cwd=str(settings.BASE_DIR),
        )

        async def session() -> None:
            async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = await client.list_tools()
                self.stdout.write(f"tools: {', '.join(t.name for t in tools.tools)}")
                for name, arguments in (
                    ("remember", {"content": "Prefers delivery to the office", "category": "preferences"}),
                    ("recall", {"query": "delivery"}),
                    ("search_conversations", {"query": "order", "k": 3}),
                    ("forget", {"fact": "00000000-0000-0000-0000-000000000000"}),
                ):
                    result = await client.call_tool(name, arguments)
                    answer = " ".join(block.text for block in result.content if block.type == "text")
                    shown = answer if result.is_error else json.dumps(result.structured_content)[:300]
                    self.stdout.write(f"{name}{' (tool error)' if result.is_error else ''}: {shown}")

        anyio.run(session)
