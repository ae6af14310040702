"""Database connections of the threads LangGraph runs a sync graph in.

A sync graph saves checkpoints and reads the store from LangGraph's worker threads, which
Django does not know: a connection a worker opens would stay open until the thread is
collected (psycopg then warns that it "was deleted while still open"). ``tidy`` closes, in a
thread other than the main one, the connection that the call it wraps opened, unless a
transaction is open (Django Channels' ``database_sync_to_async`` follows the same rule for its
worker threads). A connection the thread already had is left as it was. With PostgreSQL,
Django's connection pool (``"OPTIONS": {"pool": True}``, psycopg 3) makes the reconnects cheap.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.db import connections

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def tidy(alias: str) -> Iterator[None]:
    """Close the connection of ``alias`` after the block when the block opened it, outside a
    transaction, in a thread other than the main thread."""
    connection = connections[alias]
    opened_here = connection.connection is None
    try:
        yield
    finally:
        if (
            opened_here
            and connection.connection is not None
            and not connection.in_atomic_block
            and threading.current_thread() is not threading.main_thread()
        ):
            connection.close()


def tidy_method(method: F) -> F:
    """``tidy`` around a method of an object with a ``db`` alias property."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with tidy(self.db):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
