"""A conversation's bookkeeping that disagrees with its messages (written by hand: raw SQL, a
data migration) is named, with how to fix it, and ``manage.py repair_conversations`` fixes it.

- A pinned system prompt recorded past the newest message, or over a human message, and a
  summary recorded over the newest human message, hid every message after them: the window
  was refused with "the newest turn needs 0 tokens but only 0 are available in the context
  window; raise max_tokens" (the API's 422), which no budget fixes. A pinned run that is no
  run of seqs (its last seq before its first, a last seq without a first, a seq below 1) hid
  messages silently. Each is a ``ConversationStateError`` naming the column (the API's 409
  ``conversation_inconsistent``).
- A current summary that is another conversation's sent that conversation's text as this
  one's: the same ``ConversationStateError`` naming ``summary``.
- ``pending_tool_calls`` holding an array, text or a seq written as text failed every window
  (a ``ValueError`` reported as a wrong ``max_tokens``, or a 500) and the appends that read
  it: the entries that name a call and a seq are read, the rest left out.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationStateError, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall, pending_calls
from agentmemory.models import Conversation, Message, Summary
from agentmemory.repair import repair_conversation
from agentmemory.validation import MAX_ID

pytestmark = pytest.mark.django_db

COLUMNS = (
    "last_seq",
    "message_count",
    "human_message_count",
    "stored_tokens",
    "pinned_seq",
    "pinned_last_seq",
    "has_system_prompt",
    "summary_id",
    "pending_tool_calls",
)


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    """Two pinned system messages, two turns, a tool exchange still waiting for its result."""
    conv = Conversation.objects.create(owner=user, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.system("You are terse."),
            ChatMessage.system("Answer in French."),
            ChatMessage.human("Where is order 7?"),
            ChatMessage.ai("It left on Monday."),
            ChatMessage.human("And order 8?"),
            ChatMessage.ai(None, [ToolCall(id="c1", name="track", arguments={"order": 8})]),
        ]
    )
    return conv


def _columns(conv: Conversation) -> dict[str, Any]:
    return Conversation.objects.values(*COLUMNS).get(pk=conv.pk)


def _window(conv: Conversation) -> list[tuple[str, str | None]]:
    return [(m.role.value, m.content) for m in ContextWindowBuilder(conv).build(max_tokens=2000).messages]


def _summary(conv: Conversation, first: int, through: int, other: Conversation | None = None) -> Summary:
    return Summary.objects.create(
        conversation=other or conv,
        text="Order 7 left on Monday.",
        first_seq=first,
        through_seq=through,
        token_count=9,
    )


#: each corruption: the columns written by hand, and the column the error names
CORRUPTIONS: dict[str, tuple[Any, str]] = {
    "pinned past the end": ({"pinned_seq": 1, "pinned_last_seq": 100}, "pinned_last_seq"),
    "pinned at the largest seq": ({"pinned_last_seq": MAX_ID}, "pinned_last_seq"),
    "pinned over a human message": ({"pinned_last_seq": 5}, "pinned_last_seq"),
    # the newest turn still in the window: the run's other messages were left out unreported
    "pinned over the first turn": ({"pinned_last_seq": 4}, "pinned_last_seq"),
    "pinned seq alone on a human message": ({"pinned_seq": 3, "pinned_last_seq": None}, "pinned_seq"),
    "pinned run wholly past the end": ({"pinned_seq": 50, "pinned_last_seq": 60}, "pinned_last_seq"),
    "pinned seq alone past the end": ({"pinned_seq": 50, "pinned_last_seq": None}, "pinned_seq"),
    "pinned run reversed": ({"pinned_seq": 2, "pinned_last_seq": 1}, "pinned_last_seq"),
    "pinned last seq without a first": ({"pinned_seq": None, "pinned_last_seq": 2}, "pinned_seq"),
    "pinned seq below 1": ({"pinned_seq": -5, "pinned_last_seq": 2}, "pinned_seq"),
    "summary past the end": ("summary", 100),
    "summary over the newest human message": ("summary", 5),
    # another conversation's (tests/test_foreign_summary.py): its text was sent as this one's
    "summary of another conversation": ("other summary", 4),
    "human messages counted that are not stored": ({"human_message_count": 9}, "human_message_count"),
}


def _corrupt(conv: Conversation, case: str) -> str:
    written, field = CORRUPTIONS[case]
    if written == "summary":
        summary = _summary(conv, 3, field)  # type: ignore[arg-type]
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
        return "summary"
    if written == "other summary":
        other = Conversation.objects.create(owner=conv.owner)
        Conversation.objects.filter(pk=conv.pk).update(summary=_summary(conv, 3, field, other))  # type: ignore[arg-type]
        return "summary"
    if case == "human messages counted that are not stored":
        Message.objects.filter(conversation=conv, role="human").delete()
    Conversation.objects.filter(pk=conv.pk).update(**written)
    return field


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_bookkeeping_that_hides_messages_is_named_and_repaired(api_forced, conv, case) -> None:  # type: ignore[no-untyped-def]
    field = _corrupt(conv, case)
    before = _columns(conv)
    with pytest.raises(ConversationStateError) as raised:
        _window(conv)
    assert raised.value.field == field
    assert field in str(raised.value) and "repair_conversations" in str(raised.value)
    assert "raise max_tokens" not in str(raised.value)
    response = api_forced.get(f"/api/conversations/{conv.uuid}/context/")
    assert response.status_code == 409, response.content
    assert response.json()["error"] == "conversation_inconsistent"
    assert field in response.json()["detail"]
    assert _columns(conv) == before  # reading wrote nothing

    out = StringIO()
    call_command("repair_conversations", "--conversation", str(conv.uuid), stdout=out)
    assert "1 conversations checked, 1 changed." in out.getvalue()
    window = _window(conv)
    assert window[:2] == [("system", "You are terse."), ("system", "Answer in French.")]
    if case != "human messages counted that are not stored":
        assert ("human", "And order 8?") in window
    assert api_forced.get(f"/api/conversations/{conv.uuid}/context/").status_code == 200


def test_a_repair_puts_back_what_the_appends_wrote(conv) -> None:  # type: ignore[no-untyped-def]
    expected = _columns(conv)
    assert expected["pending_tool_calls"] == {"c1": 6}
    Conversation.objects.filter(pk=conv.pk).update(
        last_seq=4,
        message_count=0,
        human_message_count=MAX_ID,
        stored_tokens=MAX_ID,
        pinned_seq=None,
        pinned_last_seq=None,
        has_system_prompt=False,
        pending_tool_calls={"c1": "6", "gone": 99, "c2": 6},
    )
    dry = repair_conversation(conv, dry_run=True)
    assert set(dry.changes) == set(COLUMNS) - {"summary_id"}
    assert _columns(conv)["last_seq"] == 4  # a dry run changes nothing
    assert repair_conversation(conv.pk).changes == dry.changes
    assert _columns(conv) == expected
    assert not repair_conversation(conv).changes  # a second run finds nothing
    # a last_seq above the newest seq (after pop() or clear(): seqs are not reused) is kept
    Conversation.objects.filter(pk=conv.pk).update(last_seq=40)
    assert not repair_conversation(conv).changes


def test_a_repair_takes_the_newest_summary_that_can_be_current(conv) -> None:  # type: ignore[no-untyped-def]
    other = Conversation.objects.create(owner=conv.owner)
    older, newer = _summary(conv, 3, 3), _summary(conv, 3, 4)
    _summary(conv, 3, 5)  # over the newest human message: never current
    for current in (_summary(other, 3, 4, other), None):
        Conversation.objects.filter(pk=conv.pk).update(summary=current)
        assert repair_conversation(conv).changes["summary_id"] == (current and current.pk, newer.pk)
    Conversation.objects.filter(pk=conv.pk).update(summary=older)
    assert not repair_conversation(conv).changes  # a current summary that can be one is kept


@pytest.mark.django_db(transaction=True)  # each request in its own transaction, as served
def test_a_repaired_conversation_takes_appends_again(api_forced, conv) -> None:  # type: ignore[no-untyped-def]
    Conversation.objects.filter(pk=conv.pk).update(last_seq=3)
    url = f"/api/conversations/{conv.uuid}/messages/"
    refused = api_forced.post(url, {"role": "human", "content": "and 9?"}, format="json")
    assert refused.status_code == 409
    assert "repair_conversations" in refused.json()["detail"]
    call_command("repair_conversations", stdout=StringIO())
    assert api_forced.post(url, {"role": "human", "content": "and 9?"}, format="json").status_code == 201
    assert Message.objects.get(conversation=conv, seq=7).content == "and 9?"


def test_the_repair_command_checks_its_arguments(conv) -> None:  # type: ignore[no-untyped-def]
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(CommandError, match="no conversation"):
            call_command("repair_conversations", "--conversation", bad)
    Conversation.objects.filter(pk=conv.pk).update(message_count=1)
    out = StringIO()
    call_command("repair_conversations", "--dry-run", "--batch-size", "1", stdout=out)
    assert f"would change conversation {conv.pk}: message_count 1 -> 6" in out.getvalue()
    assert _columns(conv)["message_count"] == 1


#: pending_tool_calls values no append writes
MALFORMED = [
    [1],
    ["c1"],
    "c1",
    6,
    {"c1": "6"},
    {"c1": 6.5},
    {"c1": True},
    {"c1": None},
    {"c1": 10**30},
    {"c1": -6},
]


@pytest.mark.parametrize("stored", MALFORMED, ids=repr)
def test_pending_tool_calls_no_append_writes_fail_no_read_or_append(
    api_forced, admin_client, conv, stored
) -> None:  # type: ignore[no-untyped-def]
    Conversation.objects.filter(pk=conv.pk).update(pending_tool_calls=stored)
    assert pending_calls(stored) == {}
    expected = [
        ("system", "You are terse."),
        ("system", "Answer in French."),
        ("human", "Where is order 7?"),
        ("ai", "It left on Monday."),
        ("human", "And order 8?"),
    ]
    assert _window(conv) == expected  # the call without its result is left out, as before
    response = api_forced.get(f"/api/conversations/{conv.uuid}/context/")
    assert response.status_code == 200, response.content
    assert (
        admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/transcript/", follow=True).status_code
        == 200
    )
    history = PersistentChatHistory(conv)
    # a result for the call the column no longer names is one that answers no pending call
    with pytest.raises(InvalidMessageError, match="c1"):
        history.add_message(ChatMessage.tool("on its way", tool_call_id="c1", name="track"))
    bad = api_forced.post(
        f"/api/conversations/{conv.uuid}/messages/",
        {"role": "tool", "content": "on its way", "tool_call_id": "c1", "name": "track"},
        format="json",
    )
    assert bad.status_code == 400
    assert Message.objects.filter(conversation=conv).count() == 6
    history.add_message(ChatMessage.human("Thanks"))
    history.add_messages([ChatMessage.ai(None, [ToolCall(id="c2", name="track", arguments={})])])
    assert pending_calls(_columns(conv)["pending_tool_calls"]) == {"c2": 8}
    history.add_messages([ChatMessage.tool("here", tool_call_id="c2", name="track"), ChatMessage.ai("Done.")])
    assert history.cancel_pending_tool_calls() == []
    assert history.pop() is not None


def test_pending_calls_reads_only_call_ids_and_seqs() -> None:
    assert pending_calls({"a": 3, "b": "3", "c": 0, "d": MAX_ID, "e": MAX_ID + 1, 5: 2}) == {
        "a": 3,
        "d": MAX_ID,
    }
    assert pending_calls(None) == {} and pending_calls([["a", 3]]) == {}


@pytest.mark.postgres
def test_pending_calls_the_functions_cannot_read_fall_back_to_the_locked_path(conv) -> None:  # type: ignore[no-untyped-def]
    """On PostgreSQL the one-message append through its server-side function stores nothing
    when the column is no JSON object or holds text for the call answered (the cast failed
    with "invalid input syntax for type bigint"); the locked path answers with the typed
    error."""
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.human("warm up"))  # the connection finds the functions
    for stored in ({"c1": "6"}, [1], "c1"):
        Conversation.objects.filter(pk=conv.pk).update(pending_tool_calls=stored)
        with pytest.raises(InvalidMessageError):
            history.add_message(ChatMessage.tool("x", tool_call_id="c1", name="track"))


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_the_admin_context_page_names_bookkeeping_that_hides_messages(admin_client, conv, case) -> None:  # type: ignore[no-untyped-def]
    """The admin's context window page answered a server error where the API answers 409
    ``conversation_inconsistent``: it shows the same message, with the command that repairs."""
    field = _corrupt(conv, case)
    response = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/context/")
    assert response.status_code == 400  # as for the page's other errors
    page = response.content.decode()
    assert field in page and "repair_conversations" in page
