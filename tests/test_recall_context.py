"""The memory block in context windows: ``ContextWindowBuilder(memory_recall=True)``, agents
with ``MEMORY_RECALL_ENABLED``, the context endpoint's ``memory_recall`` parameter, and the
model call records; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from asgiref.sync import sync_to_async
from django.core.checks import run_checks
from django.db import DatabaseError, connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.calls import recorded_context_window, recorded_window
from agentmemory.conf import get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.context.builder import turn_query
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, ModelCall, Summary
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def stored(owner, texts, *, agent_key="support", title=""):  # type: ignore[no-untyped-def]
    """A conversation of ``owner`` holding ``texts`` as human and AI messages in turn."""
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key, title=title)
    make = (ChatMessage.human, ChatMessage.ai)
    PersistentChatHistory(conv).add_messages([make[i % 2](text) for i, text in enumerate(texts)])
    conv.refresh_from_db()
    return conv


def memory_messages(messages):  # type: ignore[no-untyped-def]
    return [m for m in messages if MEMORY_BLOCK_KEY in (m.metadata or {})]


FILLER = [f"Small talk number {i} about the weather and nothing else." for i in range(6)]


@pytest.fixture
def user():  # type: ignore[no-untyped-def]
    return UserFactory()


@pytest.fixture
def past(user):  # type: ignore[no-untyped-def]
    """A past conversation of ``user`` that says where the spare key is."""
    return stored(
        user,
        [
            *FILLER,
            "Where did I leave the spare key to the boathouse?",
            "Under the blue flowerpot by the door.",
        ],
        title="House notes",
    )


def ask(user, text, *, before=(), agent_key="support"):  # type: ignore[no-untyped-def]
    return stored(user, [*before, text], agent_key=agent_key)


# -- the builder ------------------------------------------------------------------------------


def test_the_block_follows_the_summary_and_precedes_the_history(user, past) -> None:
    conv = ask(
        user, "Where is the spare key to the boathouse?", before=["Hello there.", "Hi! How can I help?"]
    )
    summary = Summary.objects.create(
        conversation=conv, text="The user said hello.", first_seq=1, through_seq=2, token_count=8
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    window = ContextWindowBuilder(conv, system_prompt="You are helpful.", memory_recall=True).build(2_000)

    roles = [m.role for m in window.messages]
    assert roles == [Role.SYSTEM, Role.SYSTEM, Role.SYSTEM, Role.HUMAN]
    prompt, summary_message, block, question = window.messages
    assert prompt.text == "You are helpful."
    assert summary_message.metadata["summary_id"] == summary.pk
    assert block.metadata[MEMORY_BLOCK_KEY] == len(window.memory.items)
    assert "Under the blue flowerpot" in block.text
    assert question.text == "Where is the spare key to the boathouse?"
    assert window.history == [question]
    counter = get_token_counter()
    assert window.memory_tokens == counter.count_message(block)
    assert window.total_tokens == (
        window.system_tokens + window.summary_tokens + window.memory_tokens + window.history_tokens
    )
    assert window.memory.query == "Where is the spare key to the boathouse?"


def test_without_a_summary_the_block_comes_right_after_the_system_prompt(user, past) -> None:
    conv = ask(user, "Where is the spare key to the boathouse?")
    window = ContextWindowBuilder(conv, system_prompt="Be brief.", memory_recall=True).build(2_000)
    assert [m.role for m in window.messages] == [Role.SYSTEM, Role.SYSTEM, Role.HUMAN]
    assert memory_messages(window.messages) == [window.messages[1]]


def test_off_by_default_and_by_setting(user, past, settings) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "Where is the spare key to the boathouse?")
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.memory is None and window.memory_tokens == 0 and not memory_messages(window.messages)
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
    assert ContextWindowBuilder(conv).build(2_000).memory is not None
    assert ContextWindowBuilder(conv, memory_recall=False).build(2_000).memory is None


def test_what_the_window_sends_is_not_repeated(user) -> None:
    # The same words in an older part of this conversation (outside the window) and in the
    # window itself: only the older one is recalled.
    texts = [
        "My locker code at the gym is 4417.",
        "Noted.",
        *(f"Filler turn {i} with unrelated chatter about trains." for i in range(40)),
        "What was my locker code at the gym again? Not 9921, that is the bike lock.",
    ]
    conv = stored(user, texts)
    window = ContextWindowBuilder(conv, memory_recall=True).build(300)
    assert window.memory is not None
    sent = {m.seq for m in window.history}
    recalled = {seq for item in window.memory.items if item.conversation_id == conv.pk for seq in item.seqs}
    assert recalled and not recalled & sent
    assert "4417" in window.memory.text
    assert "9921" not in window.memory.text


@pytest.mark.parametrize("max_tokens", [60, 120, 250, 500, 1_000, 4_000])
def test_never_over_the_budget(user, max_tokens) -> None:  # type: ignore[no-untyped-def]
    for i in range(12):
        stored(
            user,
            [f"Tell me about lighthouse number {i}.", f"Lighthouse {i} stands on rock {i} since 18{i:02}."],
        )
    conv = ask(user, "Which lighthouse stands on a rock?", before=[f"Earlier remark {i}." for i in range(10)])
    window = ContextWindowBuilder(conv, system_prompt="You know lighthouses.", memory_recall=True).build(
        max_tokens
    )
    counter = get_token_counter()
    assert window.total_tokens <= max_tokens
    sent = sum(m.token_count if m.seq is not None else counter.count_message(m) for m in window.messages)
    assert sent == window.total_tokens
    assert window.max_tokens == max_tokens
    if max_tokens >= 250:
        assert window.memory is not None


def test_after_a_compaction_the_request_uses_its_budget(user) -> None:
    for i in range(80):
        stored(
            user,
            [
                f"Tell me about the harbour festival plan {i}.",
                f"Harbour festival plan {i}: stall {i} sells smoked fish, rye bread, goat cheese, "
                f"cider and honey cakes from the farm at the end of lane {i}, next to the ferry pier.",
            ],
        )
    conv = ask(
        user, "What did we plan for the harbour festival?", before=[f"Old turn {i}." for i in range(20)]
    )
    last = conv.last_seq
    summary = Summary.objects.create(
        conversation=conv,
        text="Twenty turns of small talk.",
        first_seq=1,
        through_seq=last - 1,
        token_count=10,
        human_messages_covered=10,
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    budget = 2_000
    plain = ContextWindowBuilder(conv, system_prompt="You plan festivals.").build(budget)
    assert plain.total_tokens < budget / 10  # the window alone leaves most of the budget empty
    window = ContextWindowBuilder(conv, system_prompt="You plan festivals.", memory_recall=True).build(budget)
    assert window.memory is not None
    assert 0.75 * budget <= window.total_tokens <= budget
    assert window.memory_tokens > budget * 0.25  # more than its reserved share


def test_the_history_keeps_all_but_what_the_block_took(user, settings) -> None:  # type: ignore[no-untyped-def]
    stored(user, ["Tell me about the orchard.", "The orchard has forty apple trees."])
    conv = stored(
        user, [f"Turn {i} says nothing much at all, really nothing." for i in range(200)] + ["orchard?"]
    )
    settings.AGENTMEMORY = {"MEMORY_RECALL_SHARE": 0.4}
    window = ContextWindowBuilder(conv, memory_recall=True).build(1_000)
    assert window.memory is not None and window.total_tokens <= 1_000
    # the block took less than its 400 tokens: the history has the rest, not only its 600
    assert window.memory_tokens < 200
    assert window.history_tokens > 1_000 - window.memory_tokens - 30
    # and the block does not repeat what the wider window sends
    sent = {m.seq for m in window.history}
    assert not any(i.conversation_id == conv.pk and sent & set(i.seqs) for i in window.memory.items)


def test_the_wider_window_never_sends_a_fact_beside_its_source_message(user, settings) -> None:  # type: ignore[no-untyped-def]
    # The block took less than its share, so the window was built again wider, and the
    # block was kept unless the wider window sent one of its messages: a fact whose source
    # message only the wider window sends was sent beside that message.
    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.models import Message

    filler = [f"Turn {i} says nothing much at all, really nothing." for i in range(201)]
    conv = stored(
        user,
        [*filler[:150], "Remember 4417 for the blue door downstairs.", *filler[150:], "gym locker code?"],
    )
    source = Message.objects.get(conversation=conv, content__startswith="Remember 4417")
    KnowledgeMemory(user).store("Gym locker code: 4417", "personal", persistent=True, source_message=source)
    settings.AGENTMEMORY = {"MEMORY_RECALL_SHARE": 0.4}
    window = ContextWindowBuilder(conv, memory_recall=True).build(1_000)
    assert window.memory is not None
    fact_sent = any(i.kind == "fact" for i in window.memory.items)

    assert fact_sent  # the fact is what the narrow window lacks
    assert source.seq not in {m.seq for m in window.history}


def test_a_turn_too_large_for_the_rest_gets_the_whole_budget(user, past) -> None:
    question = "Where is the spare key to the boathouse? " + "Please answer carefully. " * 60
    conv = ask(user, question)
    counter = get_token_counter()
    need = counter.count_message(ChatMessage.human(question))
    window = ContextWindowBuilder(conv, memory_recall=True).build(need + 5)
    assert [m.text for m in window.history] == [question]
    assert window.total_tokens <= need + 5


def test_a_conversation_without_an_owner_gets_no_block(user, past) -> None:
    conv = Conversation.objects.create(owner=None, agent_key="support")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("Where is the spare key to the boathouse?")])
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is None and not memory_messages(window.messages)
    assert [m.role for m in window.messages] == [Role.HUMAN]


def test_another_users_memory_never_appears(user, past) -> None:
    other = UserFactory()
    stored(other, ["Where is the spare key to the boathouse?", "Taped under the mailbox of number 12."])
    KnowledgeMemory(other).remember("The boathouse spare key is with the neighbour Greta.", "home", True)
    conv = ask(user, "Where is the spare key to the boathouse?")
    window = ContextWindowBuilder(conv, memory_recall=True).build(4_000)
    assert window.memory is not None
    assert "flowerpot" in window.memory.text
    assert "mailbox" not in window.memory.text and "Greta" not in window.memory.text
    own = set(Conversation.objects.filter(owner=user).values_list("pk", flat=True))
    assert all(item.conversation_id in own for item in window.memory.items if item.kind == "message")


def test_scope_by_agent_key_and_facts_already_sent(user) -> None:
    stored(user, ["Which seat do I like on trains?", "You like window seats."], agent_key="travel")
    stored(user, ["Which seat do I like at the cinema?", "You like the aisle seats."], agent_key="films")
    memory = KnowledgeMemory(user, agent_key="travel")
    shown = memory.remember("Prefers seats facing forward on trains", "preferences", True)
    conv = ask(user, "Which seat do I like on trains?", agent_key="travel")
    builder = ContextWindowBuilder(conv, memory_recall=True, memory_agent_key="travel")
    window = builder.build(2_000)
    assert window.memory is not None
    assert "window seats" in window.memory.text and "aisle" not in window.memory.text
    assert "facing forward" in window.memory.text
    fact_ids = [item.fact_id for item in window.memory.items if item.kind == "fact"]
    hidden = ContextWindowBuilder(
        conv, memory_recall=True, memory_agent_key="travel", memory_exclude_fact_ids=fact_ids
    ).build(2_000)
    assert "facing forward" not in (hidden.memory.text if hidden.memory else "")
    assert shown  # stored


def test_memory_query_replaces_the_turn(user, past) -> None:
    conv = ask(user, "Hello!")
    assert ContextWindowBuilder(conv, memory_recall=True).build(2_000).memory is None
    window = ContextWindowBuilder(conv, memory_recall=True, memory_query="boathouse spare key").build(2_000)
    assert window.memory is not None and "flowerpot" in window.memory.text
    assert window.memory.query == "boathouse spare key"


def test_turn_query_is_the_newest_human_message_and_the_turn_so_far() -> None:
    call = ToolCall(id="c1", name="lookup_order", arguments={"order": 7})
    history = [
        ChatMessage.human("older question", seq=1),
        ChatMessage.ai("older answer", seq=2),
        ChatMessage.human("Where is my lamp?", seq=3),
        ChatMessage.ai(None, [call], seq=4),
        ChatMessage.tool("shipped to Oslo " * 100, tool_call_id="c1", name="lookup_order", seq=5),
    ]
    query = turn_query(history)
    assert query.startswith('Where is my lamp?\nlookup_order {"order": 7}\nshipped to Oslo')
    assert "older" not in query
    assert len(query) <= 2_000
    assert turn_query([ChatMessage.ai("no question")]) == ""


# a pasted text of many distinct words, none of them the past conversation's
PASTED = " ".join(f"Clause {i} of the lease covers paragraph{i} and appendix{i}." for i in range(400))


@pytest.mark.parametrize(
    "text",
    [
        # a question after a pasted text (22,000 characters, over a thousand distinct words)
        f"Here is my lease:\n{PASTED}\nAnyway, where did I leave the spare key to the boathouse?",
        # the same without its "?"
        f"Here is my lease:\n{PASTED}\nAnyway, remind me where I left the spare key to the boathouse",
        # a question, then the text
        f"Where did I leave the spare key to the boathouse? Here is my lease:\n{PASTED}",
        # other people's questions listed before the user's own (under 2,000 characters)
        "\n".join(f"Q{i}: What is the refund policy of team{i} in region{i} this quarter?" for i in range(10))
        + "\nAnyway: where did I leave the spare key to the boathouse?",
    ],
    ids=["question-after-paste", "no-question-mark", "question-before-paste", "other-questions-first"],
)
def test_a_long_message_recalls_by_what_it_asks(user, past, text) -> None:  # type: ignore[no-untyped-def]
    """A long message is read by what it asks (its last sentence and its questions, the
    newest first): the block holds what the past conversation said of it. Before, only the
    opening of a long text was read, or the first questions of many."""
    query = turn_query([ChatMessage.human(text, seq=1)])
    assert "spare key to the boathouse" in query and len(query) <= 2_000
    window = ContextWindowBuilder(ask(user, text), memory_recall=True).build(30_000)
    assert window.memory is not None and "flowerpot" in window.memory.text


def test_an_image_only_question_recalls_nothing(user) -> None:  # type: ignore[no-untyped-def]
    image = ContentPart(kind=PartKind.IMAGE, url="https://example.com/x.png")
    text = ContentPart(kind=PartKind.TEXT, text="What is my zebrafish named?")
    assert turn_query([ChatMessage.from_parts(Role.HUMAN, [image])]) == ""
    assert turn_query([ChatMessage.from_parts(Role.HUMAN, [text, image])]) == "What is my zebrafish named?"
    # a past image-only turn would match "[image]"
    PersistentChatHistory(Conversation.objects.create(owner=user)).add_messages(
        [ChatMessage.from_parts(Role.HUMAN, [image]), ChatMessage.ai("A lovely picture.")]
    )
    conv = Conversation.objects.create(owner=user)
    PersistentChatHistory(conv).add_messages([ChatMessage.from_parts(Role.HUMAN, [image])])
    window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is None


def test_bad_arguments_are_refused(user) -> None:
    conv = ask(user, "hi")
    with pytest.raises(TypeError):
        ContextWindowBuilder(conv, memory_recall="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ContextWindowBuilder(conv, memory_query=42)  # type: ignore[arg-type]


def test_a_block_that_does_not_come_costs_the_history_nothing(user) -> None:  # type: ignore[no-untyped-def]
    conv = stored(
        user, [f"message {i} about the garden and roses" for i in range(60)] + ["what is a xylophone?"]
    )
    plain = ContextWindowBuilder(conv, memory_recall=False, gap_policy="report").build(300)
    assert plain.uncovered
    builder = ContextWindowBuilder(conv, memory_recall=True, gap_policy="report")
    with CaptureQueriesContext(connection) as queries:
        window = builder.build(300)
    assert window.memory is None
    assert [m.seq for m in window.history] == [m.seq for m in plain.history]
    assert window.total_tokens == plain.total_tokens <= 300
    with CaptureQueriesContext(connection) as plain_queries:
        ContextWindowBuilder(conv, memory_recall=False, gap_policy="report").build(300)
    # two window reads (a plain build's queries each: one statement, its gap report in it)
    # and the recall's (a savepoint around it, the message search, whether the owner has
    # facts): one window read more than a build whose block came. The search's ranking
    # statement gives the candidates' places; their neighbours are a query of their own
    # except on PostgreSQL, whose ranking statement scores them all.
    assert len(plain_queries) == 1
    assert len(queries) == 2 * len(plain_queries) + (5 if connection.vendor == "postgresql" else 6)


def test_the_summary_is_not_cut_for_a_block_that_does_not_come(user) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "What is a xylophone?", before=["Hello there.", "Hi!"])
    text = " ".join(f"The user talked about garden topic {i}." for i in range(30))
    tokens = get_token_counter().count_message(ChatMessage.system(text))
    summary = Summary.objects.create(
        conversation=conv, text=text, first_seq=1, through_seq=2, token_count=tokens
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    budget = tokens + 40
    plain = ContextWindowBuilder(conv, memory_recall=False).build(budget)
    assert "summary" not in plain.truncated
    window = ContextWindowBuilder(conv, memory_recall=True, memory_query="quasar zeppelin").build(budget)
    assert window.memory is None
    assert "summary" not in window.truncated and window.summary_tokens == plain.summary_tokens


def test_a_failed_recall_sends_the_window_without_the_block(user, past, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    def broken(**kwargs):  # type: ignore[no-untyped-def]
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM agentmemory_no_such_table")
        raise AssertionError("not reached")

    monkeypatch.setattr("agentmemory.recall.memory.recall_memory", broken)
    conv = ask(user, "Where is the spare key to the boathouse?")
    with caplog.at_level(logging.WARNING, logger="agentmemory.context"):
        window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is None and [m.role for m in window.history] == [Role.HUMAN]
    record = next(r for r in caplog.records if "memory recall failed" in r.getMessage())
    assert record.levelno == logging.WARNING and record.exc_info is not None
    # The test's transaction is still usable (the failed statement ran in a savepoint).
    assert Conversation.objects.filter(pk=conv.pk).exists()


def test_queries_with_recall_on_are_pinned(user, past, django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "Where is the spare key to the boathouse?", before=["Hello.", "Hi."])
    with CaptureQueriesContext(connection) as off:
        ContextWindowBuilder(conv).build(2_000)
    with CaptureQueriesContext(connection) as recall_only:
        from agentmemory.recall.memory import recall_memory

        recall_memory(
            owner=user.pk,
            query="Where is the spare key to the boathouse?",
            max_tokens=1_500,
            conversation_id=conv.pk,
            exclude_seqs=(3,),
            fact_agent_key=None,
        )
    # The window's own queries, the recall's, and a savepoint around the recall (the test
    # runs inside a transaction; in autocommit there is none); the owner comes from the row.
    assert len(off) == 1
    expected = len(off) + len(recall_only) + 2
    with django_assert_num_queries(expected):
        window = ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    assert window.memory is not None
    # given a primary key, the owner is read once per builder
    builder = ContextWindowBuilder(conv.pk, memory_recall=True)
    with django_assert_num_queries(expected + 1):
        builder.build(2_000)
    with django_assert_num_queries(expected):
        builder.build(2_000)


def test_recall_off_costs_no_query(user, past) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "Where is the spare key to the boathouse?")
    with CaptureQueriesContext(connection) as plain:
        ContextWindowBuilder(conv, memory_recall=False).build(2_000)
    assert len(plain) == 1  # the window's one statement: no recall, no owner read


def test_context_built_signal_carries_the_block(user, past) -> None:
    from agentmemory import signals

    seen = []

    def receiver(sender, window, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(window)

    signals.context_built.connect(receiver)
    try:
        conv = ask(user, "Where is the spare key to the boathouse?")
        ContextWindowBuilder(conv, memory_recall=True).build(2_000)
    finally:
        signals.context_built.disconnect(receiver)
    assert seen and seen[0].memory is not None and seen[0].memory_tokens > 0


@pytest.mark.django_db(transaction=True)
def test_the_async_paths_send_the_block_too() -> None:
    """``abuild`` and ``arun`` from an event loop, the conversation named by its uuid: the
    owner and the recall are read in the worker thread."""
    user = UserFactory()
    wedding_memories(user)
    conv = ask(user, "When is my sister's wedding?")
    agent_conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    llm = ScriptedChatModel(["12 June."])

    async def view():  # type: ignore[no-untyped-def]
        try:
            window = await ContextWindowBuilder(conv.uuid, memory_recall=True).abuild(2_000)
            result = await RecallingAgent(llm).arun(agent_conv.uuid, "When is my sister's wedding?")
            return window, result
        finally:
            await sync_to_async(connections.close_all)()

    window, result = asyncio.run(view())
    assert window.memory is not None and "12 June in Porto" in window.memory.text
    assert result.answer == "12 June."
    assert "12 June in Porto" in memory_messages(llm.calls[0][0])[0].text


# -- agents -----------------------------------------------------------------------------------


@tool
def find_booking(name: str) -> str:
    """Look up a booking.

    Args:
        name: who booked.
    """
    return "Booking found: the venue is the Bolsa palace."


class RecallingAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "recalling-test"
    SYSTEM_PROMPT = "You answer from memory."
    TOOLS = (find_booking,)
    MEMORY_RECALL_ENABLED = True


def wedding_memories(user):  # type: ignore[no-untyped-def]
    stored(user, [*FILLER, "My sister's wedding is on 12 June in Porto.", "How wonderful!"], agent_key="x")
    stored(user, [*FILLER, "Note the Bolsa palace booking reference XK-42.", "Saved."], agent_key="y")


def test_an_agent_sends_the_block_on_every_model_call_of_a_turn(user) -> None:
    wedding_memories(user)
    conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    call = ToolCall(id="c1", name="find_booking", arguments={"name": "sister"})
    llm = ScriptedChatModel([ChatMessage.ai(None, [call]), "12 June, at the Bolsa palace (XK-42)."])
    result = RecallingAgent(llm).run(conv, "When is my sister's wedding?")
    assert result.answer.startswith("12 June")
    assert len(llm.calls) == 2
    for messages, _tools in llm.calls:
        blocks = memory_messages(messages)
        assert len(blocks) == 1
        assert messages[0].text == "You answer from memory." and messages[1] is blocks[0]
        assert messages[2].role is Role.HUMAN
        assert "12 June in Porto" in blocks[0].text
    # The second call recalls for the turn so far: the tool result names the palace.
    assert "XK-42" not in memory_messages(llm.calls[0][0])[0].text
    assert "XK-42" in memory_messages(llm.calls[1][0])[0].text
    for accounting in result.calls:
        assert accounting.window.memory is not None
        assert accounting.window.total_tokens <= RecallingAgent(llm).token_limit


def test_the_recorded_window_holds_the_block_as_sent(user, admin_client) -> None:  # type: ignore[no-untyped-def]
    wedding_memories(user)
    conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    llm = ScriptedChatModel(["12 June."])
    RecallingAgent(llm).run(conv, "When is my sister's wedding?")
    row = ModelCall.objects.get(conversation=conv)
    sent = llm.calls[0][0]
    assert recorded_window(row) == sent
    rebuilt = recorded_context_window(row)
    assert rebuilt.memory_tokens == row.window_changes["memory"]["tokens"] > 0
    parts = row.system_tokens + row.summary_tokens + rebuilt.memory_tokens + row.history_tokens
    assert rebuilt.total_tokens == parts
    page = admin_client.get(reverse("admin:agentmemory_modelcall_window", args=[row.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "memory block" in body and "12 June in Porto" in body
    api = APIClient()
    api.force_login(user)
    listed = api.get(f"/api/conversations/{conv.uuid}/model-calls/").json()["results"]
    assert listed[0]["memory_tokens"] == rebuilt.memory_tokens
    window = api.get(f"/api/conversations/{conv.uuid}/model-calls/{listed[0]['id']}/window/").json()
    assert [m["part"] for m in window["messages"]] == ["system_prompt", "memory", "history"]
    assert window["memory_tokens"] == rebuilt.memory_tokens


def test_an_agent_without_recall_sends_no_block(user) -> None:
    wedding_memories(user)

    class Plain(RecallingAgent, register=False):
        MEMORY_RECALL_ENABLED = False

    conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    llm = ScriptedChatModel(["ok"])
    Plain(llm).run(conv, "When is my sister's wedding?")
    assert not memory_messages(llm.calls[0][0])


def test_an_agent_in_an_ownerless_conversation_answers_without_a_block(user) -> None:
    wedding_memories(user)
    conv = Conversation.objects.create(owner=None, agent_key="recalling-test")
    llm = ScriptedChatModel(["I do not know."])
    result = RecallingAgent(llm).run(conv, "When is my sister's wedding?")
    assert result.answer == "I do not know."
    assert not memory_messages(llm.calls[0][0])


def test_an_agent_answers_when_recall_fails(user, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    wedding_memories(user)

    def broken(**kwargs):  # type: ignore[no-untyped-def]
        raise DatabaseError("connection lost")

    monkeypatch.setattr("agentmemory.recall.memory.recall_memory", broken)
    conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    llm = ScriptedChatModel(["Sorry, I cannot remember."])
    with caplog.at_level(logging.WARNING, logger="agentmemory.context"):
        result = RecallingAgent(llm).run(conv, "When is my sister's wedding?")
    assert result.answer == "Sorry, I cannot remember."
    assert not memory_messages(llm.calls[0][0])
    assert "memory recall failed" in caplog.text


def test_facts_in_the_knowledge_block_are_not_repeated(user) -> None:
    class Knowing(RecallingAgent, register=False):
        KNOWLEDGE_MEMORY_ENABLED = True

    KnowledgeMemory(user).remember("The sister's wedding is in Porto", "family", True)
    stored(user, [*FILLER, "My sister's wedding is on 12 June.", "Lovely!"])
    conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
    llm = ScriptedChatModel(["12 June."])
    Knowing(llm).run(conv, "When is my sister's wedding?")
    messages = llm.calls[0][0]
    assert "The sister's wedding is in Porto" in messages[0].text  # the knowledge block
    block = memory_messages(messages)[0]
    assert "12 June" in block.text
    assert "wedding is in Porto" not in block.text


def test_compaction_is_sized_for_the_history_part(user, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.compaction import BaseMemoryCompactor

    settings.AGENTMEMORY = {"COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor"}
    asked = []

    def compact_if_needed(self, *, max_tokens=None, system_tokens=None):  # type: ignore[no-untyped-def]
        asked.append(max_tokens)
        return False

    monkeypatch.setattr(BaseMemoryCompactor, "compact_if_needed", compact_if_needed)

    class Compacting(RecallingAgent, register=False):
        MEMORY_COMPACTOR_ENABLED = True
        CONVERSATION_HISTORY_TOKEN_LIMIT = 4_000

    class Plain(Compacting, register=False):
        MEMORY_RECALL_ENABLED = False

    for agent_cls in (Compacting, Plain):
        conv = Conversation.objects.create(owner=user, agent_key="recalling-test")
        agent_cls(ScriptedChatModel(["ok"])).run(conv, "hello")
    assert asked == [3_000, 4_000]


def test_the_class_variable_is_checked(settings) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.agents import registry

    class Wrong(BaseToolCallingAgent, register=False):
        AGENT_KEY = "recall-check-test"
        MEMORY_RECALL_ENABLED = "yes"  # type: ignore[assignment]

    registry.register(Wrong)
    try:
        ids = {m.id for m in run_checks()}
    finally:
        registry.unregister("recall-check-test")
    assert "agentmemory.E106" in ids


@pytest.mark.parametrize(
    ("setting", "value", "check_id"),
    [
        ("MEMORY_RECALL_ENABLED", "yes", "agentmemory.E070"),
        ("MEMORY_RECALL_SHARE", 0, "agentmemory.E071"),
        ("MEMORY_RECALL_SHARE", 1, "agentmemory.E071"),
        ("MEMORY_RECALL_SHARE", "0.3", "agentmemory.E071"),
        ("MEMORY_RECALL_SHARE", True, "agentmemory.E071"),
    ],
)
def test_settings_are_checked(settings, setting, value, check_id) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {setting: value}
    assert check_id in {m.id for m in run_checks()}


def test_good_settings_pass_the_checks(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True, "MEMORY_RECALL_SHARE": 0.3}
    assert not {m.id for m in run_checks()} & {"agentmemory.E070", "agentmemory.E071"}


# -- the API ----------------------------------------------------------------------------------


def test_context_endpoint_returns_the_block(api, user, past) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "Where is the spare key to the boathouse?")
    url = f"/api/conversations/{conv.uuid}/context/"
    off = api.get(url + "?max_tokens=2000").json()
    assert off["memory"] is None and off["memory_tokens"] == 0
    body = api.get(url + "?max_tokens=2000&memory_recall=true").json()
    assert body["memory_tokens"] > 0
    assert "flowerpot" in body["memory"]["text"]
    assert body["memory"]["tokens"] == body["memory_tokens"]
    assert body["memory"]["items"][0]["kind"] in ("message", "fact")
    # each item says where it comes from by the public ids the rest of the API uses
    said = [i for i in body["memory"]["items"] if i["kind"] == "message"]
    assert said and {i["conversation"] for i in said} == {str(past.uuid)}
    assert all(i["fact"] is None for i in said)
    # "support" is the example project's SupportAgent, whose block draws on the facts stored
    # without an agent key (its KNOWLEDGE_MEMORY_AGENT_KEY is None)
    fact = KnowledgeMemory(user).store("The boathouse spare key is under the flowerpot.").fact
    facts = api.get(url + "?max_tokens=2000&memory_recall=true").json()["memory"]["items"]
    assert [(i["fact"], i["conversation"]) for i in facts if i["kind"] == "fact"] == [(str(fact.uuid), None)]
    assert [m["part"] for m in body["messages"]] == ["memory", "history"]
    assert body["messages"][0]["token_count"] == body["memory_tokens"]
    assert body["total_tokens"] == body["memory_tokens"] + body["history_tokens"] <= 2_000
    openai = api.get(url + "?memory_recall=true&message_format=openai").json()
    assert openai["messages"][0]["role"] == "system" and "flowerpot" in openai["messages"][0]["content"]
    anthropic = api.get(url + "?memory_recall=true&message_format=anthropic").json()
    assert "flowerpot" in anthropic["system"]
    assert [m["role"] for m in anthropic["messages"]] == ["user"]
    langchain = api.get(url + "?memory_recall=true&message_format=langchain").json()
    assert [m["type"] for m in langchain["messages"]] == ["system", "human"]
    assert "flowerpot" in langchain["messages"][0]["data"]["content"]


def test_the_endpoint_and_the_admin_page_recall_what_the_registered_agent_sends(
    admin_client, api, user, settings
) -> None:  # type: ignore[no-untyped-def]
    # An agent with the default scope recalls every conversation of its user and the facts
    # stored without an agent key; the previews recalled in the conversation's agent key
    # only, so they showed a different block from the one the agent sent.
    from agentmemory import agent_registry

    class Concierge(BaseToolCallingAgent):
        AGENT_KEY = "concierge-preview"
        SYSTEM_PROMPT = "You are a concierge."
        MEMORY_RECALL_ENABLED = True

    try:
        KnowledgeMemory(user).store("Wife's diet: vegetarian", "family", persistent=True)
        stored(user, [*FILLER, "Our anniversary dinner is at Taberna da Rua.", "Noted."], agent_key="trips")
        question = "What diet does my wife follow, and where is our anniversary dinner?"
        conv = Conversation.objects.create(owner=user, agent_key="concierge-preview")
        llm = ScriptedChatModel(["Vegetarian; Taberna da Rua."])
        Concierge(llm).run(conv, question)
        sent = memory_messages(llm.calls[0][0])[0].text
        assert "vegetarian" in sent and "Taberna da Rua" in sent
        preview = ask(user, question, agent_key="concierge-preview")
        body = api.get(f"/api/conversations/{preview.uuid}/context/?memory_recall=true").json()
        assert "vegetarian" in body["memory"]["text"] and "Taberna da Rua" in body["memory"]["text"]
        page = admin_client.get(
            reverse("admin:agentmemory_conversation_context", args=[preview.pk]), {"memory_recall": "on"}
        )
        shown = page.content.decode()
        assert "vegetarian" in shown and "Taberna da Rua" in shown
        assert "every conversation of the owner" in shown
        # a key no agent holds keeps the scope of that key: none of the above
        other = ask(user, question, agent_key="no-such-agent")
        body = api.get(f"/api/conversations/{other.uuid}/context/?memory_recall=true").json()
        assert body["memory"] is None
    finally:
        agent_registry.unregister("concierge-preview")


def test_the_admin_context_page_recalls_in_the_scope_the_api_does(
    admin_client, api, user, past, settings
) -> None:  # type: ignore[no-untyped-def]
    # one rule for what a conversation's block may draw on: the page must not show memory of
    # other agent keys that the endpoint (and an agent of that key) leaves out
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
    conv = ask(user, "Where is the spare key to the boathouse?", agent_key="other")
    api_body = api.get(f"/api/conversations/{conv.uuid}/context/?max_tokens=2000").json()
    assert api_body["memory"] is None
    page = admin_client.get(reverse("admin:agentmemory_conversation_context", args=[conv.pk]))
    assert page.status_code == 200 and "flowerpot" not in page.content.decode()
    same_key = ask(user, "Where is the spare key to the boathouse?", agent_key="support")
    page = admin_client.get(
        reverse("admin:agentmemory_conversation_context", args=[same_key.pk]), {"memory_recall": "on"}
    )
    assert "flowerpot" in page.content.decode()


def test_the_admin_context_page_labels_the_block(admin_client, user, past, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
    conv = ask(user, "Where is the spare key to the boathouse?")
    page = admin_client.get(
        reverse("admin:agentmemory_conversation_context", args=[conv.pk]), {"memory_recall": "on"}
    )
    body = page.content.decode()
    assert page.status_code == 200
    assert "memory block" in body and "Memory block" in body and "flowerpot" in body


def test_the_admin_context_page_draws_the_block_in_its_budget(admin_client, user, past, settings) -> None:  # type: ignore[no-untyped-def]
    # the accounting, the bar and its legend split the budget into every part sent: a block
    # left out of the bar drew a window of 73% memory as a 5% sliver
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
    conv = ask(user, "Where is the spare key to the boathouse?")
    page = admin_client.get(
        reverse("admin:agentmemory_conversation_context", args=[conv.pk]),
        {"max_tokens": 300, "memory_recall": "on"},
    )
    window = page.context["window"]
    assert window.memory_tokens > 0
    body = page.content.decode()
    share = round(window.memory_tokens * 100 / 300)
    bar = body[body.index('class="am-bar"') : body.index("</div>", body.index('class="am-bar"'))]
    assert f"memory block {window.memory_tokens}," in bar
    assert re.search(rf'<span class="memory" style="width: {share}(\.\d+)?%">', bar), bar
    accounting = body[body.index('id="am-accounting"') : body.index('class="am-bar"')]
    assert re.search(rf"Memory block</dt><dd>{window.memory_tokens} tokens", accounting)
    assert '<span class="am-swatch memory">' in body


def test_context_endpoint_default_follows_the_setting_for_a_key_no_agent_holds(api, user, settings) -> None:  # type: ignore[no-untyped-def]
    stored(user, ["Where did I leave the spare key?", "Under the blue flowerpot."], agent_key="desk")
    conv = ask(user, "Where is the spare key to the boathouse?", agent_key="desk")
    settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
    url = f"/api/conversations/{conv.uuid}/context/"
    assert api.get(url).json()["memory"] is not None
    assert api.get(url + "?memory_recall=false").json()["memory"] is None


def test_the_previews_default_to_what_the_registered_agent_sends_and_mark_no_fact_recalled(
    admin_client, api, user, settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    # A new user's agent set MEMORY_RECALL_ENABLED = True while the setting stayed off: the
    # endpoint and the admin page showed no block by default, though the agent sends one,
    # and each look at the preview counted the facts it recalled as recalled (a GET wrote).
    from agentmemory import agent_registry

    class Dietitian(BaseToolCallingAgent):  # registered by its definition
        AGENT_KEY = "dietitian-preview"
        SYSTEM_PROMPT = "You plan meals."
        MEMORY_RECALL_ENABLED = True

    class Quiet(BaseToolCallingAgent):
        AGENT_KEY = "quiet-preview"
        SYSTEM_PROMPT = "You plan meals."

    try:
        fact = KnowledgeMemory(user).store("Allergic to peanuts", "health", persistent=True).fact
        conv = ask(user, "Can I eat the pad thai, given my peanut allergy?", agent_key="dietitian-preview")
        settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": False}
        with django_capture_on_commit_callbacks(execute=True):  # a recall records on commit
            body = api.get(f"/api/conversations/{conv.uuid}/context/").json()
            page = admin_client.get(reverse("admin:agentmemory_conversation_context", args=[conv.pk]))
        assert "peanuts" in body["memory"]["text"]
        assert "Allergic to peanuts" in page.content.decode()
        assert "as the agent sends (on)" in page.content.decode()
        fact.refresh_from_db()
        assert fact.recall_count == 0 and fact.last_recalled_at is None
        # an agent that sends no block: none by default, whatever the setting
        settings.AGENTMEMORY = {"MEMORY_RECALL_ENABLED": True}
        quiet = ask(user, "Can I eat the pad thai, given my peanut allergy?", agent_key="quiet-preview")
        assert api.get(f"/api/conversations/{quiet.uuid}/context/").json()["memory"] is None
        page = admin_client.get(reverse("admin:agentmemory_conversation_context", args=[quiet.pk]))
        assert page.context["window"].memory is None
        assert "as the agent sends (off)" in page.content.decode()
    finally:
        agent_registry.unregister("dietitian-preview")
        agent_registry.unregister("quiet-preview")


@pytest.mark.parametrize("value", ["", "1", "0", "yes", "True", "maybe", "true\x00"])
def test_context_endpoint_refuses_bad_values(api, user, value) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "hi")
    response = api.get(f"/api/conversations/{conv.uuid}/context/", {"memory_recall": value})
    assert response.status_code == 400
    assert "memory_recall" in response.json()["fields"]


def test_context_endpoint_of_another_user_is_a_404(api, user) -> None:  # type: ignore[no-untyped-def]
    theirs = stored(UserFactory(), ["My secret is 1234."])
    response = api.get(f"/api/conversations/{theirs.uuid}/context/?memory_recall=true")
    assert response.status_code == 404


def test_context_endpoint_gives_staff_no_block_of_another_users_memory(user, past, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_STAFF_SEES_ALL_CONVERSATIONS": True}
    KnowledgeMemory(user).store("The boathouse alarm code is 4321.")  # SupportAgent's scope
    conv = ask(user, "Where is the spare key to the boathouse?")
    staff = UserFactory(is_staff=True)
    client = APIClient()
    client.force_authenticate(staff)
    body = client.get(f"/api/conversations/{conv.uuid}/context/?memory_recall=true").json()
    assert body["memory"] is None and body["memory_tokens"] == 0
    assert [m["part"] for m in body["messages"]] == ["history"]
    client.force_authenticate(user)  # the owner gets it
    assert (
        "4321"
        in client.get(f"/api/conversations/{conv.uuid}/context/?memory_recall=true").json()["memory"]["text"]
    )


def test_context_endpoint_recalls_in_the_conversations_agent_key(api, user) -> None:  # type: ignore[no-untyped-def]
    stored(user, ["My zebrafish medical record says SECRET-MED.", "Noted."], agent_key="medical")
    stored(user, ["The zebrafish tank is in the office.", "Noted."], agent_key="hr")
    KnowledgeMemory(user, agent_key="hr").store("The zebrafish is fed at noon.")
    conv = ask(user, "Tell me about the zebrafish", agent_key="hr")
    text = api.get(f"/api/conversations/{conv.uuid}/context/?memory_recall=true").json()["memory"]["text"]
    assert "tank is in the office" in text and "fed at noon" in text
    assert "SECRET-MED" not in text


# -- the docs ---------------------------------------------------------------------------------


def _doc_block(path: str, marker: str) -> str:
    """The ```text block of ``path`` that follows the first line holding ``marker``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / path).read_text()
    after = text[text.index(marker) :]
    start = after.index("```text\n") + len("```text\n")
    return after[start : after.index("\n```", start)]


