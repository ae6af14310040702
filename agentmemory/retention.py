"""Retention: purging conversations that have been inactive for longer than policy allows.

The period of a conversation is, first that applies: its own ``retention_days`` field;
``AGENTMEMORY["RETENTION_DAYS_BY_AGENT"][agent_key]`` (None there keeps that agent's
conversations); ``AGENTMEMORY["RETENTION_DAYS"]`` (None keeps conversations forever). A
conversation is expired when its last activity (``updated_at``: every append moves it) is older
than its period. ``purge_conversations()`` deletes expired conversations, or with
``blank_content`` blanks what they say and keeps their rows and counters for statistics; the
``purge_conversations`` command and the ``agentmemory.tasks.purge_expired`` task call it.
Long-term facts follow their own expiry (``expires_at``): the purge deletes facts already
expired, which reads have hidden since they expired.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Case, Q, QuerySet, Value, When
from django.utils import timezone

from agentmemory import signals
from agentmemory.conf import app_settings
from agentmemory.models import Conversation, Fact, Message, MessageEmbedding, ModelCall, PromptText, Summary
from agentmemory.recall.fulltext import drop_removed_words

__all__ = ["PurgeReport", "expired_conversations", "parse_period", "purge_conversations"]

#: conversations handled in one transaction (each batch holds their row locks)
CONVERSATION_BATCH = 50
#: ... and at most about this many messages (a larger single conversation is one batch)
MESSAGE_BATCH = 20_000
#: messages with tool calls (or thinking blocks) rewritten per statement when blanking
TOOL_CALL_PAGE = 1_000
#: the metadata key of an AI message's Anthropic thinking blocks (the model's own words),
#: which blanking removes (``agentmemory.formats.anthropic``)
THINKING_KEY = "thinking"
#: metadata keys that hold what was said, which blanking removes: the thinking blocks, and
#: the whole item or message the contrib adapters keep beside the columns when these cannot
#: give it back exactly (``openai_agents.ITEM_KEY``, ``langchain.MESSAGE_KEY``, and
#: pydantic-ai's thinking and other response parts), and selectools' ``tool_result`` kept by
#: the compat memories (``agentmemory.compat.types.COMPAT_KEY``); named here, since importing
#: the adapters needs their optional libraries (and the core imports no integration)
WORD_KEYS = (
    THINKING_KEY,
    "openai_item",
    "langchain_message",
    "pydantic_ai_thinking",
    "pydantic_ai_parts",
    "compat",
)
#: the conversation metadata key of the compat memories' state
#: (``agentmemory.compat.store.STATE_KEY``), and its keys that hold what was said (the
#: summary of trimmed messages: selectools' ``summary``, windlass' ``SummaryMemory``), which
#: blanking removes
STATE_KEY = "compat_state"
STATE_WORD_KEYS = ("summary",)

_PERIOD = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks", "": "days"}


def parse_period(text: str) -> timedelta:
    """``"90d"`` → 90 days. Units: ``s``, ``m``, ``h``, ``d`` (the default), ``w``.

    Raises:
        ValueError: not a positive whole number with one of those units, or a period that
            reaches back from now past the first day of year 1, where the calendar Python
            and the databases count in ends (``--older-than 800000d`` raised
            ``OverflowError``).
    """
    match = _PERIOD.match(text or "")
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"{text!r} is not a period such as 90d, 12h or 2w")
    try:
        period = timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        period = None
    if period is None or cutoff(timezone.now(), period) is None:
        most = (timezone.now() - datetime.min.replace(tzinfo=UTC)).days
        raise ValueError(f"{text!r} reaches back past the first day of year 1: at most {most:,} days")
    return period


def cutoff(now: datetime, period: timedelta | float) -> datetime | None:
    """``now - period`` (a period in days when a number), or ``None`` when that is before
    the first day of year 1: nothing was active that long ago, so nothing expires by it (a
    legal hold of a million days is a valid ``retention_days``; subtracting it raised
    ``OverflowError`` and stopped every purge)."""
    try:
        return now - (period if isinstance(period, timedelta) else timedelta(days=period))
    except OverflowError:
        return None


def expired_conversations(
    *,
    now: datetime | None = None,
    older_than: timedelta | None = None,
    agent_key: str | None = None,
    using: str | None = None,
) -> QuerySet[Conversation]:
    """Conversations whose last activity is older than their retention period.

    Args:
        now: the time periods are measured back from (default now).
        older_than: one period for every conversation instead of the settings; a
            conversation's own ``retention_days`` still goes first.
        agent_key: only conversations of this agent key (exact).
        using: database alias (default: the one the routers choose for reading).

    Returns:
        A queryset (no rows read yet); empty when no period applies.
    """
    now = now or timezone.now()
    conf = app_settings()
    qs = Conversation.objects.using(using or router.db_for_read(Conversation))
    if agent_key is not None:
        qs = qs.filter(agent_key=agent_key)
    expired = Q(pk__in=[])
    # Each distinct per-conversation period is one condition: a handful in practice. A
    # period reaching back past year 1 (``cutoff`` is None) expires nothing.
    own = qs.exclude(retention_days=None).order_by().values_list("retention_days", flat=True).distinct()
    for days in own:
        if days is not None and (before := cutoff(now, days)) is not None:
            expired |= Q(retention_days=days, updated_at__lt=before)
    default = Q(retention_days=None)
    if older_than is not None:
        if (before := cutoff(now, older_than)) is not None:
            expired |= default & Q(updated_at__lt=before)
    else:
        by_agent = conf.RETENTION_DAYS_BY_AGENT
        for key, days in by_agent.items():
            if days is not None and (before := cutoff(now, days)) is not None:
                expired |= default & Q(agent_key=key, updated_at__lt=before)
        if conf.RETENTION_DAYS is not None and (before := cutoff(now, conf.RETENTION_DAYS)) is not None:
            expired |= default & ~Q(agent_key__in=list(by_agent)) & Q(updated_at__lt=before)
    return qs.filter(expired)


@dataclass(frozen=True)
class PurgeReport:
    """What ``purge_conversations`` did (or would do, with ``dry_run``).

    Attributes:
        conversations: conversations deleted (or blanked).
        messages: their messages deleted (or blanked).
        summaries: their summaries deleted (or blanked).
        message_embeddings: message vectors deleted (both modes: a vector encodes content).
        facts: expired long-term facts deleted.
        dry_run: nothing was changed.
        blanked: content was blanked instead of deleting rows.
    """

    conversations: int = 0
    messages: int = 0
    summaries: int = 0
    message_embeddings: int = 0
    facts: int = 0
    dry_run: bool = False
    blanked: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def purge_conversations(
    *,
    older_than: timedelta | None = None,
    agent_key: str | None = None,
    dry_run: bool = False,
    blank_content: bool = False,
    now: datetime | None = None,
    progress: Callable[[int, int], None] | None = None,
    using: str | None = None,
) -> PurgeReport:
    """Delete expired conversations (see ``expired_conversations``) with their messages,
    summaries and embeddings, then expired long-term facts, in batches: at most
    ``CONVERSATION_BATCH`` conversations or about ``MESSAGE_BATCH`` messages per transaction,
    each conversation under its row lock and checked again under it (an append in between
    makes it active again; it is kept). Memory stays bounded: no message row is loaded, except
    those with tool calls when blanking, a page at a time.

    With ``blank_content`` the rows stay: message content becomes empty (``""``; ``None``
    stays ``None``), content parts are dropped, tool call arguments become ``{}`` (ids and
    names stay, so the pairing of calls and results stays valid), summary texts become
    empty, message vectors are deleted and the full-text index follows the content; token
    counts, roles, seqs, metadata and the conversation's counters stay for statistics. Such a
    conversation gets ``content_purged_at`` and is not blanked again. Facts whose expiry has
    passed are deleted in both modes (reads already hide them).

    Args:
        older_than: one period for all conversations instead of the settings (a
            conversation's own ``retention_days`` still goes first).
        agent_key: only this agent's conversations and facts.
        dry_run: count what would be purged; change nothing.
        blank_content: blank instead of deleting.
        now: the time periods are measured back from (default now).
        progress: called after each batch with (conversations done, conversations in all).
        using: database alias (default: the one the routers choose for writing).

    Returns:
        A ``PurgeReport``.
    """
    now = now or timezone.now()
    alias = using or router.db_for_write(Conversation)
    expired = expired_conversations(now=now, older_than=older_than, agent_key=agent_key, using=alias)
    if blank_content:
        expired = expired.filter(content_purged_at=None)
    facts = Fact.objects.using(alias).filter(expires_at__lte=now)
    if agent_key is not None:
        facts = facts.filter(agent_key=agent_key)

    if dry_run:
        ids = expired.values("pk")
        return PurgeReport(
            conversations=expired.count(),
            messages=Message.objects.using(alias).filter(conversation_id__in=ids).count(),
            summaries=Summary.objects.using(alias).filter(conversation_id__in=ids).count(),
            message_embeddings=MessageEmbedding.objects.using(alias)
            .filter(message__conversation_id__in=ids)
            .count(),
            facts=facts.count(),
            dry_run=True,
            blanked=blank_content,
        )

    total = expired.count()
    counts = {"conversations": 0, "messages": 0, "summaries": 0, "message_embeddings": 0}
    done = 0
    last_pk = 0
    while True:
        with transaction.atomic(using=alias):
            rows = list(
                expired.select_for_update()
                .filter(pk__gt=last_pk)
                .order_by("pk")
                .values_list("pk", "message_count")[:CONVERSATION_BATCH]
            )
            if not rows:
                break
            batch = _cap(rows)
            last_pk = batch[-1]
            if blank_content:
                _add(counts, _blank(alias, batch, now))
            else:
                _total, per_model = Conversation.objects.using(alias).filter(pk__in=batch).delete()
                counts["conversations"] += per_model.get(Conversation._meta.label, 0)
                counts["messages"] += per_model.get(Message._meta.label, 0)
                counts["summaries"] += per_model.get(Summary._meta.label, 0)
                counts["message_embeddings"] += per_model.get(MessageEmbedding._meta.label, 0)
        done += len(batch)
        if progress is not None:
            progress(done, max(total, done))

    from agentmemory.deletion import delete_facts  # expired facts, FACT_BATCH per transaction

    fact_count = sum(per_model.get(Fact._meta.label, 0) for per_model in delete_facts(facts, alias))
    if counts["messages"] or counts["summaries"] or fact_count:
        # SQLite's full-text index keeps the removed words in its segments until merged
        drop_removed_words(alias)
    return PurgeReport(
        conversations=counts["conversations"],
        messages=counts["messages"],
        summaries=counts["summaries"],
        message_embeddings=counts["message_embeddings"],
        facts=fact_count,
        blanked=blank_content,
    )


def _cap(rows: list[tuple[int, int]]) -> list[int]:
    """The leading conversations of ``rows`` holding no more than about ``MESSAGE_BATCH``
    messages (at least one)."""
    batch: list[int] = []
    messages = 0
    for pk, count in rows:
        if batch and messages + count > MESSAGE_BATCH:
            break
        batch.append(pk)
        messages += count
    return batch


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        counts[key] += n


def _blank_recorded_texts(alias: str, batch: list[int]) -> None:
    """Blank the texts model calls of the conversations in ``batch`` sent that are not stored
    messages (``PromptText``: the system prompt with the owner's knowledge block, the summary
    message as sent): their calls then name the empty text, whose window reads back blanked.
    The blanked texts are deleted, not emptied under the digest of what they held, so a text
    sent again later is recorded anew. Tool declarations stay: they are the agent's, not
    what was said."""
    from agentmemory.recording import text_digest

    empty = text_digest("")
    calls = ModelCall.objects.using(alias).filter(conversation_id__in=batch)
    tools = calls.exclude(tools_digest="").values("tools_digest")
    named = set(
        calls.filter(~Q(system_prompt_digest="") | ~Q(summary_digest=""))
        .order_by()
        .values_list("conversation_id", flat=True)
        .distinct()
    )
    calls.exclude(system_prompt_digest="").update(system_prompt_digest=empty)
    calls.exclude(summary_digest="").update(summary_digest=empty)
    texts = PromptText.objects.using(alias).filter(conversation_id__in=batch)
    texts.exclude(digest__in=tools).exclude(digest=empty).delete()
    PromptText.objects.using(alias).bulk_create(
        [PromptText(conversation_id=pk, digest=empty, text="") for pk in sorted(named)], ignore_conflicts=True
    )


def _blank_compat_state(alias: str, batch: list[int]) -> None:
    """Remove the words the compat memories keep in the conversations' metadata
    (``STATE_KEY``'s ``STATE_WORD_KEYS``: a summary of the trimmed messages); the rest of
    their state (how far the summary reaches) stays, as the other metadata does."""
    rows = Conversation.objects.using(alias).filter(pk__in=batch, metadata__has_key=STATE_KEY)
    changed = []
    for conversation in rows.only("pk", "metadata"):
        state = conversation.metadata.get(STATE_KEY)
        if isinstance(state, dict) and any(key in state for key in STATE_WORD_KEYS):
            conversation.metadata[STATE_KEY] = {k: v for k, v in state.items() if k not in STATE_WORD_KEYS}
            changed.append(conversation)
    Conversation.objects.using(alias).bulk_update(changed, ["metadata"])


def _blank(alias: str, batch: list[int], now: datetime) -> dict[str, int]:
    """Blank the content of the conversations in ``batch`` (locked by the caller)."""
    messages = Message.objects.using(alias).filter(conversation_id__in=batch)
    embeddings, _ = MessageEmbedding.objects.using(alias).filter(message__conversation_id__in=batch).delete()
    blanked = messages.update(
        content=Case(When(content__isnull=True, then=Value(None)), default=Value("")), parts=None
    )
    # tool call arguments, and the words kept in metadata (thinking blocks, adapters' copies)
    with_words = messages.filter(~Q(tool_calls=[]) | Q(metadata__has_any_keys=WORD_KEYS)).order_by("pk")
    last = 0
    while True:
        page = list(with_words.filter(pk__gt=last).only("pk", "tool_calls", "metadata")[:TOOL_CALL_PAGE])
        if not page:
            break
        for message in page:
            message.tool_calls = [{**call, "arguments": {}} for call in message.tool_calls or ()]
            if isinstance(message.metadata, dict):
                for key in WORD_KEYS:
                    message.metadata.pop(key, None)
        Message.objects.using(alias).bulk_update(page, ["tool_calls", "metadata"])
        last = page[-1].pk
    summaries = Summary.objects.using(alias).filter(conversation_id__in=batch).update(text="")
    _blank_compat_state(alias, batch)
    _blank_recorded_texts(alias, batch)
    # copies of the blanked words in other conversations' recorded calls go too
    owners = (
        Conversation.objects.using(alias).filter(pk__in=batch, owner__isnull=False).values_list("owner_id")
    )
    signals.memory_deleted.send(
        Conversation,
        using=alias,
        owner_ids=sorted({o for (o,) in owners}),
        conversation_ids=batch,
        kept=True,
    )
    # ``update()`` leaves ``updated_at`` alone: blanking is not activity.
    conversations = Conversation.objects.using(alias).filter(pk__in=batch).update(content_purged_at=now)
    return {
        "conversations": conversations,
        "messages": blanked,
        "summaries": summaries,
        "message_embeddings": embeddings,
    }
