"""Exceptions raised by agentmemory's services."""

from __future__ import annotations


class AgentMemoryError(Exception):
    """Base class of every error agentmemory raises on purpose."""


class InvalidMessageError(AgentMemoryError, ValueError):
    """A message was refused before anything was stored: a batch is stored whole or not at all.

    Attributes:
        index: 0-based position of the offending message in the batch passed in.
        reason: a short, human-readable explanation.
        field: the message field at fault, as the native message shape names it
            (``"content"``, ``"tool_calls"``, ``"parts"``...), or ``None`` when the reason is
            about the message as a whole. The API reports the reason under this field.
        hint: what a Python caller can do about it (an argument of the Python API), or
            ``None``; part of ``str(exc)``, left out of the API's answer (``summary``), whose
            clients have no such argument.
    """

    def __init__(
        self, reason: str, *, index: int | None = None, field: str | None = None, hint: str | None = None
    ) -> None:
        self.index = index
        self.reason = reason
        self.field = field
        self.hint = hint
        super().__init__(f"{self.summary()} ({hint})" if hint else self.summary())

    def summary(self) -> str:
        """The position and the reason, without the Python ``hint``: "message 2: ..."."""
        where = f"message {self.index}: " if self.index is not None else ""
        return f"{where}{self.reason}"

    def field_errors(self) -> dict[str, list[str]]:
        """``{field path within the message: [reasons]}``: ``{field: [reason]}``, with
        ``"non_field_errors"`` (DRF's key) when no field is at fault."""
        return {self.field or "non_field_errors": [self.reason]}


class ConversationNotFound(AgentMemoryError, LookupError):
    """The conversation does not exist (never did, or was deleted)."""


class MessageNotFound(AgentMemoryError, LookupError):
    """A message id is not a message of the conversation it was looked up in.

    Not a ``ConversationNotFound``: the conversation exists, so a caller that answers "no
    such conversation" (an HTTP 404 on the conversation) must not catch this by accident.
    """


#: below this many tokens of room even a truncated copy does not fit (the marker alone costs
#: about 27 tokens by the default counters), so the budget error does not suggest truncation
_TRUNCATION_FLOOR = 32


class ContextBudgetExceeded(AgentMemoryError):
    """The newest human message cannot fit in the token budget; it is never dropped silently.

    Raised instead of silently returning a context without the user's latest request
    (bug report langchain-ai/langchainjs#8287).

    Also raised when the pinned system prompt and the summary alone exceed the budget
    (a window never exceeds its budget); then ``seq`` is the seq of the first pinned system
    message (a stored prompt: ``Conversation.pinned_seq``) or ``None``, and ``available`` is
    the whole budget.

    Attributes:
        seq: the seq of the message (or first message of the unit) that does not fit.
        tokens: its size in tokens.
        available: the tokens left for it after the pinned system prompt and summary.
    """

    def __init__(
        self,
        *,
        seq: int | None,
        tokens: int,
        available: int,
        what: str | None = None,
        message: str | None = None,
    ) -> None:
        self.seq = seq
        self.tokens = tokens
        self.available = available
        if message is None:
            if what is not None:  # the fixed part: no truncation applies to it
                message = (
                    f"{what} need {tokens:,} tokens together, more than the whole context window "
                    f"(max_tokens={available:,}); raise max_tokens or shorten them"
                )
            else:
                subject = f"message seq={seq}" if seq is not None else "the newest turn"
                # Truncation helps only where there is room for more than its marker.
                hint = (
                    "raise max_tokens, enable truncation "
                    "(AGENTMEMORY['OVERSIZED_MESSAGE_POLICY'] = 'truncate') or shorten the input"
                    if available > _TRUNCATION_FLOOR
                    else "raise max_tokens or shorten the input"
                )
                message = (
                    f"{subject} needs {tokens:,} tokens, but only {available:,} are left for it in "
                    f"the context window after the system prompt and the summary; {hint}"
                )
        super().__init__(message)


