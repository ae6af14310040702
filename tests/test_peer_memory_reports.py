"""Long-term memory faults that peer memory systems had in public bug reports, each as the
smallest scenario of its kind run through our public API: ``KnowledgeMemory``,
``SemanticMemory``, ``search_messages``, the agent's ``remember`` and ``recall`` tools with a
scripted model, and the ``/api/facts/`` and ``/api/search/`` endpoints.

Each test's docstring names the report (repository#number) and the symptom in a line.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.conf import get_token_counter
from agentmemory.knowledge import InvalidFactError, KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Fact, FactEmbedding
from agentmemory.recall import EmbeddingBackend, MemoryScopeError, search_messages
from agentmemory.semantic import SemanticMemory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def client_for(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client


class MemoryAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "peer-reports"
    SYSTEM_PROMPT = "You are a helpful assistant."
    KNOWLEDGE_MEMORY_ENABLED = True


def tool_results(llm: ScriptedChatModel) -> dict[str, str]:
    """The tool results the model saw on its second call, by tool call id."""
    return {m.tool_call_id: m.content or "" for m in llm.calls[1][0] if m.role is Role.TOOL}


# -- bulk delete and scope ------------------------------------------------------------------


def test_forget_all_of_one_agent_scope_leaves_every_other_scope() -> None:
    """mem0ai/mem0#3746: a delete_all for one user and run cleared the whole collection.
    Our scope is owner + agent key + namespace: a bulk forget touches that one scope only."""
    alice, bob = UserFactory(), UserFactory()
    scopes = [
        KnowledgeMemory(alice, agent_key="planner"),
        KnowledgeMemory(alice),
        KnowledgeMemory(alice, agent_key="planner", namespace="trip"),
        KnowledgeMemory(bob, agent_key="planner"),
    ]
    for n, km in enumerate(scopes):
        for k in range(3):
            km.store(f"Reminder {n}-{k} about the garden", "misc")
    assert scopes[0].forget_all() == 3
    assert [km.live_facts().count() for km in scopes] == [0, 3, 3, 3]
    assert [len(km.recall("garden", k=10)) for km in scopes] == [0, 3, 3, 3]


def test_forgotten_facts_leave_recall_search_and_context_at_once() -> None:
    """mem0ai/mem0#3695: after delete_all the memories were gone from the dashboard but still
    came back from search. Here every read path is checked right after the forget."""
    user = UserFactory()
    km = KnowledgeMemory(user)
    km.remember("Keeps bees on the roof", "hobbies", persistent=True)
    km.remember("Beekeeping course on Saturday", "plans")
    assert len(km.recall("bees beekeeping")) == 2
    assert km.forget_all() == 2
    assert km.recall("bees beekeeping") == []
    assert km.build_context() == ""
    assert SemanticMemory(owner=user).search("bees") == []
    body = client_for(user).get("/api/search/", {"q": "bees beekeeping", "include": "facts"}).json()
    assert body["facts"] == []
    assert client_for(user).get("/api/facts/").json()["results"] == []


def test_search_endpoint_never_returns_another_users_facts() -> None:
    """CaviraOSS/LongMemory#97: a query for one user_id returned memories of every user."""
    alice, bob = UserFactory(username="test"), UserFactory(username="test-2")
    KnowledgeMemory(alice).remember("Lives in France", "home", persistent=True)
    KnowledgeMemory(bob).remember("Lives in the USA", "home", persistent=True)
    body = client_for(alice).get("/api/search/", {"q": "where do I live", "include": "facts"}).json()
    assert [f["content"] for f in body["facts"]] == ["Lives in France"]
    hits = KnowledgeMemory(bob).recall("lives")
    assert [h.fact.content for h in hits] == ["Lives in the USA"]


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [("john_doe", "john-doe"), ("users.a", "users.ab"), ("100%", "100"), ("a_%", "abc")],
)
def test_namespaces_match_exactly_never_as_patterns(mine: str, theirs: str) -> None:
    """langchain-ai/langgraph#8300: a namespace prefix went into an unescaped SQL LIKE, so
    "john_doe" also matched "john-doe" and ("users", "a") matched ("users", "ab")."""
    user = UserFactory()
    KnowledgeMemory(user, namespace=theirs).remember("Other tenant's note on invoices", "misc")
    km = KnowledgeMemory(user, namespace=mine)
    assert km.recall("invoices") == []
    assert km.live_facts().count() == 0
    assert km.forget_all() == 0
    assert KnowledgeMemory(user, namespace=theirs).live_facts().count() == 1
    body = client_for(user).get("/api/facts/", {"namespace": mine}).json()
    assert body["results"] == []


