"""Token-limited context windows: pure packing, the window type, the builder and its SQL.

``packing`` chooses what fits (no database), ``window`` is the ``ContextWindow`` type,
``builder`` is the ``ContextWindowBuilder``; its read statements live a floor down, in
``agentmemory.store.window``.
"""

from agentmemory.context.builder import ContextWindowBuilder
from agentmemory.context.packing import (
    TRUNCATION_MARKER,
    PackResult,
    RowMeta,
    marker_only_copy,
    pack_history,
    truncate_message,
)
from agentmemory.context.window import ContextWindow
from agentmemory.store.rows import _META_FIELDS

__all__ = [
    "TRUNCATION_MARKER",
    "_META_FIELDS",
    "ContextWindow",
    "ContextWindowBuilder",
    "PackResult",
    "RowMeta",
    "marker_only_copy",
    "pack_history",
    "truncate_message",
]
