"""The pinned system prompt is the leading run of system messages: every system message stored
while the conversation holds only system messages (new, or just cleared), in one batch or
over several appends, is pinned (``Conversation.pinned_seq`` through ``pinned_last_seq``).
Each is sent first, in stored order, in every window, counted once in the budget, never
trimmed while the newest human message fits and never folded by compaction; the summary
comes right after the run. A system message stored after any other message stays ordinary
history. OpenAI's ``[system, developer, user, ...]`` (a developer message is stored as a
system message) and a LangChain history opening with two ``SystemMessage``s are the cases
that showed it: the second message sat before the first human message, so no window sent it."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from django.contrib.admin.sites import AdminSite
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory import history as history_module
from agentmemory.admin.conversation import ConversationAdmin
from agentmemory.api.serializers import SYSTEM_PROMPT_PART, window_entries
from agentmemory.compaction import LLMMemoryCompactor, OfflineMemoryCompactor, run_compaction
from agentmemory.conf import get_token_counter
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.formats.openai import from_openai, to_openai_messages
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.transfer import InvalidConversationData, export_conversation, import_conversation
from tests.factories import ConversationFactory
from tests.helpers_migrations import migrate_to, migrate_to_latest
from tests.test_context_gap_cost import gap_counts, stored_gap  # noqa: F401  (a fixture)
from tests.test_pinned_prompt import APPEND_PATHS, store

SYSTEM = "You are helpful."
DEVELOPER = "Always answer in French."
OPENAI_HISTORY = [
    {"role": "system", "content": SYSTEM},
    {"role": "developer", "content": DEVELOPER},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Bonjour"},
    {"role": "user", "content": "How are you?"},
]


def add_turns(history: PersistentChatHistory, n: int, *, start: int = 0) -> None:
    for i in range(start, start + n):
        history.add_message(ChatMessage.human(f"question {i} " + "about the sea " * 6))
        history.add_message(ChatMessage.ai(f"answer {i} " + "with the tide " * 6))


def run_conversation(*prompts: str, turns: int = 0) -> tuple[Conversation, PersistentChatHistory]:
    """A new conversation opening with ``prompts`` (one batch), then ``turns`` turns."""
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system(p) for p in prompts])
    add_turns(history, turns)
    conv.refresh_from_db()
    return conv, history


def run_tokens(conv: Conversation) -> int:
    return sum(
        Message.objects.filter(conversation=conv, seq__lte=conv.pinned_through).values_list(
            "token_count", flat=True
        )
    )


def check_run_first(conv: Conversation, window: Any, texts: list[str]) -> None:
    """``texts`` open the window, in stored order, at the pinned seqs; nothing else is
    system prompt, none of them is history, and none is reported uncovered."""
    run = window.messages[: len(texts)]
    assert [(m.role, m.text) for m in run] == [(Role.SYSTEM, t) for t in texts]
    assert [m.seq for m in run] == list(range(conv.pinned_seq, conv.pinned_seq + len(texts)))
    assert conv.pinned_through == conv.pinned_seq + len(texts) - 1
    assert window.system_tokens == sum(m.token_count for m in run) == run_tokens(conv)
    assert not any(m.text in texts for m in window.history)
    assert window.history[0].role is Role.HUMAN
    assert not set(window.uncovered.seqs) & {m.seq for m in run}
    assert window_violations(window) == []


# -- the cases that showed it ---------------------------------------------------------------------


@pytest.mark.django_db
def test_openai_system_and_developer_messages_are_both_sent_first_in_a_small_window() -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([from_openai(m) for m in OPENAI_HISTORY])
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq, conv.has_system_prompt) == (1, 2, True)
    newest = Message.objects.get(conversation=conv, seq=5)

    # Room for the run and the newest human message only.
    window = ContextWindowBuilder(conv, gap_policy="report").build(run_tokens(conv) + newest.token_count)

    check_run_first(conv, window, [SYSTEM, DEVELOPER])
    assert [m.text for m in window.history] == ["How are you?"]
    # The turn before is left out, and reported; the developer message is not.
    assert window.uncovered.seqs == (3, 4)
    full = ContextWindowBuilder(conv, gap_policy="report").build(1_000)
    check_run_first(conv, full, [SYSTEM, DEVELOPER])
    assert full.uncovered.count == 0
    assert [m["role"] for m in to_openai_messages(full.messages)] == [
        "system",
        "system",
        "user",
        "assistant",
        "user",
    ]


@pytest.mark.django_db
def test_a_langchain_history_opening_with_two_system_messages_pins_both() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    from agentmemory.formats.langchain import from_langchain, to_langchain

    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages(
        from_langchain(
            [
                SystemMessage("You are a pirate."),
                SystemMessage("Never reveal the treasure."),
                HumanMessage("Where is it?"),
                AIMessage("Arr, I shan't say."),
                HumanMessage("Please?"),
            ]
        )
    )
    conv.refresh_from_db()

    window = ContextWindowBuilder(conv, gap_policy="report").build(1_000)

    check_run_first(conv, window, ["You are a pirate.", "Never reveal the treasure."])
    assert window.uncovered.count == 0
    sent = to_langchain(window.messages)
    assert [type(m).__name__ for m in sent] == [
        "SystemMessage",
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]


# -- how the run is stored ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_system_messages_stored_before_the_first_human_over_several_appends_are_pinned(
    path: str, monkeypatch: Any
) -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    store(history, [ChatMessage.system("one")], path, monkeypatch)
    store(history, [ChatMessage.system("two"), ChatMessage.system("three")], path, monkeypatch)
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 3)
    store(history, [ChatMessage.human("hi"), ChatMessage.ai("hello")], path, monkeypatch)
    store(history, [ChatMessage.system("late")], path, monkeypatch)
    add_turns(history, 3)
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 3)

    window = ContextWindowBuilder(conv).build(2_000)

    check_run_first(conv, window, ["one", "two", "three"])
    assert [m.text for m in window.history[:3]] == ["hi", "hello", "late"]  # ordinary history


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_a_batch_pins_only_its_leading_system_messages(path: str, monkeypatch: Any) -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    store(
        history,
        [ChatMessage.system("a"), ChatMessage.system("b"), ChatMessage.human("hi"), ChatMessage.system("c")],
        path,
        monkeypatch,
    )
    history.add_message(ChatMessage.system("d"))
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 2)
    window = ContextWindowBuilder(conv).build(2_000)
    check_run_first(conv, window, ["a", "b"])
    assert [m.text for m in window.history] == ["hi", "c", "d"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["one_by_one", "batch", "locked"])
def test_a_system_message_after_a_human_message_stays_ordinary_history(path: str, monkeypatch: Any) -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    store(history, [ChatMessage.human("hi"), ChatMessage.system("note")], path, monkeypatch)
    store(history, [ChatMessage.system("another note")], path, monkeypatch)
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq, conv.has_system_prompt) == (None, None, False)
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.system_tokens == 0 and window.history == window.messages


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_clear_then_a_new_run_is_pinned(path: str, monkeypatch: Any) -> None:
    conv, history = run_conversation("old one", "old two", turns=3)
    history.clear()
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.pinned_last_seq, conv.has_system_prompt) == (None, None, False)
    last = conv.last_seq

    store(history, [ChatMessage.system("new one"), ChatMessage.system("new two")], path, monkeypatch)
    store(history, [ChatMessage.system("new three")], path, monkeypatch)
    add_turns(history, 2)
    conv.refresh_from_db()

    assert (conv.pinned_seq, conv.pinned_last_seq) == (last + 1, last + 3)
    window = ContextWindowBuilder(conv).build(2_000)
    check_run_first(conv, window, ["new one", "new two", "new three"])
    assert not any((m.text or "").startswith("old") for m in window.messages)


def leading_run(conv: Conversation) -> tuple[int | None, int | None]:
    """``(first, last)`` seq of the system messages that open the stored messages."""
    first = last = None
    for seq, role in Message.objects.filter(conversation=conv).order_by("seq").values_list("seq", "role"):
        if role != Role.SYSTEM:
            break
        first = seq if first is None else first
        last = seq
    return first, last


def _append_at_random(
    conversation_id: int, worker: int, barrier: threading.Barrier, errors: list[str]
) -> None:
    try:
        pick = random.Random(worker)
        history = PersistentChatHistory(conversation_id)
        barrier.wait()
        for i in range(5):
            tag = f"{worker}.{i}"
            kind = pick.choice(["system", "system", "human", "two systems", "system, human", "tools"])
            if kind == "system":
                history.add_message(ChatMessage.system(f"system {tag}"))
            elif kind == "human":
                history.add_message(ChatMessage.human(f"human {tag}"))
            elif kind == "two systems":
                history.add_messages([ChatMessage.system(f"a {tag}"), ChatMessage.system(f"b {tag}")])
            elif kind == "system, human":
                history.add_messages([ChatMessage.system(f"a {tag}"), ChatMessage.human(f"b {tag}")])
            else:
                call = ToolCall(id=f"c{tag}", name="lookup", arguments={})
                history.add_messages(
                    [
                        ChatMessage.system(f"system {tag}"),
                        ChatMessage.ai(None, [call]),
                        ChatMessage.tool("found", tool_call_id=call.id, name="lookup"),
                    ]
                )
    except Exception as exc:  # reported by the test
        errors.append(repr(exc))
    finally:
        connection.close()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["statements", "locked"])
@pytest.mark.parametrize("round_", range(3))
def test_concurrent_appends_pin_exactly_the_leading_system_messages(
    path: str, round_: int, monkeypatch: Any
) -> None:
    """Threads appending system messages, human messages and mixed batches to one new
    conversation at once: whichever commits first, the run is the system messages that open
    it, in seq order, and never a message after the first other one."""
    if path == "locked":
        monkeypatch.setattr(history_module, "_append_one_postgresql", lambda *a, **k: None)
        monkeypatch.setattr(history_module, "_append_postgresql", lambda *a, **k: None)
    conv = ConversationFactory()
    errors: list[str] = []
    barrier = threading.Barrier(6)
    threads = [
        threading.Thread(target=_append_at_random, args=(conv.pk, round_ * 10 + w, barrier, errors))
        for w in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    conv.refresh_from_db()
    first, last = leading_run(conv)
    assert (conv.pinned_seq, conv.pinned_through or None, conv.has_system_prompt) == (
        first,
        last,
        first is not None,
    )


# -- the budget -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_run_is_never_trimmed_while_the_newest_human_message_fits() -> None:
    conv, _ = run_conversation("prompt one " * 20, "prompt two " * 20, turns=8)
    newest = Message.objects.filter(conversation=conv, role=Role.HUMAN).order_by("-seq").first()
    assert newest is not None
    # the newest turn's answer is after it: the window starts on the newest human message
    needed = (
        run_tokens(conv)
        + newest.token_count
        + Message.objects.get(conversation=conv, seq=newest.seq + 1).token_count
    )

    window = ContextWindowBuilder(conv).build(needed)

    check_run_first(conv, window, ["prompt one " * 20, "prompt two " * 20])
    assert window.history[0].seq == newest.seq and window.total_tokens <= needed


@pytest.mark.django_db
def test_the_run_and_the_newest_human_message_that_do_not_fit_raise_the_budget_error() -> None:
    conv, history = run_conversation("prompt one " * 20, "prompt two " * 20)
    history.add_message(ChatMessage.human("a question " * 10))
    conv.refresh_from_db()
    run = run_tokens(conv)
    human = Message.objects.get(conversation=conv, seq=3)

    with pytest.raises(ContextBudgetExceeded) as too_small:
        ContextWindowBuilder(conv).build(run + human.token_count - 1)
    assert too_small.value.seq == human.seq

    # the run alone over the budget: the error a single pinned prompt gives, naming its first seq
    with pytest.raises(ContextBudgetExceeded) as fixed_part:
        ContextWindowBuilder(conv).build(run - 1)
    assert fixed_part.value.seq == conv.pinned_seq

    assert ContextWindowBuilder(conv).build(run + human.token_count).history_tokens == human.token_count


@pytest.mark.django_db
def test_each_pinned_message_is_counted_once_and_reported_at_its_own_size() -> None:
    conv, _ = run_conversation("short", "a much longer second prompt " * 5, turns=2)
    window = ContextWindowBuilder(conv).build(2_000)
    entries = [e for e in window_entries(window, get_token_counter()) if e[0] == SYSTEM_PROMPT_PART]
    stored = dict(Message.objects.filter(conversation=conv, seq__lte=2).values_list("seq", "token_count"))
    assert [(m.seq, tokens) for _, m, tokens in entries] == sorted(stored.items())
    assert sum(tokens for *_, tokens in entries) == window.system_tokens
    assert window.total_tokens == window.system_tokens + window.history_tokens


@pytest.mark.django_db
def test_an_agent_prompt_replaces_the_whole_stored_run() -> None:
    conv, _ = run_conversation("one", "two", turns=2)
    window = ContextWindowBuilder(conv, system_prompt="You are a parrot.", gap_policy="report").build(2_000)
    assert [m.text for m in window.messages[:2]] == [
        "You are a parrot.",
        "question 0 " + "about the sea " * 6,
    ]
    assert window.uncovered.count == 0 and window_violations(window) == []


# -- compaction -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_compaction_never_folds_the_run_and_the_summary_comes_right_after_it() -> None:
    conv, history = run_conversation("Captain Pirate speaks.", "In rhyme, always.", turns=14)
    llm = ScriptedChatModel([f"They sailed, part {i}." for i in range(40)])
    compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, max_input_tokens=300)
    assert compactor._pinned_tokens(conv) == run_tokens(conv)

    summary = compactor.compact()

    assert summary is not None and summary.first_seq == conv.pinned_last_seq + 1 == 3
    sent = " ".join(m.text or "" for messages, _ in llm.calls for m in messages)
    assert "Captain Pirate" not in sent and "In rhyme" not in sent and "question 0 " in sent
    add_turns(history, 2, start=14)
    conv.refresh_from_db()
    for budget in (250, 2_000):
        window = ContextWindowBuilder(conv).build(budget)
        check_run_first(conv, window, ["Captain Pirate speaks.", "In rhyme, always."])
        assert window.messages[2].metadata.get("summary_id") == summary.pk


@pytest.mark.django_db
def test_the_offline_compactor_leaves_the_run_out_of_the_summary() -> None:
    conv, _ = run_conversation("one", "two", "three", turns=12)
    run_compaction(conv.pk, compactor_class=OfflineMemoryCompactor)
    conv.refresh_from_db()
    assert conv.summary is not None and conv.summary.first_seq == 4
    window = ContextWindowBuilder(conv, gap_policy="report").build(300)
    check_run_first(conv, window, ["one", "two", "three"])
    assert window.messages[3].metadata.get("summary_id") == conv.summary_id


@pytest.mark.django_db
def test_what_a_window_leaves_out_counts_the_run_as_sent(gap_counts: list[tuple[int, int]]) -> None:  # noqa: F811
    conv, history = run_conversation("one", "two", turns=30)
    window = ContextWindowBuilder(conv, gap_policy="report").build(150)
    check_run_first(conv, window, ["one", "two"])
    assert window.uncovered.count == window.first_seq - conv.pinned_last_seq - 1 > 0
    assert window.uncovered == stored_gap(conv.pk, window)

    LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Sea stories."] * 40), history, max_input_tokens=300
    ).compact()
    add_turns(history, 10, start=30)
    conv.refresh_from_db()
    window = ContextWindowBuilder(conv, gap_policy="report").build(150)
    check_run_first(conv, window, ["one", "two"])
    assert window.uncovered.count > 0 and window.uncovered == stored_gap(conv.pk, window)
    assert gap_counts == []  # worked out from the counters, the rows left out were not read


# -- query counts ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_costs_the_queries_of_a_single_pinned_prompt() -> None:
    single, single_history = run_conversation("one", turns=20)
    run, run_history = run_conversation("one", "two", "three", turns=20)

    counts = []
    for conv in (single, run):
        for policy in ("ignore", "report"):
            with CaptureQueriesContext(connection) as queries:
                ContextWindowBuilder(conv, gap_policy=policy).build(150)
            counts.append(len(queries))
    # the window (conversation, summary, pinned run and tail in one statement), with the
    # index lookups of what it leaves out in the same statement
    assert counts == [1, 1, 1, 1]
    appends = []
    for history in (single_history, run_history):
        for messages in ([ChatMessage.human("one more")], [ChatMessage.system("x"), ChatMessage.human("y")]):
            with CaptureQueriesContext(connection) as queries:
                history.add_messages(messages)
            appends.append(len(queries))
    assert appends[:2] == appends[2:]
    fresh = [ConversationFactory(), ConversationFactory()]
    first = []
    for conv, messages in zip(
        fresh, ([ChatMessage.system("a")], [ChatMessage.system("a"), ChatMessage.system("b")]), strict=True
    ):
        with CaptureQueriesContext(connection) as queries:
            PersistentChatHistory(conv).add_messages(messages)
        first.append(len(queries))
    assert first[0] == first[1]


# -- export and import ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_export_and_import_keep_the_run_exactly() -> None:
    conv, history = run_conversation("old", turns=2)
    history.clear()
    history.add_messages([ChatMessage.system("one"), ChatMessage.system("two")])
    add_turns(history, 6)
    conv.refresh_from_db()
    document = export_conversation(conv)
    assert document["conversation"]["pinned_last_seq"] == conv.pinned_last_seq == conv.pinned_seq + 1

    copy = import_conversation(document, new_uuid=True)

    assert (copy.pinned_seq, copy.pinned_last_seq, copy.has_system_prompt) == (
        conv.pinned_seq,
        conv.pinned_last_seq,
        True,
    )
    check_run_first(copy, ContextWindowBuilder(copy).build(2_000), ["one", "two"])
    again = export_conversation(copy)["conversation"]
    assert {k: again[k] for k in ("pinned_seq", "pinned_last_seq", "has_system_prompt")} == {
        "pinned_seq": conv.pinned_seq,
        "pinned_last_seq": conv.pinned_last_seq,
        "has_system_prompt": True,
    }


@pytest.mark.django_db
def test_an_imported_run_of_only_system_messages_goes_on_growing() -> None:
    conv, _ = run_conversation("one", "two")
    copy = import_conversation(export_conversation(conv), new_uuid=True)
    PersistentChatHistory(copy).add_messages([ChatMessage.system("three"), ChatMessage.human("hi")])
    copy.refresh_from_db()
    assert (copy.pinned_seq, copy.pinned_last_seq) == (1, 3)


@pytest.mark.django_db
def test_a_document_from_before_pinned_last_seq_gets_the_run_its_messages_hold() -> None:
    conv, _ = run_conversation("one", "two", turns=3)
    document = export_conversation(conv)
    del document["conversation"]["pinned_last_seq"]  # what the previous version wrote

    copy = import_conversation(document, new_uuid=True)

    assert (copy.pinned_seq, copy.pinned_last_seq) == (1, 2)
    check_run_first(copy, ContextWindowBuilder(copy).build(2_000), ["one", "two"])


@pytest.mark.django_db
def test_an_older_document_whose_summary_folded_a_leading_system_message_keeps_it_folded() -> None:
    """Before the run was pinned, a summary could fold the second leading system message:
    the import pins the run only up to the summary's span, so nothing is sent twice."""
    conv, _ = run_conversation("one", "two", turns=12)
    run_compaction(conv.pk, compactor_class=OfflineMemoryCompactor)
    document = export_conversation(conv)
    del document["conversation"]["pinned_last_seq"]
    for summary in document["summaries"]:
        summary["first_seq"] = 2  # as the old rule made it: seq 2 was ordinary history
    copy = import_conversation(document, new_uuid=True)
    assert (copy.pinned_seq, copy.pinned_last_seq) == (1, 1)
    window = ContextWindowBuilder(copy).build(2_000)
    assert [m.text for m in window.messages].count("two") == 0


