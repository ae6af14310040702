"""Counting a text far longer than any window sends of it reads a bounded part of it.

A model reply of 128 tool calls each returning 2 MB took about 84 s, most of it in tiktoken
counting every character of every result for storage, though a window sends at most
``MAX_TOOL_RESULT_TOKENS`` of each. Counters now count a text of up to 65,536 characters
whole and estimate a longer one from eight spans of 4,096 characters (``bounded_count``), on
the high side. Pinned here by what the tokenizer reads, not by time."""

from __future__ import annotations

import base64
import random
from functools import lru_cache
from typing import Any

import pytest

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.agents.config import AgentConfig, MemoryConfig
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.tokens import ApproximateTokenCounter, BaseTokenCounter, TiktokenCounter
from tests.test_agents import calls, reply

#: the most characters of one text a counter reads (a text counted whole)
READ_PER_TEXT = 65_536
#: what it reads of a longer text: eight spans of 4,096 characters
READ_OF_LONG_TEXT = 8 * 4_096

PROSE = ("The quick brown fox jumps over the lazy dog near the river bank. " * 31_000)[:2_000_000]
NO_SPACES = "x" * 2_000_000
BASE64 = base64.b64encode(random.Random(7).randbytes(1_500_000)).decode()
#: English first, then a denser script: the start alone would under-count it
ENGLISH_THEN_CJK = ("hello world " * 10_000) + ("漢字仮名交じり文" * 100_000)


class SpyEncoding:
    """A tiktoken encoding that records the length of every text it encodes."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.lengths: list[int] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        return self.encoding.encode_ordinary(text)


def spied_counter() -> tuple[TiktokenCounter, SpyEncoding]:
    counter = TiktokenCounter("cl100k_base")
    spy = SpyEncoding(counter._encoding)
    counter._encoding = spy
    return counter, spy


@lru_cache(maxsize=16)
def exact(text: str) -> int:
    """The whole text's count by tiktoken (a second or so for the long ones: counted once)."""
    return len(TiktokenCounter("cl100k_base")._encoding.encode_ordinary(text))


@pytest.mark.parametrize(
    ("text", "above"),
    # English then Chinese: the densest span's rate is taken for the whole text
    [(PROSE, 1.01), (NO_SPACES, 1.01), (BASE64, 1.02), (ENGLISH_THEN_CJK, 1.15)],
    ids=["prose", "no-spaces", "base64", "english-then-cjk"],
)
def test_a_long_text_is_counted_over_a_bounded_part_on_the_high_side(text, above):
    counter, spy = spied_counter()
    tokens = counter.count_text(text)
    assert sum(spy.lengths) <= READ_OF_LONG_TEXT
    real = exact(text)
    assert real <= tokens <= real * above
    # a message holding it is counted the same way, with its framing
    spy.lengths.clear()
    message = ChatMessage.tool(text, tool_call_id="c1", name="dump")
    assert counter.count_message(message) >= real
    assert sum(spy.lengths) <= READ_OF_LONG_TEXT + 100


def test_a_text_up_to_the_bound_is_counted_exactly():
    counter, spy = spied_counter()
    text = PROSE[:65_536]
    assert counter.count_text(text) == exact(text)
    assert spy.lengths == [65_536]
    # just past it, estimated from spans of it
    spy.lengths.clear()
    assert exact(PROSE[:70_000]) <= counter.count_text(PROSE[:70_000]) <= exact(PROSE[:70_000]) * 1.05
    assert sum(spy.lengths) == READ_OF_LONG_TEXT


def test_the_estimate_reads_a_bounded_part_with_any_counter():
    """A counter of the project's own (``BaseTokenCounter`` with its ``count_text``) is given
    bounded parts by ``count_message``; the estimating counter bounds its own ``count_text``."""

    class Recording(BaseTokenCounter):
        id = "recording"

        def __init__(self) -> None:
            self.lengths: list[int] = []

        def count_text(self, text: str) -> int:
            self.lengths.append(len(text))
            return len(text) // 4

    counter = Recording()
    assert counter.count_message(ChatMessage.human(PROSE)) >= len(PROSE) // 4
    assert sum(counter.lengths) <= READ_OF_LONG_TEXT + 10
    approx = ApproximateTokenCounter()
    assert approx.count_text(PROSE) in range(exact(PROSE), int(exact(PROSE) * 1.1))