class TurnTooLarge(ContextBudgetExceeded):
    """The turn in progress cannot be sent whole: its human and AI messages (tool-call
    arguments included, which are never cut) and its tool results at their shortest marked
    copies (cut to ``tool_result_floor``, or down to the truncation marker alone), with the
    shortest cut of the summary when one covers earlier messages, need more than the window
    has after the system prompt.

    Raised by ``ContextWindowBuilder.build()`` instead of sending a window without the
    turn's start, or one that leaves the messages before the turn in neither window nor
    summary (agents' gap policy "close"). A larger window, a shorter system prompt or a
    shorter tool loop (``MAX_TOOL_ROUNDS``) fixes it.

    Attributes (tokens unless said):
        first_seq, last_seq: the turn's seqs (its human message, its newest message).
        message_tokens: its human and AI messages.
        short_results, short_result_tokens: how many tool results are sent whole at the
            least (no longer than ``tool_result_floor`` nor than a marker-only copy), and
            their tokens.
        cut_results: how many longer tool results are counted cut to ``tool_result_floor``.
        tool_result_floor: the shortest cut copy of a tool result that keeps some of its text.
        marker_results, marker_result_tokens: how many tool results are counted as copies
            holding only the truncation marker, and their tokens (0 when the builder was
            not asked for truncated copies).
        summary_tokens: the summary the window must hold beside the turn (its shortest cut;
            0 when no summary covers messages before the turn).
        system_tokens: the system prompt.
        max_tokens: the window's budget.
    Also ``seq`` (= ``first_seq``), ``tokens`` (what the turn and summary need at least) and
    ``available`` (``max_tokens - system_tokens``), as ``ContextBudgetExceeded`` has them.
    """

    def __init__(
        self,
        *,
        first_seq: int,
        last_seq: int,
        message_tokens: int,
        short_results: int,
        short_result_tokens: int,
        cut_results: int,
        tool_result_floor: int,
        summary_tokens: int,
        system_tokens: int,
        max_tokens: int,
        marker_results: int = 0,
        marker_result_tokens: int = 0,
    ) -> None:
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.message_tokens = message_tokens
        self.short_results = short_results
        self.short_result_tokens = short_result_tokens
        self.cut_results = cut_results
        self.tool_result_floor = tool_result_floor
        self.summary_tokens = summary_tokens
        self.system_tokens = system_tokens
        self.max_tokens = max_tokens
        self.marker_results = marker_results
        self.marker_result_tokens = marker_result_tokens
        cut_tokens = cut_results * tool_result_floor
        needed = message_tokens + short_result_tokens + cut_tokens + marker_result_tokens + summary_tokens
        available = max_tokens - system_tokens
        floor = tool_result_floor
        parts = [f"{message_tokens:,} for its human and AI messages (tool-call arguments are never cut)"]
        if short_results:
            parts.append(f"{short_result_tokens:,} for {_results(short_results)} of at most {floor} tokens")
        if cut_results:
            parts.append(f"{cut_tokens:,} for {_results(cut_results)} cut to {floor} tokens each")
        if marker_results:
            parts.append(
                f"{marker_result_tokens:,} for {_results(marker_results)} sent as the truncation marker alone"
            )
        if summary_tokens:
            parts.append(f"{summary_tokens:,} for the shortest cut of the summary of the earlier messages")
        after = (
            f"after the {system_tokens:,} tokens of the system prompt"
            if system_tokens
            else "(no system prompt)"
        )
        super().__init__(
            seq=first_seq,
            tokens=needed,
            available=available,
            message=(
                f"the newest turn (seqs {first_seq}..{last_seq}), which a window sends whole, needs at "
                f"least {needed:,} tokens: {'; '.join(parts)}; but max_tokens={max_tokens:,} leaves "
                f"{available:,} for it {after}. Raise the window's max_tokens, or shorten the system "
                "prompt (an agent: or its tool loop, MAX_TOOL_ROUNDS)"
            ),
        )


def _results(count: int) -> str:
    return f"{count} tool result" if count == 1 else f"{count} tool results"


class LLMError(AgentMemoryError):
    """A language model call failed. The two kinds below say whether retrying may help;
    catch ``LLMError`` to handle both."""


class TransientLLMError(LLMError):
    """A language model call failed in a way that may succeed later: rate limits (HTTP 429),
    overload and server errors (5xx, Anthropic's 529), 408/409, timeouts, connection errors.
    Celery tasks retry it with backoff."""


class PermanentLLMError(LLMError):
    """A language model call failed in a way retrying will not fix: a bad request, failed
    authentication, a missing SDK, a reply that cannot be used. Never retried automatically."""


#: The older name of ``PermanentLLMError``, kept importable.
LLMRequestError = PermanentLLMError


class LLMRefusalError(PermanentLLMError):
    """The provider declined to answer: OpenAI's ``finish_reason`` ``"content_filter"`` or a
    ``refusal`` in the reply, Anthropic's ``stop_reason`` ``"refusal"``. Known from the
    provider's response, never guessed from the reply's wording.

    Attributes:
        finish_reason: the provider's finish or stop reason.
    """

    def __init__(self, message: str, *, finish_reason: str = "") -> None:
        self.finish_reason = finish_reason
        super().__init__(message)


class LLMContextLengthError(PermanentLLMError):
    """The request is longer than the model's context window, as the provider said so:
    OpenAI's error code ``context_length_exceeded`` (also sent by Azure and LM Studio),
    vLLM's "maximum context length is N tokens", Anthropic's ``invalid_request_error``
    "prompt is too long: N tokens > M maximum" (API errors reference), or HTTP 413. Retrying
    the same request fails the same way; a smaller one may not: the compactor folds the span
    in smaller calls (NousResearch/hermes-agent#7879, langchain-ai/deepagents#5913)."""


class InvalidSummaryError(AgentMemoryError):
    """The summariser's output must not be stored: empty, still over ``MAX_SUMMARY_TOKENS``
    after condensing, an echo of the prompt, cut off at the model's output limit, or text no
    database can store. Retrying the same input would give the same kind of output, so tasks
    record it instead of retrying."""


class StructuredOutputError(InvalidSummaryError):
    """A structured summariser reply (the summary with the facts of its messages) that does
    not match its schema: not one JSON object, a missing or extra key, a wrong type, a fact
    citing a message outside the span. Nothing of it is stored, neither the summary nor any
    fact; the compactor asks again once, then the run fails like any unusable summary
    (recorded, retried later with the sweep's backoff).

    Attributes:
        problems: where the reply departs from the schema ("path: problem" lines).
    """

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        self.problems = problems
        super().__init__(message)


class WindowUnavailable(LookupError):
    """The window of a recorded call cannot be rebuilt: not a chat call, its conversation
    was deleted, or a message or text it sent is no longer stored
    (``ModelCall.window()``, ``agentmemory.calls.recorded_window``)."""
