"""Read replicas on a real PostgreSQL standby (``pg_basebackup -R``, streaming, synchronous
commit): ``agentmemory.routers.ReplicaRouter`` keeps appends, windows and compaction on the
primary, lets search, usage, exports and admin lists read the standby, and falls back or says
so when the standby lags; the standby is never written; a promoted standby takes over with no
acknowledged message lost.

``.ci/replica`` starts the two clusters and runs this module (``-m replica``); by hand:
``eval "$(.ci/replica up)"`` then ``pytest -m replica tests/test_replicas.py``. The standby's
port comes from ``AGENTMEMORY_TEST_REPLICA_PORT``; the test database pytest-django makes on the
primary reaches the standby through replication, so it is read there under its test name.
"""

from __future__ import annotations

import copy
import os
import re
import signal
import threading
import time
import uuid

import pytest
from django.db import DatabaseError, connections
from django.db.utils import InternalError
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agentmemory import routers
from agentmemory.models import Conversation, Message

REPLICA = "replica"
pytestmark = [
    pytest.mark.replica,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True, databases=["default", REPLICA]),
]

WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|TRUNCATE|CREATE|ALTER|DROP)\b|\bFOR (NO KEY )?UPDATE\b"
    # the one-message append's server-side functions write
    r"|\bagentmemory_append_one_\w+\(",
    re.I,
)


def _sql(alias: str, statement: str, params: list | None = None) -> list[tuple]:
    with connections[alias].cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.fetchall() if cursor.description else []


@pytest.fixture(scope="module")
def replica_alias(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """The standby as the alias ``replica``: the default database's settings (the test
    database's name included) on the standby's port. Marked as a test mirror so that the test
    case does not flush it (a standby refuses the statements a flush sends)."""
    port = os.environ.get("AGENTMEMORY_TEST_REPLICA_PORT")
    if not port:
        pytest.fail('no standby: run .ci/replica, or eval "$(.ci/replica up)" first')
    default = connections.settings["default"]
    if connections["default"].vendor != "postgresql":
        pytest.fail("the replica suite runs on PostgreSQL (DATABASE_URL of the primary)")
    settings = copy.deepcopy(default)
    settings["PORT"] = port
    settings["TEST"] = {**settings.get("TEST", {}), "MIRROR": "default"}
    connections.settings[REPLICA] = settings
    with django_db_blocker.unblock():
        deadline = time.monotonic() + 30
        while True:  # the test database was just created on the primary
            try:
                assert _sql(REPLICA, "SELECT pg_is_in_recovery()") == [(True,)]
                break
            except DatabaseError:
                connections[REPLICA].close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    yield REPLICA
    with django_db_blocker.unblock():
        connections[REPLICA].close()
    del connections.settings[REPLICA]
    del connections[REPLICA]


@pytest.fixture
def routed(replica_alias, settings):  # type: ignore[no-untyped-def]
    settings.DATABASE_ROUTERS = ["agentmemory.routers.ReplicaRouter"]
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "agentmemory.routers.ReplicaReadsMiddleware"]
    settings.AGENTMEMORY_REPLICAS = {
        "PRIMARY": "default",
        "REPLICAS": [REPLICA],
        "MAX_LAG_SECONDS": 0.5,
        "LAG_CACHE_SECONDS": 0.0,
    }
    yield settings
    _sql(REPLICA, "SELECT CASE WHEN pg_is_in_recovery() THEN pg_wal_replay_resume() END")


@pytest.fixture
def client(routed, django_user_model):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True, is_superuser=True)
    client = APIClient(raise_request_exception=False)
    client.force_login(user)
    return client


def _wait_replayed() -> None:
    """Until the standby has replayed everything the primary wrote so far."""
    target = _sql("default", "SELECT pg_current_wal_lsn()::text")[0][0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _sql(REPLICA, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target])[0][0]:
            return
        time.sleep(0.05)
    raise AssertionError("the standby did not catch up in 10 s")


def _pause_replay() -> None:
    _sql(REPLICA, "SELECT pg_wal_replay_pause()")
    deadline = time.monotonic() + 10
    while _sql(REPLICA, "SELECT pg_get_wal_replay_pause_state()")[0][0] != "paused":
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _append(client: APIClient, conv: str, text: str) -> int:
    return client.post(f"/api/conversations/{conv}/messages/", {"role": "human", "content": text}).status_code


