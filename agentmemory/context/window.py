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
        skipped_pending: seqs of the messages of tool exchanges left out because a call still
            awaits its result (providers reject a call without its result); with
            ``PENDING_TOOL_CALLS = "placeholder"`` such exchanges are sent instead.
        skipped_late: seqs of tool results not sent because the exchange they answer is
            older than the window or folded into the summary.
        placeholders: ids of the tool calls sent with a placeholder result (never stored).
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
    skipped_pending: tuple[int, ...] = ()
    skipped_late: tuple[int, ...] = ()
    placeholders: tuple[str, ...] = ()
    truncated: tuple[int, ...] = ()
    rows_read: int = 0

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.summary_tokens + self.history_tokens

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: every message but the system prompt and the summary (stored
        messages, and the placeholder results of pending calls, which carry no seq)."""
        return [m for m in self.messages if not (m.role is Role.SYSTEM and (m.seq is None or m.seq == 1))]
