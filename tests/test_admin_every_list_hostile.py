"""Every admin list of agentmemory's apps (the contrib apps' too) answers a query string it
cannot use with a 400, never a server error.

The admin passes any lookup on a model's own fields from the query string to the database;
the core admins refuse what the database cannot compare (``CheckedQueryAdmin``), but the
LangGraph app's checkpoint, store item and mirrored thread lists were plain ``ModelAdmin``s:
``?created_at__year=99999`` was a ``ValueError``, ``?pk__in=`` past 64 bits an
``OverflowError`` (SQLite), a NUL in a filter a ``DataError`` (PostgreSQL) and a search of
2,000 words "Expression tree is too large" (SQLite): each a 500.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from tests.factories import conversation_with_turns

pytestmark = pytest.mark.django_db

HOSTILE = [
    {"created_at__year": "99999"},
    {"created_at__gte": "9999-12-31T23:59:59-12:00"},
    {"pk__in": "99999999999999999999999"},
    {"id": "99999999999999999999"},
    {"q": " ".join(["w"] * 2_000)},
    {"q": "x" * 60_000},
    {"q": "a\x00b"},
    {"thread_id": "\x00"},
    {"namespace__startswith": "\x00"},
    {"agent_key": "a\x00"},
]


def _lists() -> list[str]:
    return sorted(
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
        if model._meta.app_label.startswith("agentmemory")
    )


def test_the_contrib_lists_are_among_those_checked() -> None:
    from django.apps import apps

    if apps.is_installed("agentmemory.contrib.langgraph"):
        assert "/admin/agentmemory_langgraph/storeitem/" in _lists()


@pytest.mark.parametrize(
    "query", HOSTILE, ids=[next(iter(q)) + "=" + next(iter(q.values()))[:20] for q in HOSTILE]
)
def test_no_query_string_makes_an_admin_list_fail(admin_client, query) -> None:  # type: ignore[no-untyped-def]
    conversation_with_turns(2)
    answers = {url: admin_client.get(url, query).status_code for url in _lists()}
    assert {url: status for url, status in answers.items() if status >= 500} == {}
    # a filter or search refused is said so; the list itself still answers
    for url in answers:
        assert admin_client.get(url).status_code == 200
