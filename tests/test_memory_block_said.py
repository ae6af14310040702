"""The memory block never repeats what the request already sends (design R3, issue 20), also
when a fact has no ``source_message``: facts stored by a host's own ``remember()`` calls, an
import, MEMORY.md or ``SemanticMemory`` carry none. A fact whose words are a message the
window sends, or a sentence of one, or a message the block itself shows, is left out: the
message says it, with its date and speaker."""

from __future__ import annotations

import pytest

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall.memory import recall_memory
from agentmemory.recall.text import said_keys, words_key
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_a_fact_the_window_sends_as_a_sentence_is_not_in_the_block() -> None:
    user = UserFactory()
    KnowledgeMemory(user).remember("Tom plays the violin", "family", persistent=True)
    KnowledgeMemory(user).remember("Lea takes piano lessons", "family", persistent=True)
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("Tom plays the violin. Which music camp suits him, or Lea for piano?")]
    )
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is not None
    assert "Lea takes piano lessons" in window.memory.text
    assert "Tom plays the violin" not in window.memory.text


def test_a_fact_a_recalled_message_says_is_shown_once() -> None:
    user = UserFactory()
    past = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(past).add_messages(
        [ChatMessage.human("Lea is allergic to peanuts."), ChatMessage.ai("Noted, I will remember that.")]
    )
    KnowledgeMemory(user).remember("Lea is allergic to peanuts", "health", persistent=True)
    block = recall_memory(owner=user, query="Which snacks are safe for Lea with peanuts?", max_tokens=1_000)
    assert block is not None
    assert "user: Lea is allergic to peanuts." in block.text
    assert [item.kind for item in block.items] == ["message"]


def test_a_fact_that_only_shares_words_with_a_message_stays() -> None:
    user = UserFactory()
    KnowledgeMemory(user).remember("Likes jazz", "music", persistent=True)
    block = recall_memory(
        owner=user,
        query="What music does he like? jazz",
        max_tokens=1_000,
        exclude_texts=["My brother likes jazz but I do not."],
    )
    assert block is not None and "Likes jazz" in block.text


@pytest.mark.parametrize(
    ("fact", "text"),
    [
        ("Tom plays the violin", "Tom plays the violin. Which camp?"),
        ("Tom plays the violin", "tom  plays the VIOLIN!"),
        ("Lea is 7", "Hi.\nLea is 7\nBye"),
        ("我妹妹住在里斯本", "你好。我妹妹住在里斯本。"),
        ("\uff34\uff4f\uff4d plays", "Tom plays"),  # full-width letters
    ],
)
def test_a_sentence_of_a_text_says_a_fact(fact, text) -> None:  # type: ignore[no-untyped-def]
    assert words_key(fact) in said_keys(text)


@pytest.mark.parametrize(
    ("fact", "text"),
    [
        ("Likes jazz", "My brother likes jazz."),
        ("Budget is 3.5k", "Budget is 3. 5k later"),
        ("Lea is 7", "Lea is 7 and Tom is 9"),
    ],
)
def test_a_text_holding_a_fact_s_words_among_others_does_not_say_it(fact, text) -> None:  # type: ignore[no-untyped-def]
    assert words_key(fact) not in said_keys(text)


def test_a_fact_from_a_transcript_message_is_dated_when_the_message_was_said() -> None:
    """Design R3: dates a transcript gives win over storage times. The memory flush puts the
    source's date in ``metadata["said_at"]``; a fact stored with ``source_message`` by
    ``remember()`` (the agent's tool, a host's code) was dated when it was stored, so a
    question about 2023 read a fact "said" today."""
    user = UserFactory()
    past = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(past).add_messages(
        [
            ChatMessage.human(
                "Yesterday was so powerful.", metadata={"session_date_time": "1:56 pm on 8 May, 2023"}
            )
        ]
    )
    source = past.messages.get()
    memory = KnowledgeMemory(user)
    fact = memory.store("Went to an LGBTQ support group", "life", source_message=source).fact
    assert fact.metadata == {"said_at": "1:56 pm on 8 May, 2023"}
    block = recall_memory(
        owner=user, query="When did I go to the support group?", max_tokens=1_000, facts=True
    )
    assert block is not None
    (item,) = [i for i in block.items if i.kind == "fact"]
    assert "8 May 2023" in item.text
    # a message stored without a transcript date gives the fact no date of its own
    live = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(live).add_messages([ChatMessage.human("My locker code is 4417.")])
    other = memory.store("Locker code: 4417", "misc", source_message=live.messages.get()).fact
    assert other.metadata == {}
    # prepare() does the same for metadata that does not give the date itself
    prepared = memory.prepare(
        "Support group meets on Sundays", "life", source_message=source, metadata={"a": 1}
    )
    assert prepared.metadata == {"a": 1, "said_at": "1:56 pm on 8 May, 2023"}
