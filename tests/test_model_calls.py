"""Recorded model calls: each chat call's window rebuilt from storage equals what the model
received (tool exchanges, late results, placeholders, truncated and stubbed copies, the
summary, the knowledge block), usage as reported or counted and marked, and what
recording costs a turn in queries."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext, override_settings

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.calls import WindowUnavailable, text_digest, tools_text
from agentmemory.conf import get_token_counter
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, ModelCall, PromptText, Summary
from tests.factories import UserFactory


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(memory="stub")
def read_manual(page: int) -> str:
    """Read a long manual page."""
    return f"manual page {page}: " + "lorem ipsum dolor " * 200


@tool(memory="omit")
def ping() -> str:
    """Check the service is up."""
    return "pong"


class Agent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "calls-test"
    SYSTEM_PROMPT = "You add numbers."
    TOOLS = [add, read_manual, ping]


class KnowingAgent(Agent, register=False):
    AGENT_KEY = "calls-knowing"
    KNOWLEDGE_MEMORY_ENABLED = True


def ai_calls(*items: tuple[str, str, dict]) -> ChatMessage:
    return ChatMessage.ai(None, [ToolCall(id=i, name=n, arguments=a) for i, n, a in items])


def assert_rebuilt(llm: ScriptedChatModel, conversation: Conversation) -> list[ModelCall]:
    """Every recorded chat call of ``conversation`` rebuilds to what ``llm`` received."""
    records = list(ModelCall.objects.filter(conversation=conversation, kind="chat").order_by("id"))
    assert len(records) == len(llm.calls)
    for record, (sent, tools) in zip(records, llm.calls, strict=True):
        assert record.window() == sent
        assert record.tools() == (tools or [])
    return records


@pytest.fixture
def conv(db) -> Conversation:  # type: ignore[no-untyped-def]
    return Conversation.objects.create(agent_key="calls-test")


def test_each_call_is_one_row_linked_to_the_ai_message_it_produced(conv) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedChatModel(
        [
            ChatResponse(
                message=ai_calls(("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})),
                usage=Usage(input_tokens=120, output_tokens=20, cached_input_tokens=64),
                model="gpt-4o-mini-2024-07-18",
                finish_reason="tool_calls",
            ),
            ChatResponse(message=ChatMessage.ai("3 and 7"), usage=Usage(150, 5), model="gpt-4o-mini"),
        ]
    )
    result = Agent(llm=llm).run(conv, "1+2 and 3+4?")

    first, second = assert_rebuilt(llm, conv)
    ai_messages = list(Message.objects.filter(conversation=conv, role="ai").order_by("seq"))
    assert [first.message_id, second.message_id] == [m.pk for m in ai_messages]
    assert ai_messages[0].model_calls.get() == first  # and back from the message
    assert [c.record for c in result.calls] == [first, second]
    assert (first.round, second.round) == (0, 1)
    assert (first.input_tokens, first.output_tokens, first.cached_input_tokens) == (120, 20, 64)
    assert first.usage_source == second.usage_source == "provider"
    assert first.model == "gpt-4o-mini-2024-07-18" and first.finish_reason == "tool_calls"
    assert first.owner_id is None and first.agent_key == "calls-test"
    # the window's parts, by the agent's counter, add up to what it accounted
    window = result.calls[1].window
    assert (second.first_seq, second.last_seq) == (window.first_seq, window.last_seq) == (1, 4)
    assert second.system_tokens + second.summary_tokens + second.history_tokens == window.total_tokens
    assert second.tools_tokens == get_token_counter().count_text(tools_text(Agent(llm=llm).tool_schemas()))
    assert second.window_changes == {} and second.max_tokens == window.max_tokens
    # texts sent once per conversation, whatever the number of calls
    assert PromptText.objects.filter(conversation=conv).count() == 2  # system prompt, tools
    assert second.system_prompt_digest == text_digest("You add numbers.")


def test_a_provider_without_usage_is_counted_and_marked(conv) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedChatModel(["Hello there."])  # a ChatResponse without usage
    result = Agent(llm=llm).run(conv, "Hi")

    [record] = ModelCall.objects.filter(conversation=conv)
    counter = get_token_counter()
    window = result.calls[0].window
    assert record.usage_source == "counted"
    assert record.input_tokens == window.total_tokens + record.tools_tokens
    assert record.output_tokens == counter.count_message(ChatMessage.ai("Hello there."))
    stored = Message.objects.get(conversation=conv, role="ai")
    assert stored.metadata["usage"] == {
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "source": "counted",
    }
    assert result.usage == Usage(record.input_tokens, record.output_tokens)


def test_windows_with_truncated_stubbed_and_left_out_exchanges_rebuild_exactly(conv) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedChatModel(
        [
            ai_calls(("p1", "ping", {})),
            ai_calls(("m1", "read_manual", {"page": 3})),
            "The manual says lorem ipsum.",
            "Still lorem ipsum.",
        ]
    )
    agent = Agent(llm=llm)
    with override_settings(AGENTMEMORY={"MAX_TOOL_RESULT_TOKENS": 80}):
        agent.run(conv, "Is the service up? Then read page 3.")
        result = agent.run(conv, "What did it say?")

    records = assert_rebuilt(llm, conv)
    # the first turn sent the manual page truncated; the next stubbed it and left ping out
    assert list(records[2].window_changes) == ["truncated"]
    last = records[3].window_changes
    assert last["left_out"] == [2, 3] and set(last["stubbed"]) == {"5"}  # ping: call and result
    assert any(m.truncated for m in llm.calls[2][0])
    assert result.calls[0].record.window_changes == last
    assert "[result of read_manual omitted from memory]" in [m.content for m in llm.calls[3][0]]


def test_a_stubbed_result_is_listed_in_the_recorded_windows_truncated(conv) -> None:  # type: ignore[no-untyped-def]
    """The live window lists a result a memory policy stubbed in ``truncated`` with the
    copies the builder cut; the window rebuilt from the record (``recorded_context_window``,
    the API's ``model-calls/{id}/window/``) sent the stub marked ``truncated`` but left its
    seq out of the list."""
    from agentmemory.calls import recorded_context_window

    llm = ScriptedChatModel(
        [
            ai_calls(("m1", "read_manual", {"page": 3})),
            "The manual says lorem ipsum.",
            "Still lorem ipsum.",
        ]
    )
    agent = Agent(llm=llm)
    agent.run(conv, "Read page 3.")
    result = agent.run(conv, "What did it say?")

    live = result.calls[0].window
    assert set(result.calls[0].record.window_changes["stubbed"]) == {"3"}
    assert 3 in live.truncated
    rebuilt = recorded_context_window(result.calls[0].record)
    assert rebuilt.truncated == live.truncated
    assert {m.seq for m in rebuilt.history if m.truncated} == {3}


def test_late_results_and_pending_placeholders_rebuild_exactly(conv) -> None:  # type: ignore[no-untyped-def]
    history = PersistentChatHistory(conv)
    history.add_messages(
        [
            ChatMessage.human("Add 1+1 and 2+2."),
            ai_calls(("a", "add", {"a": 1, "b": 1}), ("b", "add", {"a": 2, "b": 2})),
            ChatMessage.tool("2", tool_call_id="a", name="add"),
        ]
    )
    llm = ScriptedChatModel(["Still waiting for 2+2.", "Now I have both."])
    agent = Agent(llm=llm)
    with override_settings(AGENTMEMORY={"PENDING_TOOL_CALLS": "placeholder"}):
        agent.run(conv, "Any news?")
        # the result of "b" arrives after later messages: it is sent right after its call
        history.add_messages([ChatMessage.tool("4", tool_call_id="b", name="add")])
        agent.run(conv, "And now?")

    first, second = assert_rebuilt(llm, conv)
    assert first.window_changes["placeholders"].keys() == {"b"}
    sent = [(m.role, m.tool_call_id, m.seq) for m in llm.calls[1][0][1:5]]
    assert sent == [(Role.HUMAN, "", 1), (Role.AI, "", 2), (Role.TOOL, "a", 3), (Role.TOOL, "b", 6)]
    assert second.window_changes == {}


def test_pending_exchange_left_out_is_recorded(conv) -> None:  # type: ignore[no-untyped-def]
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Refund me."),
            ai_calls(("r", "add", {"a": 1, "b": 1})),
            ChatMessage.human("Hello?"),
        ]
    )
    llm = ScriptedChatModel(["Hi."])
    Agent(llm=llm).run(conv, "Anyone?")
    [record] = assert_rebuilt(llm, conv)
    assert record.window_changes == {"left_out": [2]}


def test_summary_and_knowledge_block_rebuild_exactly(db) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    KnowledgeMemory(user).remember("Prefers answers in French", "preferences", persistent=True)
    agent = KnowingAgent(llm=ScriptedChatModel(["Bonjour.", "Deux."]))
    conv = agent.start_conversation(owner=user)
    agent.run(conv, "Hello")
    through = Message.objects.filter(conversation=conv).order_by("-seq").values_list("seq", flat=True)[0]
    counter = get_token_counter()
    summary = Summary.objects.create(
        conversation=conv,
        text="The user greeted the assistant.",
        first_seq=1,
        through_seq=through,
        human_messages_covered=1,
        token_count=counter.count_message(
            ChatMessage.system("Summary of the earlier conversation:\nThe user greeted the assistant.")
        ),
        token_counter=counter.id,
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    agent.run(conv, "1+1?")

    first, second = assert_rebuilt(agent.llm, conv)  # type: ignore[arg-type]
    assert second.summary_id == summary.pk and second.summary_tokens > 0
    assert second.first_seq == through + 1
    assert first.knowledge_tokens > 0 and first.owner_id == user.pk
    assert first.system_tokens + first.knowledge_tokens == result_system_tokens(agent, first)
    sent_system = agent.llm.calls[1][0][0].content  # type: ignore[attr-defined]
    assert sent_system.endswith("- Prefers answers in French")


def result_system_tokens(agent: BaseToolCallingAgent, record: ModelCall) -> int:
    return agent.token_counter.count_message(record.window()[0])


@pytest.mark.django_db(transaction=True)
def test_async_turn_records_the_same_way() -> None:
    conv = Conversation.objects.create(agent_key="calls-test")
    llm = ScriptedChatModel([ai_calls(("c1", "add", {"a": 2, "b": 2})), "4"])

    async def turn() -> None:
        try:
            await Agent(llm=llm).arun(conv, "2+2?")
        finally:
            # the executor thread's connection, which would outlive the test
            await sync_to_async(connections.close_all)()

    asyncio.run(turn())
    records = assert_rebuilt(llm, conv)
    assert [r.message_id is not None for r in records] == [True, True]


def test_recording_costs_one_insert_per_call_and_one_for_the_texts(conv) -> None:  # type: ignore[no-untyped-def]
    def turn_queries(setting: bool, conversation: Conversation) -> int:
        llm = ScriptedChatModel(
            [ai_calls(("c1", "add", {"a": 1, "b": 2})), ai_calls(("c2", "add", {"a": 3, "b": 3})), "done"]
        )
        with override_settings(AGENTMEMORY={"RECORD_MODEL_CALLS": setting}):
            agent = Agent(llm=llm)
            with CaptureQueriesContext(connection) as queries:
                agent.run(conversation, "sum things")
        return len(queries)

    other = Conversation.objects.create(agent_key="calls-test")
    without = turn_queries(False, other)
    with_records = turn_queries(True, conv)
    # three model calls: three inserts, plus one for the texts sent (system prompt, tools)
    assert with_records - without == 3 + 1
    assert ModelCall.objects.filter(conversation=other).count() == 0


def test_window_of_a_deleted_conversation_or_another_kind_is_unavailable(conv) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedChatModel(["ok"])
    Agent(llm=llm).run(conv, "hi")
    record = ModelCall.objects.get(conversation=conv)
    Conversation.objects.filter(pk=conv.pk).delete()
    record.refresh_from_db()
    assert record.conversation_id is None and record.message_id is None  # usage stays for totals
    assert not PromptText.objects.exists()  # the texts sent go with the conversation
    with pytest.raises(WindowUnavailable, match="deleted"):
        record.window()
    record.kind = "embedding"
    with pytest.raises(WindowUnavailable, match="embedding"):
        record.window()
