"""A fresh ``django-admin startproject`` that only adds the app works out of the box.

The project is generated in a temporary directory with the same Python (``python -m django
startproject``), gets ``"rest_framework"`` and ``"agentmemory"`` in ``INSTALLED_APPS`` and the
API's URLs, and keeps its own SQLite database. Small scripts run under its settings in child
processes:

1. no Celery settings at all: 25 human turns through the API's append endpoint and 25 through
   ``agent.run()`` with a scripted model; no error, every answer returned, summaries made
   (compaction runs inline after each commit);
2. the README's ``celery.py`` with ``CELERY_BROKER_URL`` pointing at a port that refuses
   connections: the same turns, still no error and every answer returned; the failed enqueues
   are recorded on the conversations;
3. the broker answers again (the run's Redis database, ``broker_url``): a
   Celery worker runs and ``manage.py compact_conversations --enqueue`` hands it what was
   missed; every conversation catches up.

The generated project uses SQLite whatever ``DATABASE_URL`` says, so the test runs the same on
the SQLite and the PostgreSQL passes. Locally the broker part skips when Redis is unreachable;
in CI (``CI`` set) it fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1
TURNS = 25

RUN_TURNS = textwrap.dedent(
    """
    import json, sys, time
    import django
    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient
    from agentmemory.agents.base import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.models import Conversation, Summary

    turns = int(sys.argv[1])
    errors = []
    user = get_user_model().objects.create_user(f"user{time.monotonic_ns()}")
    api = APIClient(HTTP_HOST="localhost")
    api.force_authenticate(user)
    created = api.post("/api/conversations/", {"title": "api"}, format="json")
    if created.status_code != 201:
        errors.append(f"create: {created.status_code} {created.content[:300]!r}")
    api_uuid = created.json().get("id") or created.json().get("uuid")
    url = f"/api/conversations/{api_uuid}/messages/"
    for i in range(turns):
        for role, text in (("human", f"question {i} about order {1000 + i}"), ("ai", f"answer {i}")):
            try:
                response = api.post(url, {"role": role, "content": text}, format="json")
            except Exception as exc:
                errors.append(f"append {i} {role}: {type(exc).__name__}: {exc}")
                continue
            if response.status_code != 201:
                errors.append(f"append {i} {role}: {response.status_code} {response.content[:300]!r}")

    class HostAgent(BaseToolCallingAgent, register=False):
        AGENT_KEY = "host"
        MEMORY_COMPACTOR_ENABLED = True

    agent = HostAgent(llm=ScriptedChatModel([f"agent answer {i}" for i in range(turns)]))
    conversation = agent.start_conversation(title="agent")
    answers = []
    for i in range(turns):
        try:
            answers.append(agent.run(conversation, f"agent question {i}").answer)
        except Exception as exc:
            errors.append(f"agent turn {i}: {type(exc).__name__}: {exc}")
    api_conv = Conversation.objects.get(uuid=api_uuid)
    agent_conv = Conversation.objects.get(pk=conversation.pk)
    print(json.dumps({
        "errors": errors,
        "answers_ok": answers == [f"agent answer {i}" for i in range(turns)],
        "ids": [api_conv.pk, agent_conv.pk],
        "messages": [api_conv.message_count, agent_conv.message_count],
        "summaries": [Summary.objects.filter(conversation=c).count() for c in (api_conv, agent_conv)],
        "compaction_errors": [api_conv.compaction_error, agent_conv.compaction_error],
    }))
    """
)

STATE = textwrap.dedent(
    """
    import json, sys
    import django
    django.setup()
    from agentmemory.compaction import build_compactor
    from agentmemory.models import Conversation, Summary

    out = {}
    for pk in map(int, sys.argv[1:]):
        conv = Conversation.objects.get(pk=pk)
        out[pk] = {
            "summaries": Summary.objects.filter(conversation=conv).count(),
            "due": build_compactor(pk).needs_compaction(),
            "error": conv.compaction_error,
            "requested": conv.compaction_requested_at is not None,
        }
    print(json.dumps(out))
    """
)

CELERY_PY = textwrap.dedent(
    """
    import os

    from celery import Celery

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")

    app = Celery("hostsite")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.autodiscover_tasks()
    """
)


def _env(project: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "ANTHROPIC_", "CELERY_", "AGENTMEMORY_", "DJANGO_", "DATABASE_"))
    }
    # The checkout under test comes first, before any installed copy of the app.
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(ROOT)])
    env["DJANGO_SETTINGS_MODULE"] = "hostsite.settings"
    return env


def _run(project: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def _script(project: Path, source: str, *args: str) -> dict:
    path = project / "script.py"
    path.write_text(source)
    return json.loads(_run(project, str(path), *args).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """A startproject with only the app, DRF and the API URLs added; migrated."""
    base = tmp_path_factory.mktemp("host")
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "hostsite", str(base)],
        check=True,
        env=_env(base),
        capture_output=True,
    )
    settings = base / "hostsite" / "settings.py"
    text = settings.read_text()
    text = text.replace(
        "    'django.contrib.staticfiles',\n",
        "    'django.contrib.staticfiles',\n    'rest_framework',\n    'agentmemory',\n",
    ).replace(
        '    "django.contrib.staticfiles",\n',
        '    "django.contrib.staticfiles",\n    "rest_framework",\n    "agentmemory",\n',
    )
    assert "'agentmemory'" in text or '"agentmemory"' in text
    settings.write_text(text)
    urls = base / "hostsite" / "urls.py"
    text = urls.read_text().replace("from django.urls import path", "from django.urls import include, path")
    text = text.replace(
        "urlpatterns = [", 'urlpatterns = [\n    path("api/", include("agentmemory.api.urls")),', 1
    )
    urls.write_text(text)
    _run(base, "manage.py", "migrate", "-v", "0")
    return base


def _add_celery(project: Path, broker_url: str) -> None:
    """What the README's "Using agentmemory in your project" section tells a host to add."""
    (project / "hostsite" / "celery.py").write_text(CELERY_PY)
    (project / "hostsite" / "__init__.py").write_text(
        'from .celery import app as celery_app\n\n__all__ = ("celery_app",)\n'
    )
    settings = project / "hostsite" / "settings.py"
    text = settings.read_text().split("\n# -- celery --\n")[0]
    settings.write_text(text + f"\n# -- celery --\nCELERY_BROKER_URL = {broker_url!r}\n")


