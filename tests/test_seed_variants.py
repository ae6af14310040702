"""The seeds' promises on inputs next to the ones their examples use: a fact remembered again
(the knowledge seed writes every ``remember()`` to its daily log), an agent's conversation
compacted before the agent named its window, and windlass memories of one owner made for
different agent keys."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.compaction import request_compaction, summary_token_budget
from agentmemory.compat.selectools import KnowledgeMemory as SelectoolsKnowledgeMemory
from agentmemory.compat.windlass import BufferMemory, FakeLLM, Message, SummaryMemory, WindowMemory
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Summary
from tests.factories import UserFactory
from tests.test_summary_in_window import FULL_SUMMARY

pytestmark = pytest.mark.django_db


# -- a fact remembered again is written to the daily log again ---------------------------------


def test_a_persistent_fact_remembered_after_clear_logs_is_in_the_daily_log_again(tmp_path: Path) -> None:
    # seed 001's test_persistent_facts_survive_clear_logs, then the user says it once more:
    # remember() writes every entry to the daily log, persistent or not
    km = SelectoolsKnowledgeMemory(storage_dir=tmp_path)
    km.remember("Important fact", category="general", persistent=True)
    km.clear_logs()
    assert km.get_recent_entries() == []

    assert km.remember("Important fact", category="general", persistent=True).startswith("Already remembered")

    recent = km.get_recent_entries()
    assert [(e["content"], e["persistent"]) for e in recent] == [("Important fact", True)]
    assert km.get_persistent_facts() == {"general": ["Important fact"]}
    assert km.build_context() == "[Long-term Memory]\n## general\n- Important fact"  # named once


def test_a_transient_entry_remembered_again_ages_from_the_last_time_it_was_remembered() -> None:
    km = KnowledgeMemory(UserFactory(), max_log_days=30)
    km.store("Working on Project Atlas this week", "context", now=timezone.now() - timedelta(days=29))

    km.remember("Working on Project Atlas this week", "context")

    # in today's log, so listed among the entries of the last day and kept for 30 more days
    (entry,) = km.get_recent_entries(days=1)
    assert entry["content"] == "Working on Project Atlas this week" and entry["persistent"] is False
    assert km.live_facts(timezone.now() + timedelta(days=20)).filter(content__startswith="Working").exists()
    assert km.prune_logs() == 0
    assert "(context) Working on Project Atlas this week" in km.build_context()


def test_a_persistent_fact_told_again_is_listed_among_the_recent_entries() -> None:
    km = KnowledgeMemory(UserFactory())
    km.store("Name: Alice", "personal", persistent=True, now=timezone.now() - timedelta(days=10))
    assert km.get_recent_entries(days=7) == []

    km.remember("Name: Alice", "personal", persistent=True)

    assert [e["content"] for e in km.get_recent_entries(days=7)] == ["Name: Alice"]
    assert km.build_context() == "[Long-term Memory]\n## personal\n- Name: Alice"


def test_a_repeat_dated_earlier_never_moves_an_entry_back_in_the_log() -> None:
    km = KnowledgeMemory(UserFactory())
    first = km.store("Meeting at 3pm", "context").fact
    again = km.store("Meeting at 3pm", "context", now=timezone.now() - timedelta(days=3))
    assert again.action == "duplicate" and again.fact.pk == first.pk
    first.refresh_from_db()
    assert [e["id"] for e in km.get_recent_entries(days=1)] == [first.pk]


# -- a conversation's registered agent names the window its summaries are made for -------------


class SmallWindowAgent(BaseToolCallingAgent):
    AGENT_KEY = "seed-variants-small-window"
    SYSTEM_PROMPT = "Be brief."
    MEMORY_COMPACTOR_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 1_500


def _turns(start: int, count: int) -> list[dict[str, str]]:
    messages = []
    for i in range(start, start + count):
        filler = " ".join(f"w{i}x{k}" for k in range(30))
        messages += [
            {"role": "human", "content": f"question {i}: {filler}"},
            {"role": "ai", "content": f"answer {i}: {filler}"},
        ]
    return messages


@pytest.mark.django_db(transaction=True)
def test_an_api_append_to_an_agents_conversation_makes_summaries_for_the_agents_window(settings) -> None:  # type: ignore[no-untyped-def]
    """History written through the API before the agent's first turn: the compaction the
    appends ask for made a summary for 10,000 tokens, which then took the agent's 1,500."""
    settings.AGENTMEMORY = {"COMPACTION_LLM": FULL_SUMMARY, "COMPACTION_MODE": "inline"}
    user = UserFactory()
    agent = SmallWindowAgent(llm=ScriptedChatModel(["Fine."]))
    conversation = agent.start_conversation(owner=user)
    api = APIClient()
    api.force_authenticate(user)
    for i in range(12):
        answer = api.post(
            f"/api/conversations/{conversation.uuid}/messages/", {"messages": _turns(i, 1)}, format="json"
        )
        assert answer.status_code == 201

    summary = Summary.objects.filter(conversation=conversation).latest("through_seq")
    assert summary.token_count <= summary_token_budget(1_500)

    result = agent.run(conversation, "And now?")
    assert result.windows[0].summary_id == summary.pk
    assert "summary" not in result.windows[0].truncated  # sent whole