@pytest.mark.django_db
@pytest.mark.parametrize("value", [1, 3])
def test_a_document_whose_run_disagrees_with_its_messages_is_refused(value: int) -> None:
    conv, _ = run_conversation("one", "two", turns=1)
    document = export_conversation(conv)
    document["conversation"]["pinned_last_seq"] = value

    with pytest.raises(InvalidConversationData) as caught:
        import_conversation(document, new_uuid=True)

    assert caught.value.path == "conversation.pinned_last_seq"
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_a_document_whose_run_reaches_into_a_summary_is_refused() -> None:
    """A hole after the run may be pinned, but not one inside a summary's span: the summary
    would count what the run counts."""
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system("one"), ChatMessage.ai("Welcome aboard! " * 3)])
    add_turns(history, 12)
    run_compaction(conv.pk, compactor_class=OfflineMemoryCompactor)
    document = export_conversation(conv)
    assert document["summaries"][0]["first_seq"] == 2  # the greeting is folded
    # The greeting taken out (a hole at seq 2) and the run stretched over it.
    greeting = next(m for m in document["messages"] if m["seq"] == 2)
    document["messages"].remove(greeting)
    document["conversation"]["message_count"] -= 1
    document["conversation"]["stored_tokens"] -= greeting["token_count"]
    document["summaries"][0]["tokens_covered"] -= greeting["token_count"]
    assert import_conversation(document, new_uuid=True).pinned_last_seq == 1
    document["conversation"]["pinned_last_seq"] = 2

    with pytest.raises(InvalidConversationData) as caught:
        import_conversation(document, new_uuid=True)

    assert caught.value.path == "conversation.pinned_last_seq"
    assert Conversation.objects.count() == 2


