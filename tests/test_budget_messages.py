"""The words of a context budget error (``ContextBudgetExceeded``, ``TurnTooLarge``, the
context endpoint's 422): what needs how many tokens, and what the budget leaves for it, said
in so many words."""

from __future__ import annotations

import pytest

from agentmemory.exceptions import ContextBudgetExceeded, TurnTooLarge
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation


def turn_too_large(*, system_tokens: int, max_tokens: int) -> str:
    return str(
        TurnTooLarge(
            first_seq=1,
            last_seq=4,
            message_tokens=40,
            short_results=0,
            short_result_tokens=0,
            cut_results=2,
            tool_result_floor=64,
            summary_tokens=0,
            system_tokens=system_tokens,
            max_tokens=max_tokens,
        )
    )


def test_a_turn_too_large_says_what_the_budget_leaves_after_the_system_prompt() -> None:
    text = turn_too_large(system_tokens=1_256, max_tokens=3_000)
    assert "needs at least 168 tokens: 40 for its human and AI messages" in text
    assert "but max_tokens=3,000 leaves 1,744 for it after the 1,256 tokens of the system prompt" in text
    assert "(1,256 of 3,000 tokens)" not in text


def test_a_turn_too_large_without_a_system_prompt_says_there_is_none() -> None:
    text = turn_too_large(system_tokens=0, max_tokens=5)
    assert "but max_tokens=5 leaves 5 for it (no system prompt)" in text
    assert "(0 of 5 tokens)" not in text and "the window has 5" not in text


def test_a_message_too_large_says_what_is_left_for_it_and_after_what() -> None:
    text = str(ContextBudgetExceeded(seq=7, tokens=16_011, available=2_000))
    assert text.startswith("message seq=7 needs 16,011 tokens, but only 2,000 are left for it ")
    assert "after the system prompt and the summary" in text
    fixed = str(
        ContextBudgetExceeded(seq=None, tokens=120, available=100, what="the system prompt and summary")
    )
    assert fixed.startswith("the system prompt and summary need 120 tokens together, more than the whole ")
    assert "max_tokens=100" in fixed


@pytest.mark.django_db
def test_the_context_endpoint_says_it_in_its_422(api, user) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    call = ToolCall(id="c1", name="lookup_order", arguments={"order_id": "A-1001"})
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Where is A-1001?"),
            ChatMessage.ai(None, [call]),
            ChatMessage.tool("shipped " * 300, tool_call_id="c1", name="lookup_order"),
            ChatMessage.ai("It has shipped."),
        ]
    )
    response = api.get(f"/api/conversations/{conv.uuid}/context/?max_tokens=5")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "but max_tokens=5 leaves 5 for it (no system prompt)" in detail, detail
