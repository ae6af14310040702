"""Memory compaction: when it triggers, incremental and chunked prompts, runs after commit,
the lease and a boundary that never moves back, safe failure, messages untouched, the newest
human turn kept verbatim, and the labelled offline compactor."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from agentmemory.compaction import (
    BaseMemoryCompactor,
    LLMMemoryCompactor,
    build_compactor,
    get_compaction_llm,
)
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import InvalidSummaryError, TransientLLMError
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.llm.offline import OFFLINE_LABEL
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import ApproximateTokenCounter
from tests.factories import ConversationFactory, conversation_with_turns, turn
from tests.helpers_concurrency import ScriptHolder

pytestmark = pytest.mark.django_db

SCRIPTED = "tests.helpers_concurrency.scripted_model"


def compactor_for(conv: Conversation, history: PersistentChatHistory, llm, **kwargs) -> LLMMemoryCompactor:  # type: ignore[no-untyped-def]
    return LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, **kwargs)


def message_rows(conv: Conversation) -> list[dict]:
    return list(Message.objects.filter(conversation=conv).order_by("seq").values())


def new_messages_part(call) -> str:  # type: ignore[no-untyped-def]
    """The "New messages" block of a summary prompt recorded by ``ScriptedChatModel``."""
    prompt = call[0][-1].content
    return prompt.split("New messages:\n", 1)[1]


def newest_human_seq(conv: Conversation) -> int:
    return (
        Message.objects.filter(conversation=conv, role=Role.HUMAN)
        .order_by("-seq")
        .values_list("seq", flat=True)[0]
    )


@pytest.fixture
def scripted():  # type: ignore[no-untyped-def]
    """A ``ScriptedChatModel`` that the compaction task builds via ``COMPACTION_LLM``."""
    ScriptHolder.current = ScriptedChatModel()
    with override_settings(AGENTMEMORY={"COMPACTION_LLM": SCRIPTED}):
        yield ScriptHolder.current
    ScriptHolder.current = None


# -- when ---------------------------------------------------------------------------------


def test_trigger_after_ten_human_messages_by_default() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    compactor = compactor_for(conv, history, ScriptedChatModel(["Questions 0 to 8 were asked."]))
    due = []
    for i in range(12):
        history.add_messages(turn(i))
        due.append(compactor.needs_compaction())
    assert due == [False] * 9 + [True] * 3


def test_trigger_count_restarts_after_each_summary() -> None:
    with override_settings(AGENTMEMORY={"SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 3}):
        conv = ConversationFactory()
        history = PersistentChatHistory(conv)
        llm = ScriptedChatModel([f"Summary {k}." for k in range(5)])
        compactor = compactor_for(conv, history, llm)
        compacted_after = []
        for i in range(10):
            history.add_messages(turn(i))
            if compactor.needs_compaction():
                assert compactor.compact() is not None
                compacted_after.append(i)
    assert compacted_after == [2, 5, 8]
    summaries = list(Summary.objects.filter(conversation=conv).order_by("through_seq"))
    assert [s.human_message_count for s in summaries] == [3, 6, 9]
    assert [s.previous_id for s in summaries] == [None, summaries[0].pk, summaries[1].pk]


def test_trigger_when_uncovered_messages_no_longer_fit() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    llm = ScriptedChatModel(["The user asked about the first long question."] * 3)
    compactor = compactor_for(conv, history, llm)
    history.add_messages(turn(0, words=200))
    # one human turn only: nothing could be folded (the newest turn stays verbatim), however large it is
    assert not compactor.needs_compaction(max_tokens=100)
    history.add_messages(turn(1, words=5))
    assert conv.human_message_count < 10
    assert compactor.needs_compaction(max_tokens=100)
    assert not compactor.needs_compaction(max_tokens=100_000)
    summary = compactor.compact()
    assert summary.through_seq == 2
    # what is left (summary + turn 1) fits again: no second trigger yet
    assert not compactor.needs_compaction(max_tokens=100)
    history.add_messages(turn(2, words=200))
    assert compactor.needs_compaction(max_tokens=100)  # the second trigger, still far below 10 humans
    second = compactor.compact()
    assert second.through_seq == 4 and second.previous == summary
    # every message is in the window or in the summary: nothing falls between them
    window = ContextWindowBuilder(conv, max_tool_result_tokens=None).build(10_000)
    assert window.summary_through_seq + 1 == window.first_seq


# -- incremental, bounded prompts ----------------------------------------------------------


def test_prompt_size_does_not_grow_with_the_conversation() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    # every summary has the same length, as a real summariser bounded by the limit would
    llm = ScriptedChatModel([f"Summary number {k}: " + "fact " * 40 for k in range(5)])
    compactor = compactor_for(conv, history, llm, summarize_every_n_human=10)
    for i in range(51):
        history.add_messages(turn(i, tool=i % 4 == 0))
        if compactor.needs_compaction():
            compactor.compact()
    assert len(llm.calls) == 5
    sizes = [len(call[0][-1].content) for call in llm.calls]
    assert 0.8 < sizes[4] / sizes[1] < 1.25, sizes
    fifth = llm.calls[4][0][-1].content
    assert "Summary number 3:" in fifth and "Summary number 2:" not in fifth
    # the 5th compaction (after turn 49) folds turns 39-48 only, onto the 4th summary
    assert "question 38:" not in fifth and "question 39:" in fifth and "question 48:" in fifth
    assert "question 49:" not in fifth


def test_long_span_is_folded_in_chunks_into_one_summary() -> None:
    counter = ApproximateTokenCounter()
    conv, history = conversation_with_turns(30, token_counter=counter, tool_every=0, words=20)
    tokens_by_content = dict(Message.objects.filter(conversation=conv).values_list("content", "token_count"))
    llm = ScriptedChatModel([lambda msgs, k=k: f"Running summary {k}." for k in range(20)])
    with override_settings(AGENTMEMORY={"SUMMARIZER_MAX_INPUT_TOKENS": 400}):
        compactor = compactor_for(conv, history, llm)
    span_tokens = sum(
        Message.objects.filter(conversation=conv, seq__gt=1, seq__lt=newest_human_seq(conv)).values_list(
            "token_count", flat=True
        )
    )
    summary = compactor.compact()
    assert Summary.objects.filter(conversation=conv).count() == 1
    assert summary.through_seq == newest_human_seq(conv) - 1
    assert len(llm.calls) >= span_tokens / 400 >= 3
    assert summary.llm_calls == len(llm.calls) and summary.text == f"Running summary {len(llm.calls) - 1}."
    seen: list[str] = []
    for k, call in enumerate(llm.calls):
        block = new_messages_part(call)
        contents = [c for c in tokens_by_content if c and c in block]
        assert sum(tokens_by_content[c] for c in contents) <= 400
        seen += contents
        previous = call[0][-1].content.split("New messages:", 1)[0]
        assert (f"Running summary {k - 1}." in previous) if k else "(none yet)" in previous
    folded = Message.objects.filter(conversation=conv, seq__gt=1, seq__lte=summary.through_seq)
    assert sorted(seen) == sorted(folded.values_list("content", flat=True))  # each message exactly once


# -- run after commit, one at a time, never backwards ------------------------------------


def test_compact_if_needed_enqueues_on_commit_only(django_capture_on_commit_callbacks, scripted) -> None:  # type: ignore[no-untyped-def]
    conv, history = conversation_with_turns(10)
    scripted.add("The user asked ten questions.")
    compactor = compactor_for(conv, history, ScriptedChatModel([]))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert compactor.compact_if_needed() is True
    assert len(callbacks) == 1
    assert not Summary.objects.filter(conversation=conv).exists()  # nothing before commit
    assert compactor.llm.calls == [] and scripted.calls == []  # the request path never calls the LLM
    callbacks[0]()  # the commit happens: the task runs (eagerly here)
    summary = Summary.objects.get(conversation=conv)
    assert summary.text == "The user asked ten questions."
    conv.refresh_from_db()
    assert conv.summary == summary
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert compactor.compact_if_needed() is False
    assert callbacks == []


def test_running_lease_blocks_a_second_compaction_and_a_stale_one_is_taken_over() -> None:
    conv, history = conversation_with_turns(5)
    llm = ScriptedChatModel(["Earlier questions."])
    compactor = compactor_for(conv, history, llm)
    other = uuid.uuid4()
    Conversation.objects.filter(pk=conv.pk).update(
        compaction_lease=other,
        compaction_started_at=timezone.now(),
        compaction_lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    run = compactor.run()
    assert run.status == "busy" and 55 < run.retry_after <= 60
    assert llm.calls == [] and not Summary.objects.exists()
    # The worker holding it died: its lease expired and is taken over.
    Conversation.objects.filter(pk=conv.pk).update(
        compaction_lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert compactor.compact() is not None
    conv.refresh_from_db()
    assert conv.compaction_started_at is None and conv.compaction_lease is None  # released after the work


def test_lease_is_released_when_the_llm_fails() -> None:
    conv, history = conversation_with_turns(5)
    compactor = compactor_for(
        conv, history, ScriptedChatModel([TransientLLMError("503"), "Earlier questions."])
    )
    with pytest.raises(TransientLLMError):
        compactor.compact()
    assert Conversation.objects.get(pk=conv.pk).compaction_started_at is None
    assert compactor.compact() is not None  # the next attempt is not locked out


def test_boundary_never_moves_backwards_when_a_newer_compaction_wins(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.compaction import LeaseKeeper

    # A's lease is expired from the start (0 seconds) and nobody renews it: a renewal landing
    # between B's reading of the clock and B's claim would rightly keep B out ("busy"), which
    # the loaded CI machine hit now and then. Losing a renewed lease is tested elsewhere.
    monkeypatch.setattr(LeaseKeeper, "_run", lambda self: None)
    conv, history = conversation_with_turns(4)
    counter = {"b": None}

    def meanwhile(messages):  # type: ignore[no-untyped-def]
        # While A's model works, two more turns arrive and compaction B (which took over the
        # lease) stores a summary reaching further than A's target.
        history.add_messages(turn(10) + turn(11))
        other = compactor_for(conv, history, ScriptedChatModel(["B: turns 0 to 10."]))
        counter["b"] = other.compact()
        return "A: turns 0 to 2."

    with override_settings(AGENTMEMORY={"COMPACTION_LEASE_SECONDS": 0}):
        a = compactor_for(conv, history, ScriptedChatModel([meanwhile]))
        result = a.compact()
    b = counter["b"]
    assert b is not None and b.through_seq == newest_human_seq(conv) - 1
    assert result == b  # A returns the newer summary instead of storing its own
    conv.refresh_from_db()
    assert conv.summary == b
    assert list(Summary.objects.filter(conversation=conv).values_list("text", flat=True)) == [
        "B: turns 0 to 10."
    ]


def test_a_compactor_keeping_more_turns_never_moves_the_boundary_back() -> None:
    conv, history = conversation_with_turns(6)
    first = compactor_for(conv, history, ScriptedChatModel(["Turns 0 to 4."])).compact()
    cautious = compactor_for(
        conv, history, ScriptedChatModel(["should not be asked"]), keep_recent_human_turns=3
    )
    assert cautious.compact() is None and cautious.llm.calls == []
    conv.refresh_from_db()
    assert conv.summary == first and Summary.objects.filter(conversation=conv).count() == 1


def test_running_compaction_twice_is_idempotent() -> None:
    conv, history = conversation_with_turns(6)
    llm = ScriptedChatModel(["Turns 0 to 4."])
    compactor = compactor_for(conv, history, llm)
    first = compactor.compact()
    assert compactor.compact() in (None, first)
    assert len(llm.calls) == 1 and Summary.objects.filter(conversation=conv).count() == 1


# -- failure is safe --------------------------------------------------------------------------


INVALID = [
    "",
    "   \n\t ",
    "Previous summary:\n(none yet)\n\nNew messages:\nUser: hi",
    "The user said \ud800",
    "The user said \x00",
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_summaries_are_never_stored(text: str) -> None:
    conv, history = conversation_with_turns(4)
    good = compactor_for(conv, history, ScriptedChatModel(["Turns 0 to 2."])).compact()
    history.add_messages(turn(7) + turn(8))
    before = message_rows(conv)
    compactor = compactor_for(conv, history, ScriptedChatModel([text]))
    with pytest.raises(InvalidSummaryError):
        compactor.compact()
    conv.refresh_from_db()
    assert conv.summary == good and Summary.objects.filter(conversation=conv).count() == 1
    assert conv.compaction_started_at is None
    assert message_rows(conv) == before
    # the conversation keeps working on the previous summary
    history.add_messages(turn(9))
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.summary_id == good.pk and window.history[-1].content.startswith("answer 9")
    assert window_violations(window) == []


def test_summary_still_too_long_after_condensing_is_never_stored() -> None:
    conv, history = conversation_with_turns(4)
    llm = ScriptedChatModel(["fact " * 300] * 3)
    compactor = compactor_for(conv, history, llm, max_summary_tokens=50)
    with pytest.raises(InvalidSummaryError, match="50"):
        compactor.compact()
    assert len(llm.calls) == 3  # one summary, two condensing attempts
    assert all("Shorten" in call[0][0].content for call in llm.calls[1:])
    assert not Summary.objects.filter(conversation=conv).exists()


def test_invalid_condensed_output_is_never_stored() -> None:
    conv, history = conversation_with_turns(4)
    compactor = compactor_for(
        conv, history, ScriptedChatModel(["fact " * 300, "  \n "]), max_summary_tokens=50
    )
    with pytest.raises(InvalidSummaryError):
        compactor.compact()
    assert not Summary.objects.filter(conversation=conv).exists()


def test_chunk_failure_stores_nothing_of_the_earlier_chunks() -> None:
    conv, history = conversation_with_turns(30, tool_every=0, words=20)
    llm = ScriptedChatModel(["Chunk one folded.", TransientLLMError("429 rate limited")])
    with override_settings(AGENTMEMORY={"SUMMARIZER_MAX_INPUT_TOKENS": 400}):
        compactor = compactor_for(conv, history, llm)
    with pytest.raises(TransientLLMError):
        compactor.compact()
    assert len(llm.calls) == 2
    assert not Summary.objects.filter(conversation=conv).exists()


# -- messages untouched, newest turn verbatim ---------------------------------------------


def test_compaction_never_edits_or_deletes_messages() -> None:
    conv, history = conversation_with_turns(12, tool_every=2)
    before = message_rows(conv)
    for k in range(3):
        compactor_for(
            conv, history, ScriptedChatModel([f"Summary {k}."]), keep_recent_human_turns=3 - k
        ).compact()
    assert Summary.objects.filter(conversation=conv).count() == 3
    assert message_rows(conv) == before


def test_newest_human_turn_is_never_folded() -> None:
    conv, history = conversation_with_turns(5, tool_every=0)
    # the newest turn is still in progress: a question and a tool exchange, no answer yet
    history.add_messages(turn(99, tool=True)[:-1])
    newest = newest_human_seq(conv)
    summary = compactor_for(conv, history, ScriptedChatModel(["Turns 0 to 4."])).compact()
    assert summary.through_seq == newest - 1
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.first_seq == newest and window.history[0].content.startswith("question 99")


def test_keep_recent_human_turns_keeps_that_many() -> None:
    conv, history = conversation_with_turns(6)
    llm = ScriptedChatModel(["Turns 0 to 2."])
    summary = compactor_for(conv, history, llm, keep_recent_human_turns=3).compact()
    humans = list(
        Message.objects.filter(conversation=conv, role=Role.HUMAN)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert summary.through_seq == humans[-3] - 1
    assert all(f"question {i}:" not in llm.calls[0][0][-1].content for i in (3, 4, 5))
    with pytest.raises(ValueError, match="newest question"):
        compactor_for(conv, history, llm, keep_recent_human_turns=0)


def test_a_single_human_turn_is_never_summarised() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system("prompt"), *turn(0, tool=True, words=400)])
    llm = ScriptedChatModel(["should not be asked"])
    compactor = compactor_for(conv, history, llm, summarize_every_n_human=1)
    assert compactor.compact() is None and llm.calls == []


# -- the offline compactor ----------------------------------------------------------------


def test_no_compaction_llm_without_configuration(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with override_settings(AGENTMEMORY={}):
        assert get_compaction_llm() is None  # build_compactor then uses the offline compactor


def _offline_run(monkeypatch, question) -> list[Summary]:  # type: ignore[no-untyped-def]
    """40 turns with ``question(i)`` texts, compacted through ``build_compactor`` (the task's
    path) with no LLM configured, every 4 human messages, summaries limited to 120 tokens."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with override_settings(AGENTMEMORY={"MAX_SUMMARY_TOKENS": 120, "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 4}):
        conv = ConversationFactory()
        history = PersistentChatHistory(conv)
        for i in range(40):
            messages = turn(i, tool=i % 3 == 0)
            messages[0] = ChatMessage.human(question(i))
            history.add_messages(messages)
            compactor = build_compactor(conv.pk)
            if compactor.needs_compaction():
                compactor.compact()
    return list(Summary.objects.filter(conversation=conv).order_by("through_seq"))


