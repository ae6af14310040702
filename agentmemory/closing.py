"""Close a window's gap with a compaction first: the step an agent loop takes before a
model call, kept out of the read path.

``ContextWindowBuilder`` only reads: it builds a window and reports what the window leaves
in neither itself nor the summary (``ContextWindow.uncovered``). With gap policy "close"
(``AGENTMEMORY['CONTEXT_GAP_POLICY']``, the agents' default), the caller asks for a
compaction through the compaction door (``request_compaction(force=True,
wait=AGENTMEMORY['COMPACTION_WAIT_SECONDS'])``: inline where compaction runs inline, else
enqueued and awaited) and builds once more; ``build_closing_gap`` is that step. The agent
loop (``agentmemory.agents.base.Agent.build_window``) and the API's context view call it;
``ContextWindowBuilder.build`` passes a builder whose policy is "close" to it, so callers
that build such a window themselves get the same result.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agentmemory import compaction
from agentmemory.conf import app_settings

if TYPE_CHECKING:
    from agentmemory.context.builder import ContextWindowBuilder
    from agentmemory.context.window import ContextWindow

__all__ = ["abuild_closing_gap", "build_closing_gap"]


def build_closing_gap(
    builder: ContextWindowBuilder, max_tokens: int | None = None, *, max_messages: int | None = None
) -> ContextWindow:
    """The window of ``builder`` (budget ``max_tokens`` tokens, default
    ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``; at most ``max_messages`` history
    messages), after a compaction when the first window leaves stored messages in neither
    itself nor the summary, the builder's gap policy is "close" and a compactor can cover
    them (``builder.can_compact``). The window built again over the new summary carries the
    request in ``compaction``; when it leaves a gap again behind a summary that advanced
    (turns of the same conversation appended while the compaction ran), the compaction is
    asked for again, within ``COMPACTION_WAIT_SECONDS`` in all. What is still left out is
    reported as by ``build`` (``messages_left_out``, with the compaction's error in
    ``reason``). A gap left beside the turn in progress is never compacted: compaction does
    not fold the newest turn.

    Raises:
        TypeError, ValueError, ConversationNotFound, ContextBudgetExceeded, TurnTooLarge:
            as ``ContextWindowBuilder.build``.
    """
    max_tokens, max_messages = builder.limits(max_tokens, max_messages)
    return builder.complete(max_tokens, max_messages, partial(_closed_window, builder))


def _closed_window(builder: ContextWindowBuilder, max_tokens: int, max_messages: int | None) -> ContextWindow:
    """The window of ``builder`` after a compaction where it leaves a gap (see
    ``build_closing_gap``), what it still leaves out reported."""
    window, summary_cut = builder.fit(max_tokens, max_messages)
    request = None
    deadline = 0.0
    while window.uncovered and not summary_cut and builder.gap_policy == "close" and builder.can_compact:
        folded = window.summary_through_seq
        if request is None:
            deadline = time.monotonic() + app_settings().COMPACTION_WAIT_SECONDS
            request = _request_compaction(builder, max_tokens)
        else:
            request = _request_compaction(builder, max_tokens, wait=max(deadline - time.monotonic(), 0.0))
        # Built as any window over the summary just made: one that leaves no room for the
        # turn beside it is cut, or refused with the sizes, as it would be a moment later.
        window, summary_cut = builder.fit(max_tokens, max_messages)
        window = replace(window, compaction=request)
        # Turns of the same conversation running at once (another process, another
        # thread) append while this one waits, and the summary a run made may end before
        # them: the gap reopens behind a summary that moved on. Ask again while the summary
        # advances and the wait lasts; a failed or idle compaction ends the loop.
        advanced = (window.summary_through_seq or 0) > (folded or 0)
        if getattr(request, "error", None) or not advanced or time.monotonic() >= deadline:
            break
    return builder.report(
        window, builder.left_out_reason(window, summary_cut=summary_cut, compaction=request)
    )


def _request_compaction(builder: ContextWindowBuilder, max_tokens: int, wait: float | None = None) -> Any:
    """The compaction door (``request_compaction``) for ``builder``'s conversation, forced,
    waited on for ``wait`` seconds (default ``COMPACTION_WAIT_SECONDS``; a second request
    of one window gets what is left of it), with the budget and system prompt the window is
    built with, so that the summary is made for it."""
    return compaction.request_compaction(
        builder.conversation_id,
        max_tokens=max_tokens,
        system_tokens=builder.system_tokens,
        force=True,
        wait=app_settings().COMPACTION_WAIT_SECONDS if wait is None else wait,
        compactor_class=builder.compactor_class,
        reason="context window gap",
    )


async def abuild_closing_gap(
    builder: ContextWindowBuilder, max_tokens: int | None = None, *, max_messages: int | None = None
) -> ContextWindow:
    """``build_closing_gap`` in a worker thread, for async callers."""
    return await sync_to_async(build_closing_gap)(builder, max_tokens, max_messages=max_messages)
