"""System checks of ``agentmemory.contrib.partitioning``: ``agentmemory_partitioning.E001`` and up."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.db import connections, router

from agentmemory.contrib.partitioning.migrations._layout import (
    PartitioningError,
    check_partitions,
    configured_partitions,
)


def check_partitioning(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: a database agentmemory migrates to is not PostgreSQL (declarative partitioning
    is PostgreSQL's). E002: ``AGENTMEMORY_PARTITIONS`` is not an allowed partition count.
    Reads no database: the vendor comes from the configured backend. Registered by the app's
    ``ready()``, so it runs only where the app is installed."""
    from agentmemory.models import Message

    errors: list[CheckMessage] = []
    for alias in settings.DATABASES:
        connection = connections[alias]
        if connection.vendor != "postgresql" and router.allow_migrate_model(alias, Message):
            errors.append(
                Error(
                    f"agentmemory.contrib.partitioning needs PostgreSQL, and agentmemory's messages "
                    f"may be migrated to database {alias!r} ({connection.vendor}).",
                    hint="Remove 'agentmemory.contrib.partitioning' from INSTALLED_APPS, or route "
                    "agentmemory's models to PostgreSQL databases only (a database router's "
                    "allow_migrate).",
                    id="agentmemory_partitioning.E001",
                )
            )
    try:
        check_partitions(configured_partitions())
    except PartitioningError as exc:
        errors.append(
            Error(
                str(exc),
                hint="Set AGENTMEMORY_PARTITIONS to the number of hash partitions, e.g. 16; it is read "
                "when the migration runs.",
                id="agentmemory_partitioning.E002",
            )
        )
    return errors
