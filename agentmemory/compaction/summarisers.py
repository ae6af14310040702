"""The stock compactors: ``LLMMemoryCompactor`` (a ``ChatModel`` writes the summary) and
``OfflineMemoryCompactor`` (a labelled extractive summary, no model)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from agentmemory.compaction import flush as memory_flush
from agentmemory.compaction.compactors import BaseMemoryCompactor
from agentmemory.compaction.prompts import CONDENSE_INSTRUCTIONS, SUMMARY_INSTRUCTIONS, render_transcript
from agentmemory.compaction.state import SummaryDraft
from agentmemory.exceptions import InvalidSummaryError, LLMRefusalError, PermanentLLMError
from agentmemory.llm.base import ChatResponse, OutputSchema, Usage
from agentmemory.llm.facts import FactDraft
from agentmemory.llm.offline import OFFLINE_MODEL, extractive_summary
from agentmemory.llm.structured import invoke_structured, without_reasoning
from agentmemory.messages import ChatMessage
from agentmemory.models import ModelCallKind
from agentmemory.recording import USAGE_COUNTED, USAGE_PROVIDER, record_call


class LLMMemoryCompactor(BaseMemoryCompactor):
    """Writes summaries with a ``ChatModel``: previous summary plus the new messages only
    (incremental), validated, condensed when over ``max_summary_tokens`` (BUG-13).

    A reply the provider marks as refused (OpenAI's ``finish_reason`` ``"content_filter"``
    or a ``refusal``, Anthropic's ``stop_reason`` ``"refusal"``) raises ``LLMRefusalError``;
    a reply cut at the output token limit (``"length"``, ``"max_tokens"``) raises
    ``InvalidSummaryError``: its end, with the newest facts, is missing. A reasoning block
    opening the reply (``<think>...</think>``, ``agentmemory.llm.structured.without_reasoning``)
    is not part of the summary; a reply that is only thinking is an empty summary.

    When the run keeps facts (the memory flush, ``agentmemory.flush``), one structured call
    returns the summary and the facts together (``agentmemory.flush.summarize_with_facts``):
    a reply that does not match the schema is asked again once (``max_format_attempts``),
    then fails the run with ``StructuredOutputError`` (nothing stored).
    """

    max_condense_attempts = 2
    #: structured calls per span before a malformed reply fails the run
    max_format_attempts = 2

    def _call(
        self,
        instructions: str,
        prompt: str,
        span: Sequence[ChatMessage] = (),
        *,
        output: OutputSchema | None = None,
    ) -> tuple[str, ChatResponse]:
        """One summariser call: plain, or structured when ``output`` is given
        (``agentmemory.llm.structured.invoke_structured``); recorded, and checked for a
        refusal or a cut-off reply.

        Raises:
            LLMRefusalError, InvalidSummaryError: as the class docstring says.
            TransientLLMError, PermanentLLMError: from the model.
        """
        if self.llm is None:
            raise PermanentLLMError("LLMMemoryCompactor needs an llm")
        messages = [ChatMessage.system(instructions), ChatMessage.human(prompt)]
        started = time.monotonic()
        if output is None:
            response = self.llm.invoke(messages)
        else:
            response = invoke_structured(self.llm, messages, output)
        self._record(messages, response, time.monotonic() - started, span)
        if response.refused:
            raise LLMRefusalError(
                f"the summariser {response.model or ''} declined to summarise "
                f"(finish reason {response.finish_reason!r})",
                finish_reason=response.finish_reason,
            )
        if response.cut_off:
            raise InvalidSummaryError(
                "the summary was cut off at the model's output limit "
                f"(finish reason {response.finish_reason!r})"
            )
        # a reasoning model's thinking before its answer is not the summary (``without_reasoning``)
        return without_reasoning(response.message.text), response

    def _record(
        self, sent: list[ChatMessage], response: ChatResponse, latency: float, span: Sequence[ChatMessage]
    ) -> None:
        """Record the summariser call (``ModelCall`` of kind "compaction"): usage as the
        provider reported it, else counted with the compactor's counter and marked."""
        usage, source = response.usage, USAGE_PROVIDER
        if usage is None:
            counter = self.token_counter
            reply = response.message.text
            if not reply and response.parsed is not None:  # a forced tool call's input
                reply = json.dumps(response.parsed, ensure_ascii=False)
            usage = Usage(
                input_tokens=sum(counter.count_message(m) for m in sent),
                output_tokens=counter.count_text(reply),
            )
            source = USAGE_COUNTED
        seqs = [m.seq for m in span if m.seq is not None]
        record_call(
            ModelCallKind.COMPACTION,
            model=response.model or getattr(self.llm, "model_name", ""),
            usage=usage,
            usage_source=source,
            conversation_id=self.conversation_id,
            latency=round(latency, 6),
            finish_reason=response.finish_reason,
            first_seq=min(seqs) if seqs else None,
            last_seq=max(seqs) if seqs else None,
        )

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        facts: tuple[FactDraft, ...] = ()
        if self.flush is not None and self.flush.extract:
            text, facts, responses = memory_flush.summarize_with_facts(self, previous, messages)
            response = responses[-1]
        else:
            # A message larger than the span's budget is a chunk of its own: cut to the budget.
            transcript = render_transcript(
                messages, token_counter=self.token_counter, max_tokens_per_message=self.max_input_tokens
            )
            prompt = (
                f"Previous summary:\n{previous or '(none yet)'}\n\n"
                f"New messages:\n{transcript}\n\n"
                "Write the updated summary."
            )
            text, response = self._call(
                SUMMARY_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), prompt, messages
            )
            responses = [response]
        usage = sum((r.usage or Usage() for r in responses), Usage())
        usage_in, usage_out, calls = usage.input_tokens, usage.output_tokens, len(responses)
        text = self.validate(text)
        attempts = 0
        while self.text_tokens(text) > self.max_summary_tokens and attempts < self.max_condense_attempts:
            attempts += 1
            text, response = self._call(
                CONDENSE_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), text, messages
            )
            usage = response.usage or Usage()
            usage_in += usage.input_tokens
            usage_out += usage.output_tokens
            calls += 1
            text = self.validate(text)
        if self.text_tokens(text) > self.max_summary_tokens:
            raise InvalidSummaryError(
                f"summary still over {self.max_summary_tokens} tokens after {attempts} condensing attempts"
            )
        return SummaryDraft(
            text=text,
            model=response.model or getattr(self.llm, "model_name", ""),
            input_tokens=usage_in,
            output_tokens=usage_out,
            llm_calls=calls,
            facts=facts,
        )


class OfflineMemoryCompactor(BaseMemoryCompactor):
    """A labelled, extractive compactor used when no language model is configured.

    It calls no model: the summary starts with ``agentmemory.llm.offline.OFFLINE_LABEL`` and
    lists what the user asked, what the assistant said and which tools ran, one line each,
    with speakers' names and the dates they spoke, newest kept first when the list outgrows
    ``max_summary_tokens`` (counted with the configured token counter). With the memory flush
    it finds first-person facts by simple rules (``agentmemory.llm.offline.extract_facts``)
    and marks them as found without a model. It lets compaction, storage and context windows be seen
    working on a machine without API keys; configure a model (``COMPACTION_LLM``, ``LLMS``,
    ``OPENAI_API_KEY``/``ANTHROPIC_API_KEY``) for real summaries.
    """

    prompt_version = "offline-extractive-v2"

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        text = extractive_summary(previous, messages, max_tokens=self.max_summary_tokens)
        facts = self.flush.offline_facts(messages) if self.flush is not None and self.flush.extract else ()
        return SummaryDraft(text=self.validate(text), model=OFFLINE_MODEL, llm_calls=1, facts=facts)
