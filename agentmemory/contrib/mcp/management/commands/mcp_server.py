"""``manage.py mcp_server --user USERNAME``: the agentmemory MCP server on stdio."""

from __future__ import annotations

import sys
from typing import Any

import anyio
from django.core.management.base import CommandError, CommandParser

from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import find_user_by_name


class Command(TextArgumentsCommand):
    help = (
        "Serve USERNAME's memory to an MCP client over stdin and stdout (the stdio transport): "
        "remember, recall, search_conversations, list_conversations, get_context_window, forget. "
        "Only the protocol goes to stdout; logs and anything printed go to stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username of the user whose memory is served")
        parser.add_argument("--agent-key", default=None, help="long-term memory scope: agent key (exact)")
        parser.add_argument("--namespace", default=None, help="long-term memory scope: namespace (exact)")

    def handle(self, *args: Any, **options: Any) -> None:
        from agentmemory.contrib.mcp.server import bind_owner, serve_stdio

        user = find_user_by_name(options["user"])
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        if not user.is_active:
            raise CommandError(f"user {options['user']!r} is inactive")
        # from here on only the transport writes to stdout: it takes file descriptor 1 and
        # points it at stderr while it serves, so logs and prints cannot reach the client
        sys.stdout.flush()
        with bind_owner(user.pk, agent_key=options["agent_key"], namespace=options["namespace"]):
            anyio.run(serve_stdio)
