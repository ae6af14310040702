"""Serializers of the API, and the native message shape it reads and writes.

The native shape is agentmemory's own (``agentmemory.messages.ChatMessage``) as JSON::

    {"role": "human" | "ai" | "tool" | "system",
     "content": "text" | null,
     "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
     "tool_call_id": "call_1",        # tool results only
     "name": "get_weather",           # tool results: the tool's name (optional)
     "metadata": {...},               # model, usage, ...: stored, never sent to a model
     "parts": [{"type": "text", "text": "What is this?"},      # optional: a multi-part message
               {"type": "image", "data": "<base64>", "mime_type": "image/png"}]}

``parts`` (text, image, audio, file; see ``agentmemory.messages.ContentPart``) replace
``content`` when given: the stored ``content`` is then their text, with ``[image]``-style
placeholders. An ``image`` ``url`` may also be a base64 data URL.

``arguments`` is a JSON object, never a JSON string inside JSON (OpenAI's shape, with
``arguments`` as a string, is accepted with ``?message_format=openai``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from agentmemory.api.schema import extend_schema_field
from agentmemory.context import ContextWindow
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic, to_anthropic
from agentmemory.formats.media import parse_data_url
from agentmemory.formats.openai import from_openai_messages, to_openai_messages
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, Fact, Message, Summary
from agentmemory.tokens import TokenCounter
from agentmemory.validation import json_problem, text_problem

NATIVE = "native"
OPENAI = "openai"
ANTHROPIC = "anthropic"
LANGCHAIN = "langchain"
MESSAGE_FORMATS = (NATIVE, OPENAI, ANTHROPIC, LANGCHAIN)


def _langchain() -> Any:
    """``agentmemory.formats.langchain`` with ``langchain_core.messages``' dict converters.

    Raises:
        InvalidMessageError: langchain-core is not installed (the ``langchain`` extra).
    """
    try:
        from langchain_core.messages import messages_from_dict, messages_to_dict

        from agentmemory.formats import langchain
    except ImportError:
        raise InvalidMessageError(
            "the langchain message format needs langchain-core (pip install 'django-agentmemory[langchain]')"
        ) from None
    return langchain, messages_from_dict, messages_to_dict


_NATIVE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name", "metadata", "parts"})
_OPENAI_ROLES = {"user": "human", "assistant": "ai", "developer": "system"}


# -- the native message shape --------------------------------------------------------------


def _tool_call_from_native(call: Any, position: int, index: int) -> ToolCall:
    if not isinstance(call, Mapping):
        raise InvalidMessageError(
            f"tool call {position} is {type(call).__name__}, not an object", index=index
        )
    unknown = set(call) - {"id", "name", "arguments"}
    if unknown:
        raise InvalidMessageError(
            f"tool call {position} has unknown key(s) {sorted(unknown)}; expected id, name, arguments",
            index=index,
        )
    call_id, name = call.get("id"), call.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"tool call {position} has no string 'id'", index=index)
    if not isinstance(name, str) or not name:
        raise InvalidMessageError(f"tool call {call_id!r} has no string 'name'", index=index)
    arguments = call.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        hint = (
            " (the native format takes the object itself; OpenAI's JSON-string arguments are "
            "accepted with ?message_format=openai)"
            if isinstance(arguments, str)
            else ""
        )
        raise InvalidMessageError(
            f"arguments of tool call {call_id!r} must be a JSON object, not {type(arguments).__name__}{hint}",
            index=index,
        )
    return ToolCall(id=call_id, name=name, arguments=dict(arguments))


def message_from_native(data: Any, index: int = 0) -> ChatMessage:
    """Parse one message in the native shape (see the module docstring).

    Args:
        data: the decoded JSON value.
        index: its 0-based position in the request, reported in errors.

    Raises:
        InvalidMessageError: not an object, unknown keys, an unknown role (OpenAI role names
            are named as such), values of the wrong type. Rules that need the conversation
            (a tool result answering an earlier call) are checked by ``PersistentChatHistory``.
    """
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"a message must be an object, not {type(data).__name__}", index=index)
    unknown = set(data) - _NATIVE_KEYS
    if unknown:
        raise InvalidMessageError(
            f"unknown key(s) {sorted(unknown)}; a native message has {', '.join(sorted(_NATIVE_KEYS))}",
            index=index,
        )
    raw_role = data.get("role")
    if isinstance(raw_role, str) and raw_role in _OPENAI_ROLES:
        raise InvalidMessageError(
            f"role {raw_role!r} is an OpenAI role; the native role is {_OPENAI_ROLES[raw_role]!r} "
            "(or send OpenAI messages with ?message_format=openai)",
            index=index,
        )
    if not isinstance(raw_role, str) or raw_role not in {r.value for r in Role}:
        allowed = ", ".join(r.value for r in Role)
        raise InvalidMessageError(f"unknown role {raw_role!r} (allowed: {allowed})", index=index)
    role = Role(raw_role)
    content = data.get("content")
    if content is not None and not isinstance(content, str):
        raise InvalidMessageError(
            f"content must be a string or null, not {type(content).__name__}", index=index
        )
    raw_calls = data.get("tool_calls", [])
    if not isinstance(raw_calls, list):
        raise InvalidMessageError("tool_calls must be a list", index=index)
    tool_calls = tuple(_tool_call_from_native(call, i, index) for i, call in enumerate(raw_calls))
    tool_call_id, name = data.get("tool_call_id", ""), data.get("name", "")
    for key, value in (("tool_call_id", tool_call_id), ("name", name)):
        if not isinstance(value, str):
            raise InvalidMessageError(f"{key} must be a string", index=index)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise InvalidMessageError("metadata must be an object", index=index)
    return ChatMessage(
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        name=name,
        metadata=dict(metadata),
        parts=_parts_from_native(data.get("parts") or [], index),
    )


_PART_KEYS = frozenset(
    {"type", "text", "data", "url", "file_id", "mime_type", "detail", "filename", "width", "height", "extra"}
)


def _parts_from_native(raw: Any, index: int) -> tuple[ContentPart, ...]:
    """``parts`` of a native message as ``ContentPart``s; the checks of their values are
    ``agentmemory.validation.validate_parts``'."""
    if not isinstance(raw, list):
        raise InvalidMessageError("parts must be a list", index=index)
    parts = []
    for position, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise InvalidMessageError(f"part {position} is {type(item).__name__}, not an object", index=index)
        unknown = set(item) - _PART_KEYS
        if unknown:
            raise InvalidMessageError(
                f"part {position} has unknown key(s) {sorted(unknown)}; "
                f"allowed: {', '.join(sorted(_PART_KEYS))}",
                index=index,
            )
        if item.get("type") not in {k.value for k in PartKind}:
            allowed = ", ".join(k.value for k in PartKind)
            raise InvalidMessageError(
                f"part {position} has an unknown type {item.get('type')!r} (allowed: {allowed})", index=index
            )
        item = dict(item)
        inline = parse_data_url(item["url"]) if isinstance(item.get("url"), str) else None
        if inline is not None and not item.get("data"):
            item["mime_type"], item["data"], item["url"] = inline[0], inline[1], ""
        if not isinstance(item.get("extra") or {}, Mapping):
            raise InvalidMessageError(f"part {position} extra must be an object", index=index)
        parts.append(ContentPart.from_dict(item))
    return tuple(parts)


