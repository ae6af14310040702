"""The fact admin: long-term facts listed and filtered by scope, searched by full text, with
their superseded history; deleting forgets the fact with its history, embeddings and index."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Fact, FactEmbedding
from agentmemory.recall import fulltext

pytestmark = pytest.mark.django_db


def url(name: str, *args) -> str:  # type: ignore[no-untyped-def]
    return reverse(f"admin:agentmemory_{name}", args=args)


@pytest.fixture
def memories(django_user_model):  # type: ignore[no-untyped-def]
    john = django_user_model.objects.create_user("john_doe")
    other = django_user_model.objects.create_user("john-doe")
    memory = KnowledgeMemory(john, agent_key="travel", namespace="acme")
    first = memory.store("seat: aisle", category="preferences", persistent=True).fact
    second = memory.store("seat: window", category="preferences", persistent=True).fact
    memory.store("Flies to Oslo every March", category="trips")
    KnowledgeMemory(john).store("Has a cat called Oslo")
    KnowledgeMemory(other, agent_key="travel", namespace="acme").store("seat: aisle", category="preferences")
    first.refresh_from_db()
    assert first.superseded_by_id == second.pk  # the change superseded the old value
    return john, other, first, second


def _listed(admin_client, **params):  # type: ignore[no-untyped-def]
    response = admin_client.get(url("fact_changelist"), params)
    assert response.status_code == 200
    return [(f.owner.username, f.content) for f in response.context["cl"].result_list]


def test_facts_are_listed_and_filtered_by_owner_scope_category_and_status(admin_client, memories):  # type: ignore[no-untyped-def]
    john, other, _first, _second = memories
    assert len(_listed(admin_client)) == 5
    assert {c for _o, c in _listed(admin_client, owner__id__exact=str(other.pk))} == {"seat: aisle"}
    assert _listed(admin_client, owner__id__exact=str(john.pk), agent_key="-") == [
        ("john_doe", "Has a cat called Oslo")
    ]
    assert sorted(
        c for _o, c in _listed(admin_client, owner__id__exact=str(john.pk), category="preferences")
    ) == [
        "seat: aisle",
        "seat: window",
    ]
    assert _listed(admin_client, owner__id__exact=str(john.pk), status="superseded") == [
        ("john_doe", "seat: aisle")
    ]
    live = _listed(admin_client, owner__id__exact=str(john.pk), status="live")
    assert ("john_doe", "seat: aisle") not in live and ("john_doe", "seat: window") in live
    # the filters offer exactly the values in use, and look-alike owners stay apart
    body = admin_client.get(url("fact_changelist")).content.decode()
    assert "john_doe" in body and "john-doe" in body


def test_fact_search_is_full_text(admin_client, memories):  # type: ignore[no-untyped-def]
    assert sorted(c for _o, c in _listed(admin_client, q="oslo")) == [
        "Flies to Oslo every March",
        "Has a cat called Oslo",
    ]
    assert _listed(admin_client, q="oslo marches") == [
        ("john_doe", "Flies to Oslo every March")
    ]  # every word, stemmed
    assert _listed(admin_client, q="the") == []


def test_a_facts_public_id_finds_it_and_is_shown(admin_client, memories):  # type: ignore[no-untyped-def]
    _john, _other, first, _second = memories
    assert _listed(admin_client, q=f"  {first.uuid} ") == [("john_doe", "seat: aisle")]
    assert str(first.uuid) in admin_client.get(url("fact_change", first.pk)).content.decode()


def test_fact_page_shows_its_superseded_history(admin_client, memories):  # type: ignore[no-untyped-def]
    _john, _other, first, second = memories
    body = admin_client.get(url("fact_change", second.pk)).content.decode()
    assert "Earlier versions" in body and "seat: aisle" in body and url("fact_change", first.pk) in body
    old = admin_client.get(url("fact_change", first.pk)).content.decode()
    assert "superseded" in old and url("fact_change", second.pk) in old
    assert admin_client.post(url("fact_change", second.pk), {"content": "x"}).status_code == 403
    assert admin_client.get(url("fact_add")).status_code == 403


def test_forget_action_deletes_the_fact_its_history_embeddings_and_index_entries(admin_client, memories):  # type: ignore[no-untyped-def]
    john, other, first, second = memories
    FactEmbedding.objects.create(fact=second, model="m", dimensions=1, vector=b"\0\0\0\0")
    FactEmbedding.objects.create(fact=first, model="m", dimensions=1, vector=b"\0\0\0\0")
    # choosing the old version forgets the fact it led to, with all its history
    page = admin_client.post(
        url("fact_changelist"), {"action": "delete_selected", "_selected_action": [first.pk]}
    ).content.decode()
    assert "seat: window" in page or f"fact {second.pk}" in page  # the confirmation names the fact in force
    response = admin_client.post(
        url("fact_changelist"), {"action": "delete_selected", "_selected_action": [first.pk], "post": "yes"}
    )
    assert response.status_code == 302
    assert not Fact.objects.filter(pk__in=[first.pk, second.pk]).exists()
    assert not FactEmbedding.objects.exists()
    assert fulltext.search(Fact.objects.filter(owner=john), "window aisle", 10) == []
    # nobody else's fact goes, and john's other facts stay
    assert Fact.objects.filter(owner=other, content="seat: aisle").exists()
    assert Fact.objects.filter(owner=john).count() == 2


def test_forget_from_the_fact_page(admin_client, memories):  # type: ignore[no-untyped-def]
    _john, _other, first, second = memories
    response = admin_client.post(url("fact_delete", second.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Fact.objects.filter(pk__in=[first.pk, second.pk]).exists()


def test_fact_list_query_count_does_not_grow(admin_client, memories, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    john = memories[0]
    memory = KnowledgeMemory(john, namespace="bulk")
    for i in range(60):
        memory.store(f"fact number {i}")
    # session, user, owner choices (2), agent/namespace/category choices, count, page
    with django_assert_max_num_queries(9):
        assert admin_client.get(url("fact_changelist")).status_code == 200


def test_recall_search_needs_an_owner_and_finds_only_theirs(admin_client, memories):  # type: ignore[no-untyped-def]
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation

    john, other, _first, second = memories
    for owner, text in (
        (john, "I prefer the window seat on <long> flights"),
        (other, "window seat for me too"),
    ):
        conv = Conversation.objects.create(owner=owner, agent_key="travel")
        PersistentChatHistory(conv).add_messages([ChatMessage.human(text)])
    recall = url("fact_recall")
    assert url("fact_recall") in admin_client.get(url("fact_changelist")).content.decode()
    # no owner: refused, nothing searched
    refused = admin_client.get(recall, {"q": "window seat"})
    assert refused.status_code == 400 and "Choose an owner" in refused.content.decode()
    assert admin_client.get(recall, {"owner": "nobody", "q": "seat"}).status_code == 400
    assert admin_client.get(recall, {"owner": "john_doe", "q": "a\x00b"}).status_code == 400
    recalled_before = Fact.objects.get(pk=second.pk).recall_count
    response = admin_client.get(recall, {"owner": "john_doe", "q": "window seat"})
    assert response.status_code == 200
    assert [f.pk for f, _score in response.context["facts"]] == [second.pk]  # in force only
    hits = response.context["hits"]
    assert [hit.content for hit, *_links in hits] == ["I prefer the window seat on <long> flights"]
    body = response.content.decode()
    assert "&lt;long&gt;" in body and "for me too" not in body  # escaped; nothing of john-doe
    assert hits[0][1].endswith("?page=1#msg-1")
    assert Fact.objects.get(pk=second.pk).recall_count == recalled_before  # reading changes nothing
    by_id = admin_client.get(recall, {"owner": str(other.pk), "q": "window seat"})
    assert [hit.content for hit, *_links in by_id.context["hits"]] == ["window seat for me too"]


def test_recall_search_scores_an_owners_only_fact_as_recall_does(admin_client) -> None:  # type: ignore[no-untyped-def]
    # the page showed the backend's raw score: BM25 weighs a word every fact of the owner
    # holds at about 0, so the only fact of an owner showed 0.000 while recall ranks it first
    from agentmemory.knowledge import KnowledgeMemory
    from tests.factories import UserFactory

    owner = UserFactory()
    knowledge = KnowledgeMemory(owner)
    knowledge.remember("Prefers the window seat", "travel", persistent=True)
    [recalled] = knowledge.recall("window seat")
    response = admin_client.get(url("fact_recall"), {"owner": str(owner.pk), "q": "window seat"})
    [(fact, score)] = response.context["facts"]
    assert fact.pk == recalled.fact.pk
    assert score == pytest.approx(recalled.score, rel=0.01) and score > 0.5


def test_recall_search_says_which_conversation_a_hit_is_in(  # type: ignore[no-untyped-def]
    admin_client, memories, django_assert_max_num_queries
) -> None:
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation

    john = memories[0]
    conversations = []
    for title in ("Trip to <Oslo>", "", "Trip to <Oslo>"):
        conv = Conversation.objects.create(owner=john, agent_key="travel", title=title)
        PersistentChatHistory(conv).add_messages([ChatMessage.human(f"the window seat, {conv.pk}")])
        conversations.append(conv)
    with django_assert_max_num_queries(12):
        response = admin_client.get(url("fact_recall"), {"owner": "john_doe", "q": "window seat"})
    body = response.content.decode()
    for conv in conversations:
        assert f'href="{url("conversation_change", conv.pk)}"' in body
    # named as everywhere in the admin: the title (escaped) and the start of the uuid, so two
    # conversations of one title are told apart; "Conversation <hex>" when untitled
    for conv in (conversations[0], conversations[2]):
        assert f"Trip to &lt;Oslo&gt; ({conv.uuid.hex[:8]})" in body
    assert f"Conversation {conversations[1].uuid.hex[:8]}" in body


def test_recall_search_needs_view_permissions(client, django_user_model, memories):  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import Permission

    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(url("fact_recall"), {"owner": "john_doe", "q": "seat"}).status_code == 403
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_fact", "view_message"]))
    assert client.get(url("fact_recall"), {"owner": "john_doe", "q": "seat"}).status_code == 200


@pytest.mark.parametrize("owner", ["²", "٣", "9" * 30, "-1", "1e3"])
def test_an_owner_that_is_not_an_id_is_refused_instead_of_failing(admin_client, memories, owner) -> None:  # type: ignore[no-untyped-def]
    """ "²" passes str.isdigit() and fails int() (a ValueError: 500); 30 digits overflowed
    SQLite's driver (OverflowError: 500); "٣" was read as user 3."""
    for extra in ({}, {"agent_key": "travel"}):
        refused = admin_client.get(url("fact_changelist"), {"owner__id__exact": owner, **extra})
        assert refused.status_code == 400 and b"must be an id" in refused.content
    response = admin_client.get(url("fact_recall"), {"owner": owner, "q": "seat"})
    assert response.status_code == 400 and response.context["facts"] == []
    messages = admin_client.get(url("message_changelist"), {"conversation__id__exact": owner})
    assert messages.status_code == 400
