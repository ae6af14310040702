"""One rule for scope strings (``agent_key``, ``namespace``) everywhere: exact.

The API trimmed white space from the agent key and namespace of facts and searches while
conversations, the Python API (``KnowledgeMemory``), the admin's filters and the management
commands kept them exact: a fact stored through the API with ``agent_key="b "`` landed in
scope ``"b"``, and a fact stored by Python in scope ``"b "`` could not be reached by the
API's search. Scopes are matched exactly (look-alike scopes are different scopes), and what
was stored before, trimmed, stays reachable by its stored value.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact

pytestmark = pytest.mark.django_db

SPACED = [("b ", " n"), (" b", "n\t"), ("  ", "\u00a0")]


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("scoped")


@pytest.mark.parametrize(("agent_key", "namespace"), SPACED)
def test_a_fact_stored_through_the_api_keeps_its_scope_exactly(
    api_forced, user, agent_key, namespace
) -> None:  # type: ignore[no-untyped-def]
    response = api_forced.post(
        "/api/facts/",
        {"content": "Takes the night ferry", "agent_key": agent_key, "namespace": namespace},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert (response.json()["fact"]["agent_key"], response.json()["fact"]["namespace"]) == (
        agent_key,
        namespace,
    )
    fact = Fact.objects.get(owner=user)
    assert (fact.agent_key, fact.namespace) == (agent_key, namespace)
    # the Python API reaches it in the same scope, and only there
    assert [
        h.fact.pk for h in KnowledgeMemory(user, agent_key=agent_key, namespace=namespace).recall("ferry")
    ] == [fact.pk]
    assert (
        KnowledgeMemory(user, agent_key=agent_key.strip(), namespace=namespace.strip()).recall("ferry") == []
    )
    # so do the API's search and list, with the same strings
    found = api_forced.get("/api/search/", {"q": "ferry", "agent_key": agent_key, "namespace": namespace})
    assert [f["id"] for f in found.json()["facts"]] == [str(fact.uuid)]
    trimmed = api_forced.get(
        "/api/search/", {"q": "ferry", "agent_key": agent_key.strip(), "namespace": namespace.strip()}
    )
    assert trimmed.json()["facts"] == []
    listed = api_forced.get("/api/facts/", {"agent_key": agent_key, "namespace": namespace})
    assert [f["id"] for f in listed.json()["results"]] == [str(fact.uuid)]


def test_a_fact_stored_by_python_with_spaces_is_found_by_the_api(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    fact = KnowledgeMemory(user, agent_key="b ", namespace=" n").store("Takes the night ferry", "travel").fact
    found = api_forced.get(
        "/api/search/", {"q": "ferry", "agent_key": "b ", "namespace": " n", "include": "facts"}
    )
    assert [f["id"] for f in found.json()["facts"]] == [str(fact.uuid)]
    # a PATCH keeps the fact in its own scope
    changed = api_forced.patch(
        f"/api/facts/{fact.uuid}/", {"content": "Takes the morning ferry"}, format="json"
    )
    assert changed.status_code == 201
    assert (changed.json()["fact"]["agent_key"], changed.json()["fact"]["namespace"]) == ("b ", " n")


def test_what_was_stored_trimmed_stays_reachable(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    # facts the API stored before, with their scope trimmed, keep that scope
    fact = KnowledgeMemory(user, agent_key="b", namespace="n").store("Takes the night ferry", "travel").fact
    found = api_forced.get(
        "/api/search/", {"q": "ferry", "agent_key": "b", "namespace": "n", "include": "facts"}
    )
    assert [f["id"] for f in found.json()["facts"]] == [str(fact.uuid)]


def test_conversations_and_message_search_match_the_agent_key_exactly(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    created = api_forced.post("/api/conversations/", {"agent_key": "b "}, format="json")
    assert created.status_code == 201 and created.json()["agent_key"] == "b "
    conversation = Conversation.objects.get(uuid=created.json()["uuid"])
    PersistentChatHistory(conversation).add_messages([ChatMessage.human("the night ferry is late")])
    other = Conversation.objects.create(owner=user, agent_key="b")
    PersistentChatHistory(other).add_messages([ChatMessage.human("the night ferry is early")])
    listed = api_forced.get("/api/conversations/", {"agent_key": "b "}).json()["results"]
    assert [c["uuid"] for c in listed] == [str(conversation.uuid)]
    hits = api_forced.get("/api/search/", {"q": "ferry", "agent_key": "b ", "include": "messages"}).json()[
        "messages"
    ]
    assert [h["conversation"] for h in hits] == [str(conversation.uuid)]


def test_the_admin_keeps_an_agent_key_exactly(admin_client, user) -> None:  # type: ignore[no-untyped-def]
    response = admin_client.post(
        reverse("admin:agentmemory_conversation_add"),
        {"title": "spaced", "agent_key": " b ", "owner": user.pk, "metadata": "{}"},
    )
    assert response.status_code == 302, response.content
    assert Conversation.objects.get(title="spaced").agent_key == " b "


def test_the_admin_recall_page_matches_the_agent_key_exactly(admin_client, user) -> None:  # type: ignore[no-untyped-def]
    KnowledgeMemory(user, agent_key="b ").store("Takes the night ferry", "travel", persistent=True)
    KnowledgeMemory(user, agent_key="b").store("Takes the day ferry", "travel", persistent=True)
    recall = reverse("admin:agentmemory_fact_recall")
    page = admin_client.get(recall, {"owner": "scoped", "q": "ferry", "agent_key": "b "}).content.decode()
    assert "Takes the night ferry" in page and "Takes the day ferry" not in page


@pytest.mark.parametrize("typed", [" travel ", "travel\t", "\ttravel\n"])
def test_a_category_is_read_by_the_rule_it_is_stored_by(api_forced, user, typed) -> None:  # type: ignore[no-untyped-def]
    # A category is stored stripped and composed (``validate_fact``), but its filter compared
    # the value as typed: a fact stored with category " travel " was then out of reach of
    # that same category in recall, the fact list, the search and forget_all.
    memory = KnowledgeMemory(user)
    fact = memory.store("Takes the night ferry", typed, persistent=True).fact
    assert fact.category == "travel"
    assert [h.fact.pk for h in memory.recall("ferry", category=typed)] == [fact.pk]
    listed = api_forced.get("/api/facts/", {"category": typed}).json()["results"]
    assert [f["id"] for f in listed] == [str(fact.uuid)]
    found = api_forced.get("/api/search/", {"q": "ferry", "category": typed, "include": "facts"})
    assert [f["id"] for f in found.json()["facts"]] == [str(fact.uuid)]
    # a category of white space only is no category, on the list as on the search
    assert len(api_forced.get("/api/facts/", {"category": " "}).json()["results"]) == 1
    assert memory.forget_all(category=typed) == 1


def test_a_category_composed_or_not_is_one_category(user) -> None:  # type: ignore[no-untyped-def]
    memory = KnowledgeMemory(user)
    fact = memory.store("Likes cafe\u0301s", "cafe\u0301 ", persistent=True).fact
    assert [h.fact.pk for h in memory.recall("likes", category=" caf\u00e9")] == [fact.pk]
