"""Settings of the example project, read from the environment.

``DATABASE_URL`` defaults to a SQLite file beside ``manage.py``; with ``CELERY_BROKER_URL``
unset, Celery tasks run eagerly in-process.
"""

import importlib.util
import os
from pathlib import Path

import dj_database_url

import agentmemory

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-example-key-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc assets, served from static files (no CDN)
    "agentmemory",
    "project",  # its agents module holds the example agents (manage.py chat support)
]
# pgvector columns and HNSW indexes (PostgreSQL with the vector extension only; see docs/longterm.md)
if os.environ.get("AGENTMEMORY_PGVECTOR", "").lower() in ("1", "true", "yes"):
    INSTALLED_APPS.append("agentmemory.contrib.pgvector")
# messages hash-partitioned by conversation (PostgreSQL only; see docs/operations.md,
# "Partitioned history"): AGENTMEMORY_PARTITIONS=16 installs the app with 16 partitions
if os.environ.get("AGENTMEMORY_PARTITIONS"):
    INSTALLED_APPS.append("agentmemory.contrib.partitioning")
    AGENTMEMORY_PARTITIONS = int(os.environ["AGENTMEMORY_PARTITIONS"])


def _importable(name: str) -> bool:
    """Whether the module ``name`` is installed (a missing parent package means no)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# LangGraph checkpointer, store and conversation mirroring (docs/langgraph.md): installed when
# the langgraph extra is (the dev extra holds it; `make demo` runs without it)
if _importable("langgraph.graph"):
    INSTALLED_APPS.append("agentmemory.contrib.langgraph")
# the MCP memory server: manage.py mcp_server and project/asgi.py (docs/mcp.md), with the mcp extra
if _importable("mcp"):
    INSTALLED_APPS.append("agentmemory.contrib.mcp")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock at BEGIN, so concurrent appenders queue on the busy
    # timeout instead of failing with "database is locked" on lock upgrade.
    # WAL lets readers run beside the writer and makes each commit cheap.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

# A second database, unused unless a database router sends work to it: the tests use it to
# check that agentmemory honours routers (a host project may keep its memory apart).
DATABASES["secondary"] = dj_database_url.parse(
    os.environ.get("SECONDARY_DATABASE_URL", f"sqlite:///{BASE_DIR / 'db-secondary.sqlite3'}")
)
if DATABASES["secondary"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["secondary"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 30}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

# Celery: a real broker when CELERY_BROKER_URL is set, otherwise eager, in-process tasks.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Token authentication for programs (`manage.py drf_create_token alice`), session
# authentication for the browser (the admin log-in) and HTTP Basic for quick curl tries:
# Basic hashes the password on every request (PBKDF2, hundreds of milliseconds of CPU each).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentmemory API",
    "DESCRIPTION": "Conversations, messages, context windows, long-term facts and search of LLM "
    "agents. See docs/api.md.",
    "VERSION": agentmemory.__version__,
    # Request bodies get their own components, without the read-only fields of the answers.
    "COMPONENT_SPLIT_REQUEST": True,
    # The viewers' scripts and styles come from drf-spectacular-sidecar's static files.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

AGENTMEMORY: dict[str, object] = {}
if os.environ.get("AGENTMEMORY_COMPACTION_LLM"):
    AGENTMEMORY["COMPACTION_LLM"] = os.environ["AGENTMEMORY_COMPACTION_LLM"]
if os.environ.get("AGENTMEMORY_COMPACTOR_CLASS"):
    AGENTMEMORY["COMPACTOR_CLASS"] = os.environ["AGENTMEMORY_COMPACTOR_CLASS"]
if os.environ.get("AGENTMEMORY_EMBEDDER"):
    AGENTMEMORY["EMBEDDER"] = os.environ["AGENTMEMORY_EMBEDDER"]
if os.environ.get("AGENTMEMORY_RECALL_BACKEND"):
    AGENTMEMORY["RECALL_BACKEND"] = os.environ["AGENTMEMORY_RECALL_BACKEND"]
if os.environ.get("AGENTMEMORY_COMPACTION_LEASE_SECONDS"):
    AGENTMEMORY["COMPACTION_LEASE_SECONDS"] = int(os.environ["AGENTMEMORY_COMPACTION_LEASE_SECONDS"])

# A worker that dies with a task in hand (docs/operations.md, "Deployment"). A pool process
# killed (SIGKILL, the OOM killer): the worker gives the task back to the broker at once
# instead of acknowledging it. A worker killed whole: RabbitMQ requeues its unacknowledged
# tasks when the connection drops; Redis gives them to another worker once they have been
# out for visibility_timeout (kombu's default: an hour), found by a live worker's sweep every
# unacked_restore_interval seconds. The timeout must stay above the longest countdown of the
# app's tasks (a compaction waiting out a lease: the lease plus 6 s; an embedding retry: 16 s),
# or a task waiting for its time is handed out twice (harmless here, wasted elsewhere).
CELERY_TASK_REJECT_ON_WORKER_LOST = True
_LEASE = int(os.environ.get("AGENTMEMORY_COMPACTION_LEASE_SECONDS") or 60)  # COMPACTION_LEASE_SECONDS
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": max(5 * _LEASE, 20),  # seconds: 300 with the default lease
    "unacked_restore_interval": max(_LEASE, 1),
    "unacked_restore_throttle": 1,  # every sweep looks (kombu's default: every tenth)
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "agentmemory": {"handlers": ["console"], "level": os.environ.get("AGENTMEMORY_LOG_LEVEL", "WARNING")},
        # A server error's traceback on the console with DEBUG off too (Django's own console
        # handler writes only with DEBUG on): .ci/schemathesis looks for it in the log.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
