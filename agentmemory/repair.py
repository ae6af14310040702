"""Work a conversation's bookkeeping out again from its stored messages:
``repair_conversation`` (``manage.py repair_conversations`` runs it).

agentmemory keeps a conversation's columns in step with its messages under the row lock of
every append: ``last_seq``, the message, human message and token counts, the pinned system
prompt (``pinned_seq`` through ``pinned_last_seq``), the current summary and the pending tool
calls. A row changed by hand (raw SQL, a data migration, a restore of one table and not the
other) can disagree with the messages; an append, a window or the API then refuses it with
``ConversationStateError`` naming the column (the API's 409 ``conversation_inconsistent``).
Each column is worked out here from the rows, as the appends would have left it:

- ``last_seq``: at least the newest stored seq (never lowered: seqs are not reused, so a
  late compaction cannot attach to a new message);
- ``message_count``, ``human_message_count``, ``stored_tokens``: counted and summed;
- ``pinned_seq``, ``pinned_last_seq``, ``has_system_prompt``: the leading run of system
  messages (every system message stored while the conversation held only system messages);
- ``summary``: kept when it is one of the conversation's summaries that ends at or before its
  newest message and before its newest human message (compaction never folds the newest
  turn); else the newest of its summaries that does, or none. No summary is deleted;
- ``pending_tool_calls``: the calls of stored AI messages that no stored tool result
  answers (``cancel_pending_tool_calls`` answers the ones that will never be).

Messages and summaries are never changed: only the conversation row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import router, transaction
from django.db.models import Count, F, Max, Min, Q

from agentmemory.exceptions import ConversationNotFound
from agentmemory.managers import Total
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.validation import MAX_ID

__all__ = ["Repair", "repair_conversation"]

#: the columns ``repair_conversation`` works out, in the order it reports them
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


@dataclass(frozen=True)
class Repair:
    """What ``repair_conversation`` found.

    Attributes:
        conversation_id: the conversation's primary key.
        changes: ``{column: (stored value, value worked out)}`` for each column that
            disagreed with the messages (empty: none did); written unless a dry run.
    """

    conversation_id: int
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.changes:
            return f"conversation {self.conversation_id}: in step with its messages"
        described = ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in self.changes.items())
        return f"conversation {self.conversation_id}: {described}"


def repair_conversation(conversation: Conversation | int, *, dry_run: bool = False) -> Repair:
    """Work out the bookkeeping of ``conversation`` (an instance or its primary key) from its
    stored messages and write what disagreed, under the conversation's row lock, on the
    database the routers choose for writing ``Message``. A few aggregate queries over the
    conversation's messages (O(messages) on the ``(conversation, seq)`` index); nothing else
    is read or written.

    Args:
        dry_run: only say what would change.

    Returns:
        A ``Repair`` with the columns that changed (or would).

    Raises:
        ConversationNotFound: no such conversation (an id past 64 bits included).
        TypeError: ``conversation`` is neither a conversation nor an integer.
    """
    pk = conversation.pk if isinstance(conversation, Conversation) else conversation
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise TypeError(f"conversation must be a Conversation or its primary key, not {pk!r}")
    if not 0 < pk <= MAX_ID:
        raise ConversationNotFound(f"conversation {pk} does not exist")
    using = router.db_for_write(Message)
    with transaction.atomic(using=using):
        stored = Conversation.objects.using(using).select_for_update().filter(pk=pk).values(*COLUMNS).first()
        if stored is None:
            raise ConversationNotFound(f"conversation {pk} does not exist")
        worked_out = _worked_out(using, pk, stored)
        changes = {
            name: (stored[name], worked_out[name]) for name in COLUMNS if stored[name] != worked_out[name]
        }
        if changes and not dry_run:
            Conversation.objects.using(using).filter(pk=pk).update(
                **{name: new for name, (_, new) in changes.items()}
            )
    return Repair(pk, changes)


def _worked_out(using: str, pk: int, stored: dict[str, Any]) -> dict[str, Any]:
    """Each column of ``COLUMNS`` as the conversation's messages say it should be."""
    messages = Message.objects.using(using).filter(conversation_id=pk)
    human = Q(role=Role.HUMAN.value)
    totals = messages.aggregate(
        newest=Max("seq"),
        count=Count("pk"),
        humans=Count("pk", filter=human),
        tokens=Total("token_count"),
        newest_human=Max("seq", filter=human),
        first_other=Min("seq", filter=~Q(role=Role.SYSTEM.value)),
    )
    newest, newest_human = totals["newest"], totals["newest_human"]
    # the leading run of system messages: every one before the first message of another role
    leading = messages if totals["first_other"] is None else messages.filter(seq__lt=totals["first_other"])
    run = leading.aggregate(first=Min("seq"), last=Max("seq"))
    return {
        "last_seq": max(stored["last_seq"], newest or 0),
        "message_count": totals["count"],
        "human_message_count": totals["humans"],
        # a total past what the column holds (token counts at their largest value on
        # SQLite) is stored as the largest value: appends stop there too
        "stored_tokens": min(int(totals["tokens"] or 0), MAX_ID),
        "pinned_seq": run["first"],
        "pinned_last_seq": run["last"],
        "has_system_prompt": run["first"] is not None,
        "summary_id": _summary(using, pk, stored["summary_id"], newest, newest_human),
        "pending_tool_calls": _pending(using, pk),
    }


def _summary(
    using: str, pk: int, current: int | None, newest: int | None, newest_human: int | None
) -> int | None:
    """The current summary when it may be one (a span of the conversation's messages that ends
    at or before the newest and before the newest human message), else the newest of the
    conversation's summaries that may, else ``None``."""
    if newest is None:
        return None
    limit = newest if newest_human is None else min(newest, newest_human - 1)
    summaries = Summary.objects.using(using).filter(
        conversation_id=pk, through_seq__lte=limit, first_seq__lte=F("through_seq")
    )
    if current is not None and summaries.filter(pk=current).exists():
        return current
    return summaries.order_by("-through_seq").values_list("pk", flat=True).first()


def _pending(using: str, pk: int) -> dict[str, int]:
    """``{call id: seq}`` of the tool calls of stored AI messages that no stored tool result
    answers (a result answers the call of its ``exchange_seq`` with its ``tool_call_id``); a
    call id made again by a later AI message names the later one, as appends record it."""
    messages = Message.objects.using(using).filter(conversation_id=pk)
    answered = set(
        messages.filter(role=Role.TOOL.value, exchange_seq__isnull=False).values_list(
            "exchange_seq", "tool_call_id"
        )
    )
    pending: dict[str, int] = {}
    calling = messages.filter(role=Role.AI.value).exclude(tool_calls=[]).order_by("seq")
    for seq, calls in calling.values_list("seq", "tool_calls").iterator():
        for call in calls if isinstance(calls, list) else ():
            call_id = call.get("id") if isinstance(call, dict) else None
            if isinstance(call_id, str) and (seq, call_id) not in answered:
                pending[call_id] = seq
            elif isinstance(call_id, str):
                pending.pop(call_id, None)
    return pending
