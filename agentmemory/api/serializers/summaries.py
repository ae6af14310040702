"""Summaries of a conversation's messages."""

from __future__ import annotations

from agentmemory.api.serializers.common import AppModelSerializer
from agentmemory.models import Summary


class SummarySerializer(AppModelSerializer):
    """A summary of messages ``first_seq..through_seq``."""

    class Meta:
        model = Summary
        fields = (
            "first_seq",
            "through_seq",
            "text",
            "token_count",
            "human_messages_covered",
            "tokens_covered",
            "model",
            "prompt_version",
            "input_tokens",
            "output_tokens",
            "created_at",
        )
        read_only_fields = fields
