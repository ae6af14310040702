"""``agentmemory.routers.ReplicaRouter`` without a standby: its settings are checked, reads stay
on the primary outside a ``replica_reads()`` scope, a write in a scope pins the rest of it to the
primary, and a replica that cannot be measured (here: SQLite, or nothing listening) is not read.
The API answers a database error it cannot recover from with a 503. The standby itself is
exercised in ``tests/test_replicas.py`` (``.ci/replica``)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from agentmemory import routers
from agentmemory.models import Conversation, Message


@pytest.fixture
def replica_settings(settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY_REPLICAS = {"PRIMARY": "default", "REPLICAS": ["secondary"], "MAX_LAG_SECONDS": 1}
    return settings


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"REPLICAS": ["nowhere"]}, "not in DATABASES"),
        ({"MAX_LAG": 3}, "unknown keys"),
        ({"ON_LAG": "stale"}, "ON_LAG"),
        ({"MAX_LAG_SECONDS": -1}, ">= 0"),
    ],
)
def test_settings_are_checked(settings, conf, message):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY_REPLICAS = conf
    with pytest.raises(ImproperlyConfigured, match=message):
        routers.ReplicaRouter().db_for_read(Message)


def test_reads_outside_a_scope_and_all_writes_go_to_the_primary(replica_settings):  # type: ignore[no-untyped-def]
    router = routers.ReplicaRouter()
    with mock.patch.object(routers, "measure_lag", return_value=0.0) as measure:
        assert router.db_for_read(Message) == "default"
        assert router.db_for_write(Message) == "default"
        measure.assert_not_called()
        assert router.allow_migrate("secondary", "agentmemory") is False
        assert router.allow_migrate("default", "agentmemory") is None


def test_a_scope_reads_a_fresh_replica_until_it_writes(replica_settings):  # type: ignore[no-untyped-def]
    router = routers.ReplicaRouter()
    with mock.patch.object(routers, "measure_lag", return_value=0.2), routers.replica_reads() as scope:
        assert router.db_for_read(get_user_model()) == "default"  # a login is seen at once
        assert router.db_for_read(Conversation) == "secondary"
        assert (scope.read_from, scope.lag, scope.stale) == ("secondary", 0.2, False)
        router.db_for_write(Conversation)
        assert router.db_for_read(Conversation) == "default"


@pytest.mark.parametrize(
    ("on_lag", "expected", "stale"), [("primary", "default", False), ("replica", "secondary", True)]
)
def test_a_lagging_replica_falls_back_or_is_marked_stale(replica_settings, on_lag, expected, stale):  # type: ignore[no-untyped-def]
    replica_settings.AGENTMEMORY_REPLICAS = {**replica_settings.AGENTMEMORY_REPLICAS, "ON_LAG": on_lag}
    with mock.patch.object(routers, "measure_lag", return_value=7.5), routers.replica_reads() as scope:
        assert routers.ReplicaRouter().db_for_read(Message) == expected
    assert scope.stale is stale


@pytest.mark.django_db(transaction=True, databases=["default", "secondary"])
def test_a_replica_that_cannot_be_measured_is_not_read(replica_settings):  # type: ignore[no-untyped-def]
    assert routers.measure_lag("secondary") is None  # SQLite has no replay position
    with routers.replica_reads() as scope:
        assert routers.ReplicaRouter().db_for_read(Message) == "default"
    assert scope.read_from == "default" and scope.lag is None


@pytest.mark.django_db(transaction=True, databases=["default", "secondary"])
def test_reads_inside_a_transaction_on_the_primary_stay_there(replica_settings):  # type: ignore[no-untyped-def]
    from django.db import transaction

    with mock.patch.object(routers, "measure_lag", return_value=0.0), routers.replica_reads():
        with transaction.atomic():
            assert routers.ReplicaRouter().db_for_read(Message) == "default"
        assert routers.ReplicaRouter().db_for_read(Message) == "secondary"


@pytest.mark.django_db
def test_a_database_error_answers_503_json(api):  # type: ignore[no-untyped-def]
    with mock.patch(
        "agentmemory.api.views.visible_conversations", side_effect=OperationalError("server closed")
    ):
        answer = api.get("/api/conversations/")
    assert answer.status_code == 503
    assert answer.json()["error"] == "database_unavailable"
    assert answer["Retry-After"] == "1"