def test_no_agent_key_is_its_own_scope_not_a_wildcard() -> None:
    """mem0ai/mem0#6739: an ``agent_id: "*"`` branch of a search filter also returned records
    with no user. Our ``agent_key=None`` is the scope "no agent key", and no owner is refused."""
    user = UserFactory()
    KnowledgeMemory(user, agent_key="support").remember("Ticket 42 is about refunds", "work")
    default = KnowledgeMemory(user)
    assert default.recall("refunds ticket") == []
    assert default.forget_all() == 0
    assert KnowledgeMemory(user, agent_key="support").live_facts().count() == 1
    for owner in (None, ""):
        with pytest.raises(MemoryScopeError):
            KnowledgeMemory(owner)
    with pytest.raises(MemoryScopeError):
        SemanticMemory(owner=None)


# -- updates, contradictions and history ----------------------------------------------------


def test_contradicting_fact_is_stored_and_the_old_one_kept_as_history() -> None:
    """mem0ai/mem0#4536: adding "dislikes X" after "likes X" deleted the old memory and never
    added the new one, leaving nothing."""
    from tests.embedders import StubEmbedder, vectors_with_similarities

    old, new, query = vectors_with_similarities(0.93, 0.8, 0.8)
    texts = ("Likes spicy food", "Dislikes spicy food", "spicy food")
    embedder = StubEmbedder(dict(zip(texts, (old, new, query), strict=True)))
    km = KnowledgeMemory(UserFactory(), embedder=embedder, backend=EmbeddingBackend(embedder))
    first = km.store(texts[0], "food", True)
    second = km.store(texts[1], "food", True)
    assert second.action == "superseded" and second.superseded_ids == (first.fact.pk,)
    assert [h.fact.content for h in km.recall(texts[2])] == ["Dislikes spicy food"]
    history = km.all_facts().get(pk=first.fact.pk)
    assert history.content == "Likes spicy food" and history.superseded_by_id == second.fact.pk


def test_patch_that_changes_content_puts_the_new_content_in_force() -> None:
    """mem0ai/mem0#3733: an update was reported as UPDATE while the stored text stayed the old
    one, and search kept returning it."""
    user = UserFactory()
    api = client_for(user)
    created = api.post("/api/facts/", {"content": "Not a fan of thriller films", "category": "films"}).json()
    changed = api.patch(
        f"/api/facts/{created['fact']['id']}/", {"content": "Big fan of thriller films"}, format="json"
    )
    assert changed.status_code == 201, changed.content
    assert changed.json()["fact"]["content"] == "Big fan of thriller films"
    body = api.get("/api/search/", {"q": "thriller films", "include": "facts"}).json()
    assert [f["content"] for f in body["facts"]] == ["Big fan of thriller films"]
    listed = api.get("/api/facts/", {"history": "true"}).json()["results"]
    assert {f["content"]: bool(f["superseded_by"]) for f in listed} == {
        "Big fan of thriller films": False,
        "Not a fan of thriller films": True,
    }


def test_newer_of_two_live_facts_ranks_first() -> None:
    """mem0ai/mem0#4956: with ADD-only extraction "works at A" and, months later, "works at B"
    were both kept and retrieval ranked the stale one first because nothing weighed recency."""
    user = UserFactory()
    km = KnowledgeMemory(user, supersede_similarity=None, max_log_days=365)
    km.store("Works at Company Alpha", "work", True, now=T0 - timedelta(days=90))
    km.store("Works at Company Beta", "work", True, now=T0)
    hits = km.recall("works company", now=T0 + timedelta(minutes=5))
    assert [h.fact.content for h in hits] == ["Works at Company Beta", "Works at Company Alpha"]


