"""Recorded model calls, their windows as sent, and usage (tokens) and cost."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentmemory.api.pagination import bounded_hits, json_size
from agentmemory.api.schema import extend_schema_field
from agentmemory.api.serializers.common import AppModelSerializer, FiniteFloatField
from agentmemory.api.serializers.windows import ContextWindowSerializer, _public_ids
from agentmemory.calls import recorded_knowledge_facts, recorded_memory, recorded_memory_tokens
from agentmemory.formats.changes import CHANGE_KINDS
from agentmemory.models import Conversation, Fact, ModelCall
from agentmemory.usage import UsageTotals


class ModelCallSerializer(AppModelSerializer):
    """One recorded model call: what it was, its window's seq range and parts (tokens), its
    usage (tokens; ``usage_source`` "provider" or "counted").

    ``window_changes`` is the record of how the window sent differed from storage, which
    grows with the window (a stub per result a tool's memory policy stubbed, the seqs of the
    exchanges left out, the memory block's items). With ``"response_budget"`` (bytes) in the
    context, a call whose answer would be larger keeps the entries of the record that fit,
    smallest first, and ``window_changes_left_out`` names the others (the window as sent,
    ``.../window/``, shows their effect)."""

    id = serializers.UUIDField(source="uuid", read_only=True)
    message_seq = serializers.SerializerMethodField()
    summary_through_seq = serializers.SerializerMethodField()
    memory_tokens = serializers.SerializerMethodField()
    #: seconds; null for a stored value that is not a number (PostgreSQL's float column
    #: takes NaN and infinities)
    latency = FiniteFloatField(read_only=True, allow_null=True)
    window_changes = serializers.JSONField(
        read_only=True,
        help_text="How the window sent differed from storage (left-out exchanges, cut and stubbed "
        "copies, placeholder results, the memory block, the provider adapter's changes); the "
        "entries named in window_changes_left_out are not in this answer.",
    )
    window_changes_left_out = serializers.SerializerMethodField(
        help_text="Keys of window_changes left out to keep the answer within "
        "AGENTMEMORY['API_MAX_RESPONSE_BYTES'] (empty when the record is whole)."
    )

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
            "window_changes_left_out",
        )
        read_only_fields = fields

    def to_representation(self, instance: ModelCall) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        budget = self.context.get("response_budget")
        changes = data.get("window_changes")
        if budget is None or not isinstance(changes, dict) or json_size(data) <= budget:
            return data
        room = budget - json_size({**data, "window_changes": {}, "window_changes_left_out": sorted(changes)})
        kept: dict[str, Any] = {}
        for key, size in sorted(((k, json_size({k: v})) for k, v in changes.items()), key=lambda e: e[1]):
            if size + 1 > room:
                break
            kept[key] = changes[key]
            room -= size + 1
        data["window_changes"] = {key: value for key, value in changes.items() if key in kept}
        data["window_changes_left_out"] = sorted(key for key in changes if key not in kept)
        return data

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_window_changes_left_out(self, obj: ModelCall) -> list[str]:
        return []

    def get_message_seq(self, obj: ModelCall) -> int | None:
        """Seq of the AI message the call produced (chat calls)."""
        return obj.message.seq if obj.message_id and obj.message else None

    def get_memory_tokens(self, obj: ModelCall) -> int:
        """Tokens of the memory block the call sent (0 when none)."""
        return recorded_memory_tokens(obj)

    def get_summary_through_seq(self, obj: ModelCall) -> int | None:
        """Last seq covered by the summary the call sent."""
        return obj.summary.through_seq if obj.summary_id and obj.summary else None


class ProviderChangeSerializer(serializers.Serializer):
    """One change the provider adapter made to the window's messages after the window was
    built, to meet the provider's per-request limits (docs/agents.md, "What a stored history
    sends"). ``messages`` already shows the message as sent; this says what changed and why."""

    message = serializers.IntegerField(
        allow_null=True,
        help_text="Position of the changed message in `messages` (format=native; 0-based); null "
        "for what is not a message (a tool declaration's cache breakpoint) or a message no longer "
        "in the window.",
    )
    seq = serializers.IntegerField(
        allow_null=True, help_text="Its stored seq; null for the system prompt, summary and memory block."
    )
    part = serializers.IntegerField(
        allow_null=True,
        help_text="Position of the changed part in the message's `parts` (0-based); null for its "
        "plain content.",
    )
    change = serializers.ChoiceField(
        choices=list(CHANGE_KINDS),
        help_text="image_placeholder, audio_placeholder, file_placeholder: the part went as its "
        "placeholder text ([image]); media_type_corrected: an image went with the media type its "
        "data shows (`sent`); content_cut: the text went cut, ending in the provider's cut marker "
        "(`kept` characters kept); cache_control_dropped, cache_ttl_shortened: a cache breakpoint "
        "was left out, or went with the default lifetime; error_text_added, empty_text_added: an "
        "empty error result or human message went with the text `sent`; "
        "trailing_whitespace_stripped: the final assistant text went without trailing whitespace.",
    )
    reason = serializers.CharField(help_text="Why: the provider's limit it met.")
    sent = serializers.CharField(allow_null=True, help_text="What went instead, where short; else null.")
    kept = serializers.IntegerField(
        allow_null=True, help_text="content_cut: characters kept before the cut marker; else null."
    )


class RecordedMemoryBlockSerializer(serializers.Serializer):
    """The memory block a recorded call sent: a record keeps the block's text, its tokens, how
    many items it held and what it quoted, not each item (the context endpoint's ``memory``
    lists them)."""

    text = serializers.CharField(
        help_text="The block as the model read it (the message whose `part` is `memory`), or what "
        "replaced it once its words were removed (`removed`)."
    )
    tokens = serializers.IntegerField(help_text="What its message cost (tokens): memory_tokens.")
    item_count = serializers.IntegerField(help_text="How many recalled items it held.")
    removed = serializers.BooleanField(
        help_text="Its words were removed since: a conversation, message or fact it quoted was "
        "deleted, or the conversation's content was blanked. The figures stay what was sent."
    )
    conversations = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="Public ids of the conversations whose messages it quoted, those still stored.",
    )
    facts = serializers.ListField(
        child=serializers.UUIDField(), help_text="Public ids of the facts it quoted, those still stored."
    )


