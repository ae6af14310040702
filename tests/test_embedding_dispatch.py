"""Where new messages are embedded: by a Celery worker started as the README says
(``celery -A project worker``), which must know every task the app defines, and in process
when the host has no broker, never through Celery's default broker."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from celery import Celery
from celery.app.task import Task

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, MessageEmbedding
from agentmemory.recall import search_messages
from tests.embedders import hashed_vector
from tests.factories import UserFactory
from tests.helpers_concurrency import ROOT, child_env, stop_process

EMBEDDER_SETTINGS = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}


def test_the_worker_of_the_readme_registers_every_task_the_app_defines() -> None:
    """``celery -A project worker`` loads the tasks through ``autodiscover_tasks()``, which
    imports each installed app's ``tasks`` module: a task defined in another module of the
    app (``agentmemory.recall.tasks.embed_messages``) was unknown to the worker, which
    rejected every embedding as an unregistered task."""
    script = textwrap.dedent(
        """
        import importlib, json, pkgutil
        import django
        django.setup()
        from project.celery import app
        app.loader.import_default_modules()  # what a worker does when it starts
        registered = {name for name in app.tasks if name.startswith("agentmemory.")}
        import agentmemory
        for module in pkgutil.walk_packages(agentmemory.__path__, "agentmemory."):
            if ".migrations" not in module.name and ".management" not in module.name:
                importlib.import_module(module.name)
        defined = {name for name in app.tasks if name.startswith("agentmemory.")}
        print(json.dumps({"registered": sorted(registered), "defined": sorted(defined)}))
        """
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("CELERY_BROKER_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "agentmemory.recall.tasks.embed_messages" in found["defined"]
    assert found["registered"] == found["defined"]


@pytest.fixture
def bare_celery(monkeypatch):  # type: ignore[no-untyped-def]
    """The Celery app of a host project without any Celery settings (no ``celery.py``, no
    ``CELERY_BROKER_URL``): Celery's default app, whose broker would be
    ``amqp://guest@localhost//``. Every publish is recorded and refused, so the test never
    reaches a broker."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    from celery import current_app

    previous = current_app._get_current_object()
    app = Celery("host-without-celery-settings", set_as_current=True)
    assert not app.conf.broker_url and not app.conf.task_always_eager
    published: list[str] = []

    def refuse(task, *args, **kwargs):  # type: ignore[no-untyped-def]
        published.append(task.name)
        raise ConnectionRefusedError("no broker here")

    monkeypatch.setattr(Task, "apply_async", refuse)
    try:
        yield published
    finally:
        previous.set_current()


@pytest.mark.django_db
def test_without_celery_settings_an_append_embeds_in_process_not_through_a_broker(
    settings, bare_celery, django_capture_on_commit_callbacks, caplog
) -> None:  # type: ignore[no-untyped-def]
    """With an embedder and no Celery settings, every append tried Celery's default broker,
    logged an ERROR and waited about 0.8 s for it; the messages were never embedded and
    hybrid search fell back to full text without a word."""
    car = hashed_vector("car")
    settings.AGENTMEMORY = {
        **EMBEDDER_SETTINGS,
        "EMBEDDER_OPTIONS": {"table": {"My car will not start": car, "automobile trouble": car}},
    }
    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        PersistentChatHistory(conv).add_messages(
            [ChatMessage.human("My car will not start"), ChatMessage.ai("Check the battery")]
        )
    assert bare_celery == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert MessageEmbedding.objects.count() == 2
    assert search_messages("automobile trouble", owner=alice)[0].content == "My car will not start"


@pytest.mark.django_db
def test_an_embedder_that_fails_in_process_is_logged_and_left_for_the_rebuild(
    settings, bare_celery, django_capture_on_commit_callbacks, caplog
) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {**EMBEDDER_SETTINGS, "EMBEDDER": "tests.test_embedding_dispatch.DownEmbedder"}
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    with django_capture_on_commit_callbacks(execute=True):
        stored = PersistentChatHistory(conv).add_messages([ChatMessage.human("hello")])
    assert len(stored) == 1 and MessageEmbedding.objects.count() == 0
    assert bare_celery == []
    assert "rebuild_recall_index will retry" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class DownEmbedder:
    """An embedder whose model cannot be reached."""

    model = "down"

    def embed(self, texts):  # type: ignore[no-untyped-def]
        from agentmemory.recall.embedders import EmbeddingError

        raise EmbeddingError("connection refused")