# -- the admin ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_shows_the_pinned_run() -> None:
    admin = ConversationAdmin(Conversation, AdminSite())
    conv, _ = run_conversation("one", "two", turns=1)
    assert "seq 1 to 2" in admin.pinned_prompt(conv)
    single, _ = run_conversation("one", turns=1)
    assert "seq 1)" in admin.pinned_prompt(single)


# -- the migration --------------------------------------------------------------------------------

BEFORE = [("agentmemory", "0019_conversation_updates_stay_hot")]
AFTER = [("agentmemory", "0020_pinned_run")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_pins_the_leading_run_of_existing_conversations() -> None:
    apps = migrate_to(BEFORE)
    try:
        Conversation_ = apps.get_model("agentmemory", "Conversation")
        Message_ = apps.get_model("agentmemory", "Message")
        Summary_ = apps.get_model("agentmemory", "Summary")

        def conversation(*roles: str, last_seq: int | None = None):  # type: ignore[no-untyped-def]
            first = (last_seq or len(roles)) - len(roles) + 1
            pinned = roles[0] == "system" if roles else False
            conv = Conversation_.objects.create(
                last_seq=last_seq or len(roles),
                message_count=len(roles),
                has_system_prompt=pinned,
                pinned_seq=first if pinned else None,
            )
            for seq, role in enumerate(roles, start=first):
                Message_.objects.create(
                    conversation=conv, seq=seq, role=role, content="x", token_count=1, token_counter="len"
                )
            return conv

        developer = conversation("system", "system", "human", "ai")
        single = conversation("system", "human", "system")
        only_system = conversation("system", "system")
        cleared = conversation("system", "system", "system", "human", last_seq=9)
        plain = conversation("human", "system", "ai")
        empty = Conversation_.objects.create()
        folded = conversation("system", "system", "human", "ai", "human")
        # the old rule let a summary fold the second leading system message
        Summary_.objects.create(
            conversation=folded,
            text="s",
            first_seq=2,
            through_seq=4,
            human_messages_covered=1,
            human_message_count=2,
            tokens_covered=3,
            token_count=1,
            token_counter="len",
        )

        apps = migrate_to(AFTER)
        Conversation_ = apps.get_model("agentmemory", "Conversation")
        rows = dict(Conversation_.objects.values_list("pk", "pinned_last_seq"))
        assert rows == {
            developer.pk: 2,
            single.pk: 1,
            only_system.pk: 2,
            cleared.pk: 8,
            plain.pk: None,
            empty.pk: None,
            folded.pk: 1,
        }
    finally:
        migrate_to_latest()


# -- the replay and the window checks -------------------------------------------------------------


def _developer_transcript() -> Any:
    """OpenAI's ``[system, developer, user]`` opening, answered, as a replay transcript."""
    from agentmemory.formats.transcripts import Transcript

    return Transcript(
        title="developer message",
        agent_key="demo",
        messages=[from_openai(m) for m in OPENAI_HISTORY] + [ChatMessage.ai("Bien, merci.")],
        metadata={},
    )


@pytest.mark.django_db
def test_a_replayed_transcript_opening_with_two_system_messages_leaves_nothing_out() -> None:
    from agentmemory.replay import replay_transcripts

    transcript = _developer_transcript()
    report = replay_transcripts([transcript], max_tokens=1_000)
    assert report.violation_count == 0 and report.left_out_messages == 0
    conv = Conversation.objects.get(pk=report.conversation_ids[0])
    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 2)


