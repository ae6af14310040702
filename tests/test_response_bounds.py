"""No answer of the API is larger than its documented bound.

The message list, search and export answered whatever the data held: 99.5 MB for a page of
50 messages of 2 MB, and four exports at once took one server process to 2.19 GB. Pages and
search answers now hold the items that fit in ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` (at
least one: an item larger than the bound alone is sent alone), and an export is streamed a
batch of messages at a time. Most tests lower the bound to keep the data small.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Summary
from agentmemory.tokens import ApproximateTokenCounter
from agentmemory.transfer import export_conversation

pytestmark = pytest.mark.django_db

BOUND = 100_000
COUNTER = ApproximateTokenCounter()  # no tokenizer: the sizes are the point here


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("bounded")


def _conversation(user, sizes: list[int], word: str = "ferry") -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="bounded")
    messages = [
        (ChatMessage.human if i % 2 == 0 else ChatMessage.ai)(f"{word} {i} " + "é" * size)
        for i, size in enumerate(sizes)
    ]
    PersistentChatHistory(conv, token_counter=COUNTER).add_messages(messages)
    return conv


def _walk(api_forced: APIClient, url: str, key: str = "next") -> tuple[list[dict[str, Any]], list[int]]:
    """Every item from ``url`` on, following ``key`` links, and the size of each answer."""
    items: list[dict[str, Any]] = []
    sizes: list[int] = []
    while url:
        response = api_forced.get(url)
        assert response.status_code == 200, response.content[:300]
        sizes.append(len(response.content))
        body = response.json()
        items.extend(body["results"])
        url = body[key]
    return items, sizes


def test_a_page_of_messages_holds_what_fits_and_paging_reaches_every_message(
    api_forced, user, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _conversation(user, [12_000] * 20)  # 24 KB each in UTF-8: at most 4 to a page
    items, sizes = _walk(api_forced, f"/api/conversations/{conv.uuid}/messages/?page_size=1000")
    assert [m["seq"] for m in items] == list(range(1, 21))  # each once, in order
    assert max(sizes) <= BOUND and len(sizes) >= 5
    # from the last page back by "previous" links: the same messages, each page bounded
    url = f"/api/conversations/{conv.uuid}/messages/?page_size=1000"
    while url:
        body = api_forced.get(url).json()
        url = body["next"]
    collected = [m["seq"] for m in body["results"]]
    previous = body["previous"]
    while previous:
        response = api_forced.get(previous)
        assert response.status_code == 200 and len(response.content) <= BOUND
        body = response.json()
        collected = [m["seq"] for m in body["results"]] + collected
        previous = body["previous"]
    assert collected == list(range(1, 21))


def test_a_message_larger_than_the_bound_is_sent_alone(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": 20_000}
    conv = _conversation(user, [100, 30_000, 100, 100])
    items, sizes = _walk(api_forced, f"/api/conversations/{conv.uuid}/messages/")
    assert [m["seq"] for m in items] == [1, 2, 3, 4]
    assert len(sizes) == 3 and sizes[1] > 20_000  # the big one alone, the others beside it
    assert all(size <= 20_000 for i, size in enumerate(sizes) if i != 1)


def test_the_default_bound_holds_for_messages_of_two_megabytes(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    # The reported case: a page of such messages was 99.5 MB for 50 of them.
    conv = _conversation(user, [1_999_000] * 6, word="x")
    items, sizes = _walk(api_forced, f"/api/conversations/{conv.uuid}/messages/?page_size=1000")
    assert len(items) == 6 and len(sizes) >= 2 and max(sizes) <= 10_000_000


def test_every_list_is_bounded(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND, "MAX_FACT_CHARS": 30_000}
    big = {"notes": "m" * 30_000}
    for i in range(8):
        Conversation.objects.create(owner=user, agent_key="big", title=f"c{i}", metadata=big)
    conversations, sizes = _walk(api_forced, "/api/conversations/?page_size=200")
    assert len(conversations) == 8 and max(sizes) <= BOUND and len(sizes) >= 3
    memory = KnowledgeMemory(user)
    for i in range(8):
        memory.store(f"fact {i} " + "f" * 29_000, "notes", persistent=True)
    facts, sizes = _walk(api_forced, "/api/facts/?page_size=200")
    assert len(facts) == 8 and max(sizes) <= BOUND and len(sizes) >= 3
    conv = _conversation(user, [10] * 20)
    for i in range(8):
        Summary.objects.create(conversation=conv, text="s" * 30_000, first_seq=1, through_seq=i + 1)
    summaries, sizes = _walk(api_forced, f"/api/conversations/{conv.uuid}/summaries/?page_size=200")
    assert len(summaries) == 8 and max(sizes) <= BOUND and len(sizes) >= 3


def test_search_answers_what_fits_and_says_what_it_left_out(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND, "MAX_FACT_CHARS": 30_000}
    _conversation(user, [20_000] * 10)
    memory = KnowledgeMemory(user, agent_key="bounded")
    for i in range(10):
        memory.store(f"The ferry note {i} " + "g" * 20_000, "notes", persistent=True)
    response = api_forced.get("/api/search/", {"q": "ferry", "k": 10, "agent_key": "bounded"})
    assert response.status_code == 200 and len(response.content) <= BOUND
    body = response.json()
    kept = {kind: len(body[kind]) for kind in ("messages", "facts")}
    assert kept["messages"] >= 1 and kept["facts"] >= 1  # each kind gets its turn
    assert abs(kept["messages"] - kept["facts"]) <= 1
    assert body["left_out"] == {"messages": 10 - kept["messages"], "facts": 10 - kept["facts"]}
    small = api_forced.get("/api/search/", {"q": "ferry", "k": 1, "agent_key": "bounded"}).json()
    assert small["left_out"] == {"messages": 0, "facts": 0}


def test_an_export_is_streamed_and_is_the_whole_document(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user, [5_000] * 30)
    Summary.objects.create(
        conversation=conv, text="about ferries", first_seq=1, through_seq=4, human_messages_covered=2
    )
    with CaptureQueriesContext(connection) as queries:
        response = api_forced.get(f"/api/conversations/{conv.uuid}/export/")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/json"
    # nothing of the messages was read to answer: they are read as the body is sent
    assert not [q for q in queries.captured_queries if "agentmemory_message" in q["sql"]]
    document = json.loads(response.getvalue())
    expected = json.loads(json.dumps(export_conversation(conv)))
    assert document == {**expected, "exported_at": document["exported_at"]}
    imported = api_forced.post("/api/conversations/import/", document, format="json")
    assert imported.status_code == 201, imported.content[:300]
    assert api_forced.get(f"/api/conversations/{conv.uuid}/export/?format=json").streaming


def test_the_schema_states_the_bounds(settings) -> None:  # type: ignore[no-untyped-def]
    from drf_spectacular.generators import SchemaGenerator

    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": 1_234_567}
    schema = SchemaGenerator().get_schema(request=None, public=True)
    paths = schema["paths"]
    for path in (
        "/api/conversations/",
        "/api/conversations/{conversation_uuid}/messages/",
        "/api/conversations/{conversation_uuid}/summaries/",
        "/api/conversations/{conversation_uuid}/model-calls/",
        "/api/facts/",
    ):
        ref = paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        page = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert "1,234,567 bytes" in page["properties"]["results"]["description"], path
    search = schema["components"]["schemas"]["SearchResult"]
    assert "left_out" in search["required"] and "API_MAX_RESPONSE_BYTES" in search["description"]
    export = paths["/api/conversations/{uuid}/export/"]["get"]["responses"]["200"]
    assert "streamed" in export["description"]


@pytest.mark.parametrize(
    ("value", "problem"), [(0, True), (1_000, True), ("10", True), (True, True), (16_384, False)]
)
def test_the_bound_is_checked(settings, value, problem) -> None:  # type: ignore[no-untyped-def]
    from django.core.checks import run_checks

    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": value}
    assert any(m.id == "agentmemory.E302" for m in run_checks()) is problem
