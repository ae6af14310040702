"""Observability: structured log records of compactions, context builds and recall queries,
and the Prometheus exporter fed by the signals."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from agentmemory.compaction import run_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib import prometheus
from agentmemory.exceptions import TransientLLMError
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.models import Conversation
from agentmemory.recall import search_messages
from tests.drill_models import DrillModel
from tests.factories import UserFactory, conversation_with_turns

pytestmark = pytest.mark.django_db


class FailingModel(DrillModel):
    def invoke(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
        raise TransientLLMError("the summariser timed out")


def _records(caplog, key: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [getattr(r, key) for r in caplog.records if hasattr(r, key)]


def test_compactions_log_duration_tokens_and_outcome(caplog) -> None:  # type: ignore[no-untyped-def]
    conv, _ = conversation_with_turns(12)
    with caplog.at_level(logging.INFO, logger="agentmemory"):
        run_compaction(conv.pk, llm=DrillModel())
    (fields,) = _records(caplog, "compaction")
    assert fields["conversation_id"] == conv.pk and fields["outcome"] == "stored"
    assert (fields["input_tokens"], fields["output_tokens"], fields["llm_calls"]) == (40, 12, 1)
    assert 0 < fields["duration_s"] < 60 and fields["error"] == ""

    other, _ = conversation_with_turns(12)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="agentmemory"), pytest.raises(TransientLLMError):
        run_compaction(other.pk, llm=FailingModel())
    (fields,) = _records(caplog, "compaction")
    assert fields["outcome"] == "failed" and "timed out" in fields["error"]


def test_context_builds_and_recall_log_at_debug(caplog) -> None:  # type: ignore[no-untyped-def]
    owner = UserFactory()
    conv, _ = conversation_with_turns(5)
    Conversation.objects.filter(pk=conv.pk).update(owner=owner)
    KnowledgeMemory(owner).store("likes green tea", "preferences", persistent=True)
    with caplog.at_level(logging.DEBUG, logger="agentmemory"):
        window = ContextWindowBuilder(conv).build(max_tokens=2_000)
        search_messages("question", owner=owner)
        KnowledgeMemory(owner).recall("tea")
    (context,) = _records(caplog, "context")
    assert context["tokens"] == window.total_tokens and context["rows_read"] == window.rows_read
    assert context["uncovered"] == window.uncovered.count and context["conversation_id"] == conv.pk
    recalls = _records(caplog, "recall")
    assert [(r["kind"], r["hits"] > 0) for r in recalls] == [("messages", True), ("facts", True)]
    assert all(r["owner_id"] == owner.pk and r["backend"] == "fulltext" for r in recalls)


def test_prometheus_exporter_counts_what_the_signals_report() -> None:
    registry = CollectorRegistry()
    prometheus.uninstall()
    prometheus.install(registry)
    try:
        owner = UserFactory()
        conv, _history = conversation_with_turns(12)
        Conversation.objects.filter(pk=conv.pk).update(owner=owner)
        run_compaction(conv.pk, llm=DrillModel())
        ContextWindowBuilder(conv).build(max_tokens=2_000)
        search_messages("question", owner=owner)
        value = registry.get_sample_value
        assert value("agentmemory_messages_appended_total", {"role": "human"}) == 12
        assert value("agentmemory_message_tokens_appended_total", {"role": "human"}) == sum(
            m.token_count for m in conv.messages.filter(role="human")
        )
        assert value("agentmemory_compactions_total", {"outcome": "stored"}) == 1
        assert value("agentmemory_compaction_duration_seconds_count", {"outcome": "stored"}) == 1
        assert value("agentmemory_compaction_tokens_total", {"direction": "input"}) == 40
        assert value("agentmemory_context_windows_built_total") >= 1
        assert value("agentmemory_recall_queries_total", {"kind": "messages", "backend": "fulltext"}) == 1
        assert prometheus.install(registry) is prometheus.install()  # installed once
    finally:
        prometheus.uninstall()


def test_the_example_project_logs_a_server_error_with_debug_off(settings) -> None:  # type: ignore[no-untyped-def]
    # Django logs a request's server error to the console only with DEBUG on: the example
    # project under .ci/schemathesis (DJANGO_DEBUG=0) answered 500s and its log held no
    # traceback, so the run's check for one found nothing to report.
    import logging

    settings.DEBUG = False
    record = logging.LogRecord(
        "django.request", logging.ERROR, __file__, 1, "Internal Server Error", (), None
    )
    logger: logging.Logger | None = logging.getLogger("django.request")
    consoles = []
    while logger is not None:
        consoles += [
            handler
            for handler in logger.handlers
            if type(handler) is logging.StreamHandler
            and handler.level <= logging.ERROR
            and handler.filter(record)
        ]
        logger = logger.parent if logger.propagate else None
    assert consoles
