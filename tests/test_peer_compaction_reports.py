"""Summarisation and compaction faults from peer systems' public bug reports, beyond the
corpus in shared/data/bug-cases.json.

Each test names the report it stands for (repository#number) and the symptom in a line, and
drives the smallest scenario of that kind of fault through the public API: the history, the
compactor (with a scripted summariser), ``request_compaction``, the window builder, the
agent and the converters. Contents are neutral.
"""

from __future__ import annotations

import base64
import io
import itertools
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.models import F
from django.test import override_settings

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.compaction import LLMMemoryCompactor, pending_compactions, request_compaction, sweep
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import InvalidSummaryError, LLMRefusalError, TransientLLMError
from agentmemory.formats.anthropic import to_anthropic
from agentmemory.formats.openai import to_openai
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.base import ChatResponse
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import BaseTokenCounter, LengthTokenCounter
from tests.helpers_concurrency import ScriptHolder

pytestmark = pytest.mark.django_db


class Words(BaseTokenCounter):
    """One token per word, plus the usual message framing: sizes a test can read."""

    id = "test-words"

    def count_text(self, text: str) -> int:
        return len(text.split())


def words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)


def turns(n: int, *, start: int = 0) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i in range(start, start + n):
        out += [ChatMessage.human(f"question {i}"), ChatMessage.ai(f"answer {i}")]
    return out


def compactor(conv, llm, counter=None, **kwargs) -> LLMMemoryCompactor:  # type: ignore[no-untyped-def]
    counter = counter or LengthTokenCounter()
    history = PersistentChatHistory(conv, token_counter=counter)
    return LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, token_counter=counter, **kwargs)


def stored_rows(conv: Conversation) -> list[dict]:
    return list(Message.objects.filter(conversation=conv).order_by("seq").values())


def check(window, conv: Conversation) -> None:  # type: ignore[no-untyped-def]
    seqs = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
    assert window_violations(window, stored_seqs=seqs, newest_seq=max(seqs)) == []


def summary_messages(window) -> list[ChatMessage]:  # type: ignore[no-untyped-def]
    return [m for m in window.messages if m.role is Role.SYSTEM and m.metadata.get("summary_id")]


# --------------------------------------------------------------------------- the span


def test_cut_never_lands_inside_a_parallel_tool_exchange() -> None:
    """langchain-ai/deepagents#270: summarising removed the assistant message that made the
    tool calls but left its tool results behind, so the next request carried orphan results.

    The newest messages to keep verbatim start in the middle of a parallel exchange: the
    boundary moves back to the human turn, and the window holds whole exchanges only."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages(turns(2))
    history.add_messages(
        [
            ChatMessage.human("read the three files"),
            ChatMessage.ai(None, [ToolCall(id=f"c{i}", name="read", arguments={"n": i}) for i in range(3)]),
            *[ChatMessage.tool(f"file {i}", tool_call_id=f"c{i}", name="read") for i in range(3)],
            ChatMessage.ai("read all three"),
            ChatMessage.human("and now?"),
        ]
    )
    # keep the newest 3 messages: the cut would fall between the results of c1 and c2
    summary = compactor(
        conv, ScriptedChatModel(["two questions were answered"]), keep_recent_messages=3
    ).compact()
    assert summary is not None and summary.through_seq == 4  # before "read the three files"
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    assert [m.role for m in window.messages[1:4]] == [Role.HUMAN, Role.AI, Role.TOOL]


def test_tool_exchanges_after_the_boundary_stay_whole_and_stored() -> None:
    """dotnet/extensions#6890: the summarising reducer dropped every tool call and tool result
    message, also those it did not summarise and also when nothing was summarised.

    Before and after a compaction, the window keeps the tool exchange that is newer than the
    summary, call and result, and storage is not touched."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages(turns(2))
    history.add_messages(
        [
            ChatMessage.human("who is the current user?"),
            ChatMessage.ai(None, [ToolCall(id="u1", name="whoami", arguments={})]),
            ChatMessage.tool("alex", tool_call_id="u1", name="whoami"),
            ChatMessage.ai("the current user is alex"),
            ChatMessage.human("thanks"),
        ]
    )
    before = stored_rows(conv)
    builder = ContextWindowBuilder(conv, token_counter=LengthTokenCounter())
    assert sum(1 for m in builder.build(100).messages if m.role is Role.TOOL) == 1
    compactor(conv, ScriptedChatModel(["two questions answered"]), keep_recent_human_turns=2).compact()
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    assert [m.role for m in window.messages] == [
        Role.SYSTEM,
        Role.HUMAN,
        Role.AI,
        Role.TOOL,
        Role.AI,
        Role.HUMAN,
    ]
    assert window.messages[2].tool_calls[0].id == "u1"
    assert stored_rows(conv) == before


