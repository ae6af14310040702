"""The memory flush (design invariant R4): before turns are folded into a summary, the durable
facts they state are stored as facts with their source message and date, once, by the rules
of knowledge memory, with the summary or not at all; summaries keep dates and names."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.test import override_settings

from agentmemory.agents import BaseToolCallingAgent, registry
from agentmemory.compaction import (
    LOST_LEASE,
    NOTHING,
    STORED,
    LLMMemoryCompactor,
    OfflineMemoryCompactor,
    record_compaction_failure,
    run_compaction,
)
from agentmemory.exceptions import StructuredOutputError, TransientLLMError
from agentmemory.flush import DEGRADE_AFTER_FAILURES, MemoryFlush
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.llm.offline import OFFLINE_FACTS, OFFLINE_LABEL
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message, Summary
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

AGENT = "flush-agent"
MAY_8 = "1:56 pm on 8 May, 2023"
MAY_25 = "1:14 pm on 25 May, 2023"


class FlushAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = AGENT
    KNOWLEDGE_MEMORY_ENABLED = True
    KNOWLEDGE_MEMORY_NAMESPACE = "family"


class ForgetfulAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "forgetful-agent"


@pytest.fixture(autouse=True)
def agents() -> Iterator[None]:
    registry.register(FlushAgent)
    registry.register(ForgetfulAgent)
    yield
    registry.unregister(AGENT)
    registry.unregister("forgetful-agent")


def said(text: str, speaker: str = "Caroline", date: str = MAY_8) -> dict[str, Any]:
    return {"speaker": speaker, "session_date_time": date}


def conversation(owner: Any = None, agent_key: str = AGENT) -> Conversation:
    """Two folded turns (seqs 1-4) and the newest turn (5-6), which stays verbatim."""
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("I moved to Lisbon in March.", metadata=said("")),
            ChatMessage.ai("Lisbon is lovely!", metadata=said("", "Melanie")),
            ChatMessage.human("My daughter Lea is allergic to peanuts.", metadata=said("", date=MAY_25)),
            ChatMessage.ai("Thanks for telling me.", metadata=said("", "Melanie", MAY_25)),
            ChatMessage.human("What should I cook tonight?"),
            ChatMessage.ai("How about a peanut-free curry?"),
        ]
    )
    return conv


def reply(
    summary: str = "Caroline moved to Lisbon in March 2023; her daughter Lea is allergic to peanuts.",
    facts: Any = None,
) -> dict[str, Any]:
    if facts is None:
        facts = [
            fact("Caroline's home city: Lisbon", 1, "personal"),
            fact("Caroline's daughter Lea is allergic to peanuts.", 3, "health", importance=0.9),
        ]
    return {"summary": summary, "facts": facts}


def fact(content: str, source: int, category: str = "personal", importance: float = 0.6) -> dict[str, Any]:
    return {
        "content": content,
        "category": category,
        "source": source,
        "persistent": True,
        "importance": importance,
    }


def compactor(conv: Conversation, llm: Any) -> LLMMemoryCompactor:
    return LLMMemoryCompactor(Conversation.objects, conv.pk, llm, PersistentChatHistory(conv))


def scope(user: Any) -> KnowledgeMemory:
    return KnowledgeMemory(user, namespace="family")


def message_id(conv: Conversation, seq: int) -> int:
    return Message.objects.get(conversation=conv, seq=seq).pk


@pytest.fixture
def openai_model(fake_openai):  # type: ignore[no-untyped-def]
    model = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="sk", max_retries=0)
    yield model
    model.close()


# -- one structured call: the summary and the facts ------------------------------------------


def test_one_openai_call_returns_the_summary_and_the_facts(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    fake_openai.enqueue_text(json.dumps(reply()))

    run = compactor(conv, openai_model).run()

    assert run.status == STORED and run.summary.through_seq == 4
    assert run.summary.text.startswith("Caroline moved to Lisbon in March 2023")
    [request] = fake_openai.requests
    assert request["response_format"]["json_schema"]["strict"] is True
    facts = {f.content: f for f in scope(user).live_facts()}
    assert set(facts) == {"Caroline's home city: Lisbon", "Caroline's daughter Lea is allergic to peanuts."}
    allergy = facts["Caroline's daughter Lea is allergic to peanuts."]
    assert allergy.source_message_id == message_id(conv, 3)
    assert allergy.category == "health" and allergy.importance == 0.9 and allergy.persistent
    assert allergy.metadata == {
        "source": "compaction",
        "extracted_by": "gpt-test",
        "conversation": str(conv.uuid),
        "said_at": MAY_25,  # the date the transcript gave, not the time it was stored
    }
    # in the agent's scope (its namespace), nowhere else
    assert Fact.objects.count() == 2 and KnowledgeMemory(user).all_facts().count() == 0


def test_one_anthropic_call_returns_the_summary_and_the_facts(fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="sk", max_retries=0, max_tokens=4096
    )
    fake_anthropic.enqueue_message(
        [{"type": "tool_use", "id": "toolu_1", "name": "conversation_memory", "input": reply()}],
        stop_reason="tool_use",
    )
    try:
        run = compactor(conv, model).run()
    finally:
        model.close()

    assert run.status == STORED
    [request] = fake_anthropic.requests
    assert request["tool_choice"] == {"type": "tool", "name": "conversation_memory"}
    assert scope(user).live_facts().count() == 2


def test_the_prompt_gives_each_message_its_number_date_and_speaker(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    conv = conversation(UserFactory())
    fake_openai.enqueue_text(json.dumps(reply()))
    compactor(conv, openai_model).run()

    [request] = fake_openai.requests
    system, prompt = (m["content"] for m in request["messages"])
    # the date where it changes, the speaker on every line
    assert f"[#1 | {MAY_8}] Caroline: I moved to Lisbon in March.\n[#2] Melanie: Lisbon is" in prompt
    assert f"[#3 | {MAY_25}] Caroline: My daughter Lea is allergic to peanuts.\n[#4] Melanie:" in prompt
    assert "What should I cook tonight?" not in prompt  # the newest turn stays verbatim (K6)
    assert "Say who said or did what by name" in system and "calendar dates" in system
    assert "'source' is the number (#N) of the message" in system


def test_the_summary_is_incremental(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    """The second call holds the previous summary and only the messages since (K2)."""
    user = UserFactory()
    conv = conversation(user)
    fake_openai.enqueue_text(json.dumps(reply()))
    compactor(conv, openai_model).run()
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("I'm a teacher."), ChatMessage.ai("Nice."), ChatMessage.human("Bye")]
    )
    fake_openai.enqueue_text(json.dumps(reply("Caroline moved, Lea is allergic; Caroline teaches.", [])))
    run = compactor(conv, openai_model).run()

    assert run.status == STORED and run.summary.previous_id is not None
    prompt = fake_openai.requests[1]["messages"][1]["content"]
    assert "Previous summary:\nCaroline moved to Lisbon in March 2023" in prompt
    assert "I moved to Lisbon" not in prompt and "[#5 | " in prompt and "I'm a teacher." in prompt


# -- strict: a malformed reply is never stored, not even half -------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "The user moved to Lisbon.",  # not JSON
        json.dumps({"summary": "S."}),  # no facts
        json.dumps({**reply(), "mood": "good"}),  # a key the schema does not have
        json.dumps(reply(facts=[fact("Caroline likes tea.", 99)])),  # cites no message that was sent
        json.dumps(reply(facts=[{**fact("x", 1), "importance": 7}])),
        json.dumps(reply(facts=[fact("x" * 10_001, 1)])),  # over MAX_FACT_CHARS
    ],
)
def test_a_malformed_reply_is_asked_again_then_fails_the_run_storing_nothing(
    fake_openai, openai_model, bad
) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    fake_openai.enqueue_text(bad)
    fake_openai.enqueue_text(bad)

    with pytest.raises(StructuredOutputError):
        run_compaction(conv.pk, llm=openai_model)

    assert len(fake_openai.requests) == 2
    assert not Summary.objects.exists() and not Fact.objects.exists()
    conv.refresh_from_db()
    assert conv.compaction_error.startswith("StructuredOutputError") and conv.compaction_requested_at

    fake_openai.enqueue_text(json.dumps({"summary": "S.", "facts": []}))
    fake_openai.enqueue_text(json.dumps(reply()))  # asked again: this one is good
    assert run_compaction(conv.pk, llm=openai_model).status == STORED
    assert scope(user).live_facts().count() == 0  # the first good reply held no facts


def test_a_malformed_reply_then_a_good_one_stores_both_once(fake_openai, openai_model) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    fake_openai.enqueue_text("not json")
    fake_openai.enqueue_text(json.dumps(reply()))

    run = compactor(conv, openai_model).run()

    assert run.status == STORED and run.summary.llm_calls == 2 and run.summary.input_tokens == 24
    assert scope(user).live_facts().count() == 2


def test_structured_replies_that_keep_failing_do_not_hold_the_summary_back(
    fake_openai, openai_model, caplog
) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    for _ in range(DEGRADE_AFTER_FAILURES - 1):
        record_compaction_failure(conv.pk, StructuredOutputError("bad"), failed_run=True)
    fake_openai.enqueue_text(json.dumps(reply()))
    assert run_compaction(conv.pk, llm=openai_model).status == STORED  # not yet: still asked for facts
    Summary.objects.all().delete()
    Fact.objects.all().delete()
    for _ in range(DEGRADE_AFTER_FAILURES):
        record_compaction_failure(conv.pk, StructuredOutputError("bad"), failed_run=True)
    fake_openai.requests.clear()
    fake_openai.enqueue_text("Caroline moved to Lisbon; Lea is allergic to peanuts.")

    with caplog.at_level(logging.WARNING, "agentmemory.flush"):
        run = run_compaction(conv.pk, llm=openai_model)

    assert "the facts of messages #1 to #4 were not extracted" in caplog.text

    assert run.status == STORED and run.summary.text.startswith("Caroline moved")
    assert "response_format" not in fake_openai.requests[0]  # a plain summary call
    assert not Fact.objects.exists()


# -- once: duplicate tasks, concurrent runs, retries ------------------------------------------


def offline(conv: Conversation) -> OfflineMemoryCompactor:
    return OfflineMemoryCompactor(Conversation.objects, conv.pk, None, PersistentChatHistory(conv))


def test_a_duplicate_task_stores_no_fact_twice() -> None:
    user = UserFactory()
    conv = conversation(user)
    llm = ScriptedChatModel([json.dumps(reply())])  # no structured mode: asked in the prompt

    assert run_compaction(conv.pk, llm=llm).status == STORED
    assert run_compaction(conv.pk, llm=llm).status == NOTHING
    assert run_compaction(conv.pk, llm=llm, only_if_needed=True).status == NOTHING

    assert Summary.objects.count() == 1 and Fact.objects.count() == 2 and len(llm.calls) == 1


def test_a_run_that_lost_its_lease_stores_neither_summary_nor_facts() -> None:
    """A run whose lease expired while its model worked is overtaken by a second run; the
    first finds the lease gone and stores nothing, so every fact exists once."""
    user = UserFactory()
    conv = conversation(user)
    second = ScriptedChatModel([json.dumps(reply())])
    outcome: dict[str, Any] = {}

    def slow_model(messages: list[ChatMessage]) -> str:
        Conversation.objects.filter(pk=conv.pk).update(compaction_lease_expires_at="2000-01-01T00:00:00Z")
        outcome["second"] = compactor(conv, second).run()
        # a model asked twice words the same facts differently: only one run's may be kept
        return json.dumps(
            reply(facts=[fact("Caroline lives in Lisbon.", 1), fact("Lea cannot eat peanuts.", 3)])
        )

    first = compactor(conv, ScriptedChatModel([slow_model])).run()

    assert outcome["second"].status == STORED
    assert first.status in (LOST_LEASE, STORED) and first.summary in (None, outcome["second"].summary)
    assert Summary.objects.count() == 1
    assert sorted(Fact.objects.values_list("content", flat=True)) == [
        "Caroline's daughter Lea is allergic to peanuts.",
        "Caroline's home city: Lisbon",
    ]


def test_a_failure_after_the_facts_were_written_rolls_them_back_and_the_retry_stores_them_once(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    real_store = MemoryFlush.store

    def store_then_fail(self: MemoryFlush, summary: Summary) -> Any:
        real_store(self, summary)
        assert Fact.objects.count() == 2  # written, not yet committed
        raise DatabaseError("the connection dropped before the commit")

    monkeypatch.setattr(MemoryFlush, "store", store_then_fail)
    with pytest.raises(DatabaseError):
        run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())]))
    assert not Summary.objects.exists() and not Fact.objects.exists()

    monkeypatch.setattr(MemoryFlush, "store", real_store)
    assert run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())])).status == STORED
    assert Fact.objects.count() == 2


def test_a_transient_model_error_stores_nothing_and_the_retry_stores_once() -> None:
    user = UserFactory()
    conv = conversation(user)
    with pytest.raises(TransientLLMError):
        run_compaction(conv.pk, llm=ScriptedChatModel([TransientLLMError("HTTP 503")]))
    assert not Fact.objects.exists()
    run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())]))
    assert Fact.objects.count() == 2


# -- the knowledge rules ----------------------------------------------------------------------


def test_a_changed_fact_supersedes_and_a_repeat_adds_nothing() -> None:
    user = UserFactory()
    memory = scope(user)
    old_city = memory.store("Caroline's home city: Porto", "personal", persistent=True).fact
    allergy = memory.store("Caroline's daughter Lea is allergic to peanuts.", "health", persistent=True).fact
    conv = conversation(user)

    run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())]))

    old_city.refresh_from_db()
    new_city = Fact.objects.get(content="Caroline's home city: Lisbon")
    assert old_city.superseded_by_id == new_city.pk
    assert list(memory.live_facts().values_list("content", flat=True).order_by("content")) == [
        "Caroline's daughter Lea is allergic to peanuts.",
        "Caroline's home city: Lisbon",
    ]
    allergy.refresh_from_db()
    assert allergy.metadata == {} and allergy.source_message_id is None  # the repeat changed nothing
    assert Fact.objects.count() == 3


def test_a_fact_that_cannot_be_stored_is_dropped_and_the_rest_are_kept(caplog) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)
    # 'Caroline said "I moved to Lisbon in March." on 8 May 2023.' is 57 characters, the other 55
    with (
        override_settings(AGENTMEMORY={"MAX_FACT_CHARS": 56}),
        caplog.at_level(logging.INFO, "agentmemory.flush"),
    ):
        run = offline(conv).run()

    assert run.status == STORED
    assert [f.content for f in scope(user).live_facts()] == [
        'Caroline said "My daughter Lea is allergic to peanuts."'
    ]
    assert "fact of #1 dropped: content must be at most 56 characters" in caplog.text
    assert "1 facts created, 0 superseding, 0 repeats, 0 updated, 1 dropped" in caplog.text


def test_a_failed_fact_write_never_loses_the_summary(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = conversation(user)

    def broken(self: KnowledgeMemory, prepared: Any, **kwargs: Any) -> Any:
        raise DatabaseError("deadlock detected")

    monkeypatch.setattr(KnowledgeMemory, "store_prepared", broken)
    with caplog.at_level(logging.ERROR, logger="agentmemory.flush"):
        run = run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())]))

    assert run.status == STORED and Summary.objects.count() == 1
    conv.refresh_from_db()
    assert conv.summary_id == run.summary.pk and conv.compaction_error == ""
    assert not Fact.objects.exists()
    assert "storing 2 facts failed" in caplog.text


def test_the_embedder_is_called_outside_the_summarys_transaction_and_its_failure_keeps_the_fact() -> None:
    from agentmemory.recall.embedders import EmbeddingError

    depths: dict[str, list[int]] = {"model": [], "embedder": []}

    class Embedder:
        model = "test-embedder"

        def embed(self, texts: list[str]) -> list[list[float]]:
            depths["embedder"].append(len(connection.savepoint_ids))
            if "Lisbon" in texts[0]:
                raise EmbeddingError("the embedding server is down")
            return [[1.0, 0.0, 0.0] for _ in texts]

    def model(messages: list[ChatMessage]) -> str:
        depths["model"].append(len(connection.savepoint_ids))
        return json.dumps(reply())

    user = UserFactory()
    conv = conversation(user)
    flush_for = MemoryFlush.for_conversation

    def with_embedder(conversation: Conversation) -> MemoryFlush | None:
        flush = flush_for(conversation)
        assert flush is not None
        flush.memory.embedder = Embedder()
        return flush

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MemoryFlush, "for_conversation", staticmethod(with_embedder))
        run_compaction(conv.pk, llm=ScriptedChatModel([model]))

    # the test's own transaction is the only one open, as when the model is called (K3)
    assert depths == {"model": [depths["model"][0]], "embedder": [depths["model"][0]] * 2}
    assert Fact.objects.count() == 2
    lisbon = Fact.objects.get(content__contains="Lisbon")
    assert not lisbon.embeddings.exists()
    assert Fact.objects.get(content__contains="Lea").embeddings.count() == 1


# -- who gets a flush ----------------------------------------------------------------------------


def test_a_conversation_without_an_owner_keeps_no_facts_and_asks_for_none() -> None:
    conv = conversation(owner=None)
    llm = ScriptedChatModel(["Someone moved to Lisbon; their daughter is allergic to peanuts."])
    with override_settings(AGENTMEMORY={"MEMORY_FLUSH": "always"}):
        run = run_compaction(conv.pk, llm=llm)

    assert run.status == STORED and not Fact.objects.exists()
    assert "JSON" not in llm.calls[0][0][0].content  # the plain summary prompt


@pytest.mark.parametrize(
    ("setting", "agent_key", "kept"),
    [
        ("auto", AGENT, True),  # the agent enables knowledge memory
        ("auto", "forgetful-agent", False),  # it does not
        ("auto", "nobody-registered", False),
        ("off", AGENT, False),
        ("always", "forgetful-agent", True),
        ("always", "nobody-registered", True),
    ],
)
def test_the_setting_and_the_agent_decide(setting: str, agent_key: str, kept: bool) -> None:
    user = UserFactory()
    conv = conversation(user, agent_key=agent_key)
    text = json.dumps(reply()) if kept else "Caroline moved to Lisbon."
    with override_settings(AGENTMEMORY={"MEMORY_FLUSH": setting}):
        assert run_compaction(conv.pk, llm=ScriptedChatModel([text])).status == STORED
    assert Fact.objects.filter(owner=user).count() == (2 if kept else 0)
    if kept and agent_key != AGENT:
        # the default scope: the one KnowledgeMemory(user) and agents without a scope of their own use
        assert KnowledgeMemory(user).live_facts().count() == 2


def test_an_agents_module_that_fails_to_import_does_not_stop_the_flush(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    # The flush looks the conversation's agent up in the registry, whose first lookup imports
    # every app's agents module: one that raised made the run keep no facts, though the agent
    # (registered already) enables knowledge memory. It is looked up among those loaded.
    from agentmemory import agent_registry

    def broken(name: str) -> None:
        raise ImportError("cannot import name 'Missing' from 'project.tools'")

    monkeypatch.setattr(agent_registry, "_discovered", False)
    monkeypatch.setattr(agent_registry, "autodiscover_modules", broken)
    user = UserFactory()
    conv = conversation(user)
    with caplog.at_level(logging.ERROR, logger="agentmemory.agents"):
        assert run_compaction(conv.pk, llm=ScriptedChatModel([json.dumps(reply())])).status == STORED
    assert scope(user).live_facts().count() == 2
    assert "cannot import name 'Missing'" in caplog.text


# -- without a model ------------------------------------------------------------------------------


def test_the_offline_compactor_keeps_first_person_facts_marked_as_found_without_a_model() -> None:
    user = UserFactory()
    conv = conversation(user)

    run = offline(conv).run()

    assert run.status == STORED and run.summary.text.startswith(OFFLINE_LABEL)
    facts = {f.content: f for f in scope(user).live_facts()}
    assert set(facts) == {
        'Caroline said "I moved to Lisbon in March." on 8 May 2023.',
        'Caroline said "My daughter Lea is allergic to peanuts."',
    }
    moved = facts['Caroline said "I moved to Lisbon in March." on 8 May 2023.']
    assert moved.category == "events" and moved.source_message_id == message_id(conv, 1)
    assert moved.metadata["extracted_by"] == OFFLINE_FACTS and moved.metadata["said_at"] == MAY_8
    assert moved.importance == 0.4
    # the assistant's words are not facts of the user; Melanie's are, in a two-person
    # transcript, but she stated none here
    assert not any("Thanks" in content for content in facts)


def test_the_offline_summary_keeps_dates_and_names() -> None:
    conv = conversation(UserFactory())
    summary = offline(conv).run().summary

    assert summary.text.splitlines()[1:] == [
        "- [8 May 2023] Caroline said: I moved to Lisbon in March.",
        "- Melanie said: Lisbon is lovely!",
        "- [25 May 2023] Caroline said: My daughter Lea is allergic to peanuts.",
        "- Melanie said: Thanks for telling me.",
    ]


def test_a_mistyped_setting_is_a_system_check_error() -> None:
    from agentmemory.checks import check_settings

    with override_settings(AGENTMEMORY={"MEMORY_FLUSH": "on"}):
        assert [p.id for p in check_settings()] == ["agentmemory.E011"]
    with override_settings(AGENTMEMORY={"MEMORY_FLUSH": "always"}):
        assert check_settings() == []


# -- a real transcript: LoCoMo's session dates and speakers survive -------------------------------


def locomo_conversation(shared_data: Any, owner: Any, sessions: int) -> tuple[Conversation, dict[int, str]]:
    """The first ``sessions`` sessions of the first LoCoMo conversation, stored as the importer
    stores them; returns the conversation and its session dates by number."""
    from agentmemory.formats.transcripts import load_transcripts

    [transcript] = load_transcripts(shared_data / "locomo6.json", "locomo", limit=1)
    kept = [m for m in transcript.messages if m.metadata["session"] <= sessions]
    conv = Conversation.objects.create(owner=owner, agent_key=AGENT)
    PersistentChatHistory(conv).add_messages(kept)
    dates = {int(k): v for k, v in transcript.metadata["session_date_times"].items() if int(k) <= sessions}
    return conv, dates


def test_a_locomo_offline_summary_keeps_every_session_date_and_both_names(shared_data) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv, dates = locomo_conversation(shared_data, user, sessions=3)

    summary = offline(conv).run().summary

    lines = summary.text.splitlines()
    assert lines[0] == OFFLINE_LABEL
    # the oldest lines did not fit the summary's 1,000 tokens; their dates did
    assert lines[1].startswith("- Left out to fit: ") and ", said on 8 May 2023; 25 May 2023" in lines[1]
    assert "[9 June 2023] " in summary.text and dates[3] == "7:55 pm on 9 June, 2023"
    assert "Caroline said: " in summary.text and "Melanie said: " in summary.text
    facts = list(scope(user).live_facts())
    assert facts and all(f.metadata["extracted_by"] == OFFLINE_FACTS for f in facts)
    assert {f.metadata["said_at"] for f in facts} <= set(dates.values())
    support_group = [f for f in facts if "LGBTQ support group yesterday" in f.content]
    assert [f.content.rsplit(" on ", 1)[1] for f in support_group] == ["8 May 2023."]


def test_a_locomo_prompt_carries_the_session_dates_and_speakers(shared_data) -> None:  # type: ignore[no-untyped-def]
    conv, dates = locomo_conversation(shared_data, UserFactory(), sessions=2)
    llm = ScriptedChatModel([json.dumps({"summary": "Caroline and Melanie talked.", "facts": []})])

    run_compaction(conv.pk, llm=llm)

    prompt = llm.calls[0][0][-1].content
    assert f"[#1 | {dates[1]}] Caroline: " in prompt
    assert f" | {dates[2]}] Melanie: " in prompt


def test_an_agent_meets_the_facts_of_its_folded_turns_in_a_new_conversation(
    monkeypatch, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """Through ``agent.run()``, with no model configured for summaries: the turns folded by
    the inline compaction leave their facts, which the next conversation's system prompt holds."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

    class Assistant(FlushAgent, register=False):
        MEMORY_COMPACTOR_ENABLED = True

    user = UserFactory()
    seen: list[str] = []

    def answer(messages: list[ChatMessage]) -> str:
        seen.append(messages[0].text)
        return "Noted."

    with override_settings(AGENTMEMORY={"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 2, "COMPACTION_MODE": "inline"}):
        agent = Assistant(ScriptedChatModel([answer] * 5))
        first = agent.start_conversation(owner=user)
        turns = (
            "I moved to Lisbon in March.",
            "My daughter Lea is allergic to peanuts.",
            "What now?",
            "Thanks.",
        )
        for text in turns:
            with django_capture_on_commit_callbacks(execute=True):  # the turn commits: compaction runs
                agent.run(first, text)
        assert Summary.objects.filter(conversation=first).exists()
        agent.run(agent.start_conversation(owner=user), "What should I cook tonight?")

    assert "Long-term Memory" not in seen[0]
    assert 'The user said "I moved to Lisbon in March."' not in seen[0]
    assert 'The user said "My daughter Lea is allergic to peanuts."' in seen[-1]
    assert 'The user said "I moved to Lisbon in March." on ' in seen[-1]