def _new_conversation(client: APIClient) -> str:
    response = client.post("/api/conversations/", {"agent_key": "replicas"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["uuid"]


def test_a_window_built_right_after_an_append_has_it_even_while_the_standby_is_paused(client):
    conv = _new_conversation(client)
    _pause_replay()  # the standby now misses everything written from here on
    with (
        CaptureQueriesContext(connections[REPLICA]) as on_replica,
        CaptureQueriesContext(connections["default"]) as on_primary,
    ):
        for n in range(5):
            text = f"append {n} {uuid.uuid4().hex}"
            appended = client.post(f"/api/conversations/{conv}/messages/", {"role": "human", "content": text})
            assert appended.status_code == 201, appended.content
            window = client.get(f"/api/conversations/{conv}/context/?max_tokens=4000")
            assert window.status_code == 200
            assert window.json()["messages"][-1]["content"] == text
            assert "Agentmemory-Read-Database" not in window  # not a replica view: pinned
    assert on_replica.captured_queries == []
    # the append's statement, or the server-side function that runs it
    assert any(
        "INSERT" in q["sql"] or "agentmemory_append_one_" in q["sql"] for q in on_primary.captured_queries
    )


def test_search_reads_the_standby_when_it_keeps_up(client):
    conv = _new_conversation(client)
    word = f"zebra{uuid.uuid4().hex[:8]}"
    assert _append(client, conv, word) == 201
    _wait_replayed()
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        found = client.get(f"/api/search/?q={word}&include=messages")
    assert found.status_code == 200, found.content
    assert found["Agentmemory-Read-Database"] == REPLICA
    assert float(found["Agentmemory-Replica-Lag"]) <= 0.5
    assert [hit["content"] for hit in found.json()["messages"]] == [word]
    assert any(
        "SELECT" in q["sql"] and "pg_is_in_recovery" not in q["sql"] for q in on_replica.captured_queries
    )


def test_a_paused_standby_is_left_for_the_primary_by_default(client):
    conv = _new_conversation(client)
    _pause_replay()
    word = f"okapi{uuid.uuid4().hex[:8]}"
    assert _append(client, conv, word) == 201
    time.sleep(0.8)  # past MAX_LAG_SECONDS behind the write the standby has not replayed
    lag = routers.measure_lag(REPLICA)
    assert lag is not None and lag > 0.5

    found = client.get(f"/api/search/?q={word}&include=messages")
    assert found.status_code == 200
    assert found["Agentmemory-Read-Database"] == "default"
    assert "Agentmemory-Replica-Stale" not in found
    assert [hit["content"] for hit in found.json()["messages"]] == [word]

    exported = client.get(f"/api/conversations/{conv}/export/")
    assert exported.status_code == 200
    assert exported["Agentmemory-Read-Database"] == "default"
    assert word in b"".join(exported.streaming_content).decode()


def test_a_paused_standby_is_read_and_reported_stale_when_on_lag_says_replica(client, routed):
    routed.AGENTMEMORY_REPLICAS = {**routed.AGENTMEMORY_REPLICAS, "ON_LAG": "replica"}
    conv = _new_conversation(client)
    _wait_replayed()
    _pause_replay()
    word = f"tapir{uuid.uuid4().hex[:8]}"
    assert _append(client, conv, word) == 201
    time.sleep(0.8)

    found = client.get(f"/api/search/?q={word}&include=messages")
    assert found.status_code == 200
    assert found["Agentmemory-Read-Database"] == REPLICA
    assert found["Agentmemory-Replica-Stale"] == "true"
    assert float(found["Agentmemory-Replica-Lag"]) > 0.5
    assert found.json()["messages"] == []  # the standby has not replayed the append

    window = client.get(f"/api/conversations/{conv}/context/")  # pinned, stale or not
    assert window.json()["messages"][-1]["content"] == word


def test_the_standby_refuses_writes_and_no_view_sends_it_one(client):
    with pytest.raises(InternalError, match="read-only"):
        _sql(REPLICA, "INSERT INTO agentmemory_conversation (uuid) VALUES (gen_random_uuid())")
    connections[REPLICA].close()

    conv = _new_conversation(client)
    _wait_replayed()
    with (
        CaptureQueriesContext(connections[REPLICA]) as on_replica,
        CaptureQueriesContext(connections["default"]) as on_primary,
    ):
        for n in range(3):
            assert (
                client.post(
                    f"/api/conversations/{conv}/messages/", {"role": "human", "content": f"m {n}"}
                ).status_code
                == 201
            )
        assert client.post("/api/facts/", {"content": "likes tea"}, format="json").status_code == 201
        _wait_replayed()
        answers = [
            client.get(f"/api/conversations/{conv}/context/"),
            client.get("/api/search/?q=tea"),  # recalls the fact: a write, on the primary
            client.get("/api/usage/"),
            client.get(f"/api/conversations/{conv}/model-calls/usage/"),
            client.get("/api/conversations/"),
            client.get("/admin/agentmemory/conversation/"),
            client.get("/admin/agentmemory/message/"),
        ]
        exported = client.get(f"/api/conversations/{conv}/export/")
        body = b"".join(exported.streaming_content)
    assert [a.status_code for a in answers] == [200] * len(answers)
    assert exported.status_code == 200 and b"m 2" in body
    assert [a.get("Agentmemory-Read-Database") for a in answers[1:]] == [REPLICA] * 6
    assert [q["sql"] for q in on_replica.captured_queries if WRITE.search(q["sql"])] == []
    assert len(on_replica.captured_queries) > 10
    # fact recall records itself (recall_count) in its ranking statement: on the primary
    assert any("UPDATE" in q["sql"] and "recall_count" in q["sql"] for q in on_primary.captured_queries)


def test_an_unreachable_database_answers_503_json(client, routed):
    conv = _new_conversation(client)
    saved = connections.settings["default"]["PORT"]
    connections["default"].close()
    connections["default"].settings_dict["PORT"] = "1"  # nothing listens there
    try:
        answer = client.post(f"/api/conversations/{conv}/messages/", {"role": "human", "content": "lost?"})
    finally:
        connections["default"].close()
        connections["default"].settings_dict["PORT"] = saved
    assert answer.status_code == 503
    assert answer.json()["error"] == "database_unavailable"
    assert answer["Retry-After"] == "1"


def test_promoting_the_standby_mid_run_loses_no_acknowledged_message(client, routed):
    """The primary dies (immediate shutdown: no clean hand-over) while appenders run; the
    standby is promoted; the default alias lists both servers with
    ``target_session_attrs=read-write`` (libpq), so new connections find the promoted one.
    Appends answered 201 before, during and after are all on the new primary; the ones in
    between answer 503 and are retried by the client."""
    conv = _new_conversation(client)
    primary = connections.settings["default"]
    primary_port = primary["PORT"] or "5432"
    data_dir = _sql("default", "SHOW data_directory")[0][0]
    pid = int(_sql("default", "SELECT pg_read_file('postmaster.pid')")[0][0].splitlines()[0])
    assert data_dir
    connections["default"].close()
    primary["HOST"] = f"{primary['HOST']},{primary['HOST']}"
    primary["PORT"] = f"{primary_port},{connections.settings[REPLICA]['PORT']}"
    primary["OPTIONS"] = {
        **primary.get("OPTIONS", {}),
        "target_session_attrs": "read-write",
        "connect_timeout": 2,
    }

    acknowledged: list[str] = []
    answers: list[int] = []
    stop = threading.Event()

    def appender(name: str) -> None:
        from django.test import Client

        own = Client(raise_request_exception=False)
        own.cookies = client.cookies
        n = 0
        while not stop.is_set():
            text = f"{name}-{n}"
            answer = own.post(
                f"/api/conversations/{conv}/messages/",
                {"role": "human", "content": text},
                content_type="application/json",
            )
            answers.append(answer.status_code)
            if answer.status_code == 201:
                acknowledged.append(text)
                n += 1
            else:
                assert answer.status_code == 503, answer.content
                time.sleep(0.1)
        connections.close_all()

    threads = [threading.Thread(target=appender, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before = len(acknowledged)
    os.kill(pid, signal.SIGQUIT)  # immediate shutdown: the primary is gone
    time.sleep(0.5)
    assert _sql(REPLICA, "SELECT pg_promote(true, 30)") == [(True,)]
    promoted_at = len(acknowledged)
    deadline = time.monotonic() + 30
    while len(acknowledged) < promoted_at + 30 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(30)
    assert before > 0 and len(acknowledged) >= promoted_at + 30, (before, promoted_at, len(acknowledged))
    assert set(answers) <= {201, 503}

    connections["default"].close()
    stored = set(
        Message.objects.using("default").filter(conversation__uuid=conv).values_list("content", flat=True)
    )
    assert set(acknowledged) <= stored
    assert _sql("default", "SELECT pg_is_in_recovery(), current_setting('port')") == [
        (False, connections.settings[REPLICA]["PORT"])
    ]
    seqs = list(Message.objects.filter(conversation__uuid=conv).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert Conversation.objects.get(uuid=conv).last_seq == len(seqs)
    # the promoted server is no replica any more: a replica scope reads the primary alias
    assert routers.measure_lag(REPLICA) is None
    assert client.get("/api/usage/")["Agentmemory-Read-Database"] == "default"