def test_the_newest_question_survives_a_long_tool_loop() -> None:
    """justrach/codegraff2#155 (related feigeCode/navop#227): with nothing retained, the
    compaction folded the live user turn, and the model answered the summary (or the request
    held no user message at all) while a long tool chain followed the question.

    A keep of zero turns is refused; with a long tool loop after the newest question, the
    summary stops before it and the window starts on that question."""
    conv = Conversation.objects.create()
    with pytest.raises(ValueError):
        compactor(conv, ScriptedChatModel([]), keep_recent_human_turns=0)
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages(turns(3))
    history.add_message(ChatMessage.human("tidy the folder"))
    for i in range(12):
        history.add_message(ChatMessage.ai(None, [ToolCall(id=f"s{i}", name="step", arguments={"i": i})]))
        history.add_message(ChatMessage.tool(f"step {i} done", tool_call_id=f"s{i}", name="step"))
    summary = compactor(
        conv, ScriptedChatModel(["three questions answered"]), keep_recent_messages=4
    ).compact()
    assert summary is not None and summary.through_seq == 6
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(40)
    check(window, conv)
    assert window.messages[1].content == "tidy the folder"


def test_a_mid_conversation_system_message_is_folded_not_pinned() -> None:
    """pipecat-ai/pipecat#4295: a system message injected mid-conversation was taken for the
    system prompt, so the span to summarise came out empty and summarising failed.

    Only a leading system message is pinned; a later one is folded like any message, and the
    pinned prompt stays first and alone."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_message(ChatMessage.system("You are a support agent."))
    history.add_messages(turns(1))
    history.add_message(ChatMessage.system("The user has been idle for five minutes."))
    history.add_messages(turns(2, start=1))
    llm = ScriptedChatModel(["one question answered; the user went idle once"])
    summary = compactor(conv, llm).compact()
    assert summary is not None and summary.first_seq == 2 and summary.through_seq == 6
    assert "idle for five minutes" in llm.calls[0][0][-1].content
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    assert window.messages[0].content == "You are a support agent."
    assert len(summary_messages(window)) == 1
    assert sum(1 for m in window.messages if m.role is Role.SYSTEM) == 2  # the prompt and the summary


# --------------------------------------------------------------------------- size


def test_the_summary_counts_against_the_window_budget() -> None:
    """langchain-ai/langchainjs#2181: the token limit bounded only the message buffer, not the
    summary, so the summary could grow without bound inside the prompt.

    The window's total, summary included, stays within the budget, and the history part gives
    way to the summary's tokens."""
    counter = Words()
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages([ChatMessage.human(words(20, "q")), ChatMessage.ai(words(20, "a"))] * 4)
    history.add_message(ChatMessage.human("and the last question?"))
    comp = compactor(conv, ScriptedChatModel([words(60, "fact")]), counter, keep_recent_human_turns=1)
    comp.fit_to_window(400)
    summary = comp.compact()
    assert summary is not None
    window = ContextWindowBuilder(conv, token_counter=counter).build(150)
    check(window, conv)
    assert window.summary_tokens >= 60
    assert window.total_tokens <= 150
    assert window.system_tokens + window.summary_tokens + window.history_tokens == window.total_tokens


