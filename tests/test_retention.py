"""Retention: which conversations expire, ``purge_conversations`` (service, command, beat task),
blanking content for statistics, and expired long-term facts."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.utils import timezone

from agentmemory import retention
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Fact, Message, MessageEmbedding, Summary
from agentmemory.recall import EmbeddingBackend, search_messages
from agentmemory.retention import expired_conversations, parse_period, purge_conversations
from tests.embedders import StubEmbedder
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _conversation(owner, *, agent: str = "support", age_days: float = 0, word: str = "parcel", **fields):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key=agent, **fields)
    call = ToolCall(id=f"call_{conv.pk}", name="track", arguments={"parcel": f"{word}-17"})
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human(f"where is my {word}"),
            ChatMessage.ai(None, [call]),
            ChatMessage.tool(f"{word} is in Oslo", tool_call_id=call.id, name="track"),
            ChatMessage.ai(f"your {word} is in Oslo"),
        ]
    )
    Summary.objects.create(conversation=conv, text=f"asked about the {word}", first_seq=1, through_seq=2)
    EmbeddingBackend(StubEmbedder()).index(list(conv.messages.all()))
    Conversation.objects.filter(pk=conv.pk).update(updated_at=timezone.now() - timedelta(days=age_days))
    conv.refresh_from_db()
    return conv


def test_parse_period() -> None:
    assert parse_period("90d") == parse_period("90") == timedelta(days=90)
    assert parse_period("12h") == timedelta(hours=12) and parse_period("2w") == timedelta(weeks=2)
    for bad in ("", "0d", "-3d", "90 days", "1y", "d"):
        with pytest.raises(ValueError, match="not a period"):
            parse_period(bad)


def test_periods_come_from_the_conversation_then_the_agent_then_the_global_setting(settings) -> None:
    owner = UserFactory()
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30, "RETENTION_DAYS_BY_AGENT": {"legal": None, "chat": 7}}
    old_support = _conversation(owner, agent="support", age_days=40)
    new_support = _conversation(owner, agent="support", age_days=20)
    old_legal = _conversation(owner, agent="legal", age_days=4000)
    old_chat = _conversation(owner, agent="chat", age_days=8)
    new_chat = _conversation(owner, agent="chat", age_days=6)
    held = _conversation(owner, agent="chat", age_days=100, retention_days=365)
    short = _conversation(owner, agent="legal", age_days=3, retention_days=2)

    assert set(expired_conversations()) == {old_support, old_chat, short}
    assert set(expired_conversations(agent_key="chat")) == {old_chat}
    # one period for everything, still below a conversation's own period
    assert set(expired_conversations(older_than=timedelta(days=5))) == {
        old_support,
        new_support,
        old_legal,
        old_chat,
        new_chat,
        short,
    }
    assert held not in set(expired_conversations(older_than=timedelta(days=1)))

    settings.AGENTMEMORY = {}
    assert set(expired_conversations()) == {short}  # no setting: only own periods apply


def test_purge_deletes_expired_conversations_in_batches_and_expired_facts(settings, monkeypatch) -> None:
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30}
    owner = UserFactory()
    old = [_conversation(owner, age_days=31 + i) for i in range(5)]
    kept = _conversation(owner, age_days=1, word="bicycle")
    memory = KnowledgeMemory(owner, agent_key="support")
    memory.store("prefers email", "preferences", persistent=True)
    memory.store("asked about a refund", "log", ttl=timedelta(days=1))
    Fact.objects.filter(content="asked about a refund").update(expires_at=timezone.now() - timedelta(hours=1))

    dry = purge_conversations(dry_run=True)
    assert (dry.conversations, dry.messages, dry.summaries, dry.message_embeddings, dry.facts) == (
        5,
        20,
        5,
        15,
        1,
    )
    assert Conversation.objects.count() == 6 and Fact.objects.count() == 2  # nothing changed

    monkeypatch.setattr(retention, "CONVERSATION_BATCH", 2)
    seen: list[tuple[int, int]] = []
    report = purge_conversations(progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 5), (4, 5), (5, 5)]  # three transactions of at most two conversations
    assert (report.conversations, report.messages, report.summaries, report.message_embeddings) == (
        5,
        20,
        5,
        15,
    )
    assert report.facts == 1 and not report.dry_run
    assert list(Conversation.objects.all()) == [kept]
    assert not Message.objects.filter(conversation_id__in=[c.pk for c in old]).exists()
    assert list(Fact.objects.values_list("content", flat=True)) == ["prefers email"]
    assert search_messages("parcel", owner=owner) == []
    assert len([hit for hit in search_messages("bicycle", owner=owner) if hit.relevance > 0]) == 3


def test_blank_content_keeps_rows_and_counters_and_removes_what_they_said(settings) -> None:
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30}
    owner = UserFactory()
    conv = _conversation(owner, age_days=45, word="passport")
    before = Conversation.objects.values("message_count", "stored_tokens", "human_message_count").get(
        pk=conv.pk
    )
    tokens = list(conv.messages.order_by("seq").values_list("role", "token_count"))

    report = purge_conversations(blank_content=True)
    assert report.blanked and (report.conversations, report.messages, report.summaries) == (1, 4, 1)
    assert report.message_embeddings == 3

    conv.refresh_from_db()
    assert conv.content_purged_at is not None
    assert (
        Conversation.objects.values("message_count", "stored_tokens", "human_message_count").get(pk=conv.pk)
        == before
    )
    rows = list(conv.messages.order_by("seq"))
    assert [(m.role, m.token_count) for m in rows] == tokens
    assert [m.content for m in rows] == ["", None, "", ""]  # a tool-calling AI message keeps None
    assert rows[1].tool_calls == [{"id": f"call_{conv.pk}", "name": "track", "arguments": {}}]
    assert rows[2].tool_call_id == f"call_{conv.pk}"
    assert not MessageEmbedding.objects.filter(message__conversation=conv).exists()
    assert Summary.objects.get(conversation=conv).text == ""
    assert search_messages("passport", owner=owner) == []
    assert not any("passport" in str(value) for m in rows for value in (m.content, m.tool_calls, m.parts))

    again = purge_conversations(blank_content=True)
    assert again.conversations == 0  # already blanked


def test_purge_of_one_agent_leaves_the_others(settings) -> None:
    owner = UserFactory()
    support = _conversation(owner, agent="support", age_days=100)
    sales = _conversation(owner, agent="sales", age_days=100)
    KnowledgeMemory(owner, agent_key="sales").store("expired", "log", ttl=timedelta(seconds=1))
    Fact.objects.update(expires_at=timezone.now() - timedelta(seconds=5))
    report = purge_conversations(older_than=timedelta(days=90), agent_key="support")
    assert report.conversations == 1 and report.facts == 0
    assert list(Conversation.objects.all()) == [sales]
    assert not Conversation.objects.filter(pk=support.pk).exists()


def test_command_reports_and_purges(settings) -> None:
    owner = UserFactory()
    _conversation(owner, agent="support", age_days=100)
    _conversation(owner, agent="support", age_days=10)

    out = StringIO()
    call_command("purge_conversations", "--older-than", "90d", "--dry-run", stdout=out)
    assert out.getvalue().strip() == (
        "would delete 1 conversations (4 messages, 1 summaries, 3 message embeddings) "
        "and delete 0 expired facts"
    )
    assert Conversation.objects.count() == 2

    out, err = StringIO(), StringIO()
    call_command("purge_conversations", "--older-than", "30d", "--agent", "support", stdout=out, stderr=err)
    assert out.getvalue().startswith("deleted 1 conversations (4 messages")
    assert "purged 1/1 conversations" in err.getvalue()  # plain progress off a terminal
    assert Conversation.objects.count() == 1

    out = StringIO()
    call_command("purge_conversations", "--older-than", "1d", "--blank-content", "--no-progress", stdout=out)
    assert out.getvalue().startswith("blanked 1 conversations (4 messages")

    with pytest.raises(CommandError, match="not a period"):
        call_command("purge_conversations", "--older-than", "ninety days")


def test_beat_runs_the_purge_task(settings) -> None:
    from agentmemory.tasks import purge_expired
    from project.celery import app

    entries = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert "agentmemory.tasks.purge_expired" in entries
    settings.AGENTMEMORY = {"RETENTION_DAYS": 30}
    owner = UserFactory()
    _conversation(owner, age_days=31)
    result = purge_expired.apply().get()
    assert result["conversations"] == 1 and result["messages"] == 4
    assert not Conversation.objects.exists()


def test_bad_retention_settings_are_reported_by_checks(settings) -> None:
    settings.AGENTMEMORY = {"RETENTION_DAYS": 0, "RETENTION_DAYS_BY_AGENT": {"support": "90d"}}
    ids = {message.id for message in run_checks()}
    assert {"agentmemory.E050", "agentmemory.E051"} <= ids
    settings.AGENTMEMORY = {"RETENTION_DAYS": 90, "RETENTION_DAYS_BY_AGENT": {"support": 30, "legal": None}}
    ids = {message.id for message in run_checks()}
    assert not {"agentmemory.E050", "agentmemory.E051"} & ids
