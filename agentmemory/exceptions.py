"""Exceptions raised by agentmemory's services."""

from __future__ import annotations


class AgentMemoryError(Exception):
    """Base class of every error agentmemory raises on purpose."""


class InvalidMessageError(AgentMemoryError, ValueError):
    """A message was refused before anything was stored (invariant W3).

    Attributes:
        index: 0-based position of the offending message in the batch passed in.
        reason: a short, human-readable explanation.
    """

    def __init__(self, reason: str, *, index: int | None = None) -> None:
        self.index = index
        self.reason = reason
        where = f"message {index}: " if index is not None else ""
        super().__init__(f"{where}{reason}")


class ConversationNotFound(AgentMemoryError, LookupError):
    """The conversation does not exist (never did, or was deleted)."""


class ContextBudgetExceeded(AgentMemoryError):
    """The newest human message cannot fit in the token budget (invariant C8).

    Raised instead of silently returning a context without the user's latest request
    (bug report langchain-ai/langchainjs#8287).

    Also raised when the pinned system prompt and the summary alone exceed the budget
    (invariant C1); then ``seq`` is 1 (a stored prompt) or ``None`` and ``available`` is the
    whole budget.

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
        subject = what or (f"message seq={seq}" if seq is not None else "the newest turn")
        super().__init__(
            message
            or f"{subject} needs {tokens} tokens but only {available} are available "
            "in the context window; raise max_tokens, enable truncation "
            "(AGENTMEMORY['OVERSIZED_MESSAGE_POLICY'] = 'truncate') or shorten the input"
        )


class LLMError(AgentMemoryError):
    """A language model call failed in a way retrying will not fix (bad request, auth)."""


class TransientLLMError(LLMError):
    """A language model call failed in a way that may succeed later (429, 5xx, timeout)."""


class InvalidSummaryError(AgentMemoryError):
    """The summariser returned text that must not be stored (empty, too long, error text)."""
