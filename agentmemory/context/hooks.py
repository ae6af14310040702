"""The two steps the window builder hands to layers above it, connected when the app is
ready (``AgentMemoryConfig.ready()``), so that the context layer imports nothing above it
(docs/architecture.md):

- the gap closer: with gap policy "close", ``ContextWindowBuilder.build`` hands the build to
  ``agentmemory.closing.build_closing_gap`` (a compaction first, then the window again);
- the memory recall: the memory block of a window (``memory_recall=True``) comes from
  ``agentmemory.recall.memory.recall_memory``, which composes message recall and knowledge
  facts.

A host may connect its own (same signatures); nothing else should need to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = ["connect_gap_closer", "connect_memory_recall", "gap_closer", "memory_recall"]

_gap_closer: Callable[..., Any] | None = None
_memory_recall: Callable[..., Any] | None = None


def connect_gap_closer(closer: Callable[..., Any]) -> None:
    """Use ``closer(builder, max_tokens, *, max_messages)`` (returns a ``ContextWindow``)
    for builds with gap policy "close"."""
    global _gap_closer
    _gap_closer = closer


def connect_memory_recall(recall: Callable[..., Any]) -> None:
    """Use ``recall(**arguments of recall_memory)`` (returns a ``MemoryBlock`` or ``None``)
    for the memory block of a window."""
    global _memory_recall
    _memory_recall = recall


def gap_closer() -> Callable[..., Any]:
    """The connected gap closer.

    Raises:
        ImproperlyConfigured: none is connected (the app is not in ``INSTALLED_APPS`` or not
            ready yet).
    """
    if _gap_closer is None:
        raise ImproperlyConfigured("gap policy 'close' needs the agentmemory app ready (INSTALLED_APPS)")
    return _gap_closer


def memory_recall() -> Callable[..., Any]:
    """The connected memory recall.

    Raises:
        ImproperlyConfigured: none is connected (as ``gap_closer``).
    """
    if _memory_recall is None:
        raise ImproperlyConfigured("a memory block needs the agentmemory app to be ready (INSTALLED_APPS)")
    return _memory_recall
