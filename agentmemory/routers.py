"""Read replicas: a database router that keeps every read on the primary except inside a
``replica_reads()`` scope, and a middleware that opens that scope for the views that may read
a replica (admin lists, search, usage, exports).

Configuration (the host's settings; see docs/operations.md, "Read replicas")::

    DATABASE_ROUTERS = ["agentmemory.routers.ReplicaRouter"]
    MIDDLEWARE = [..., "agentmemory.routers.ReplicaReadsMiddleware"]
    AGENTMEMORY_REPLICAS = {
        "PRIMARY": "default",          # alias every write and every pinned read goes to
        "REPLICAS": ["replica"],       # standby aliases (PostgreSQL streaming replication)
        "MAX_LAG_SECONDS": 5.0,        # a replica further behind than this is not read
        "LAG_CACHE_SECONDS": 1.0,      # how long a measured lag is trusted
        "ON_LAG": "primary",           # "primary": fall back; "replica": read it, say so
        "APPS": ["agentmemory"],       # app labels whose models may be read from a replica
    }

Rules (why: appends, context windows and compaction must see their own writes, and a
standby refuses writes):

- Writes always go to the primary; migrations run on the primary only.
- Reads go to the primary unless a ``replica_reads()`` scope is open and the model belongs to
  one of ``APPS`` (default ``agentmemory``: sessions, users and tokens stay on the primary, so
  a login is seen at once), and also inside a scope once
  the scope has written (a request that writes then reads sees its write) or while a
  transaction is open on the primary.
- In a scope, the first read picks a replica whose replay lag is at most ``MAX_LAG_SECONDS``;
  lag is ``now - pg_last_xact_replay_timestamp()`` while the standby has received WAL it has not
  replayed (``pg_last_wal_receive_lsn() <> pg_last_wal_replay_lsn()``), else 0, measured on the
  replica at most once per ``LAG_CACHE_SECONDS``. A replica that cannot be reached or is no
  longer in recovery (promoted) is not read. With none fit, ``ON_LAG="primary"`` reads the
  primary; ``ON_LAG="replica"`` reads the least lagging reachable replica anyway. Either way the
  scope records which alias it read and the lag (``ReplicaScope``), and the middleware reports
  them in the ``Agentmemory-Read-Database`` and ``Agentmemory-Replica-Lag`` response headers
  (``Agentmemory-Replica-Stale: true`` when a replica beyond the bound was read).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import DatabaseError, connections
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import Resolver404, resolve

#: views (``namespace:url_name``, shell patterns) whose GET and HEAD requests may read a replica
DEFAULT_VIEWS = (
    "admin:agentmemory_*_changelist",
    "agentmemory:search",
    "agentmemory:usage",
    "agentmemory:model-calls-usage",
    "agentmemory:conversation-export",
    "agentmemory:conversation-list",
)

_LAG_SQL = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() IS NULL
              OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
            ELSE COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()),
                          'Infinity')::float8
       END
"""


@dataclass(frozen=True)
class ReplicaSettings:
    """``settings.AGENTMEMORY_REPLICAS``, checked. Raises ``ImproperlyConfigured`` for an
    unknown key, an alias missing from ``DATABASES``, a negative bound or an unknown ``ON_LAG``."""

    primary: str = "default"
    replicas: tuple[str, ...] = ()
    max_lag_seconds: float = 5.0
    lag_cache_seconds: float = 1.0
    on_lag: str = "primary"
    views: tuple[str, ...] = DEFAULT_VIEWS
    apps: tuple[str, ...] = ("agentmemory",)


_KEYS = {"PRIMARY", "REPLICAS", "MAX_LAG_SECONDS", "LAG_CACHE_SECONDS", "ON_LAG", "VIEWS", "APPS"}
_settings_cache: ReplicaSettings | None = None