@pytest.mark.django_db
def test_a_transcript_replayed_through_the_agent_with_a_developer_message_leaves_nothing_out() -> None:
    """Through the agent, the transcript's first system message is the agent's prompt and the
    developer message is stored into the empty conversation: pinned, replaced by the agent's
    prompt like any stored run, so neither the window nor the replay counts it left out."""
    from agentmemory.replay import replay_through_agent

    transcript = _developer_transcript()
    report = replay_through_agent([transcript], max_tokens=1_000)
    assert report.violation_count == 0 and report.left_out_messages == 0
    conv = Conversation.objects.get(pk=report.conversation_ids[0])
    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 1)
    assert Message.objects.get(conversation=conv, seq=1).content == DEVELOPER


def test_the_window_checks_allow_a_pinned_run_and_refuse_a_second_summary() -> None:
    from agentmemory.context import ContextWindow

    run = [ChatMessage(role=Role.SYSTEM, content=t, seq=i) for i, t in enumerate(["a", "b"], start=1)]
    summary = ChatMessage.system("summary", metadata={"summary_id": 1})
    human = ChatMessage(role=Role.HUMAN, content="hi", seq=9)
    assert window_violations(ContextWindow(messages=[*run, summary, human], max_tokens=100)) == []
    twice = ContextWindow(messages=[*run, summary, summary, human], max_tokens=100)
    assert any(p.startswith("C4") for p in window_violations(twice))
    out_of_order = ContextWindow(messages=[run[1], run[0], human], max_tokens=100)
    assert any(p.startswith("C4") for p in window_violations(out_of_order))