class RecordedWindowSerializer(ContextWindowSerializer):
    """A recorded chat call's window, in the shape of the context endpoint, with the tool
    declarations sent (``tools``). Its ``memory`` is the block sent as the record keeps it
    (``RecordedMemoryBlockSerializer``: text, tokens, how many items, what it quoted), null
    when the call sent none; ``system_tokens`` and ``knowledge_tokens`` split the system
    message as the call list does, so the parts add up to ``total_tokens``, every message
    sent. ``messages`` are as the provider received them, the adapter's changes
    (``provider_changes``) applied."""

    memory = serializers.SerializerMethodField(
        help_text="The memory block the call sent, or null: it sent none."
    )
    knowledge_facts = serializers.SerializerMethodField(
        help_text="Public ids of the facts the knowledge block at the end of the system prompt "
        "showed (those still stored); empty without one."
    )
    tools = serializers.SerializerMethodField(
        help_text="The tool declarations the call sent, in the shape of `message_format`: OpenAI's "
        'function tools (`{"type": "function", "function": {...}}`) for `openai` and `langchain` '
        "(what LangChain chat models are bound with), Anthropic's tools (`input_schema`) for "
        '`anthropic`, `{"name", "description", "parameters"}` for `native`.'
    )
    provider_changes = serializers.SerializerMethodField(
        help_text="What the provider adapter changed in these messages to meet the provider's "
        "limits, in request order (already applied to `messages`; a whole message's content cut "
        "is also in `truncated`). Empty when it sent the window as built. `message` is null for "
        "a change to a message left out of this answer (`left_out`)."
    )
    provider_changes_more = serializers.SerializerMethodField(
        help_text="Changes past the ones listed (a record keeps at most 100)."
    )
    left_out = serializers.SerializerMethodField(
        help_text="How many of the oldest history messages the call sent are not in `messages`, "
        "so that the answer stays within AGENTMEMORY['API_MAX_RESPONSE_BYTES'] (0: the whole "
        "window). The kept ones start on a human message; the newest turn is always sent. The "
        "token counts and seqs are the call's."
    )

    @extend_schema_field(RecordedMemoryBlockSerializer(allow_null=True))
    def get_memory(self, window: Any) -> dict[str, Any] | None:
        recorded = recorded_memory(self.context["call"], window.messages)
        if recorded is None:
            return None
        conversations = _public_ids(Conversation, set(recorded.conversation_ids))
        facts = _public_ids(Fact, set(recorded.fact_ids))
        return {
            "text": recorded.text,
            "tokens": recorded.tokens,
            "item_count": recorded.item_count,
            "removed": recorded.removed,
            "conversations": [conversations[pk] for pk in recorded.conversation_ids if pk in conversations],
            "facts": [facts[pk] for pk in recorded.fact_ids if pk in facts],
        }

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_knowledge_facts(self, window: Any) -> list[str]:
        ids = recorded_knowledge_facts(self.context["call"])
        found = _public_ids(Fact, set(ids))
        return [found[pk] for pk in ids if pk in found]

    def get_tools(self, window: Any) -> list[dict[str, Any]]:
        return list(self.context.get("tools") or [])

    @extend_schema_field(ProviderChangeSerializer(many=True))
    def get_provider_changes(self, window: Any) -> list[dict[str, Any]]:
        keys = ("message", "seq", "part", "change", "reason", "sent", "kept")
        entries = [
            {key: entry.get(key) for key in keys} for entry in self.context.get("provider_changes") or ()
        ]
        return ProviderChangeSerializer(entries, many=True).data  # type: ignore[return-value]

    @extend_schema_field(serializers.IntegerField())
    def get_provider_changes_more(self, window: Any) -> int:
        return int(self.context.get("provider_changes_more") or 0)

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