def test_successive_summaries_do_not_snowball() -> None:
    """adolfousier/opencrabs#1649: each compaction re-derived and restated the previous summary
    in full, so the summary grew about nine-fold over five compactions.

    A summariser that always restates the previous summary and appends to it is condensed back
    under the limit at every compaction; no stored summary exceeds it."""
    counter = Words()
    limit = 80

    def restating(messages: list[ChatMessage]) -> str:
        prompt = messages[-1].content or ""
        if "Shorten" in (messages[0].content or ""):
            return words(limit - 5, "kept")
        previous = prompt.split("Previous summary:\n", 1)[1].split("\n\nNew messages:", 1)[0]
        return (previous + " " + words(40, "new")).strip()

    llm = ScriptedChatModel([restating] * 40)
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    comp = compactor(conv, llm, counter, max_summary_tokens=limit, summarize_every_n_human=2)
    for i in range(12):
        history.add_messages(turns(1, start=i))
        if comp.needs_compaction():
            comp.compact()
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert len(summaries) >= 5
    assert all(counter.count_text(s.text) <= limit for s in summaries)


def test_a_long_summary_in_a_small_window_does_not_retrigger_every_turn() -> None:
    """google/adk-go#1434: a summary larger than the compaction threshold put the prompt back
    over the line right after each compaction, so every turn compacted again.

    The summary is made to fit its share of the window; after a compaction, the next turn is
    not due for another one."""
    counter = Words()
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages([ChatMessage.human(words(40, "q")), ChatMessage.ai(words(40, "a"))] * 3)
    history.add_message(ChatMessage.human("next"))
    llm = ScriptedChatModel([words(300, "detail"), words(40, "short")])
    comp = compactor(conv, llm, counter, summarize_every_n_human=50)
    budget = 300
    assert comp.needs_compaction(max_tokens=budget)
    comp.fit_to_window(budget)
    summary = comp.compact()
    assert summary is not None and counter.count_text(summary.text) <= budget // 4
    history.add_messages([ChatMessage.ai("ok"), ChatMessage.human("one more")])
    assert not comp.needs_compaction(max_tokens=budget)


# --------------------------------------------------------------------------- the trigger


def test_a_large_pinned_prompt_does_not_trigger_compaction_every_turn() -> None:
    """pipecat-ai/pipecat#5505: the token trigger counted the system prompt, which summarising
    never shrinks, so with a large prompt it fired on every turn without helping.

    A pinned prompt that takes most of the window does not make a short history due: the
    trigger compares what a summary can fold with the room the prompt leaves."""
    counter = Words()
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_message(ChatMessage.system(words(850, "rule")))
    comp = compactor(conv, ScriptedChatModel([]), counter, summarize_every_n_human=50)
    for i in range(3):
        history.add_messages(turns(1, start=i))
        assert not comp.needs_compaction(max_tokens=1000), f"due after turn {i}"
    # the history now outgrows the room beside the prompt: due
    history.add_messages([ChatMessage.human(words(60, "q")), ChatMessage.ai(words(60, "a"))])
    history.add_message(ChatMessage.human("next"))
    assert comp.needs_compaction(max_tokens=1000)


class PromptHeavyAgent(BaseToolCallingAgent, register=False):
    NAME = "Prompt heavy"
    AGENT_KEY = "prompt-heavy"
    SYSTEM_PROMPT = words(600, "policy")
    MEMORY_COMPACTOR_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 1000


