"""Search hits: stored messages and facts, best first, within the answer's byte bound."""

from __future__ import annotations

from rest_framework import serializers

from agentmemory.api.serializers.common import StoredDateTimeField
from agentmemory.api.serializers.facts import FactSerializer


class MessageHitSerializer(serializers.Serializer):
    """A stored message found by search, with its conversation's uuid and its ``seq``."""

    conversation = serializers.UUIDField(source="conversation_uuid")
    seq = serializers.IntegerField()
    role = serializers.CharField()
    content = serializers.CharField()
    metadata = serializers.DictField()
    created_at = StoredDateTimeField()
    score = serializers.FloatField(help_text="Orders the hits of one search (higher is better).")
    relevance = serializers.FloatField(
        help_text=(
            "The message's own match, scaled to the best candidate's (0 to 1): 0 for a message "
            "found only because the messages next to it match (the question before an answer, "
            "the answer after a tool result; AGENTMEMORY['RECALL_NEIGHBOUR_WEIGHTS'])."
        )
    )


class FactHitSerializer(FactSerializer):
    """A fact found by search, with its score."""

    score = serializers.FloatField(help_text="Orders the hits of one search (higher is better).")

    class Meta(FactSerializer.Meta):
        fields = (*FactSerializer.Meta.fields, "score")
        read_only_fields = fields


class LeftOutSerializer(serializers.Serializer):
    """Hits of each kind left out to keep the answer within the byte bound."""

    messages = serializers.IntegerField(min_value=0)
    facts = serializers.IntegerField(min_value=0)


class SearchResultSerializer(serializers.Serializer):
    """Hits of one search, best first: messages of the requester's conversations and facts of
    the requested scope. The answer holds as many hits as fit in
    ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``, taken best first of each kind in turn (at least
    one); ``left_out`` counts the hits of each kind that did not fit."""

    query = serializers.CharField()
    messages = MessageHitSerializer(many=True)
    facts = FactHitSerializer(many=True)
    left_out = LeftOutSerializer(
        help_text="Hits found but left out, the worst of each kind, to keep the answer within "
        "AGENTMEMORY['API_MAX_RESPONSE_BYTES'] (ask for fewer with k, or narrow the search)."
    )
