"""The memory block never repeats what the request already sends (design R3): a fact whose
source message is in the window is left out of the block, as the message says it. The
``remember`` tool keeps a fact with the turn's own question as its source, and the second
model call of that turn was sent the question and, in the block, the fact made of it."""

from __future__ import annotations

import pytest

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.context import ContextWindowBuilder
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class Keeping(BaseToolCallingAgent, register=False):
    AGENT_KEY = "keeping-test"
    SYSTEM_PROMPT = "You keep what the user tells you."
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True


def block_of(messages):  # type: ignore[no-untyped-def]
    found = [m for m in messages if MEMORY_BLOCK_KEY in (m.metadata or {})]
    return found[0].text if found else ""


def test_the_fact_remembered_from_the_turn_is_not_in_its_next_call() -> None:
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key=Keeping.AGENT_KEY)
    call = ToolCall(id="c1", name="remember", arguments={"content": "Gym locker code: 4417"})
    llm = ScriptedChatModel([ChatMessage.ai("", tool_calls=[call]), "Noted: 4417."])
    Keeping(llm).run(conv, "My gym locker code is 4417, keep it for me.")
    assert KnowledgeMemory(user).live_facts().get().content == "Gym locker code: 4417"
    second = llm.calls[1][0]
    assert any("My gym locker code is 4417" in m.text for m in second)
    assert "Gym locker code: 4417" not in block_of(second)


def test_a_fact_of_a_message_outside_the_window_is_still_recalled() -> None:
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("My gym locker code is 4417."), ChatMessage.ai("Noted.")]
    )
    source = Message.objects.filter(conversation=conv).order_by("seq").first()
    KnowledgeMemory(user).store("Gym locker code: 4417", source_message=source)
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert "My gym locker code is 4417." in [m.text for m in window.history]
    assert window.memory is None or "Gym locker code: 4417" not in window.memory.text

    later = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(later).add_messages([ChatMessage.human("What is my gym locker code?")])
    block = ContextWindowBuilder(later, memory_recall=True).build(2_000).memory
    assert block is not None and "4417" in block.text


def test_a_fact_of_a_message_the_window_sends_cut_is_still_recalled() -> None:
    """The newest human message, too long for the window, is sent as a truncated copy
    (``oversized_message_policy="truncate"``): the fact kept from its end is not in what the
    window sends, and was left out of the block as if it were."""
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="a")
    text = "My packing list: " + "socks and shirts. " * 3_000 + "My gym locker code is 4417."
    PersistentChatHistory(conv).add_messages([ChatMessage.human(text)])
    source = Message.objects.get(conversation=conv)
    KnowledgeMemory(user).store("Gym locker code: 4417", source_message=source)
    window = ContextWindowBuilder(
        conv, memory_recall=True, oversized_message_policy="truncate", memory_query="gym locker code"
    ).build(2_000)
    assert window.truncated and "4417" not in window.history[-1].text
    assert window.memory is not None and "Gym locker code: 4417" in window.memory.text


class Flushing(BaseToolCallingAgent, register=False):
    AGENT_KEY = "flushing-test"
    SYSTEM_PROMPT = "You answer from what the user told you."
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True


def test_a_message_the_knowledge_block_quotes_is_not_in_the_memory_block_again() -> None:
    """A memory flush keeps a turn as a fact quoting it; that fact is in the agent's
    knowledge block (the system prompt) in every later conversation. The memory block
    showed the same words again as the message, taking the room of other lines."""
    user = UserFactory()
    past = Conversation.objects.create(owner=user, agent_key=Flushing.AGENT_KEY)
    PersistentChatHistory(past).add_messages(
        [
            ChatMessage.human("My favourite food is bacalhau with chickpeas."),
            ChatMessage.ai("Noted, bacalhau it is."),
            ChatMessage.human("And my favourite dessert is pastel de nata from Belem."),
            ChatMessage.ai("A classic."),
        ]
    )
    source = Message.objects.get(conversation=past, seq=1)
    KnowledgeMemory(user).store(
        'The user said "My favourite food is bacalhau with chickpeas." on 7 December 2026.',
        source_message=source,
    )
    llm = ScriptedChatModel(["Bacalhau, and pastel de nata for dessert."])
    later = Conversation.objects.create(owner=user, agent_key=Flushing.AGENT_KEY)
    Flushing(llm).run(later, "What is my favourite food and my favourite dessert?")
    sent = llm.calls[0][0]
    assert "My favourite food is bacalhau with chickpeas." in sent[0].text  # the knowledge block
    block = block_of(sent)
    assert "pastel de nata from Belem" in block  # what the prompt does not say is recalled
    assert "user: My favourite food is bacalhau" not in block
    request = " ".join(m.text for m in sent)
    assert request.count("My favourite food is bacalhau with chickpeas") == 1


