"""The query vocabulary of the models (``agentmemory.models``): the querysets their managers
are made from (``Conversation.objects``, ``Message.objects``, ``Fact.objects``,
``ModelCall.objects``), with the deletes that take their row locks in one order
(docs/architecture.md, "Lock order"). ORM only: nothing here forwards to ``agentmemory.store``.

``agentmemory.models`` imports this module to make its managers, so the models a method needs
are taken from the app registry when a query runs (``_models``), never imported back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import connections, models, transaction
from django.db.models import Q
from django.utils import timezone

from agentmemory.signals import memory_deleted

if TYPE_CHECKING:
    # named as strings in the querysets' type arguments
    from agentmemory.models import Conversation, Fact, Message, ModelCall  # noqa: F401


class Total(models.Sum):
    """``SUM``, except on SQLite, whose ``SUM`` of integers raises "integer overflow" past
    2**63 - 1, a bound two rows reach there (a positive integer column holds up to that
    much on SQLite): its ``TOTAL``, a float, exact up to 2**53. PostgreSQL sums integer
    columns as a bigint and bigint columns as a numeric, which never overflow here. Every
    sum over stored counters reads through it (token usage, the erasure counts,
    ``repair_conversation``): a stored value must never make a read fail."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, function="TOTAL", **extra_context)


def _models(*names: str) -> tuple[Any, ...]:
    """The app's models named: ``models.py`` imports this module for its managers, so the
    querysets reach the models through the app registry (loaded by the time a query runs),
    as Django's own related managers do, not by importing ``agentmemory.models`` back."""
    return tuple(apps.get_model("agentmemory", name) for name in names)


class ConversationQuerySet(models.QuerySet["Conversation"]):
    def for_user(self, user: Any) -> ConversationQuerySet:
        """Conversations owned by ``user`` (none for an anonymous user)."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(owner=user)

    def for_agent(self, agent_key: str) -> ConversationQuerySet:
        return self.filter(agent_key=agent_key)

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete the conversations with their messages and summaries, after taking their
        row locks in ascending pk (docs/architecture.md, "Lock order"): an append in flight
        finishes first, a later one finds the conversation gone (``ConversationNotFound``)
        instead of failing the delete with a foreign-key error at commit.

        Messages are deleted with one statement per batch of conversations rather than loaded
        one object each (a conversation may hold 100,000 of them); rows that point at a message
        are deleted or unlinked first, as their foreign keys say.
        """
        Conversation, Fact, Message = _models("Conversation", "Fact", "Message")
        with transaction.atomic(using=self.db):
            locked = self.model._default_manager.using(self.db).select_for_update().order_by("pk")
            rows = list(locked.filter(pk__in=self.values("pk")).values_list("pk", "owner_id"))
            pks = [pk for pk, _owner in rows]
            if pks and (features := connections[self.db].features).has_select_for_update:
                # the facts quoting its messages, in ascending id: one UPDATE sets their
                # source_message to NULL in scan order (docs/architecture.md, "Lock order")
                quoted = Message.objects.using(self.db).filter(conversation_id__in=pks).values("pk")
                quoting = (
                    Fact._base_manager.using(self.db).filter(source_message_id__in=quoted).order_by("pk")
                )
                list(quoting.select_for_update(no_key=features.has_select_for_no_key_update).values("pk"))
            bulk = _delete_messages_in_bulk(self.db, pks)
            count, per_model = super().delete()
            per_model = dict(per_model)
            for label, n in bulk.items():
                per_model[label] = per_model.get(label, 0) + n
                count += n
            owners = sorted({owner for _pk, owner in rows if owner is not None})
            if owners:
                memory_deleted.send(Conversation, using=self.db, owner_ids=owners, conversation_ids=pks)
            return count, per_model


#: conversations whose messages one bulk delete statement covers
_DELETE_BATCH = 100


def _delete_messages_in_bulk(using: str, conversation_ids: list[int]) -> dict[str, int]:
    """Delete the messages of ``conversation_ids`` with one statement per batch, after
    deleting (``CASCADE``) or unlinking (``SET_NULL``) the rows that reference them. Returns
    the rows deleted by model label (``{"agentmemory.Message": n, ...}``); empty (leaving
    them to Django's collector) when a receiver listens to message deletes or a reference has
    another ``on_delete``, which only the collector honours."""
    (Message,) = _models("Message")
    deleted: dict[str, int] = {}
    if not conversation_ids:
        return deleted
    if models.signals.pre_delete.has_listeners(Message) or models.signals.post_delete.has_listeners(Message):
        return deleted
    references = Message._meta.related_objects
    if any(
        not rel.one_to_many or rel.on_delete not in (models.CASCADE, models.SET_NULL) for rel in references
    ):
        return deleted
    for start in range(0, len(conversation_ids), _DELETE_BATCH):
        batch = conversation_ids[start : start + _DELETE_BATCH]
        rows = Message.objects.using(using).filter(conversation_id__in=batch)
        for rel in references:
            linked = rel.related_model._base_manager.using(using).filter(
                **{f"{rel.field.name}__in": rows.values("pk")}
            )
            if rel.on_delete is models.CASCADE:
                for label, n in linked.delete()[1].items():
                    deleted[label] = deleted.get(label, 0) + n
            else:
                linked.update(**{rel.field.name: None})
        label = Message._meta.label
        deleted[label] = deleted.get(label, 0) + rows._raw_delete(using)
    return {label: n for label, n in deleted.items() if n}


class MessageQuerySet(models.QuerySet["Message"]):
    def in_order(self) -> MessageQuerySet:
        return self.order_by("seq")

    def after(self, seq: int) -> MessageQuerySet:
        return self.filter(seq__gt=seq)


class FactQuerySet(models.QuerySet["Fact"]):
    def in_scope(self, owner_id: int, agent_key: str = "", namespace: str = "") -> FactQuerySet:
        """Facts of exactly this owner, agent key and namespace (equality, never a pattern:
        ``_`` and ``%`` are ordinary characters)."""
        return self.filter(owner_id=owner_id, agent_key=agent_key, namespace=namespace)

    def delete(self) -> tuple[int, dict[str, int]]:
        """Delete the facts with their history (``superseded_by`` cascades) and embeddings;
        sends ``memory_deleted`` with every fact id gone, in the same transaction. All are locked
        in ascending pk first: the collector locks in scan order (docs/architecture.md, "Lock order")."""
        (Fact,) = _models("Fact")
        facts = Fact._base_manager.using(self.db)
        rows = dict(facts.filter(pk__in=self.values("pk")).values_list("pk", "owner_id"))
        if not rows:
            return 0, {}
        with transaction.atomic(using=self.db):
            step = set(rows)
            while step:  # the history each deleted fact takes with it
                older = dict(facts.filter(superseded_by_id__in=step).values_list("pk", "owner_id"))
                step = set(older) - set(rows)
                rows.update(older)
            owners, ids = sorted(set(rows.values())), sorted(rows)
            list(facts.filter(pk__in=ids).order_by("pk").select_for_update().values_list("pk"))
            result = super().delete()
            if memory_deleted.has_listeners(Fact):
                memory_deleted.send(Fact, using=self.db, owner_ids=owners, fact_ids=ids)
            return result

    def live(self, now: Any = None) -> FactQuerySet:
        """Facts in default recall: not superseded and not expired at ``now`` (query time)."""
        now = now or timezone.now()
        return self.filter(superseded_by__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ModelCallQuerySet(models.QuerySet["ModelCall"]):
    def for_user(self, user: Any) -> ModelCallQuerySet:
        """Calls billed to ``user`` (none for an anonymous user)."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(owner=user)