def test_correction_keeps_the_old_wording_as_history() -> None:
    """NousResearch/hermes-agent#38705: correcting a fact mutated it in place and its earlier
    wording was lost; a reworded correction instead piled up as another live fact."""
    km = KnowledgeMemory(UserFactory())
    first = km.store("Children's ages: 8 and 5", "family", True)
    second = km.store("Children's ages: 9 and 6", "family", True)
    third = km.store("The children are 9 and 6 years old", "family", True, supersedes=second.fact.uuid)
    assert (second.action, third.action) == ("superseded", "superseded")
    assert list(km.live_facts().values_list("content", flat=True)) == ["The children are 9 and 6 years old"]
    chain = dict(km.all_facts().values_list("content", "superseded_by_id"))
    assert chain == {
        "Children's ages: 8 and 5": third.fact.pk,  # the whole history hangs off the fact in force
        "Children's ages: 9 and 6": third.fact.pk,
        "The children are 9 and 6 years old": None,
    }
    assert first.fact.pk != second.fact.pk


def test_distinct_facts_below_the_threshold_or_in_other_categories_are_never_merged() -> None:
    """redis/agent-memory-server#200: semantic merging snowballed unrelated facts into one
    "mega-memory". A new fact only ever replaces one fact of its own category, at or above
    the threshold, and its content is never combined with another's."""
    from tests.embedders import StubEmbedder, vectors_with_similarities

    a, b, _ = vectors_with_similarities(0.8, 0.5, 0.5)
    c, d, _ = vectors_with_similarities(0.95, 0.5, 0.5)
    texts = {
        "Played tennis in school": a,
        "Tracks protein intake daily": b,
        "Squat record is 100 kg": c,
        "Bench record is 80 kg": d,
    }
    embedder = StubEmbedder(texts)
    km = KnowledgeMemory(UserFactory(), embedder=embedder, supersede_similarity=0.85)
    actions = [
        km.store("Played tennis in school", "sport", True).action,
        km.store("Tracks protein intake daily", "sport", True).action,  # 0.8: below
        km.store("Squat record is 100 kg", "gym", True).action,
        km.store("Bench record is 80 kg", "lifts", True).action,  # 0.95, another category
    ]
    assert actions == ["created"] * 4
    assert sorted(km.live_facts().values_list("content", flat=True)) == sorted(texts)


# -- expiry and time ------------------------------------------------------------------------