def test_the_docs_show_the_memory_block_the_model_receives(user) -> None:
    from datetime import UTC, datetime

    from agentmemory.models import Message

    past = Conversation.objects.create(owner=user, agent_key="concierge", title="Trip planning")
    PersistentChatHistory(past).add_messages(
        [
            ChatMessage.human("We land in Lisbon on the 14th, can you book a table for two?"),
            ChatMessage.ai("Done: Taberna da Rua, 20:00 on 14 March, for two."),
            ChatMessage.human("My wife is vegetarian, by the way."),
            ChatMessage.ai("Noted, I told the restaurant."),
        ]
    )
    Message.objects.filter(conversation=past).update(created_at=datetime(2026, 3, 2, 18, 5, tzinfo=UTC))

    class Concierge(BaseToolCallingAgent, register=False):
        AGENT_KEY = "concierge"
        SYSTEM_PROMPT = "You are a travel concierge."
        MEMORY_RECALL_ENABLED = True

    llm = ScriptedChatModel(["Taberna da Rua."])
    new = Conversation.objects.create(owner=user, agent_key="concierge")
    Concierge(llm).run(new, "Which restaurant did you book for our Lisbon dinner?")
    sent = llm.calls[0][0]
    assert [m.text for m in sent[::2]] == [
        "You are a travel concierge.",
        "Which restaurant did you book for our Lisbon dinner?",
    ]
    block = memory_messages(sent)[0].text
    assert block == _doc_block("README.md", "In a new conversation of the same user the model receives")
    assert block == _doc_block("docs/longterm.md", "where the memory block reads")


