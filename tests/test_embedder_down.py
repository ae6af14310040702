"""An embedding service that is down never loses a fact nor fails the write that stores it:
the fact is stored without its vector (a warning is logged), found by full text, and
``manage.py rebuild_recall_index`` adds the vector later."""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, FactEmbedding, Message, MessageEmbedding
from agentmemory.recall.embedders import EmbeddingError
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

DOWN = {"EMBEDDER": "tests.test_embedder_down.DownEmbedder", "RECALL_BACKEND": "hybrid"}


class DownEmbedder:
    """An embedder whose service times out (what ``OpenAICompatibleEmbedder`` raises)."""

    model = "down"

    def embed(self, texts):  # type: ignore[no-untyped-def]
        raise EmbeddingError("embedding request failed: timed out")


def test_remember_with_a_failing_embedder_stores_the_fact_without_a_vector(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = DOWN
    user = UserFactory()
    KnowledgeMemory(user).remember("Lives in Oslo", "home", True)
    assert list(Fact.objects.values_list("content", flat=True)) == ["Lives in Oslo"]
    assert FactEmbedding.objects.count() == 0
    assert "stored without a vector" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the "key:" rule still supersedes without vectors
    KnowledgeMemory(user).store("city: Oslo")
    changed = KnowledgeMemory(user).store("city: Bergen")
    assert changed.action == "superseded" and len(changed.superseded_ids) == 1

    settings.AGENTMEMORY = {"RECALL_BACKEND": "fulltext"}
    assert [h.fact.content for h in KnowledgeMemory(user).recall("Oslo")][:1] == ["Lives in Oslo"]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}
    call_command("rebuild_recall_index", stdout=io.StringIO())
    assert FactEmbedding.objects.filter(fact__content="Lives in Oslo").count() == 1


def test_post_fact_with_a_failing_embedder_answers_201(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = DOWN
    user = UserFactory()
    client = APIClient()
    client.force_authenticate(user)
    created = client.post("/api/facts/", {"content": "Preferred language: Python"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["fact"]["content"] == "Preferred language: Python"
    assert Fact.objects.filter(owner=user, content="Preferred language: Python").exists()
    assert FactEmbedding.objects.count() == 0


# -- appends with an embedding service that hangs (no Celery broker: embedded in process) --------


@pytest.fixture
def hanging_server() -> Iterator[str]:
    """A server on 127.0.0.1 that accepts connections and never answers; its base URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=hold, name="hanging-embeddings", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def test_appends_with_a_hanging_embedder_return_quickly_and_store_every_message(  # type: ignore[no-untyped-def]
    settings, hanging_server, monkeypatch, django_capture_on_commit_callbacks, caplog
) -> None:
    """Each append waited the embedder's 30 s timeout (five appends: 152 s); now the first
    waits at most ``INPROCESS_EMBED_TIMEOUT_SECONDS`` and the next ones skip embedding."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setattr("agentmemory.broker.celery_broker", lambda: ("", False))
    settings.AGENTMEMORY = {
        "EMBEDDER": "agentmemory.recall.embedders.OpenAICompatibleEmbedder",
        "EMBEDDER_OPTIONS": {"model": "m", "base_url": hanging_server, "api_key": "k"},
        "RECALL_BACKEND": "hybrid",
    }
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    history = PersistentChatHistory(conv)
    started = time.monotonic()
    for n in range(5):
        with django_capture_on_commit_callbacks(execute=True):
            history.add_messages([ChatMessage.human(f"message {n}")])
    took = time.monotonic() - started
    assert took < 10, f"five appends took {took:.1f} s with a hanging embedder"
    assert Message.objects.filter(conversation=conv).count() == 5
    assert MessageEmbedding.objects.count() == 0
    assert caplog.text.count("rebuild_recall_index will retry") == 1  # once per pause


class FlakyEmbedder(DownEmbedder):
    """Down until ``up`` is set, then the stub embedder's vectors."""

    model = "stub-embedder"
    up = False

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if not FlakyEmbedder.up:
            return super().embed(texts)
        return StubEmbedder().embed(texts)


def test_after_the_pause_new_messages_are_embedded_again(  # type: ignore[no-untyped-def]
    settings, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from agentmemory.recall import inprocess

    monkeypatch.setattr("agentmemory.broker.celery_broker", lambda: ("", False))
    monkeypatch.setattr(FlakyEmbedder, "up", False)
    settings.AGENTMEMORY = {**DOWN, "EMBEDDER": "tests.test_embedder_down.FlakyEmbedder"}
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")

    def append(text: str) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            PersistentChatHistory(conv).add_messages([ChatMessage.human(text)])

    append("first")  # fails: pauses in-process embedding
    monkeypatch.setattr(FlakyEmbedder, "up", True)
    append("second")  # paused: not embedded
    assert MessageEmbedding.objects.count() == 0
    later = time.monotonic() + inprocess.INPROCESS_EMBED_COOLDOWN_SECONDS + 1
    monkeypatch.setattr(inprocess.time, "monotonic", lambda: later)
    append("third")
    assert list(MessageEmbedding.objects.values_list("message__content", flat=True)) == ["third"]
    call_command("rebuild_recall_index", stdout=io.StringIO())
    assert MessageEmbedding.objects.count() == 3


def test_the_agents_remember_tool_stores_the_fact_when_the_embedder_fails(  # type: ignore[no-untyped-def]
    settings, fake_openai, monkeypatch, tmp_path
) -> None:
    """The tool answered an error and the fact was lost; now it is remembered, without a vector."""
    from agentmemory.compat.selectools import (
        Agent,
        AgentConfig,
        ConversationMemory,
        OpenAIProvider,
        Role,
    )
    from agentmemory.compat.selectools import (
        KnowledgeMemory as ToolKnowledge,
    )
    from agentmemory.compat.selectools import (
        Message as AgentMessage,
    )

    settings.AGENTMEMORY = DOWN
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)
    fake_openai.enqueue_tool_calls([("remember", {"content": "Works at Acme Corp", "persistent": True})])
    fake_openai.enqueue_text("Saved.")
    agent = Agent(
        tools=[],
        provider=OpenAIProvider(),
        memory=ConversationMemory(max_messages=50),
        config=AgentConfig(knowledge_memory=ToolKnowledge(storage_dir="./agent_memory")),
    )
    agent.run([AgentMessage(role=Role.USER, content="Remember that I work at Acme Corp.")])
    tool_reply = fake_openai.requests[1]["messages"][-1]["content"]
    assert tool_reply == "Remembered (general, persistent): Works at Acme Corp"
    assert list(Fact.objects.values_list("content", flat=True)) == ["Works at Acme Corp"]
    assert FactEmbedding.objects.count() == 0