# -- rows written by the previous release ---------------------------------------------------------
# During a deployment, processes of the previous release go on appending after migration 0020
# ran: they set ``pinned_seq`` and leave ``pinned_last_seq`` as it was. The model reads such a
# row as pinning ``pinned_seq`` alone (``Conversation.pinned_through``); appends and exports
# read it the same way.


def previous_release_row(conv: Conversation, **values: Any) -> None:
    Conversation.objects.filter(pk=conv.pk).update(**values)
    conv.refresh_from_db()


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_a_prompt_pinned_by_the_previous_release_goes_on_growing(path: str, monkeypatch: Any) -> None:
    conv, history = run_conversation(SYSTEM)
    previous_release_row(conv, pinned_last_seq=None)  # as the previous release stored it
    assert conv.pinned_through == 1

    store(history, [ChatMessage.system(DEVELOPER)], path, monkeypatch)
    store(history, [ChatMessage.human("Hi"), ChatMessage.ai("Bonjour")], path, monkeypatch)
    conv.refresh_from_db()

    assert (conv.pinned_seq, conv.pinned_last_seq) == (1, 2)
    check_run_first(conv, ContextWindowBuilder(conv).build(2_000), [SYSTEM, DEVELOPER])


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_a_conversation_cleared_by_the_previous_release_exports_and_imports(
    path: str, monkeypatch: Any
) -> None:
    conv, history = run_conversation("one", "two")
    # The previous release's ``clear()``: ``pinned_seq`` reset, ``pinned_last_seq`` left as it was.
    Message.objects.filter(conversation=conv).delete()
    previous_release_row(conv, message_count=0, stored_tokens=0, has_system_prompt=False, pinned_seq=None)
    assert conv.pinned_last_seq == conv.last_seq == 2

    store(history, [ChatMessage.human("hi"), ChatMessage.ai("hello")], path, monkeypatch)
    store(history, [ChatMessage.system("late")], path, monkeypatch)
    conv.refresh_from_db()
    assert conv.pinned_seq is None and conv.pinned_through == 0
    document = export_conversation(conv)
    assert document["conversation"]["pinned_last_seq"] is None

    copy = import_conversation(document, new_uuid=True)

    assert (copy.pinned_seq, copy.pinned_last_seq, copy.has_system_prompt) == (None, None, False)
    window = ContextWindowBuilder(copy).build(2_000)
    assert window.system_tokens == 0 and [m.text for m in window.history] == ["hi", "hello", "late"]