def replica_settings() -> ReplicaSettings:
    """The checked ``AGENTMEMORY_REPLICAS`` setting (cached; reset when the setting changes)."""
    global _settings_cache
    if _settings_cache is None:
        raw = dict(getattr(settings, "AGENTMEMORY_REPLICAS", {}) or {})
        unknown = set(raw) - _KEYS
        if unknown:
            raise ImproperlyConfigured(f"AGENTMEMORY_REPLICAS has unknown keys: {sorted(unknown)}")
        conf = ReplicaSettings(
            primary=str(raw.get("PRIMARY", "default")),
            replicas=tuple(raw.get("REPLICAS", ())),
            max_lag_seconds=float(raw.get("MAX_LAG_SECONDS", 5.0)),
            lag_cache_seconds=float(raw.get("LAG_CACHE_SECONDS", 1.0)),
            on_lag=str(raw.get("ON_LAG", "primary")),
            views=tuple(raw.get("VIEWS", DEFAULT_VIEWS)),
            apps=tuple(raw.get("APPS", ("agentmemory",))),
        )
        for alias in (conf.primary, *conf.replicas):
            if alias not in settings.DATABASES:
                raise ImproperlyConfigured(f"AGENTMEMORY_REPLICAS names {alias!r}, which is not in DATABASES")
        if conf.max_lag_seconds < 0 or conf.lag_cache_seconds < 0:
            raise ImproperlyConfigured(
                "AGENTMEMORY_REPLICAS: MAX_LAG_SECONDS and LAG_CACHE_SECONDS must be >= 0"
            )
        if conf.on_lag not in ("primary", "replica"):
            raise ImproperlyConfigured('AGENTMEMORY_REPLICAS["ON_LAG"] must be "primary" or "replica"')
        _settings_cache = conf
    return _settings_cache


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    global _settings_cache
    if setting in ("AGENTMEMORY_REPLICAS", "DATABASES"):
        _settings_cache = None
        _lags.clear()


# --------------------------------------------------------------------------- lag


@dataclass(frozen=True)
class ReplicaLag:
    """One measurement of a replica: ``lag`` in seconds (``None`` when it cannot be read: down,
    or promoted and so no longer a replica), taken at ``measured_at`` (``time.monotonic()``)."""

    alias: str
    lag: float | None
    measured_at: float


_lags: dict[str, ReplicaLag] = {}
_lags_lock = threading.Lock()


def measure_lag(alias: str) -> float | None:
    """Replay lag of the standby behind ``alias`` in seconds, measured now (one query on it):
    0 when it has replayed all it received, ``None`` when it cannot be reached or is not in
    recovery. The connection is closed after a failure so the next use reconnects."""
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(_LAG_SQL)
            in_recovery, lag = cursor.fetchone()
    except DatabaseError:
        connections[alias].close()
        return None
    if not in_recovery or lag is None:
        return None
    return max(float(lag), 0.0)


def replica_lag(alias: str, *, max_age: float | None = None) -> ReplicaLag:
    """The lag of ``alias``, from a measurement at most ``max_age`` seconds old (default
    ``LAG_CACHE_SECONDS``), measuring it again when older."""
    max_age = replica_settings().lag_cache_seconds if max_age is None else max_age
    now = time.monotonic()
    with _lags_lock:
        known = _lags.get(alias)
    if known is not None and now - known.measured_at <= max_age:
        return known
    measured = ReplicaLag(alias, measure_lag(alias), time.monotonic())
    with _lags_lock:
        _lags[alias] = measured
    return measured


# --------------------------------------------------------------------------- scope


@dataclass
class ReplicaScope:
    """What one ``replica_reads()`` scope did: ``read_from`` (the alias its reads went to, set
    on the first read), ``lag`` (seconds, of that replica; ``None`` for the primary or an
    unknown lag), ``stale`` (a replica beyond ``MAX_LAG_SECONDS`` was read), ``wrote`` (a write
    was routed, so later reads go to the primary)."""

    read_from: str | None = None
    lag: float | None = None
    stale: bool = False
    wrote: bool = False
    lags: list[ReplicaLag] = field(default_factory=list)


