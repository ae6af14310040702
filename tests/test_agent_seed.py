"""The agent and compactor contract of the suvereo memory document, run as its examples are
written: ``get_config()`` changing ``config.memory``, and a ``BaseMemoryCompactor`` subclass with
only ``get_summary(self) -> Optional[str]`` and ``compact_if_needed(self) -> None``."""

from __future__ import annotations

import threading
from typing import Optional

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from agentmemory.agents import AgentConfig, BaseToolCallingAgent, MemoryConfig, registry
from agentmemory.compaction import BaseMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary

ARTICLES_SYSTEM_PROMPT = "You help readers find articles."
BUILT_WITH: list[tuple] = []


class MyMemoryCompactor(BaseMemoryCompactor):
    """Summarises every second human message by listing the questions so far, and keeps its
    summary in the conversation's metadata (not in agentmemory's summary table)."""

    def __init__(self, conversation_repo, conversation_id, llm, chat_history):  # type: ignore[no-untyped-def]
        BUILT_WITH.append((conversation_repo, conversation_id, llm, chat_history))
        super().__init__(conversation_repo, conversation_id, llm, chat_history)

    def get_summary(self) -> Optional[str]:  # noqa: UP045 - the seed's own spelling
        """Return the persisted summary, or None if there is none yet."""
        conversation = self.conversation_repo.get(pk=self.conversation_id)
        return conversation.metadata.get("my_summary")

    def compact_if_needed(self) -> None:
        """Generate and persist a new summary when the threshold is reached."""
        questions = [m.content for m in self.chat_history.get_messages() if m.role is Role.HUMAN]
        if len(questions) % 2:
            return
        conversation = self.conversation_repo.get(pk=self.conversation_id)
        conversation.metadata["my_summary"] = "The reader asked about: " + "; ".join(questions)
        conversation.save(update_fields=["metadata", "updated_at"])


class ArticlesAgent(BaseToolCallingAgent):
    NAME = "Articles"
    AGENT_KEY = "articles-agent"
    SYSTEM_PROMPT = ARTICLES_SYSTEM_PROMPT
    MEMORY_COMPACTOR_ENABLED = True

    @classmethod
    def get_config(cls) -> AgentConfig:
        config = super().get_config()
        config.memory = MemoryConfig(
            chat_history_class=PersistentChatHistory,
            compactor_class=MyMemoryCompactor,
        )
        return config


@pytest.fixture(autouse=True)
def _fresh():  # type: ignore[no-untyped-def]
    BUILT_WITH.clear()


def test_get_config_returns_a_fresh_config_each_call():
    assert registry.get("articles-agent") is ArticlesAgent  # registered as written, by its key
    config = ArticlesAgent.get_config()
    assert config.memory.compactor_class is MyMemoryCompactor
    # Changing one agent's config never leaks into the base class's or the next call's.
    assert BaseToolCallingAgent.get_config().memory.compactor_class != MyMemoryCompactor
    config.memory.compactor_class = None
    assert ArticlesAgent.get_config().memory.compactor_class is MyMemoryCompactor


def test_seed_agent_and_compactor_run_as_written(db):
    topics = ["solar panels", "heat pumps", "wind farms", "tidal power", "geothermal"]
    llm = ScriptedChatModel([f"Here are articles on {t}." for t in topics])
    agent = ArticlesAgent(llm=llm)
    conversation = agent.start_conversation(title="reading list")

    answers = [agent.run(conversation, f"Articles about {t}?").answer for t in topics]

    # Every answer comes back: the compactor's signature breaks nothing after the answer.
    assert answers == [f"Here are articles on {t}." for t in topics]
    # Built as compactor_class(conversation_repo, conversation_id, llm, chat_history).
    repo, conversation_id, built_llm, history = BUILT_WITH[0]
    assert repo is Conversation.objects and conversation_id == conversation.pk
    assert built_llm is llm and isinstance(history, PersistentChatHistory)

    sent = [messages for messages, _tools in llm.calls]
    # No summary on the first two calls; from the third on, the compactor's own text is the
    # second system message, right after the system prompt.
    for messages in sent[:2]:
        assert [m.role for m in messages[:1]] == [Role.SYSTEM]
        assert all(m.role is not Role.SYSTEM for m in messages[1:])
    expected = {
        2: "The reader asked about: Articles about solar panels?; Articles about heat pumps?",
        3: "The reader asked about: Articles about solar panels?; Articles about heat pumps?",
        4: (
            "The reader asked about: Articles about solar panels?; Articles about heat pumps?; "
            "Articles about wind farms?; Articles about tidal power?"
        ),
    }
    for call, summary in expected.items():
        messages = sent[call]
        assert messages[0].content == ARTICLES_SYSTEM_PROMPT
        assert messages[1].role is Role.SYSTEM and messages[1].content.endswith(summary)
        assert messages[-1].content == f"Articles about {topics[call]}?"
    # The custom compactor keeps its summary where it chose; agentmemory stored none.
    assert not Summary.objects.exists()
    assert Message.objects.filter(conversation=conversation).count() == 10


