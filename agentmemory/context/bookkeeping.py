"""Why a window found no human message where the conversation's bookkeeping says one is: the
pinned system prompt or the current summary recorded as reaching over it, or a human message
count above what is stored. And the checks every window makes of the stored values that no
append writes: a pinned run that is no run of seqs (``check_pinned``), a current summary that
is another conversation's (``check_summary``).

A window's history starts after the pinned system prompt (``Conversation.pinned_seq``
through ``pinned_last_seq``) and after what the current summary covers (its
``through_seq``), and a window that holds no human message although the counts say the
conversation has one after them is refused: the newest turn does not fit. When every row
after that floor fitted (nothing blocked the packing), the turn is not too large: the
bookkeeping disagrees with the rows (written by hand: raw SQL, a data migration), and the
refusal said "the newest turn needs 0 tokens but only 0 are available", which no budget
fixes. ``stored_state_error`` finds what disagrees, with a few index lookups made only then.
"""

from __future__ import annotations

from django.db.models import Max

from agentmemory.context.packing import PackResult
from agentmemory.exceptions import ContextBudgetExceeded, ConversationStateError
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.store.rows import ConversationRow, SummaryRow
from agentmemory.store.window import TailReader


def check_pinned(conv: ConversationRow) -> None:
    """Refuse a window of a conversation whose pinned system prompt cannot be a run of seqs:
    ``pinned_last_seq`` without ``pinned_seq``, or before it, or a seq below 1 (no message
    has one). A window started after such a run and left the messages it hides out of both
    itself and its ``uncovered`` report, silently. Python only: no query.

    Raises:
        ConversationStateError: naming the column.
    """
    first, last = conv.pinned_seq, conv.pinned_last_seq
    if first is None and last is None:
        return
    if first is None:
        problem, field = f"its pinned_last_seq is {last} but its pinned_seq is empty", "pinned_seq"
    elif first < 1:
        problem, field = f"its pinned_seq is {first}, and no message has a seq below 1", "pinned_seq"
    elif last is not None and last < first:
        problem, field = f"its pinned_last_seq ({last}) is before its pinned_seq ({first})", "pinned_last_seq"
    else:
        return
    raise ConversationStateError(
        f"{problem}, so the pinned system prompt is no run of messages",
        conversation_id=conv.pk,
        field=field,
        value=last if field == "pinned_last_seq" else first,
    )


def foreign_summary_error(conversation_id: int, summary_id: int) -> ConversationStateError:
    """The ``ConversationStateError`` naming a current summary (``Conversation.summary``,
    ``summary_id``) that is not one of the conversation's own summaries: written by hand (raw
    SQL, a data migration, a restore of one table), it names another conversation's, possibly
    another user's, whose text is never sent, shown or folded as this conversation's. The
    message names the summary's id only, never its text or conversation."""
    return ConversationStateError(
        f"its current summary (id {summary_id}) is another conversation's, whose text is never "
        "sent or summarised as this conversation's",
        conversation_id=conversation_id,
        field="summary",
        value=summary_id,
    )


def check_summary(conv: ConversationRow, summary: SummaryRow | None) -> None:
    """Refuse a window that would send the stored summary of a conversation whose
    ``summary_id`` names another conversation's summary. The head statement reads the
    summary only where its ``conversation_id`` is the conversation's (``read_head``), so a
    ``summary_id`` read without its summary is one: the window sent that conversation's text
    to the model, and started after its span. Python only: no query.

    Args:
        conv: the conversation row the head statement read.
        summary: the summary it read with it (``None``: none of the conversation's own).

    Raises:
        ConversationStateError: naming ``summary`` (``foreign_summary_error``).
    """
    if conv.summary_id is not None and summary is None:
        raise foreign_summary_error(conv.pk, conv.summary_id)


def pinned_over_other(
    using: str, pk: int, pinned_seq: int, pinned_last: int | None
) -> ConversationStateError | None:
    """The ``ConversationStateError`` naming a pinned system prompt recorded over a message
    that is not a system message (``pinned_seq`` through ``pinned_last_seq`` written by
    hand): the window starts after the pinned run, so that message was in neither the window
    nor its ``uncovered`` report. ``None`` when the run holds system messages only. One
    indexed query."""
    through = pinned_seq if pinned_last is None else pinned_last
    other = (
        Message.objects.using(using)
        .filter(conversation_id=pk, seq__gte=pinned_seq, seq__lte=through)
        .exclude(role=Role.SYSTEM.value)
        .order_by("seq")
        .values_list("seq", "role")
        .first()
    )
    if other is None:
        return None
    return ConversationStateError(
        f"its pinned system prompt is recorded as seqs {pinned_seq}..{through} (pinned_seq "
        f"{pinned_seq}, pinned_last_seq {'empty' if pinned_last is None else pinned_last}), which "
        f"holds the {other[1]} message at seq {other[0]} (a pinned prompt is the leading run of "
        "system messages only), so the messages it reaches over are in no context window",
        conversation_id=pk,
        field="pinned_seq" if pinned_last is None else "pinned_last_seq",
        value=through,
    )


