"""What an agent turn returns (``AgentRunResult``) and the events ``stream()`` yields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentmemory.context import ContextWindow
from agentmemory.formats.changes import SentChange
from agentmemory.llm.base import Usage
from agentmemory.messages import ChatMessage, ToolCall

__all__ = [
    "AIMessageEvent",
    "AgentEvent",
    "AgentRunResult",
    "FinalAnswer",
    "ModelCall",
    "ModelCallStarted",
    "StepStored",
    "ToolResultEvent",
    "TurnStarted",
    "add_usage",
]

#: ``AgentRunResult.stopped_reason`` values
STOP_ANSWER = "answer"
STOP_MAX_TOOL_ROUNDS = "max_tool_rounds"


def add_usage(a: Usage, b: Usage) -> Usage:
    """``a + b``, field by field (tokens)."""
    return a + b


@dataclass(frozen=True)
class ModelCall:
    """Accounting of one model call of a turn.

    Attributes:
        round: 0 for the first call of the turn, then one more per tool round.
        window: the ``ContextWindow`` sent (after the memory policy was applied), with its
            token accounting (``total_tokens``, ``system_tokens``, ``summary_tokens``,
            ``history_tokens``, ``first_seq``/``last_seq``, ``summary_id``).
        stubbed: seqs of tool results sent as stubs by their tool's memory policy.
        omitted: seqs left out by the memory policy (whole exchanges).
        usage: tokens of this call: as the provider reported them, or counted by the
            agent's token counter when it reported none (``usage_source`` says which).
        model, finish_reason: as the provider reported them.
        latency_s: wall time of the call (seconds).
        usage_source: ``"provider"`` or ``"counted"`` (``agentmemory.models.UsageSource``).
        sent_changes: what the adapter changed in the window's messages to meet the
            provider's limits (``ChatResponse.sent_changes``; ``message`` is a position in
            ``window.messages``), recorded with the call.
        record: the stored ``agentmemory.models.ModelCall`` row, once the step is stored
            (``None`` before, and when ``AGENTMEMORY['RECORD_MODEL_CALLS']`` is off).
    """

    round: int
    window: ContextWindow
    stubbed: tuple[int, ...] = ()
    omitted: tuple[int, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = ""
    latency_s: float = 0.0
    usage_source: str = "provider"
    record: Any = field(default=None, compare=False)
    sent_changes: tuple[SentChange, ...] = ()


@dataclass(frozen=True)
class AgentRunResult:
    """The outcome of one turn (``run``/``arun``, or the last event of ``stream``).

    Attributes:
        answer: the text of the final ``ai`` message (``""`` when the turn stopped on the
            tool-round bound without a text answer).
        messages: the messages stored by this turn, oldest first, with ``seq``, ``id`` and
            ``token_count`` set: the human message, each tool exchange (the ``ai`` message,
            then its results in ``tool_calls`` order), and the answer.
        usage: provider-reported tokens summed over the turn's model calls.
        calls: one ``ModelCall`` per model call, in order.
        rounds: tool rounds executed (model replies whose tool calls were run).
        stopped_reason: ``"answer"`` or ``"max_tool_rounds"``.
        conversation_id: primary key of the conversation.
        compaction_enqueued: whether ``compact_if_needed()`` scheduled a compaction.
    """

    answer: str
    messages: list[ChatMessage]
    usage: Usage
    calls: list[ModelCall]
    rounds: int
    stopped_reason: str
    conversation_id: int
    compaction_enqueued: bool = False

    @property
    def windows(self) -> list[ContextWindow]:
        """The context window of each model call, in order."""
        return [call.window for call in self.calls]

    @property
    def tool_results(self) -> list[ChatMessage]:
        """The stored tool results of the turn, in order."""
        return [m for m in self.messages if m.role == "tool"]


@dataclass(frozen=True)
class TurnStarted:
    """The human message was stored."""

    conversation_id: int
    message: ChatMessage


@dataclass(frozen=True)
class ModelCallStarted:
    """A model call is about to be made with ``window`` (after the memory policy)."""

    round: int
    window: ContextWindow
    tools: tuple[str, ...]


@dataclass(frozen=True)
class AIMessageEvent:
    """The model replied; ``message`` is not stored yet when it calls tools (an exchange is
    stored whole, after its results)."""

    round: int
    message: ChatMessage
    call: ModelCall


@dataclass(frozen=True)
class ToolResultEvent:
    """One tool call finished (``error`` when it failed: the text says why)."""

    round: int
    call: ToolCall
    message: ChatMessage
    error: bool


@dataclass(frozen=True)
class StepStored:
    """Messages of the turn were stored (a whole tool exchange, or the answer)."""

    round: int
    messages: list[ChatMessage]


@dataclass(frozen=True)
class FinalAnswer:
    """The turn is over; ``result`` is what ``run()`` returns."""

    result: AgentRunResult

    @property
    def answer(self) -> str:
        return self.result.answer


AgentEvent = TurnStarted | ModelCallStarted | AIMessageEvent | ToolResultEvent | StepStored | FinalAnswer
