"""``BaseToolCallingAgent``: the turn loop, storage order, usage, windows, memory policies,
the async path, streaming events, the registry and the ``chat`` command."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import sys

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from agentmemory.agents import (
    AgentConfig,
    AIMessageEvent,
    BaseToolCallingAgent,
    FinalAnswer,
    MemoryConfig,
    ModelCallStarted,
    StepStored,
    ToolContext,
    ToolResultEvent,
    TurnStarted,
    registry,
    tool,
)
from agentmemory.agents.memory import STUB_TEXT
from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.exceptions import ConversationNotFound
from agentmemory.invariants import window_violations
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary
from tests.fake_anthropic_server import fake_anthropic  # noqa: F401

OFFLINE = {"COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor"}


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


@tool(memory="stub")
def read_manual(page: int) -> str:
    """Read a long manual page."""
    return f"manual page {page}: " + "lorem ipsum " * 30


@tool(memory="omit")
def ping() -> str:
    """Check the service is up."""
    return "pong"


@tool
def whoami(context: ToolContext) -> dict:
    """Report what the tool can reach."""
    return {
        "conversation": context.conversation.pk,
        "stored": len(context.chat_history.get_messages()),
        "compactor": type(context.memory_compactor).__name__,
        "llm": context.llm.model_name,
        "call": context.call.id,
    }


class CalcAgent(BaseToolCallingAgent, register=False):
    NAME = "Calculator"
    AGENT_KEY = "calc-test"
    SYSTEM_PROMPT = "You add numbers."
    TOOLS = [add, explode, read_manual, ping, whoami]


class CompactingAgent(CalcAgent, register=False):
    AGENT_KEY = "calc-compacting"
    MEMORY_COMPACTOR_ENABLED = True


def calls(*items: tuple[str, str, dict]) -> ChatMessage:
    return ChatMessage.ai(None, [ToolCall(id=i, name=n, arguments=a) for i, n, a in items])


def reply(
    message: ChatMessage | str, *, usage: tuple[int, int] = (10, 2), model: str = "m-1"
) -> ChatResponse:
    if isinstance(message, str):
        message = ChatMessage.ai(message)
    finish = "tool_calls" if message.tool_calls else "stop"
    return ChatResponse(message=message, usage=Usage(*usage), model=model, finish_reason=finish)


def stored(conv: Conversation) -> list[ChatMessage]:
    return [m.to_chat_message() for m in Message.objects.filter(conversation=conv).order_by("seq")]


@pytest.fixture
def conv(db) -> Conversation:  # type: ignore[no-untyped-def]
    return Conversation.objects.create(agent_key="calc-test")


# -- the loop --------------------------------------------------------------------------


def test_turn_stores_human_exchange_results_in_call_order_and_answer(conv):
    llm = ScriptedChatModel(
        [
            reply(calls(("c2", "add", {"a": 2, "b": 3}), ("c1", "add", {"a": 10, "b": 1})), usage=(40, 7)),
            reply("2+3=5 and 10+1=11", usage=(60, 9)),
        ]
    )
    result = CalcAgent(llm=llm).run(conv, "what are 2+3 and 10+1?")

    assert result.answer == "2+3=5 and 10+1=11"
    assert result.stopped_reason == "answer"
    assert result.rounds == 1
    rows = stored(conv)
    assert [(m.role, m.tool_call_id) for m in rows] == [
        (Role.HUMAN, ""),
        (Role.AI, ""),
        (Role.TOOL, "c2"),
        (Role.TOOL, "c1"),
        (Role.AI, ""),
    ]
    assert [m.content for m in rows if m.role is Role.TOOL] == ["5", "11"]
    assert [m.seq for m in result.messages] == [1, 2, 3, 4, 5]
    assert [m.id for m in result.messages] == [m.id for m in rows]
    # The system prompt is sent, never stored.
    assert not any(m.role is Role.SYSTEM for m in rows)
    # The second call sees the exchange it asked for, whole.
    second_messages, second_tools = llm.calls[1]
    assert [m.role for m in second_messages] == [Role.SYSTEM, Role.HUMAN, Role.AI, Role.TOOL, Role.TOOL]
    assert second_messages[0].content == "You add numbers."
    assert [t["name"] for t in second_tools] == ["add", "explode", "read_manual", "ping", "whoami"]


def test_usage_is_stored_on_ai_messages_and_summed(conv):
    llm = ScriptedChatModel(
        [reply(calls(("c1", "add", {"a": 1, "b": 1})), usage=(40, 7)), reply("2", usage=(60, 9), model="m-2")]
    )
    result = CalcAgent(llm=llm).run(conv, "1+1?")

    assert result.usage == Usage(input_tokens=100, output_tokens=16)
    ai_rows = Message.objects.filter(conversation=conv, role="ai").order_by("seq")
    first, last = (row.metadata for row in ai_rows)
    assert first["usage"] == {"input_tokens": 40, "output_tokens": 7, "source": "provider"}
    assert first["finish_reason"] == "tool_calls" and first["model"] == "m-1"
    assert last["usage"] == {"input_tokens": 60, "output_tokens": 9, "source": "provider"}
    assert last["model"] == "m-2" and last["finish_reason"] == "stop"
    assert last["latency_s"] >= 0
    assert [c.usage for c in result.calls] == [Usage(40, 7), Usage(60, 9)]


def test_window_accounting_per_model_call(conv):
    llm = ScriptedChatModel([reply(calls(("c1", "add", {"a": 1, "b": 2}))), reply("3")])
    result = CalcAgent(llm=llm).run(conv, "1+2?")

    assert len(result.windows) == 2
    first, second = result.windows
    assert first.first_seq == 1 and first.last_seq == 1
    assert second.last_seq == 3
    assert second.total_tokens <= second.max_tokens == 10_000
    assert second.history_tokens == sum(m.token_count for m in stored(conv)[:3])
    for window in result.windows:
        assert window_violations(window) == []


def test_tool_errors_become_results_the_model_reads(conv):
    llm = ScriptedChatModel(
        [
            reply(
                calls(
                    ("c1", "explode", {"reason": "disk full"}),
                    ("c2", "nope", {}),
                    ("c3", "add", {"a": "one", "b": 2}),
                    ("c4", "add", {"a": 1}),
                    ("c5", "add", {"_raw_arguments": "{a: 1"}),
                )
            ),
            reply("sorry, that failed"),
        ]
    )
    result = CalcAgent(llm=llm).run(conv, "go")

    assert result.answer == "sorry, that failed"
    texts = [m.content for m in result.tool_results]
    assert texts[0] == "Error: RuntimeError: boom: disk full"
    assert texts[1].startswith("Error: unknown tool 'nope'; available tools: add, explode")
    assert texts[2] == 'Error: invalid arguments for add: a must be an integer, not "one"'
    assert texts[3] == "Error: invalid arguments for add: missing required argument(s): b"
    assert texts[4].startswith("Error: the arguments of add were not a valid JSON object")
    assert all(m.metadata["error"] for m in result.tool_results)
    # The model saw every error text as a tool result.
    sent = llm.calls[1][0]
    assert [m.content for m in sent if m.role is Role.TOOL] == texts


def test_tool_round_bound_answers_remaining_calls_with_an_error(conv):
    class Bounded(CalcAgent, register=False):
        MAX_TOOL_ROUNDS = 2

    llm = ScriptedChatModel([reply(calls((f"c{i}", "add", {"a": i, "b": 0}))) for i in range(3)])
    result = Bounded(llm=llm).run(conv, "loop forever")

    assert result.stopped_reason == "max_tool_rounds"
    assert result.rounds == 2
    assert len(llm.calls) == 3
    last = stored(conv)[-1]
    assert last.role is Role.TOOL and last.tool_call_id == "c2"
    assert last.content.startswith("Error: not run: this turn reached its limit of 2 tool rounds")
    # The history stays valid for the next turn.
    llm.add("ok")
    Bounded(llm=llm).run(conv, "stop")
    assert [m.role for m in llm.calls[-1][0]][-2:] == [Role.TOOL, Role.HUMAN]


def test_tools_get_the_injector(conv):
    llm = ScriptedChatModel([reply(calls(("c1", "whoami", {}))), reply("done")])
    CompactingAgent(llm=llm).run(conv, "who am I?")

    result = stored(conv)[2]
    assert result.content == (
        f'{{"conversation": {conv.pk}, "stored": 1, "compactor": "LLMMemoryCompactor", '
        f'"llm": "scripted", "call": "c1"}}'
    )


def test_conversation_by_pk_or_uuid_and_start_conversation(db):
    agent = CalcAgent(llm=ScriptedChatModel(["a", "b", "c"]))
    conv = agent.start_conversation(title="t")
    assert conv.agent_key == "calc-test" and conv.title == "t"
    agent.run(conv.pk, "x")
    agent.run(str(conv.uuid), "y")
    agent.run(conv.uuid, "z")
    assert Message.objects.filter(conversation=conv).count() == 6
    with pytest.raises(ConversationNotFound):
        agent.run("not-a-uuid", "x")


def test_callable_system_prompt_gets_the_injector(conv):
    class Prompted(CalcAgent, register=False):
        @staticmethod
        def SYSTEM_PROMPT(injector):  # type: ignore[no-untyped-def,override]
            return f"conversation {injector.conversation.pk}, {injector.chat_history.conversation_id}"

    llm = ScriptedChatModel(["hi"])
    Prompted(llm=llm).run(conv, "hello")
    assert llm.calls[0][0][0] == ChatMessage.system(f"conversation {conv.pk}, {conv.pk}")


def test_missing_ai_content_is_stored_as_empty_text(conv):
    llm = ScriptedChatModel(
        [ChatResponse(message=ChatMessage(role=Role.AI, content=None), finish_reason="stop")]
    )
    result = CalcAgent(llm=llm).run(conv, "say nothing")
    assert result.answer == "" and stored(conv)[-1].content == ""


def test_duplicate_or_empty_call_ids_from_the_model_are_replaced(conv):
    llm = ScriptedChatModel(
        [reply(calls(("x", "add", {"a": 1, "b": 1}), ("x", "add", {"a": 2, "b": 2}))), "ok"]
    )
    CalcAgent(llm=llm).run(conv, "go")
    ai = stored(conv)[1]
    ids = [c.id for c in ai.tool_calls]
    assert ids[0] == "x" and ids[1] != "x" and ids[1].startswith("call_")
    assert [m.tool_call_id for m in stored(conv)[2:4]] == ids


def test_llm_failure_keeps_history_valid(conv):
    from agentmemory.exceptions import TransientLLMError

    llm = ScriptedChatModel([reply(calls(("c1", "add", {"a": 1, "b": 1}))), TransientLLMError("429")])
    with pytest.raises(TransientLLMError):
        CalcAgent(llm=llm).run(conv, "go")
    assert [m.role for m in stored(conv)] == [Role.HUMAN, Role.AI, Role.TOOL]
    llm.add("recovered")
    assert CalcAgent(llm=llm).run(conv, "again").answer == "recovered"


# -- memory policy ---------------------------------------------------------------------


def test_memory_policy_applies_to_earlier_turns_only(conv):
    llm = ScriptedChatModel(
        [
            reply(calls(("m1", "read_manual", {"page": 4}))),
            reply(calls(("p1", "ping", {}))),
            reply(calls(("a1", "add", {"a": 1, "b": 2}))),
            "first answer",
            reply(calls(("m2", "read_manual", {"page": 5}))),
            "second answer",
        ]
    )
    agent = CalcAgent(llm=llm)
    agent.run(conv, "turn one")
    # Within the turn, the manual page was replayed in full to the next calls.
    assert any(m.content.startswith("manual page 4") for m in llm.calls[1][0] if m.role is Role.TOOL)

    result = agent.run(conv, "turn two")
    first_call = llm.calls[4][0]
    tool_texts = {m.tool_call_id: m.content for m in first_call if m.role is Role.TOOL}
    assert tool_texts == {"m1": STUB_TEXT.format(name="read_manual"), "a1": "3"}  # p1 omitted whole
    assert not any(c.id == "p1" for m in first_call for c in m.tool_calls)
    # The newest exchange (this turn) is replayed in full.
    second_call = llm.calls[5][0]
    assert next(m for m in second_call if m.tool_call_id == "m2").content.startswith("manual page 5")
    call = result.calls[0]
    seqs = {m.tool_call_id: m.seq for m in stored(conv) if m.role is Role.TOOL}
    assert call.stubbed == (seqs["m1"],)
    assert len(call.omitted) == 2 and seqs["p1"] in call.omitted
    assert call.window.history_tokens < sum(m.token_count for m in stored(conv)[:8])
    assert window_violations(call.window) == []
    # Storage keeps the full result.
    assert Message.objects.get(conversation=conv, tool_call_id="m1").content.startswith("manual page 4")


def test_omit_falls_back_to_stub_when_mixed_or_last_before_next_human(conv):
    llm = ScriptedChatModel(
        [
            reply(calls(("p1", "ping", {}), ("a1", "add", {"a": 1, "b": 1}))),  # mixed
            "answer one",
            reply(calls(("p2", "ping", {}))),  # turn ends on the round bound without an answer
        ]
    )

    class OneRound(CalcAgent, register=False):
        MAX_TOOL_ROUNDS = 0

    CalcAgent(llm=llm).run(conv, "one")
    OneRound(llm=llm).run(conv, "two")
    llm.add("three")
    result = CalcAgent(llm=llm).run(conv, "three")

    sent = llm.calls[-1][0]
    texts = {m.tool_call_id: m.content for m in sent if m.role is Role.TOOL}
    assert texts == {
        "p1": STUB_TEXT.format(name="ping"),
        "a1": "2",
        "p2": STUB_TEXT.format(name="ping"),
    }
    assert result.calls[0].omitted == ()
    assert window_violations(result.windows[0]) == []


# -- async -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_arun_runs_parallel_calls_concurrently():
    state: dict[str, asyncio.Event] = {}

    @tool
    async def left() -> str:
        """Waits for right."""
        state["left"].set()
        await asyncio.wait_for(state["right"].wait(), 2)
        return "L"

    @tool
    async def right() -> str:
        """Waits for left."""
        state["right"].set()
        await asyncio.wait_for(state["left"].wait(), 2)
        return "R"

    class Parallel(BaseToolCallingAgent, register=False):
        TOOLS = [left, right, add]

    conv = Conversation.objects.create()
    llm = ScriptedChatModel(
        [reply(calls(("c1", "right", {}), ("c2", "add", {"a": 1, "b": 1}), ("c3", "left", {}))), "both done"]
    )

    async def scenario():  # type: ignore[no-untyped-def]
        state["left"], state["right"] = asyncio.Event(), asyncio.Event()
        try:
            return await Parallel(llm=llm).arun(conv, "go")
        finally:
            await sync_to_async(connections.close_all)()

    result = asyncio.run(scenario())
    assert result.answer == "both done"
    assert [m.content for m in result.tool_results] == ["R", "2", "L"]
    assert [m.tool_call_id for m in stored(conv) if m.role is Role.TOOL] == ["c1", "c2", "c3"]


@pytest.mark.django_db(transaction=True)
def test_async_tool_in_the_sync_path_and_astream_events():
    @tool
    async def slow_echo(text: str) -> str:
        """Echo after a pause."""
        await asyncio.sleep(0)
        return text.upper()

    class Echo(BaseToolCallingAgent, register=False):
        TOOLS = [slow_echo]

    conv = Conversation.objects.create()
    llm = ScriptedChatModel([reply(calls(("c1", "slow_echo", {"text": "hi"}))), "HI", "second"])
    assert Echo(llm=llm).run(conv, "echo hi").tool_results[0].content == "HI"

    async def collect():  # type: ignore[no-untyped-def]
        try:
            return [event async for event in Echo(llm=llm).astream(conv, "again")]
        finally:
            await sync_to_async(connections.close_all)()

    events = asyncio.run(collect())
    assert [type(e) for e in events] == [
        TurnStarted,
        ModelCallStarted,
        AIMessageEvent,
        StepStored,
        FinalAnswer,
    ]
    assert events[-1].answer == "second"


# -- streaming -------------------------------------------------------------------------


def test_stream_yields_events_in_order(conv):
    llm = ScriptedChatModel(
        [reply(calls(("c1", "add", {"a": 1, "b": 2}), ("c2", "explode", {"reason": "x"}))), "3"]
    )
    events = list(CalcAgent(llm=llm).stream(conv, "1+2?"))

    assert [type(e).__name__ for e in events] == [
        "TurnStarted",
        "ModelCallStarted",
        "AIMessageEvent",
        "ToolResultEvent",
        "ToolResultEvent",
        "StepStored",
        "ModelCallStarted",
        "AIMessageEvent",
        "StepStored",
        "FinalAnswer",
    ]
    tool_events = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [(e.call.id, e.error) for e in tool_events] == [("c1", False), ("c2", True)]
    step = events[5]
    assert [m.role for m in step.messages] == [Role.AI, Role.TOOL, Role.TOOL]
    assert all(m.seq is not None for m in step.messages)
    assert events[-1].result.answer == "3"


# -- compaction ------------------------------------------------------------------------


def test_compaction_enqueued_after_ten_human_messages(conv, settings, django_capture_on_commit_callbacks):
    settings.AGENTMEMORY = OFFLINE
    agent = CompactingAgent(llm=ScriptedChatModel([f"answer {i}" for i in range(11)]))
    for i in range(9):
        assert agent.run(conv, f"question {i}").compaction_enqueued is False
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        result = agent.run(conv, "question 9")
    assert result.compaction_enqueued is True
    assert len(callbacks) == 1
    summary = Summary.objects.get(conversation=conv)
    assert summary.through_seq == 18  # everything before the newest human turn (K6)
    assert "User said: question 0" in summary.text

    llm = agent.llm
    agent.run(conv, "question 10")
    sent = llm.calls[-1][0]
    assert sent[1].role is Role.SYSTEM and sent[1].metadata["summary_id"] == summary.pk
    assert sent[2].content == "question 9"


def test_compaction_disabled_by_default(conv, settings, django_capture_on_commit_callbacks):
    settings.AGENTMEMORY = OFFLINE
    agent = CalcAgent(llm=ScriptedChatModel([f"a{i}" for i in range(12)]))
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        for i in range(12):
            agent.run(conv, f"q{i}")
    assert callbacks == [] and not Summary.objects.exists()


class ShortSummaryCompactor(LLMMemoryCompactor):
    """Compacts every 3 human messages, keeps two turns verbatim and labels its summaries:
    the class the Celery task must rebuild."""

    def __init__(self, conversation_repo, conversation_id, llm, chat_history=None, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("summarize_every_n_human", 3)
        kwargs.setdefault("keep_recent_human_turns", 2)
        super().__init__(conversation_repo, conversation_id, llm, chat_history, **kwargs)

    def summarize(self, previous, messages):  # type: ignore[no-untyped-def]
        draft = super().summarize(previous, messages)
        return dataclasses.replace(draft, text="[short] " + draft.text)


class OwnCompactorAgent(CalcAgent, register=False):
    AGENT_KEY = "own-compactor"
    MEMORY_COMPACTOR_ENABLED = True

    @classmethod
    def get_config(cls) -> AgentConfig:
        return AgentConfig(memory=MemoryConfig(compactor_class=ShortSummaryCompactor))


def test_get_config_override_compactor_is_used_by_the_task(
    conv, settings, django_capture_on_commit_callbacks
):
    settings.AGENTMEMORY = {"COMPACTION_LLM": "tests.helpers_concurrency.FixedSummaryModel"}
    agent = OwnCompactorAgent(llm=ScriptedChatModel([f"a{i}" for i in range(3)]))
    with django_capture_on_commit_callbacks(execute=True):
        results = [agent.run(conv, f"q{i}") for i in range(3)]

    assert [r.compaction_enqueued for r in results] == [False, False, True]
    summary = Summary.objects.get(conversation=conv)
    assert summary.text.startswith("[short] ")
    assert summary.human_message_count == 3 and summary.through_seq == 2  # two turns kept


# -- registry and chat -----------------------------------------------------------------


def test_registry_autodiscovers_agents_modules():
    # The example project is an installed app, so its agents module is discovered.
    registry.autodiscover(force=True)
    from project.agents import EarlySummarySupportAgent, SupportAgent

    assert registry.get("support") is SupportAgent
    assert registry.get("support-early-summary") is EarlySummarySupportAgent
    assert {"support", "support-early-summary"} <= set(registry.all())
    with pytest.raises(registry.AgentNotRegistered, match=r"registered: .*support"):
        registry.get("nobody")


def test_subclasses_register_by_key_and_keys_are_unique():
    class Alpha(BaseToolCallingAgent):
        AGENT_KEY = "alpha-test"

    class AlphaChild(Alpha):  # inherits the key: does not take it over
        pass

    try:
        assert registry.get("alpha-test") is Alpha
        with pytest.raises(Exception, match="already used by"):

            class Impostor(BaseToolCallingAgent):
                AGENT_KEY = "alpha-test"

    finally:
        registry.unregister("alpha-test")
    assert "alpha-test" not in registry.all()
    assert AlphaChild.AGENT_KEY == "alpha-test"


@pytest.fixture
def registered_calc():  # type: ignore[no-untyped-def]
    registry.register(CalcAgent)
    yield CalcAgent
    registry.unregister(CalcAgent.AGENT_KEY)


def test_chat_command_runs_a_session(db, registered_calc, monkeypatch, settings):
    llm = ScriptedChatModel([reply(calls(("c1", "add", {"a": 2, "b": 2}))), "It is 4.", "Bye!"])
    monkeypatch.setattr("agentmemory.management.commands.chat.resolve_llm", lambda spec: llm)
    monkeypatch.setattr(sys, "stdin", io.StringIO("2+2?\n\nthanks\n/quit\nnever read\n"))
    out = io.StringIO()

    call_command("chat", "calc-test", stdout=out)

    text = out.getvalue()
    assert '[tool] add({"a": 2, "b": 2}) -> 4' in text
    assert "Calculator> It is 4." in text and "Calculator> Bye!" in text
    conv = Conversation.objects.get(agent_key="calc-test")
    assert str(conv.uuid) in text
    assert [m.content for m in stored(conv) if m.role is Role.HUMAN] == ["2+2?", "thanks"]

    # --conversation continues the same conversation.
    llm.add("welcome back")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello again\n"))
    call_command("chat", "calc-test", "--conversation", str(conv.uuid), stdout=io.StringIO())
    assert Conversation.objects.count() == 1
    assert stored(conv)[-1].content == "welcome back"


def test_chat_command_fails_with_scripted_input_when_a_turn_failed(db, registered_calc, monkeypatch):
    from agentmemory.exceptions import TransientLLMError

    llm = ScriptedChatModel([TransientLLMError("HTTP 500 from the provider"), "fine now"])
    monkeypatch.setattr("agentmemory.management.commands.chat.resolve_llm", lambda spec: llm)
    monkeypatch.setattr(sys, "stdin", io.StringIO("first\nsecond\n"))
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 turn"):
        call_command("chat", "calc-test", stdout=io.StringIO(), stderr=err)
    assert "HTTP 500" in err.getvalue()


def test_chat_command_without_llm_says_how_to_configure(db, registered_calc, monkeypatch, settings):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTMEMORY_LLM_PROVIDER", "none")
    settings.AGENTMEMORY = {}
    err = io.StringIO()
    with pytest.raises(CommandError, match="no LLM configured"):
        call_command("chat", "calc-test", stdout=io.StringIO(), stderr=err)
    assert "OPENAI_API_KEY" in err.getvalue() and "AGENTMEMORY['LLMS']" in err.getvalue()
    assert not Conversation.objects.exists()


def test_chat_command_unknown_agent(db):
    with pytest.raises(CommandError, match="no agent registered under 'ghost'"):
        call_command("chat", "ghost", stdout=io.StringIO())


# -- end to end through the Anthropic adapter ------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_support_agent_multi_turn_through_anthropic_async(fake_anthropic, settings):  # noqa: F811
    """12 turns with parallel tool uses through ``arun`` and the real ``anthropic`` SDK; the
    fake server refuses any request the Messages API would refuse (orphan tool results,
    unanswered tool uses, wrong alternation), and compaction after turn 10 puts the summary
    into the ``system`` parameter."""
    from agentmemory.llm.anthropic import AnthropicChatModel
    from project.agents import SupportAgent
    from project.celery import app as celery_app

    settings.AGENTMEMORY = OFFLINE
    llm = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    agent = SupportAgent(llm=llm)
    conv = agent.start_conversation()
    for turn in range(1, 13):
        if turn % 2:
            fake_anthropic.enqueue_tool_uses(
                [("lookup_order", {"order_id": "A-1003"}), ("search_faq", {"topic": "warranty"})],
                text="Let me check.",
            )
        fake_anthropic.enqueue_text(f"Answer {turn}")

    async def scenario():  # type: ignore[no-untyped-def]
        try:
            return [await agent.arun(conv, f"Turn {turn}: my headphones broke") for turn in range(1, 13)]
        finally:
            await sync_to_async(connections.close_all)()

    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        results = asyncio.run(scenario())
    finally:
        celery_app.conf.task_always_eager = eager
    assert [r.answer for r in results] == [f"Answer {t}" for t in range(1, 13)]
    assert fake_anthropic.pending == 0 and len(fake_anthropic.requests) == 18
    summary = Summary.objects.get(conversation=conv)
    assert summary.human_message_count == 10
    for body in fake_anthropic.requests[:15]:  # turns 1-10
        assert "Summary of the earlier conversation" not in str(body["system"])
    for body in fake_anthropic.requests[15:]:  # turns 11-12
        assert summary.text in str(body["system"])
        assert "Turn 10: my headphones broke" in str(body["messages"][0]["content"])
    first_ai = Message.objects.filter(conversation=conv, role="ai").order_by("seq").first()
    assert first_ai.content == "Let me check." and len(first_ai.tool_calls) == 2
    assert first_ai.metadata["finish_reason"] == "tool_use"
    assert first_ai.metadata["usage"] == {"input_tokens": 20, "output_tokens": 9, "source": "provider"}


def test_chat_command_without_the_provider_package_stores_nothing(db, registered_calc, monkeypatch):
    """An OpenAI model whose SDK is not installed: the command says which extra to install
    before it makes a conversation, instead of failing (and storing) every line typed."""
    from agentmemory.llm.openai import OpenAIChatModel

    llm = OpenAIChatModel(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")
    monkeypatch.setattr("agentmemory.management.commands.chat.resolve_llm", lambda spec: llm)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    monkeypatch.setitem(sys.modules, "openai", None)  # what Python does for a missing package
    with pytest.raises(CommandError, match=r"django-agentmemory\[openai\]"):
        call_command("chat", "calc-test", stdout=io.StringIO(), stderr=io.StringIO())
    assert not Conversation.objects.filter(agent_key="calc-test").exists()