def messages_from_request(items: list[Any], message_format: str) -> list[ChatMessage]:
    """Parse a request's messages in ``message_format``: ``"native"``, ``"openai"``,
    ``"anthropic"`` (a list of Anthropic ``messages``, without ``system``) or ``"langchain"``
    (LangChain's ``messages_to_dict`` shape, ``{"type": "human", "data": {...}}``).

    Raises:
        InvalidMessageError: with ``index`` set to the offending message's position.
    """
    if message_format == OPENAI:
        return from_openai_messages(items)
    if message_format == ANTHROPIC:
        return from_anthropic(items)
    if message_format == LANGCHAIN:
        langchain, messages_from_dict, _ = _langchain()
        try:
            return list(langchain.from_langchain(messages_from_dict(items)))
        except InvalidMessageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidMessageError(
                f"not a list of LangChain message dicts ({{'type': ..., 'data': {{...}}}}): {exc}"
            ) from None
    return [message_from_native(item, i) for i, item in enumerate(items)]


def message_to_native(message: ChatMessage) -> dict[str, Any]:
    """The native JSON shape of a ``ChatMessage`` (without stored-only fields)."""
    return {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": [call.to_dict() for call in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        **({"parts": [part.to_dict() for part in message.parts]} if message.parts else {}),
    }


# -- context windows ------------------------------------------------------------------------

SYSTEM_PROMPT_PART = "system_prompt"
SUMMARY_PART = "summary"
HISTORY_PART = "history"


