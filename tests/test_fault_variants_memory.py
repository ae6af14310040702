"""Variants of fixed faults of memory that still failed (the words lost to recall where an
invisible format character sits inside them or a letter's diacritic is not a combining mark
are among the cases of tests/test_unicode_recall.py): a new fact superseding another
still true one (a day, a time or a label read as a "key:"; a subject of several words taken
for none) or failing to supersede the fact it negates (``agentmemory.knowledge.storage``)."""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from tests.factories import UserFactory

# A new fact superseding a different, still true one


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Monday: dentist at 9", "Monday: call Bob about the car"),
        ("2024-05-01: haircut", "2024-05-01: pick up the parcel"),
        ("9am: gym", "9am: standup with the team"),
        ("May 3: Lea's recital", "May 3: Tom's football match"),
        ("Note: buy milk", "Note: call the plumber"),
        ("Reminder: renew the passport", "Reminder: water the plants"),
        ("TODO: book flights", "TODO: pay the rent"),
        ("Warning: the stove is hot", "Warning: the back door is open"),
        ("Example: a haiku about rain", "Example: a limerick about cats"),
        ("Question: when is the recital?", "Question: who drives Lea home?"),
        ("Heads up: the office is closed Friday", "Heads up: the parking garage is full"),
    ],
)
@pytest.mark.django_db
def test_entries_headed_by_a_day_a_time_or_a_label_both_stay(first, second) -> None:  # type: ignore[no-untyped-def]
    km = KnowledgeMemory(UserFactory())
    km.remember(first, "notes", persistent=True)
    assert km.store(second, "notes", persistent=True).action == "created"
    assert sorted(f.content for f in km.live_facts()) == sorted([first, second])


@pytest.mark.django_db
def test_a_key_naming_what_still_supersedes() -> None:
    km = KnowledgeMemory(UserFactory())
    old = km.store("Monday standup: 9:30", "work", persistent=True).fact
    result = km.store("Monday standup: 10:00", "work", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (old.pk,))


def _finding_alike(*texts: str) -> KnowledgeMemory:
    """A memory whose embedder finds ``texts`` alike (cosine 1.0), as sentence embeddings
    find sentences differing in one word ("Tom likes jazz" and "Tom doesn't like jazz": 0.91
    with the local model)."""
    from tests.embedders import StubEmbedder

    embedder = StubEmbedder({text: [1.0, 0.0, 0.0] for text in texts})
    return KnowledgeMemory(UserFactory(), embedder=embedder, supersede_similarity=0.85)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Room 101 is booked for Monday", "Room 205 is booked for Monday"),
        ("Flight LH123 departs at 9:00", "Flight BA456 departs at 9:00"),
        ("Lunch with Tom is at noon", "Lunch with Ann is at noon"),
    ],
)
def test_similar_facts_about_subjects_named_in_several_words_both_stay(old, new) -> None:  # type: ignore[no-untyped-def]
    km = _finding_alike(old, new)
    km.remember(old, "notes", persistent=True)
    assert km.store(new, "notes", persistent=True).action == "created"
    assert sorted(f.content for f in km.live_facts()) == sorted([old, new])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Tom likes jazz", "Tom doesn't like jazz"),
        ("Alice is vegetarian", "Alice isn't vegetarian anymore"),
        ("Alice works at Google", "Alice now works at Stripe"),
        ("Tom lives in Oslo", "Tom no longer lives in Oslo"),
        ("I like jazz", "I don't like jazz"),
    ],
)
def test_a_negated_or_changed_fact_about_a_named_subject_supersedes(old, new) -> None:  # type: ignore[no-untyped-def]
    km = _finding_alike(old, new)
    first = km.store(old, "people", persistent=True).fact
    result = km.store(new, "people", persistent=True)
    assert (result.action, result.superseded_ids) == ("superseded", (first.pk,)), (old, new)
    assert [f.content for f in km.live_facts()] == [new]


