"""What several test modules share besides fixtures: the shared data path, the bug corpus and
its token counter, and the Redis database a test run claims for its broker."""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentmemory.messages import ChatMessage
from agentmemory.tokens import BaseTokenCounter

#: data beside the repository (``../shared/data``), not in it
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_bug_cases() -> list[dict]:
    """The bug corpus (``bug-cases.json`` in ``SHARED_DATA``), or ``[]`` when it is absent."""
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


def forget_celery_pools(app: Any) -> None:
    """Make the app look its pools up again for the current broker URL. Celery caches the
    connection and producer pools it took from kombu's registry (keyed by URL) at first use;
    eager runs take a producer too, for the default broker. The registry's pools are left
    open: other tests get them back when the URL is restored."""
    app._pool = None
    app.amqp._producer_pool = None


# -- the test broker ---------------------------------------------------------------------------
#
# Tests with a real broker empty its Redis database before and after use (tasks left by an
# interrupted run must not reach a worker, and a worker starts with --purge). Two test runs on
# one machine (the SQLite and the PostgreSQL pass, two checkouts) that emptied the same database
# took each other's tasks away. Each run therefore claims a database of its own: it sets a lock
# key in the database with SET NX (atomic: one run wins), and a database whose lock another
# live run holds is passed over for the next one. A database holding keys of something else
# (no marker of ours) is passed over too: it is never emptied.

#: the key a run holds in the Redis database it claimed (its value names the run)
LOCK_KEY = "agentmemory-tests:lock"
#: a key in a database a test run holds, left behind only by a run that died: the other keys
#: of such a database are tasks of that run, the next run's to delete
OWNED_KEY = "agentmemory-tests:owned"
#: how long a claim lasts without being renewed (seconds): a run that died frees its
#: database after this; every use of the broker renews it
LOCK_SECONDS = 3 * 3600
#: the Redis server: ``TEST_REDIS_URL``
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
#: the first database tried when ``TEST_REDIS_URL`` names none
FIRST_DATABASE = 9


def redis_base_url() -> str:
    """``TEST_REDIS_URL``, else ``redis://127.0.0.1:6379``: the server, and when the URL names
    a database, the first one a run tries to claim (else database 9)."""
    return os.environ.get("TEST_REDIS_URL") or DEFAULT_REDIS_URL


def with_database(url: str, db: int) -> str:
    """``url`` naming Redis database ``db``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def database_of(url: str) -> int:
    """The database number of a Redis URL (``FIRST_DATABASE`` when it names none)."""
    path = urlsplit(url).path.strip("/")
    return int(path) if path.isdigit() else FIRST_DATABASE


class RedisClaim:
    """A Redis database claimed by this test run (``claim()``), emptied around each use
    except for its lock (``empty()``), and released at the end of the run (``release()``).

    Attributes:
        url: the broker URL of the claimed database.
        run_id: this run's lock value (host, process id and a random part).
    """

    def __init__(self, url: str, run_id: str, client: Any) -> None:
        self.url, self.run_id, self.client = url, run_id, client

    @classmethod
    def claim(cls, base_url: str, *, databases: int | None = None) -> RedisClaim:
        """Claim the first database from ``base_url``'s on (wrapping round, never database
        0, where programs keep their data by default) that no live run holds and that is
        empty or was left by a test run that died (``OWNED_KEY``).

        Raises:
            redis.RedisError: the server cannot be reached.
            RuntimeError: every database is held by another run.
        """
        import redis

        run_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        probe = redis.Redis.from_url(base_url, socket_connect_timeout=2, socket_timeout=5)
        try:
            if databases is None:
                databases = int(probe.config_get("databases").get("databases", 16))
        except redis.ResponseError:  # CONFIG refused (a managed Redis): the default count
            databases = 16
        finally:
            probe.close()
        first = database_of(base_url)
        for offset in range(databases):
            db = (first + offset) % databases
            if db == 0 and first != 0:
                continue
            url = with_database(base_url, db)
            client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
            if client.set(LOCK_KEY, run_id, nx=True, ex=LOCK_SECONDS):
                if client.dbsize() == 1 or client.exists(OWNED_KEY):
                    client.set(OWNED_KEY, "1")
                    return cls(url, run_id, client)
                client.delete(LOCK_KEY)  # keys of something else: not ours to empty
            client.close()
        raise RuntimeError(f"every Redis database of {base_url} is claimed by another test run")

    def empty(self) -> None:
        """Delete every key of the claimed database but the lock and the marker, and renew
        the lock."""
        keep = {LOCK_KEY.encode(), OWNED_KEY.encode()}
        batch = [key for key in self.client.scan_iter(count=1000) if key not in keep]
        for start in range(0, len(batch), 1000):
            self.client.delete(*batch[start : start + 1000])
        self.client.set(LOCK_KEY, self.run_id, ex=LOCK_SECONDS)

    def release(self) -> None:
        """Empty the database and give it back, with no key of ours left in it (the lock is
        deleted only while it is ours)."""
        self.empty()
        if self.client.get(LOCK_KEY) == self.run_id.encode():
            self.client.delete(OWNED_KEY, LOCK_KEY)
        self.client.close()
