"""Erasing everything agentmemory stores of one user, and deleting users in bulk.

``forget_user(user)`` erases a user's memory and keeps the account: conversations with their
messages, tool calls, summaries, message embeddings and full-text index entries, then
long-term facts with their history and embeddings, then the rows of any other agentmemory
model that points at the user (usage records). It returns an ``ErasureReport`` of the counts.

Deleting the user itself (``user.delete()``, a queryset delete, the admin) goes through
``delete_owned_conversations``, a ``pre_delete`` receiver for the user model: the
conversation's owner key is ``on_delete=DO_NOTHING``, so Django's collector does not load every
message of the user before deleting it (160,000 messages took 53 s on PostgreSQL that way);
the receiver deletes the conversations in bulk inside the user's delete transaction instead.

Both take each conversation's row lock before deleting it, as appends do: an append in flight
finishes first, and a later one fails with ``ConversationNotFound`` ("conversation ... does not
exist") instead of failing the delete with a foreign-key error. A compaction that is running
finds the conversation gone when it comes to store its summary and stores nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connections, models, router, transaction
from django.db.models import Value
from django.db.models.functions import Cast, Concat

from agentmemory.managers import Total
from agentmemory.models import (
    Conversation,
    Fact,
    FactEmbedding,
    Message,
    MessageEmbedding,
    ModelCall,
    Summary,
)
from agentmemory.recall.fulltext import drop_removed_words
from agentmemory.validation import MAX_ID

__all__ = [
    "ErasureReport",
    "delete_owned_conversations",
    "erasure_counts",
    "forget_user",
    "scrub_admin_log",
]

#: at most this many conversations are deleted in one transaction by ``forget_user``
CONVERSATION_BATCH = 50
#: ... and at most about this many messages (a larger single conversation is one batch)
MESSAGE_BATCH = 50_000
#: facts deleted in one transaction by ``forget_user``
FACT_BATCH = 500


@dataclass(frozen=True)
class ErasureReport:
    """What ``forget_user`` deleted (row counts).

    Attributes:
        user_id: primary key of the user whose memory was erased.
        conversations, messages, summaries: conversation rows, their stored messages (tool
            calls and results included) and summaries.
        message_embeddings, fact_embeddings: stored vectors of the user's messages and facts.
        facts: long-term facts, superseded history included.
        fulltext_entries: full-text index entries removed with those messages and facts (on
            SQLite the rows of the FTS5 tables, on PostgreSQL the rows' ``search_vector``).
        other: rows of other models deleted with them (usage records...), by model label.
    """

    user_id: int
    conversations: int = 0
    messages: int = 0
    summaries: int = 0
    message_embeddings: int = 0
    facts: int = 0
    fact_embeddings: int = 0
    fulltext_entries: int = 0
    other: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rows deleted in all (index entries not counted twice: they are not rows)."""
        named = (
            self.conversations
            + self.messages
            + self.summaries
            + self.message_embeddings
            + self.facts
            + self.fact_embeddings
        )
        return named + sum(self.other.values())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_NAMED = {
    Conversation._meta.label: "conversations",
    Message._meta.label: "messages",
    Summary._meta.label: "summaries",
    MessageEmbedding._meta.label: "message_embeddings",
    Fact._meta.label: "facts",
    FactEmbedding._meta.label: "fact_embeddings",
}


def delete_facts(facts: models.QuerySet[Fact], alias: str) -> Iterable[dict[str, int]]:
    """Delete ``facts`` in transactions of ``FACT_BATCH`` facts, yielding the rows deleted per
    model label of each batch. A fact's history (the facts it superseded) and its embeddings
    go with it, whatever the history's own columns say: the collector follows
    ``superseded_by``."""
    while True:
        with transaction.atomic(using=alias):
            ids = list(facts.order_by("pk").values_list("pk", flat=True)[:FACT_BATCH])
            if not ids:
                return
            _total, per_model = Fact.objects.using(alias).filter(pk__in=ids).delete()
        yield per_model


class _Tally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, per_model: dict[str, int]) -> None:
        for label, n in per_model.items():
            if n:
                self.counts[label] = self.counts.get(label, 0) + n

    def report(self, user_id: int, fulltext: int) -> ErasureReport:
        named = {_NAMED[label]: n for label, n in self.counts.items() if label in _NAMED}
        other = {label: n for label, n in self.counts.items() if label not in _NAMED}
        return ErasureReport(user_id=user_id, fulltext_entries=fulltext, other=other, **named)


def _user_id(user: Any) -> int:
    pk = getattr(user, "pk", user)
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise TypeError(f"user must be a user instance or a primary key, not {type(user).__name__}")
    if not -MAX_ID - 1 <= pk <= MAX_ID:
        # no database holds such a key (SQLite's driver raised OverflowError in the first query)
        raise ValueError(f"a user's primary key is a 64-bit integer, not {pk}")
    return pk


