"""Recorded model calls, their windows as sent, and usage (tokens) and cost."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentmemory.api.serializers.common import FiniteFloatField
from agentmemory.api.serializers.windows import ContextWindowSerializer
from agentmemory.calls import recorded_memory_tokens
from agentmemory.models import ModelCall
from agentmemory.usage import UsageTotals


class ModelCallSerializer(serializers.ModelSerializer):
    """One recorded model call: what it was, its window's seq range and parts (tokens), its
    usage (tokens; ``usage_source`` "provider" or "counted")."""

    id = serializers.UUIDField(source="uuid", read_only=True)
    message_seq = serializers.SerializerMethodField()
    summary_through_seq = serializers.SerializerMethodField()
    memory_tokens = serializers.SerializerMethodField()
    #: seconds; null for a stored value that is not a number (PostgreSQL's float column
    #: takes NaN and infinities)
    latency = FiniteFloatField(read_only=True, allow_null=True)

    class Meta:
        model = ModelCall
        fields = (
            "id",
            "kind",
            "created_at",
            "agent_key",
            "model",
            "round",
            "finish_reason",
            "latency",
            "message_seq",
            "max_tokens",
            "first_seq",
            "last_seq",
            "summary_through_seq",
            "system_tokens",
            "knowledge_tokens",
            "summary_tokens",
            "memory_tokens",
            "history_tokens",
            "tools_tokens",
            "input_tokens",
            "cached_input_tokens",
            "cache_creation_input_tokens",
            "output_tokens",
            "usage_source",
            "window_changes",
        )
        read_only_fields = fields

    def get_message_seq(self, obj: ModelCall) -> int | None:
        """Seq of the AI message the call produced (chat calls)."""
        return obj.message.seq if obj.message_id and obj.message else None

    def get_memory_tokens(self, obj: ModelCall) -> int:
        """Tokens of the memory block the call sent (0 when none)."""
        return recorded_memory_tokens(obj)

    def get_summary_through_seq(self, obj: ModelCall) -> int | None:
        """Last seq covered by the summary the call sent."""
        return obj.summary.through_seq if obj.summary_id and obj.summary else None


class RecordedWindowSerializer(ContextWindowSerializer):
    """A recorded chat call's window, in the shape of the context endpoint, with the tool
    declarations sent (``tools``). Its ``memory`` is null: the block sent is the message whose
    ``part`` is ``memory`` and ``memory_tokens`` its tokens (a recorded call keeps the block's
    text, not its items)."""

    tools = serializers.SerializerMethodField()
    left_out = serializers.SerializerMethodField(
        help_text="How many of the oldest history messages the call sent are not in `messages`, "
        "so that the answer stays within AGENTMEMORY['API_MAX_RESPONSE_BYTES'] (0: the whole "
        "window). The kept ones start on a human message; the newest turn is always sent. The "
        "token counts and seqs are the call's."
    )

    def get_tools(self, window: Any) -> list[dict[str, Any]]:
        return list(self.context.get("tools") or [])

    def get_left_out(self, window: Any) -> int:
        return int(self.context.get("left_out", 0))


class ModelUsageSerializer(serializers.Serializer):
    model = serializers.CharField()
    calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField()
    cache_creation_input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    counted_calls = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=30, decimal_places=12, allow_null=True, coerce_to_string=True)


class UsageSerializer(serializers.Serializer):
    """Usage (tokens) and cost (a decimal string, in the currency of ``MODEL_PRICES``, per
    its per-million-token prices) of a set of calls; ``unpriced_models`` are left out of
    ``cost``, which is ``null`` when calls were made and none of them was priced."""

    calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField()
    cache_creation_input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    counted_calls = serializers.IntegerField()
    cost = serializers.DecimalField(
        max_digits=30,
        decimal_places=12,
        allow_null=True,
        coerce_to_string=True,
        help_text="Cost of the priced models; null when no call in the set was priced.",
    )
    unpriced_models = serializers.ListField(child=serializers.CharField())
    by_model = ModelUsageSerializer(many=True)


def usage_data(totals: UsageTotals) -> dict[str, Any]:
    return UsageSerializer(totals).data  # type: ignore[return-value]
