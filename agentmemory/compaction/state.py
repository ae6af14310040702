"""What a compaction run returns, and the state it keeps on the conversation row.

The results (``SummaryDraft``, ``CompactionRun`` and its statuses, ``CompactionRequest``),
the lease that keeps two runs of one conversation from doing the same work (``Lease``,
``LeaseKeeper``, ``claim_lease``, ``release_lease``), and the request bookkeeping the sweep
reads (``compaction_requested_at``, ``compaction_error``, ``compaction_failures``:
``record_compaction_failure``, ``retry_delay``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import OperationalError, connections, router
from django.db.models import Case, F, PositiveIntegerField, Q, When
from django.utils import timezone

from agentmemory.conf import app_settings
from agentmemory.llm.facts import FactDraft
from agentmemory.models import Conversation, Summary

logger = logging.getLogger("agentmemory.compaction")

#: ``(max_tokens, system_tokens)`` of the windows a requested summary must fit
Window = tuple[int | None, int | None]

#: The longest pause of the sweep before it retries a conversation whose compaction runs keep
#: failing (seconds); see ``retry_delay``.
FAILED_RETRY_MAX_SECONDS = 6 * 3600


def retry_delay(failures: int) -> float:
    """How long the sweep waits after the ``failures``-th failed compaction run in a row of
    a conversation before it tries again (seconds). A first failure is retried by the next
    sweep (a one-off 503 passes); from the second on the pause doubles from two lease
    periods: ``COMPACTION_LEASE_SECONDS * 2**(failures - 1)``, at most
    ``FAILED_RETRY_MAX_SECONDS``. A summariser that keeps refusing (a permanent model error,
    a summary rejected every time) is then asked a few times a day, not on every sweep; a
    new turn still asks at once (its new messages may be what helps)."""
    if failures <= 1:
        return 0.0
    lease = app_settings().COMPACTION_LEASE_SECONDS
    return float(min(lease * 2 ** min(failures - 1, 32), FAILED_RETRY_MAX_SECONDS))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class SummaryDraft:
    """A validated summary text with what it cost to write (tokens, calls), and the durable
    facts the summariser found in the messages it folded (kept by the memory flush,
    ``agentmemory.flush``; empty when no flush runs)."""

    text: str
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    facts: tuple[FactDraft, ...] = ()


#: ``CompactionRun.status`` values
STORED, PARTIAL, NOTHING, BUSY, GONE, LOST_LEASE, SUPERSEDED = (
    "stored",
    "partial",
    "nothing",
    "busy",
    "gone",
    "lost_lease",
    "superseded",
)


@dataclass(frozen=True, slots=True)
class CompactionRun:
    """What one bounded compaction run did.

    Attributes:
        status: ``"stored"`` (a summary reaching the target was stored), ``"partial"`` (an
            intermediate summary was stored at a human-turn boundary; more remains),
            ``"nothing"`` (nothing to fold), ``"busy"`` (another run holds the lease),
            ``"gone"`` (the conversation was deleted), ``"lost_lease"`` (the lease was taken
            over while the model worked; nothing stored), ``"superseded"`` (the summary or
            history changed meanwhile; nothing stored).
        summary: the conversation's summary after the run (new or current), or ``None``.
        retry_after: for ``"busy"``: seconds until the other run's lease expires.
        llm_calls: summariser calls made by this run.
    """

    status: str
    summary: Summary | None = None
    retry_after: float = 0.0
    llm_calls: int = 0

    @property
    def more_to_do(self) -> bool:
        """Whether another run should follow (a partial backlog, or a busy lease)."""
        return self.status in (PARTIAL, BUSY, LOST_LEASE, SUPERSEDED)


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """What ``request_compaction()`` did.

    Attributes:
        conversation_id: the conversation.
        due: a compaction was due (or forced).
        mode: the mode in force: ``"inline"``, ``"celery"`` or ``"off"``.
        enqueued: the Celery task was handed to the broker (or will be when the caller's
            transaction commits, see ``deferred``).
        ran_inline: the compaction ran in this process before the call returned.
        deferred: the work waits for the caller's transaction to commit (then runs inline,
            or is enqueued).
        summary_id: the conversation's summary id after an inline run or a wait.
        error: why the work could not be started or failed, when known (also recorded on
            the conversation as ``compaction_error``).
        reason: the caller's reason, for logs.
    """

    conversation_id: int
    due: bool
    mode: str
    enqueued: bool = False
    ran_inline: bool = False
    deferred: bool = False
    summary_id: int | None = None
    error: str | None = None
    reason: str = ""

    @property
    def scheduled(self) -> bool:
        """A compaction ran, was enqueued, or will run/enqueue at commit."""
        return self.enqueued or self.ran_inline or self.deferred


# --------------------------------------------------------------------------- the lease


def _write_locked(exc: OperationalError) -> bool:
    """Whether ``exc`` is SQLite refusing a second writer ("database is locked", or "database
    table is locked" on a shared-cache database) rather than a real failure."""
    return "is locked" in str(exc)


@dataclass(frozen=True, slots=True)
class Lease:
    """A compaction's hold on a conversation: a random token and when it expires."""

    token: uuid.UUID
    taken_at: Any
    expires_at: Any


class LeaseKeeper:
    """Renews a lease every ``lease_seconds / 3`` seconds in a small daemon thread while the
    model works, so a long compaction is never taken over while it is alive, and a dead
    worker's lease expires within ``lease_seconds``. The thread uses its own database
    connection and closes it when it stops. ``lost`` is set when the lease was taken over
    (the row no longer holds our token): the run must not store.
    """

    def __init__(self, conversation_id: int, lease: Lease, lease_seconds: float) -> None:
        self.conversation_id = conversation_id
        self.lease = lease
        self.lease_seconds = lease_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"agentmemory-lease-{conversation_id}", daemon=True
        )

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # Bounded: a renewal stuck behind a lock must not hold the caller.
        self._thread.join(timeout=5)

    def _run(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        try:
            while not self._stop.wait(interval):
                renewed = Conversation.objects.filter(
                    pk=self.conversation_id, compaction_lease=self.lease.token
                ).update(compaction_lease_expires_at=timezone.now() + timedelta(seconds=self.lease_seconds))
                if not renewed:
                    logger.warning(
                        "compaction of conversation %s lost its lease; its result will not be stored",
                        self.conversation_id,
                    )
                    self.lost.set()
                    return
        except Exception:
            logger.exception("renewing the compaction lease of conversation %s failed", self.conversation_id)
        finally:
            connections.close_all()  # this thread's connections only


class LeaseLost(Exception):
    """Internal: the lease keeper saw the lease taken over; stop folding."""


def request_is_stale(conv: Conversation) -> bool:
    """A compaction was requested more than a lease ago, has not completed, and no live
    lease holds it (its run failed, was refused, or its worker died)."""
    requested = getattr(conv, "compaction_requested_at", None)
    if requested is None:
        return False
    now = timezone.now()
    grace = timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
    expires = conv.compaction_lease_expires_at
    return requested < now - grace and (expires is None or expires < now)


def mark_request_served(conversation_id: int, since: Any) -> None:
    """Forget the request a completed run has served (only requests made before the run
    started: a later one still wants its own run) and the last error."""
    Conversation.objects.filter(pk=conversation_id, compaction_requested_at__lte=since).update(
        compaction_requested_at=None
    )
    clear_compaction_error(conversation_id)


def clear_compaction_error(conversation_id: int) -> None:
    """Forget the conversation's last compaction error and its count of failed runs (a run
    stored a summary, or made progress)."""
    Conversation.objects.filter(pk=conversation_id).filter(
        ~Q(compaction_error="") | Q(compaction_failures__gt=0)
    ).update(compaction_error="", compaction_failed_at=None, compaction_failures=0)


def record_compaction_failure(
    conversation_id: int, error: BaseException | str, *, failed_run: bool = False
) -> str:
    """Write why a compaction could not be started or failed on the conversation
    (``compaction_error``, ``compaction_failed_at``) and keep its request pending, so the
    sweep and the next trigger pick it up. Never raises (a failure to record is logged).
    ``failed_run``: a compaction run failed (the model or its summary, not the broker):
    ``compaction_failures`` counts it, and the sweep backs off (``retry_delay``).

    Returns:
        The recorded text.
    """
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = text[:2000]
    try:
        now = timezone.now()
        changes: dict[str, Any] = {"compaction_error": text, "compaction_failed_at": now}
        if failed_run:
            # counted up to the column's largest value, never past it: past it PostgreSQL
            # raised "integer out of range" (the failure went unrecorded) and SQLite stored a
            # float in the column
            using = router.db_for_write(Conversation)
            most = connections[using].ops.integer_field_range("PositiveIntegerField")[1]
            changes["compaction_failures"] = Case(
                When(compaction_failures__lt=most, then=F("compaction_failures") + 1),
                default=F("compaction_failures"),
                output_field=PositiveIntegerField(),
            )
        Conversation.objects.filter(pk=conversation_id).update(**changes)
        Conversation.objects.filter(pk=conversation_id, compaction_requested_at__isnull=True).update(
            compaction_requested_at=now
        )
    except Exception:
        logger.exception("could not record the compaction failure of conversation %s", conversation_id)
    return text


def claim_lease(conversation_id: int) -> Lease | None:
    """Take the compaction lease: a fresh token with an expiry ``COMPACTION_LEASE_SECONDS``
    ahead, written only when no other run holds a live lease (an expired lease, left by a
    dead worker, is taken over). ``None`` when another run holds it."""
    now = timezone.now()
    lease = Lease(
        token=uuid.uuid4(),
        taken_at=now,
        expires_at=now + timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS),
    )
    try:
        taken = (
            Conversation.objects.filter(pk=conversation_id)
            .filter(Q(compaction_lease__isnull=True) | Q(compaction_lease_expires_at__lt=now))
            .update(
                compaction_lease=lease.token,
                compaction_lease_expires_at=lease.expires_at,
                compaction_started_at=now,
            )
        )
    except OperationalError as exc:
        if not _write_locked(exc):
            raise
        # SQLite allows one writer at a time: a run that cannot write the lease row now
        # is in the same place as one that finds the lease taken, and is rescheduled.
        return None
    return lease if taken else None


