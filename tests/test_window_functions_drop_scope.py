"""Migration 0027 drops the window functions of earlier releases before it creates its own:
only those, in the schema it creates them in, not another function whose name merely starts
like theirs nor a function of another schema on the search path."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.db import connection

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

MIGRATION = import_module("agentmemory.migrations.0027_window_read_functions_in_migration")


def _exists(signature: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [signature])
        return bool(cursor.fetchone()[0])


def test_the_drop_leaves_other_functions_alone() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA other_tenant")
        cursor.execute(
            "CREATE FUNCTION other_tenant.agentmemory_window_head_pu(bigint) RETURNS int "
            "LANGUAGE sql AS 'SELECT 1'"
        )
        cursor.execute("CREATE FUNCTION agentmemory_window_audit() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        cursor.execute("SET LOCAL search_path = public, other_tenant")
        cursor.execute(MIGRATION.DROP_EVERY_VERSION)
    assert _exists("public.agentmemory_window_audit()")
    assert _exists("other_tenant.agentmemory_window_head_pu(bigint)")