def test_expired_fact_is_hidden_from_every_read_without_a_prune() -> None:
    """alphaonedev/ai-memory-mcp#3392: a ttl was enforced only by a reaper on the next write,
    so reading served expired content verbatim."""
    user = UserFactory()
    km = KnowledgeMemory(user)
    fact = km.store("Door code is 4711 this week", "access", True, ttl=60).fact
    Fact.objects.filter(pk=fact.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert km.recall("door code") == []
    assert km.build_context() == ""
    assert km.get_persistent_facts() == {}
    assert SemanticMemory(owner=user).search("door code") == []
    api = client_for(user)
    assert api.get("/api/facts/").json()["results"] == []
    assert api.get("/api/search/", {"q": "door code", "include": "facts"}).json()["facts"] == []
    assert Fact.objects.filter(pk=fact.pk).exists()  # not pruned: hidden by the read itself


def test_reading_never_extends_an_expiry() -> None:
    """vllm-project/semantic-router#404: an entry past its ttl still won the similarity search
    because the expiry was counted from the last access, which every hit renewed."""
    km = KnowledgeMemory(UserFactory())
    km.store("Parking spot B12 today", "travel", ttl=timedelta(hours=1), now=T0)
    expires = Fact.objects.get().expires_at
    for minutes in (10, 30, 59):
        assert len(km.recall("parking spot", now=T0 + timedelta(minutes=minutes))) == 1
    assert Fact.objects.get().expires_at == expires
    assert km.recall("parking spot", now=T0 + timedelta(minutes=61)) == []
    assert km.live_facts(now=T0 + timedelta(minutes=61)).count() == 0


@override_settings(TIME_ZONE="America/Los_Angeles")
def test_timestamps_are_utc_instants_whatever_the_local_time_zone() -> None:
    """mem0ai/mem0#4402 (timestamps written in US/Pacific) and agno-agi/agno#10322 (naive
    local stamps read back as UTC): a stored stamp names the instant it was written (UTC in
    the row, the entries and the API), a naive clock is refused, and the text the model
    reads gives that instant in the project's ``TIME_ZONE``, the zone the memory block
    dates its items in, so the calendar day near UTC midnight is the user's."""
    user = UserFactory()
    km = KnowledgeMemory(user, max_log_days=3650)
    late = datetime(2025, 7, 25, 2, 0, tzinfo=UTC)  # still 24 July in Los Angeles
    with timezone.override("America/Los_Angeles"):
        km.store("Flight lands at 02:00 UTC", "travel", now=late)
        fact = Fact.objects.get()
        assert fact.created_at == late
        assert "- [2025-07-24 19:00] (travel) Flight lands at 02:00 UTC" in km.build_context()
        (entry,) = km.get_recent_entries(days=3650)
        assert datetime.fromisoformat(entry["timestamp"]) == late
        body = client_for(user).get("/api/facts/", {"history": "true"}).json()["results"][0]
        assert datetime.fromisoformat(body["created_at"].replace("Z", "+00:00")) == late
    with pytest.raises(ValueError):
        km.store("Naive clock", "travel", now=datetime(2025, 7, 25, 2, 0))


def test_a_naive_clock_is_reported_by_the_system_checks() -> None:
    """With USE_TZ = False the knowledge memory refuses every fact (a naive clock, as the
    test above shows); ``manage.py check`` says so instead of letting the memory tools and
    the flush keep nothing in silence."""
    from agentmemory.checks import check_time_zone_support

    assert check_time_zone_support() == []
    with override_settings(USE_TZ=False):
        [warning] = check_time_zone_support()
        with pytest.raises(ValueError, match="aware"):
            KnowledgeMemory(UserFactory()).remember("Likes tea", "preferences", persistent=True)
    assert warning.id == "agentmemory.W008" and "USE_TZ" in warning.msg


# -- listing, pagination --------------------------------------------------------------------


def test_listing_pages_through_every_fact_once() -> None:
    """mem0ai/mem0#3751 and odysseus-dev/odysseus#3888: listing stopped at the first 100
    memories with no way to reach the rest."""
    user = UserFactory()
    km = KnowledgeMemory(user)
    for n in range(130):
        km.store(f"Catalogue entry {n:03d}", "catalogue", True, now=T0 + timedelta(seconds=n // 7))
    api = client_for(user)
    seen: list[str] = []
    url: str | None = "/api/facts/?page_size=50"
    while url:
        body = api.get(url).json()
        seen.extend(f["content"] for f in body["results"])
        url = body["next"]
    assert sorted(seen) == [f"Catalogue entry {n:03d}" for n in range(130)]
    assert len(set(seen)) == 130


# -- text: unicode, long content ------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("我喜欢喝咖啡", "咖啡"),
        ("これは日本語のメモです", "日本語"),
        ("커피를 좋아합니다", "커피를"),
        ("Favourite fruit: 🍓 strawberries", "strawberries"),
    ],
)
def test_non_latin_and_emoji_facts_are_found_by_their_words(stored: str, query: str) -> None:
    """google/adk-python#5601: a word-regex tokenizer made every CJK query return nothing,
    since a run of CJK characters has no spaces between its words."""
    user = UserFactory()
    km = KnowledgeMemory(user)
    km.remember(stored, "notes", persistent=True)
    km.remember("Unrelated note about the weather", "notes", persistent=True)
    assert [h.fact.content for h in km.recall(query)] == [stored]
    body = client_for(user).get("/api/search/", {"q": query, "include": "facts"}).json()
    assert [f["content"] for f in body["facts"]] == [stored]


def test_unspaced_query_terms_are_character_pairs_and_mix_with_indexed_words() -> None:
    """google/adk-python#5601: how a CJK query is cut, and a query mixing scripts ranks the
    fact holding both its CJK and its Latin words first."""
    from agentmemory.recall.text import unspaced_terms

    assert unspaced_terms(["东京出差", "flight", "京"]) == ["东京", "京出", "出差", "京"]
    assert unspaced_terms(["flight", "2026"]) == []
    km = KnowledgeMemory(UserFactory())
    km.remember("东京 flight on Friday", "travel", persistent=True)
    km.remember("东京 hotel booked", "travel", persistent=True)
    km.remember("Flight to Oslo", "travel", persistent=True)
    assert km.recall("东京 flight")[0].fact.content == "东京 flight on Friday"
    assert {h.fact.content for h in km.recall("东京")} == {"东京 flight on Friday", "东京 hotel booked"}


def test_non_ascii_content_is_stored_and_returned_verbatim() -> None:
    """langchain-ai/langgraph#5946: non-ASCII text was escaped into \\uXXXX sequences before
    it was embedded and searched, so the stored and searched text were not the user's."""
    user = UserFactory()
    text = "これは日本語です — 这是中文 — Ünïcödé 👩‍💻"
    created = client_for(user).post("/api/facts/", {"content": text, "category": "i18n"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["fact"]["content"] == text
    assert Fact.objects.get().content == text
    assert "\\u" not in KnowledgeMemory(user).build_context()
    semantic = SemanticMemory(owner=user)
    semantic.add(text)
    assert semantic.list_all()[0].content == text


def test_long_fact_is_indexed_to_its_end_and_an_overlong_one_refused_whole() -> None:
    """benclawbot/open-brain#58 (long content failed to store or index) and letta-ai/letta#1616
    (an edit over the size limit failed validation yet was applied)."""
    from agentmemory.conf import app_settings

    limit = app_settings().MAX_FACT_CHARS
    user = UserFactory()
    km = KnowledgeMemory(user)
    body = " ".join(f"item{n}" for n in range(2000))
    text = (body + " zanzibar")[-limit:]
    km.remember(text, "notes", persistent=True)
    assert [h.fact.content for h in km.recall("zanzibar")] == [text]
    with pytest.raises(InvalidFactError):
        km.remember("x" * (limit + 1), "notes", persistent=True)
    assert Fact.objects.count() == 1


# -- concurrency ----------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_remembers_store_one_fact() -> None:
    """mem0ai/mem0#6515 (and MihaiBuilds/memory-vault#111): two add() calls of the same fact
    both passed the duplicate check on a stale snapshot and both inserted."""
    user = UserFactory()
    n = 6
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(k: int) -> None:
        try:
            barrier.wait()
            results[k] = KnowledgeMemory(user).store("Likes coffee with oat milk", "food", True).action
        except BaseException as exc:
            results[k] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == ["created"] + ["duplicate"] * (n - 1), results
    assert Fact.objects.filter(owner=user).count() == 1


# -- deletes leave no index entries ---------------------------------------------------------


def test_forgotten_fact_leaves_no_index_entry_to_crowd_out_live_ones() -> None:
    """ruvnet/ruflo#2815 and rohitg00/agentmemory#632: delete left the vector and the BM25
    entry behind, so deleted content stayed searchable and ghosts took result slots."""
    from tests.embedders import StubEmbedder

    embedder = StubEmbedder()
    user = UserFactory()
    km = KnowledgeMemory(user, embedder=embedder, supersede_similarity=None)
    ghost = km.store("JWT tokens expire after thirty minutes", "auth", True).fact
    live = km.store("Use the jose library for JWT", "auth", True).fact
    assert km.forget(ghost.pk) == 1
    assert FactEmbedding.objects.filter(fact_id=ghost.pk).count() == 0
    assert [h.fact.pk for h in km.recall("JWT tokens expire", k=1)] == [live.pk]
    by_vector = KnowledgeMemory(user, embedder=embedder, backend=EmbeddingBackend(embedder))
    hits = by_vector.recall("JWT tokens expire thirty minutes", k=1)
    assert [h.fact.content for h in hits] == [live.content]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM agentmemory_fact_fts WHERE agentmemory_fact_fts MATCH 'thirty'"
            )
            assert cursor.fetchone()[0] == 0


# -- the agent's memory tools ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"category": "prefs"}, "content"),
        ({"content": "Likes tea", "persistent": "maybe"}, "persistent"),
        ({"content": "   "}, "content"),
        ({"content": "Likes tea", "category": "x" * 101}, "category"),
        ({"content": "Likes tea", "importance": 2}, "importance"),
    ],
    ids=["missing-content", "bad-persistent", "blank-content", "long-category", "unknown-argument"],
)
def test_remember_tool_with_bad_arguments_answers_an_error_the_model_can_fix(
    arguments: dict, says: str
) -> None:
    """agentconnect-md/agentconnect#1921: a memory tool's argument error came back as one
    sentence without the tool or the parameter, so the agent could not correct its call."""
    user = UserFactory()
    call = ToolCall(id="c1", name="remember", arguments=arguments)
    llm = ScriptedChatModel([ChatMessage.ai(None, [call]), "ok"])
    agent = MemoryAgent(llm)
    result = agent.run(agent.start_conversation(owner=user), "remember this")
    assert result.answer == "ok"
    message = tool_results(llm)["c1"]
    assert says in message, message
    assert Fact.objects.count() == 0