# Stored histories replayed into requests the provider refuses


def test_an_error_tool_result_without_text_is_sent_with_some() -> None:
    """Anthropic refuses a ``tool_result`` with ``is_error`` and no content ("content cannot be
    empty if `is_error` is true"): a tool that failed silently made every later request of
    the conversation fail."""
    from agentmemory.formats.anthropic import to_anthropic
    from agentmemory.messages import ToolCall
    from tests.fake_anthropic_server import validate_messages_request

    for failed in (
        ChatMessage.tool("", tool_call_id="toolu_1", metadata={"is_error": True}),
        ChatMessage.tool("  \n", tool_call_id="toolu_1", metadata={"is_error": True}),
    ):
        history = [
            ChatMessage.human("Book it"),
            ChatMessage.ai(None, [ToolCall("toolu_1", "book", {})]),
            failed,
            ChatMessage.human("Did it work?"),
        ]
        _system, turns = to_anthropic(history)
        validate_messages_request({"model": "m", "max_tokens": 10, "messages": turns})
        result = turns[2]["content"][0]
        assert result["is_error"] is True and result["content"].strip()


def test_a_history_ending_on_an_answer_with_trailing_whitespace_is_sent_stripped() -> None:
    """Anthropic refuses a request whose final assistant turn ends in whitespace ("final
    assistant content cannot end with trailing whitespace"); replies often end in a newline."""
    from agentmemory.formats.anthropic import to_anthropic
    from tests.fake_anthropic_server import validate_messages_request

    history = [ChatMessage.human("Write a haiku"), ChatMessage.ai("Autumn moonlight -\n")]
    _system, turns = to_anthropic(history)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": turns})
    assert turns[-1] == {"role": "assistant", "content": "Autumn moonlight -"}
    earlier = [*history, ChatMessage.human("Another")]
    assert to_anthropic(earlier)[1][1]["content"] == "Autumn moonlight -\n"  # only the final turn


# The system prompt of an agent whose SYSTEM_PROMPT is an async function or returns no text


async def _async_prompt(injector):  # type: ignore[no-untyped-def]
    return "You answer in French."


async def _async_prompt_without_injector() -> str:
    return "You answer in French."


def _prompt_forgetting_return(injector):  # type: ignore[no-untyped-def]
    """You answer in French."""  # the text, its ``return`` forgotten: the function gives None


def _agent(prompt):  # type: ignore[no-untyped-def]
    from agentmemory.agents import BaseToolCallingAgent

    class PromptAgent(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = prompt

    return PromptAgent


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prompt", [_async_prompt, _async_prompt_without_injector])
def test_an_async_system_prompt_function_is_awaited(prompt) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import Role

    model = ScriptedChatModel(["Bonjour.", "Bonjour."])
    agent = _agent(prompt)(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    agent.run(conversation, "Hello")
    asyncio.run(agent.arun(conversation, "Hello again"))
    for sent, _tools in model.calls:
        assert (sent[0].role, sent[0].content) == (Role.SYSTEM, "You answer in French.")


@pytest.mark.django_db(transaction=True)
def test_a_system_prompt_function_returning_no_text_stops_the_turn_before_anything_is_stored() -> None:
    import asyncio

    from django.core.exceptions import ImproperlyConfigured

    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.models import Message

    model = ScriptedChatModel(["Bonjour."])
    agent = _agent(_prompt_forgetting_return)(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    with pytest.raises(ImproperlyConfigured, match="returned NoneType"):
        agent.run(conversation, "Hello")
    with pytest.raises(ImproperlyConfigured, match="returned NoneType"):
        asyncio.run(agent.arun(conversation, "Hello"))
    assert model.calls == [] and not Message.objects.filter(conversation=conversation).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("我下周去东京出差", "东京"),
        ("明日は東京へ行きます", "東京"),
        ("ผมชอบกินข้าวผัด", "ข้าวผัด"),
        ("한국어를 공부해요", "한국어"),
        ("Flight to 東京 on Monday", "東京 flight"),
    ],
)
def test_the_admin_search_finds_a_word_of_a_script_without_spaces(admin_client, stored, query) -> None:  # type: ignore[no-untyped-def]
    owner = UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="a")
    PersistentChatHistory(conv).add_messages([ChatMessage.human(stored), ChatMessage.human("Other text")])
    KnowledgeMemory(owner).remember(stored, "notes", persistent=True)
    for path in ("/admin/agentmemory/message/", "/admin/agentmemory/fact/"):
        page = admin_client.get(path, {"q": query})
        assert page.status_code == 200 and stored in page.content.decode(), path
        assert "Other text" not in page.content.decode()


