"""One compaction run: build the compactor, run it once, record what happened.

``run_compaction`` is what the Celery task (``agentmemory.tasks.compact_conversation``),
inline requests and the ``compact_conversations`` command call; ``compact_backlog`` repeats
it until a backlog is folded. A run never enqueues anything: requesting and enqueuing are
``agentmemory.compaction.dispatch``.
"""

from __future__ import annotations

import logging
import time

from django.utils import timezone
from django.utils.module_loading import import_string

from agentmemory import signals
from agentmemory.compaction.compactors import BaseMemoryCompactor
from agentmemory.compaction.state import (
    GONE,
    NOTHING,
    PARTIAL,
    STORED,
    CompactionRun,
    mark_request_served,
    record_compaction_failure,
)
from agentmemory.compaction.summarisers import LLMMemoryCompactor, OfflineMemoryCompactor
from agentmemory.conf import app_settings
from agentmemory.exceptions import TransientLLMError
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.base import ChatModel
from agentmemory.llm.config import get_llm
from agentmemory.models import Conversation

logger = logging.getLogger("agentmemory.compaction")


def get_compaction_llm() -> ChatModel | None:
    """The summariser model: ``AGENTMEMORY['COMPACTION_LLM']`` (dotted path to a
    ``ChatModel`` class or factory), else ``AGENTMEMORY['LLMS']['compaction']`` or
    ``['default']``, else a model configured by the environment (``OPENAI_API_KEY`` /
    ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``), else ``None`` (``build_compactor`` then
    uses ``OfflineMemoryCompactor``)."""
    path = app_settings().COMPACTION_LLM
    if path:
        model: ChatModel | None = import_string(path)()
        return model
    return get_llm("compaction" if "compaction" in app_settings().LLMS else "default")


def resolve_compactor_class(compactor_class: str | type | None) -> type[BaseMemoryCompactor]:
    """The compactor class ``compactor_class`` names: a class as given, a dotted path
    imported, ``None`` the ``COMPACTOR_CLASS`` setting.

    Raises:
        ImportError: a dotted path that names nothing importable.
    """
    if compactor_class is None:
        cls: type[BaseMemoryCompactor] = app_settings().import_compactor_class()
    elif isinstance(compactor_class, str):
        cls = import_string(compactor_class)
    else:
        cls = compactor_class
    return cls


def build_compactor(
    conversation_id: int, *, compactor_class: str | type | None = None, llm: ChatModel | None = None
) -> BaseMemoryCompactor:
    """The compactor a compaction run uses, as the Celery task and inline runs build it:
    ``compactor_class`` (a class or dotted path; default ``COMPACTOR_CLASS``) built as
    ``cls(Conversation.objects, conversation_id, llm, history)`` with ``llm`` or
    ``get_compaction_llm()``. Without any configured model, an ``LLMMemoryCompactor`` (or a
    subclass that keeps its ``summarize``) becomes an ``OfflineMemoryCompactor`` (labelled,
    extractive); a subclass with its own ``summarize`` keeps its class and fails with
    ``PermanentLLMError`` if it calls the missing model."""
    cls = resolve_compactor_class(compactor_class)
    model = llm if llm is not None else get_compaction_llm()
    if (
        model is None
        and issubclass(cls, LLMMemoryCompactor)
        and cls.summarize is LLMMemoryCompactor.summarize
    ):
        cls = OfflineMemoryCompactor
    history = PersistentChatHistory(conversation_id)
    return cls(Conversation.objects, conversation_id, model, history)


