"""Fixtures of the whole suite (each name means one thing everywhere), and the collection
rules of its markers. Plain helpers are in ``tests/helpers.py``, settings in
``tests/settings.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.helpers import SHARED_DATA, RedisClaim, forget_celery_pools, redis_base_url

pytest_plugins = ["tests.fake_openai_server", "tests.fake_anthropic_server"]


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


def _skipped_in_ci(report: Any) -> None:
    """In CI (``CI`` set, as ``.ci/run`` sets it) a skipped test or module is a failure: every
    test must run there, and a skip would hide what it checks."""
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    _skipped_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):  # type: ignore[no-untyped-def]
    outcome = yield
    _skipped_in_ci(outcome.get_result())


@pytest.fixture(autouse=True)
def _no_embedding_pause() -> Iterator[None]:
    """A failing embedder pauses in-process embedding of new messages for a minute
    (``agentmemory.recall.inprocess``); no test inherits another's pause."""
    from agentmemory.recall import inprocess

    inprocess.reset()
    yield
    inprocess.reset()


@pytest.fixture(autouse=True)
def _no_broker_held() -> Iterator[None]:
    """A publish that timed out holds further publishes to that broker URL for the publish
    wait (``agentmemory.broker``); a later test's broker on a reused port never inherits it."""
    from agentmemory import broker

    broker.release_held()
    yield
    broker.release_held()


@pytest.fixture
def _fail_without_postgres() -> None:
    pytest.fail(
        "PostgreSQL test run on another database in CI: deselect it (-m 'not postgres') or set DATABASE_URL"
    )


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the repository; the test skips when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (it ships beside the repository, not in it)")
    return SHARED_DATA


@pytest.fixture
def conversation(db):  # type: ignore[no-untyped-def]
    """A conversation of agent ``test``, without an owner or messages."""
    from agentmemory.models import Conversation

    return Conversation.objects.create(agent_key="test")


@pytest.fixture(scope="session")
def redis_claim() -> Iterator[RedisClaim]:
    """The Redis database this run claimed for its broker (``tests.helpers.RedisClaim``: the
    first free one from ``TEST_REDIS_URL``'s on), released at the end of the run.
    Unreachable: a failure in CI, a skip elsewhere."""
    import redis

    base = redis_base_url()
    try:
        claim = RedisClaim.claim(base)
    except (redis.RedisError, RuntimeError) as exc:
        message = f"Redis broker {base} is unusable ({exc}); start redis-server or set TEST_REDIS_URL"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    yield claim
    claim.release()


@pytest.fixture
def broker_url(redis_claim: RedisClaim) -> Iterator[str]:
    """The URL of this run's Redis database (``redis_claim``), emptied before and after:
    tasks left by an interrupted test must not reach a worker."""
    redis_claim.empty()
    yield redis_claim.url
    redis_claim.empty()


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


@pytest.fixture
def celery_app(broker_url):  # type: ignore[no-untyped-def]
    """The project's Celery app publishing to the test broker instead of running eagerly."""
    from project.celery import app

    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}
    forget_celery_pools(app)
    app.conf.update(broker_url=broker_url, task_always_eager=False)
    try:
        yield app
    finally:
        forget_celery_pools(app)
        app.conf.update(**saved)


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user a test acts as: ``alice`` (password ``alice-pw``). A module that wants
    another name gives ``user`` its own value; it stays the user the test acts as."""
    return django_user_model.objects.create_user("alice", password="alice-pw")


@pytest.fixture
def api(user) -> APIClient:  # type: ignore[no-untyped-def]
    """An API client logged in as ``user``; a server error is answered as a 500 response
    (not raised), so that a test can say no request makes one."""
    client = APIClient(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.fixture
def api_forced(user) -> APIClient:  # type: ignore[no-untyped-def]
    """An API client whose requests are authenticated as ``user`` by DRF's
    ``force_authenticate``: no session, so no session or user query in a request's count; a
    server error is answered as a 500 response (not raised)."""
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    return client
