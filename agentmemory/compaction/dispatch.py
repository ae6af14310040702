"""Requesting a compaction: the mode, the request, the Celery hand-off and the sweep.

``request_compaction()`` is the one entry point every caller uses (agents, the API, the admin,
the replay): it decides whether a compaction is due and then runs it in process after the
caller's transaction commits ("inline", ``agentmemory.compaction.runs``), hands it to the
Celery task ``agentmemory.tasks.compact_conversation`` ("celery"), or does nothing ("off"),
following ``AGENTMEMORY["COMPACTION_MODE"]``.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from agentmemory import broker
from agentmemory.compaction import tasks as compaction_tasks
from agentmemory.compaction.compactors import BaseMemoryCompactor
from agentmemory.compaction.runs import compact_backlog, resolve_compactor_class, run_compaction
from agentmemory.compaction.state import (
    BUSY,
    PARTIAL,
    CompactionRequest,
    CompactionRun,
    Window,
    record_compaction_failure,
    request_is_stale,
    retry_delay,
)
from agentmemory.conf import app_settings
from agentmemory.models import Conversation

logger = logging.getLogger("agentmemory.compaction")

#: the values of ``AGENTMEMORY["COMPACTION_MODE"]``
COMPACTION_MODES = ("auto", "celery", "inline", "off")

#: How publishing a task retries: once, at once, within ``ENQUEUE_TIMEOUT_SECONDS``
#: (``agentmemory.broker``), so a dead or frozen broker costs an append a fraction of a
#: second, not Celery's default of several seconds of reconnecting.
ENQUEUE_RETRY_POLICY = broker.ENQUEUE_RETRY_POLICY


def _importable_path(cls: type) -> str | None:
    """The dotted path a worker can import ``cls`` by, or ``None`` (with a warning) for a
    class it could not find (defined in a function or in an interactive shell); the
    worker then uses ``COMPACTOR_CLASS``."""
    path = f"{cls.__module__}.{cls.__qualname__}"
    try:
        if "<locals>" not in path and import_string(path) is cls:
            return path
    except ImportError:
        pass
    logger.warning(
        "compactor class %s cannot be imported by a Celery worker; the task will use "
        "AGENTMEMORY['COMPACTOR_CLASS'] instead. Define compactor classes at module level.",
        path,
    )
    return None


# --------------------------------------------------------------------------- the mode


def compaction_mode() -> str:
    """The compaction mode in force: ``"inline"``, ``"celery"`` or ``"off"``.

    ``AGENTMEMORY["COMPACTION_MODE"]`` may name one; ``"auto"`` (the default) picks
    ``"celery"`` when the Celery app the tasks bind to has a broker URL (set explicitly by the
    host, e.g. ``CELERY_BROKER_URL`` read by its ``celery.py``, or the ``CELERY_BROKER_URL``
    environment variable) and does not run tasks eagerly, and ``"inline"`` otherwise. A host
    that only adds the app to ``INSTALLED_APPS`` has no broker, so its compactions run in
    process after each commit instead of failing to reach a broker that is not there.
    """
    return describe_compaction_mode()[0]


def describe_compaction_mode() -> tuple[str, str]:
    """``(mode, why)``: the mode in force and a sentence saying why (for ``manage.py check``)."""
    setting = app_settings().COMPACTION_MODE
    if setting in ("celery", "inline", "off"):
        return setting, f"AGENTMEMORY['COMPACTION_MODE'] is {setting!r}"
    url, eager = broker.celery_broker()
    if url and not eager:
        return "celery", "COMPACTION_MODE is 'auto' and the Celery app has a broker URL"
    if url:
        return "inline", "COMPACTION_MODE is 'auto' and Celery runs tasks eagerly (task_always_eager)"
    return "inline", "COMPACTION_MODE is 'auto' and no Celery broker is configured"


# --------------------------------------------------------------------------- requesting


def request_compaction(
    conversation_id: int,
    *,
    max_tokens: int | None = None,
    force: bool = False,
    wait: float = 0.0,
    compactor_class: str | type | None = None,
    reason: str = "",
    compactor: BaseMemoryCompactor | None = None,
    system_tokens: int | None = None,
) -> CompactionRequest:
    """Compact the conversation if a compaction is due, the way ``COMPACTION_MODE`` says.

    "inline": the compaction runs in this process once the caller's transaction commits
    (at once outside a transaction), one bounded run per request. "celery": the task
    ``compact_conversation`` is enqueued on commit, with a short publish retry policy
    (``ENQUEUE_RETRY_POLICY``), so a dead broker costs well under a second. "off": nothing.
    A request is recorded on the conversation (``compaction_requested_at``) until a run
    completes; a failure to enqueue or a failed inline run is logged and recorded
    (``compaction_error``) and never raised: the append or agent turn that asked has
    already succeeded. The ``sweep_compactions`` task, the ``compact_conversations``
    command and the next trigger pick such requests up.

    Args:
        conversation_id: primary key of the conversation.
        max_tokens: the window budget (tokens): the "no longer fits" trigger is checked
            against it, and the summary is made to fit it (``summary_token_budget``). It is
            remembered on the conversation (``summary_window_tokens``, with
            ``system_tokens``); default: the budget a request named before, else the
            ``CONVERSATION_HISTORY_TOKEN_LIMIT`` of the agent registered under the
            conversation's agent key, else ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``.
            Pass the budget your windows are built with: a summary made for a larger window
            is sent cut in a smaller one.
        force: skip the "is it due" check.
        wait: seconds; when positive, make sure a compaction has run before returning:
            inline it runs now (runs follow each other until the backlog is folded or the
            time is up, and a run stores what it folded at the first human-turn boundary
            past it; a run refused because another process's run holds the lease waits
            for that lease to end and runs after it); with Celery the task is enqueued at
            once and awaited up to ``wait`` seconds.
        compactor_class: a class or dotted path; default ``COMPACTOR_CLASS`` (or the
            class of ``compactor``).
        reason: why the caller asks (for logs).
        compactor: a compactor instance whose ``needs_compaction()`` settings decide
            whether one is due (the run itself builds its own with the compaction model).
        system_tokens: tokens of a system prompt sent with every window but not stored
            (an agent's), left out of the summary's room; default: the stored pinned
            prompt, if any.

    Returns:
        A ``CompactionRequest``.
    """
    mode = "off"
    try:
        mode = compaction_mode()
        return _request(
            conversation_id,
            mode,
            (max_tokens, system_tokens),
            force,
            wait,
            compactor_class,
            reason,
            compactor,
        )
    except Exception as exc:
        # The caller's append or turn has already succeeded; deciding about compaction must
        # not turn it into an error.
        logger.exception("requesting a compaction of conversation %s failed", conversation_id)
        return CompactionRequest(
            conversation_id, due=False, mode=mode, error=f"{type(exc).__name__}: {exc}", reason=reason
        )


def _needs(checker: Any, window: Window) -> bool:
    """``checker.needs_compaction()``, with the window's ``max_tokens`` and
    ``system_tokens`` where its signature takes them (a subclass may predate either)."""
    method = checker.needs_compaction
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        parameters = {"max_tokens": None, "system_tokens": None}  # type: ignore[assignment]
    kwargs: dict[str, Any] = {}
    if "max_tokens" in parameters:
        kwargs["max_tokens"] = window[0]
    if "system_tokens" in parameters and window[1] is not None:
        kwargs["system_tokens"] = window[1]
    return bool(method(**kwargs))


def _request(
    conversation_id: int,
    mode: str,
    window: Window,
    force: bool,
    wait: float,
    compactor_class: str | type | None,
    reason: str,
    compactor: BaseMemoryCompactor | None,
) -> CompactionRequest:
    if compactor is not None and compactor_class is None:
        compactor_class = type(compactor)
    checker = compactor or resolve_compactor_class(compactor_class)(
        Conversation.objects, conversation_id, None
    )
    due = _needs(checker, window)
    conv = getattr(checker, "last_checked", None)
    if conv is None or conv.pk != conversation_id:
        conv = Conversation.objects.filter(pk=conversation_id).first()
    if conv is None:
        return CompactionRequest(conversation_id, due=False, mode=mode, reason=reason)
    if not (due or force):
        return CompactionRequest(conversation_id, due=False, mode=mode, reason=reason)
    if mode == "off":
        return CompactionRequest(conversation_id, due=True, mode=mode, reason=reason)
    if (
        mode == "celery"
        and not force
        and wait <= 0
        and conv.compaction_requested_at is not None
        and not conv.compaction_error
        and not request_is_stale(conv)
    ):
        # Already handed to the broker and not failed: one queued task per conversation
        # is enough (the task checks again when it runs).
        return CompactionRequest(conversation_id, due=True, mode=mode, enqueued=True, reason=reason)
    # Claim the request only if nobody did since it was read (two appends that both see the
    # threshold must not enqueue two tasks, bug case BUG-33).
    # A request naming its window is remembered: later ones naming none (an API append,
    # the sweep) make summaries for the same window.
    named = {"summary_window_tokens": window[0], "summary_system_tokens": window[1]} if window[0] else {}
    claimed = Conversation.objects.filter(
        pk=conversation_id, compaction_requested_at=conv.compaction_requested_at
    ).update(compaction_requested_at=timezone.now(), **named)
    if not claimed and mode == "celery" and not force and wait <= 0:
        return CompactionRequest(conversation_id, due=True, mode=mode, enqueued=True, reason=reason)
    if not claimed:
        Conversation.objects.filter(pk=conversation_id).update(
            compaction_requested_at=timezone.now(), **named
        )
    if mode == "inline":
        return _request_inline(conversation_id, compactor_class, window, force, wait, reason)
    if wait > 0 and _worker_missing(conv):
        # A recent wait found no worker taking the task: enqueue, but do not hold the caller
        # for the whole wait again before the lease period has passed.
        wait = 0.0
    return _request_celery(conversation_id, compactor_class, window, force, wait, reason)


def _request_inline(
    conversation_id: int,
    compactor_class: str | type | None,
    window: Window,
    force: bool,
    wait: float,
    reason: str,
) -> CompactionRequest:
    if wait > 0:
        deadline = time.monotonic() + wait
        summary_id, error = None, None
        while True:
            run, error = _run_safely(conversation_id, compactor_class, window=window, deadline=deadline)
            summary_id = run.summary.pk if run is not None and run.summary is not None else summary_id
            if run is not None and run.status == BUSY and _await_lease(conversation_id, deadline):
                # Another process's run holds the lease (a concurrent turn of the same
                # conversation): what it folds may not reach this caller's gap, so run
                # once more after it, within the wait, rather than send the gap.
                continue
            if run is None or run.status != PARTIAL or time.monotonic() >= deadline:
                break
        return CompactionRequest(
            conversation_id,
            due=True,
            mode="inline",
            ran_inline=True,
            summary_id=summary_id,
            error=error,
            reason=reason,
        )
    outcome: dict[str, Any] = {}

    def run_now() -> None:
        run, error = _run_safely(conversation_id, compactor_class, only_if_needed=not force, window=window)
        outcome["run"], outcome["error"] = run, error

    transaction.on_commit(run_now, using=router.db_for_write(Conversation))
    if "run" not in outcome and "error" not in outcome:
        return CompactionRequest(conversation_id, due=True, mode="inline", deferred=True, reason=reason)
    run = outcome.get("run")
    return CompactionRequest(
        conversation_id,
        due=True,
        mode="inline",
        ran_inline=True,
        summary_id=run.summary.pk if run is not None and run.summary is not None else None,
        error=outcome.get("error"),
        reason=reason,
    )


def _await_lease(conversation_id: int, deadline: float) -> bool:
    """Poll until no live lease holds the conversation's compaction (its run ended, or its
    holder died and the lease expired), or until ``deadline`` (``time.monotonic()``).

    Returns:
        Whether the lease is free before the deadline (``False`` also when the
        conversation is gone).
    """
    delay = 0.02
    while time.monotonic() < deadline:
        row = (
            Conversation.objects.filter(pk=conversation_id)
            .values_list("compaction_lease", "compaction_lease_expires_at")
            .first()
        )
        if row is None:
            return False
        lease, expires = row
        if lease is None or expires is None or expires < timezone.now():
            return True
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 0.25)
    return False


def _run_safely(
    conversation_id: int,
    compactor_class: str | type | None,
    *,
    only_if_needed: bool = False,
    window: Window = (None, None),
    deadline: float | None = None,
) -> tuple[CompactionRun | None, str | None]:
    """One inline run (stopping at a human-turn boundary past ``deadline``, a
    ``time.monotonic()`` value); every failure is logged and recorded, never raised."""
    try:
        run = run_compaction(
            conversation_id,
            compactor_class=compactor_class,
            only_if_needed=only_if_needed,
            max_tokens=window[0],
            system_tokens=window[1],
            deadline=deadline,
        )
    except Exception as exc:
        logger.warning("inline compaction of conversation %s failed: %s", conversation_id, exc, exc_info=True)
        return None, f"{type(exc).__name__}: {exc}"
    if run.status == BUSY:
        logger.info(
            "inline compaction of conversation %s refused: another run holds the lease; left for the sweep",
            conversation_id,
        )
    return run, None


def _request_celery(
    conversation_id: int,
    compactor_class: str | type | None,
    window: Window,
    force: bool,
    wait: float,
    reason: str,
) -> CompactionRequest:
    path = _importable_path(compactor_class) if isinstance(compactor_class, type) else compactor_class
    outcome: dict[str, Any] = {}

    def publish() -> None:
        outcome["error"] = enqueue_compaction(
            conversation_id,
            compactor_class=path,
            max_tokens=window[0],
            system_tokens=window[1],
            only_if_needed=not force,
        )

    if wait > 0:
        publish()
    else:
        transaction.on_commit(publish, using=router.db_for_write(Conversation))
    if "error" not in outcome:
        return CompactionRequest(
            conversation_id, due=True, mode="celery", enqueued=True, deferred=True, reason=reason
        )
    error = outcome["error"]
    if error is not None or wait <= 0:
        return CompactionRequest(
            conversation_id, due=True, mode="celery", enqueued=error is None, error=error, reason=reason
        )
    summary_id, served = _await_compaction(conversation_id, wait)
    if not served:
        error = record_compaction_failure(conversation_id, f"{_NOT_PICKED_UP} within {wait:g} s")
        return CompactionRequest(
            conversation_id,
            due=True,
            mode="celery",
            enqueued=True,
            summary_id=summary_id,
            error=error,
            reason=reason,
        )
    return CompactionRequest(
        conversation_id, due=True, mode="celery", enqueued=True, summary_id=summary_id, reason=reason
    )


_NOT_PICKED_UP = "no Celery worker ran the compaction"


def _worker_missing(conv: Conversation) -> bool:
    """A wait for a worker timed out on this conversation less than a lease ago."""
    failed = conv.compaction_failed_at
    grace = timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    return (
        conv.compaction_error.startswith(_NOT_PICKED_UP)
        and failed is not None
        and failed > timezone.now() - grace
    )


def _await_compaction(conversation_id: int, wait: float) -> tuple[int | None, bool]:
    """Poll until the request is served (cleared), the summary changed, or ``wait`` runs out.

    Returns:
        The summary id, and whether a worker served the request or is running it (a live
        lease) when the wait ended.
    """
    deadline = time.monotonic() + wait
    before = Conversation.objects.filter(pk=conversation_id).values_list("summary_id", flat=True).first()
    delay = 0.05
    while True:
        row = (
            Conversation.objects.filter(pk=conversation_id)
            .values_list("summary_id", "compaction_requested_at", "compaction_lease_expires_at")
            .first()
        )
        if row is None:
            return None, True
        summary_id, requested, lease_expires = row
        if requested is None or summary_id != before:
            return summary_id, True
        if time.monotonic() >= deadline:
            return summary_id, lease_expires is not None and lease_expires > timezone.now()
        time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 0.5)


def enqueue_compaction(
    conversation_id: int,
    *,
    compactor_class: str | None = None,
    max_tokens: int | None = None,
    only_if_needed: bool = True,
    countdown: float | None = None,
    system_tokens: int | None = None,
) -> str | None:
    """Hand ``compact_conversation`` to the broker now, waiting at most
    ``ENQUEUE_TIMEOUT_SECONDS`` for it (``agentmemory.broker.publish``).

    Returns:
        ``None`` when published; otherwise the error text, which is logged and recorded on
        the conversation (any exception from ``apply_async``: kombu's ``OperationalError``,
        a refused connection, a serialisation error). Never raises.
    """
    try:
        broker.publish(
            compaction_tasks.compact_conversation,
            (conversation_id, compactor_class),
            {"max_tokens": max_tokens, "only_if_needed": only_if_needed, "system_tokens": system_tokens},
            countdown=countdown,
        )
    except Exception as exc:
        logger.warning(
            "could not enqueue the compaction of conversation %s (the sweep or the next trigger "
            "will try again): %s",
            conversation_id,
            exc,
        )
        return record_compaction_failure(conversation_id, f"enqueue failed: {type(exc).__name__}: {exc}")
    return None


def pending_compactions(
    *, include_due: bool = False, limit: int | None = None, backoff: bool = True
) -> list[int]:
    """Ids of conversations whose requested compaction has not run (requested more than
    ``COMPACTION_LEASE_SECONDS`` ago, or failed) and that no live lease holds, oldest
    request first; with ``include_due`` also every conversation for which a compaction is
    due now (reads every conversation: for the management command, not for a beat task).
    With ``backoff`` (the default), a conversation whose runs failed ``n`` times in a row is
    left out until ``retry_delay(n)`` has passed since the last failure."""
    now = timezone.now()
    grace = now - timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    free = Q(compaction_lease__isnull=True) | Q(compaction_lease_expires_at__lt=now)
    qs = (
        Conversation.objects.filter(free)
        .filter(
            Q(compaction_requested_at__lt=grace)
            | (Q(compaction_requested_at__isnull=False) & ~Q(compaction_error=""))
        )
        .order_by("compaction_requested_at")
        .values_list("pk", "compaction_failures", "compaction_failed_at")
    )
    ids: list[int] = []
    waiting: set[int] = set()
    for pk, failures, failed_at in qs.iterator():
        if (
            backoff
            and failures
            and failed_at is not None
            and failed_at > now - timedelta(seconds=retry_delay(failures))
        ):
            waiting.add(pk)  # failed again and again: not before its pause is over
            continue
        ids.append(pk)
        if limit and len(ids) >= limit:
            break
    if include_due:
        seen = set(ids) | waiting
        cls = resolve_compactor_class(None)
        for pk in Conversation.objects.filter(free).order_by("pk").values_list("pk", flat=True).iterator():
            if pk not in seen and cls(Conversation.objects, pk, None).needs_compaction():
                ids.append(pk)
                if limit and len(ids) >= limit:
                    break
    return ids


def sweep(
    *,
    enqueue: bool | None = None,
    include_due: bool = False,
    limit: int | None = None,
    progress: Callable[[int, str], None] | None = None,
    backoff: bool = True,
) -> dict[str, int]:
    """Pick up requested-but-not-run compactions (see ``pending_compactions``): enqueue
    them (``enqueue=True``; default when the mode is "celery") or run them here, one
    bounded run each, continuing a backlog while runs are partial. ``backoff=False`` also
    takes conversations whose failing runs are pausing (``retry_delay``).

    Returns:
        Counts by outcome: ``{"enqueued": n, "stored": n, "failed": n, ...}``.
    """
    if enqueue is None:
        enqueue = compaction_mode() == "celery"
    counts: dict[str, int] = {}
    for pk in pending_compactions(include_due=include_due, limit=limit, backoff=backoff):
        if enqueue:
            outcome = "enqueued" if enqueue_compaction(pk, only_if_needed=False) is None else "failed"
            if outcome == "enqueued":
                # Handed over again: the next sweep leaves it to the worker for a lease period.
                Conversation.objects.filter(pk=pk).update(
                    compaction_requested_at=timezone.now(), compaction_error="", compaction_failed_at=None
                )
        else:
            outcome = compact_backlog(pk)
        counts[outcome] = counts.get(outcome, 0) + 1
        if progress is not None:
            progress(pk, outcome)
    return counts


def compact_if_needed(
    conversation_id: int, *, max_tokens: int | None = None, compactor_class: str | type | None = None
) -> bool:
    """``request_compaction()`` for callers that only want a yes/no: ``True`` when a
    compaction ran, was enqueued or will be at commit. The check reads the conversation row
    (one or two queries) and never builds a model client; it never raises because of the
    broker or the model."""
    return request_compaction(
        conversation_id, max_tokens=max_tokens, compactor_class=compactor_class, reason="compact_if_needed"
    ).scheduled