def test_an_agent_prompt_that_is_not_stored_counts_in_the_trigger(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    """pipecat-ai/pipecat#5505 (the other side of the same trigger): the trigger measured the
    history against the whole window, as if the system prompt took no room.

    An agent's 600-token prompt leaves 400 tokens of a 1,000-token window: a compaction is
    requested after the turn whose history fills that room, before any window has to leave
    stored messages out, not only once the history alone nears the whole window."""
    settings = {
        "TOKEN_COUNTER": "tests.test_peer_compaction_reports.Words",
        "COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor",
        "COMPACTION_MODE": "inline",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 50,
    }
    conv = Conversation.objects.create(agent_key="prompt-heavy")
    with override_settings(AGENTMEMORY=settings):
        agent = PromptHeavyAgent(llm=ScriptedChatModel([words(70, "answer")] * 10))
        requested = []
        for i in range(5):
            with django_capture_on_commit_callbacks(execute=True):
                requested.append(agent.run(conv, words(70, f"q{i}")).compaction_enqueued)
    # each turn stores about 150 tokens: the third turn brings the history past 0.8 x 400
    assert requested[:2] == [False, False]
    assert True in requested[2:4]
    window = ContextWindowBuilder(conv, token_counter=Words()).build(400)
    assert window.summary_id is not None


def test_an_image_does_not_inflate_the_count_that_triggers_compaction() -> None:
    """open-webui/open-webui#29818 (related talesofai/cohub#122): inline base64 images were
    counted as text, so one screenshot read as a million tokens and fired compaction at once.

    An image part costs its image price, not its base64 length: no compaction is due."""
    counter = Words()
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=counter)
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(300_000)).decode()
    image = ContentPart(kind=PartKind.IMAGE, data=data, mime_type="image/png", width=512, height=512)
    history.add_message(
        ChatMessage.from_parts(Role.HUMAN, [ContentPart(kind=PartKind.TEXT, text="what is this?"), image])
    )
    stored = Message.objects.get(conversation=conv)
    assert stored.token_count < 2000
    comp = compactor(conv, ScriptedChatModel([]), counter)
    assert not comp.needs_compaction(max_tokens=10_000)


