"""``ContextWindow``: what to send for one model call, with its accounting."""

from __future__ import annotations

from dataclasses import dataclass

from agentmemory.messages import ChatMessage, Role


@dataclass(frozen=True)
class ContextWindow:
    """What to send for one model call, with its accounting.

    Attributes:
        messages: pinned system prompt, summary message, history; oldest first.
        max_tokens: the budget it was built for (tokens).
        system_tokens, summary_tokens, history_tokens: tokens of each part.
        first_seq, last_seq: seqs of the oldest and newest history messages (None if empty).
        summary_id, summary_through_seq: the summary used, if any.
        skipped_orphans: seqs of stored tool results left out because they answer no call.
        skipped_incomplete: seqs of tool exchanges left out because calls lack results.
        truncated: seqs of messages sent as truncated copies (storage keeps them whole).
        rows_read: metadata rows read from the message table.
    """

    messages: list[ChatMessage]
    max_tokens: int
    system_tokens: int = 0
    summary_tokens: int = 0
    history_tokens: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    summary_id: int | None = None
    summary_through_seq: int | None = None
    skipped_orphans: tuple[int, ...] = ()
    skipped_incomplete: tuple[int, ...] = ()
    truncated: tuple[int, ...] = ()
    rows_read: int = 0

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.summary_tokens + self.history_tokens

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: messages that carry a seq, excluding the pinned system prompt."""
        return [m for m in self.messages if m.seq is not None and not (m.seq == 1 and m.role is Role.SYSTEM)]
