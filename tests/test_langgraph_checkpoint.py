"""``DjangoSaver`` against LangGraph's own conformance suite and against a real graph."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES

from agentmemory.contrib.langgraph import DjangoSaver

pytestmark = pytest.mark.django_db


@checkpointer_test(name="DjangoSaver")
async def django_saver():  # type: ignore[no-untyped-def]
    yield DjangoSaver()


def test_conformance_suite_passes_every_base_and_extended_capability() -> None:
    # async_to_sync runs the suite's ORM calls (sync_to_async) back on this thread, inside
    # the test's transaction
    report = async_to_sync(validate)(django_saver)
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert not failures, failures
    assert {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES} == {
        name for name, r in report.results.items() if r.detected and r.passed
    }
    assert report.conformance_level() == "FULL"