@pytest.mark.django_db
def test_with_a_broker_the_embedding_is_handed_to_celery(
    settings, celery_app, monkeypatch, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """With a broker configured (and tasks not run eagerly) the append only enqueues."""
    from agentmemory.recall import tasks

    settings.AGENTMEMORY = EMBEDDER_SETTINGS
    sent: list[list[int]] = []

    def publish(task, args):  # type: ignore[no-untyped-def]  # agentmemory.broker.publish
        assert task is tasks.embed_messages
        sent.append(*args)

    monkeypatch.setattr("agentmemory.broker.publish", publish)
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    with django_capture_on_commit_callbacks(execute=True):
        stored = PersistentChatHistory(conv).add_messages([ChatMessage.human("hello")])
    assert sent == [[stored[0].id]]
    assert MessageEmbedding.objects.count() == 0


# -- a real worker -------------------------------------------------------------------------------

EMBED_TIMEOUT = 60  # seconds


@pytest.fixture
def embedding_worker(broker_url, tmp_path: Path):  # type: ignore[no-untyped-def]
    """``celery -A project worker``, as the README starts it, with the test embedder."""
    env = {
        **child_env(),
        "CELERY_BROKER_URL": broker_url,
        "AGENTMEMORY_EMBEDDER": EMBEDDER_SETTINGS["EMBEDDER"],
        "AGENTMEMORY_RECALL_BACKEND": EMBEDDER_SETTINGS["RECALL_BACKEND"],
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "project",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"agentmemory-embed-test-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc, log_path
        finally:
            stop_process(proc)


@pytest.mark.celery_worker
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_started_as_the_readme_says_embeds_new_messages(
    settings, celery_app, embedding_worker
) -> None:  # type: ignore[no-untyped-def]
    proc, log_path = embedding_worker
    settings.AGENTMEMORY = EMBEDDER_SETTINGS
    conv = Conversation.objects.create(owner=UserFactory(), agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("My car will not start"), ChatMessage.ai("Battery?")]
    )
    deadline = time.monotonic() + EMBED_TIMEOUT
    while MessageEmbedding.objects.filter(message__conversation=conv).count() < 2:
        assert proc.poll() is None, f"the worker exited:\n{log_path.read_text()[-4000:]}"
        if time.monotonic() > deadline:
            pytest.fail(f"no embeddings after {EMBED_TIMEOUT}s; worker log:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)
    log = log_path.read_text()
    assert "agentmemory.recall.tasks.embed_messages" in log  # listed among the worker's tasks
    assert "unregistered task" not in log


@pytest.mark.django_db
def test_an_imported_conversation_is_embedded_as_appended_ones_are(
    settings, bare_celery, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    """``import_conversation`` (``manage.py import_conversation``, ``POST
    /api/conversations/import/``) stores its messages in bulk, which sends no
    ``message_appended``: with an embedder, an imported conversation had no vectors and
    hybrid search found it by its words only, until ``rebuild_recall_index`` ran."""
    from agentmemory.transfer import export_conversation, import_conversation

    alice = UserFactory()
    conv = Conversation.objects.create(owner=alice, agent_key="a")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("My car will not start"), ChatMessage.ai("Check the battery")]
    )
    document = export_conversation(conv)
    car = hashed_vector("car")
    settings.AGENTMEMORY = {
        **EMBEDDER_SETTINGS,
        "EMBEDDER_OPTIONS": {"table": {"My car will not start": car, "automobile trouble": car}},
    }
    with django_capture_on_commit_callbacks(execute=True):
        imported = import_conversation(document, owner=alice, new_uuid=True)
    assert bare_celery == []
    assert MessageEmbedding.objects.filter(message__conversation=imported).count() == 2
    hits = search_messages("automobile trouble", owner=alice, conversation=imported)
    assert hits and hits[0].content == "My car will not start"