@pytest.mark.parametrize("k", [0, 21, "five", None])
def test_recall_tool_with_bad_k_answers_an_error_not_a_crash(k: object) -> None:
    """agentconnect-md/agentconnect#1921: the same for the recall tool's ``k``."""
    user = UserFactory()
    KnowledgeMemory(user).remember("Allergic to peanuts", "health", persistent=True)
    call = ToolCall(id="c1", name="recall", arguments={"query": "peanuts", "k": k})
    llm = ScriptedChatModel([ChatMessage.ai(None, [call]), "ok"])
    agent = MemoryAgent(llm)
    assert agent.run(agent.start_conversation(owner=user), "what about peanuts?").answer == "ok"
    assert "k" in tool_results(llm)["c1"] and "Allergic" not in tool_results(llm)["c1"]


# -- the context block's token budget -------------------------------------------------------


def test_many_facts_stay_within_the_context_budget_most_important_first() -> None:
    """agent0ai/agent-zero#1413 and GeneGulanesJr/LaPis#170: every memory was injected into
    the prompt, past the model's context window."""
    km = KnowledgeMemory(UserFactory(), max_context_tokens=300)
    km.store("Emergency contact: Dana, sister", "contacts", True, importance=1.0)
    for n in range(200):
        km.store(f"Minor preference number {n} about desk plants", "prefs", True, importance=0.1)
        km.store(f"Transient note {n} about the weekly sync", "notes")
    block = km.build_context()
    assert get_token_counter().count_text(block) <= 300
    assert "Emergency contact: Dana, sister" in block
    assert "[Recent Memory]" in block or "[Long-term Memory]" in block