def test_a_failed_summary_is_retried_on_the_next_turn(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    """suitenumerique/conversations#421 (review): a summary that failed was only retried at the
    next multiple of the summary interval, leaving the window unbounded meanwhile.

    After a failed compaction, the very next turn asks for it again."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    llm = ScriptedChatModel([TransientLLMError("503 from the provider"), "S: four questions answered"])
    ScriptHolder.current = llm
    settings = {
        "COMPACTION_LLM": "tests.helpers_concurrency.scripted_model",
        "COMPACTION_MODE": "inline",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 4,
    }
    try:
        with override_settings(AGENTMEMORY=settings):
            history.add_messages(turns(4))
            with django_capture_on_commit_callbacks(execute=True):
                assert request_compaction(conv.pk, reason="turn 4").due
            conv.refresh_from_db()
            assert "TransientLLMError" in conv.compaction_error
            assert not Summary.objects.filter(conversation=conv).exists()
            history.add_messages(turns(1, start=4))  # the 5th human message: not a multiple of 4
            with django_capture_on_commit_callbacks(execute=True):
                assert request_compaction(conv.pk, reason="turn 5").due
    finally:
        ScriptHolder.current = None
    conv.refresh_from_db()
    assert conv.compaction_error == "" and conv.compaction_requested_at is None
    assert Summary.objects.get(conversation=conv).text == "S: four questions answered"


# --------------------------------------------------------------------------- the prompt


def test_the_summariser_sees_an_image_marker_not_its_base64() -> None:
    """myriade-ai/agentlys#347 (related openclaw/openclaw#131977): the summary prompt inlined
    every image as base64 and was refused as too long; elsewhere images vanished from the
    summariser's input without a trace.

    The summariser's prompt holds a marker for the image and the text beside it, not its data."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(40_000)).decode()
    history.add_message(
        ChatMessage.from_parts(
            Role.HUMAN,
            [
                ContentPart(kind=PartKind.TEXT, text="here is the chart of May"),
                ContentPart(kind=PartKind.IMAGE, data=data, mime_type="image/png"),
            ],
        )
    )
    history.add_messages([ChatMessage.ai("the chart shows a rise"), ChatMessage.human("and June?")])
    llm = ScriptedChatModel(["the user shared a chart of May showing a rise"])
    assert compactor(conv, llm).compact() is not None
    prompt = llm.calls[0][0][-1].content or ""
    assert "AAAAAAAA" not in prompt and "iVBOR" not in prompt
    assert "[image]" in prompt and "chart of May" in prompt


def test_the_summary_is_asked_for_in_the_conversation_language() -> None:
    """anomalyco/opencode#20156: the compaction summary always came back in English, and the
    agent went on in English after a compaction in a Portuguese conversation.

    The summariser's instructions ask for the language the conversation is held in."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages(
        [
            ChatMessage.human("Quero reservar uma mesa para quatro pessoas."),
            ChatMessage.ai("Para que dia?"),
            ChatMessage.human("Sexta-feira às oito."),
        ]
    )
    llm = ScriptedChatModel(["O utilizador quer uma mesa para quatro pessoas."])
    assert compactor(conv, llm).compact() is not None
    instructions = (llm.calls[0][0][0].content or "").lower()
    assert "same language as the conversation" in instructions


def test_a_reply_with_tool_calls_stores_only_its_text() -> None:
    """strands-agents/harness-sdk#4402: the summariser's reply was re-sent as a message with
    its non-text blocks (reasoning, tool use), and the provider refused the next request.

    A summariser reply that also calls a tool is stored as its text alone; the window's summary
    message carries no tool calls. A reply with tool calls and no text stores nothing."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(2), ChatMessage.human("next")])
    call = ToolCall(id="t1", name="save_note", arguments={"note": "x"})
    only_call = ChatResponse(message=ChatMessage.ai(None, [call]), finish_reason="tool_calls")
    with pytest.raises(InvalidSummaryError):
        compactor(conv, ScriptedChatModel([only_call])).compact()
    assert not Summary.objects.filter(conversation=conv).exists()
    both = ChatResponse(message=ChatMessage.ai("two questions answered", [call]), finish_reason="stop")
    summary = compactor(conv, ScriptedChatModel([both])).compact()
    assert summary is not None and summary.text == "two questions answered"
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    (message,) = summary_messages(window)
    assert message.tool_calls == () and message.parts == ()


def test_a_summary_cut_off_mid_stream_never_bounds_the_history() -> None:
    """danny-avila/LibreChat#15913: a summarising round that errored or was cut off kept its
    partial text, which then replaced all older history as if it were complete.

    A reply cut at the output limit is not stored; the earlier summary stays in force and the
    window still reaches back to it."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(2), ChatMessage.human("q2")])
    v1 = compactor(conv, ScriptedChatModel(["S1: two questions"])).compact()
    history.add_messages([ChatMessage.ai("a2"), *turns(2, start=3), ChatMessage.human("q5")])
    cut = ChatResponse(message=ChatMessage.ai("S2: two questions, then q2 and"), finish_reason="length")
    with pytest.raises(InvalidSummaryError):
        compactor(conv, ScriptedChatModel([cut])).compact()
    conv.refresh_from_db()
    assert conv.summary == v1 and Summary.objects.filter(conversation=conv).count() == 1
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    assert window.summary_id == v1.pk and window.first_seq == v1.through_seq + 1


# --------------------------------------------------------------------------- placement


def test_the_summary_sits_where_every_provider_accepts_it() -> None:
    """rossoctl/context-guru#112 (related NousResearch/hermes-agent#328): the summary was
    placed between user turns, as a system message the provider refused, or as a user message
    next to another user message.

    OpenAI: the pinned prompt, then the summary as a system message, then a user message.
    Anthropic: both in the system parameter, the messages starting on the user and
    alternating."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_message(ChatMessage.system("You are a travel agent."))
    history.add_messages([*turns(3), ChatMessage.human("and the return flight?")])
    compactor(conv, ScriptedChatModel(["S: three questions about a trip"])).compact()
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    openai = [to_openai(m) for m in window.messages]
    assert [m["role"] for m in openai[:3]] == ["system", "system", "user"]
    assert all(m["role"] != "system" for m in openai[2:])
    system, messages = to_anthropic(window.messages)
    assert isinstance(system, str) and system.startswith("You are a travel agent.")
    assert "S: three questions about a trip" in system
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))


