"""The agentmemory MCP server: its tools in process, over streamable HTTP (``MemoryMCPApp``)
with the host's DRF authentication, and over stdio (``manage.py mcp_server``) with the ``mcp``
package's own clients."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from asgiref.sync import async_to_sync
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token

from agentmemory.contrib.mcp.asgi import MemoryMCPApp
from agentmemory.contrib.mcp.server import bind_owner, create_server
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Fact
from tests.helpers_child_db import child_env

pytestmark = pytest.mark.django_db

TOOLS = {"remember", "recall", "search_conversations", "list_conversations", "get_context_window", "forget"}


@pytest.fixture
def alice(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def bob(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("bob", password="bob-pw")


def as_user(user: Any, scenario: Callable[[Client], Awaitable[Any]], **scope: Any) -> Any:
    """Run ``scenario`` with an in-process MCP client of a server bound to ``user``."""

    async def main() -> Any:
        with bind_owner(user.pk, **scope):
            async with Client(create_server()) as client:
                return await scenario(client)

    return async_to_sync(main)()


def call(user: Any, name: str, arguments: dict[str, Any]) -> Any:
    async def scenario(client: Client) -> Any:
        return await client.call_tool(name, arguments)

    return as_user(user, scenario)


def _text(result: Any) -> str:
    return " ".join(block.text for block in result.content)


def _conversation(owner: Any, title: str = "Order 1042") -> Conversation:
    conversation = Conversation.objects.create(owner=owner, agent_key="support", title=title)
    PersistentChatHistory(conversation).add_messages(
        [
            ChatMessage.human("Where is my order 1042?"),
            ChatMessage.ai(
                None, [ToolCall(id="call_1", name="lookup_order", arguments={"order_id": "1042"})]
            ),
            ChatMessage.tool(
                '{"status": "shipped", "carrier": "DHL"}', tool_call_id="call_1", name="lookup_order"
            ),
            ChatMessage.ai("Order 1042 has shipped with DHL."),
        ]
    )
    return conversation


# -- the tools -------------------------------------------------------------------------


def test_the_tools_are_listed_with_their_argument_schemas(alice) -> None:  # type: ignore[no-untyped-def]
    async def scenario(client: Client) -> Any:
        return await client.list_tools()

    tools = {tool.name: tool for tool in as_user(alice, scenario).tools}
    assert set(tools) == TOOLS
    assert tools["remember"].input_schema["required"] == ["content"]
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["recall"].annotations.read_only_hint is True


def test_remember_then_recall_then_forget(alice) -> None:  # type: ignore[no-untyped-def]
    stored = call(alice, "remember", {"content": "Prefers tea over coffee", "category": "preferences"})
    assert not stored.is_error and stored.structured_content["action"] == "created"
    fact_id = stored.structured_content["fact"]["id"]
    assert json.loads(_text(stored)) == stored.structured_content
    assert Fact.objects.get(uuid=fact_id).owner_id == alice.pk
    again = call(alice, "remember", {"content": "Prefers tea over coffee", "category": "preferences"})
    assert again.structured_content["action"] == "duplicate"
    found = call(alice, "recall", {"query": "tea"})
    assert [f["id"] for f in found.structured_content["facts"]] == [fact_id]
    gone = call(alice, "forget", {"fact": fact_id})
    assert gone.structured_content == {"forgotten": fact_id, "facts_deleted": 1}
    assert call(alice, "recall", {"query": "tea"}).structured_content == {"facts": []}


def test_search_list_and_context_window_of_conversations(alice) -> None:  # type: ignore[no-untyped-def]
    conversation = _conversation(alice)
    found = call(alice, "search_conversations", {"query": "DHL"})
    hits = found.structured_content["messages"]
    assert hits and {h["conversation"] for h in hits} == {str(conversation.uuid)}
    listed = call(alice, "list_conversations", {})
    assert [c["id"] for c in listed.structured_content["conversations"]] == [str(conversation.uuid)]
    window = call(alice, "get_context_window", {"conversation": str(conversation.uuid), "max_tokens": 500})
    body = window.structured_content
    assert [m["role"] for m in body["messages"]] == ["human", "ai", "tool", "ai"]
    assert body["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert body["total_tokens"] <= 500
    openai = call(
        alice,
        "get_context_window",
        {"conversation": str(conversation.uuid), "message_format": "openai"},
    ).structured_content
    assert [m["role"] for m in openai["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_another_users_memory_is_out_of_reach(alice, bob) -> None:  # type: ignore[no-untyped-def]
    bobs_fact = KnowledgeMemory(bob).store("Bob's locker code is 4711").fact
    bobs_conversation = _conversation(bob, "Bob's order")
    for name, key, foreign, extra in [
        ("forget", "fact", bobs_fact.uuid, {}),
        ("get_context_window", "conversation", bobs_conversation.uuid, {}),
        ("search_conversations", "conversation", bobs_conversation.uuid, {"query": "DHL"}),
    ]:
        result = call(alice, name, {**extra, key: str(foreign)})
        nowhere = uuid.uuid4()
        unknown = call(alice, name, {**extra, key: str(nowhere)})
        assert result.is_error and unknown.is_error, name
        # answered exactly as an id that exists nowhere
        assert _text(result).replace(str(foreign), "ID") == _text(unknown).replace(str(nowhere), "ID"), name
    assert call(alice, "recall", {"query": "locker code"}).structured_content == {"facts": []}
    assert call(alice, "search_conversations", {"query": "DHL"}).structured_content == {"messages": []}
    assert call(alice, "list_conversations", {}).structured_content == {"conversations": []}
    assert Fact.objects.filter(pk=bobs_fact.pk).exists()


def test_bad_calls_are_tool_errors_and_the_server_goes_on(alice, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import agentmemory.recall

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(agentmemory.recall, "search_messages", broken)

    async def scenario(client: Client) -> list[Any]:
        return [
            await client.call_tool("recall", {}),
            await client.call_tool("recall", {"query": "x", "k": 0}),
            await client.call_tool("remember", {"content": "x", "surprise": 1}),
            await client.call_tool("remember", {"content": "bad\x00byte"}),
            await client.call_tool("forget", {"fact": "not-a-uuid"}),
            await client.call_tool("no_such_tool", {}),
            await client.call_tool("search_conversations", {"query": "x"}),
            await client.call_tool("remember", {"content": "still working"}),
        ]

    with caplog.at_level(logging.ERROR, logger="agentmemory.contrib.mcp"):
        results = as_user(alice, scenario)
    assert [r.is_error for r in results] == [True] * 7 + [False]
    assert "query" in _text(results[0]) and "k" in _text(results[1]) and "surprise" in _text(results[2])
    assert "NUL" in _text(results[3]) or "null" in _text(results[3]).lower()
    assert "no_such_tool" in _text(results[5])
    assert "database on fire" not in _text(results[6]) and "database on fire" in caplog.text


def test_without_a_bound_user_every_call_is_refused() -> None:
    async def main() -> Any:
        async with Client(create_server()) as client:
            return await client.call_tool("recall", {"query": "x"})

    result = async_to_sync(main)()
    assert result.is_error and "not authenticated" in _text(result)


def test_a_scope_keeps_agent_keys_apart(alice) -> None:  # type: ignore[no-untyped-def]
    async def remember(client: Client) -> Any:
        return await client.call_tool("remember", {"content": "Uses vim"})

    as_user(alice, remember, agent_key="editor")
    assert KnowledgeMemory(alice, agent_key="editor").live_facts().count() == 1
    assert call(alice, "recall", {"query": "vim"}).structured_content == {"facts": []}


def test_a_scope_with_an_agent_key_reads_no_conversation_of_another_agent(alice) -> None:  # type: ignore[no-untyped-def]
    # list and search kept to the bound agent key; a window by id went around them
    support = _conversation(alice)

    async def window(client: Client) -> Any:
        return await client.call_tool("get_context_window", {"conversation": str(support.uuid)})

    async def search(client: Client) -> Any:
        return await client.call_tool(
            "search_conversations", {"query": "DHL", "conversation": str(support.uuid)}
        )

    for scenario in (window, search):
        result = as_user(alice, scenario, agent_key="editor")
        assert result.is_error and "no conversation" in _text(result)
        assert not as_user(alice, scenario, agent_key="support").is_error
        assert not as_user(alice, scenario).is_error


# -- streamable HTTP -----------------------------------------------------------------------


def over_http(app: Any, headers: dict[str, str], scenario: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``scenario`` with an httpx client talking to ``app`` in process."""

    async def main() -> Any:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://testserver", headers=headers
        ) as http:
            return await scenario(http)

    return async_to_sync(main)()