def test_offline_summaries_are_labelled_and_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def question(i: int) -> str:
        return (
            f"question {i}: could you tell me more about the weather in the city we discussed and when to go"
        )

    summaries = _offline_run(monkeypatch, question)
    assert len(summaries) >= 8
    counter = ApproximateTokenCounter()
    for summary in summaries:
        assert summary.text.startswith(OFFLINE_LABEL)
        assert summary.model == "offline-extractive"
        assert counter.count_text(summary.text) <= 120
    newest = summaries[-1].text
    # the newest folded turn is listed; older items fell off first to respect the limit, and
    # one line says how many and on which day
    assert max(int(n) for n in re.findall(r"(?:question|answer) (\d+):", newest)) == 38
    assert "answer 38:" in newest and "question 0:" not in newest
    assert newest.splitlines()[1].startswith("- Left out to fit: ")


def test_offline_summary_lines_are_cut_between_words() -> None:
    from agentmemory.llm.offline import extractive_items

    long = "I would like to hear about the label features of the shipping form " * 6
    (item,) = extractive_items([ChatMessage.human(long)])
    assert item.endswith("...") and len(item) <= 200
    kept = item.removeprefix("User said: ").removesuffix("...")
    assert long.startswith(kept) and long[len(kept)] == " "  # a whole word last
    # a text without spaces to cut at is cut at the length
    (item,) = extractive_items([ChatMessage.human("x" * 400)])
    assert item.endswith("x...")


