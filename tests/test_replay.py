"""Tests of the transcript replay (``agentmemory.replay``) and ``manage.py replay_conversations``."""

from __future__ import annotations

import dataclasses
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Sum
from django.test import override_settings

from agentmemory.context import ContextWindowBuilder
from agentmemory.formats.transcripts import load_transcripts, parse_transcripts
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.replay import ReplayReport, percentile, plan_turns, replay_transcripts

SAMPLE = Path(__file__).resolve().parents[1] / "agentmemory" / "samples" / "support_demo.json"

CLEAN = "Replay finished: 0 invariant violations, 0 messages left out, 0 budget errors"

# Compaction is enqueued on transaction commit: these tests need real commits.
replay_db = pytest.mark.django_db(transaction=True)


def run_command(*args: str) -> list[str]:
    out = StringIO()
    call_command("replay_conversations", *args, "--no-progress", stdout=out)
    return out.getvalue().splitlines()


def numbers(lines: list[str]) -> dict[str, int]:
    """``label: 1,234 ...`` report lines as ``{label: 1234}``."""
    values = {}
    for line in lines:
        match = re.match(r"^([a-z ]+):\s+([\d,]+)", line)
        if match:
            values[match.group(1)] = int(match.group(2).replace(",", ""))
    return values


def test_plan_turns_pins_the_prompt_and_groups_each_turn() -> None:
    system = ChatMessage.system("be brief")
    greeting = ChatMessage.ai("Hi! How can I help?")
    h1, a1, h2, h3 = (
        ChatMessage.human("a"),
        ChatMessage.ai("b"),
        ChatMessage.human("c"),
        ChatMessage.human("d"),
    )

    plan = plan_turns([system, greeting, h1, a1, h2, h3])

    assert plan.prompt is system
    assert plan.preamble == [greeting]
    assert plan.turns == [(h1, [a1]), (h2, []), (h3, [])]


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def test_report_ends_with_the_violation_count() -> None:
    report = ReplayReport(max_tokens=1000, violation_count=3)

    assert report.lines()[-1] == CLEAN.replace("0 invariant", "3 invariant")
    assert report.failed
    assert not ReplayReport(max_tokens=1000).failed
    assert ReplayReport(max_tokens=1000, left_out_messages=1).failed
    assert ReplayReport(max_tokens=1000, budget_error_count=1).failed


@replay_db
def test_bundled_sample_replays_without_violations_and_compacts() -> None:
    lines = run_command()

    assert lines[-1] == CLEAN
    values = numbers(lines)
    humans = Message.objects.filter(role=Role.HUMAN).count()
    assert values["conversations"] == Conversation.objects.count() == 3
    assert values["messages"] == Message.objects.count()
    assert values["tokens stored"] == Message.objects.aggregate(total=Sum("token_count"))["total"]
    assert values["windows built"] == humans
    assert values["summaries made"] == Summary.objects.count() >= 1
    assert values["context budget errors"] == 0
    assert any(line == "left outside window and summary: 0 messages in 0 windows" for line in lines)
    # The done-criterion: every conversation with >= 10 human messages has a summary.
    long = Conversation.objects.filter(human_message_count__gte=10)
    assert long.exists()
    assert not long.filter(summary__isnull=True).exists()
    assert "long conversations:   1 of 1 with >= 10 human messages have a summary" in lines


@replay_db
def test_parallel_tool_results_are_sent_in_call_order() -> None:
    [long, *_] = load_transcripts(SAMPLE)
    replay_transcripts([long])
    conversation = Conversation.objects.get()

    window = ContextWindowBuilder(conversation).build(100_000)

    # The sample stores the results of one parallel call out of order on purpose (W4).
    for i, message in enumerate(window.history):
        if message.role is Role.AI and len(message.tool_calls) > 1:
            results = window.history[i + 1 : i + 1 + len(message.tool_calls)]
            assert [r.tool_call_id for r in results] == [c.id for c in message.tool_calls]


@replay_db
def test_a_broken_window_is_reported_with_conversation_seq_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    real_build = ContextWindowBuilder.build

    def skips_a_middle_message(self, max_tokens=None, **kwargs):  # type: ignore[no-untyped-def]
        window = real_build(self, max_tokens, **kwargs)
        history = window.history
        if len(history) < 3:
            return window
        kept = [m for m in window.messages if m is not history[1]]
        return dataclasses.replace(window, messages=kept)

    monkeypatch.setattr(ContextWindowBuilder, "build", skips_a_middle_message)
    out = StringIO()

    with pytest.raises(CommandError, match=r"^\d+ invariant violations, 0 messages left out") as info:
        call_command("replay_conversations", "--no-progress", stdout=out)

    assert info.value.returncode == 1
    lines = out.getvalue().splitlines()
    count = int(re.match(r"Replay finished: (\d+) invariant violations", lines[-1]).group(1))
    assert count > 0
    assert str(info.value) == f"{count} invariant violations, 0 messages left out, 0 budget errors"
    shown = [line for line in lines if line.startswith("  ") and "C5: stored messages" in line]
    assert shown
    assert re.search(r"\(conversation \d+\), seq \d+: C5: stored messages \[\d+", shown[0])