def _indexed(queryset: Any) -> int:
    """Rows of ``queryset`` whose content the full-text index holds (non-empty content)."""
    return int(queryset.exclude(content__isnull=True).exclude(content="").count())


def forget_user(user: Any, *, using: str | None = None) -> ErasureReport:
    """Erase everything agentmemory stores of ``user`` and keep the account.

    Deletes, in this order: the user's recorded model calls; the user's conversations with
    their messages, summaries, message embeddings and full-text entries (in batches of at
    most ``CONVERSATION_BATCH`` conversations or about ``MESSAGE_BATCH`` messages, one transaction each, each
    conversation under its row lock); the user's long-term facts with their superseded
    history, embeddings and full-text entries (batches of ``FACT_BATCH``); the rows of any
    other agentmemory model with a foreign key to the user model (deleted, or unlinked where
    that key is ``SET_NULL``). Conversations created while it runs are erased too. Facts of
    other users that name one of these messages as their source keep the fact and lose the
    link.

    Safe while the user's conversations receive appends: an append waits for the
    conversation's lock and then fails with ``ConversationNotFound``; nothing is left
    half-deleted. Afterwards no query, API call, search (``search_messages``,
    ``KnowledgeMemory.recall``) or export finds anything of the user.

    Args:
        user: a user instance or its primary key.
        using: the database alias; default the one the routers choose for writing
            ``Conversation``.

    Returns:
        An ``ErasureReport`` with the counts (all zero for a user with nothing stored).

    Raises:
        TypeError: ``user`` is neither a user nor an integer primary key.
        ValueError: a primary key past 64 bits, which no user can have.
    """
    user_id = _user_id(user)
    alias = using or router.db_for_write(Conversation)
    tally = _Tally()
    fulltext = 0

    # The user's recorded model calls first: the conversations' deletes then find none whose
    # copies of deleted text they would have to replace (``redact_recorded_copies``).
    with transaction.atomic(using=alias):
        tally.add(ModelCall.objects.using(alias).filter(owner_id=user_id).delete()[1])
    owned = Conversation.objects.using(alias).filter(owner_id=user_id)
    while True:
        with transaction.atomic(using=alias):
            batch = _next_batch(owned)
            if not batch:
                break
            fulltext += _indexed(Message.objects.using(alias).filter(conversation_id__in=batch))
            _total, per_model = Conversation.objects.using(alias).filter(pk__in=batch).delete()
            tally.add(per_model)

    for per_model in delete_facts(Fact.objects.using(alias).filter(owner_id=user_id), alias):
        fulltext += per_model.get(Fact._meta.label, 0)
        tally.add(per_model)

    for model, fk in _other_user_keys():
        rows = model._base_manager.using(alias).filter(**{fk.name: user_id})
        with transaction.atomic(using=alias):
            if fk.remote_field.on_delete is models.SET_NULL:
                rows.update(**{fk.name: None})
            else:
                tally.add(rows.delete()[1])
    if fulltext:
        # SQLite's full-text index keeps the erased words in its segments until merged
        drop_removed_words(alias)
    return tally.report(user_id, fulltext)


def _next_batch(owned: Any) -> list[int]:
    """Lock and return the next conversations to delete: at most ``CONVERSATION_BATCH``, and
    no more than about ``MESSAGE_BATCH`` messages (at least one conversation)."""
    rows = list(
        owned.select_for_update().order_by("pk").values_list("pk", "message_count")[:CONVERSATION_BATCH]
    )
    batch: list[int] = []
    messages = 0
    for pk, count in rows:
        if batch and messages + count > MESSAGE_BATCH:
            break
        batch.append(pk)
        messages += count
    return batch


def _other_user_keys() -> list[tuple[type[models.Model], models.ForeignKey]]:
    """(model, foreign key) pairs of agentmemory models, other than conversations and facts,
    that point at the user model."""
    user_model = get_user_model()
    found = []
    for model in apps.get_app_config("agentmemory").get_models():
        if model in (Conversation, Fact):
            continue
        for f in model._meta.get_fields():
            if isinstance(f, models.ForeignKey) and f.related_model is user_model:
                found.append((model, f))
    return found


