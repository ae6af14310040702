"""A summariser that writes its reasoning into the reply (``<think>...</think>``).

Reasoning models served without a reasoning parser (DeepSeek-R1 distills, Qwen3, QwQ on
Ollama, vLLM, llama.cpp) put their chain of thought at the start of the message content, in
a ``<think>`` block. Peer reports: SciPhi-AI/R2R#2123 and langgenius/dify#38587 (the stored
summary held the model's thinking), mnemosyne-oss/mnemosyne#192 (memory consolidation
polluted by Qwen3's thought tokens), skorokithakis/stavrobot#28 (a reply of thinking only,
no text, stored as the summary). The summary and the facts are the answer after the block;
a reply that is thinking only is an empty summary, never stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from agentmemory.agents import BaseToolCallingAgent, registry
from agentmemory.compaction import STORED, LLMMemoryCompactor
from agentmemory.exceptions import InvalidSummaryError
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.llm.structured import decode_json, without_reasoning
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Summary
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

THINKING = (
    "<think>\nOkay, the user wants a summary. Let me look at the messages. The user said they "
    "moved to Lisbon. I should keep the date.\n</think>\n\n"
)


def conversation(owner: Any = None, agent_key: str = "support") -> Conversation:
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("I moved to Lisbon in March."),
            ChatMessage.ai("Lisbon is lovely!"),
            ChatMessage.human("What should I cook tonight?"),
        ]
    )
    return conv


def compact(conv: Conversation, llm: Any) -> Summary | None:
    return LLMMemoryCompactor(Conversation.objects, conv.pk, llm, PersistentChatHistory(conv)).compact()


def test_the_thinking_before_the_summary_is_not_stored() -> None:
    conv = conversation()
    summary = compact(conv, ScriptedChatModel([THINKING + "The user moved to Lisbon in March."]))
    assert summary is not None and summary.text == "The user moved to Lisbon in March."


def test_a_reply_of_thinking_only_is_not_a_summary() -> None:
    """The model spent the reply thinking (an unclosed block, or nothing after it)."""
    for reply in ("<think>\nLet me see, the user moved to", THINKING):
        conv = conversation()
        with pytest.raises(InvalidSummaryError, match="empty"):
            compact(conv, ScriptedChatModel([reply]))
        assert not Summary.objects.filter(conversation=conv).exists()


def test_thinking_is_also_left_out_when_the_summary_must_be_condensed() -> None:
    conv = conversation()
    long = " ".join(["Lisbon"] * 3_000)
    llm = ScriptedChatModel([THINKING + long, THINKING + "The user moved to Lisbon."])
    summary = compact(conv, llm)
    assert summary is not None and summary.text == "The user moved to Lisbon."


class FlushAgent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "reasoning-flush-agent"
    KNOWLEDGE_MEMORY_ENABLED = True


def test_the_summary_with_facts_is_read_after_the_thinking() -> None:
    """The structured call of the memory flush, asked of a model in the prompt: the JSON
    follows the thinking block; the summary and the facts are stored from it."""
    registry.register(FlushAgent)
    try:
        user = UserFactory()
        conv = conversation(user, FlushAgent.AGENT_KEY)
        answer = {
            "summary": "Caroline moved to Lisbon in March.",
            "facts": [
                {
                    "content": "Caroline's home city: Lisbon",
                    "category": "personal",
                    "source": 1,
                    "persistent": True,
                    "importance": 0.6,
                }
            ],
        }
        with override_settings(AGENTMEMORY={"MEMORY_FLUSH": "always"}):
            summary = LLMMemoryCompactor(
                Conversation.objects,
                conv.pk,
                ScriptedChatModel([THINKING + json.dumps(answer)]),
                PersistentChatHistory(conv),
            ).run()
        assert summary.status == STORED and summary.summary.text == "Caroline moved to Lisbon in March."
        assert [f.content for f in KnowledgeMemory(user).live_facts()] == ["Caroline's home city: Lisbon"]
    finally:
        registry.unregister(FlushAgent.AGENT_KEY)


def test_without_reasoning_takes_only_a_leading_block() -> None:
    assert without_reasoning(THINKING + "answer") == "answer"
    assert without_reasoning("<thinking>x</thinking>answer") == "answer"
    assert without_reasoning("  <think></think>answer") == "answer"
    assert without_reasoning("<think>unfinished") == ""
    # a block later in the text is part of the answer (a summary may quote one)
    assert without_reasoning("The user pasted <think>x</think> in a prompt.") == (
        "The user pasted <think>x</think> in a prompt."
    )
    assert without_reasoning("plain") == "plain"
    assert decode_json(THINKING + '{"a": 1}') == {"a": 1}
    assert decode_json(THINKING + '```json\n{"a": 1}\n```') == {"a": 1}


def test_windlass_summary_memory_keeps_only_a_finished_answer() -> None:
    """The compat ``SummaryMemory`` made its summary from the reply text alone: a reply the
    provider cut at its output limit (``finish_reason`` "length", danny-avila/LibreChat#15913)
    or refused (openclaw/openclaw#115413: a failure on the success path) became the running
    summary, and a reasoning block was kept in it. Now those replies are failures (logged,
    the window used alone, tried again on the next ``get``) and the thinking is left out."""
    from agentmemory.compat.windlass import Message as WMessage
    from agentmemory.compat.windlass import SummaryMemory
    from agentmemory.llm.base import ChatResponse

    cut = ChatResponse(message=ChatMessage.ai("The user asked about order 1"), finish_reason="length")
    refused = ChatResponse(message=ChatMessage.ai("I can't help with that."), finish_reason="content_filter")
    llm = ScriptedChatModel([cut, refused, THINKING + "The user asked about orders 0 to 3."])
    m = SummaryMemory(llm=llm, window=1, summarize_every=1, thread_id="t")
    m.add([WMessage.user(f"order {i}") for i in range(3)], thread_id="t")
    assert m.get(thread_id="t")[0].content == "order 2"  # cut off: not kept
    m.add(WMessage.user("order 3"), thread_id="t")
    assert m.get(thread_id="t")[0].content == "order 3"  # refused: not kept
    assert m.summary(thread_id="t") == ""
    m.add(WMessage.user("order 4"), thread_id="t")
    assert m.get(thread_id="t")[0].content.endswith("\nThe user asked about orders 0 to 3.")
    assert m.summary(thread_id="t") == "The user asked about orders 0 to 3."
