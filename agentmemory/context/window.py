"""``ContextWindow``: what to send for one model call, with its accounting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, overload

from agentmemory.messages import ChatMessage, Role

#: at most this many seqs are listed in ``UncoveredMessages.seqs`` (the newest); the count
#: and the tokens are always exact
MAX_LISTED_SEQS = 1_000
#: how ``ContextWindow.truncated`` names the summary message when it was sent cut
SUMMARY_CUT = "summary"
#: the metadata key that marks the memory block's message (``ContextWindow.memory``); its
#: value is the number of recalled items in the block
MEMORY_BLOCK_KEY = "memory_block"


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
            there are more. Worked out on first access from the span of seqs and the seqs
            inside it that are not counted, so a window that leaves 100,000 messages out
            neither reads nor lists them unless asked.

    Immutable; two are equal when count, tokens and seqs are.
    """

    __slots__ = ("_excluded", "_seqs", "_span", "count", "tokens")

    count: int
    tokens: int
    _seqs: tuple[int, ...] | None
    _span: tuple[int, int] | None
    _excluded: frozenset[int]

    def __init__(self, count: int = 0, tokens: int = 0, seqs: tuple[int, ...] = ()) -> None:
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "_seqs", tuple(seqs))
        object.__setattr__(self, "_span", None)
        object.__setattr__(self, "_excluded", frozenset())

    @classmethod
    def from_span(
        cls, count: int, tokens: int, first: int, last: int, excluded: frozenset[int] = frozenset()
    ) -> UncoveredMessages:
        """The messages of the seqs ``first..last`` (inclusive, every one stored) but
        ``excluded``: ``count`` and ``tokens`` as given, ``seqs`` listed when first read."""
        made = cls(count, tokens)
        object.__setattr__(made, "_seqs", None)
        object.__setattr__(made, "_span", (first, last))
        object.__setattr__(made, "_excluded", excluded)
        return made

    @property
    def seqs(self) -> tuple[int, ...]:
        seqs = self._seqs
        if seqs is None:
            assert self._span is not None  # set whenever _seqs is None
            first, last = self._span
            excluded = self._excluded
            if not excluded:
                # Every seq of the span: the newest ``MAX_LISTED_SEQS`` of them in one step.
                seqs = tuple(range(max(first, last - MAX_LISTED_SEQS + 1), last + 1))
            else:
                newest: list[int] = []
                seq = last
                while seq >= first and len(newest) < MAX_LISTED_SEQS:
                    if seq not in excluded:
                        newest.append(seq)
                    seq -= 1
                seqs = tuple(reversed(newest))
            object.__setattr__(self, "_seqs", seqs)
        return seqs

    @property
    def seq_range(self) -> tuple[int, int] | None:
        """``(seqs[0], seqs[-1])``, the oldest and newest listed seqs (``None``: none),
        without listing them when they were given as a span of seqs."""
        span = self._span
        if self._seqs is None and span is not None and not self._excluded:
            first, last = span
            return (max(first, last - MAX_LISTED_SEQS + 1), last) if first <= last else None
        seqs = self.seqs
        return (seqs[0], seqs[-1]) if seqs else None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UncoveredMessages is immutable: cannot set {name!r}")

    def __bool__(self) -> bool:
        return self.count > 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UncoveredMessages):
            return NotImplemented
        return (self.count, self.tokens, self.seqs) == (other.count, other.tokens, other.seqs)

    def __hash__(self) -> int:
        return hash((self.count, self.tokens, self.seqs))

    def __repr__(self) -> str:
        return f"UncoveredMessages(count={self.count}, tokens={self.tokens}, seqs={self.seqs!r})"


NO_UNCOVERED = UncoveredMessages()


@dataclass(frozen=True)
class ContextWindow:
    """What to send for one model call, with its accounting.

    Attributes:
        messages: pinned system prompt, summary message, history; oldest first.
        max_tokens: the budget it was built for (tokens).
        system_tokens, summary_tokens, history_tokens: tokens of each part. ``system_tokens``
            is what the system message costs as sent, a knowledge block at its end included.
        knowledge_tokens: of ``system_tokens``, the knowledge block's share: the
            ``build_context()`` facts an agent with ``KNOWLEDGE_MEMORY_ENABLED`` puts at the
            end of its system prompt (the system message with them less the one without).
            Set on an agent's windows and on recorded ones (``recorded_context_window``); 0
            when the system prompt carries none, or the builder was given it whole.
        first_seq, last_seq: seqs of the oldest and newest history messages (None if empty).
        summary_id, summary_through_seq: the summary used, if any.
        skipped_orphans: seqs of stored tool results left out because they answer no call.
        skipped_pending: seqs of the messages of tool exchanges left out because a call still
            awaits its result (providers reject a call without its result); with
            ``PENDING_TOOL_CALLS = "placeholder"`` such exchanges are sent instead.
        skipped_late: seqs of tool results not sent because the exchange they answer is
            older than the window or folded into the summary.
        placeholders: ids of the tool calls sent with a placeholder result (never stored).
        truncated: what was sent as truncated copies (storage keeps it whole): ``"summary"``
            first when the summary message was cut (it has no seq), then the seqs of the
            messages sent cut, those holding only the truncation marker included
            (``marker_only_copy``).
        rows_read: metadata rows read from the message table.
        uncovered: stored messages in neither the window nor the summary
            (``UncoveredMessages``; empty when the builder's gap policy is "ignore" or
            the summary comes from a custom compactor whose coverage is unknown).
        compaction: the ``CompactionRequest`` the builder made to close a gap before
            building this window, or ``None``.
        memory: the memory block sent (``agentmemory.recall.memory.MemoryBlock``: its text,
            tokens and recalled items), or ``None`` when recall is off, found nothing, had no
            room or failed. Its message is the system message right after the summary (after
            the system prompt when there is no summary), marked with ``MEMORY_BLOCK_KEY`` in
            its metadata.
        memory_tokens: tokens of that message (0 without one).

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
    truncated: tuple[int | str, ...] = ()
    rows_read: int = 0
    uncovered: UncoveredMessages = NO_UNCOVERED
    compaction: Any = None
    memory: Any = None
    memory_tokens: int = 0
    knowledge_tokens: int = 0

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
        """Tokens of every message sent: ``system_tokens + summary_tokens + memory_tokens +
        history_tokens`` (the knowledge block is inside ``system_tokens``)."""
        return self.system_tokens + self.summary_tokens + self.memory_tokens + self.history_tokens

    @property
    def own_system_tokens(self) -> int:
        """The system prompt's own tokens: ``system_tokens`` less the knowledge block's
        (``knowledge_tokens``)."""
        return max(self.system_tokens - self.knowledge_tokens, 0)

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: every message but the system prompt, the summary and the memory
        block (stored
        messages, and the placeholder results of pending calls, which carry no seq).

        The system prompt is the leading run of system messages (the stored pinned ones, at
        whatever seqs, or one given to the builder, without a seq), then the summary and the
        memory block, system messages without a seq. A stored system message inside the history is never
        among them: the history starts on a human message."""
        messages = self.messages
        start = 0
        while start < len(messages) and messages[start].role is Role.SYSTEM:
            start += 1
        return messages[start:]