def test_two_compactions_leave_one_summary_in_the_window() -> None:
    """NousResearch/hermes-agent#97321: the summary message could be inserted twice in one
    cycle, so the model read two summaries.

    After two compactions the window holds exactly one summary message: the newest, which
    extends the first."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(2), ChatMessage.human("q2")])
    compactor(conv, ScriptedChatModel(["S1"])).compact()
    history.add_messages([ChatMessage.ai("a2"), *turns(2, start=3), ChatMessage.human("q5")])
    s2 = compactor(conv, ScriptedChatModel(["S2"])).compact()
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    (message,) = summary_messages(window)
    assert message.metadata["summary_id"] == s2.pk and message.content.endswith("S2")


# --------------------------------------------------------------------------- storage


def test_every_message_stays_readable_after_compaction() -> None:
    """s2b-dev/smart-second-brain#434: after summarising, the chat view showed only the summary
    and the messages after it; the earlier ones were removed from the thread's messages.

    Compaction never deletes: the history still returns every message, in order; only the
    window leaves the folded ones to the summary."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(4), ChatMessage.human("q4")])
    before = [(m.seq, m.content) for m in history.get_messages()]
    summary = compactor(conv, ScriptedChatModel(["S: four questions"])).compact()
    assert [(m.seq, m.content) for m in PersistentChatHistory(conv).get_messages()] == before
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert all(m.seq is None or m.seq > summary.through_seq for m in window.messages)


@pytest.mark.django_db(transaction=True)
def test_the_summary_survives_a_restart() -> None:
    """aaif-goose/goose#3779: after an automatic summary and a reload, the earlier messages
    were gone and resuming failed; only part of the compacted state had been saved.

    A new process (fresh connections, no cached objects) finds the stored summary in force
    and every message still stored."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(3), ChatMessage.human("q3")])
    summary = compactor(conv, ScriptedChatModel(["S: three questions"])).compact()
    connections.close_all()  # what a restart leaves: nothing but the database
    reloaded = Conversation.objects.get(uuid=conv.uuid)
    window = ContextWindowBuilder(reloaded, token_counter=LengthTokenCounter()).build(100)
    assert window.summary_id == summary.pk
    assert [m.content for m in window.messages if m.seq is not None] == ["q3"]
    assert Message.objects.filter(conversation=reloaded).count() == 7


def test_messages_stored_while_the_summariser_works_are_kept() -> None:
    """iterate/iterate#1809 (related openai/openai-agents-python#4680): the compactor took a
    snapshot, summarised it, then replaced the history with the snapshot's result, dropping
    turns committed while the summary was being written.

    Messages appended while the model works are neither lost nor folded: they follow the
    summary in the window."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(3), ChatMessage.human("q3")])

    def while_working(messages: list[ChatMessage]) -> str:
        PersistentChatHistory(conv.pk, token_counter=LengthTokenCounter()).add_messages(
            [ChatMessage.ai("a3"), ChatMessage.human("q4 typed meanwhile")]
        )
        return "S: three questions"

    summary = compactor(conv, ScriptedChatModel([while_working])).compact()
    assert summary is not None and summary.through_seq == 6
    assert Message.objects.filter(conversation=conv).count() == 9
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    check(window, conv)
    assert [m.content for m in window.messages if m.seq is not None] == ["q3", "a3", "q4 typed meanwhile"]


# --------------------------------------------------------------------------- failures