def test_one_oversized_fact_does_not_push_the_others_out_of_the_context() -> None:
    """Syan-Lin/CyberWaifu#38: a single long memory among the related ones took the prompt
    over its token limit. Here it must neither break the budget nor starve the facts that do
    fit."""
    km = KnowledgeMemory(UserFactory(), max_context_tokens=200)
    km.store("Long notes: " + " ".join(f"detail{n}" for n in range(600)), "notes", True, importance=1.0)
    km.store("Preferred language: Python", "prefs", True, importance=0.9)
    km.store("Prefers dark mode", "prefs", True, importance=0.2)
    km.store("Long log: " + " ".join(f"event{n}" for n in range(600)), "log")
    km.store("Standup moved to 10:00", "log")
    block = km.build_context()
    assert get_token_counter().count_text(block) <= 200
    assert "Preferred language: Python" in block and "Prefers dark mode" in block
    assert "Standup moved to 10:00" in block
    assert "detail599" not in block and "event599" not in block


def test_context_block_in_the_agent_prompt_is_the_bounded_one() -> None:
    """agent0ai/agent-zero#1413: the memory block put into the system prompt had no bound of
    its own; the agent's prompt gets ``build_context()``'s bounded block."""
    user = UserFactory()
    km = KnowledgeMemory(user)
    for n in range(300):
        km.store(f"Persistent fact number {n} about a long-running project", "project", True)
    seen: list[str] = []

    def answer(messages: list[ChatMessage]) -> str:
        seen.append(messages[0].content or "")
        return "ok"

    with override_settings(AGENTMEMORY={"KNOWLEDGE_CONTEXT_MAX_TOKENS": 500}):
        agent = MemoryAgent(ScriptedChatModel([answer]))
        agent.run(agent.start_conversation(owner=user), "hello")
        expected = KnowledgeMemory(user).build_context()
    assert seen[0] == f"You are a helpful assistant.\n\n{expected}"
    assert get_token_counter().count_text(expected) <= 500


