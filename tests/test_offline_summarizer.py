"""The offline compactor: labelled, bounded, accumulating like an LLM summary would, and built
from the messages themselves (no prompt is parsed)."""

import pytest
from django.test import override_settings

from agentmemory.compaction import LLMMemoryCompactor, OfflineMemoryCompactor, build_compactor
from agentmemory.llm.offline import OFFLINE_LABEL, OFFLINE_MODEL
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation
from agentmemory.tokens import ApproximateTokenCounter
from tests.factories import conversation_with_turns


def _summarise(previous: str | None, messages: list[ChatMessage], max_tokens: int = 300) -> str:
    compactor = OfflineMemoryCompactor(None, 1, None, max_summary_tokens=max_tokens)
    draft = compactor.summarize(previous, messages)
    assert draft.model == OFFLINE_MODEL and draft.input_tokens == draft.output_tokens == 0
    return draft.text


def test_output_says_it_is_not_an_llm_summary() -> None:
    text = _summarise(None, [ChatMessage.human("Where is order 1042?")])
    assert text.startswith(OFFLINE_LABEL)
    assert "Where is order 1042?" in text


def test_previous_offline_items_and_tools_are_kept() -> None:
    first = _summarise(None, [ChatMessage.human("Where is order 1042?")])
    calls = [ToolCall(id="c1", name="lookup_order", arguments={"order_id": "1042"})]
    second = _summarise(first, [ChatMessage.human("Cancel it."), ChatMessage.ai(None, calls)])
    assert "Where is order 1042?" in second and "Cancel it." in second and "lookup_order" in second


def test_a_previous_llm_summary_is_carried_forward() -> None:
    text = _summarise("The user (Chen Jackson) wants a refund for order 7.", [ChatMessage.human("Any news?")])
    assert "Chen Jackson" in text and "Any news?" in text


def test_output_stays_within_the_stated_limit() -> None:
    messages = [ChatMessage.human(f"question number {i} about the delivery of my order") for i in range(200)]
    text = _summarise(None, messages, max_tokens=100)
    assert ApproximateTokenCounter().count_text(text) <= 100
    assert "question number 199" in text  # the newest items are the ones kept


def test_text_that_looks_like_the_prompt_is_summarised_as_text() -> None:
    # The old offline model parsed the prompt's wording, so a user message that looked like
    # a prompt line ("User: ...", "- item") was taken for structure; now it is just text.
    text = _summarise(None, [ChatMessage.human("User: pretend\n- not an item\nPrevious summary: none")])
    assert text.count("\n- ") == 1
    assert "User asked: User: pretend - not an item Previous summary: none" in text


@pytest.mark.django_db
def test_offline_compactor_is_used_when_no_model_is_configured(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    conv, _ = conversation_with_turns(3)
    with override_settings(AGENTMEMORY={}):
        compactor = build_compactor(conv.pk)
        assert type(compactor) is OfflineMemoryCompactor and compactor.llm is None
        summary = compactor.compact()
    assert summary is not None and summary.text.startswith(OFFLINE_LABEL)
    assert summary.model == OFFLINE_MODEL
    assert Conversation.objects.get(pk=conv.pk).summary == summary
    with override_settings(AGENTMEMORY={"COMPACTION_LLM": "tests.helpers_concurrency.FixedSummaryModel"}):
        assert type(build_compactor(conv.pk)) is LLMMemoryCompactor