@pytest.mark.django_db(transaction=True)
def test_a_request_naming_no_window_sizes_for_the_registered_agent(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"COMPACTION_LLM": FULL_SUMMARY, "COMPACTION_MODE": "inline"}
    conversation = Conversation.objects.create(agent_key=SmallWindowAgent.AGENT_KEY)
    history = PersistentChatHistory(conversation)
    maker = {"human": ChatMessage.human, "ai": ChatMessage.ai}
    history.add_messages([maker[m["role"]](m["content"]) for m in _turns(0, 12)])

    made = request_compaction(conversation.pk, force=True, wait=5)  # the sweep, the admin

    assert Summary.objects.get(pk=made.summary_id).token_count <= summary_token_budget(1_500)


def test_the_context_previews_default_to_the_registered_agents_window(admin_client) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conversation = Conversation.objects.create(agent_key=SmallWindowAgent.AGENT_KEY, owner=user)
    api = APIClient()
    api.force_authenticate(user)
    body = api.get(f"/api/conversations/{conversation.uuid}/context/").json()
    assert body["max_tokens"] == 1_500
    other = Conversation.objects.create(agent_key="no-agent-holds-this-key", owner=user)
    assert api.get(f"/api/conversations/{other.uuid}/context/").json()["max_tokens"] == 10_000
    page = admin_client.get(f"/admin/agentmemory/conversation/{conversation.pk}/context/")
    assert 'name="max_tokens" id="id_max_tokens" value="1500"' in page.content.decode()


# -- windlass memories of one owner, made for different agent keys ------------------------------


@pytest.mark.parametrize("memory_cls", [BufferMemory, WindowMemory])
def test_windlass_threads_of_another_agent_key_are_neither_read_nor_cleared(memory_cls) -> None:  # type: ignore[no-untyped-def]
    owner = UserFactory()
    support = memory_cls(owner=owner, agent_key="support")
    sales = memory_cls(owner=owner, agent_key="sales")
    support.add(Message.user("support: my order is late"))

    assert sales.get() == [] and sales.threads() == []
    sales.add(Message.user("sales: a quote please"))
    assert [m.content for m in sales.get()] == ["sales: a quote please"]
    assert support.conversation_for().pk != sales.conversation_for().pk
    assert sales.conversation_for().agent_key == "sales"

    sales.clear()
    assert [m.content for m in support.get()] == ["support: my order is late"]
    assert support.threads() == ["default"]
    # a memory of the same owner and agent key still shares the thread
    assert [m.content for m in memory_cls(owner=owner, agent_key="support").get()] == [
        "support: my order is late"
    ]


def test_a_summary_memory_of_another_agent_key_keeps_its_own_summary() -> None:
    owner = UserFactory()
    support = SummaryMemory(
        owner=owner, agent_key="support", llm=FakeLLM(["Support summary."]), window=1, summarize_every=1
    )
    sales = SummaryMemory(
        owner=owner, agent_key="sales", llm=FakeLLM(["Sales summary."]), window=1, summarize_every=1
    )
    support.add([Message.user("one"), Message.user("two")])
    assert support.get()[0].content.endswith("Support summary.")
    assert sales.summary() == "" and sales.get() == []


# -- a category typed in another Unicode form is the same category -------------------------------


