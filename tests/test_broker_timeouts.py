"""A broker that accepts the connection and never answers costs an append no more than one
that refuses it.

A frozen Redis or a stuck load balancer accepts TCP connections and then says nothing. kombu's
Redis transport waited forever for the reply to its publish, and Celery's AMQP handshake 4
seconds per try, while the append that made a compaction due (its messages long committed)
waited with it: 94 s for an API append. Every publish of the app (``agentmemory.broker``) is
bounded by ``AGENTMEMORY["ENQUEUE_TIMEOUT_SECONDS"]``. The servers here listen on 127.0.0.1,
accept every connection and never send a byte.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from agentmemory import broker
from agentmemory.compaction import enqueue_compaction
from agentmemory.models import Conversation
from tests.factories import conversation_with_turns

# the publishes run in threads of their own, which must see the test's rows
pytestmark = pytest.mark.django_db(transaction=True)

#: far above what a bounded publish takes (0.1 s, plus starting the transport on a loaded
#: machine), far below what an unbounded one does (4 s a try for AMQP, forever for Redis)
BOUND = 2.5


class FrozenBroker:
    """A TCP port that accepts connections and never answers (nor closes them)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, scheme: str) -> str:
        if scheme == "redis":
            return f"redis://127.0.0.1:{self.port}/0"
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.sock.close()


class TricklingBroker(FrozenBroker):
    """A TCP port that answers every connection a byte at a time, each well within the
    socket timeouts, without end: the start of a long AMQP frame or Redis reply."""

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme
        super().__init__()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        conn.settimeout(0.01)
        with contextlib.suppress(OSError):
            conn.recv(65536)  # the client speaks first, for both protocols
        head = b"\x01\x00\x00\x00\x10\x00\x00" if self.scheme == "amqp" else b"$1000000\r\n"
        sent = 0
        while not self.stopped.is_set():
            try:
                conn.send(head[sent : sent + 1] or b"x")
            except OSError:
                return
            sent += 1
            self.stopped.wait(0.02)


def _refused_url(scheme: str) -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connections are refused
    return f"redis://127.0.0.1:{port}/0" if scheme == "redis" else f"amqp://guest:guest@127.0.0.1:{port}//"


@pytest.fixture
def frozen() -> Iterator[FrozenBroker]:
    server = FrozenBroker()
    yield server
    server.close()


@pytest.fixture
def point_celery_at() -> Iterator[Callable[[str], None]]:
    """Point the project's Celery app at a broker URL (not eager) for the test."""
    from project.celery import app

    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}

    def use(url: str) -> None:
        app._pool = None
        app.amqp._producer_pool = None
        app.conf.update(broker_url=url, task_always_eager=False)

    yield use
    app._pool = None
    app.amqp._producer_pool = None
    app.conf.update(**saved)


