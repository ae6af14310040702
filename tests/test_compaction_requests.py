"""``request_compaction()``: the mode in force, inline runs after commit, a dead broker that
never breaks an append or a turn, leases kept alive and taken over, long backlogs folded over
bounded runs, provider refusals known from the response, and the sweep that picks up what was
requested and never ran."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from agentmemory import broker as broker_module
from agentmemory.compaction import (
    LLMMemoryCompactor,
    OfflineMemoryCompactor,
    compaction_mode,
    describe_compaction_mode,
    pending_compactions,
    request_compaction,
    run_compaction,
)
from agentmemory.exceptions import InvalidSummaryError, LLMRefusalError, TransientLLMError
from agentmemory.llm.base import ChatResponse
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from tests.factories import conversation_with_turns
from tests.helpers_concurrency import ScriptHolder

pytestmark = pytest.mark.django_db

SCRIPTED = {"COMPACTION_LLM": "tests.helpers_concurrency.scripted_model"}
DEAD_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: connections are refused


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    """The model compaction runs build (``COMPACTION_LLM``), scripted by the test."""
    ScriptHolder.current = ScriptedChatModel()
    with override_settings(AGENTMEMORY=SCRIPTED):
        yield ScriptHolder.current
    ScriptHolder.current = None


@pytest.fixture
def celery_broker_url():  # type: ignore[no-untyped-def]
    """Point the project's Celery app at a broker URL (not eager) for the test, then restore it."""
    from project.celery import app

    saved = {key: app.conf[key] for key in ("broker_url", "task_always_eager")}

    def forget() -> None:
        app._pool = None
        app.amqp._producer_pool = None

    def use(url: str) -> None:
        forget()
        app.conf.update(broker_url=url, task_always_eager=False)

    yield use
    forget()
    app.conf.update(**saved)


# -- the mode ---------------------------------------------------------------------------------


def test_auto_mode_is_inline_without_a_broker_and_celery_with_one(celery_broker_url, settings) -> None:  # type: ignore[no-untyped-def]
    from project.celery import app

    settings.AGENTMEMORY = {}
    app.conf.update(broker_url="", task_always_eager=False)
    assert describe_compaction_mode() == (
        "inline",
        "COMPACTION_MODE is 'auto' and no Celery broker is configured",
    )
    celery_broker_url("redis://127.0.0.1:6379/11")
    assert compaction_mode() == "celery"
    app.conf.task_always_eager = True
    assert compaction_mode() == "inline"  # eager tasks would run inside the request anyway
    for mode in ("celery", "inline", "off"):
        settings.AGENTMEMORY = {"COMPACTION_MODE": mode}
        assert compaction_mode() == mode


def test_check_says_which_mode_is_in_force(settings, celery_broker_url) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.checks import check_compaction_mode

    settings.AGENTMEMORY = {}
    [info] = check_compaction_mode()
    assert info.id == "agentmemory.I001" and "'inline'" in info.msg and "COMPACTION_MODE" in info.hint
    settings.AGENTMEMORY = {"COMPACTION_MODE": "sometimes"}
    [error] = check_compaction_mode()
    assert error.id == "agentmemory.E010"
    settings.AGENTMEMORY = {"COMPACTION_MODE": "celery"}
    celery_broker_url("")
    ids = [m.id for m in check_compaction_mode()]
    assert ids == ["agentmemory.W004", "agentmemory.I001"]


def test_the_mode_note_is_shown_by_check_only_and_warnings_everywhere(settings, celery_broker_url) -> None:  # type: ignore[no-untyped-def]
    """Django runs the checks before migrate, runserver and every other command: the note of
    which mode is in force is for ``manage.py check``; a warning is shown before any command."""
    import io

    def output(*args: str, **options: object) -> str:
        out, err = io.StringIO(), io.StringIO()
        call_command(*args, stdout=out, stderr=err, **options)
        return out.getvalue() + err.getvalue()

    settings.AGENTMEMORY = {}
    celery_broker_url("")
    assert "agentmemory.I001" not in output("showmigrations", "agentmemory", skip_checks=False)
    assert "agentmemory.I001" in output("check")
    settings.AGENTMEMORY = {"COMPACTION_MODE": "celery"}
    before_another = output("showmigrations", "agentmemory", skip_checks=False)
    assert "agentmemory.W004" in before_another and "agentmemory.I001" not in before_another
    assert "agentmemory.I001" in output("check")