class UsageLeftOutSerializer(serializers.Serializer):
    """Entries of each list left out to keep the answer within the byte bound."""

    by_model = serializers.IntegerField(min_value=0)
    unpriced_models = serializers.IntegerField(min_value=0)


class UsageSerializer(serializers.Serializer):
    """Usage (tokens) and cost (a decimal string, in the currency of ``MODEL_PRICES``, per
    its per-million-token prices) of a set of calls; ``unpriced_models`` are left out of
    ``cost``, which is ``null`` when calls were made and none of them was priced.

    The answer is at most ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]``: ``by_model`` and
    ``unpriced_models`` hold the models (by name) that fit, taken in turn, and ``left_out``
    counts the others; the sums and the cost are always those of every call."""

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
    unpriced_models = serializers.ListField(
        child=serializers.CharField(), help_text="Models used that have no price, by name."
    )
    by_model = ModelUsageSerializer(many=True, help_text="Usage of each model, by name.")
    left_out = UsageLeftOutSerializer(
        help_text="Entries of by_model and unpriced_models left out to keep the answer within "
        "AGENTMEMORY['API_MAX_RESPONSE_BYTES'] (0 and 0 when all fit); their calls are in the "
        "sums and the cost."
    )


def usage_data(totals: UsageTotals, budget: int) -> dict[str, Any]:
    """The answer of a usage endpoint for ``totals`` in at most ``budget`` bytes: over it,
    the last models by name of ``by_model`` and ``unpriced_models`` are left out, the two
    lists cut in turn (``left_out`` counts them). One model per row of a set of calls: a
    thousand models of 190 characters answered 250 KB, and nothing bounded their number."""
    data = dict(UsageSerializer({**_totals_fields(totals), "left_out": _NOTHING_LEFT_OUT}).data)
    if json_size(data) <= budget:
        return data
    lists = {name: list(data[name]) for name in _LISTS}
    rest = json_size({**data, **{name: [] for name in _LISTS}})
    kept, left_out = bounded_hits(lists, budget - rest)
    return {**data, **kept, "left_out": left_out}


#: the lists of a usage answer that grow with the models used
_LISTS = ("by_model", "unpriced_models")
_NOTHING_LEFT_OUT = {"by_model": 0, "unpriced_models": 0}


def _totals_fields(totals: UsageTotals) -> dict[str, Any]:
    return {name: getattr(totals, name) for name in UsageTotals.__dataclass_fields__}