@tool
def dump(kind: str) -> str:
    """Return a large dump."""
    return {
        "prose": PROSE,
        "no_spaces": NO_SPACES,
        "fifty_megabytes": "y " * 25_000_000,
    }[kind]


class Dumper(BaseToolCallingAgent, register=False):
    AGENT_KEY = "dumper-test"
    SYSTEM_PROMPT = "You read dumps."
    TOOLS = [dump]
    CONVERSATION_HISTORY_TOKEN_LIMIT = 60_000


@pytest.mark.django_db
def test_a_turn_of_huge_tool_results_counts_what_a_window_can_send():
    """A reply calling for 2 MB of prose, 2 MB without a space and 50 MB: the tokenizer reads
    a bounded part of each result (not 54 MB), the results are stored whole up to
    ``MAX_MESSAGE_CHARS`` (2,000,000) and cut there with a note, the stored counts err on the
    high side, and the next model call's window is cut to ``MAX_TOOL_RESULT_TOKENS`` and
    valid."""
    counter, spy = spied_counter()
    config = AgentConfig(memory=MemoryConfig(token_counter=counter), llm=None)
    kinds = ["prose", "no_spaces", "fifty_megabytes", "prose"]
    llm = ScriptedChatModel(
        [reply(calls(*[(f"c{i}", "dump", {"kind": k}) for i, k in enumerate(kinds)])), "done"]
    )
    conv = Conversation.objects.create(agent_key="dumper-test")

    result = Dumper(llm=llm, config=config).run(conv, "read the dumps")

    assert result.answer == "done"
    # What the tokenizer read over the whole turn: storage counts each result once, and the
    # second window cuts each to MAX_TOOL_RESULT_TOKENS by a binary search over at most
    # 4,000 * 32 characters (``longest_fitting_prefix``: 18 counts at most), each count
    # bounded too. It was every character of every result, twice and more.
    assert max(spy.lengths) <= READ_PER_TEXT
    assert sum(spy.lengths) <= len(kinds) * (READ_OF_LONG_TEXT + 18 * READ_PER_TEXT)
    rows = {m.tool_call_id: m for m in Message.objects.filter(conversation=conv, role=Role.TOOL)}
    assert rows["c0"].content == PROSE and rows["c1"].content == NO_SPACES
    cut = rows["c2"].content
    assert len(cut) == 2_000_000
    assert cut.endswith("[cut here: 50,000,000 characters, over the 2,000,000 stored]")
    for call_id, text in (("c0", PROSE), ("c1", NO_SPACES)):
        assert exact(text) <= rows[call_id].token_count <= exact(text) * 1.1 + 20
    # the second call: every result sent as a copy cut to MAX_TOOL_RESULT_TOKENS (4,000)
    window = result.calls[1].window
    assert window_violations(window) == []
    sent = [m for m in window.messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in sent] == ["c0", "c1", "c2", "c3"]
    assert all(m.truncated and "truncated for the context window" in m.content for m in sent)
    assert all(exact(m.content) <= 4_000 for m in sent)
    assert llm.calls[1][0] == window.messages


@pytest.mark.django_db
def test_a_window_over_a_huge_stored_message_stays_within_its_budget():
    """Stored through the history (an API append, an import): counted on the high side, cut in
    the copy a window sends, and the window adds up by the counter."""
    conv = Conversation.objects.create()
    counter, spy = spied_counter()
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages([ChatMessage.human("summarise this"), ChatMessage.ai("a moment")])
    [stored] = history.add_messages([ChatMessage.human(NO_SPACES)])
    assert sum(spy.lengths) <= READ_OF_LONG_TEXT + 100
    assert stored.token_count >= exact(NO_SPACES)
    window = ContextWindowBuilder(conv, token_counter=counter, oversized_message_policy="truncate").build(
        max_tokens=20_000
    )
    assert window_violations(window) == []
    [human] = window.messages
    assert human.truncated and exact(human.content) <= 20_000