def window_entries(window: ContextWindow, counter: TokenCounter) -> list[tuple[str, ChatMessage, int]]:
    """The window's messages as ``(part, message, tokens)``, oldest first.

    ``part`` is ``"system_prompt"``, ``"summary"`` or ``"history"``; ``tokens`` is what the
    message costs as sent (tokens): the part's accounted size for the system prompt and the
    summary, the stored count for history messages, and a fresh count by ``counter`` for
    truncated copies. The history entries add up to ``window.history_tokens``.
    """
    history_ids = {id(m) for m in window.history}
    entries = []
    for message in window.messages:
        if id(message) in history_ids:
            if message.truncated or message.token_count is None:
                tokens = counter.count_message(message)
            else:
                tokens = message.token_count
            entries.append((HISTORY_PART, message, tokens))
        elif "summary_id" in (message.metadata or {}):
            entries.append((SUMMARY_PART, message, window.summary_tokens))
        else:
            entries.append((SYSTEM_PROMPT_PART, message, window.system_tokens))
    return entries


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.DictField(help_text="A JSON object, never a JSON string.")


class NativeMessageInputSerializer(serializers.Serializer):
    """One message to append, native shape (documentation of the request body)."""

    role = serializers.ChoiceField(choices=[r.value for r in Role])
    content = serializers.CharField(allow_null=True, allow_blank=True, required=False)
    tool_calls = ToolCallSerializer(many=True, required=False)
    tool_call_id = serializers.CharField(required=False, allow_blank=True)
    name = serializers.CharField(required=False, allow_blank=True)
    metadata = serializers.DictField(required=False)
    parts = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="Content parts of a multi-part message: {type: text|image|audio|file, text, data "
        "(base64), url, file_id, mime_type, detail, filename}.",
    )


class MessageBatchInputSerializer(serializers.Serializer):
    """A batch to append atomically (documentation of the request body)."""

    messages = NativeMessageInputSerializer(many=True)


class MessageSerializer(serializers.ModelSerializer):
    """A stored message, native shape plus ``seq``, ``token_count`` and ``created_at``."""

    tool_calls = ToolCallSerializer(many=True, read_only=True)

    class Meta:
        model = Message
        fields = (
            "seq",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "metadata",
            "parts",
            "token_count",
            "created_at",
        )
        read_only_fields = fields


class MessageBatchSerializer(serializers.Serializer):
    messages = MessageSerializer(many=True, read_only=True)


class SummarySerializer(serializers.ModelSerializer):
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


#: form keys that are not fields (DRF's browsable API posts the CSRF token with the form)
_FORM_KEYS = frozenset({"csrfmiddlewaretoken"})


class StrictInputMixin:
    """Refuses a body that sets a read-only field or a key the serializer does not know, with a
    400 naming each (``{"fields": {"last_seq": ["This field is read-only."]}}``), instead of
    DRF's default of silently ignoring them: a client that thinks it changed a value learns
    it did not."""

    fields: Any
    initial_data: Any

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors: dict[str, list[str]] = {}
            for key in data:
                if key in _FORM_KEYS:
                    continue
                field = self.fields.get(key)
                if field is None:
                    errors[str(key)] = ["Unknown field."]
                elif field.read_only:
                    errors[str(key)] = ["This field is read-only."]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)  # type: ignore[misc]


class CancelPendingToolCallsSerializer(StrictInputMixin, serializers.Serializer):
    """Body of cancel-pending-tool-calls: the reason written into each error result."""

    reason = serializers.CharField(
        required=False,
        max_length=1000,
        default="the tool call was cancelled",
        help_text='Stored as "Error: <reason>" in each result (1-1,000 characters).',
    )


class ConversationSerializer(StrictInputMixin, serializers.ModelSerializer):
    """A conversation; the id is the public ``uuid``. Counters are maintained by the store:
    a body that sets one (or any read-only or unknown field) is a 400 naming it."""

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
        # Save only the edited columns: a full save() would write back the counters read
        # before a concurrent append, corrupting last_seq and the message counts.
        for name, value in validated_data.items():
            setattr(instance, name, value)
        instance.save(update_fields=[*validated_data, "updated_at"])
        return instance


class ConversationUpdateSerializer(ConversationSerializer):
    """Partial update: ``title`` and ``metadata`` only (``agent_key`` is fixed at creation)."""

    class Meta(ConversationSerializer.Meta):
        read_only_fields = (*ConversationSerializer.Meta.read_only_fields, "agent_key")


class ConversationDetailSerializer(ConversationSerializer):
    """A conversation with its current summary embedded (``null`` before the first compaction)."""

    summary = SummarySerializer(read_only=True, allow_null=True)

    class Meta(ConversationSerializer.Meta):
        fields = (*ConversationSerializer.Meta.fields, "summary")