def mcp_over_http(
    app: Any, headers: dict[str, str], scenario: Callable[[ClientSession], Awaitable[Any]]
) -> Any:
    """Run ``scenario`` with the ``mcp`` package's streamable-HTTP client session."""

    async def with_session(http: Any) -> Any:
        async with (
            streamable_http_client("http://testserver/mcp", http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await scenario(session)

    return over_http(app, headers, with_session)


def _token(user: Any) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.create(user=user).key}"}


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
ACCEPT = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


def test_http_calls_act_for_the_user_the_token_names(alice, bob) -> None:  # type: ignore[no-untyped-def]
    app = MemoryMCPApp()
    bobs_fact = KnowledgeMemory(bob).store("Bob's locker code is 4711").fact

    async def alice_session(session: ClientSession) -> Any:
        tools = await session.list_tools()
        stored = await session.call_tool("remember", {"content": "Alice flies to Lisbon in May"})
        found = await session.call_tool("recall", {"query": "Lisbon"})
        foreign = await session.call_tool("forget", {"fact": str(bobs_fact.uuid)})
        return tools, stored, found, foreign

    tools, stored, found, foreign = mcp_over_http(app, _token(alice), alice_session)
    assert {t.name for t in tools.tools} == TOOLS
    assert [f["id"] for f in found.structured_content["facts"]] == [stored.structured_content["fact"]["id"]]
    assert foreign.is_error and Fact.objects.filter(pk=bobs_fact.pk).exists()

    async def bob_session(session: ClientSession) -> Any:
        return await session.call_tool("recall", {"query": "Lisbon"})

    assert mcp_over_http(app, _token(bob), bob_session).structured_content == {"facts": []}
    assert Fact.objects.get(content__contains="Lisbon").owner_id == alice.pk


def test_http_without_valid_credentials_is_401_with_a_challenge(alice, client) -> None:  # type: ignore[no-untyped-def]
    app = MemoryMCPApp()
    inactive = type(alice).objects.create_user("gone", is_active=False)
    client.force_login(alice)  # a browser session: its cookie is not read here
    cookie = {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    for headers in ({}, {"Authorization": "Token not-a-token"}, _token(inactive), cookie):

        async def post(http: Any) -> Any:
            return await http.post("/mcp", json=LIST, headers=ACCEPT)

        response = over_http(app, headers, post)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Token"
        assert "detail" in response.json()


def test_http_takes_the_hosts_other_authentication_classes(alice) -> None:  # type: ignore[no-untyped-def]
    import base64

    basic = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-pw").decode()}

    async def post(http: Any) -> Any:
        return await http.post("/mcp/", json=LIST, headers=ACCEPT)

    assert over_http(MemoryMCPApp(), basic, post).status_code == 200
    only_tokens = MemoryMCPApp(authentication_classes=["rest_framework.authentication.TokenAuthentication"])
    assert over_http(only_tokens, basic, post).status_code == 401


def test_http_refuses_a_host_outside_allowed_hosts(alice) -> None:  # type: ignore[no-untyped-def]
    async def post(http: Any) -> Any:
        return await http.post("/mcp", json=LIST, headers={**ACCEPT, "host": "evil.example"})

    response = over_http(MemoryMCPApp(), _token(alice), post)
    assert response.status_code == 400


@pytest.fixture
def keep_test_connection():  # type: ignore[no-untyped-def]
    """Django's ASGI handler closes old connections around each request, which would close
    the connection of the test's transaction; Django's test client disconnects them too."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.usefixtures("keep_test_connection")
def test_other_paths_go_to_the_wrapped_django_application(alice) -> None:  # type: ignore[no-untyped-def]
    from django.core.asgi import get_asgi_application

    app = MemoryMCPApp(get_asgi_application(), path="/mcp/")

    async def get(http: Any) -> Any:
        return await http.get("/admin/login/")

    assert over_http(app, {}, get).status_code == 200

    async def post(http: Any) -> Any:
        return await http.post("/mcp", json=LIST, headers=ACCEPT)

    answer = over_http(app, _token(alice), post)
    assert answer.status_code == 200 and {t["name"] for t in answer.json()["result"]["tools"]} == TOOLS
    assert over_http(MemoryMCPApp(), {}, get).status_code == 404


# -- stdio: manage.py mcp_server -------------------------------------------------------


def _server_env(tmp_path: Any) -> dict[str, str]:
    # DEBUG logs: they must go to stderr, never into the protocol
    return child_env(tmp_path, AGENTMEMORY_LOG_LEVEL="DEBUG")


@pytest.mark.django_db(transaction=True)
def test_an_mcp_client_uses_manage_py_mcp_server_over_stdio(alice, bob, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sys

    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.helpers_concurrency import ROOT

    bobs_fact = KnowledgeMemory(bob).store("Bob's locker code is 4711").fact
    bobs_conversation = _conversation(bob, "Bob's order")
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_server", "--user", "alice"],
        env=_server_env(tmp_path),
        cwd=str(ROOT),
    )

    async def main(errlog: Any) -> Any:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return (
                await session.list_tools(),
                await session.call_tool("remember", {"content": "Alice's favourite tea is sencha"}),
                await session.call_tool("recall", {"query": "tea"}),
                await session.call_tool("forget", {"fact": str(bobs_fact.uuid)}),
                await session.call_tool("get_context_window", {"conversation": str(bobs_conversation.uuid)}),
                await session.call_tool("search_conversations", {"query": "DHL"}),
            )

    with (tmp_path / "stderr.txt").open("w+") as errlog:
        tools, stored, recalled, forget_bobs, bobs_window, search = async_to_sync(main)(errlog)
        errlog.seek(0)
        stderr = errlog.read()
    assert {t.name for t in tools.tools} == TOOLS
    assert not stored.is_error
    assert [f["content"] for f in recalled.structured_content["facts"]] == ["Alice's favourite tea is sencha"]
    assert forget_bobs.is_error and "no fact" in _text(forget_bobs)
    assert bobs_window.is_error and "no conversation" in _text(bobs_window)
    assert search.structured_content == {"messages": []}
    assert "MCP server on stdio for user" in stderr


@pytest.mark.django_db(transaction=True)
def test_mcp_server_writes_nothing_but_the_protocol_to_stdout(alice, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from tests.helpers_concurrency import ROOT

    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": "Likes jazz"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "jazz"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "recall", "arguments": {"k": "many"}},
        },
    ]
    with subprocess.Popen(
        [sys.executable, "manage.py", "mcp_server", "--user", "alice"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_server_env(tmp_path),
    ) as server:
        assert server.stdin is not None and server.stdout is not None and server.stderr is not None
        answers = []
        try:
            for request in requests:
                server.stdin.write(json.dumps(request) + "\n")
                server.stdin.flush()
                if "id" in request:  # one answer per request, read before the next is sent
                    answers.append(json.loads(server.stdout.readline()))
            server.stdin.close()
            rest, stderr = server.stdout.read(), server.stderr.read()
            assert server.wait(timeout=60) == 0, stderr
        finally:
            if server.poll() is None:  # pragma: no cover - only when an assertion above failed
                server.kill()
    assert rest == ""  # nothing else was written to stdout
    assert [a["jsonrpc"] for a in answers] == ["2.0"] * 5 and [a["id"] for a in answers] == [1, 2, 3, 4, 5]
    by_id = {a["id"]: a["result"] for a in answers}
    assert by_id[4]["structuredContent"]["facts"][0]["content"] == "Likes jazz"
    assert by_id[5]["isError"] is True
    assert "recall of facts" in stderr  # the DEBUG logs went to stderr


def test_mcp_server_refuses_an_unknown_user() -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("mcp_server", "--user", "nobody")


def test_http_answers_only_post(alice) -> None:  # type: ignore[no-untyped-def]
    async def others(http: Any) -> list[Any]:
        return [
            await http.get("/mcp", headers={"accept": "text/event-stream"}),
            await http.delete("/mcp"),
        ]

    for response in over_http(MemoryMCPApp(), _token(alice), others):
        assert response.status_code == 405 and response.headers["allow"] == "POST"
