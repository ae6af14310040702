"""Conversations, and the document that imports one (``agentmemory.transfer``)."""

from __future__ import annotations

import re
from typing import Any

from django.db import models
from django.utils import timezone
from rest_framework import serializers

from agentmemory.api.schema import extend_schema_field
from agentmemory.api.serializers.common import (
    AppModelSerializer,
    BoundedListField,
    JSONObjectField,
    StrictInputMixin,
    StrictTextField,
)
from agentmemory.api.serializers.summaries import SummarySerializer
from agentmemory.exceptions import ConversationNotFound
from agentmemory.models import Conversation
from agentmemory.transfer import row_schema
from agentmemory.validation import json_problem


class ConversationSerializer(StrictInputMixin, AppModelSerializer):
    """A conversation; the id is the public ``uuid``. Counters are maintained by the store:
    a body that sets one (or any read-only or unknown field) is a 400 naming it."""

    metadata = JSONObjectField(required=False, help_text="Your own JSON object (default {}).")
    #: text columns take strings only, of text storage accepts (DRF's CharField would turn a
    #: number into text)
    serializer_field_mapping = {
        **AppModelSerializer.serializer_field_mapping,
        models.CharField: StrictTextField,
    }

    class Meta:
        model = Conversation
        fields: tuple[str, ...] = (
            "uuid",
            "agent_key",
            "title",
            "metadata",
            "message_count",
            "human_message_count",
            "stored_tokens",
            "last_seq",
            "created_at",
            "updated_at",
        )
        read_only_fields: tuple[str, ...] = (
            "uuid",
            "message_count",
            "human_message_count",
            "stored_tokens",
            "last_seq",
            "created_at",
            "updated_at",
        )

    def validate_metadata(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object.")
        problem = json_problem(value)
        if problem:
            raise serializers.ValidationError(f"The value {problem}.")
        return value

    def update(self, instance: Conversation, validated_data: dict[str, Any]) -> Conversation:
        """Write the edited columns only (a full ``save()`` would write back the counters
        read before a concurrent append, corrupting ``last_seq`` and the message counts).

        Raises:
            ConversationNotFound: the conversation was deleted since it was read (a save of
                the gone row raised Django's ``DatabaseError``, a 500).
        """
        for name, value in validated_data.items():
            setattr(instance, name, value)
        instance.updated_at = timezone.now()
        changed = type(instance)._base_manager.using(instance._state.db).filter(pk=instance.pk)
        if not changed.update(**validated_data, updated_at=instance.updated_at):
            raise ConversationNotFound(f"conversation {instance.pk} does not exist (any more)")
        return instance


class ConversationUpdateSerializer(ConversationSerializer):
    """Partial update: ``title`` and ``metadata`` only (``agent_key`` is fixed at creation)."""

    class Meta(ConversationSerializer.Meta):
        read_only_fields = (*ConversationSerializer.Meta.read_only_fields, "agent_key")


class ConversationDetailSerializer(ConversationSerializer):
    """A conversation with its current summary embedded (``null`` before the first compaction,
    and where the stored ``summary_id`` names another conversation's summary, written by
    hand: ``Conversation.own_summary``; its ``/context/`` answers 409 then). One item: its
    answer is within ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, or this item alone when it is
    larger (as a page holds such an item alone)."""

    summary = SummarySerializer(source="own_summary", read_only=True, allow_null=True)

    class Meta(ConversationSerializer.Meta):
        fields = (*ConversationSerializer.Meta.fields, "summary")


#: the smallest document import takes: one conversation with one message
IMPORT_EXAMPLE = {
    "format": "agentmemory.conversation",
    "version": 1,
    "conversation": {"agent_key": "support", "title": "imported", "metadata": {}},
    "messages": [
        {
            "seq": 1,
            "role": "human",
            "content": "Where is order 7?",
            "tool_call_id": "",
            "name": "",
            "token_count": 9,
            "token_counter": "approx",
        }
    ],
    "summaries": [],
}


@extend_schema_field(row_schema("conversation"))
class _ConversationRowField(JSONObjectField):
    """The conversation row of an import document (its schema: ``transfer.row_schema``)."""


@extend_schema_field(row_schema("message"))
class _MessageRowField(JSONObjectField):
    """A message row of an import document."""


@extend_schema_field(row_schema("summary"))
class _SummaryRowField(JSONObjectField):
    """A summary row of an import document."""


class ImportDocumentSerializer(serializers.Serializer):
    """The document ``POST /conversations/import/`` takes: what ``GET .../export/`` returns
    (``agentmemory.transfer``). The rows are objects of the stored columns; their values and
    how they fit together (seqs, counters, tool exchanges, summary spans) are checked by
    ``import_conversation``, which names the offending part in ``path``."""

    format = serializers.ChoiceField(choices=["agentmemory.conversation"])
    version = serializers.ChoiceField(choices=[1])
    exported_at = StrictTextField(
        required=False, allow_blank=True, help_text="When it was exported (ISO 8601); not read."
    )
    conversation = _ConversationRowField(help_text="The conversation's columns and counters.")
    messages = BoundedListField(child=_MessageRowField(), help_text="Its messages, in seq order.")
    summaries = BoundedListField(child=_SummaryRowField(), required=False)

    @staticmethod
    def error_path(field: str) -> str:
        """A dotted error path (``messages.1``) in the notation of
        ``InvalidConversationData.path`` (``messages[1]``)."""
        return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", field)
