"""Shared fixtures: conversations, token counters for the bug corpus, the shared data path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agentmemory.messages import ChatMessage
from agentmemory.tokens import BaseTokenCounter

pytest_plugins = ["tests.fake_openai_server", "tests.fake_anthropic_server"]

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """PostgreSQL-only tests skip elsewhere, except in CI, where a skip would hide them.
    SQLite-only tests (its FTS5 tables and triggers) are deselected on other databases, and
    pgvector tests wherever ``agentmemory.contrib.pgvector`` is not installed on PostgreSQL
    (``.ci/pgvector`` runs them): they have nothing to run there, and each pass runs what its
    database has. Browser tests run only when the marker expression names them
    (``-m browser``, as ``.ci/browser`` does): they need Chromium; replica tests likewise
    (``-m replica``, as ``.ci/replica`` does): they need a primary and its standby."""
    from django.apps import apps

    drop = []
    if "browser" not in (config.getoption("markexpr", "") or ""):
        drop.append("browser")
    if "replica" not in (config.getoption("markexpr", "") or ""):
        drop.append("replica")
    if connection.vendor != "sqlite":
        drop.append("sqlite")
    if connection.vendor != "postgresql" or not apps.is_installed("agentmemory.contrib.pgvector"):
        drop.append("pgvector")
    kept = [item for item in items if not any(item.get_closest_marker(m) for m in drop)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    if connection.vendor == "postgresql":
        return
    for item in items:
        if item.get_closest_marker("postgres"):
            if os.environ.get("CI"):
                item.add_marker(pytest.mark.usefixtures("_fail_without_postgres"))
            else:
                item.add_marker(pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://..."))


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # type: ignore[no-untyped-def]
    # The default hasher is slow on purpose; no test here is about password hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def _fail_without_postgres() -> None:
    pytest.fail(
        "PostgreSQL test run on another database in CI: deselect it (-m 'not postgres') or set DATABASE_URL"
    )


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (it ships beside the repository, not in it)")
    return SHARED_DATA


def load_bug_cases() -> list[dict]:
    path = SHARED_DATA / "bug-cases.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())


class TableTokenCounter(BaseTokenCounter):
    """Bug-corpus counter ``table``: message i costs ``message_tokens[i]``, matched by its
    content; any other message (a summary, a truncated copy) costs its word count."""

    id = "table"

    def __init__(self, contents: list[str | None], tokens: list[int]) -> None:
        self.table = {c: t for c, t in zip(contents, tokens, strict=True)}

    def count_text(self, text: str) -> int:
        return max(1, len(text.split())) if text else 0

    def count_message(self, message: ChatMessage) -> int:
        if message.content in self.table and not message.truncated:
            return self.table[message.content]
        return max(1, len((message.content or "").split()))


@pytest.fixture
def conversation(db):  # type: ignore[no-untyped-def]
    from agentmemory.models import Conversation

    return Conversation.objects.create(agent_key="test")


#: Redis database set aside for tests that need a real broker; it is emptied around each use.
TEST_BROKER_URL = os.environ.get("TEST_REDIS_URL") or "redis://127.0.0.1:6379/9"


@pytest.fixture
def broker_url():  # type: ignore[no-untyped-def]
    """The test Redis broker (``TEST_REDIS_URL``), emptied before and after: tasks left by an
    interrupted run must not reach a worker. Unreachable: a failure in CI, a skip elsewhere."""
    import redis

    client = redis.Redis.from_url(TEST_BROKER_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        message = (
            f"Redis broker {TEST_BROKER_URL} is unreachable ({exc}); start redis-server or set TEST_REDIS_URL"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    client.flushdb()
    yield TEST_BROKER_URL
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """pytest-django's test databases, and before they are dropped on PostgreSQL, the sessions
    a test left connected to them (a thread or a child process that outlived its test) are
    named on stderr and ended, so that the drop does not fail with "being accessed by other
    users" after every test passed."""
    yield
    import sys

    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid, application_name, state, left(query, 200) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                for row in cursor.fetchall():
                    print(f"session left connected to the test database ({alias}): {row}", file=sys.stderr)
                    cursor.execute("SELECT pg_terminate_backend(%s)", [row[0]])


def _forget_connections(app) -> None:  # type: ignore[no-untyped-def]
    """Make the app look its pools up again for the current broker URL. Celery caches the
    connection and producer pools it took from kombu's registry (keyed by URL) at first use;
    eager runs take a producer too, for the default broker. The registry's pools are left
    open: other tests get them back when the URL is restored."""
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def celery_app(broker_url):  # type: ignore[no-untyped-def]
    """The project's Celery app publishing to the test broker instead of running eagerly."""
    from project.celery import app

    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    _forget_connections(app)
    app.conf.update(broker_url=broker_url, task_always_eager=False)
    try:
        yield app
    finally:
        _forget_connections(app)
        app.conf.update(**saved)


# A user and an API client logged in as that user, for the API tests that need no other
# (files with users of their own define their own ``user`` and ``api``).
@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def api(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient(raise_request_exception=False)
    client.force_login(user)
    return client