def turn_refusal(
    reader: TailReader, packed: PackResult, seq: int | None, tokens: int
) -> ConversationStateError | ContextBudgetExceeded:
    """The error that refuses a window whose packing held no human message though the
    conversation counts one after its floor: ``stored_state_error``'s when it finds one, else
    ``ContextBudgetExceeded`` for the unit at ``seq`` of ``tokens`` tokens that did not fit."""
    found = stored_state_error(reader, packed)
    if found is not None:
        return found
    return ContextBudgetExceeded(seq=seq, tokens=tokens, available=packed.available_at_block)


def stored_state_error(reader: TailReader, packed: PackResult) -> ConversationStateError | None:
    """The ``ConversationStateError`` naming the bookkeeping that hides the newest human
    message from a window whose packing was blocked by nothing (``packed.blocked`` is
    ``None``) and held no human message, or ``None`` when the packing was blocked (the turn
    is too large: the caller's ``ContextBudgetExceeded`` says so) or nothing disagrees.

    What it checks, in order, on ``reader``'s database: the pinned system prompt (a run of
    system messages only, ending at or before the newest stored message), the current summary
    (of this conversation, ending before the newest human message: compaction never folds the
    newest turn, ``KEEP_RECENT_HUMAN_TURNS`` is at least 1), then the human message count (a
    human message stored after the floor the window started from).
    """
    if packed.blocked is not None:
        return None
    using, pk = reader.using, reader.conversation_id
    conv = (
        Conversation.objects.using(using)
        .filter(pk=pk)
        .values("pinned_seq", "pinned_last_seq", "human_message_count", "summary_id")
        .first()
    )
    if conv is None:
        return None
    messages = Message.objects.using(using).filter(conversation_id=pk)
    newest = messages.aggregate(seq=Max("seq"))["seq"]
    newest_human = messages.filter(role=Role.HUMAN.value).aggregate(seq=Max("seq"))["seq"]
    pinned_seq, pinned_last = conv["pinned_seq"], conv["pinned_last_seq"]
    if pinned_seq is not None:
        through = pinned_seq if pinned_last is None else pinned_last
        field = "pinned_seq" if pinned_last is None else "pinned_last_seq"
        span = (
            f"its pinned system prompt is recorded as seqs {pinned_seq}..{through} (pinned_seq "
            f"{pinned_seq}, pinned_last_seq {'empty' if pinned_last is None else pinned_last})"
        )
        found = pinned_over_other(using, pk, pinned_seq, pinned_last)
        if found is not None:
            return found
        if newest is not None and through > newest:
            return ConversationStateError(
                f"{span}, past its newest message (seq {newest}), so no message is in any context window",
                conversation_id=pk,
                field=field,
                value=through,
            )
    if conv["summary_id"] is not None:
        summary = (
            Summary.objects.using(using)
            .filter(pk=conv["summary_id"])
            .values("conversation_id", "first_seq", "through_seq")
            .first()
        )
        if summary is not None and summary["conversation_id"] != pk:
            return foreign_summary_error(pk, conv["summary_id"])
        if summary is not None and newest_human is not None and summary["through_seq"] >= newest_human:
            return ConversationStateError(
                f"its current summary (id {conv['summary_id']}) is recorded as covering seqs "
                f"{summary['first_seq']}..{summary['through_seq']}, which holds its newest human "
                f"message (seq {newest_human}); compaction never folds the newest turn, so the "
                "newest turn is in no context window",
                conversation_id=pk,
                field="summary",
                value=conv["summary_id"],
            )
    if newest_human is None or newest_human <= reader.floor_seq:
        stored = "none" if newest_human is None else f"none after seq {reader.floor_seq}"
        return ConversationStateError(
            f"its human_message_count ({conv['human_message_count']}) counts human messages the "
            f"window should hold, but it stores {stored}",
            conversation_id=pk,
            field="human_message_count",
            value=conv["human_message_count"],
        )
    return None
