"""Sums over stored counters never make a read fail.

SQLite's ``SUM`` of integers raises "integer overflow" past 2**63 - 1, which two rows reach
there: a positive integer column holds up to 2**63 - 1 on SQLite (PostgreSQL sums its
integer columns as a bigint, its bigint columns as a numeric). ``agentmemory.usage`` summed
with SQLite's ``TOTAL`` already; the erasure counts (``forget_user --dry-run``, the admin's
erasure confirmation) and ``repair_conversations``, the command meant for hand-set
bookkeeping, failed with ``OperationalError: integer overflow`` on such rows.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection

from agentmemory.deletion import erasure_counts
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.repair import repair_conversation
from agentmemory.validation import MAX_ID
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: the largest value of a positive integer column on this database (2**63 - 1 on SQLite)
MAX_INT = connection.ops.integer_field_range("PositiveIntegerField")[1]


@pytest.fixture
def owner():  # type: ignore[no-untyped-def]
    user = UserFactory(username="counted")
    for _ in range(2):
        conversation = Conversation.objects.create(owner=user)
        PersistentChatHistory(conversation).add_messages(
            [ChatMessage.human("hello there"), ChatMessage.ai("hello back")]
        )
        Message.objects.filter(conversation=conversation).update(token_count=MAX_INT)
        Conversation.objects.filter(pk=conversation.pk).update(message_count=MAX_ID)
    return user


def test_the_erasure_counts_add_up_counters_at_their_largest_value(owner) -> None:  # type: ignore[no-untyped-def]
    counts = erasure_counts([owner])
    assert counts["conversations"] == 2
    # their sum, past 64 bits (exact on PostgreSQL, to 53 bits on SQLite, whose sum is a float)
    assert counts["messages"] == pytest.approx(2 * MAX_ID, rel=1e-15)
    out = io.StringIO()
    call_command("forget_user", "counted", "--dry-run", stdout=out)
    assert f"{counts['messages']} messages" in out.getvalue()


def test_repair_works_out_a_token_total_past_the_column_as_its_largest_value(owner) -> None:  # type: ignore[no-untyped-def]
    conversation = Conversation.objects.filter(owner=owner).first()
    assert conversation is not None
    repair = repair_conversation(conversation.pk)
    assert repair.changes["message_count"] == (MAX_ID, 2)
    # two token counts at the column's largest value: their sum, up to what the column holds
    assert Conversation.objects.get(pk=conversation.pk).stored_tokens == min(2 * MAX_INT, MAX_ID)
    out = io.StringIO()
    call_command("repair_conversations", "--dry-run", stdout=out)
    assert "message_count" in out.getvalue()


@pytest.mark.parametrize("pk", [2**70, -(2**70)])
def test_a_user_id_past_64_bits_is_a_value_error(pk) -> None:  # type: ignore[no-untyped-def]
    # SQLite's driver raised OverflowError from the first query of ``forget_user``
    from agentmemory.deletion import forget_user

    with pytest.raises(ValueError, match="64-bit"):
        forget_user(pk)
    with pytest.raises(ValueError, match="64-bit"):
        erasure_counts([pk])


@pytest.mark.parametrize(("value", "error"), [(2**70, "ConversationNotFound"), (float("inf"), "TypeError")])
def test_repair_refuses_what_names_no_conversation(value, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception) as caught:
        repair_conversation(value)
    assert type(caught.value).__name__ == error


def test_a_failed_compaction_is_recorded_with_the_failure_count_at_its_largest_value() -> None:
    # ``compaction_failures + 1`` past the column's largest value raised "integer out of
    # range" on PostgreSQL: the failure was not recorded (only logged), and inside a
    # transaction the next statement failed too
    from agentmemory.compaction.runs import run_compaction
    from agentmemory.exceptions import PermanentLLMError
    from agentmemory.llm.fake import ScriptedChatModel
    from tests.factories import conversation_with_turns

    conversation, _history = conversation_with_turns(12)
    Conversation.objects.filter(pk=conversation.pk).update(compaction_failures=MAX_INT)
    with pytest.raises(PermanentLLMError):
        run_compaction(conversation.pk, llm=ScriptedChatModel([PermanentLLMError("no such model")]))
    stored = Conversation.objects.get(pk=conversation.pk)
    assert stored.compaction_failures == MAX_INT
    assert "no such model" in stored.compaction_error
