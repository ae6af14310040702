"""The context window's answer bounded in bytes, as every other answer of the API is.

A window's budget is in tokens, and its answer is larger than its tokens by the keys each
message carries: 200,000 one-word messages at ``max_tokens=1000000`` answered 27.5 MB in the
native format (17 s), 30.2 MB in LangChain's, and the window a model call recorded with that
budget as much (the admin's page of it, 42 MB). A window whose answer is over
``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` is built again with fewer history messages, the
newest that fit, as ``max_messages`` cuts it (whole tool exchanges, starting on a human
message); its ``uncovered`` report lists the stored messages it left out. A recorded window
cannot be built again: its oldest messages are left out of the answer, which says how many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentmemory.api.pagination import json_size
from agentmemory.api.serializers.messages import ANTHROPIC
from agentmemory.api.serializers.windows import MIN_ENTRY_BYTES, history_sizes
from agentmemory.context import ContextWindow
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import ChatMessage, Role

#: most times a window is built again to fit (each cut is sized from the one before, and an
#: Anthropic answer, whose merged messages take less than alone, may need a second)
MAX_REBUILDS = 4


def message_cap(budget: int, shape: str) -> int:
    """Most history messages an answer of ``budget`` bytes in ``shape`` can hold: a window of
    more is over the bound whatever they say, so it is never read whole. Each history message
    takes at least an empty one's bytes (in Anthropic's shape, where messages of one role are
    merged, an empty text block's)."""
    floor = MIN_ENTRY_BYTES
    if shape != ANTHROPIC:
        empty = [ChatMessage.human(""), ChatMessage.ai(""), ChatMessage.system("")]
        floor = max(floor, min(history_sizes(_Sample(empty), shape)))
    return max(budget // floor, 1)


class _Sample:
    """Messages standing for a window's history, to size them (``history_sizes``)."""

    def __init__(self, history: list[ChatMessage]) -> None:
        self.history = history


def bounded_window(
    build: Callable[[int | None], ContextWindow],
    serialize: Callable[[ContextWindow], dict[str, Any]],
    *,
    budget: int,
    shape: str,
    max_messages: int | None,
) -> dict[str, Any]:
    """The serialized answer of the window ``build(max_messages)`` makes, in at most
    ``budget`` bytes (compact JSON) when it can be: over it, built again with as many of its
    newest history messages as fit. The newest turn is always sent whole, even alone over the
    bound (as a page always holds one item).

    Args:
        build: makes the window with at most that many history messages (``None``: no cap).
        serialize: the answer's data for a window.
        budget: bytes the answer may take.
        shape: the message format of the answer (``native``, ``openai``...).
        max_messages: the caller's own cap, or ``None``.

    Raises:
        ContextBudgetExceeded: from the first build only (the newest turn cannot fit the
            token budget); a smaller build that cannot hold the newest turn keeps the one before.
    """
    cap = message_cap(budget, shape)
    limit = cap if max_messages is None else min(max_messages, cap)
    window = build(limit)
    data = serialize(window)
    for _ in range(MAX_REBUILDS):
        over = json_size(data) - budget
        history = len(window.history)
        if over <= 0 or history <= 1:
            break
        # the newest turn, from its human message on, is never cut
        humans = [i for i, message in enumerate(window.history) if message.role == Role.HUMAN]
        turn_start = humans[-1] if humans else history - 1
        dropped = freed = 0
        for size in history_sizes(window, shape)[:turn_start]:
            if freed >= over:
                break
            freed += size
            dropped += 1
        if not dropped:
            break
        try:
            smaller = build(history - dropped)
        except ContextBudgetExceeded:
            break  # fewer messages cannot hold the newest turn: it is sent as it is
        if len(smaller.history) >= history:
            break
        window, data = smaller, serialize(smaller)
    return data


def bounded_record(
    window: ContextWindow,
    serialize: Callable[[ContextWindow, int], dict[str, Any]],
    *,
    budget: int,
    shape: str,
) -> dict[str, Any]:
    """The serialized answer of a recorded call's ``window`` (what it sent, which cannot be
    built again smaller), in at most ``budget`` bytes when it can be: over it, its oldest
    history messages are left out, from a human message on, and ``serialize(window,
    left_out)`` says how many. The newest turn is always sent whole.

    Args:
        window: the window the call sent.
        serialize: the answer's data for a window and the number of history messages left out.
        budget: bytes the answer may take.
        shape: the message format of the answer.
    """
    history = window.history
    head = window.messages[: len(window.messages) - len(history)]
    humans = [i for i, message in enumerate(history) if message.role == Role.HUMAN]
    newest_turn = humans[-1] if humans else max(len(history) - 1, 0)

    def start_after(dropped: int) -> int:
        """The first human message at or after ``dropped``, never past the newest turn."""
        return next((i for i in humans if i >= dropped), newest_turn)

    left_out = start_after(max(len(history) - message_cap(budget, shape), 0)) if humans else 0
    cut = replace(window, messages=head + history[left_out:])
    data = serialize(cut, left_out)
    for _ in range(MAX_REBUILDS):
        over = json_size(data) - budget
        if over <= 0 or left_out >= newest_turn:
            break
        dropped = freed = 0
        for size in history_sizes(cut, shape):
            if freed >= over:
                break
            freed += size
            dropped += 1
        left_out = start_after(left_out + dropped)
        cut = replace(window, messages=head + history[left_out:])
        data = serialize(cut, left_out)
    return data
