"""The local embedding model (``agentmemory.recall.local``, the ``local-embeddings`` extra):
all-MiniLM-L6-v2 as int8 ONNX, run in process with nothing downloaded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, MessageEmbedding
from agentmemory.recall.embedders import Embedder, EmbeddingError
from agentmemory.recall.local import MiniLMEmbedder
from tests.factories import UserFactory

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


def test_vectors_match_the_sentence_transformers_model() -> None:
    """The reference vectors were made by sentence-transformers with the float32 weights;
    the int8 ONNX model with the bundled vocabulary must point the same way."""
    reference = json.loads(REFERENCE.read_text())
    embedder = MiniLMEmbedder()
    assert isinstance(embedder, Embedder)
    ours = np.array(embedder.embed(reference["texts"]))
    theirs = np.array(reference["vectors"])
    assert ours.shape == theirs.shape == (len(reference["texts"]), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert (ours * theirs).sum(axis=1).min() > 0.995


def test_order_and_batching_do_not_change_a_vector() -> None:
    texts = ["short", "a much longer sentence about the weather in Lisbon last week", "", "car"]
    one_by_one = [MiniLMEmbedder(batch_size=1).embed([t])[0] for t in texts]
    batched = MiniLMEmbedder(batch_size=3).embed(texts)
    assert np.allclose(one_by_one, batched, atol=1e-4)
    assert MiniLMEmbedder().embed([]) == []


def test_meaning_ranks_above_unrelated_text() -> None:
    car, automobile, bread = np.array(
        MiniLMEmbedder().embed(["My car will not start", "automobile trouble", "I love baking bread"])
    )
    assert car @ automobile > car @ bread + 0.2


def test_a_missing_model_file_is_an_embedding_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EmbeddingError, match="no ONNX model"):
        MiniLMEmbedder(model_path=tmp_path / "missing.onnx").embed(["x"])


@pytest.mark.django_db
def test_messages_stored_before_the_embedder_are_recalled_by_meaning_after_the_rebuild(settings) -> None:  # type: ignore[no-untyped-def]
    """docs/longterm.md, "A local embedding model": a question sharing no word with what was
    said before recalls nothing until ``rebuild_recall_index`` embeds the older messages."""
    alice = UserFactory()
    past = Conversation.objects.create(owner=alice, agent_key="concierge", title="Trip planning")
    PersistentChatHistory(past).add_messages(
        [
            ChatMessage.human("My wife is vegetarian, by the way."),
            ChatMessage.ai("Noted, I told the restaurant."),
        ]
    )
    settings.AGENTMEMORY = {"EMBEDDER": "agentmemory.recall.local.MiniLMEmbedder", "RECALL_BACKEND": "hybrid"}
    now = Conversation.objects.create(owner=alice, agent_key="concierge", title="Dinner")
    PersistentChatHistory(now).add_message(ChatMessage.human("Does my spouse eat meat?"))

    def block():  # type: ignore[no-untyped-def]
        return ContextWindowBuilder(now, memory_recall=True).build(4_000).memory

    vectors = MessageEmbedding.objects.filter(message__conversation=past)
    assert not vectors.exists()
    assert block() is None
    call_command("rebuild_recall_index", stdout=io.StringIO())
    assert vectors.count() == 2
    memory = block()
    assert memory is not None
    assert "user: My wife is vegetarian, by the way." in memory.text
