"""Token-limited context windows: pure packing, the window type, the builder and its SQL.

``packing`` chooses what fits (no database), ``window`` is the ``ContextWindow`` type,
``builder`` is the ``ContextWindowBuilder`` and ``sql`` its read path, reached through
``Message.objects.window_head()`` and friends.
"""

from agentmemory.context.builder import ContextWindowBuilder
from agentmemory.context.packing import (
    _META_FIELDS,
    TRUNCATION_MARKER,
    PackResult,
    RowMeta,
    marker_only_copy,
    pack_history,
    truncate_message,
)
from agentmemory.context.window import ContextWindow

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