def test_a_category_typed_decomposed_is_the_same_category() -> None:
    """macOS input and many clients send "ö" as "o" and a combining diaeresis: the changed
    "key: value" fact stayed in force beside the old one, under a second category that looks
    the same, and a recall in the composed category missed it."""
    km = KnowledgeMemory(UserFactory())
    km.remember("Wohnort: Zürich", "persönlich", persistent=True)

    changed = km.store("Wohnort: München", "perso\u0308nlich", persistent=True)

    assert changed.action == "superseded"
    assert km.get_persistent_facts() == {"persönlich": ["Wohnort: München"]}
    assert [h.fact.content for h in km.recall("Wohnort", category="perso\u0308nlich")] == ["Wohnort: München"]
    assert km.forget_all(category="perso\u0308nlich") == 2  # the fact and its history
    assert km.get_persistent_facts() == {}


def test_the_api_lists_a_category_given_in_either_form() -> None:
    user = UserFactory()
    KnowledgeMemory(user).remember("Prefers dark mode", "préférences", persistent=True)
    api = APIClient()
    api.force_authenticate(user)
    listed = api.get("/api/facts/", {"category": "pre\u0301fe\u0301rences"}).json()
    assert [f["content"] for f in listed["results"]] == ["Prefers dark mode"]
    assert listed["results"][0]["category"] == "préférences"


# -- a fact headed by a period, as one headed by a day, is no "key: value" fact --------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Next week: my parents visit", "Next week: dentist on Tuesday"),
        ("This week: finish the Atlas report", "This week: renew the passport"),
        ("Last week: Tom had the flu", "Last week: the boiler broke"),
        ("In two weeks: the driving exam", "In two weeks: Lea's school trip"),
        ("End of month: pay the rent", "End of month: send the invoices"),
        ("Next month: move to Porto", "Next month: start the new job"),
        ("Later: call the bank", "Later: water the plants"),
        ("Summer: swimming lessons for Lea", "Summer: a week in Italy"),
    ],
)
def test_entries_headed_by_a_period_both_stay(first: str, second: str) -> None:
    km = KnowledgeMemory(UserFactory())
    km.remember(first, "plans", persistent=True)
    assert km.store(second, "plans", persistent=True).action == "created"
    assert sorted(f.content for f in km.live_facts()) == sorted([first, second])


@pytest.mark.parametrize(
    ("old", "new"),
    [("Last name: Smith", "Last name: Jones"), ("Start date: May 1", "Start date: June 3")],
)
def test_a_key_naming_a_thing_beside_a_period_word_still_supersedes(old: str, new: str) -> None:
    km = KnowledgeMemory(UserFactory())
    first = km.store(old, "personal", persistent=True).fact
    assert km.store(new, "personal", persistent=True).superseded_ids == (first.pk,)


# -- a persistent fact changed by a plain remember() stays persistent ----------------------------


def test_a_persistent_fact_changed_without_the_flag_stays_persistent() -> None:
    """The agent's ``remember`` tool and ``remember()`` default to ``persistent=False``: a
    changed preference replaced the persistent one with a recent entry, which aged out after
    ``max_log_days``, and the preference was gone (the seed's MEMORY.md never loses it)."""
    km = KnowledgeMemory(UserFactory(), max_log_days=30)
    km.remember("Preferred language: Python", "preferences", persistent=True)

    changed = km.store("Preferred language: Rust", "preferences")

    assert changed.action == "superseded" and changed.fact.persistent is True
    assert km.get_persistent_facts() == {"preferences": ["Preferred language: Rust"]}
    later = km.live_facts(timezone.now() + timedelta(days=31))
    assert list(later.values_list("content", flat=True)) == ["Preferred language: Rust"]
    assert "Remembered (preferences, persistent), replacing" in km.remember(
        "Preferred language: Go", "preferences"
    )


def test_a_change_naming_the_fact_it_replaces_keeps_the_persistence_it_gives() -> None:
    km = KnowledgeMemory(UserFactory())
    old = km.store("Preferred language: Python", "preferences", persistent=True).fact
    # an explicit replacement (the API's PATCH of a fact) says what the new fact is
    changed = km.store("Preferred language: Rust", "preferences", persistent=False, supersedes=old.pk)
    assert changed.fact.persistent is False


def test_a_recent_entry_changed_stays_a_recent_entry() -> None:
    km = KnowledgeMemory(UserFactory())
    km.remember("Current project: Atlas", "context")
    assert km.store("Current project: Borealis", "context").fact.persistent is False