def release_lease(conversation_id: int, lease: Lease) -> None:
    """Give the lease up, if the row still holds ``lease`` (a run that lost it leaves the
    new holder's alone)."""
    Conversation.objects.filter(pk=conversation_id, compaction_lease=lease.token).update(
        compaction_lease=None, compaction_lease_expires_at=None, compaction_started_at=None
    )


def busy_run(conversation_id: int) -> CompactionRun:
    """The ``"busy"`` run of a conversation whose lease another run holds, with when that
    lease expires (``"gone"`` when the conversation was deleted meanwhile)."""
    try:
        expires = (
            Conversation.objects.filter(pk=conversation_id)
            .values_list("compaction_lease_expires_at", flat=True)
            .first()
        )
    except OperationalError as exc:
        if not _write_locked(exc):
            raise
        return CompactionRun(BUSY, retry_after=float(app_settings().COMPACTION_LEASE_SECONDS))
    if expires is None and not Conversation.objects.filter(pk=conversation_id).exists():
        return CompactionRun(GONE)
    left = (expires - timezone.now()).total_seconds() if expires is not None else 0.0
    logger.info(
        "compaction of conversation %s is already running (lease expires in %.0f s)",
        conversation_id,
        left,
    )
    return CompactionRun(BUSY, retry_after=max(left, 0.0))