def erasure_counts(users: Iterable[Any], *, using: str | None = None) -> dict[str, int]:
    """What deleting (or erasing) ``users`` would delete of agentmemory's bulk rows, counted
    without loading them (a handful of queries): ``{"conversations": n, "messages": n,
    "summaries": n, "facts": n}`` (verbose plural names; zero counts left out). Messages are
    the conversations' stored counters. Used by the admin's delete confirmation page and
    ``forget_user --dry-run``."""
    ids = [_user_id(u) for u in users]
    alias = using or router.db_for_read(Conversation)
    conversations = Conversation.objects.using(alias).filter(owner_id__in=ids)
    totals = conversations.aggregate(n=models.Count("pk"), messages=Total("message_count"))
    facts = Fact.objects.using(alias).filter(owner_id__in=ids)
    counts = {
        str(Conversation._meta.verbose_name_plural): totals["n"] or 0,
        str(Message._meta.verbose_name_plural): int(totals["messages"] or 0),
        str(Summary._meta.verbose_name_plural): Summary.objects.using(alias)
        .filter(conversation__owner_id__in=ids)
        .count(),
        str(Fact._meta.verbose_name_plural): facts.count(),
    }
    return {name: n for name, n in counts.items() if n}


def delete_owned_conversations(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``pre_delete`` receiver for the user model (connected in ``AgentMemoryConfig.ready``):
    delete the conversations ``instance`` owns, with their messages, summaries and
    embeddings, inside the user's delete transaction, on the database the routers choose for
    conversations. The user row is locked first (PostgreSQL), so no conversation can be
    created for the user between this delete and the user's; each conversation is locked
    before its delete (see ``agentmemory.managers.ConversationQuerySet.delete``). Messages
    are deleted with one statement per batch of conversations, never loaded.

    The user's facts (with their history and embeddings) are deleted here too, after the
    conversations: Django's collector gathered them before this receiver took the row, so a
    fact stored meanwhile (a write waits for the row, then commits first) was left to fail
    the user's delete with a foreign-key error. Lock order (docs/architecture.md): the user
    row, then the conversations, then the facts, each table locked in ascending id before
    anything is deleted; the collector's scans met the facts in another order and
    deadlocked with a forget or the recall counters."""
    if instance.pk is None:
        return
    alias = router.db_for_write(Conversation)
    with transaction.atomic(using=alias):
        user_model = type(instance)
        if router.db_for_write(user_model, instance=instance) == alias:
            list(
                user_model._base_manager.using(alias).select_for_update().filter(pk=instance.pk).values("pk")
            )
        # the user's recorded calls go with the user: deleted first, no copy in them is looked for
        ModelCall.objects.using(alias).filter(owner_id=instance.pk).delete()
        owned = Conversation.objects.using(alias).filter(owner_id=instance.pk)
        facts = Fact.objects.using(alias).filter(owner_id=instance.pk)
        same_database = router.db_for_write(Fact) == alias
        if connections[alias].features.has_select_for_update:
            list(owned.select_for_update().order_by("pk").values_list("pk", flat=True))
            if same_database:
                list(facts.select_for_update().order_by("pk").values_list("pk", flat=True))
        owned.delete()
        if same_database:
            facts.delete()


def scrub_admin_log(
    sender: Any = None,
    *,
    using: str,
    conversation_ids: Iterable[int] = (),
    fact_ids: Iterable[int] = (),
    **kwargs: Any,
) -> int:
    """``memory_deleted`` receiver (connected in ``AgentMemoryConfig.ready`` when
    ``django.contrib.admin`` is installed): the admin's log entries of deleted conversations
    and facts keep who did what and when, but no longer their text. The admin writes
    ``str(obj)`` into ``LogEntry.object_repr`` at each change: a conversation's title (a
    session id, an imported chat's name), a fact's category; ``forget_user``, the API, the
    retention commands and deleting the owner left those in the log, read by the admin's
    history pages and its "Recent actions". They become ``"<model> <pk> (deleted)"``.

    Conversations that still exist (``PersistentChatHistory.clear`` sends their ids too)
    keep their entries. Returns the entries changed."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    changed = 0
    for model, ids in ((Conversation, conversation_ids), (Fact, fact_ids)):
        pks = sorted(set(ids))
        if not pks:
            continue
        content_type = ContentType.objects.db_manager(using).get_for_model(model, for_concrete_model=False)
        label = f"{model._meta.model_name} "
        entries = LogEntry.objects.using(using).filter(
            content_type=content_type, object_id__in=[str(pk) for pk in pks]
        )
        if model is Conversation:
            # one statement: the rows still there are left out in it
            still_there = (
                Conversation.objects.using(using)
                .filter(pk__in=pks)
                .annotate(text_pk=Cast("pk", models.TextField()))
                .values("text_pk")
            )
            entries = entries.exclude(object_id__in=still_there)
        changed += entries.update(
            object_repr=Concat(
                Value(label), "object_id", Value(" (deleted)"), output_field=models.CharField()
            )
        )
    return changed
