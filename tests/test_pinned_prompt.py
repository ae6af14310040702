"""The pinned system prompt is the first message stored while a conversation holds none (new,
or just cleared), when it is a system message, whatever its seq: ``history.clear()`` then
``history.add_message(ChatMessage.system(...))`` pins the prompt at seq N+1, on every append
path, for every window and against compaction; a later system message is ordinary history.
Existing conversations get ``pinned_seq = 1`` from the migration, and export/import keeps
the pin."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory import history as history_module
from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation
from agentmemory.transfer import InvalidConversationData, export_conversation, import_conversation
from tests.factories import ConversationFactory, conversation_with_turns
from tests.helpers_migrations import migrate_to, migrate_to_latest
from tests.test_context_gap_cost import gap_counts, stored_gap  # noqa: F401  (a fixture)

PROMPT = "You are Captain Pirate, and you answer in rhyme."

#: how the first messages after ``clear()`` are stored: one statement per message, one
#: statement for the batch (plain, or with a tool exchange: the statement that locks the row),
#: or the locked ORM path (the one SQLite always takes)
APPEND_PATHS = ["one_by_one", "batch", "batch_with_tools", "locked"]


def first_messages(path: str) -> list[ChatMessage]:
    opening = [ChatMessage.system(PROMPT), ChatMessage.human("ahoy, who are you?")]
    if path == "batch_with_tools":
        call = ToolCall(id="c1", name="lookup", arguments={"who": "me"})
        return [
            *opening,
            ChatMessage.ai(None, [call]),
            ChatMessage.tool("a pirate", tool_call_id="c1", name="lookup"),
            ChatMessage.ai("a pirate am I"),
        ]
    return [*opening, ChatMessage.ai("a pirate am I")]


def store(history: PersistentChatHistory, messages: list[ChatMessage], path: str, monkeypatch: Any) -> None:
    if path == "locked":
        # PostgreSQL's single statements step aside for the row-locked ORM path.
        monkeypatch.setattr(history_module, "_append_one_postgresql", lambda *a, **k: None)
        monkeypatch.setattr(history_module, "_append_postgresql", lambda *a, **k: None)
    if path == "one_by_one":
        for message in messages:
            history.add_message(message)
    else:
        history.add_messages(messages)


def add_turns(history: PersistentChatHistory, n: int, *, start: int = 0) -> None:
    for i in range(start, start + n):
        history.add_message(ChatMessage.human(f"question {i} " + "about the sea " * 6))
        history.add_message(ChatMessage.ai(f"answer {i} " + "with the tide " * 6))


def cleared_conversation() -> tuple[Conversation, PersistentChatHistory, int]:
    """A conversation with a pinned prompt at seq 1 and turns, then cleared; and its last seq."""
    conv, history = conversation_with_turns(3)
    assert conv.pinned_seq == 1 and conv.last_seq > 1
    history.clear()
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.has_system_prompt, conv.message_count) == (None, False, 0)
    return conv, history, conv.last_seq


def check_window_starts_with_prompt(conv: Conversation, window: Any) -> None:
    first = window.messages[0]
    assert (first.role, first.text, first.seq) == (Role.SYSTEM, PROMPT, conv.pinned_seq)
    assert window.system_tokens == first.token_count > 0
    assert all(m.text != PROMPT for m in window.history)
    assert window.history[0].role is Role.HUMAN
    assert conv.pinned_seq not in window.uncovered.seqs


@pytest.mark.django_db
@pytest.mark.parametrize("path", APPEND_PATHS)
def test_a_system_prompt_stored_after_clear_is_pinned_in_every_window(path: str, monkeypatch: Any) -> None:
    conv, history, last_before = cleared_conversation()

    store(history, first_messages(path), path, monkeypatch)
    add_turns(history, 12)

    conv.refresh_from_db()
    assert conv.pinned_seq == last_before + 1 and conv.has_system_prompt
    for budget in (120, 300, 2_000):
        window = ContextWindowBuilder(conv).build(budget)
        check_window_starts_with_prompt(conv, window)
    # An agent's own prompt replaces the stored one: it is neither sent nor history.
    window = ContextWindowBuilder(conv, system_prompt="You are a parrot.").build(2_000)
    assert window.messages[0].text == "You are a parrot." and window.messages[0].seq is None
    assert all(m.seq != conv.pinned_seq for m in window.messages)


@pytest.mark.django_db
def test_compaction_never_folds_the_prompt_pinned_after_clear() -> None:
    conv, history, last_before = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 14)
    conv.refresh_from_db()
    pinned = conv.pinned_seq
    assert pinned == last_before + 1
    llm = ScriptedChatModel([f"They sailed, part {i}." for i in range(40)])

    summary = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, max_input_tokens=300).compact()

    assert summary is not None and summary.first_seq == pinned + 1 < summary.through_seq
    sent = " ".join(m.text or "" for messages, _ in llm.calls for m in messages)
    assert llm.calls and "Captain Pirate" not in sent
    assert "question 0 " in sent  # the first turn after the prompt is folded
    add_turns(history, 2, start=14)
    conv.refresh_from_db()
    for budget in (200, 2_000):
        window = ContextWindowBuilder(conv).build(budget)
        check_window_starts_with_prompt(conv, window)
        assert window.messages[1].metadata.get("summary_id") == summary.pk
        assert window.summary_through_seq == summary.through_seq


@pytest.mark.django_db
def test_what_a_window_leaves_out_counts_the_prompt_pinned_after_clear_as_sent(
    gap_counts: list[tuple[int, int]],  # noqa: F811
) -> None:
    conv, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 30)
    conv.refresh_from_db()

    window = ContextWindowBuilder(conv, gap_policy="report").build(150)
    check_window_starts_with_prompt(conv, window)
    # everything between the prompt and the window, worked out from the counters
    assert window.uncovered.count == window.first_seq - conv.pinned_seq - 1 > 0
    assert window.uncovered == stored_gap(conv.pk, window)

    LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["Sea stories."] * 40), history, max_input_tokens=300
    ).compact()
    add_turns(history, 10, start=30)
    conv.refresh_from_db()
    window = ContextWindowBuilder(conv, gap_policy="report").build(150)
    check_window_starts_with_prompt(conv, window)
    assert window.uncovered.count > 0 and window.uncovered == stored_gap(conv.pk, window)
    assert gap_counts == []  # the rows left out were not read


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["one_by_one", "batch", "locked"])
def test_after_clear_a_human_first_conversation_has_no_pinned_prompt(path: str, monkeypatch: Any) -> None:
    conv, history, _ = cleared_conversation()
    messages = [ChatMessage.human("ahoy"), ChatMessage.system("Speak like a pirate."), ChatMessage.ai("arr")]

    store(history, messages, path, monkeypatch)
    add_turns(history, 2)

    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.has_system_prompt) == (None, False)
    window = ContextWindowBuilder(conv).build(2_000)
    assert window.system_tokens == 0
    assert [m.role for m in window.messages[:3]] == [Role.HUMAN, Role.SYSTEM, Role.AI]
    assert window.history == window.messages  # the late system message is ordinary history


@pytest.mark.django_db
def test_the_first_summary_after_clear_starts_at_the_first_stored_message() -> None:
    """After ``clear()`` the seqs go on from where they were: a conversation restarted
    without a prompt has its first summary start at its first stored message, not at seq 1
    (the admin, the API and ``recount_tokens`` read that range)."""
    conv, history, last_before = cleared_conversation()
    add_turns(history, 14)
    llm = ScriptedChatModel([f"They sailed, part {i}." for i in range(40)])

    summary = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, max_input_tokens=300).compact()

    assert summary is not None
    assert summary.first_seq == last_before + 1 < summary.through_seq
    assert "question 0 " in " ".join(m.text or "" for messages, _ in llm.calls for m in messages)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["one_by_one", "batch", "locked"])
def test_a_system_message_that_is_not_stored_first_is_not_pinned(path: str, monkeypatch: Any) -> None:
    conv = ConversationFactory()
    history = PersistentChatHistory(conv)
    store(history, [ChatMessage.human("hi"), ChatMessage.system("late note")], path, monkeypatch)
    history.add_message(ChatMessage.system("another late note"))

    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.has_system_prompt) == (None, False)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["one_by_one", "batch", "locked"])
def test_a_new_conversation_pins_its_first_system_message_at_seq_1(path: str, monkeypatch: Any) -> None:
    conv = ConversationFactory()
    store(PersistentChatHistory(conv), first_messages(path), path, monkeypatch)
    conv.refresh_from_db()
    assert (conv.pinned_seq, conv.has_system_prompt) == (1, True)


@pytest.mark.django_db
def test_clear_unpins_and_a_second_clear_pins_the_next_prompt() -> None:
    conv, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system("first prompt"))
    add_turns(history, 1)
    history.clear()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 1)
    conv.refresh_from_db()
    assert conv.pinned_seq == conv.last_seq - 2
    window = ContextWindowBuilder(conv).build(2_000)
    check_window_starts_with_prompt(conv, window)
    assert [m.text for m in window.messages].count("first prompt") == 0


@pytest.mark.django_db
def test_a_window_after_clear_costs_the_queries_of_one_never_cleared() -> None:
    fresh = ConversationFactory()
    add = PersistentChatHistory(fresh)
    add.add_message(ChatMessage.system(PROMPT))
    add_turns(add, 20)
    fresh.refresh_from_db()
    cleared, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 20)
    cleared.refresh_from_db()
    assert cleared.pinned_seq > 1 and fresh.pinned_seq == 1

    counts = []
    for conv in (fresh, cleared):
        for policy in ("ignore", "report"):
            with CaptureQueriesContext(connection) as queries:
                window = ContextWindowBuilder(conv, gap_policy=policy).build(150)
            check_window_starts_with_prompt(conv, window)
            counts.append(len(queries))
    # the window (conversation, summary, pinned prompt and tail in one statement), with the
    # index lookups of what it leaves out in the same statement
    assert counts == [1, 1, 1, 1]
    appends = []
    for history_ in (PersistentChatHistory(fresh), history):
        with CaptureQueriesContext(connection) as queries:
            history_.add_message(ChatMessage.human("one more"))
        appends.append(len(queries))
    assert appends[0] == appends[1]


# -- export and import --------------------------------------------------------------------------


@pytest.mark.django_db
def test_export_and_import_keep_a_prompt_pinned_after_clear() -> None:
    conv, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 6)
    conv.refresh_from_db()
    document = export_conversation(conv)
    assert document["conversation"]["pinned_seq"] == conv.pinned_seq > 1
    assert document["conversation"]["has_system_prompt"] is True

    copy = import_conversation(document, new_uuid=True)

    assert (copy.pinned_seq, copy.has_system_prompt, copy.last_seq) == (
        conv.pinned_seq,
        True,
        conv.last_seq,
    )
    check_window_starts_with_prompt(copy, ContextWindowBuilder(copy).build(150))
    assert export_conversation(copy)["conversation"]["pinned_seq"] == conv.pinned_seq


@pytest.mark.django_db
def test_a_document_from_before_pinned_seq_imports_with_its_prompt_pinned() -> None:
    conv, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 3)
    conv.refresh_from_db()
    document = export_conversation(conv)
    # what the previous version wrote: no pinned_seq, and the prompt unpinned (not at seq 1)
    del document["conversation"]["pinned_seq"]
    document["conversation"]["has_system_prompt"] = False

    copy = import_conversation(document, new_uuid=True)

    assert (copy.pinned_seq, copy.has_system_prompt) == (conv.pinned_seq, True)
    check_window_starts_with_prompt(copy, ContextWindowBuilder(copy).build(2_000))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    [("pinned_seq", None), ("pinned_seq", 1), ("has_system_prompt", False)],
)
def test_a_document_whose_pin_disagrees_with_its_messages_is_refused(field: str, value: Any) -> None:
    conv, history, _ = cleared_conversation()
    history.add_message(ChatMessage.system(PROMPT))
    add_turns(history, 1)
    conv.refresh_from_db()
    document = export_conversation(conv)
    document["conversation"][field] = value

    with pytest.raises(InvalidConversationData) as caught:
        import_conversation(document, new_uuid=True)

    assert caught.value.path == f"conversation.{field}"
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_a_document_whose_first_message_is_human_has_no_pin() -> None:
    conv, _ = conversation_with_turns(2, system_prompt=None)
    document = export_conversation(conv)
    assert document["conversation"]["pinned_seq"] is None
    document["conversation"]["pinned_seq"] = 1

    with pytest.raises(InvalidConversationData) as caught:
        import_conversation(document, new_uuid=True)

    assert caught.value.path == "conversation.pinned_seq"


# -- the migration ------------------------------------------------------------------------------

BEFORE = [("agentmemory", "0015_fact_fts_fastupdate_off")]
AFTER = [("agentmemory", "0016_pinned_seq")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_pins_seq_1_where_a_prompt_was_pinned() -> None:
    apps = migrate_to(BEFORE)
    try:
        Conversation_ = apps.get_model("agentmemory", "Conversation")
        Message_ = apps.get_model("agentmemory", "Message")

        def conversation(*roles: str, pinned: bool, last_seq: int | None = None):  # type: ignore[no-untyped-def]
            first = (last_seq or len(roles)) - len(roles) + 1
            conv = Conversation_.objects.create(
                last_seq=last_seq or len(roles), message_count=len(roles), has_system_prompt=pinned
            )
            for seq, role in enumerate(roles, start=first):
                Message_.objects.create(
                    conversation=conv, seq=seq, role=role, content="x", token_count=1, token_counter="len"
                )
            return conv

        pinned = conversation("system", "human", "ai", pinned=True)
        plain = conversation("human", "system", "ai", pinned=False)
        # cleared, then the prompt stored again: the old rule did not pin it
        cleared = conversation("system", "human", pinned=False, last_seq=9)
        empty = Conversation_.objects.create()

        apps = migrate_to(AFTER)
        Conversation_ = apps.get_model("agentmemory", "Conversation")
        rows = dict(Conversation_.objects.values_list("pk", "pinned_seq"))
        assert rows == {pinned.pk: 1, plain.pk: None, cleared.pk: None, empty.pk: None}

        # a prompt pinned past seq 1 under the new rule is not pinned by the old one
        Conversation_.objects.filter(pk=cleared.pk).update(has_system_prompt=True, pinned_seq=8)
        apps = migrate_to(BEFORE)
        Conversation_ = apps.get_model("agentmemory", "Conversation")
        flags = dict(Conversation_.objects.values_list("pk", "has_system_prompt"))
        assert flags == {pinned.pk: True, plain.pk: False, cleared.pk: False, empty.pk: False}
    finally:
        migrate_to_latest()