# -- conversation search --------------------------------------------------------------------


def test_conversation_search_is_scoped_to_the_owner_and_finds_cjk_words() -> None:
    """CaviraOSS/LongMemory#97 and google/adk-python#5601 for past conversations: another
    user's messages never come back, and a CJK query finds the message holding its word."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.models import Conversation

    alice, bob = UserFactory(), UserFactory()
    for owner, text in ((alice, "我下周去东京出差"), (bob, "我下周去东京旅游")):
        conv = Conversation.objects.create(owner=owner)
        PersistentChatHistory(conv).add_messages([ChatMessage.human(text), ChatMessage.ai("好的")])
    hits = search_messages("东京", owner=alice)
    assert [h.content for h in hits if h.relevance > 0] == ["我下周去东京出差"]


# -- ownership of single facts, ranking boosts -----------------------------------------------


def test_another_users_fact_cannot_be_changed_or_forgotten_by_id() -> None:
    """ebongard/renfield#169: PATCH and DELETE of a memory by id did not check its owner, so
    one user could edit or delete another user's memories."""
    alice, bob = UserFactory(), UserFactory()
    theirs = KnowledgeMemory(bob).store("Prefers tea", "food", True).fact
    api = client_for(alice)
    assert (
        api.patch(f"/api/facts/{theirs.uuid}/", {"content": "Prefers coffee"}, format="json").status_code
        == 404
    )
    assert api.delete(f"/api/facts/{theirs.uuid}/").status_code == 404
    assert api.get(f"/api/facts/{theirs.uuid}/").status_code == 404
    assert KnowledgeMemory(alice).forget(theirs.pk) == 0
    assert KnowledgeMemory(alice).forget(theirs.uuid) == 0
    assert list(Fact.objects.values_list("content", flat=True)) == ["Prefers tea"]


def test_boosts_order_close_matches_but_never_bury_the_exact_one() -> None:
    """MihaiBuilds/memory-vault#163 and bobmatnyc/trusty-tools#633: additive importance and
    recency boosts (or ranking by importance) pushed the exact match below a wall of
    important, recent, barely related memories. Importance still breaks a tie."""
    km = KnowledgeMemory(UserFactory(), supersede_similarity=None, max_log_days=365)
    km.store(
        "Passport renewal office opens at nine", "errands", True, importance=0.5, now=T0 - timedelta(days=60)
    )
    for n in range(12):
        km.store(f"Decision {n}: the office moves to floor {n}", "decisions", True, importance=1.0, now=T0)
    hits = km.recall("passport renewal office", k=5, now=T0)
    assert hits[0].fact.content == "Passport renewal office opens at nine"
    km.store("Blood type: 0 negative", "health", True, importance=0.9, now=T0)
    km.store("Favourite type of tea: green", "food", True, importance=0.1, now=T0)
    assert [h.fact.category for h in km.recall("type", k=2, now=T0)] == ["health", "food"]
