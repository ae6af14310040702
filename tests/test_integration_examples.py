"""The example project's LangGraph and MCP examples run, each as its own process on the test
database (a sync LangGraph graph saves from worker threads, each with its own connection)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.helpers_child_db import child_env
from tests.helpers_concurrency import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def _manage(tmp_path: Any, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(tmp_path),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_langgraph_demo_mirrors_the_graphs_turns_into_a_conversation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = _manage(tmp_path, "langgraph_demo", "--user", "demo", "--thread", "example")
    assert "agent: Order A-1001 has shipped with DHL" in out
    listed = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert [line.split(":")[0] for line in listed] == [
        "1. human",
        "2. ai",
        "3. tool",
        "4. ai",
        "5. human",
        "6. ai",
        "7. tool",
        "8. ai",
    ]
    assert "2. ai: lookup_order({'order_id': 'A-1001'})" in listed
    found = next(line for line in out.splitlines() if line.startswith("search 'DHL': "))
    assert "DHL" in found.removeprefix("search 'DHL': ")
    assert "notes about the user: ['Where is my order A-1001?']" in out


def test_mcp_demo_drives_the_stdio_server_with_the_mcp_client(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = _manage(tmp_path, "mcp_demo", "--user", "demo")
    assert (
        "tools: remember, recall, search_conversations, list_conversations, get_context_window, forget" in out
    )
    assert '"content": "Prefers delivery to the office"' in out.split("recall:")[1]
    assert "forget (tool error): no fact" in out


def test_the_projects_asgi_application_serves_mcp_beside_django(django_user_model) -> None:  # type: ignore[no-untyped-def]
    import httpx2
    from asgiref.sync import async_to_sync
    from rest_framework.authtoken.models import Token

    from agentmemory.contrib.mcp.asgi import MemoryMCPApp
    from project.asgi import application

    assert isinstance(application, MemoryMCPApp) and application.path == "/mcp"
    token = Token.objects.create(user=django_user_model.objects.create_user("asgi-user")).key

    async def post() -> Any:
        transport = httpx2.ASGITransport(app=application)
        async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as http:
            return await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "authorization": f"Token {token}",
                    "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": "2025-06-18",
                },
            )

    answer = async_to_sync(post)()
    assert answer.status_code == 200 and len(answer.json()["result"]["tools"]) == 6
