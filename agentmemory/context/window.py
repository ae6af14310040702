"""``ContextWindow``: what to send for one model call, with its accounting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, overload

from agentmemory.messages import ChatMessage, Role

#: at most this many seqs are listed in ``UncoveredMessages.seqs`` (the newest); the count
#: and the tokens are always exact
MAX_LISTED_SEQS = 1_000


@dataclass(frozen=True, slots=True)
class UncoveredMessages:
    """Stored messages a window leaves out that the summary does not cover either.

    They sit after the summary's last seq (and after a pinned system prompt) and before
    the window's oldest history message. Tool results that answer no stored call and the
    messages of tool exchanges still waiting for a result are not counted: they are left
    out on purpose, and compaction does not fold a waiting exchange either.

    Attributes:
        count: how many messages (exact).
        tokens: their stored token counts added up (exact).
        seqs: their seqs, oldest first; only the newest ``MAX_LISTED_SEQS`` (1,000) when
            there are more.
    """

    count: int = 0
    tokens: int = 0
    seqs: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return self.count > 0


NO_UNCOVERED = UncoveredMessages()


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
        uncovered: stored messages in neither the window nor the summary
            (``UncoveredMessages``; empty when the builder's gap policy is "ignore" or
            the summary comes from a custom compactor whose coverage is unknown).
        compaction: the ``CompactionRequest`` the builder made to close a gap before
            building this window, or ``None``.

    A window iterates, indexes and measures (``len``) as its ``messages``, so it can be
    passed wherever a list of messages is expected.
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
    uncovered: UncoveredMessages = NO_UNCOVERED
    compaction: Any = None

    def __iter__(self) -> Iterator[ChatMessage]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __bool__(self) -> bool:
        return True  # a window is never "false", even with no messages

    @overload
    def __getitem__(self, index: int) -> ChatMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[ChatMessage]: ...
    def __getitem__(self, index: int | slice) -> ChatMessage | list[ChatMessage]:
        return self.messages[index]

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.summary_tokens + self.history_tokens

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: every message but the system prompt and the summary (stored
        messages, and the placeholder results of pending calls, which carry no seq)."""
        return [m for m in self.messages if not (m.role is Role.SYSTEM and (m.seq is None or m.seq == 1))]
