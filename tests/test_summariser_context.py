"""A summariser whose context window is smaller than the span it is given.

Peer reports: NousResearch/hermes-agent#7879 (a compaction model with a smaller context than
the main model failed with a context-length error and the middle turns were dropped),
cloudwego/eino#940 and langchain-ai/deepagents#5913 (the summarisation request itself
exceeded the summary model's window: 400 ``context_length_exceeded``, every later attempt the
same). Here the provider's "prompt too long" answer is a typed error
(``LLMContextLengthError``) and the compactor folds the span in smaller calls instead of
failing the same way on every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.exceptions import LLMContextLengthError, PermanentLLMError
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.base import ChatResponse
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary
from tests.fake_anthropic_server import error_body as anthropic_error
from tests.fake_openai_server import error_body as openai_error

pytestmark = pytest.mark.django_db

#: characters of message content the fake summariser accepts in one request
CONTEXT_CHARS = 2_500


def sent_chars(body: Any) -> int:
    """Characters of text in a chat request body (OpenAI or Anthropic shape)."""
    total = len(str(body.get("system") or "")) if isinstance(body, Mapping) else 0
    for message in body.get("messages") or () if isinstance(body, Mapping) else ():
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(str(part.get("text") or "")) for part in content if isinstance(part, Mapping))
    return total


def conversation(turns: int = 8, words: int = 60) -> tuple[Conversation, PersistentChatHistory]:
    conv = Conversation.objects.create(agent_key="support")
    history = PersistentChatHistory(conv)
    for i in range(turns):
        history.add_messages(
            [
                ChatMessage.human(f"question {i}: " + " ".join(["detail"] * words)),
                ChatMessage.ai(f"answer {i}: " + " ".join(["reply"] * words)),
            ]
        )
    history.add_messages([ChatMessage.human("the newest question")])
    return conv, history


def small_context_openai(fake_openai, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The fake server answers like OpenAI (and vLLM) when a request is over the window."""
    refuse = fake_openai.refusal

    def refusal(body: Any, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        if isinstance(body, Mapping) and sent_chars(body) > CONTEXT_CHARS:
            return 400, openai_error(
                f"This model's maximum context length is {CONTEXT_CHARS // 4} tokens. However, your "
                f"messages resulted in {sent_chars(body) // 4} tokens. Please reduce the length of "
                "the messages.",
                code="context_length_exceeded",
            )
        return refuse(body, headers)

    monkeypatch.setattr(fake_openai, "refusal", refusal)


def test_a_summariser_with_a_small_context_folds_the_span_in_smaller_calls(fake_openai, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """NousResearch/hermes-agent#7879: the compaction model's window is smaller than the span
    (here 8 turns, about 8,000 characters, against 2,500): the run still stores one summary
    through the last foldable message, every request it sent fits the window, and the newest
    question stays out of it."""
    from agentmemory.llm.openai import OpenAIChatModel

    small_context_openai(fake_openai, monkeypatch)
    for i in range(30):
        fake_openai.enqueue_text(f"summary part {i}")
    conv, history = conversation()
    llm = OpenAIChatModel(model="small-ctx", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    try:
        compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history)
        summary = compactor.compact()
    finally:
        llm.close()
    newest = Message.objects.filter(conversation=conv).order_by("-seq").first()
    assert summary is not None and summary.through_seq == newest.seq - 1
    accepted = [body for body in fake_openai.requests if sent_chars(body) <= CONTEXT_CHARS]
    assert len(accepted) >= 3  # the span went in several calls
    assert all("the newest question" not in str(body) for body in fake_openai.requests)
    # every message folded reached the summariser in an accepted request
    for i in range(8):
        assert any(f"question {i}:" in str(body) for body in accepted)
        assert any(f"answer {i}:" in str(body) for body in accepted)


def test_the_error_is_typed_by_each_adapter(fake_openai, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    """The adapters tell a prompt over the model's window from other 400s: OpenAI's error code
    ``context_length_exceeded``, vLLM's "maximum context length" (no code), Anthropic's
    "prompt is too long" (``invalid_request_error``); any other 400 stays a plain
    ``PermanentLLMError``."""
    from agentmemory.llm.anthropic import AnthropicChatModel
    from agentmemory.llm.openai import OpenAIChatModel
    from tests.fake_http import ScriptedReply

    openai = OpenAIChatModel(model="gpt-test", base_url=fake_openai.base_url, api_key="k", max_retries=0)
    anthropic = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    fake_openai.enqueue_error(400, "Too long.", type="invalid_request_error", code="context_length_exceeded")
    fake_openai.enqueue_error(
        400,
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages "
        "or completion.",
        type="BadRequestError",
    )
    fake_openai.enqueue_error(400, "Invalid value for 'temperature'.", type="invalid_request_error")
    fake_anthropic.enqueue(
        ScriptedReply(400, anthropic_error("prompt is too long: 234825 tokens > 200000 maximum"), {})
    )
    fake_anthropic.enqueue(ScriptedReply(400, anthropic_error("max_tokens: field required"), {}))
    hello = [ChatMessage.human("hello")]
    try:
        for llm in (openai, openai):
            with pytest.raises(LLMContextLengthError):
                llm.invoke(hello)
        with pytest.raises(PermanentLLMError) as plain:
            openai.invoke(hello)
        assert not isinstance(plain.value, LLMContextLengthError)
        with pytest.raises(LLMContextLengthError):
            anthropic.invoke(hello)
        with pytest.raises(PermanentLLMError) as plain:
            anthropic.invoke(hello)
        assert not isinstance(plain.value, LLMContextLengthError)
    finally:
        openai.close()
        anthropic.close()


def test_one_message_too_long_for_the_summariser_is_sent_shorter() -> None:
    """A single stored message larger than the summariser's window (a pasted document) is
    rendered cut, smaller at each overflow, instead of failing every run; the stored message
    stays whole."""
    conv = Conversation.objects.create(agent_key="support")
    history = PersistentChatHistory(conv)
    big = "document " * 2_000
    history.add_messages(
        [ChatMessage.human(big), ChatMessage.ai("noted"), ChatMessage.human("the newest question")]
    )

    def answer(messages: list[ChatMessage]) -> ChatResponse | Exception:
        if sum(len(m.text) for m in messages) > CONTEXT_CHARS:
            return LLMContextLengthError("prompt is too long")
        return ChatResponse(message=ChatMessage.ai("The user shared a document."), finish_reason="stop")

    llm = ScriptedChatModel([answer] * 20)
    summary = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history).compact()
    assert summary is not None and summary.text == "The user shared a document."
    assert Message.objects.get(conversation=conv, seq=summary.first_seq).content == big


def test_a_summariser_that_never_fits_fails_the_run_without_storing() -> None:
    """When even the smallest request overflows (a window smaller than the instructions), the
    run fails with the typed error after a bounded number of calls; nothing is stored and
    the messages stay as they were."""
    conv, history = conversation(turns=3, words=10)
    llm = ScriptedChatModel([LLMContextLengthError("prompt is too long")] * 200)
    with pytest.raises(LLMContextLengthError):
        LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history).compact()
    assert not Summary.objects.filter(conversation=conv).exists()
    assert len(llm.calls) <= 40


def test_the_langchain_adapter_types_it_too() -> None:
    """Through LangChain: its own ``ContextOverflowError``, and a provider SDK's 400 with
    ``context_length_exceeded`` raised inside the chat model, are ``LLMContextLengthError``."""
    from langchain_core.exceptions import ContextOverflowError

    from agentmemory.llm.langchain import LangChainChatModel
    from tests.test_llm_langchain import ScriptedToolModel

    class BadRequest(Exception):
        """Shaped like the openai SDK's ``BadRequestError``: a status and the error object."""

        status_code = 400
        body = {"message": "Too long.", "type": "invalid_request_error", "code": "context_length_exceeded"}

    wrapped = RuntimeError("the chain failed")
    wrapped.__cause__ = BadRequest("Error code: 400")
    model = LangChainChatModel(
        ScriptedToolModel(script=[ContextOverflowError("too long"), wrapped, ValueError("bad shape")])
    )
    for _ in range(2):
        with pytest.raises(LLMContextLengthError):
            model.invoke([ChatMessage.human("hi")])
    with pytest.raises(PermanentLLMError) as plain:
        model.invoke([ChatMessage.human("hi")])
    assert not isinstance(plain.value, LLMContextLengthError)
