"""The facts and search endpoints: a user's long-term facts (remember, repeat, supersede,
forget) and search over their conversations and facts, never reaching another user's data,
look-alike scopes included."""

from __future__ import annotations

import json
import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it); ``bob``'s name differs from
    it by one character."""
    return django_user_model.objects.create_user("john_doe")


@pytest.fixture
def bob(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("john-doe")


def client_for(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_remember_repeat_and_list_facts(api_forced, user):  # type: ignore[no-untyped-def]
    created = api_forced.post(
        "/api/facts/",
        {"content": "Preferred language: Python", "category": "preferences", "persistent": True},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["action"] == "created" and body["superseded_ids"] == []
    fact = body["fact"]
    assert (fact["content"], fact["category"], fact["persistent"], fact["importance"]) == (
        "Preferred language: Python",
        "preferences",
        True,
        0.5,
    )
    assert (fact["agent_key"], fact["namespace"], fact["superseded_by"]) == ("", "", None)

    repeat = api_forced.post(
        "/api/facts/", {"content": "Preferred  language: Python", "category": "preferences"}, format="json"
    )
    assert repeat.status_code == 200 and repeat.json()["action"] == "duplicate"
    assert repeat.json()["fact"]["id"] == fact["id"]
    assert Fact.objects.count() == 1
    # The id is the fact's public uuid, never its primary key.
    assert fact["id"] == str(Fact.objects.get().uuid) and uuid.UUID(fact["id"]).version == 4

    api_forced.post("/api/facts/", {"content": "Working on Atlas", "agent_key": "support"}, format="json")
    listed = api_forced.get("/api/facts/").json()["results"]
    assert [f["content"] for f in listed] == ["Working on Atlas", "Preferred language: Python"]
    scoped = api_forced.get("/api/facts/", {"agent_key": "support"}).json()["results"]
    assert [f["content"] for f in scoped] == ["Working on Atlas"]
    assert api_forced.get(f"/api/facts/{fact['id']}/").json()["content"] == "Preferred language: Python"


def test_a_changed_fact_supersedes_the_old_one(api_forced, user):  # type: ignore[no-untyped-def]
    first = api_forced.post(
        "/api/facts/", {"content": "Lives in Oslo", "persistent": True}, format="json"
    ).json()
    old_id = first["fact"]["id"]
    changed = api_forced.patch(f"/api/facts/{old_id}/", {"content": "Lives in Bergen"}, format="json")
    assert changed.status_code == 201, changed.content
    body = changed.json()
    assert body["action"] == "superseded" and body["superseded_ids"] == [old_id]
    assert str(Fact.objects.get(content="Lives in Oslo").uuid) == old_id
    assert body["fact"]["content"] == "Lives in Bergen" and body["fact"]["persistent"] is True
    # The old fact is history: out of the default list, kept with ?history=true.
    assert [f["content"] for f in api_forced.get("/api/facts/").json()["results"]] == ["Lives in Bergen"]
    history = api_forced.get("/api/facts/", {"history": "true"}).json()["results"]
    assert {f["content"]: f["superseded_by"] for f in history} == {
        "Lives in Bergen": None,
        "Lives in Oslo": body["fact"]["id"],
    }
    # History cannot be changed; the same content with another importance is updated in place.
    refused = api_forced.patch(f"/api/facts/{old_id}/", {"content": "Lives in Paris"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "not_in_force"
    same = api_forced.patch(f"/api/facts/{body['fact']['id']}/", {"importance": 0.9}, format="json")
    assert same.status_code == 200 and same.json()["action"] == "updated"
    assert same.json()["fact"]["importance"] == 0.9
    # Read-only and unknown fields are named.
    bad = api_forced.patch(
        f"/api/facts/{body['fact']['id']}/", {"recall_count": 3, "agent_key": "x"}, format="json"
    )
    assert bad.status_code == 400 and set(bad.json()["fields"]) == {"recall_count", "agent_key"}


def test_supersedes_names_a_fact_in_force_by_its_id(api_forced, user, django_assert_num_queries):  # type: ignore[no-untyped-def]
    old = api_forced.post(
        "/api/facts/", {"content": "Works at Acme", "agent_key": "hr"}, format="json"
    ).json()
    old_id = old["fact"]["id"]
    body = {"content": "Joined Globex", "agent_key": "hr", "supersedes": old_id}
    replaced = api_forced.post("/api/facts/", body, format="json")
    assert replaced.status_code == 201, replaced.content
    new = replaced.json()
    assert new["action"] == "superseded" and new["superseded_ids"] == [old_id]
    assert api_forced.get(f"/api/facts/{old_id}/").json()["superseded_by"] == new["fact"]["id"]
    # History is no longer in force: it cannot be superseded again, and the error names it.
    again = api_forced.post("/api/facts/", {**body, "content": "Joined Initech"}, format="json")
    assert again.status_code == 400 and old_id in again.json()["fields"]["supersedes"][0]
    refused = api_forced.patch(f"/api/facts/{old_id}/", {"content": "Works at Initech"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "not_in_force"
    assert old_id in refused.json()["detail"]
    # A longer history lists its successors' ids without a query per fact.
    current = new["fact"]["id"]
    for n in range(3):
        changed = api_forced.patch(f"/api/facts/{current}/", {"content": f"Joined Globex {n}"}, format="json")
        current = changed.json()["fact"]["id"]
    with django_assert_num_queries(1):
        history = api_forced.get("/api/facts/", {"history": "true"}).json()["results"]
    successors = {f["id"]: f["superseded_by"] for f in history}
    assert len(successors) == 5 and list(successors.values()).count(None) == 1
    assert {value for value in successors.values() if value} <= set(successors)


def test_patch_changes_category_and_persistence_of_unchanged_content(api_forced, user):  # type: ignore[no-untyped-def]
    """PATCH of the category or of ``persistent: false`` alone used to answer 200 "duplicate"
    and change nothing (the content was already in force)."""
    fact = api_forced.post(
        "/api/facts/", {"content": "Lives in Oslo", "category": "home", "persistent": True}
    )
    fact_id = fact.json()["fact"]["id"]
    transient = api_forced.patch(f"/api/facts/{fact_id}/", {"persistent": False}, format="json")
    assert transient.status_code == 200 and transient.json()["action"] == "updated"
    assert transient.json()["fact"]["persistent"] is False
    moved = api_forced.patch(f"/api/facts/{fact_id}/", {"category": "places"}, format="json")
    assert moved.status_code == 201 and moved.json()["action"] == "superseded"
    assert moved.json()["superseded_ids"] == [fact_id]
    assert moved.json()["fact"]["category"] == "places" and moved.json()["fact"]["persistent"] is False
    listed = api_forced.get("/api/facts/").json()["results"]
    assert [(f["content"], f["category"]) for f in listed] == [("Lives in Oslo", "places")]


def test_a_repeat_with_supersedes_replaces_the_named_fact(api_forced, user):  # type: ignore[no-untyped-def]
    oslo = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json").json()["fact"]["id"]
    bergen = api_forced.post("/api/facts/", {"content": "Lives in Bergen"}, format="json").json()["fact"][
        "id"
    ]
    unknown = {"content": "Lives in Oslo", "supersedes": str(uuid.uuid4())}
    missing = api_forced.post("/api/facts/", unknown, format="json")
    assert missing.status_code == 400 and "supersedes" in missing.json()["fields"]
    back = api_forced.post("/api/facts/", {"content": "Lives in Oslo", "supersedes": bergen}, format="json")
    assert back.status_code == 200, back.content
    assert back.json()["action"] == "updated" and back.json()["superseded_ids"] == [bergen]
    assert back.json()["fact"]["id"] == oslo
    assert [f["content"] for f in api_forced.get("/api/facts/").json()["results"]] == ["Lives in Oslo"]


def test_patch_racing_another_change_answers_409(api_forced, user, monkeypatch):  # type: ignore[no-untyped-def]
    """A change that commits between PATCH's check and its store made the store refuse the
    fact as no longer in force: a 400 naming "supersedes", a field PATCH does not take."""
    fact_id = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json").json()["fact"]["id"]
    store = KnowledgeMemory.store

    def racing(self, content, *args, **kwargs):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(KnowledgeMemory, "store", store)
        store(self, "Lives in Tromso", supersedes=uuid.UUID(fact_id))  # the other writer
        return store(self, content, *args, **kwargs)

    monkeypatch.setattr(KnowledgeMemory, "store", racing)
    changed = api_forced.patch(f"/api/facts/{fact_id}/", {"content": "Lives in Bergen"}, format="json")
    assert changed.status_code == 409 and changed.json()["error"] == "not_in_force"
    assert [f["content"] for f in api_forced.get("/api/facts/").json()["results"]] == ["Lives in Tromso"]


def test_a_repeat_whose_fact_is_forgotten_meanwhile_answers_409_not_500(api_forced, user, monkeypatch):  # type: ignore[no-untyped-def]
    """A POST that finds its content already in force, while a DELETE of that fact commits
    before the answer is read, re-read a fact that was gone: a 500."""
    fact_id = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json").json()["fact"]["id"]
    store = KnowledgeMemory.store

    def racing(self, content, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = store(self, content, *args, **kwargs)
        assert result.action == "duplicate"
        KnowledgeMemory(user).forget(result.fact.pk)  # the DELETE of the other request
        return result

    monkeypatch.setattr(KnowledgeMemory, "store", racing)
    repeated = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json")

    assert repeated.status_code == 409, repeated.content
    assert repeated.json()["error"] == "forgotten" and fact_id in repeated.json()["detail"]
    monkeypatch.setattr(KnowledgeMemory, "store", store)
    assert api_forced.get("/api/facts/").json()["results"] == []
    again = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json")
    assert again.status_code == 201 and again.json()["action"] == "created"


def test_facts_sharing_a_timestamp_are_each_listed_once_across_pages(api_forced, user):  # type: ignore[no-untyped-def]
    """The cursor holds a created_at and an offset among the facts sharing it; ordered by
    created_at alone, their order changed between pages on PostgreSQL (its top-N sort is not
    stable), so facts stored with one clock value were listed twice and others never."""
    memory = KnowledgeMemory(user)
    now = timezone.now()
    for i in range(230):
        memory.store(f"Imported fact {i}", persistent=True, now=now)
    seen: list[str] = []
    url: str | None = "/api/facts/?page_size=50"
    while url:
        body = api_forced.get(url).json()
        seen += [f["id"] for f in body["results"]]
        url = body["next"]
    assert len(seen) == len(set(seen)) == 230
    assert set(seen) == {str(u) for u in Fact.objects.values_list("uuid", flat=True)}


def test_forget_deletes_the_fact_and_its_history(api_forced, user):  # type: ignore[no-untyped-def]
    first = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json").json()["fact"]
    second = api_forced.patch(
        f"/api/facts/{first['id']}/", {"content": "Lives in Bergen"}, format="json"
    ).json()
    assert Fact.objects.count() == 2
    assert api_forced.delete(f"/api/facts/{second['fact']['id']}/").status_code == 204
    assert Fact.objects.count() == 0
    assert api_forced.get(f"/api/facts/{first['id']}/").status_code == 404


def test_forgetting_an_old_version_forgets_the_fact_in_force_it_led_to(api_forced, user):  # type: ignore[no-untyped-def]
    """docs/api.md, DELETE /api/facts/{id}/: the id of a superseded version (as listed with
    ?history=true) forgets the whole fact, the version in force included."""
    first = api_forced.post("/api/facts/", {"content": "Lives in Oslo"}, format="json").json()["fact"]
    second = api_forced.patch(
        f"/api/facts/{first['id']}/", {"content": "Lives in Bergen"}, format="json"
    ).json()
    assert api_forced.delete(f"/api/facts/{first['id']}/").status_code == 204
    assert api_forced.get(f"/api/facts/{second['fact']['id']}/").status_code == 404
    assert api_forced.get("/api/facts/?history=true").json()["results"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": ""}, "content"),
        ({"content": "x\x00y"}, "content"),
        ({"content": "\ud800"}, "content"),
        ({"content": "ok", "importance": 1.5}, "importance"),
        ({"content": "ok", "importance": False}, "importance"),  # a number, not a boolean
        ({"content": "ok", "ttl": True}, "ttl"),
        ({"content": "ok", "ttl": -1}, "ttl"),
        ({"content": "ok", "category": "c" * 101}, "category"),
        ({"content": "ok", "category": "work\x1cnotes"}, "category"),  # a line break to splitlines
        ({"content": "ok", "agent_key": "a\x00"}, "agent_key"),
        ({"content": "ok", "supersedes": 999999}, "supersedes"),
        ({"content": "ok", "supersedes": "not-a-uuid"}, "supersedes"),
        ({"content": "ok", "supersedes": "6f1c1c52-7c1b-4a2e-9a59-2f0b7f4c1d11"}, "supersedes"),
        ({"content": "ok", "owner": 2}, "owner"),
        ({"content": "x" * 10_001}, "content"),
    ],
)
def test_bad_facts_are_a_400_naming_the_field(api_forced, body, field):  # type: ignore[no-untyped-def]
    # json.dumps escapes a lone surrogate as \ud800, as a client would send it.
    response = api_forced.post("/api/facts/", json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid"
    assert field in response.json()["fields"], response.json()
    assert Fact.objects.count() == 0


def test_nobody_reaches_another_users_facts(api_forced, user, bob):  # type: ignore[no-untyped-def]
    theirs = KnowledgeMemory(bob, agent_key="acme-corp").store("Bob's secret plan", persistent=True).fact
    KnowledgeMemory(bob).store("Bob likes tea")
    mine = KnowledgeMemory(user, agent_key="acme").store("Alice likes coffee").fact
    assert api_forced.get("/api/facts/").json()["results"][0]["id"] == str(mine.uuid)
    assert len(api_forced.get("/api/facts/", {"history": "true"}).json()["results"]) == 1
    assert api_forced.get("/api/facts/", {"agent_key": "acme-corp"}).json()["results"] == []
    for method, body in (("get", None), ("patch", {"content": "mine now"}), ("delete", None)):
        response = getattr(api_forced, method)(f"/api/facts/{theirs.uuid}/", body, format="json")
        assert response.status_code == 404, method
        assert "secret" not in response.content.decode()
    assert Fact.objects.filter(owner=bob).count() == 2
    stolen = api_forced.post("/api/facts/", {"content": "x", "supersedes": str(theirs.uuid)}, format="json")
    assert stolen.status_code == 400 and "supersedes" in stolen.json()["fields"]
    assert Fact.objects.filter(owner=bob, superseded_by__isnull=True).count() == 2
    # A primary key is no id of the API, and a segment that is not a UUID is the JSON 404.
    for bad in (str(mine.pk), "abc", "-1", "0x1", "9" * 40, "1.0", f"{mine.uuid}x"):
        response = api_forced.get(f"/api/facts/{bad}/")
        assert response.status_code == 404 and response.json()["error"] == "not_found", bad
    assert APIClient().get("/api/facts/").status_code in (401, 403)


def test_search_finds_the_users_messages_and_facts_only(api_forced, user, bob):  # type: ignore[no-untyped-def]
    mine = Conversation.objects.create(owner=user, agent_key="acme")
    PersistentChatHistory(mine).add_messages(
        [ChatMessage.human("My flight to Lisbon leaves Friday"), ChatMessage.ai("Noted, Lisbon on Friday.")]
    )
    other = Conversation.objects.create(owner=bob, agent_key="acme")
    PersistentChatHistory(other).add_messages([ChatMessage.human("My flight to Lisbon is secret")])
    ownerless = Conversation.objects.create(agent_key="acme")
    PersistentChatHistory(ownerless).add_messages([ChatMessage.human("Lisbon demo flight")])
    KnowledgeMemory(user).store("Prefers window seats on flights to Lisbon")
    KnowledgeMemory(bob).store("Bob flies to Lisbon in secret")
    KnowledgeMemory(user, agent_key="acme-corp").store("Lisbon fact of a look-alike scope")

    body = api_forced.get("/api/search/", {"q": "Lisbon flight"}).json()
    assert body["query"] == "Lisbon flight"
    assert {m["conversation"] for m in body["messages"]} == {str(mine.uuid)}
    assert body["messages"][0]["seq"] == 1
    assert [f["content"] for f in body["facts"]] == ["Prefers window seats on flights to Lisbon"]
    window_seats = Fact.objects.get(content="Prefers window seats on flights to Lisbon")
    assert body["facts"][0]["id"] == str(window_seats.uuid)
    assert "secret" not in str(body) and "demo" not in str(body)

    scoped = api_forced.get("/api/search/", {"q": "Lisbon", "agent_key": "acme", "include": "facts"}).json()
    assert scoped["messages"] == [] and scoped["facts"] == []
    only_messages = api_forced.get("/api/search/", {"q": "Lisbon", "include": "messages", "k": 1}).json()
    assert len(only_messages["messages"]) == 1 and only_messages["facts"] == []
    # A category narrows the facts; an empty one (a form's empty field) is no filter.
    general = api_forced.get(
        "/api/search/", {"q": "Lisbon", "category": "general", "include": "facts"}
    ).json()
    assert [f["content"] for f in general["facts"]] == ["Prefers window seats on flights to Lisbon"]
    travel = api_forced.get("/api/search/", {"q": "Lisbon", "category": "travel", "include": "facts"}).json()
    assert travel["facts"] == []
    blank = api_forced.get("/api/search/", {"q": "Lisbon", "category": "", "include": "facts"})
    assert blank.status_code == 200
    assert [f["id"] for f in blank.json()["facts"]] == [f["id"] for f in general["facts"]]
    their_conversation = api_forced.get(
        "/api/search/", {"q": "Lisbon", "conversation": str(other.uuid)}
    ).json()
    assert their_conversation["messages"] == []
    # Bob searching sees his own and nothing of Alice's.
    bobs = client_for(bob).get("/api/search/", {"q": "Lisbon"}).json()
    assert {m["conversation"] for m in bobs["messages"]} == {str(other.uuid)}
    assert [f["content"] for f in bobs["facts"]] == ["Bob flies to Lisbon in secret"]


@pytest.mark.django_db
def test_a_search_hit_says_whether_it_matched_itself_or_through_its_neighbours(api_forced, user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("Where is my order 1042?"), ChatMessage.ai("It has shipped with DHL.")]
    )

    hits = api_forced.get("/api/search/", {"q": "DHL", "include": "messages"}).json()["messages"]

    by_seq = {hit["seq"]: hit for hit in hits}
    assert by_seq[2]["relevance"] == 1.0  # holds the word
    # the question before the answer is found through it (RECALL_NEIGHBOUR_WEIGHTS)
    assert by_seq[1]["relevance"] == 0.0 and by_seq[1]["score"] < by_seq[2]["score"]


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"q": ""},
        {"q": "x\x00"},
        {"q": "ok", "k": "0"},
        {"q": "ok", "k": "101"},
        {"q": "ok", "k": "nan"},
        {"q": "ok", "include": "everything"},
        {"q": "ok", "conversation": "not-a-uuid"},
        {"q": "x" * 1001},
    ],
)
def test_bad_search_parameters_are_a_400(api_forced, query):  # type: ignore[no-untyped-def]
    response = api_forced.get("/api/search/", query)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid" and response.json()["fields"]


def test_search_needs_an_authenticated_user():  # type: ignore[no-untyped-def]
    assert APIClient().get("/api/search/", {"q": "x"}).status_code in (401, 403)


def test_an_empty_category_filter_lists_every_category(api_forced, user):  # type: ignore[no-untyped-def]
    api_forced.post("/api/facts/", {"content": "Likes tea", "category": "preferences"}, format="json")
    api_forced.post("/api/facts/", {"content": "Lives in Oslo", "category": "profile"}, format="json")

    listed = api_forced.get("/api/facts/", {"category": ""}).json()["results"]
    assert sorted(f["content"] for f in listed) == ["Likes tea", "Lives in Oslo"]
    only = api_forced.get("/api/facts/", {"category": "profile"}).json()["results"]
    assert [f["content"] for f in only] == ["Lives in Oslo"]
