"""The SQL of a queryset whose shape is fixed and whose values alone vary, compiled once.

Building a Django queryset and compiling it cost 0.5-0.7 ms of CPU for a scope of a few
lookups (``build_filter`` for each, then the compiler), on every recall, though the SQL text
is the same each time and only the parameters change. ``Scope`` makes the queryset on demand
and, on PostgreSQL, gives its SQL from a cache keyed by everything that can change the text:
the scope's name (one builder), the database alias and the type of each value; the
parameters are the values put where the compiled statement had them.

The places of the values are learnt by compiling the builder once more with made-up values
of the same types (``_stand_in``), each unlike any other; the cache is filled only when that
statement has the same text and the values' parameters come out as the values themselves
(PostgreSQL's adaptation of an ``int``, a ``str`` and an aware ``datetime`` leaves them as
they are, which the first call checks), and every other parameter is the same in both.
A value of another type (None, which a lookup makes ``IS NULL``; a bool; a naive datetime)
is never cached: the queryset is compiled as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections

#: {(scope name, alias, value types): (SQL, per parameter: the value's index, or -1 and the
#: constant)}
_CACHE: dict[tuple[Any, ...], tuple[str, tuple[tuple[int, Any], ...]]] = {}
_CACHED_TYPES = (int, str, datetime)


def _stand_in(value: Any, index: int) -> Any:
    """A made-up value of ``value``'s type, unlike any value a scope is given: a negative
    integer near the 32-bit minimum (in the range of any integer column), a text with
    control characters, a time in year 1."""
    if type(value) is int:
        return -2_147_000_000 + 7919 * index
    if type(value) is str:
        return f"\x1e\x1fagentmemory stand-in {index}\x1f\x1e"
    return datetime(1, 1, 2, tzinfo=UTC) + timedelta(seconds=index + 1)


def _cacheable(values: tuple[Any, ...]) -> bool:
    return all(
        type(value) in _CACHED_TYPES and (type(value) is not datetime or value.utcoffset() is not None)
        for value in values
    )


def clear() -> None:
    """Empty the cache (``setting_changed`` of ``DATABASES``, tests)."""
    _CACHE.clear()


@dataclass(frozen=True)
class Scope:
    """A queryset ``build(using, *values)`` made only when asked (``queryset``), and the SQL and
    parameters of it (``sql_with_params``), cached on PostgreSQL as the module says.
    ``name`` names the builder: two scopes of one name must have one builder."""

    name: str
    build: Callable[..., Any]
    values: tuple[Any, ...]
    using: str

    def queryset(self) -> Any:
        return self.build(self.using, *self.values)

    def sql_with_params(self) -> tuple[str, list[Any]]:
        """The SQL of ``queryset().query`` with its parameters (a list); a scope without a
        name or without values is compiled each time."""
        values = self.values
        if (
            not self.name
            or not values
            or connections[self.using].vendor != "postgresql"
            or not _cacheable(values)
        ):
            sql, params = self.queryset().query.sql_with_params()
            return sql, list(params)
        key = (self.name, self.using, *(type(value) for value in values))
        known = _CACHE.get(key)
        if known is None:
            sql, params = self.queryset().query.sql_with_params()
            learnt = _learn(self, sql, list(params))
            if learnt is not None:
                _CACHE[key] = (sql, learnt)
            return sql, list(params)
        sql, places = known
        return sql, [values[index] if index >= 0 else constant for index, constant in places]


def _learn(scope: Scope, sql: str, params: list[Any]) -> tuple[tuple[int, Any], ...] | None:
    """Where each of ``scope``'s values goes in ``params`` (the compiled parameters of its
    own values, ``sql`` their text), from a compilation with stand-ins; None when that is
    not certain."""
    stand_ins = tuple(_stand_in(value, index) for index, value in enumerate(scope.values))
    other_sql, other_params = scope.build(scope.using, *stand_ins).query.sql_with_params()
    if other_sql != sql or len(other_params) != len(params):
        return None
    places: list[tuple[int, Any]] = []
    for param, other in zip(params, other_params, strict=True):
        at = [
            i for i, stand_in in enumerate(stand_ins) if type(other) is type(stand_in) and other == stand_in
        ]
        if len(at) == 1:
            value = scope.values[at[0]]
            if type(param) is not type(value) or param != value:
                return None
            places.append((at[0], None))
        elif not at and type(param) is type(other) and param == other:
            places.append((-1, param))
        else:
            return None
    return tuple(places)