def test_a_new_project_with_only_the_app_works_without_and_with_a_broker(project, broker_url) -> None:  # type: ignore[no-untyped-def]
    # 1. No Celery settings: compaction runs inline, after each commit.
    check = _run(project, "manage.py", "check")
    assert "agentmemory.I001" in check.stdout + check.stderr and "'inline'" in check.stdout + check.stderr
    inline = _script(project, RUN_TURNS, str(TURNS))
    assert inline["errors"] == [] and inline["answers_ok"]
    assert inline["messages"] == [2 * TURNS, 2 * TURNS]
    assert all(n >= 2 for n in inline["summaries"]), inline
    assert inline["compaction_errors"] == ["", ""]

    # 2. The host follows the README's Celery section, but the broker is down.
    _add_celery(project, DEAD_BROKER)
    check = _run(project, "manage.py", "check")
    assert "'celery'" in check.stdout + check.stderr
    dead = _script(project, RUN_TURNS, str(TURNS))
    assert dead["errors"] == [] and dead["answers_ok"]
    assert dead["messages"] == [2 * TURNS, 2 * TURNS]  # every message stored exactly once
    assert dead["summaries"] == [0, 0]
    assert all("enqueue failed" in error for error in dead["compaction_errors"])

    # 3. The broker answers again: a worker and the sweep command catch up.
    _add_celery(project, broker_url)
    env = _env(project)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "hostsite", "worker", "--pool=solo", "--loglevel=INFO"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        swept = _run(project, "manage.py", "compact_conversations", "--enqueue")
        assert "2 enqueued" in swept.stdout
        ids = [str(pk) for pk in dead["ids"]]
        deadline = time.monotonic() + 90
        while True:
            state = _script(project, STATE, *ids)
            if all(s["summaries"] >= 1 and not s["due"] and not s["requested"] for s in state.values()):
                break
            assert time.monotonic() < deadline, f"compaction did not catch up: {state}"
            time.sleep(1)
        assert all(s["error"] == "" for s in state.values())
    finally:
        worker.terminate()
        try:
            output, _ = worker.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            output, _ = worker.communicate()
    assert "agentmemory.tasks.compact_conversation" in output
