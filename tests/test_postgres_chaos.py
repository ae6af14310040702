"""A mixed workload on one conversation, on PostgreSQL: eight processes append while others
build windows and force compactions; every acknowledged message is stored once, at a seq
no one else got, gap-free. Then the same again while the owner is deleted: nothing fails
except with ``ConversationNotFound`` (or a compaction that reports the conversation gone),
and nothing of the conversation is left or comes back.

Children are separate OS processes (``python -m tests.helpers_concurrency chaos ...``) on
the same test database, so the test needs committed data: ``django_db(transaction=True)``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary
from tests.helpers_concurrency import ROOT, child_env, worker_batches

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

APPENDERS = 8


def _start(role: str, conversation_id: int, worker: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers_concurrency",
            "chaos",
            role,
            str(conversation_id),
            str(worker),
            str(count),
        ],
        cwd=ROOT,
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(procs: list[subprocess.Popen[str]], during: Any = None) -> list[dict[str, Any]]:
    """Release every child at once, run ``during()`` meanwhile, collect their reports."""
    try:
        for proc in procs:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.strip() == "ready", proc.communicate(timeout=30)[1]
        for proc in procs:
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        if during is not None:
            during()
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            reports.append(json.loads(out))
        return reports
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _workload(conversation_id: int, per_appender: int, rounds: int) -> list[subprocess.Popen[str]]:
    procs = [_start("append", conversation_id, k, per_appender) for k in range(APPENDERS)]
    procs += [_start("build", conversation_id, 100 + k, rounds) for k in range(2)]
    procs.append(_start("compact", conversation_id, 200, rounds))
    return procs


def test_appends_builds_and_compactions_at_once_lose_and_duplicate_nothing(django_user_model) -> None:
    owner = django_user_model.objects.create_user("chaos")
    conv = Conversation.objects.create(owner=owner, agent_key="chaos")
    per_appender = 40
    reports = _run(_workload(conv.pk, per_appender, rounds=30))

    for report in reports:
        assert report["errors"] == [] and report["violations"] == [], report
        assert not report["gone"]
    rows = list(
        Message.objects.filter(conversation=conv).order_by("seq").values_list("seq", "metadata", "content")
    )
    total = APPENDERS * per_appender
    assert [seq for seq, _, _ in rows] == list(range(1, total + 1))  # unique and gap-free
    for report in (r for r in reports if r["role"] == "append"):
        mine = [(seq, content) for seq, meta, content in rows if meta["worker"] == report["worker"]]
        assert [seq for seq, _ in mine] == report["seqs"]  # every acknowledged seq holds its message
        expected = [m.content for batch in worker_batches(report["worker"], per_appender) for m in batch]
        assert [content for _, content in mine] == expected
    conv.refresh_from_db()
    assert conv.last_seq == conv.message_count == total and conv.pending_tool_calls == {}
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert len({s.through_seq for s in summaries}) == len(summaries)
    assert conv.summary_id is None or conv.summary_id == summaries[-1].pk
    assert window_violations(ContextWindowBuilder(conv).build(1_500), newest_seq=total) == []


def test_deleting_the_owner_during_the_workload_leaves_nothing_and_fails_nothing_else(
    django_user_model,
) -> None:
    owner = django_user_model.objects.create_user("chaos")
    conv = Conversation.objects.create(owner=owner, agent_key="chaos")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("before"), ChatMessage.ai("ok")])

    def delete_owner_midway() -> None:
        deadline = time.monotonic() + 60
        while Message.objects.filter(conversation_id=conv.pk).count() < 60 and time.monotonic() < deadline:
            time.sleep(0.02)
        owner.delete()

    reports = _run(_workload(conv.pk, 400, rounds=10_000), during=delete_owner_midway)

    for report in reports:
        assert report["errors"] == [] and report["violations"] == [], report
        assert report["gone"], report  # each kept going until the conversation was gone
    appended = [len(r["seqs"]) for r in reports if r["role"] == "append"]
    assert 0 < sum(appended) < APPENDERS * 400  # the owner went while appends were under way
    time.sleep(0.5)  # a late writer would have shown up by now
    assert not Conversation.objects.filter(pk=conv.pk).exists()
    assert not Message.objects.filter(conversation_id=conv.pk).exists()
    assert not Summary.objects.filter(conversation_id=conv.pk).exists()
    with pytest.raises(ConversationNotFound):
        PersistentChatHistory(conv.pk).add_message(ChatMessage.human("too late"))
    assert not Message.objects.filter(conversation_id=conv.pk).exists()