def test_offline_summaries_stay_bounded_for_dense_text(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Chinese (and ids, digits) cost far more than half a token per character: the offline
    # summariser's 2-characters-per-token budget overshoots, every condensing attempt returns
    # the same text, and compaction fails for good on such conversations.
    def question(i: int) -> str:
        return f"问题{i}：我想把我的航班改到明天下午，因为会议推迟了，请帮我查一下有没有合适的航班和座位"  # noqa: RUF001

    summaries = _offline_run(monkeypatch, question)
    assert len(summaries) >= 8
    assert all(ApproximateTokenCounter().count_text(s.text) <= 120 for s in summaries)


@pytest.mark.parametrize("text", INVALID)
def test_structurally_invalid_text_is_never_a_summary(text: str) -> None:
    compactor = BaseMemoryCompactor(None, 1, None)
    with pytest.raises(InvalidSummaryError):
        compactor.validate(text)


@pytest.mark.parametrize(
    "text",
    [
        "Unfortunately, order 1042 was lost in transit; the assistant opened a claim.",
        "The user reported a 502 error when paying; the assistant retried the charge.",
        "Sorry-not-sorry is the shop's motto; the user wants a refund for order 7.",
        "Error: the user typed the wrong card number twice, then it worked.",
        "I'm sorry, the user said, was all the agent heard before the call dropped.",
        '{"customer": "Chen", "order": 7}',
        "None of the user's three orders has shipped yet.",
        "The user was unable to log in and asked for a reset; the assistant sent a link.",
        "[Offline extractive summary, not written by a language model]\n- User asked: hi",
    ],
)
def test_summaries_that_mention_failures_are_kept(text: str) -> None:
    assert BaseMemoryCompactor(None, 1, None).validate(text) == text