_scope: contextvars.ContextVar[ReplicaScope | None] = contextvars.ContextVar(
    "agentmemory_replica_scope", default=None
)


@contextmanager
def replica_reads() -> Iterator[ReplicaScope]:
    """Let the reads inside the block go to a replica, under the rules of the module docstring.
    Yields the ``ReplicaScope`` that records where they went. Nests (an inner scope is the
    outer one)."""
    current = _scope.get()
    if current is not None:
        yield current
        return
    scope = ReplicaScope()
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        # a streamed body may be read in another context than the one that set the scope
        with contextlib.suppress(ValueError):
            _scope.reset(token)


def current_scope() -> ReplicaScope | None:
    """The open ``replica_reads()`` scope, if any."""
    return _scope.get()


def _choose(conf: ReplicaSettings, scope: ReplicaScope) -> str:
    measured = [replica_lag(alias) for alias in conf.replicas]
    scope.lags = measured
    reachable = sorted((m for m in measured if m.lag is not None), key=lambda m: m.lag or 0.0)
    fit = [m for m in reachable if (m.lag or 0.0) <= conf.max_lag_seconds]
    if fit:
        scope.read_from, scope.lag = fit[0].alias, fit[0].lag
    elif reachable and conf.on_lag == "replica":
        scope.read_from, scope.lag, scope.stale = reachable[0].alias, reachable[0].lag, True
    else:
        scope.read_from, scope.lag = conf.primary, None
    return scope.read_from


class ReplicaRouter:
    """Django database router for a primary and its streaming replicas (module docstring)."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        conf = replica_settings()
        scope = _scope.get()
        if scope is None or scope.wrote or not conf.replicas or model._meta.app_label not in conf.apps:  # type: ignore[attr-defined]
            return conf.primary
        if connections[conf.primary].in_atomic_block:
            return conf.primary
        return scope.read_from or _choose(conf, scope)

    def db_for_write(self, model: type, **hints: Any) -> str:
        scope = _scope.get()
        if scope is not None:
            scope.wrote = True
        return replica_settings().primary

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        conf = replica_settings()
        aliases = {conf.primary, *conf.replicas}
        if obj1._state.db in aliases and obj2._state.db in aliases:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db in replica_settings().replicas else None


# --------------------------------------------------------------------------- middleware


class ReplicaReadsMiddleware:
    """Opens a ``replica_reads()`` scope around GET and HEAD requests to the views named by
    ``AGENTMEMORY_REPLICAS["VIEWS"]`` (``namespace:url_name`` shell patterns; default
    ``DEFAULT_VIEWS``), streamed bodies included, and reports where the reads went in the
    ``Agentmemory-Read-Database``, ``Agentmemory-Replica-Lag`` (seconds) and
    ``Agentmemory-Replica-Stale`` headers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def _may_read_replica(self, request: HttpRequest) -> bool:
        if request.method not in ("GET", "HEAD"):
            return False
        try:
            name = resolve(request.path_info).view_name
        except Resolver404:
            return False
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in replica_settings().views)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self._may_read_replica(request):
            return self.get_response(request)
        with replica_reads() as scope:
            response = self.get_response(request)
        if isinstance(response, StreamingHttpResponse):
            response.streaming_content = _in_scope(scope, response.streaming_content)
        if scope.read_from is not None:
            response["Agentmemory-Read-Database"] = scope.read_from
            if scope.lag is not None:
                response["Agentmemory-Replica-Lag"] = f"{scope.lag:.3f}"
            if scope.stale:
                response["Agentmemory-Replica-Stale"] = "true"
        return response


def _in_scope(scope: ReplicaScope, chunks: Any) -> Iterator[Any]:
    token = _scope.set(scope)
    try:
        yield from chunks
    finally:
        # a streamed body may be read in another context than the one that set the scope
        with contextlib.suppress(ValueError):
            _scope.reset(token)