# -- inline -----------------------------------------------------------------------------------


def test_not_due_does_nothing(scripted) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(3)
    request = request_compaction(conv.pk)
    assert (request.due, request.scheduled) == (False, False)
    assert Conversation.objects.get(pk=conv.pk).compaction_requested_at is None


def test_inline_runs_after_commit_and_clears_the_request(
    scripted, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(10)
    scripted.add("Ten questions.")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        request = request_compaction(conv.pk, reason="test")
    assert request.mode == "inline" and request.due and request.deferred and not request.ran_inline
    assert Conversation.objects.get(pk=conv.pk).compaction_requested_at is not None
    assert scripted.calls == [] and not Summary.objects.exists()  # nothing before the commit
    [callback] = callbacks
    callback()
    conv.refresh_from_db()
    assert conv.summary.text == "Ten questions."
    assert conv.compaction_requested_at is None and conv.compaction_error == ""


def test_inline_failure_is_recorded_never_raised_and_picked_up_by_the_sweep(
    scripted, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(10)
    scripted.add(TransientLLMError("HTTP 503 from the provider"))
    with django_capture_on_commit_callbacks(execute=True):
        request = request_compaction(conv.pk)
    assert request.due
    conv.refresh_from_db()
    assert conv.summary is None
    assert "TransientLLMError" in conv.compaction_error and "503" in conv.compaction_error
    assert conv.compaction_requested_at is not None
    # A failed request is pending at once; the sweep runs it once the model answers again.
    assert pending_compactions() == [conv.pk]
    scripted.add("Ten questions, summarised late.")
    call_command("compact_conversations", stdout=(out := _Out()))
    assert f"conversation {conv.uuid}: stored" in out.text
    conv.refresh_from_db()
    assert conv.summary.text == "Ten questions, summarised late."
    assert conv.compaction_error == "" and conv.compaction_requested_at is None
    assert pending_compactions() == []


def test_wait_runs_the_compaction_before_returning(scripted) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(4)
    scripted.add("Turns 0 to 2.")
    request = request_compaction(conv.pk, force=True, wait=5)
    assert request.ran_inline and request.summary_id is not None
    assert Summary.objects.get(pk=request.summary_id).text == "Turns 0 to 2."


def test_off_mode_requests_nothing(scripted, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(10)
    with (
        override_settings(AGENTMEMORY={**SCRIPTED, "COMPACTION_MODE": "off"}),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        request = request_compaction(conv.pk)
    assert (request.mode, request.due, request.scheduled) == ("off", True, False)
    assert callbacks == [] and scripted.calls == []


# -- a broker that refuses connections -------------------------------------------------------


class CountingDeadBroker:
    """A TCP port on 127.0.0.1 that accepts connections and closes them at once: a broker
    that is down, which counts how often it was tried."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"
        self.attempts = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.attempts += 1
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_a_dead_broker_is_tried_twice_at_most_and_the_failure_is_recorded(
    celery_broker_url, settings, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    # Celery's default publish policy retries three times with growing pauses; an append
    # that asked for a compaction must not wait for that, so one retry is all it gets.
    settings.AGENTMEMORY = {}
    broker = CountingDeadBroker()
    try:
        celery_broker_url(broker.url)
        conv, _ = conversation_with_turns(10)
        with django_capture_on_commit_callbacks(execute=True):
            request = request_compaction(conv.pk)
        # On a loaded machine the publish may still be starting when its caller stops waiting
        # (the failure is recorded all the same): its tries are counted once it has ended.
        for sender in list(broker_module._abandoned):
            sender.join(timeout=30)
    finally:
        broker.close()
    assert request.mode == "celery" and request.due
    assert 1 <= broker.attempts <= 2, broker.attempts
    conv.refresh_from_db()
    assert "enqueue failed" in conv.compaction_error and conv.compaction_requested_at is not None
    assert conv.compaction_failed_at is not None


def test_api_append_and_agent_turn_succeed_with_a_dead_broker(
    celery_broker_url, settings, django_user_model, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    from rest_framework.test import APIClient

    from agentmemory.agents.base import BaseToolCallingAgent

    settings.AGENTMEMORY = {}
    celery_broker_url(DEAD_BROKER)
    user = django_user_model.objects.create_user("ann", password="pw")
    conv = Conversation.objects.create(owner=user)
    api = APIClient()
    api.force_authenticate(user)
    url = f"/api/conversations/{conv.uuid}/messages/"
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(12):
            assert api.post(url, {"role": "human", "content": f"q{i}"}, format="json").status_code == 201
            assert api.post(url, {"role": "ai", "content": f"a{i}"}, format="json").status_code == 201
    assert Message.objects.filter(conversation=conv).count() == 24  # each stored exactly once
    conv.refresh_from_db()
    assert "enqueue failed" in conv.compaction_error

    class Agent(BaseToolCallingAgent, register=False):
        AGENT_KEY = "dead-broker"
        MEMORY_COMPACTOR_ENABLED = True

    agent = Agent(llm=ScriptedChatModel([f"answer {i}" for i in range(12)]))
    other = agent.start_conversation()
    with django_capture_on_commit_callbacks(execute=True):
        answers = [agent.run(other, f"question {i}").answer for i in range(12)]
    assert answers == [f"answer {i}" for i in range(12)]
    assert "enqueue failed" in Conversation.objects.get(pk=other.pk).compaction_error


# -- the task ------------------------------------------------------------------------------


def test_a_busy_lease_makes_the_task_retry_after_it_expires(scripted, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from celery.exceptions import Retry

    from agentmemory.tasks import compact_conversation

    conv, _ = conversation_with_turns(10)
    Conversation.objects.filter(pk=conv.pk).update(
        compaction_lease=uuid.uuid4(), compaction_lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    retried = {}

    def retry(**kwargs):  # type: ignore[no-untyped-def]
        retried.update(kwargs)
        return Retry("busy")

    monkeypatch.setattr(compact_conversation, "retry", retry)
    compact_conversation.push_request(is_eager=False, called_directly=False, retries=0)
    try:
        with pytest.raises(Retry):
            compact_conversation.run(conv.pk)
    finally:
        compact_conversation.pop_request()
    assert 30 <= retried["countdown"] <= 37 and scripted.calls == []


# -- provider refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (ChatResponse(message=ChatMessage.ai(""), finish_reason="content_filter"), LLMRefusalError),
        (ChatResponse(message=ChatMessage.ai("I can't help."), finish_reason="refusal"), LLMRefusalError),
        (ChatResponse(message=ChatMessage.ai(""), refusal="I can't assist with that."), LLMRefusalError),
        (
            ChatResponse(message=ChatMessage.ai("The user asked abo"), finish_reason="length"),
            InvalidSummaryError,
        ),
        (ChatResponse(message=ChatMessage.ai(""), finish_reason="max_tokens"), InvalidSummaryError),
    ],
)
def test_provider_refusals_and_cut_replies_are_known_from_the_response(response, error) -> None:  # type: ignore[no-untyped-def]
    conv, history = conversation_with_turns(4)
    compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([response]), history)
    with pytest.raises(error):
        compactor.compact()
    assert not Summary.objects.exists()


@pytest.mark.parametrize(
    "text",
    [
        "Unfortunately, order 1042 was lost in transit; the assistant opened a claim.",
        "The user reported a 502 error when paying; the assistant retried the charge.",
    ],
)
def test_summaries_that_mention_errors_or_apologies_are_stored(text: str) -> None:
    conv, history = conversation_with_turns(4)
    summary = LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([text]), history).compact()
    assert summary is not None and summary.text == text


# -- leases -----------------------------------------------------------------------------


def test_a_compaction_that_lost_its_lease_never_stores() -> None:
    conv, history = conversation_with_turns(4)

    def taken_over(messages):  # type: ignore[no-untyped-def]
        # A second worker took the lease over while the model worked (this one looked dead).
        Conversation.objects.filter(pk=conv.pk).update(compaction_lease=uuid.uuid4())
        return "Turns 0 to 2."

    run = LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([taken_over]), history).run()
    assert run.status == "lost_lease" and run.summary is None
    assert not Summary.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_running_compaction_renews_its_lease() -> None:
    conv, history = conversation_with_turns(4)
    seen: dict[str, object] = {}

    def slow(messages):  # type: ignore[no-untyped-def]
        first = Conversation.objects.get(pk=conv.pk).compaction_lease_expires_at
        time.sleep(1.3)  # longer than the lease: only renewals keep it alive
        row = Conversation.objects.get(pk=conv.pk)
        seen["renewed"] = row.compaction_lease_expires_at > first
        seen["alive"] = row.compaction_lease_expires_at > timezone.now()
        seen["second"] = OfflineMemoryCompactor(Conversation.objects, conv.pk, None).run().status
        return "Turns 0 to 2."

    with override_settings(AGENTMEMORY={"COMPACTION_LEASE_SECONDS": 1}):
        run = LLMMemoryCompactor(Conversation.objects, conv.pk, ScriptedChatModel([slow]), history).run()
    assert seen == {"renewed": True, "alive": True, "second": "busy"}
    assert run.status == "stored" and Summary.objects.count() == 1
    assert Conversation.objects.get(pk=conv.pk).compaction_lease is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_compactions_store_one_summary() -> None:
    from django.db import connections

    conv, _ = conversation_with_turns(6)
    gate = threading.Barrier(3, timeout=10)
    statuses: list[str] = []
    refused_twice = threading.Event()

    def slow(messages):  # type: ignore[no-untyped-def]
        # The lease holder's model works until both others have been refused: a thread
        # scheduled late (a loaded machine) must not find the lease free and the work done.
        assert refused_twice.wait(20)
        return "Turns 0 to 4."

    def worker() -> None:
        try:
            gate.wait()
            llm = ScriptedChatModel([slow])
            statuses.append(LLMMemoryCompactor(Conversation.objects, conv.pk, llm, None).run().status)
            if statuses.count("busy") == 2:
                refused_twice.set()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(statuses) == ["busy", "busy", "stored"]
    assert Summary.objects.filter(conversation=conv).count() == 1


# -- long backlogs --------------------------------------------------------------------------


def test_a_backlog_is_folded_over_several_bounded_runs(scripted) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(30, tool_every=0, words=20)
    for i in range(100):
        scripted.add(f"Summary part {i}.")
    humans = set(Message.objects.filter(conversation=conv, role=Role.HUMAN).values_list("seq", flat=True))
    # a turn is about 180 tokens: one turn per summariser call, three calls per run
    settings = {**SCRIPTED, "SUMMARIZER_MAX_INPUT_TOKENS": 250, "COMPACTION_MAX_CALLS_PER_RUN": 3}
    runs = []
    with override_settings(AGENTMEMORY=settings):
        while True:
            calls_before = len(scripted.calls)
            run = run_compaction(conv.pk)
            runs.append((run.status, len(scripted.calls) - calls_before, run.summary.through_seq))
            if run.status != "partial":
                break
    assert len(runs) >= 5 and runs[-1][0] == "stored"
    assert [calls for _, calls, _ in runs] == [3] * 9 + [2]  # 29 turns to fold
    # every intermediate summary ends right before a human message, and they advance
    ends = [through for _, _, through in runs]
    assert ends == sorted(set(ends)) and all(end + 1 in humans for end in ends)
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert len(summaries) == len(runs)
    assert all(s.previous_id == p.pk for p, s in itertools.pairwise(summaries))
    assert summaries[-1].through_seq == max(humans) - 1
    conv.refresh_from_db()
    assert conv.compaction_requested_at is None


def test_the_task_enqueues_the_next_run_of_a_backlog(scripted, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.compaction import dispatch
    from agentmemory.tasks import compact_conversation

    conv, _ = conversation_with_turns(12, tool_every=0, words=20)
    for i in range(5):
        scripted.add(f"Part {i}.")
    queued = []
    monkeypatch.setattr(dispatch, "enqueue_compaction", lambda pk, **kwargs: queued.append(pk))
    settings = {**SCRIPTED, "SUMMARIZER_MAX_INPUT_TOKENS": 60, "COMPACTION_MAX_CALLS_PER_RUN": 2}
    compact_conversation.push_request(is_eager=False, retries=0)
    try:
        with override_settings(AGENTMEMORY=settings):
            summary_id = compact_conversation.run(conv.pk)
    finally:
        compact_conversation.pop_request()
    assert summary_id is not None and queued == [conv.pk] and len(scripted.calls) == 2


# -- the command -----------------------------------------------------------------------------


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def test_command_dry_run_and_all(scripted) -> None:  # type: ignore[no-untyped-def]
    due, _ = conversation_with_turns(10)
    quiet, _ = conversation_with_turns(2)
    stale = timezone.now() - timedelta(minutes=5)
    Conversation.objects.filter(pk=quiet.pk).update(compaction_requested_at=stale)
    out = _Out()
    call_command("compact_conversations", "--dry-run", stdout=out)
    assert f"would compact conversation {quiet.uuid}" in out.text
    assert f"would compact conversation {due.uuid}\n" not in out.text
    out = _Out()
    call_command("compact_conversations", "--all", "--dry-run", stdout=out)
    assert "2 conversations to compact" in out.text
    assert scripted.calls == [] and not Summary.objects.exists()  # a dry run changes nothing
    scripted.add("Ten questions.", "Two questions.")
    out = _Out()
    call_command("compact_conversations", "--all", stdout=out)
    assert "2 stored" in out.text
    assert Summary.objects.count() == 2
    assert not Conversation.objects.filter(compaction_requested_at__isnull=False).exists()


def test_a_broker_url_no_celery_app_reads_is_reported(settings, celery_broker_url) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.checks import check_compaction_mode

    settings.AGENTMEMORY = {}
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    celery_broker_url("")  # as if no celery.py loaded the Django settings
    ids = [m.id for m in check_compaction_mode()]
    assert ids == ["agentmemory.W005", "agentmemory.I001"]
    assert compaction_mode() == "inline"


def test_the_beat_sweep_runs_what_was_requested_and_never_ran(scripted) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.tasks import sweep_compactions

    conv, _ = conversation_with_turns(4)
    fresh, _ = conversation_with_turns(4)
    long_ago = timezone.now() - timedelta(minutes=5)
    Conversation.objects.filter(pk=conv.pk).update(compaction_requested_at=long_ago)
    Conversation.objects.filter(pk=fresh.pk).update(compaction_requested_at=timezone.now())
    scripted.add("Turns 0 to 2.")
    assert sweep_compactions.apply().get() == {"stored": 1}  # inline here: run in process
    conv.refresh_from_db()
    assert conv.summary.text == "Turns 0 to 2." and conv.compaction_requested_at is None
    # a request made a moment ago may still be queued: the sweep leaves it alone
    assert Conversation.objects.get(pk=fresh.pk).compaction_requested_at is not None


def test_refusals_are_known_from_the_real_adapters(fake_openai, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.llm.anthropic import AnthropicChatModel
    from agentmemory.llm.openai import OpenAIChatModel

    openai = OpenAIChatModel(
        model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test", max_retries=0
    )
    anthropic = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="sk-ant-test", max_retries=0
    )
    fake_openai.enqueue_text("", finish_reason="content_filter")
    fake_anthropic.enqueue_message(
        [{"type": "text", "text": "I can't help with that."}], stop_reason="refusal"
    )
    fake_openai.enqueue_text("The user asked about order 10", finish_reason="length")
    try:
        for llm, error, reason in (
            (openai, LLMRefusalError, "content_filter"),
            (anthropic, LLMRefusalError, "refusal"),
            (openai, InvalidSummaryError, "length"),
        ):
            conv, history = conversation_with_turns(4)
            with pytest.raises(error, match=reason):
                LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history).compact()
            assert not Summary.objects.filter(conversation=conv).exists()
    finally:
        openai.close()
        anthropic.close()


@pytest.fixture
def live_broker(celery_broker_url, broker_url):  # type: ignore[no-untyped-def]
    """The run's Redis broker (``broker_url``), emptied before and after; no worker runs."""
    celery_broker_url(broker_url)
    return broker_url


def test_a_wait_for_a_missing_worker_is_recorded_and_not_repeated(live_broker, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {}
    conv, _ = conversation_with_turns(4)
    started = time.monotonic()
    first = request_compaction(conv.pk, force=True, wait=0.5)
    assert 0.5 <= time.monotonic() - started < 3
    assert first.mode == "celery" and first.enqueued and "no Celery worker ran" in first.error
    conv.refresh_from_db()
    assert "no Celery worker ran the compaction within 0.5 s" in conv.compaction_error
    started = time.monotonic()
    second = request_compaction(conv.pk, force=True, wait=30)
    assert time.monotonic() - started < 2  # enqueued again, without holding the caller
    assert second.enqueued and second.error is None
