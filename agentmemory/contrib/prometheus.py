"""Prometheus metrics from agentmemory's signals (``pip install "django-agentmemory[metrics]"``).

Call ``install()`` once, e.g. in your ``AppConfig.ready()``, then expose the registry the way
your project does (``prometheus_client.start_http_server``, django-prometheus' ``/metrics``
view, or ``prometheus_client.make_wsgi_app``)::

    from agentmemory.contrib import prometheus
    prometheus.install()

Metrics (all prefixed ``agentmemory_``):

- ``messages_appended_total{role}``, ``message_tokens_appended_total{role}``: stored messages and
  their stored token counts.
- ``compactions_total{outcome}``, ``compaction_duration_seconds{outcome}`` (histogram),
  ``compaction_tokens_total{direction="input"|"output"}``, ``compaction_llm_calls_total``.
- ``context_windows_built_total``, ``context_window_tokens`` (histogram),
  ``context_window_rows_read`` (histogram), ``context_windows_uncovered_total`` and
  ``context_uncovered_messages_total``: windows that left stored messages uncovered.
- ``recall_queries_total{kind,backend}``, ``recall_duration_seconds{kind}`` (histogram).

Receivers only increment counters; in a multi-process server use prometheus_client's
multiprocess mode as its documentation describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmemory import signals

__all__ = ["Metrics", "install", "uninstall"]

_UID = "agentmemory.contrib.prometheus"
_installed: Metrics | None = None


@dataclass
class Metrics:
    """The collectors ``install()`` registered."""

    messages: Any
    message_tokens: Any
    compactions: Any
    compaction_duration: Any
    compaction_tokens: Any
    compaction_calls: Any
    windows: Any
    window_tokens: Any
    window_rows: Any
    windows_uncovered: Any
    uncovered_messages: Any
    recalls: Any
    recall_duration: Any


def install(registry: Any = None) -> Metrics:
    """Create the collectors in ``registry`` (default: prometheus_client's global registry)
    and connect the receivers. Calling it again returns the metrics already installed.

    Raises:
        ImportError: prometheus_client is not installed (the ``metrics`` extra).
    """
    global _installed
    if _installed is not None:
        return _installed
    from prometheus_client import REGISTRY, Counter, Histogram

    reg = registry if registry is not None else REGISTRY
    metrics = Metrics(
        messages=Counter("agentmemory_messages_appended", "Messages stored.", ["role"], registry=reg),
        message_tokens=Counter(
            "agentmemory_message_tokens_appended", "Stored tokens of stored messages.", ["role"], registry=reg
        ),
        compactions=Counter(
            "agentmemory_compactions", "Compaction runs by outcome.", ["outcome"], registry=reg
        ),
        compaction_duration=Histogram(
            "agentmemory_compaction_duration_seconds",
            "Duration of compaction runs.",
            ["outcome"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=reg,
        ),
        compaction_tokens=Counter(
            "agentmemory_compaction_tokens", "Summariser tokens.", ["direction"], registry=reg
        ),
        compaction_calls=Counter("agentmemory_compaction_llm_calls", "Summariser calls.", registry=reg),
        windows=Counter("agentmemory_context_windows_built", "Context windows built.", registry=reg),
        window_tokens=Histogram(
            "agentmemory_context_window_tokens",
            "Tokens of built context windows.",
            buckets=(500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000),
            registry=reg,
        ),
        window_rows=Histogram(
            "agentmemory_context_window_rows_read",
            "Message rows read to build a context window.",
            buckets=(10, 25, 50, 100, 250, 500, 1_000, 5_000),
            registry=reg,
        ),
        windows_uncovered=Counter(
            "agentmemory_context_windows_uncovered",
            "Context windows that left stored messages in neither the window nor the summary.",
            registry=reg,
        ),
        uncovered_messages=Counter(
            "agentmemory_context_uncovered_messages",
            "Stored messages left uncovered by windows.",
            registry=reg,
        ),
        recalls=Counter("agentmemory_recall_queries", "Recall queries.", ["kind", "backend"], registry=reg),
        recall_duration=Histogram(
            "agentmemory_recall_duration_seconds",
            "Duration of recall queries.",
            ["kind"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=reg,
        ),
    )

    def appended(sender: Any, messages: list[Any], **kwargs: Any) -> None:
        for message in messages:
            role = str(getattr(message.role, "value", message.role))
            metrics.messages.labels(role=role).inc()
            metrics.message_tokens.labels(role=role).inc(message.token_count or 0)

    def compacted(sender: Any, outcome: str, duration_s: float, **kwargs: Any) -> None:
        metrics.compactions.labels(outcome=outcome).inc()
        metrics.compaction_duration.labels(outcome=outcome).observe(duration_s)
        metrics.compaction_tokens.labels(direction="input").inc(kwargs.get("input_tokens", 0))
        metrics.compaction_tokens.labels(direction="output").inc(kwargs.get("output_tokens", 0))
        metrics.compaction_calls.inc(kwargs.get("llm_calls", 0))

    def built(sender: Any, window: Any, **kwargs: Any) -> None:
        metrics.windows.inc()
        metrics.window_tokens.observe(window.total_tokens)
        metrics.window_rows.observe(window.rows_read)
        if window.uncovered.count:
            metrics.windows_uncovered.inc()
            metrics.uncovered_messages.inc(window.uncovered.count)

    def searched(sender: Any, kind: str, backend: str, duration_s: float, **kwargs: Any) -> None:
        metrics.recalls.labels(kind=kind, backend=backend).inc()
        metrics.recall_duration.labels(kind=kind).observe(duration_s)

    # weak=False: the receivers are closures that nothing else keeps alive
    signals.message_appended.connect(appended, weak=False, dispatch_uid=f"{_UID}.appended")
    signals.compaction_finished.connect(compacted, weak=False, dispatch_uid=f"{_UID}.compacted")
    signals.context_built.connect(built, weak=False, dispatch_uid=f"{_UID}.built")
    signals.recall_searched.connect(searched, weak=False, dispatch_uid=f"{_UID}.searched")
    _installed = metrics
    return metrics


def uninstall() -> None:
    """Disconnect the receivers (the collectors stay in their registry)."""
    global _installed
    signals.message_appended.disconnect(dispatch_uid=f"{_UID}.appended")
    signals.compaction_finished.disconnect(dispatch_uid=f"{_UID}.compacted")
    signals.context_built.disconnect(dispatch_uid=f"{_UID}.built")
    signals.recall_searched.disconnect(dispatch_uid=f"{_UID}.searched")
    _installed = None