def run_compaction(
    conversation_id: int,
    *,
    compactor_class: str | type | None = None,
    max_tokens: int | None = None,
    only_if_needed: bool = False,
    llm: ChatModel | None = None,
    system_tokens: int | None = None,
    count_transient: bool = True,
    deadline: float | None = None,
) -> CompactionRun:
    """One bounded compaction run of a conversation, as the task, inline requests and the
    ``compact_conversations`` command do it; a failure is recorded on the conversation
    (``compaction_error``) before it is raised.

    Args:
        conversation_id: primary key of the conversation.
        compactor_class: a class or dotted path; default ``COMPACTOR_CLASS``.
        max_tokens: the window budget (tokens): the trigger is checked against it and the
            summary is made to fit it (``BaseMemoryCompactor.fit_to_window``).
        only_if_needed: do nothing unless ``needs_compaction()`` still holds (requests
            queued behind a busy worker then find nothing to do).
        llm: the summariser; default ``get_compaction_llm()``.
        system_tokens: tokens of a system prompt sent with every window but not stored;
            default: the stored pinned prompt, if any.
        count_transient: whether a ``TransientLLMError`` counts as a failed run for the
            sweep's pause (``compaction_failures``, ``retry_delay``); the Celery task passes
            ``False`` while it will retry itself, so that one task's retries count once.
        deadline: a ``time.monotonic()`` value: past it, the run stores what it folded at
            the next human-turn boundary (``"partial"``; one summariser call in progress
            is finished first), for a caller that waits for it. ``None``: only
            ``COMPACTION_MAX_CALLS_PER_RUN`` bounds the run.

    Returns:
        The ``CompactionRun``.

    Raises:
        TransientLLMError, PermanentLLMError, InvalidSummaryError: recorded, then raised.
        ConversationStateError: the current summary is another conversation's
            (``agentmemory.compaction.compactors.summary_of``); recorded, then raised.
    """
    if not Conversation.objects.filter(pk=conversation_id).exists():
        logger.info("conversation %s is gone; nothing to compact", conversation_id)
        return CompactionRun(GONE)
    compactor = build_compactor(conversation_id, compactor_class=compactor_class, llm=llm)
    compactor.fit_to_window(max_tokens, system_tokens)
    compactor.deadline = deadline
    if only_if_needed and not compactor.needs_compaction(max_tokens=max_tokens):
        conv = compactor.last_checked
        if conv is not None and conv.compaction_requested_at is not None:
            mark_request_served(conversation_id, timezone.now())
        return CompactionRun(NOTHING, summary=conv.own_summary if conv is not None else None)
    started = time.perf_counter()
    try:
        run = compactor.run()
    except Exception as exc:
        logger.warning("compaction of conversation %s failed: %s", conversation_id, exc)
        counted = count_transient or not isinstance(exc, TransientLLMError)
        record_compaction_failure(conversation_id, exc, failed_run=counted)
        _finished(compactor, conversation_id, "failed", started, None, f"{type(exc).__name__}: {exc}")
        raise
    _finished(compactor, conversation_id, run.status, started, run, "")
    return run


def _finished(
    compactor: BaseMemoryCompactor,
    conversation_id: int,
    outcome: str,
    started: float,
    run: CompactionRun | None,
    error: str,
) -> None:
    """The structured log record and the ``compaction_finished`` signal of one run."""
    stored = run.summary if run is not None and run.status in (STORED, PARTIAL) else None
    fields = {
        "conversation_id": conversation_id,
        "outcome": outcome,
        "duration_s": round(time.perf_counter() - started, 6),
        "input_tokens": stored.input_tokens if stored is not None else 0,
        "output_tokens": stored.output_tokens if stored is not None else 0,
        "llm_calls": run.llm_calls if run is not None else 0,
        "error": error,
    }
    logger.info(
        "compaction of conversation %s: %s in %.3f s (%s tokens in, %s out)",
        conversation_id,
        outcome,
        fields["duration_s"],
        fields["input_tokens"],
        fields["output_tokens"],
        extra={"compaction": fields},
    )
    signals.compaction_finished.send(sender=type(compactor), **fields)


def compact_backlog(conversation_id: int, *, compactor_class: str | type | None = None) -> str:
    """Run bounded compactions of one conversation in this process until its backlog is
    folded (runs stop being ``"partial"``); failures are recorded, not raised.

    Returns:
        The last run's status, or ``"failed"``.
    """
    while True:
        try:
            run = run_compaction(conversation_id, compactor_class=compactor_class)
        except Exception:
            return "failed"
        if run.status != PARTIAL:
            return run.status
