"""Stored values at the edges of their columns never make a read fail.

Values written through the ORM (a data migration, an import, a host's own code) can hold any
number or date their column holds: importance 0.0 or a subnormal, dates in year 1 or 9999,
counts at the column's largest value. Every read that computes with them (recall, message
search, the memory block, the context window, the API, the admin, ``build_context()``,
``get_recent_entries()``, the recency boost) must answer, on every database.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.formats import date_format
from django.utils.timezone import localtime
from rest_framework.test import APIClient

from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message, ModelCall, Summary
from agentmemory.recall import boost, search_messages
from agentmemory.recall.memory import recall_memory

pytestmark = pytest.mark.django_db

MAX_INT = connection.ops.integer_field_range("PositiveIntegerField")[1]
MAX_BIG = connection.ops.integer_field_range("BigIntegerField")[1]
FIRST = datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

PROFILES = {
    "year-1-subnormal": {"importance": 5e-324, "when": FIRST, "count": MAX_INT, "tokens": MAX_INT},
    "year-9999-one": {"importance": 1.0, "when": LAST, "count": MAX_INT, "tokens": MAX_INT},
    "year-1-zero": {"importance": 0.0, "when": FIRST, "count": 0, "tokens": 0},
    "year-9999-tiny": {"importance": 1e-308, "when": LAST, "count": 1, "tokens": MAX_INT},
}


@pytest.fixture(params=sorted(PROFILES))
def stored(request, admin_user):  # type: ignore[no-untyped-def]
    values = PROFILES[request.param]
    when, count, tokens = values["when"], values["count"], values["tokens"]
    user = admin_user
    memory = KnowledgeMemory(user)
    odd = memory.store("The ferry to the island leaves at noon", "travel", persistent=True).fact
    transient = memory.store("The ferry island note for today", "travel").fact
    memory.store("The ferry back leaves at six", "travel", persistent=True)
    Fact.objects.filter(pk=odd.pk).update(
        importance=values["importance"],
        created_at=when,
        last_recalled_at=when,
        recall_count=count,
        expires_at=when,
    )
    Fact.objects.filter(pk=transient.pk).update(
        importance=values["importance"], created_at=when, last_recalled_at=when, recall_count=count
    )
    conv = Conversation.objects.create(owner=user, title="Ferry chat")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human(
                "When does the ferry to the island leave?",
                metadata={"session_date": "9999-12-31T23:59:59-12:00"},
            ),
            ChatMessage.ai(
                "The ferry leaves at noon.", metadata={"session_date": "0001-01-01T00:00:00+14:00"}
            ),
            ChatMessage.human("And the ferry back?"),
        ]
    )
    Message.objects.filter(conversation=conv).update(created_at=when)
    Message.objects.filter(conversation=conv, seq=3).update(token_count=tokens)
    summary = Summary.objects.create(
        conversation=conv,
        text="asked about the ferry",
        first_seq=1,
        through_seq=1,
        token_count=tokens,
        input_tokens=tokens,
        output_tokens=tokens,
        llm_calls=count,
        tokens_covered=MAX_BIG,
        human_messages_covered=MAX_BIG,
        human_message_count=MAX_BIG,
    )
    Summary.objects.filter(pk=summary.pk).update(created_at=when)
    Conversation.objects.filter(pk=conv.pk).update(
        summary=summary,
        stored_tokens=MAX_BIG,
        compaction_failures=count,
        summary_window_tokens=tokens,
        summary_system_tokens=tokens,
        created_at=when,
        updated_at=when,
    )
    call = ModelCall.objects.create(
        conversation=conv,
        owner=user,
        kind="chat",
        model="m",
        latency=0.0,
        usage_source="provider",
    )
    ModelCall.objects.filter(pk=call.pk).update(
        latency=1e308 if values["importance"] == 1.0 else 5e-324,
        max_tokens=tokens,
        system_tokens=tokens,
        knowledge_tokens=tokens,
        summary_tokens=tokens,
        history_tokens=tokens,
        tools_tokens=tokens,
        input_tokens=tokens,
        output_tokens=tokens,
        cached_input_tokens=tokens,
        cache_creation_input_tokens=tokens,
        created_at=when,
    )
    other = ModelCall.objects.create(
        conversation=conv, owner=user, kind="chat", model="m", usage_source="provider"
    )
    ModelCall.objects.filter(pk=other.pk).update(input_tokens=tokens, output_tokens=tokens, created_at=when)
    return user, conv, call, odd


def _ok(response) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content[:500]


def test_recall_and_search(stored, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    user, _conv, _call, _odd = stored
    memory = KnowledgeMemory(user)
    with django_capture_on_commit_callbacks(execute=True):
        hits = memory.recall("ferry island", k=5)
    assert all(math.isfinite(h.score) for h in hits)
    assert search_messages("ferry", owner=user)
    memory.build_context()
    memory.get_recent_entries()
    memory.get_recent_entries(days=100000)
    block = recall_memory(owner=user, query="ferry island", max_tokens=2000)
    assert block is None or block.text is not None


def test_recall_with_an_embedder(stored, settings, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"EMBEDDER": "tests.embedders.StubEmbedder", "RECALL_BACKEND": "hybrid"}
    user, conv, _call, _odd = stored
    from agentmemory.recall import embed_stored_messages

    memory = KnowledgeMemory(user)
    for fact in Fact.objects.filter(owner=user):
        memory.embed(fact) if hasattr(memory, "embed") else None
    with django_capture_on_commit_callbacks(execute=True):
        memory.recall("ferry island", k=5)
    embed_stored_messages(list(Message.objects.filter(conversation=conv).values_list("pk", flat=True)))
    assert search_messages("ferry", owner=user) is not None
    recall_memory(owner=user, query="ferry island", max_tokens=2000)


def test_context_window(stored) -> None:  # type: ignore[no-untyped-def]
    # counters at the column's largest value (``stored_tokens``, ``message_count``): the
    # first page's size overflowed bigint on PostgreSQL ("bigint out of range")
    _user, conv, _call, _odd = stored
    Conversation.objects.filter(pk=conv.pk).update(message_count=MAX_BIG)
    window = ContextWindowBuilder(conv).build(max_tokens=1000)
    # the newest message at the largest token count fits no budget; the rest is sent
    assert window.messages and "ferry" in window.messages[0].content


def test_api(stored) -> None:  # type: ignore[no-untyped-def]
    _read_everything(stored)


@pytest.mark.parametrize("time_zone", ["Pacific/Kiritimati", "Etc/GMT+12"])
def test_api_in_a_time_zone_far_from_utc(stored, settings, time_zone) -> None:  # type: ignore[no-untyped-def]
    # A host's TIME_ZONE other than UTC: a stored date at the edge of what Python holds has no
    # local time there (9999-12-31 23:59 UTC is year 10000 at +14:00), and DRF answered every
    # read that showed it with a 400, "Datetime value out of range." (the client's fault?).
    # Such a date is written in UTC, the same instant.
    settings.TIME_ZONE = time_zone
    user, conv, _call, odd = stored
    _read_everything(stored)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    fact = client.get(f"/api/facts/{odd.uuid}/").json()
    stored_fact = Fact.objects.get(pk=odd.pk)
    for name in ("created_at", "last_recalled_at", "expires_at"):
        assert parse_datetime(fact[name]) == getattr(stored_fact, name), name
    page = client.get(f"/api/conversations/{conv.uuid}/messages/").json()
    when = Message.objects.get(conversation=conv, seq=1).created_at
    assert [parse_datetime(m["created_at"]) for m in page["results"]] == [when] * 3


def _read_everything(stored) -> None:  # type: ignore[no-untyped-def]
    """Every GET of the API on the stored values answers 200."""
    user, conv, call, _odd = stored
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    base = f"/api/conversations/{conv.uuid}"
    for path, params in [
        ("/api/facts/", {}),
        ("/api/facts/", {"q": "ferry"}),
        ("/api/facts/", {"search": "ferry"}),
        ("/api/search/", {"q": "ferry island"}),
        ("/api/search/", {"q": "ferry island", "include": "messages"}),
        ("/api/usage/", {}),
        ("/api/conversations/", {}),
        (base + "/", {}),
        (base + "/messages/", {}),
        (base + "/summaries/", {}),
        (base + "/context/", {}),
        (base + "/context/", {"memory_recall": "true", "max_tokens": "2000"}),
        (base + "/model-calls/", {}),
        (base + f"/model-calls/{call.uuid}/", {}),
        (base + f"/model-calls/{call.uuid}/window/", {}),
        (base + "/export/", {}),
    ]:
        answer = client.get(path, params)
        assert answer.status_code == 200, (path, params, answer.status_code)


def test_admin(stored, admin_client) -> None:  # type: ignore[no-untyped-def]
    _show_everything(stored, admin_client)


@pytest.mark.parametrize("time_zone", ["Pacific/Kiritimati", "Etc/GMT+12"])
def test_admin_in_a_time_zone_far_from_utc(stored, admin_client, settings, time_zone) -> None:  # type: ignore[no-untyped-def]
    # Django's default TIME_ZONE is America/Chicago: a date at the edge of what Python holds
    # (imported, or written by a host's code) made every page that showed it an
    # OverflowError, a 500. It is shown in UTC, marked so.
    settings.TIME_ZONE = time_zone
    _show_everything(stored, admin_client)
    _user, conv, _call, _odd = stored
    # the transcript below the form shows each message's time, in UTC where it has no local time
    when = Message.objects.filter(conversation=conv).first().created_at
    try:
        shown = date_format(localtime(when), "SHORT_DATETIME_FORMAT")
    except OverflowError:
        shown = date_format(when.astimezone(UTC), "SHORT_DATETIME_FORMAT") + " UTC"
    page = admin_client.get(reverse("admin:agentmemory_conversation_change", args=[conv.pk]))
    assert shown in page.content.decode()


def _show_everything(stored, admin_client) -> None:  # type: ignore[no-untyped-def]
    """Every admin page of the stored values answers 200."""
    user, conv, call, odd = stored
    summary = Summary.objects.get(conversation=conv)
    message = Message.objects.filter(conversation=conv).first()
    for name, args in [
        ("agentmemory_fact_changelist", []),
        ("agentmemory_fact_change", [odd.pk]),
        ("agentmemory_conversation_changelist", []),
        ("agentmemory_conversation_change", [conv.pk]),
        ("agentmemory_conversation_context", [conv.pk]),
        ("agentmemory_message_changelist", []),
        ("agentmemory_message_change", [message.pk]),
        ("agentmemory_summary_changelist", []),
        ("agentmemory_summary_change", [summary.pk]),
        ("agentmemory_modelcall_changelist", []),
        ("agentmemory_modelcall_change", [call.pk]),
        ("agentmemory_modelcall_window", [call.pk]),
    ]:
        _ok(admin_client.get(reverse(f"admin:{name}", args=args)))
    _ok(admin_client.get(reverse("admin:agentmemory_fact_changelist"), {"q": "ferry"}))
    _ok(admin_client.get(reverse("admin:agentmemory_message_changelist"), {"q": "ferry"}))
    _ok(admin_client.get(reverse("admin:agentmemory_fact_recall"), {"owner": user.pk, "q": "ferry island"}))


@pytest.mark.parametrize("when", [FIRST, LAST])
@pytest.mark.parametrize("importance", [0.0, 5e-324, 1e-308, 1.0])
def test_boost(when, importance) -> None:  # type: ignore[no-untyped-def]
    for now in (FIRST, LAST, datetime.now(UTC)):
        for best in (1.0, 5e-324, 1e308):
            value = boost(best, best, when, importance, now)
            assert math.isfinite(value)