def test_custom_summary_counts_against_the_budget(db):
    class TightArticlesAgent(ArticlesAgent):
        CONVERSATION_HISTORY_TOKEN_LIMIT = 120

    llm = ScriptedChatModel(["ok " + "word " * 20] * 6)
    agent = TightArticlesAgent(llm=llm)
    conversation = agent.start_conversation()
    for i in range(6):
        agent.run(conversation, f"question {i} " + "filler " * 10)
    counter = agent.token_counter
    for messages, _tools in llm.calls:
        assert sum(counter.count_message(m) for m in messages) <= 120
    assert any(
        m.role is Role.SYSTEM and "The reader asked about" in (m.content or "") for m in llm.calls[-1][0]
    )


def test_a_failing_custom_compactor_never_loses_the_answer(db, caplog):
    class BrokenCompactor(MyMemoryCompactor):
        def compact_if_needed(self) -> None:
            raise RuntimeError("summary store is down")

    class BrokenAgent(ArticlesAgent):
        @classmethod
        def get_config(cls) -> AgentConfig:
            config = super().get_config()
            config.memory = MemoryConfig(compactor_class=BrokenCompactor)
            return config

    agent = BrokenAgent(llm=ScriptedChatModel(["an answer"]))
    result = agent.run(agent.start_conversation(), "a question")
    assert result.answer == "an answer" and result.compaction_enqueued is False
    assert "summary store is down" in caplog.text


class SeedWindowAgent(ArticlesAgent, register=False):
    """Builds each window with the seed's own lines, inside the agent."""

    windows: list[int]

    def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
        context_messages = ContextWindowBuilder(
            chat_history=self._injector.chat_history,
            memory_compactor=self._injector.memory_compactor,
        ).build(max_tokens=self._conversation_history_token_limit)
        self.windows.append(self._injector.conversation_id)
        return context_messages


def test_the_seed_window_lines_run_inside_an_agent_as_written(db):
    agent = SeedWindowAgent(llm=ScriptedChatModel(["first", "second"]))
    agent.windows = []
    conversation = agent.start_conversation()

    assert agent.run(conversation, "Articles about solar panels?").answer == "first"
    assert agent.run(conversation, "And heat pumps?").answer == "second"

    assert agent.windows == [conversation.pk, conversation.pk]
    assert agent._conversation_history_token_limit == agent.token_limit == 10_000
    sent = agent.llm.calls[-1][0]
    assert [m.content for m in sent if m.role is Role.HUMAN] == [
        "Articles about solar panels?",
        "And heat pumps?",
    ]
    with pytest.raises(AttributeError, match="running no turn here"):
        agent._injector  # noqa: B018  (outside a turn there is none)


@pytest.mark.postgres  # two turns writing at once: SQLite's shared-cache test database refuses
@pytest.mark.django_db(transaction=True)
def test_one_agent_running_two_conversations_at_once_sees_each_turns_injector() -> None:
    seen: dict[str, list[int]] = {"a": [], "b": []}
    both_inside = threading.Barrier(2, timeout=10)

    class Meeting(ArticlesAgent, register=False):
        def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
            both_inside.wait()  # both turns are running on this one instance now
            seen[injector.conversation.title].append(self._injector.conversation_id)
            return super().build_window(builder, injector)

    agent = Meeting(llm=ScriptedChatModel(["answer a", "answer b"]))
    conversations = {title: agent.start_conversation(title=title) for title in ("a", "b")}

    def turn(title: str) -> None:
        try:
            agent.run(conversations[title], f"question {title}")
        finally:
            connections.close_all()  # this thread's connection, not left to the garbage collector

    threads = [threading.Thread(target=turn, args=(title,)) for title in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)

    assert seen == {"a": [conversations["a"].pk], "b": [conversations["b"].pk]}


@pytest.mark.django_db(transaction=True)
def test_the_seed_window_lines_run_inside_an_async_turn() -> None:
    agent = SeedWindowAgent(llm=ScriptedChatModel(["async answer"]))
    agent.windows = []
    conversation = agent.start_conversation()

    result = async_to_sync(agent.arun)(conversation, "Articles about tidal power?")

    assert result.answer == "async answer" and agent.windows == [conversation.pk]