@replay_db
def test_budget_errors_are_counted_and_the_replay_goes_on() -> None:
    transcripts = load_transcripts(SAMPLE)
    humans = sum(t.human_messages for t in transcripts)

    # The sample's system prompt alone is over 60 tokens: its windows cannot be built.
    report = replay_transcripts(transcripts, max_tokens=60)

    assert report.budget_error_count > 0
    assert report.windows_built + report.budget_error_count == humans
    assert report.messages == Message.objects.count()
    assert report.violation_count == 0
    assert "raise max_tokens" in report.budget_errors[0].text


@replay_db
def test_messages_outside_window_and_summary_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    real_build = ContextWindowBuilder.build
    # A window of one message: valid (C1-C5 hold) but it leaves older messages out.
    monkeypatch.setattr(
        ContextWindowBuilder,
        "build",
        lambda self, max_tokens=None: real_build(self, max_tokens, max_messages=1),
    )
    chat = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
        {"role": "user", "content": "five"},
    ]

    with override_settings(AGENTMEMORY={"CONTEXT_GAP_POLICY": "report"}):
        report = replay_transcripts(parse_transcripts([chat], "openai"))

    assert report.violation_count == 0  # the windows' own counts agree with the replay's
    assert report.left_out_messages == 2 + 4
    assert report.windows_with_left_out == 2
    assert "4 messages (seqs 1..4) in neither window nor summary; no summary" in report.left_out[-1].text


@replay_db
@pytest.mark.parametrize(
    ("flag", "per_turn"),
    [((), ["build", "compact"]), (("--compact-before-build",), ["compact", "build", "compact"])],
)
def test_compaction_is_asked_after_each_turn_and_optionally_before_the_build(
    monkeypatch: pytest.MonkeyPatch, flag: tuple[str, ...], per_turn: list[str]
) -> None:
    from agentmemory.compaction import BaseMemoryCompactor

    calls: list[str] = []
    real_build, real_compact = ContextWindowBuilder.build, BaseMemoryCompactor.compact_if_needed

    def build(self, max_tokens=None, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("build")
        return real_build(self, max_tokens, **kwargs)

    def compact_if_needed(self, *, max_tokens=None):  # type: ignore[no-untyped-def]
        calls.append("compact")
        assert max_tokens == 3000
        return real_compact(self, max_tokens=max_tokens)

    monkeypatch.setattr(ContextWindowBuilder, "build", build)
    monkeypatch.setattr(BaseMemoryCompactor, "compact_if_needed", compact_if_needed)
    humans = sum(t.human_messages for t in load_transcripts(SAMPLE))

    run_command(str(SAMPLE), "--max-tokens", "3000", *flag)

    assert calls == per_turn * humans


@replay_db
def test_bad_input_is_a_command_error_naming_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "chats.json"
    bad.write_text(
        '[[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c9", "content": "x"}]]'
    )

    with pytest.raises(
        CommandError, match=r"chats.json: item 0 \(chats #1\): message 1: tool result for 'c9'"
    ):
        run_command(str(bad))
    with pytest.raises(CommandError, match="--limit must be at least 1"):
        run_command("--limit", "0")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CommandError, match=r"deep\.json: the JSON is nested too deeply to parse"):
        run_command(str(deep))
    assert not Conversation.objects.exists()


@replay_db
def test_tau_bench_slice_replays_without_violations(shared_data: Path) -> None:
    lines = run_command(str(shared_data / "tau-bench-airline-gpt-4o.json"), "--limit", "3")

    assert lines[-1] == CLEAN
    values = numbers(lines)
    assert values["conversations"] == 3
    assert values["messages"] == Message.objects.count()
    assert values["windows built"] == Message.objects.filter(role=Role.HUMAN).count()
    assert any(line == "left outside window and summary: 0 messages in 0 windows" for line in lines)
    assert set(Conversation.objects.values_list("agent_key", flat=True)) == {"tau-bench-airline"}


@replay_db
def test_locomo_slice_replays_with_summaries(shared_data: Path) -> None:
    lines = run_command(str(shared_data / "locomo6.json"), "--limit", "1")

    assert lines[-1] == CLEAN
    conversation = Conversation.objects.get()
    assert conversation.agent_key == "locomo"
    assert conversation.summary is not None
    assert any(line == "left outside window and summary: 0 messages in 0 windows" for line in lines)
    first = Message.objects.get(conversation=conversation, seq=1)
    assert first.role == Role.HUMAN
    assert first.metadata["dia_id"] == "D1:1"
    assert first.metadata["session_date_time"] == conversation.metadata["session_date_times"]["1"]


