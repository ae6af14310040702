"""Checks of the rules every context window keeps, for tests and replays: within its budget,
tool exchanges whole, history starting on a human message, system prompt and summary first,
and the newest contiguous run of history (holes only where a message is left out on purpose)."""

from __future__ import annotations

from collections.abc import Iterable

from agentmemory.context import ContextWindow
from agentmemory.messages import Role


def window_violations(
    window: ContextWindow,
    *,
    max_tokens: int | None = None,
    stored_seqs: Iterable[int] | None = None,
    newest_seq: int | None = None,
) -> list[str]:
    """Every way ``window`` breaks those rules, as readable strings (empty when it holds); each
    string starts with the rule's short label (C1 budget, C2 tool pairs, C3 human start, C4
    system messages first, C5 contiguous and newest).

    Args:
        window: the built window.
        max_tokens: the budget it was built for (defaults to ``window.max_tokens``).
        stored_seqs: seqs stored between the window's first and last history seq; with it
            the check that nothing in the middle is skipped runs (messages left out on
            purpose: orphaned results, pending exchanges, late results of older exchanges,
            are allowed holes).
        newest_seq: the conversation's newest seq; with it the check that the run is the
            newest runs.
    """
    problems: list[str] = []
    budget = window.max_tokens if max_tokens is None else max_tokens
    if window.total_tokens > budget:
        problems.append(f"C1: {window.total_tokens} tokens returned for a budget of {budget}")

    messages = window.messages
    history = window.history
    leading = messages[: len(messages) - len(history)]
    if any(m.role is not Role.SYSTEM for m in leading):
        problems.append("C4: a non-system message sits before the history")
    # The system prompt (the stored pinned run, oldest first, or one prompt without a seq),
    # then at most one summary, without a seq.
    stored = [m.seq for m in leading if m.seq is not None]
    unstored = [i for i, m in enumerate(leading) if m.seq is None]
    if stored != sorted(stored):
        problems.append(f"C4: pinned system messages {stored} are not in stored order")
    if len(unstored) > (1 if stored else 2) or (stored and unstored and unstored[0] < len(stored)):
        problems.append(
            f"C4: {len(leading)} system messages before the history "
            "(at most the system prompt, then the summary)"
        )

    # C2: each AI message with tool calls is followed directly by all of its results, in
    # tool_calls order; no tool result appears anywhere else.
    i = 0
    while i < len(history):
        m = history[i]
        if m.role is Role.TOOL:
            problems.append(
                f"C2: tool result seq={m.seq} ({m.tool_call_id}) without its call right before it"
            )
            i += 1
            continue
        if m.role is Role.AI and m.tool_calls:
            expected = [c.id for c in m.tool_calls]
            got = [r.tool_call_id for r in history[i + 1 : i + 1 + len(expected)] if r.role is Role.TOOL]
            if got != expected:
                problems.append(f"C2: ai seq={m.seq} calls {expected} but is followed by results {got}")
            i += 1 + len(got)
            continue
        i += 1

    if history and history[0].role is not Role.HUMAN:
        problems.append(f"C3: history starts on {history[0].role} seq={history[0].seq}, not a human message")

    if stored_seqs is not None and window.first_seq is not None and window.last_seq is not None:
        present = (
            {m.seq for m in history}
            | set(window.skipped_orphans)
            | set(window.skipped_pending)
            | set(window.skipped_late)
        )
        missing = sorted(
            s for s in stored_seqs if window.first_seq <= s <= window.last_seq and s not in present
        )
        if missing:
            problems.append(f"C5: stored messages {missing[:10]} skipped in the middle of the window")
    if newest_seq is not None and window.last_seq is not None:
        tail = set(window.skipped_orphans) | set(window.skipped_pending) | set(window.skipped_late)
        newer = [s for s in range(window.last_seq + 1, newest_seq + 1) if s not in tail]
        if newer:
            problems.append(f"C5: window ends at seq={window.last_seq} but seq={newer[0]} is newer")
    return problems
