"""The offline summariser: labelled, bounded, and accumulating like an LLM summary would."""

from agentmemory.compaction import SUMMARY_INSTRUCTIONS, render_transcript
from agentmemory.llm.offline import OFFLINE_LABEL, OfflineSummarizer
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.tokens import ApproximateTokenCounter


def _summarise(previous: str | None, messages: list[ChatMessage], max_tokens: int = 300) -> str:
    prompt = (
        f"Previous summary:\n{previous or '(none yet)'}\n\nNew messages:\n{render_transcript(messages)}\n\n"
        "Write the updated summary."
    )
    instructions = ChatMessage.system(SUMMARY_INSTRUCTIONS.format(max_tokens=max_tokens))
    return OfflineSummarizer().invoke([instructions, ChatMessage.human(prompt)]).message.text


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
