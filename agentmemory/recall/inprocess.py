"""Embedding of appended messages in process (a host without a Celery broker), bounded so
that an embedding service that hangs costs an append no more than one that refuses.

Without a broker, ``enqueue_message_embedding`` embeds the new messages after the append's
transaction commits, in the caller's thread. An OpenAI-compatible endpoint that accepts
the connection and never answers held every append for the embedder's whole ``timeout``
(30 s by default: an API append answered after 31.9 s, five appends took 152 s), where a
refused connection costs about 0.4 s. Here the call is bounded by
``INPROCESS_EMBED_TIMEOUT_SECONDS`` and, once it failed, in-process embedding is skipped for
``INPROCESS_EMBED_COOLDOWN_SECONDS``: the messages skipped are stored without vectors and
``manage.py rebuild_recall_index`` embeds them later. A Celery worker's ``embed_messages``
task keeps the embedder's own timeout and retries.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any

from agentmemory.recall.embedders import EmbeddingError

logger = logging.getLogger("agentmemory.recall")

#: seconds one in-process append-time embedding request may take (an embedder with a
#: ``timeout`` attribute, such as ``OpenAICompatibleEmbedder``, gets at most this one)
INPROCESS_EMBED_TIMEOUT_SECONDS = 2.0
#: seconds in-process append-time embedding is skipped after it failed (logged once)
INPROCESS_EMBED_COOLDOWN_SECONDS = 60.0

_lock = threading.Lock()
#: (embedder settings, monotonic time until which in-process embedding is skipped)
_paused: tuple[Any, float] | None = None


def _embedder_key() -> Any:
    """The configured embedder (dotted path and options): a pause applies to it alone."""
    from agentmemory.conf import app_settings

    conf = app_settings()
    return (conf.EMBEDDER, repr(sorted(conf.EMBEDDER_OPTIONS.items())))


def bounded(embedder: Any) -> Any:
    """``embedder``, or a copy of it whose ``timeout`` (seconds) is at most
    ``INPROCESS_EMBED_TIMEOUT_SECONDS`` when it has a numeric one."""
    timeout = getattr(embedder, "timeout", None)
    if isinstance(timeout, int | float) and timeout > INPROCESS_EMBED_TIMEOUT_SECONDS:
        embedder = copy.copy(embedder)
        embedder.timeout = INPROCESS_EMBED_TIMEOUT_SECONDS
    return embedder


def embed_appended(message_ids: list[int]) -> int:
    """Embed ``message_ids`` in process (``embed_stored_messages`` with a bounded embedder);
    returns how many vectors were stored. Skipped (0) while a pause after a failure lasts.
    An ``EmbeddingError`` is logged as a warning, starts the pause and is not raised: the
    messages are left for ``manage.py rebuild_recall_index``."""
    global _paused
    from agentmemory.recall import embed_stored_messages

    key = _embedder_key()
    paused = _paused
    if paused is not None and paused[0] == key and time.monotonic() < paused[1]:
        return 0
    try:
        return embed_stored_messages(message_ids, bound=bounded)
    except EmbeddingError as exc:
        with _lock:
            _paused = (key, time.monotonic() + INPROCESS_EMBED_COOLDOWN_SECONDS)
        logger.warning(
            "embedding %d message(s) failed; rebuild_recall_index will retry; in-process "
            "embedding of new messages is skipped for %.0f s: %s",
            len(message_ids),
            INPROCESS_EMBED_COOLDOWN_SECONDS,
            exc,
        )
        return 0


def reset() -> None:
    """End a pause (tests, or a host that knows its embedding service is back)."""
    global _paused
    with _lock:
        _paused = None
