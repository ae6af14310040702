"""Handing tasks to the Celery broker within a time bound.

Appends and agent turns enqueue tasks (a compaction that became due, the embedding of new
messages) after they commit, in the request that made them. A broker that refuses the
connection fails fast, but one that accepts it and never answers (a frozen Redis, a stuck
load balancer, a half-open connection) held such a request for as long as it hung: kombu's
Redis transport waits forever for a reply by default (``socket_timeout`` None), and Celery
waits 4 seconds (``broker_connection_timeout``) for an AMQP handshake and again for each retry
(an API append took 94 s).

``publish`` sends through connections of its own, made by the Celery app the task binds to
(its broker URL, its ``broker_transport_options``, pooled per process), with every socket
operation bounded by ``AGENTMEMORY["ENQUEUE_TIMEOUT_SECONDS"]``: kombu's Redis transport
options ``socket_connect_timeout`` and ``socket_timeout``, py-amqp's ``connect_timeout``,
``read_timeout`` and ``write_timeout``, and kombu's ``connect_retries_timeout`` for its
reconnection loop. A publish gives up once that time has passed (``ENQUEUE_RETRY_POLICY``
retries at once, while time is left: a pooled connection the broker dropped is made again).
Those bounds are per socket operation, so a broker that trickles its answers (a byte at a
time, each within the bound) still held a publish for as long as it went on: the publish
runs in a thread of its own, and its caller waits for it at most ``publish_wait()``.
The app's own connection pool, which its workers and your code use, is left as configured.

A request may publish many tasks (the admin's "Compact now" on a selection, an import that
makes a compaction due and schedules its embedding, ``compact_conversations --enqueue``): each
one held for the bound made a hung broker cost such a request many times what a refused one
does (20 conversations: 2.2 s against 0.5 s). Once a publish timed out, further publishes to
that broker from this process fail at once for ``publish_wait()`` seconds (``BrokerHeld``),
so a hung broker costs a request one bound however many tasks it publishes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

#: Celery's ``retry_policy`` of a publish: one more try at once (a pooled connection the
#: broker closed is opened again), within the time bound (``publish``).
ENQUEUE_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.05, "interval_max": 0.05}

#: ``celery_broker`` decides compaction's mode, and logs where compaction does
logger = logging.getLogger("agentmemory.compaction")

_pools: dict[tuple[Any, ...], Any] = {}
_pools_lock = threading.Lock()

#: the most publishes a process leaves running after their callers gave up on them (Celery's
#: default ``broker_pool_limit``): past it a publish fails at once. Each holds a thread and a
#: connection for as long as the broker holds it; without a pool limit (``broker_pool_limit``
#: None or 0) a broker that trickled its answers held one more of each per append, without end.
MAX_ABANDONED_PUBLISHES = 10

#: (process id, broker URL) -> ``time.monotonic()`` until which publishes to it fail at once: a publish to
#: it timed out (the broker accepted the connection and did not answer in time)
_held_until: dict[tuple[int, str], float] = {}


def release_held() -> None:
    """Forget every broker held after a timed-out publish (``BrokerHeld``): the next publish
    to each is tried. For tests, and for code that knows the broker is back."""
    _held_until.clear()


class BrokerHeld(Exception):
    """Not sent: a publish to this broker timed out less than ``publish_wait()`` seconds ago.
    Callers treat it as any failed publish (logged and recorded; the sweep sends it again)."""


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is a timeout (the builtin
    ``TimeoutError``, which ``socket.timeout`` is, or redis-py's ``TimeoutError``, which is
    not a subclass of it): the broker accepted the connection and did not answer in time,
    as opposed to refusing it, which fails at once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError) or type(current).__name__ == "TimeoutError":
            return True
        if "timed out" in str(current) or "Timeout reading" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


#: the publish threads whose callers gave up on them and that have not ended
_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


def enqueue_timeout() -> float:
    """``AGENTMEMORY["ENQUEUE_TIMEOUT_SECONDS"]`` (seconds)."""
    from agentmemory.conf import app_settings

    return float(app_settings().ENQUEUE_TIMEOUT_SECONDS)


#: the least a caller of ``publish`` waits for it in all (seconds): the publish's thread may
#: not even have connected after one second on a loaded machine (two busy cores), and one
#: that gives up before the broker is reached records a failure a working broker never had
MIN_PUBLISH_WAIT = 3.0


def publish_wait(timeout: float) -> float:
    """Seconds a caller of ``publish`` waits for it in all, the broker's answers however
    slow: four times ``timeout`` (a connection, a handshake, the publish and one retry),
    and at least ``MIN_PUBLISH_WAIT``."""
    return max(MIN_PUBLISH_WAIT, 4 * timeout)


def bounded_transport_options(timeout: float) -> dict[str, Any]:
    """Transport options bounding each socket operation of a broker connection to
    ``timeout`` seconds, for kombu's Redis transport (``socket_connect_timeout``,
    ``socket_timeout``) and for py-amqp (``read_timeout``, ``write_timeout``; each
    transport ignores the other's), with kombu's reconnection loop bounded to the same time
    (``connect_retries_timeout``, ``max_retries``)."""
    return {
        "socket_connect_timeout": timeout,
        "socket_timeout": timeout,
        "read_timeout": timeout,
        "write_timeout": timeout,
        "connect_retries_timeout": timeout,
        "max_retries": ENQUEUE_RETRY_POLICY["max_retries"],
        "interval_start": ENQUEUE_RETRY_POLICY["interval_start"],
        "interval_step": ENQUEUE_RETRY_POLICY["interval_step"],
        "interval_max": ENQUEUE_RETRY_POLICY["interval_max"],
    }


def _producer_pool(app: Any, timeout: float) -> Any:
    """A pool of producers on connections with bounded timeouts to ``app``'s broker, one per
    process, broker URL, transport options and timeout."""
    from kombu.pools import ProducerPool

    conf = app.conf
    url = conf.broker_write_url or conf.broker_url
    key = (os.getpid(), id(app), str(url), repr(conf.broker_transport_options), timeout)
    pool = _pools.get(key)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(key)
            if pool is None:
                connection = app.connection_for_write(
                    connect_timeout=timeout, transport_options=bounded_transport_options(timeout)
                )
                limit = conf.broker_pool_limit
                pool = _pools[key] = ProducerPool(connection.Pool(limit=limit), limit=limit)
    return pool


def publish(
    task: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, **options: Any
) -> Any:
    """``task.apply_async(args, kwargs, **options)``, waiting at most about
    ``AGENTMEMORY["ENQUEUE_TIMEOUT_SECONDS"]`` for the broker, whether it refuses the
    connection, accepts it and never answers, or answers slowly. With ``task_always_eager``
    the task runs in this process, as ``apply_async`` does.

    Returns:
        The ``AsyncResult`` of ``apply_async``.

    Raises:
        BrokerHeld: at once, without sending, while an earlier publish of this process to the
            same broker timed out less than ``publish_wait()`` seconds ago.
        Whatever ``apply_async`` raises when the broker cannot take the task in time
        (kombu's ``OperationalError`` for a refused or timed-out connection, a
        ``LimitExceeded`` when every pooled connection is busy), and kombu's
        ``OperationalError`` when it has not returned after ``publish_wait()`` seconds, or
        at once while ``MAX_ABANDONED_PUBLISHES`` earlier publishes of this process are still
        held by the broker after their callers gave up: callers log it and record the
        failure; nothing is retried later by this function.
    """
    app = task.app
    if app.conf.task_always_eager:  # runs here: no broker to wait for
        if not options:
            return task.delay(*args, **(kwargs or {}))
        return task.apply_async(args=args, kwargs=kwargs, **options)
    timeout = enqueue_timeout()
    deadline = time.monotonic() + timeout

    def give_up_at_the_deadline(exc: BaseException, interval: float) -> None:
        # kombu calls this before each reconnection, with the pause it will make first
        if time.monotonic() + interval >= deadline:
            raise exc

    url = str(app.conf.broker_write_url or app.conf.broker_url)
    key = (os.getpid(), url)
    held_until = _held_until.get(key)
    if held_until is not None:
        if time.monotonic() < held_until:
            raise BrokerHeld(
                "not sent: a publish to this broker timed out less than "
                f"{publish_wait(timeout):g} s ago (it accepts connections and does not answer)"
            )
        _held_until.pop(key, None)
    policy = dict(ENQUEUE_RETRY_POLICY, errback=give_up_at_the_deadline)
    outcome: dict[str, Any] = {}
    from kombu.exceptions import OperationalError

    def send() -> None:
        try:
            with _producer_pool(app, timeout).acquire(block=True, timeout=timeout) as producer:
                outcome["result"] = task.apply_async(
                    args=args, kwargs=kwargs, producer=producer, retry=True, retry_policy=policy, **options
                )
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        finally:
            with _abandoned_lock:
                _abandoned.discard(threading.current_thread())

    with _abandoned_lock:
        # those that ended (or, after a fork, were the parent's) no longer count
        _abandoned.intersection_update([t for t in _abandoned if t.is_alive()])
        held = len(_abandoned)
    if held >= MAX_ABANDONED_PUBLISHES:
        raise OperationalError(f"the broker still holds {held} publishes given up on; not sending another")
    # A daemon thread: one that the broker still holds is left to its socket timeouts (a
    # task it publishes late is a duplicate that compaction and embedding skip).
    sender = threading.Thread(target=send, name="agentmemory-publish", daemon=True)
    sender.start()
    wait = publish_wait(timeout)
    sender.join(wait)
    if sender.is_alive():
        with _abandoned_lock:
            _abandoned.add(sender)
        raise OperationalError(f"the broker did not take the task within {wait:g} s")
    if "error" in outcome:
        if _timed_out(outcome["error"]):
            _held_until[key] = time.monotonic() + publish_wait(timeout)
        raise outcome["error"]
    return outcome["result"]


def celery_broker() -> tuple[str, bool]:
    """``(broker_url, always_eager)`` of the Celery app tasks bind to (the current app;
    the default app reads only the ``CELERY_BROKER_URL`` environment variable). The broker
    URL is ``""`` when none was set. Compaction's mode (``agentmemory.compaction.
    compaction_mode``) and the embedding of new messages follow it."""
    try:
        from celery import current_app

        conf = current_app.conf
        broker = conf.broker_write_url or conf.broker_url or ""
        return str(broker), bool(conf.task_always_eager)
    except Exception:  # a broken Celery configuration must not break an append
        logger.exception("cannot read the Celery configuration")
        return "", False