class ErrorSerializer(serializers.Serializer):
    """The API's error shape: every 4xx answer is a JSON object with at least these keys."""

    error = serializers.CharField(
        help_text="A stable code: invalid, not_found, parse_error, too_large, not_authenticated, "
        "permission_denied, method_not_allowed, invalid_message, context_budget_exceeded, ..."
    )
    detail = serializers.CharField(help_text="What went wrong, for people.")

    def get_fields(self) -> dict[str, serializers.Field]:
        # "fields" cannot be a class attribute: it is the serializer's own field mapping.
        fields = super().get_fields()
        fields["fields"] = serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            required=False,
            help_text="Validation errors only: messages by field or parameter name.",
        )
        return fields


#: ``messages`` of a context window: one object per message, in the shape of ``format``. The
#: shapes cannot be told apart by a schema (an OpenAI and an Anthropic user message look the
#: same), so they are one object schema listing the properties of each.
CONTEXT_MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "The messages to send, oldest first. native: the fields below; openai: Chat "
    "Completions messages (role system/user/assistant/tool, tool_calls with JSON-string "
    "arguments); anthropic: Messages API messages (role user/assistant, content text or blocks); "
    "langchain: LangChain's messages_to_dict shape (type and data).",
    "items": {
        "type": "object",
        "properties": {
            "role": {"type": "string", "description": "native, openai, anthropic."},
            "type": {"type": "string", "description": "langchain: human, ai, system or tool."},
            "data": {
                "type": "object",
                "additionalProperties": {},
                "description": "langchain: the message's fields (content, tool_calls, ...).",
            },
            "content": {"description": "Text, a list of content parts or blocks, or null."},
            "part": {
                "type": "string",
                "enum": [SYSTEM_PROMPT_PART, SUMMARY_PART, HISTORY_PART],
                "description": "native: which part of the window the message belongs to.",
            },
            "seq": {"type": "integer", "nullable": True, "description": "native: stored seq."},
            "tool_calls": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
            "tool_call_id": {"type": "string"},
            "name": {"type": "string"},
            "metadata": {"type": "object", "additionalProperties": {}},
            "parts": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
            "token_count": {"type": "integer", "description": "native: tokens it costs in the window."},
            "truncated": {"type": "boolean", "description": "native: a truncated copy was sent."},
        },
    },
}


class ContextWindowSerializer(serializers.Serializer):
    """A context window: the messages to send, oldest first, and its accounting (tokens)."""

    format = serializers.SerializerMethodField(help_text="The message format of `messages`.")
    messages = serializers.SerializerMethodField()
    max_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    system_tokens = serializers.IntegerField()
    summary_tokens = serializers.IntegerField()
    history_tokens = serializers.IntegerField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    summary_through_seq = serializers.IntegerField(allow_null=True)
    skipped_orphans = serializers.ListField(child=serializers.IntegerField())
    skipped_pending = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Seqs of tool exchanges left out because a call still awaits its result.",
    )
    skipped_late = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Seqs of tool results not sent: the exchange they answer is older than the window.",
    )
    placeholders = serializers.ListField(
        child=serializers.CharField(),
        help_text="Ids of tool calls sent with a placeholder result (never stored).",
    )
    truncated = serializers.ListField(child=serializers.IntegerField())

    system = serializers.SerializerMethodField(
        help_text="message_format=anthropic: the request's `system` parameter (the system prompt "
        "and the summary, which Anthropic takes apart from `messages`); null in other formats."
    )

    def get_format(self, window: ContextWindow) -> str:
        return self.context.get("message_format", NATIVE)

    @extend_schema_field({"type": "string", "nullable": True})
    def get_system(self, window: ContextWindow) -> str | None:
        if self.get_format(window) != ANTHROPIC:
            return None
        return self._anthropic(window)[0]

    def _anthropic(self, window: ContextWindow) -> tuple[str | None, list[dict[str, Any]]]:
        if not hasattr(self, "_anthropic_cache"):
            system, messages = to_anthropic(window.messages)
            self._anthropic_cache = (system if isinstance(system, str) else None, messages)
        return self._anthropic_cache

    @extend_schema_field(CONTEXT_MESSAGES_SCHEMA)
    def get_messages(self, window: ContextWindow) -> list[dict[str, Any]]:
        if self.get_format(window) == OPENAI:
            return to_openai_messages(window.messages)
        if self.get_format(window) == ANTHROPIC:
            return self._anthropic(window)[1]
        if self.get_format(window) == LANGCHAIN:
            langchain, _, messages_to_dict = _langchain()
            return list(messages_to_dict(langchain.to_langchain(window.messages)))
        result = []
        for part, message, tokens in window_entries(window, self.context["token_counter"]):
            entry = {"part": part, "seq": message.seq if part == HISTORY_PART else None}
            entry.update(message_to_native(message))
            entry["token_count"] = tokens
            entry["truncated"] = message.truncated
            result.append(entry)
        return result