def test_a_summary_over_its_share_leaves_the_rest_to_the_block(user) -> None:  # type: ignore[no-untyped-def]
    for i in range(40):
        stored(
            user,
            [
                f"Where did I put boathouse key number {i}?",
                f"Boathouse key number {i} is under the blue flowerpot by door {i}, behind the shed.",
            ],
        )
    conv = ask(user, "Where are the boathouse keys?", before=["Hello there.", "Hi!"])
    text = " ".join(f"The user talked about garden topic {i}." for i in range(60))
    tokens = get_token_counter().count_message(ChatMessage.system(text))
    summary = Summary.objects.create(
        conversation=conv, text=text, first_seq=1, through_seq=2, token_count=tokens
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    budget = 2 * tokens
    plain = ContextWindowBuilder(conv, memory_recall=False).build(budget)
    assert "summary" not in plain.truncated and not plain.uncovered  # it fits whole
    window = ContextWindowBuilder(conv, memory_recall=True).build(budget)
    # the summary is held to what one made for this budget may take (a quarter of it) and
    # the block, which recalls the turn's matter, has the rest
    assert "summary" in window.truncated and window.summary_tokens <= 0.25 * budget + 10
    assert window.memory is not None and window.memory_tokens > budget - plain.total_tokens
    assert window.total_tokens <= budget


def test_a_summary_over_its_share_is_whole_beside_a_small_block(user, past) -> None:  # type: ignore[no-untyped-def]
    conv = ask(user, "Where is the spare key to the boathouse?", before=["Hello there.", "Hi!"])
    text = " ".join(f"The user talked about garden topic {i}." for i in range(60))
    tokens = get_token_counter().count_message(ChatMessage.system(text))
    summary = Summary.objects.create(
        conversation=conv, text=text, first_seq=1, through_seq=2, token_count=tokens
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    plain = ContextWindowBuilder(conv, memory_recall=False).build(2 * tokens)
    window = ContextWindowBuilder(conv, memory_recall=True).build(2 * tokens)
    # the block (two messages) took less than its share: the summary had its room back
    assert window.memory is not None and "flowerpot" in window.memory.text
    assert "summary" not in window.truncated and window.summary_tokens == plain.summary_tokens


@pytest.mark.parametrize("recall_fails", [True, False])
def test_a_turn_too_large_for_less_than_the_budget_keeps_its_summary(
    user, past, monkeypatch, recall_fails
) -> None:  # type: ignore[no-untyped-def]
    # the turn does not fit beside the system prompt in the budget less the block's share,
    # so the window is built within the whole budget: a summary cut to its share there for a
    # block that then fails, or takes less, has the room back
    question = "Where is the spare key to the boathouse? " + " ".join(f"detail{i}" for i in range(150))
    conv = ask(user, question, before=["Hello there.", "Hi!"])
    text = " ".join(f"The user talked about garden topic {i}." for i in range(25))
    tokens = get_token_counter().count_message(ChatMessage.system(text))
    summary = Summary.objects.create(
        conversation=conv, text=text, first_seq=1, through_seq=2, token_count=tokens
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    if recall_fails:

        def broken(**kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("the database is away")

        monkeypatch.setattr("agentmemory.recall.memory.recall_memory", broken)
    system = "You are a careful assistant. " * 100
    budget = 1_200
    plain = ContextWindowBuilder(conv, memory_recall=False, system_prompt=system).build(budget)
    assert "summary" not in plain.truncated and plain.total_tokens <= budget
    with pytest.raises(ContextBudgetExceeded):  # the case: no room in the budget less the share
        ContextWindowBuilder(conv, memory_recall=False, system_prompt=system).build(budget - budget // 4)
    window = ContextWindowBuilder(conv, memory_recall=True, system_prompt=system).build(budget)
    assert window.total_tokens <= budget
    if recall_fails:
        assert window.memory is None
        assert "summary" not in window.truncated and window.summary_tokens == plain.summary_tokens
    else:
        # the block came and took less than its share: the summary keeps all but its room
        assert window.memory is not None
        room = budget - window.memory_tokens - plain.system_tokens - plain.history_tokens
        assert window.summary_tokens >= min(plain.summary_tokens, room - 5)
        assert ("summary" in window.truncated) == (window.summary_tokens < plain.summary_tokens)


def test_an_agents_module_that_fails_to_import_does_not_break_the_previews(
    admin_client, api, user, past, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]
    # The previews look up the conversation's agent in the registry, whose first lookup
    # imports every app's agents module; one that raised made the endpoint and the page a 500,
    # with or without the memory block asked for. They recall in the agent key's scope instead.
    from agentmemory import agent_registry

    def broken(name: str) -> None:
        raise ImportError("cannot import name 'Missing' from 'project.tools'")

    monkeypatch.setattr(agent_registry, "_discovered", False)
    monkeypatch.setattr(agent_registry, "autodiscover_modules", broken)
    conv = ask(user, "Where did I leave the spare key to the boathouse?")
    url = f"/api/conversations/{conv.uuid}/context/"
    with caplog.at_level(logging.ERROR, logger="agentmemory.agents"):
        assert api.get(url).status_code == 200
        body = api.get(url + "?memory_recall=true").json()
        page = admin_client.get(reverse("admin:agentmemory_conversation_context", args=[conv.pk]))
    assert "flowerpot" in body["memory"]["text"]  # the "support" key's conversations
    assert page.status_code == 200
    assert "cannot import name 'Missing'" in caplog.text