def test_a_message_the_summary_quotes_is_not_in_the_memory_block_again() -> None:
    """Asked in the same conversation, an extractive summary quoting a folded turn is sent;
    the block recalling that turn repeated it."""
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="a")
    history = PersistentChatHistory(conv)
    history.add_messages(
        [
            ChatMessage.human("My sister Ana lives in Lisbon near the river."),
            ChatMessage.ai("Lovely city."),
            ChatMessage.human("My brother Rui moved to Porto for his new job."),
            ChatMessage.ai("Good luck to him."),
            ChatMessage.human("Where do my sister and my brother live?"),
        ]
    )
    stored = history.get_messages()
    summary = conv.summaries.create(
        text="Earlier: the user said: My sister Ana lives in Lisbon near the river.",
        first_seq=1,
        through_seq=2,
        token_count=20,
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    conv.refresh_from_db()
    assert stored[-1].seq == 5
    window = ContextWindowBuilder(conv, memory_recall=True).build(200)
    texts = [m.text for m in window.messages]
    assert any("My sister Ana lives in Lisbon" in t for t in texts[:1])
    block = window.memory.text if window.memory is not None else ""
    assert "user: My sister Ana lives in Lisbon" not in block


def test_a_short_line_the_prompt_happens_to_hold_is_still_recalled() -> None:
    """Fewer than four words are said in passing by many texts: the line stays."""
    user = UserFactory()
    past = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(past).add_messages(
        [ChatMessage.human("Which ferry goes to Cacilhas?"), ChatMessage.ai("Take the ferry.")]
    )
    later = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(later).add_messages([ChatMessage.human("Which ferry did you suggest?")])
    window = ContextWindowBuilder(
        later, memory_recall=True, system_prompt="When unsure, say: take the ferry."
    ).build(2_000)
    assert window.memory is not None and "assistant: Take the ferry." in window.memory.text


ALLERGY = "I am allergic to peanuts and shellfish."
#: a developer's instructions quoting, as an example, words a user may say
QUOTING_PROMPT = (
    'You are a cook. Users often write things like "I am allergic to peanuts and shellfish"; '
    "never assume an allergy a user has not told you about."
)


def _allergic_user():  # type: ignore[no-untyped-def]
    """A user who said ``ALLERGY`` in a past conversation, and a new conversation asking about it."""
    user = UserFactory()
    past = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(past).add_messages([ChatMessage.human(ALLERGY), ChatMessage.ai("Noted.")])
    later = Conversation.objects.create(owner=user, agent_key="a")
    return user, later


def test_a_message_the_developers_prompt_happens_to_quote_is_still_recalled() -> None:
    """The system prompt is the developer's instructions, not a record of what the user said:
    an example in it with the words of a past message does not tell the model that the user
    said them. The block left the user's own allergy out ("I am allergic to ..." quoted as an
    example), and the model was sent no sign of it."""
    _, later = _allergic_user()
    PersistentChatHistory(later).add_messages([ChatMessage.human("What am I allergic to? Suggest a dinner.")])
    window = ContextWindowBuilder(later, memory_recall=True, system_prompt=QUOTING_PROMPT).build(2_000)
    assert window.memory is not None and f"user: {ALLERGY}" in window.memory.text
    # a stored (pinned) system prompt is the developer's as well
    pinned = Conversation.objects.create(owner=later.owner, agent_key="a")
    history = PersistentChatHistory(pinned)
    history.add_message(ChatMessage.system(QUOTING_PROMPT))
    history.add_message(ChatMessage.human("What am I allergic to? Suggest a dinner."))
    window = ContextWindowBuilder(pinned, memory_recall=True).build(2_000)
    assert window.memory is not None and f"user: {ALLERGY}" in window.memory.text


def test_a_knowledge_block_given_to_the_builder_still_says_a_message() -> None:
    _, later = _allergic_user()
    PersistentChatHistory(later).add_messages([ChatMessage.human("What am I allergic to? Suggest a dinner.")])
    knowledge = f'## health\n- The user said "{ALLERGY}"'
    window = ContextWindowBuilder(
        later,
        memory_recall=True,
        system_prompt=f"You are a cook.\n\n{knowledge}",
        memory_said_in=[knowledge],
    ).build(2_000)
    assert window.memory is None or f"user: {ALLERGY}" not in window.memory.text


def test_a_long_system_prompt_is_not_read_for_the_memory_block(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Reading the words of a system prompt of 1 MB took 0.1-0.3 s on every model call."""
    from agentmemory.recall import text

    _, later = _allergic_user()
    PersistentChatHistory(later).add_messages([ChatMessage.human("What am I allergic to? Suggest a dinner.")])
    prompt = "You are a cook. " * 64_000
    read = []
    words_key = text.words_key

    def counting(value: str) -> str:
        read.append(len(value))
        return words_key(value)

    monkeypatch.setattr(text, "words_key", counting)
    window = ContextWindowBuilder(later, memory_recall=True, system_prompt=prompt).build(400_000)
    assert window.memory is not None and f"user: {ALLERGY}" in window.memory.text
    assert max(read, default=0) < len(prompt)


def test_a_fact_the_knowledge_block_given_to_the_builder_shows_is_not_repeated() -> None:
    """``ContextWindowBuilder(memory_said_in=[block])`` is how code that builds its own
    requests says which knowledge block its system prompt holds (docs/longterm.md, "No
    repeats"). The block's messages were left out, but its facts were recalled again as
    "saved fact" lines: the request sent each of them twice, and a transcript message the
    block quotes was replaced by the fact dated when it was stored."""
    user = UserFactory()
    knowledge = KnowledgeMemory(user)
    knowledge.remember("Favourite colour: blue", category="preferences", persistent=True)
    knowledge.remember("Tom plays the violin every Sunday", category="family")
    knowledge.remember("Two lines\nof one fact about the violin", category="family", persistent=True)
    block = knowledge.build_context()
    knowledge.remember("Likes jazz", category="music", persistent=True)  # not in the block given
    # a line of the knowledge block that only holds a fact's words among others does not say it
    said_in = [block + "\n- My brother likes jazz"]
    assert "- [" in block and "(family) Tom plays the violin every Sunday" in block
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human(
                "Which violin facts do you have, what is my favourite colour, and do I like jazz?"
            )
        ]
    )
    window = ContextWindowBuilder(
        conv, memory_recall=True, system_prompt=f"You are kind.\n\n{said_in[0]}", memory_said_in=said_in
    ).build(2_000)
    text = window.memory.text if window.memory is not None else ""
    assert "Favourite colour: blue" not in text
    assert "Tom plays the violin every Sunday" not in text
    assert "of one fact about the violin" not in text
    assert "saved fact] Likes jazz" in text


def test_two_facts_of_the_same_words_are_shown_once() -> None:
    """Case and punctuation make two live facts ("an exact repeat" counts them), but the block
    reads them as the same words, as it does for a fact a message says: it showed both."""
    user = UserFactory()
    knowledge = KnowledgeMemory(user)
    knowledge.remember("Customer prefers email communication.", persistent=True)
    knowledge.remember("customer prefers EMAIL communication", persistent=True)
    assert knowledge.live_facts().count() == 2
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("How should we contact the customer, email?")]
    )
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is not None
    assert [item.kind for item in window.memory.items] == ["fact"]
    assert window.memory.text.lower().count("customer prefers email communication") == 1


def test_two_facts_apart_by_a_sign_are_both_shown() -> None:
    """Only case, spacing and closing punctuation make two facts one line: "-200" and "200"
    are two balances."""
    user = UserFactory()
    knowledge = KnowledgeMemory(user)
    knowledge.remember("Savings balance is -200 euros", persistent=True)
    knowledge.remember("Savings balance is 200 euros", persistent=True)
    conv = Conversation.objects.create(owner=user, agent_key="a")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("What is my savings balance?")])
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is not None
    assert [item.kind for item in window.memory.items] == ["fact", "fact"]
