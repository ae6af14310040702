"""Settings of the test suite: the example project's (``project/settings.py``: ``DATABASE_URL``,
SQLite by default; eager Celery tasks unless ``CELERY_BROKER_URL`` is set), with what only
tests want. Child processes a test starts (workers, management commands) use
``project.settings`` or a host project's settings of their own."""

import os

from project.settings import *  # noqa: F403

# The default hasher is slow on purpose; no test here is about password hashing, and users
# log in on most API tests.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Test databases named for this run (``test_<name>_<pid>``, or ``TEST_RUN_ID`` when set), so
# that two suites on one machine never create, flush or drop each other's.
_RUN_ID = os.environ.get("TEST_RUN_ID") or str(os.getpid())
for _database in DATABASES.values():  # noqa: F405
    if "postgresql" in _database["ENGINE"]:
        _database.setdefault("TEST", {})["NAME"] = f"test_{_database['NAME']}_{_RUN_ID}"[:63]