def _timed(call: Callable[[], Any], limit: float = 10.0) -> tuple[float, Any]:
    """Run ``call`` in a thread: (seconds it took, its result), or (inf, None) when it has
    not returned after ``limit`` seconds (an unbounded publish never does, with Redis)."""
    out: dict[str, Any] = {}

    def run() -> None:
        from django.db import connection

        try:
            out["result"] = call()
        finally:
            connection.close()

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        return float("inf"), None
    return time.monotonic() - started, out.get("result")


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_frozen_broker_costs_an_enqueue_no_more_than_a_refused_one(
    scheme, frozen, point_celery_at, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {}
    conv, _ = conversation_with_turns(2)
    point_celery_at(_refused_url(scheme))
    refused, refused_error = _timed(lambda: enqueue_compaction(conv.pk))
    point_celery_at(frozen.url(scheme))
    hung, hung_error = _timed(lambda: enqueue_compaction(conv.pk))
    assert frozen.held, "the frozen broker was never reached"
    assert "enqueue failed" in (refused_error or "") and "enqueue failed" in (hung_error or "")
    assert hung < BOUND, f"a frozen {scheme} broker held the enqueue {hung:.2f} s"
    assert hung <= refused + 0.5, (hung, refused)


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_an_api_append_that_makes_compaction_due_is_not_held_by_a_frozen_broker(
    scheme, frozen, point_celery_at, settings, django_user_model
) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 1}
    point_celery_at(frozen.url(scheme))
    user = django_user_model.objects.create_user(f"frozen-{scheme}", password="pw")
    conv = Conversation.objects.create(owner=user)
    client = APIClient()
    client.force_authenticate(user)
    url = f"/api/conversations/{conv.uuid}/messages/"
    body = {"messages": [{"role": "human", "content": "hello"}, {"role": "ai", "content": "hi"}]}
    took, response = _timed(lambda: client.post(url, body, format="json"))
    assert took < BOUND, f"the append waited {took:.2f} s for a frozen {scheme} broker"
    assert response.status_code == 201
    conv.refresh_from_db()
    assert conv.message_count == 2 and "enqueue failed" in conv.compaction_error
    assert conv.compaction_requested_at is not None  # the sweep picks it up later


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_broker_that_trickles_its_answer_holds_an_enqueue_no_longer(
    scheme, point_celery_at, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # Each socket operation was bounded, not the publish: a byte every 20 ms held it forever.
    settings.AGENTMEMORY = {}
    monkeypatch.setattr(broker, "MIN_PUBLISH_WAIT", 0.5)  # three seconds by default
    conv, _ = conversation_with_turns(2)
    server = TricklingBroker(scheme)
    try:
        point_celery_at(server.url(scheme))
        took, error = _timed(lambda: enqueue_compaction(conv.pk))
        assert server.held, "the broker was never reached"
    finally:
        server.close()
    assert took < BOUND, f"a trickling {scheme} broker held the enqueue {took:.2f} s"
    assert "enqueue failed" in (error or "")


def test_a_trickling_broker_holds_no_more_than_a_few_publishes(
    point_celery_at, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    # Each publish the caller gave up on keeps its thread and connection while the broker
    # trickles; without a pool limit to stop them, every append added one more, without end.
    from agentmemory.tasks import compact_conversation
    from project.celery import app

    settings.AGENTMEMORY = {"ENQUEUE_TIMEOUT_SECONDS": 1}  # each byte comes well within it
    monkeypatch.setattr(broker, "publish_wait", lambda timeout: 0.1)
    monkeypatch.setattr(broker, "MAX_ABANDONED_PUBLISHES", 2, raising=False)
    limit = app.conf.broker_pool_limit
    app.conf.broker_pool_limit = None  # Celery's "no pool"
    server = TricklingBroker("redis")
    errors = []
    try:
        point_celery_at(server.url("redis"))
        for _ in range(4):
            with pytest.raises(Exception) as failed:
                broker.publish(compact_conversation, (1,))
            errors.append(str(failed.value))
        held = [t for t in threading.enumerate() if t.name == "agentmemory-publish" and t.is_alive()]
    finally:
        server.close()
        app.conf.broker_pool_limit = limit
    assert len(held) == 2, errors
    assert ["still holds 2 publishes" in e for e in errors] == [False, False, True, True], errors
    for thread in held:  # the broker closed their connections: they end
        thread.join(5)
    point_celery_at(_refused_url("redis"))
    with pytest.raises(Exception) as failed:
        broker.publish(compact_conversation, (1,))
    assert "still holds" not in str(failed.value)  # sent again, not refused unsent


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_the_embedding_enqueue_is_bounded_too(scheme, frozen, point_celery_at, settings, caplog) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.recall import enqueue_message_embedding

    settings.AGENTMEMORY = {}
    point_celery_at(frozen.url(scheme))
    took, _ = _timed(lambda: enqueue_message_embedding([1, 2, 3]))
    assert took < BOUND, f"the embedding enqueue waited {took:.2f} s for a frozen {scheme} broker"
    assert "could not enqueue embedding of 3 message(s)" in caplog.text


def test_the_bound_is_the_setting(frozen, point_celery_at, settings) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.tasks import compact_conversation

    point_celery_at(frozen.url("redis"))
    settings.AGENTMEMORY = {"ENQUEUE_TIMEOUT_SECONDS": 0.6}
    started = time.monotonic()
    with pytest.raises(Exception, match="Timeout reading"):
        broker.publish(compact_conversation, (1,))
    took = time.monotonic() - started
    assert 0.6 <= took < 0.6 + BOUND


def test_a_broker_that_answers_takes_the_task(broker_url, point_celery_at, settings) -> None:  # type: ignore[no-untyped-def]
    import redis

    from agentmemory.tasks import compact_conversation

    settings.AGENTMEMORY = {}
    point_celery_at(broker_url)
    queue = f"agentmemory-test-{uuid.uuid4().hex}"
    for _ in range(3):  # the second and third reuse the pooled connection
        broker.publish(compact_conversation, (1,), queue=queue)
    client = redis.Redis.from_url(broker_url)
    try:
        assert client.llen(queue) == 3
    finally:
        client.delete(queue)
        client.close()


@pytest.mark.parametrize(
    ("value", "problem"),
    [(0, True), (-1, True), (61, True), (True, True), ("1", True), (0.1, False), (5, False)],
)
def test_the_setting_is_checked(settings, value, problem) -> None:  # type: ignore[no-untyped-def]
    from django.core.checks import run_checks

    settings.AGENTMEMORY = {"ENQUEUE_TIMEOUT_SECONDS": value}
    assert any(m.id == "agentmemory.E025" for m in run_checks()) is problem


def test_the_example_project_has_tasks_of_dead_workers_handed_out_again() -> None:
    """docs/operations.md: a pool process killed gives its task back at once; a worker killed
    whole has Redis hand its task out again after the visibility timeout, which stays above
    the longest countdown of the app's tasks (a compaction waiting out a lease: the lease plus
    6 s; an embedding retry: 16 s). tests/test_drills_worker.py kills real workers."""
    from agentmemory.conf import app_settings
    from project.celery import app

    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    options = app.conf.broker_transport_options
    lease = app_settings().COMPACTION_LEASE_SECONDS
    assert lease + 6 < options["visibility_timeout"] <= 5 * lease  # kombu's default: 3,600 s
    assert options["visibility_timeout"] > 16
    assert options["unacked_restore_throttle"] == 1 and options["unacked_restore_interval"] <= lease


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_compact_now_on_many_conversations_costs_a_frozen_broker_one_bound(
    scheme, frozen, point_celery_at, settings, django_user_model
) -> None:  # type: ignore[no-untyped-def]
    # Each publish was bounded, not the request: the admin's "Compact now" on 20 selected
    # conversations waited 2.2 s for a frozen broker against 0.5 s for a refused one.
    from django.test import Client

    settings.AGENTMEMORY = {}
    ids = [conversation_with_turns(1)[0].pk for _ in range(20)]
    admin = django_user_model.objects.create_superuser(f"admin-{scheme}", password="pw")
    client = Client()
    client.force_login(admin)
    body = {"action": "compact_now", "_selected_action": ids}
    point_celery_at(frozen.url(scheme))
    took, response = _timed(lambda: client.post("/admin/agentmemory/conversation/", body))
    assert response is not None and response.status_code == 302
    assert took < 1.5, f"compact now on 20 conversations waited {took:.2f} s for a frozen {scheme} broker"
    failed = Conversation.objects.filter(pk__in=ids, compaction_error__startswith="enqueue failed")
    assert failed.count() == 20  # each recorded for the sweep
    assert Conversation.objects.filter(pk__in=ids, compaction_requested_at__isnull=True).count() == 0


def test_a_broker_that_timed_out_is_tried_again_after_the_wait(
    frozen, point_celery_at, settings, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.tasks import compact_conversation

    settings.AGENTMEMORY = {}
    monkeypatch.setattr(broker, "MIN_PUBLISH_WAIT", 0.5)
    point_celery_at(frozen.url("redis"))
    with pytest.raises(Exception, match="Timeout reading"):
        broker.publish(compact_conversation, (1,))
    with pytest.raises(broker.BrokerHeld):
        broker.publish(compact_conversation, (1,))
    time.sleep(0.6)
    with pytest.raises(Exception, match="Timeout reading"):
        broker.publish(compact_conversation, (1,))
