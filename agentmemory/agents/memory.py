"""Per-tool memory policy: what later context windows keep of a tool's exchanges.

Applied by the agent to each window after ``ContextWindowBuilder`` built it, to exchanges of
earlier turns only: the model always sees the results it asked for in the current turn.
Storage is never changed (building a window never writes); only the copy sent to the model is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from agentmemory.agents.tools import MemoryPolicy
from agentmemory.context import ContextWindow
from agentmemory.messages import ChatMessage, Role
from agentmemory.tokens import TokenCounter

__all__ = ["STUB_TEXT", "PolicyOutcome", "apply_memory_policy"]

STUB_TEXT = "[result of {name} omitted from memory]"


@dataclasses.dataclass(frozen=True)
class PolicyOutcome:
    """The window to send, and which stored seqs the policy stubbed or left out."""

    window: ContextWindow
    stubbed: tuple[int, ...] = ()
    omitted: tuple[int, ...] = ()


def _cost(message: ChatMessage, counter: TokenCounter) -> int:
    # Truncated copies were budgeted at their own size, stored messages at the stored count.
    if message.truncated or message.token_count is None:
        return counter.count_message(message)
    return message.token_count


def apply_memory_policy(
    window: ContextWindow,
    *,
    policy_for: Callable[[str], MemoryPolicy] | Mapping[str, MemoryPolicy],
    before_seq: int,
    counter: TokenCounter,
) -> PolicyOutcome:
    """Stub or leave out tool exchanges stored before ``before_seq``, by tool policy.

    Args:
        window: the built window (its tool exchanges are whole, results in ``tool_calls`` order).
        policy_for: the ``MemoryPolicy`` of a tool name (a mapping or a function); tools not
            found replay.
        before_seq: the seq of the current turn's human message; exchanges at or after it
            are always replayed.
        counter: recounts stubbed messages for the window's accounting.

    Rules:
        - ``stub``: the result's content becomes ``"[result of NAME omitted from memory]"``;
          the call and the pair stay. The stub is a copy (``truncated`` True) and its seq is
          listed in the window's ``truncated``, as the copies the builder cut are.
        - ``omit``: the AI message and all its results are left out, but only when every call
          of that AI message is ``omit`` and another AI message of the same turn follows it
          (so every human message keeps a reply after it); otherwise it falls back to
          ``stub`` for those results. A window never holds half an exchange, still starts on
          a human message and only shrinks (it stays within its budget).
    """
    lookup = policy_for.get if isinstance(policy_for, Mapping) else policy_for

    def policy(name: str) -> MemoryPolicy:
        value = lookup(name)
        return MemoryPolicy(value) if value else MemoryPolicy.REPLAY

    history = window.history
    leading = window.messages[: len(window.messages) - len(history)]
    # Exchanges as (start index, end index exclusive) in history, oldest first.
    exchanges: list[tuple[int, int]] = []
    i = 0
    while i < len(history):
        m = history[i]
        if m.role is Role.AI and m.tool_calls:
            j = i + 1
            while j < len(history) and history[j].role is Role.TOOL:
                j += 1
            exchanges.append((i, j))
            i = j
        else:
            i += 1

    drop: set[int] = set()
    stub: set[int] = set()
    for start, end in reversed(exchanges):
        ai = history[start]
        if ai.seq is None or ai.seq >= before_seq:
            continue
        policies = {policy(call.name) for call in ai.tool_calls}
        next_kept = next((k for k in range(end, len(history)) if k not in drop), None)
        followed_by_ai = next_kept is not None and history[next_kept].role is Role.AI
        if policies == {MemoryPolicy.OMIT} and followed_by_ai:
            drop.update(range(start, end))
            continue
        for k in range(start + 1, end):
            if policy(history[k].name or _call_name(ai, history[k].tool_call_id)) is not MemoryPolicy.REPLAY:
                stub.add(k)

    if not drop and not stub:
        return PolicyOutcome(window=window)
    kept: list[ChatMessage] = []
    tokens = window.history_tokens
    for k, message in enumerate(history):
        if k in drop:
            tokens -= _cost(message, counter)
            continue
        if k in stub:
            name = message.name or _call_name(history[_owner(exchanges, k)], message.tool_call_id)
            replaced = dataclasses.replace(message, content=STUB_TEXT.format(name=name), truncated=True)
            tokens += counter.count_message(replaced) - _cost(message, counter)
            message = replaced
        kept.append(message)
    stubbed, omitted = _seqs(history, stub), _seqs(history, drop)
    # A stub is a copy sent in place of the stored result, as a cut one is: it is listed
    # in ``truncated`` with them (the window's accounting said nothing of it), and a copy
    # left out is no longer sent.
    cut = {t for t in window.truncated if isinstance(t, int) and t not in omitted} | set(stubbed)
    truncated: tuple[int | str, ...] = (*(t for t in window.truncated if isinstance(t, str)), *sorted(cut))
    new_window = dataclasses.replace(
        window, messages=[*leading, *kept], history_tokens=tokens, truncated=truncated
    )
    return PolicyOutcome(window=new_window, stubbed=stubbed, omitted=omitted)


def _seqs(history: list[ChatMessage], indexes: set[int]) -> tuple[int, ...]:
    return tuple(sorted(seq for k in indexes if (seq := history[k].seq) is not None))


def _call_name(ai: ChatMessage, call_id: str) -> str:
    return next((c.name for c in ai.tool_calls if c.id == call_id), "")


def _owner(exchanges: list[tuple[int, int]], index: int) -> int:
    return next(start for start, end in exchanges if start < index < end)