class ContextBudgetErrorSerializer(serializers.Serializer):
    """Body of a 422 answer: the newest human message cannot fit in ``max_tokens``."""

    error = serializers.CharField(default="context_budget_exceeded")
    detail = serializers.CharField()
    seq = serializers.IntegerField(allow_null=True, help_text="Seq of the message that does not fit.")
    tokens = serializers.IntegerField(help_text="Its size (tokens).")
    available = serializers.IntegerField(help_text="Tokens left for it after system prompt and summary.")
    max_tokens = serializers.IntegerField()


class InvalidMessageErrorSerializer(serializers.Serializer):
    """Body of a 400 answer to a request that stores messages: nothing of it was stored.
    ``error`` is ``invalid_message`` for a refused message (with ``index`` and ``reason``), or
    another code of the API's error shape (``invalid``, ``parse_error``) for other input."""

    error = serializers.CharField(default="invalid_message")
    detail = serializers.CharField()
    index = serializers.IntegerField(
        allow_null=True, required=False, help_text="invalid_message: 0-based position of the refused message."
    )
    reason = serializers.CharField(required=False, help_text="invalid_message: why it was refused.")


# -- long-term memory ----------------------------------------------------------------------


class StorableTextField(serializers.CharField):
    """A ``CharField`` whose value the database can store: no NUL, no lone surrogate."""

    def to_internal_value(self, data: Any) -> str:
        value: str = super().to_internal_value(data)
        if problem := text_problem(value):
            raise serializers.ValidationError(f"The value {problem}.")
        return value


class FiniteFloatField(serializers.FloatField):
    """A ``FloatField`` that refuses NaN and infinities (``float("nan")`` passes range checks)."""

    def to_internal_value(self, data: Any) -> float:
        value: float = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("A finite number is required.")
        return value


class FactSerializer(serializers.ModelSerializer):
    """A stored fact; ``id`` is its public ``uuid``. ``superseded_by`` is the id of the fact
    that replaced it (history), or null for a fact in force; ``source_conversation`` and
    ``source_seq`` name the message it came from, when there is one.

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


class FactWriteSerializer(StrictInputMixin, serializers.Serializer):
    """A fact to remember (``KnowledgeMemory.store()``), or on PATCH the changes to a fact:
    a changed fact is stored as a new fact that supersedes the old one."""

    content = StorableTextField(help_text="The fact, 1 to AGENTMEMORY['MAX_FACT_CHARS'] characters.")
    category = StorableTextField(max_length=100, default="general")
    persistent = serializers.BooleanField(
        default=False, help_text="Kept until forgotten (true) or a recent entry that ages out (false)."
    )
    importance = FiniteFloatField(
        min_value=0.0, max_value=1.0, required=False, allow_null=True, help_text="0.0-1.0 (default 0.5)."
    )
    ttl = FiniteFloatField(
        min_value=0.001,
        max_value=10.0**10,
        required=False,
        allow_null=True,
        help_text="Seconds until the fact expires; null: no expiry.",
    )
    agent_key = StorableTextField(max_length=100, default="", allow_blank=True, help_text="Exact scope.")
    namespace = StorableTextField(max_length=200, default="", allow_blank=True, help_text="Exact scope.")
    supersedes = serializers.UUIDField(
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


class MessageHitSerializer(serializers.Serializer):
    """A stored message found by search, with its conversation's uuid and its ``seq``."""

    conversation = serializers.UUIDField(source="conversation_uuid")
    seq = serializers.IntegerField()
    role = serializers.CharField()
    content = serializers.CharField()
    metadata = serializers.DictField()
    created_at = serializers.DateTimeField()
    score = serializers.FloatField(help_text="Orders the hits of one search (higher is better).")


class FactHitSerializer(FactSerializer):
    """A fact found by search, with its score."""

    score = serializers.FloatField(help_text="Orders the hits of one search (higher is better).")

    class Meta(FactSerializer.Meta):
        fields = (*FactSerializer.Meta.fields, "score")
        read_only_fields = fields


class SearchResultSerializer(serializers.Serializer):
    """Hits of one search, best first: messages of the requester's conversations and facts of
    the requested scope."""

    query = serializers.CharField()
    messages = MessageHitSerializer(many=True)
    facts = FactHitSerializer(many=True)