@pytest.mark.django_db(transaction=True)
def test_assistant_greeting_before_the_first_question_is_folded_after_the_first_turn() -> None:
    """A conversation that opens with the assistant: no window may start on a greeting, so
    the first window asks for a compaction that folds it, and no window leaves it outside
    window and summary."""
    from agentmemory.formats.transcripts import Transcript
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Summary
    from agentmemory.replay import replay_transcripts

    transcript = Transcript(
        title="greeting first",
        agent_key="demo",
        messages=[
            ChatMessage.ai("Hello! How can I help you today?"),
            ChatMessage.human("Where is my order?"),
            ChatMessage.ai("It ships tomorrow."),
            ChatMessage.human("Thanks."),
            ChatMessage.ai("You're welcome."),
        ],
        metadata={},
    )
    report = replay_transcripts([transcript])
    assert report.violation_count == 0
    assert report.left_out_messages == 0
    assert report.gap_compactions == 1  # the first window, before any turn ended
    summary = Summary.objects.get(conversation_id=report.conversation_ids[0])
    assert (summary.first_seq, summary.through_seq) == (1, 1)


@pytest.mark.django_db
def test_wait_for_compaction_waits_while_a_compaction_is_running() -> None:
    from django.utils import timezone

    from agentmemory.replay import wait_for_compaction

    idle = Conversation.objects.create()
    busy = Conversation.objects.create(compaction_started_at=timezone.now())
    assert wait_for_compaction([idle.pk], timeout=0.1, poll=0.01)
    assert not wait_for_compaction([idle.pk, busy.pk], timeout=0.05, poll=0.01)
    Conversation.objects.filter(pk=busy.pk).update(compaction_started_at=None)
    assert wait_for_compaction([idle.pk, busy.pk], timeout=0.1, poll=0.01)


@replay_db
def test_owner_is_created_once_without_a_password_and_owns_the_replayed_conversations() -> None:
    from django.contrib.auth import get_user_model

    first = run_command("--owner", "alice")
    run_command("--owner", "alice", "--limit", "1")

    alice = get_user_model().objects.get(username="alice")
    assert (
        "Created user 'alice' to own the replayed conversations; it logs in once it is given "
        "a password (`manage.py changepassword alice`)" in first
    )
    assert not alice.has_usable_password()
    assert Conversation.objects.count() == 4
    assert Conversation.objects.filter(owner=alice).count() == 4


@replay_db
def test_an_existing_owner_is_reused_with_its_password_and_sees_the_conversations_in_the_api(client) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    bob = get_user_model().objects.create_user("bob", password="s3cret-pass")
    run_command("--owner", "bob", "--through-agent")

    bob.refresh_from_db()
    assert bob.check_password("s3cret-pass")
    assert get_user_model().objects.count() == 1
    assert client.login(username="bob", password="s3cret-pass")
    listed = client.get("/api/conversations/", HTTP_ACCEPT="application/json").json()["results"]
    assert len(listed) == Conversation.objects.filter(owner=bob).count() == 3


@replay_db
@pytest.mark.parametrize("through_agent", [False, True])
def test_replayed_conversations_keep_the_transcripts_agent_key_and_metadata(through_agent) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.models import ModelCall

    run_command(*(["--through-agent"] if through_agent else []))
    expected = sorted(
        (t["title"], t["agent_key"], json.dumps(t["metadata"], sort_keys=True))
        for t in json.loads(SAMPLE.read_text())
    )
    stored = sorted(
        (c.title, c.agent_key, json.dumps(c.metadata, sort_keys=True)) for c in Conversation.objects.all()
    )
    assert stored == expected
    assert {key for _, key, _ in expected} == {"bookstore-support"}
    if through_agent:
        assert set(ModelCall.objects.filter(kind="chat").values_list("agent_key", flat=True)) == {
            "bookstore-support"
        }


@replay_db
def test_an_owner_name_the_user_model_refuses_is_an_error_before_anything_is_stored() -> None:
    from django.contrib.auth import get_user_model

    with pytest.raises(CommandError, match=r"--owner 'no spaces please'"):
        run_command("--owner", "no spaces please")
    with pytest.raises(CommandError, match="--owner needs a user name"):
        run_command("--owner", " ")

    assert not get_user_model().objects.exists()
    assert not Conversation.objects.exists()


@replay_db
def test_progress_falls_back_to_a_plain_counter_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    class Terminal(StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setitem(sys.modules, "tqdm", None)  # "import tqdm" raises ImportError
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    out = StringIO()

    call_command("replay_conversations", "--limit", "1", stdout=out)

    total = Message.objects.count()
    assert out.getvalue().splitlines()[-1] == CLEAN
    assert terminal.getvalue().endswith(f"\rreplay: {total}/{total} msg (100%)\n")


def test_plain_counter_redraws_at_most_once_per_interval() -> None:
    from agentmemory.management.commands.replay_conversations import TextProgress

    screen = StringIO()
    bar = TextProgress(1000, file=screen, interval=3600)
    for _ in range(999):
        bar.update(1)
    bar.update(1)
    bar.close()

    # the first message, then nothing for an hour, then the last one
    assert screen.getvalue() == "\rreplay: 1/1000 msg (0%)\rreplay: 1000/1000 msg (100%)\n"
