"""Settings of the test suite: the example project's (``project/settings.py``: ``DATABASE_URL``,
SQLite by default; eager Celery tasks unless ``CELERY_BROKER_URL`` is set), with what only
tests want. Child processes a test starts (workers, management commands) use
``project.settings`` or a host project's settings of their own."""

from project.settings import *  # noqa: F403

# The default hasher is slow on purpose; no test here is about password hashing, and users
# log in on most API tests.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