@pytest.mark.django_db
def test_a_stored_image_anthropic_refuses_for_its_size_is_sent_as_its_placeholder() -> None:
    """Anthropic refuses any image over 8000 px on a side, and one whose base64 data passes
    5 MiB ("image exceeds 5 MB maximum"): measured on the encoded text, which a stored image
    within ``MAX_PART_DATA_BYTES`` (decoded) can pass. Every later request of the
    conversation failed; one image alone, not only in a request of many."""
    import base64

    from agentmemory.formats.anthropic import to_anthropic
    from agentmemory.messages import ContentPart, PartKind
    from tests.fake_anthropic_server import validate_messages_request
    from tests.test_provider_limits import png

    tall = png(1200, 9000)
    heavy = base64.b64encode(base64.b64decode(png(800, 600)) + bytes(4_000_000)).decode()
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    history = PersistentChatHistory(conv)
    for data in (tall, heavy):
        image = ContentPart(PartKind.IMAGE, data=data, mime_type="image/png")
        history.add_messages([ChatMessage.human("What is this?", parts=(image,)), ChatMessage.ai("A chart.")])
    history.add_messages([ChatMessage.human("And now?")])
    _system, turns = to_anthropic(history.messages)
    validate_messages_request({"model": "m", "max_tokens": 10, "messages": turns})
    assert "image" not in str(
        [b.get("type") for t in turns if isinstance(t["content"], list) for b in t["content"]]
    )
    small = ContentPart(PartKind.IMAGE, data=png(1200, 900), mime_type="image/png")
    _system, turns = to_anthropic([ChatMessage.human("What is this?", parts=(small,))])
    assert turns[0]["content"][0]["type"] == "image"  # within the limits: sent


@pytest.mark.django_db(transaction=True)
def test_an_overridden_build_window_as_the_docs_show_still_sends_the_memory_block() -> None:
    """``MEMORY_RECALL_ENABLED`` promises every model call the memory block; the seed's window
    code builds its window without ``memory_recall``, and the block was missing."""
    import asyncio

    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.context import ContextWindowBuilder
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import Role

    class SeedWindowRecallAgent(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "You are the pets agent."
        MEMORY_RECALL_ENABLED = True

        def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
            return ContextWindowBuilder(
                chat_history=self._injector.chat_history,
                memory_compactor=self._injector.memory_compactor,
            ).build(max_tokens=self._conversation_history_token_limit)

    owner = UserFactory()
    KnowledgeMemory(owner).remember("The user's dog is called Rex", "pets", persistent=True)
    model = ScriptedChatModel(["Rex.", "Rex."])
    agent = SeedWindowRecallAgent(llm=model)
    result = agent.run(agent.start_conversation(owner=owner), "What is my dog called?")
    asyncio.run(agent.arun(agent.start_conversation(owner=owner), "What is my dog called?"))
    for sent, _tools in model.calls:
        assert [m.role for m in sent] == [Role.SYSTEM, Role.SYSTEM, Role.HUMAN]
        assert sent[0].content == "You are the pets agent." and "Rex" in sent[1].content
    assert result.windows[0].memory is not None and result.windows[0].memory_tokens > 0