def test_a_failed_first_compaction_leaves_the_conversation_whole(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    """gwdg/chat-ai#120: "summarize and replace" failed after the history had already been
    removed, leaving an empty conversation to retry on.

    A first compaction whose summariser fails stores nothing, deletes nothing, raises nothing
    into the caller, and the window still reaches the first message."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(4), ChatMessage.human("q4")])
    before = stored_rows(conv)
    ScriptHolder.current = ScriptedChatModel([LLMRefusalError("request too long", finish_reason="length")])
    settings = {
        "COMPACTION_LLM": "tests.helpers_concurrency.scripted_model",
        "COMPACTION_MODE": "inline",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 4,
    }
    try:
        with override_settings(AGENTMEMORY=settings), django_capture_on_commit_callbacks(execute=True):
            assert request_compaction(conv.pk, reason="summarize and replace").due
    finally:
        ScriptHolder.current = None
    conv.refresh_from_db()
    assert "LLMRefusalError" in conv.compaction_error
    assert stored_rows(conv) == before and not Summary.objects.filter(conversation=conv).exists()
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert window.first_seq == 1 and window.summary_id is None


def test_a_summariser_that_keeps_failing_is_not_called_on_every_sweep() -> None:
    """obra/episodic-memory#109 (related obra/episodic-memory#122): a summary that failed for
    good was attempted again on every sync, re-burning the same failing calls day after day.

    A compaction whose summariser is refused each time is retried with growing pauses: a
    sweep every minute for ten minutes asks the model a few times, not ten. A run asked for
    by hand still goes at once, and a success ends the pauses."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(4), ChatMessage.human("q4")])
    refusal = LLMRefusalError("declined", finish_reason="content_filter")
    llm = ScriptedChatModel([refusal] * 20)
    ScriptHolder.current = llm
    settings = {
        "COMPACTION_LLM": "tests.helpers_concurrency.scripted_model",
        "COMPACTION_MODE": "inline",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 4,
        "COMPACTION_LEASE_SECONDS": 60,
    }

    def minute_passes() -> None:
        minute = timedelta(seconds=60)
        Conversation.objects.filter(pk=conv.pk).update(
            compaction_failed_at=F("compaction_failed_at") - minute,
            compaction_requested_at=F("compaction_requested_at") - minute,
        )

    try:
        with override_settings(AGENTMEMORY=settings):
            request_compaction(conv.pk, wait=1, reason="turn")
            assert len(llm.calls) == 1
            for _ in range(10):  # the beat schedule: a sweep every minute
                minute_passes()
                sweep(enqueue=False)
            calls = len(llm.calls)
            # the request, then the sweeps of minutes 1, 3 and 7 (pauses of 2, 4, 8 minutes)
            assert calls == 4, f"{calls} summariser calls in ten sweeps"
            conv.refresh_from_db()
            assert conv.compaction_failures == calls and conv.compaction_requested_at is not None
            assert "LLMRefusalError" in conv.compaction_error
            assert conv.pk not in pending_compactions()  # pausing
            assert conv.pk in pending_compactions(backoff=False)
            ScriptHolder.current = ScriptedChatModel(["S: four questions answered"])
            call_command("compact_conversations", stdout=io.StringIO())  # by hand: at once
    finally:
        ScriptHolder.current = None
    conv.refresh_from_db()
    assert conv.summary is not None and conv.summary.text == "S: four questions answered"
    assert (conv.compaction_failures, conv.compaction_error, conv.compaction_failed_at) == (0, "", None)


# --------------------------------------------------------------------------- races


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_compactions_at_once_make_one_summariser_call() -> None:
    """earendil-works/pi#4203 (related google/adk-go#1234): calling compact while another
    compaction was in flight started a second one; both called the model and both appended a
    summary.

    Two compactions of one conversation from two connections at the same moment: one calls the
    model, the other finds the lease taken; one summary is stored."""
    conv = Conversation.objects.create()
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages([*turns(4), ChatMessage.human("q4")])
    started, release = threading.Event(), threading.Event()

    def slow(messages: list[ChatMessage]) -> str:
        started.set()
        release.wait(timeout=10)
        return "S: four questions"

    llm = ScriptedChatModel([slow, slow])
    results: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            results[name] = compactor(Conversation.objects.get(pk=conv.pk), llm).run().status
        finally:
            connections.close_all()

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert started.wait(timeout=10)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    second.join(timeout=10)
    release.set()
    first.join(timeout=10)
    assert results == {"first": "stored", "second": "busy"}
    assert len(llm.calls) == 1
    assert Summary.objects.filter(conversation=conv).count() == 1
