"""The second search of a question about every instance (``agentmemory.recall.feedback``)
keeps the first one's scope: another owner's or another agent key's messages never come
back, and the messages the window already sends neither come back nor choose its words."""

from __future__ import annotations

from typing import Any

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.memory import rank_messages, recall_memory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

QUESTION = "How many doctors did I visit?"
EMBEDDER_SETTINGS = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}


@pytest.fixture(params=["fulltext", "hybrid"])
def backend(request, settings, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    """Full text, and hybrid with a stub embedder (the messages embedded as they are stored)."""
    if request.param == "hybrid":
        settings.AGENTMEMORY = EMBEDDER_SETTINGS
    return request.param


def stored(owner: Any, *turns: str, agent_key: str = "support") -> Conversation:
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    PersistentChatHistory(conv).add_messages(
        [(ChatMessage.human if i % 2 == 0 else ChatMessage.ai)(text) for i, text in enumerate(turns)]
    )
    return conv


def two_doctor_visits(owner: Any) -> None:
    stored(owner, "I saw my doctor at the appointment; the specialist prescribed drops.", "Good.")
    stored(owner, "Another doctor today: at the appointment the specialist prescribed a cream.", "Fine.")


def test_the_second_search_stays_in_the_owner_and_agent_key(backend) -> None:  # type: ignore[no-untyped-def]
    user, other = UserFactory(), UserFactory()
    two_doctor_visits(user)
    # they share the words the feedback adds ("specialist", "prescribed", "appointment")
    foreign = stored(other, "The specialist prescribed it at the appointment.", "Ok.")
    other_agent = stored(user, "The specialist prescribed it at the appointment.", "Ok.", agent_key="coach")
    hits = rank_messages(owner=user, query=QUESTION, k=50, agent_key="support")
    found = {hit.conversation_id for hit in hits}
    assert found and foreign.pk not in found and other_agent.pk not in found
    block = recall_memory(owner=user, query=QUESTION, max_tokens=4000, agent_key="support", facts=False)
    assert block is not None and "it at the appointment" not in block.text


def test_the_window_neither_comes_back_nor_chooses_the_words(backend) -> None:  # type: ignore[no-untyped-def]
    """The window's own messages (``exclude_seqs``) match the question best: were their
    words added to it, the second search would bring what they share ("zeppelin") rather
    than more of what was asked."""
    user = UserFactory()
    two_doctor_visits(user)
    zeppelin = stored(user, "The zeppelin hangar tour with the museum guide was long.", "Wow.")
    window = stored(
        user,
        "My doctor visit first, then the zeppelin hangar with the museum guide.",
        "Noted.",
        "Another doctor visit, and again the zeppelin hangar with the museum guide.",
        "Noted.",
        QUESTION,
    )
    seqs = list(window.messages.values_list("seq", flat=True))
    hits = rank_messages(owner=user, query=QUESTION, k=50, conversation_id=window.pk, exclude_seqs=seqs)
    found = {hit.conversation_id for hit in hits}
    assert window.pk not in found
    assert zeppelin.pk not in found, [hit.content for hit in hits]
    assert any("prescribed" in hit.content for hit in hits)
