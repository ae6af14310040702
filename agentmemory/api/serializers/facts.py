"""Long-term facts: a stored fact, a fact to remember or change, and what storing it did."""

from __future__ import annotations

from rest_framework import serializers

from agentmemory.api.schema import extend_schema_field
from agentmemory.api.serializers.common import (
    AppModelSerializer,
    FiniteFloatField,
    NonBlankTextField,
    SingleLineTextField,
    StrictBooleanField,
    StrictInputMixin,
    StrictTextField,
    StrictUUIDField,
    _SettingLimits,
)
from agentmemory.knowledge import MAX_TTL_SECONDS
from agentmemory.models import Fact


class FactSerializer(AppModelSerializer):
    """A stored fact; ``id`` is its public ``uuid``. ``superseded_by`` is the id of the fact
    that replaced it (history), or null for a fact in force; ``source_conversation`` and
    ``source_seq`` name the message it came from, when there is one.

    One item: an answer about one fact is within ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, or
    this item alone when it is larger (as a page holds such an item alone).

    ``superseded_by`` reads the ``superseded_by_uuid`` annotation when the queryset has it
    (``FactViewSet``), else the successor row (one query per superseded fact)."""

    id = serializers.UUIDField(source="uuid", read_only=True, help_text="The fact's public id.")
    superseded_by = serializers.SerializerMethodField(
        help_text="Id of the fact that replaced this one; null for a fact in force."
    )
    source_conversation = serializers.UUIDField(
        source="source_message.conversation.uuid", read_only=True, allow_null=True, default=None
    )
    source_seq = serializers.IntegerField(
        source="source_message.seq", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = Fact
        fields: tuple[str, ...] = (
            "id",
            "agent_key",
            "namespace",
            "kind",
            "content",
            "category",
            "importance",
            "persistent",
            "expires_at",
            "superseded_by",
            "source_conversation",
            "source_seq",
            "metadata",
            "created_at",
            "updated_at",
            "last_recalled_at",
            "recall_count",
        )
        read_only_fields: tuple[str, ...] = fields

    @extend_schema_field({"type": "string", "format": "uuid", "nullable": True})
    def get_superseded_by(self, fact: Fact) -> str | None:
        if fact.superseded_by_id is None:
            return None
        value = getattr(fact, "superseded_by_uuid", None)
        if value is None:
            value = fact.superseded_by.uuid if fact.superseded_by else None
        return str(value) if value is not None else None


class FactWriteSerializer(_SettingLimits, StrictInputMixin, serializers.Serializer):
    """A fact to remember (``KnowledgeMemory.store()``), or on PATCH the changes to a fact:
    a changed fact is stored as a new fact that supersedes the old one."""

    setting_limits = {"content": "MAX_FACT_CHARS"}

    content = NonBlankTextField(help_text="The fact, 1 to AGENTMEMORY['MAX_FACT_CHARS'] characters.")
    category = SingleLineTextField(max_length=100, default="general", initial="general")
    persistent = StrictBooleanField(
        default=False, help_text="Kept until forgotten (true) or a recent entry that ages out (false)."
    )
    importance = FiniteFloatField(
        min_value=0.0, max_value=1.0, required=False, allow_null=True, help_text="0.0-1.0 (default 0.5)."
    )
    ttl = FiniteFloatField(
        min_value=0.001,
        max_value=float(MAX_TTL_SECONDS),
        required=False,
        allow_null=True,
        help_text="Seconds until the fact expires, at most 100 years; null: no expiry.",
    )
    # scope strings are kept as sent, as everywhere else (white space included): look-alike
    # scopes are different scopes
    agent_key = StrictTextField(max_length=100, default="", allow_blank=True, help_text="Exact scope.")
    namespace = StrictTextField(max_length=200, default="", allow_blank=True, help_text="Exact scope.")
    supersedes = StrictUUIDField(
        required=False,
        allow_null=True,
        help_text="Id of a fact in force of the same scope that this one replaces.",
    )


class FactUpdateSerializer(FactWriteSerializer):
    """PATCH of a fact: any of content, category, persistent, importance and ttl; the scope of
    a fact is fixed."""

    agent_key = None  # type: ignore[assignment]
    namespace = None  # type: ignore[assignment]
    supersedes = None  # type: ignore[assignment]


class RememberedSerializer(serializers.Serializer):
    """What storing a fact did: ``created`` (a new fact), ``duplicate`` (the same content was
    already in force: nothing written), ``updated`` (the same content, with its persistence,
    importance or expiry changed), ``superseded`` (a new fact replaced ``superseded_ids``, the
    ids of the facts that became its history)."""

    action = serializers.ChoiceField(choices=["created", "duplicate", "updated", "superseded"])
    fact = FactSerializer()
    superseded_ids = serializers.ListField(child=serializers.UUIDField())
