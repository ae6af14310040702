"""The MCP server's answers and requests are bounded in bytes, as the API's are.

Its tools answered whatever the data held: ``search_conversations`` with ``k=50`` hits of
2 MB messages answered 100 MB (twice: as text and as structured content), and
``get_context_window`` at its largest budget a window of every small message that fits
200,000 tokens. The streamable-HTTP endpoint read a request body of any size into memory
before looking at it. Each answer now holds what fits in
``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` (says what it left out), and a body over Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` is refused with 413 before it is read.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentmemory.contrib.mcp.asgi import MemoryMCPApp
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from tests.test_mcp import ACCEPT, _token, call, over_http

pytestmark = pytest.mark.django_db

BOUND = 200_000


@pytest.fixture
def alice(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def bounded(settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}


def _size(result: Any) -> int:
    text = " ".join(block.text for block in result.content)
    return len(text.encode()) + len(json.dumps(result.structured_content, ensure_ascii=False).encode())


def test_a_search_answers_the_hits_that_fit(alice, bounded) -> None:  # type: ignore[no-untyped-def]
    conversation = Conversation.objects.create(owner=alice)
    PersistentChatHistory(conversation).add_messages(
        [ChatMessage.human(f"ferry {i} " + "x" * 50_000) for i in range(10)]
    )
    found = call(alice, "search_conversations", {"query": "ferry", "k": 10})
    assert not found.is_error
    body = found.structured_content
    assert 1 <= len(body["messages"]) < 10
    assert body["left_out"] == 10 - len(body["messages"])
    assert _size(found) <= BOUND


def test_a_recall_answers_the_facts_that_fit(alice, bounded) -> None:  # type: ignore[no-untyped-def]
    memory = KnowledgeMemory(alice)
    for i in range(20):
        memory.store(f"ferry note {i}: " + f"{i} word " * 1_200, "travel", persistent=True)
    found = call(alice, "recall", {"query": "ferry note", "k": 20})
    body = found.structured_content
    assert 1 <= len(body["facts"]) < 20
    assert body["left_out"] == 20 - len(body["facts"])
    assert _size(found) <= BOUND


def test_a_context_window_answers_the_newest_messages_that_fit(alice, bounded) -> None:  # type: ignore[no-untyped-def]
    conversation = Conversation.objects.create(owner=alice)
    history = PersistentChatHistory(conversation)
    history.add_messages(
        [
            ChatMessage.human(f"question {i} " + "y" * 3_000) if i % 2 == 0 else ChatMessage.ai("ok")
            for i in range(400)
        ]
    )
    window = call(
        alice, "get_context_window", {"conversation": str(conversation.uuid), "max_tokens": 200_000}
    )
    assert not window.is_error
    body = window.structured_content
    assert _size(window) <= BOUND
    assert 1 <= len(body["messages"]) < 400
    # the newest messages, contiguous
    assert body["last_seq"] == 400 and body["messages"][-1]["seq"] == 400
    assert [m["seq"] for m in body["messages"]] == list(range(body["first_seq"], 401))


def test_a_request_body_over_the_upload_limit_is_refused_before_it_is_read(alice, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    payload = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"content": "x" * 20_000}},
    }

    async def post(http: Any) -> Any:
        return await http.post("/mcp", json=payload, headers=ACCEPT)

    token = _token(alice)
    response = over_http(MemoryMCPApp(), token, post)
    assert response.status_code == 413
    assert "detail" in response.json()

    async def streamed(http: Any) -> Any:  # no Content-Length: counted as it arrives
        async def chunks() -> Any:
            for _ in range(5):
                yield b" " * 5_000

        return await http.post("/mcp", content=chunks(), headers=ACCEPT)

    assert over_http(MemoryMCPApp(), token, streamed).status_code == 413
    assert not KnowledgeMemory(alice).live_facts().exists()


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("remember", {"content": "Likes tea", "persistent": 1}, "persistent"),
        ("remember", {"content": "Likes tea", "persistent": "yes"}, "persistent"),
        ("remember", {"content": "Likes tea", "importance": "0.5"}, "importance"),
        ("remember", {"content": "Likes tea", "importance": True}, "importance"),
        ("recall", {"query": "tea", "k": "5"}, "k"),
        ("recall", {"query": "tea", "k": 5.0}, "k"),
        ("list_conversations", {"limit": True}, "limit"),
        (
            "get_context_window",
            {"conversation": "00000000-0000-0000-0000-000000000000", "max_tokens": "9"},
            "max_tokens",
        ),
    ],
)
def test_arguments_are_of_the_type_their_schema_says(alice, name, arguments, field) -> None:  # type: ignore[no-untyped-def]
    # the tools' JSON Schema says boolean, number, integer: the lax reading took 1 and "yes"
    # as true, "0.5" as a number, 5.0 and true as integers (as the API took persistent: 0)
    result = call(alice, name, arguments)
    assert result.is_error and field in " ".join(block.text for block in result.content)
    assert not KnowledgeMemory(alice).live_facts().exists()


def test_arguments_of_their_type_are_taken(alice) -> None:  # type: ignore[no-untyped-def]
    stored = call(alice, "remember", {"content": "Likes tea", "persistent": True, "importance": 1})
    assert not stored.is_error and stored.structured_content["fact"]["importance"] == 1.0
    found = call(alice, "recall", {"query": "tea", "k": 5})
    assert [fact["content"] for fact in found.structured_content["facts"]] == ["Likes tea"]
    fact_id = stored.structured_content["fact"]["id"]
    assert not call(alice, "forget", {"fact": fact_id}).is_error
