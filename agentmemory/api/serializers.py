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
placeholders, so ``content`` must then be null, empty or that text (what reading the message
gives back); another text is refused (400) rather than dropped. An ``image`` ``url`` may
also be a base64 data URL.

``arguments`` is a JSON object, never a JSON string inside JSON (OpenAI's shape, with
``arguments`` as a string, is accepted with ``?message_format=openai``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from django.core.validators import MaxLengthValidator
from django.db import models
from rest_framework import serializers

from agentmemory.api.errors import flatten_errors
from agentmemory.api.schema import extend_schema_field
from agentmemory.context import ContextWindow
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic, to_anthropic
from agentmemory.formats.media import parse_data_url
from agentmemory.formats.openai import from_openai_messages, to_openai_messages
from agentmemory.knowledge import MAX_TTL_SECONDS
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall, parts_text
from agentmemory.models import Conversation, Fact, Message, Summary
from agentmemory.tokens import TokenCounter
from agentmemory.transfer import row_schema
from agentmemory.validation import (
    IMAGE_MIME_TYPES,
    TEXT_PATTERN,
    WHITE_SPACE_CLASS,
    json_problem,
    text_problem,
)

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
    parts = _parts_from_native(data.get("parts") or [], index)
    if parts and content and content != parts_text(parts):
        # The stored text of a multi-part message is its parts' text: a different content
        # would be dropped without a word. Equal text is what reading a message gives back.
        raise InvalidMessageError(
            "give content or parts, not both: with parts, content must be null, empty or the "
            "parts' text (their texts joined by a newline)",
            index=index,
        )
    return ChatMessage(
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        name=name,
        metadata=dict(metadata),
        parts=parts,
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
MEMORY_PART = "memory"
HISTORY_PART = "history"


def window_entries(window: ContextWindow, counter: TokenCounter) -> list[tuple[str, ChatMessage, int]]:
    """The window's messages as ``(part, message, tokens)``, oldest first.

    ``part`` is ``"system_prompt"``, ``"summary"``, ``"memory"`` (the memory block) or
    ``"history"``; ``tokens`` is what the message costs as sent (tokens): the stored count
    for the pinned system messages and history messages, the part's accounted size for a
    system prompt given to the builder, the summary and the memory block, and a fresh count
    by ``counter`` for truncated copies. The history
    entries add up to ``window.history_tokens``, the system prompt entries to
    ``window.system_tokens``.
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
        elif MEMORY_BLOCK_KEY in (message.metadata or {}):
            entries.append((MEMORY_PART, message, window.memory_tokens))
        elif message.seq is not None and message.token_count is not None:
            entries.append((SYSTEM_PROMPT_PART, message, message.token_count))  # one pinned message
        else:
            entries.append((SYSTEM_PROMPT_PART, message, window.system_tokens))
    return entries


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.DictField(help_text="A JSON object, never a JSON string.")


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
    #: read by ``AppAutoSchema``: the schema says ``additionalProperties: false``
    strict_input = True
    #: the error of a key the serializer does not know
    unknown_message = "Unknown field."

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors: dict[str, list[str]] = {}
            for key in data:
                if key in _FORM_KEYS:
                    continue
                field = self.fields.get(key)
                if field is None:
                    errors[str(key)] = [self.unknown_message]
                elif field.read_only:
                    errors[str(key)] = ["This field is read-only."]
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)  # type: ignore[misc]


# -- request bodies: validating serializers --------------------------------------------------
#
# The serializers below validate what a client sends, and drf-spectacular documents them: the
# OpenAPI schema says what they enforce (types, required fields, choices, lengths, unknown keys
# refused, and in ``schema_extra`` the rules between fields that JSON Schema can state). The
# rules that depend on the conversation's stored state or on other messages (a tool result
# answering a pending call, tool call ids that are not reused) stay with
# ``PersistentChatHistory``, and ``agentmemory.validation.validate_message`` runs last as the
# single definition of a storable message.

#: base64 as ``validate_parts`` accepts it: whole 4-character groups, ``=`` padding at the end
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_BASE64_BODY = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
#: white space as Python's ``str.strip`` and ``str.isspace`` see it (``WHITE_SPACE_CLASS``)
_SPACE = WHITE_SPACE_CLASS
#: an http(s) address as ``agentmemory.validation`` takes one: the scheme in ASCII letters of
#: any case, then no white space (Python's, ``_SPACE``: ECMAScript's ``\\S`` would let
#: U+001C-U+001F through, which the server refuses)
_HTTP_URL = f"[hH][tT][tT][pP][sS]?://[^\\x00{_SPACE}]+"
_MIME = "[A-Za-z0-9_.+-]+/[A-Za-z0-9_.+-]+"
#: a part's ``url``: an http(s) address, or a base64 data URL (stored as data and MIME type)
URL_PATTERN = f"^(?:{_HTTP_URL}|data:{_MIME};base64,{_BASE64_BODY})$"
IMAGE_URL_PATTERN = (
    f"^(?:{_HTTP_URL}|data:(?:image/png|image/jpeg|image/gif|image/webp);base64,{_BASE64_BODY})$"
)
#: longest ``tool_call_id``, ``name`` and tool call ``id`` and ``name`` (characters)
MAX_SHORT_TEXT = 255


class StorableTextField(serializers.CharField):
    """A ``CharField`` that takes a string only (DRF's turns numbers into text) whose value the
    database can store: no NUL, no lone surrogate (the schema says so with ``TEXT_PATTERN``)."""

    schema_extra = {"pattern": TEXT_PATTERN}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, not {_json_type(data)}.")
        if self.max_length is not None and len(data) > self.max_length:
            # the length as sent, before any trimming: the schema's maxLength is of the value
            # sent (a fact of 10,001 characters with a leading space was taken); the field's
            # own validators say it, naming the setting where there is one
            self.run_validators(data)
            self.fail("max_length", max_length=self.max_length)
        value: str = super().to_internal_value(data)
        if problem := text_problem(value):
            raise serializers.ValidationError(f"The value {problem}.")
        return value


class StrictTextField(StorableTextField):
    """A ``StorableTextField`` kept as sent (no trimming: a message's text is stored exactly)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


#: a line break as ``str.splitlines`` sees one
_LINE_BREAKS = "\\n\\r\\x0b\\x0c\\x1c-\\x1e\\x85\\u2028\\u2029"


class NonBlankTextField(StorableTextField):
    """A ``StorableTextField`` with something besides white space (it is trimmed); the schema
    says so with a pattern."""

    schema_extra = {"pattern": f"^[^\\x00]*[^\\x00{_SPACE}][^\\x00]*$"}


class SingleLineTextField(NonBlankTextField):
    """A ``NonBlankTextField`` of one line once trimmed (a fact's category is a heading in the
    knowledge block and in ``MEMORY.md``): no line break, as ``str.splitlines`` sees one,
    between its first and last characters that are not white space; the schema says so with
    a pattern."""

    schema_extra = {
        "pattern": f"^[{_SPACE}]*[^\\x00{_LINE_BREAKS}]*[^\\x00{_SPACE}][^\\x00{_LINE_BREAKS}]*[{_SPACE}]*$"
    }

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if len(value.splitlines()) > 1:
            raise serializers.ValidationError("must be one line.")
        return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


@extend_schema_field({"type": "object"})
class JSONObjectField(serializers.JSONField):
    """A JSON object that storage accepts (``agentmemory.validation.json_problem``: string
    keys, no NaN, no NUL character, at most ``MAX_JSON_DEPTH`` levels)."""

    def __init__(self, *, hint: str = "", **kwargs: Any) -> None:
        self.hint = hint
        # The browsable API's HTML form shows the initial value: "{}" rather than "null",
        # which the field refuses.
        kwargs.setdefault("initial", dict)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if getattr(data, "is_json_string", False):
            # A form field (the browsable API's HTML form, a form-encoded post) holds the JSON
            # text; DRF's JSONField marks it so and parses it in the to_internal_value this
            # method replaces.
            try:
                data = json.loads(data)
            except (ValueError, RecursionError):
                raise serializers.ValidationError(
                    f"must be a JSON object{self.hint}; this is not JSON."
                ) from None
        if not isinstance(data, Mapping):
            raise serializers.ValidationError(f"must be a JSON object, not {_json_type(data)}{self.hint}.")
        if problem := json_problem(data):
            raise serializers.ValidationError(f"The value {problem}.")
        return dict(data)


class _SettingLimits:
    """Sets ``max_length`` of fields from ``AGENTMEMORY`` settings each time the fields are
    built, so the schema and the checks follow the host project's settings."""

    #: ``{field name: setting name}``
    setting_limits: dict[str, str] = {}

    def get_fields(self) -> dict[str, serializers.Field]:
        from agentmemory.conf import app_settings

        fields: dict[str, serializers.Field] = super().get_fields()  # type: ignore[misc]
        limits = app_settings()
        for name, setting in self.setting_limits.items():
            field = fields.get(name)
            if field is None:
                continue
            value = getattr(limits, setting)
            field.max_length = value  # type: ignore[attr-defined]
            validator = (MaxLengthValidator if isinstance(field, serializers.CharField) else _MaxItems)(
                value, message=f"At most {value:,} (AGENTMEMORY['{setting}'])."
            )
            field.validators = [v for v in field.validators if not isinstance(v, MaxLengthValidator)] + [
                validator
            ]
        return fields


class _MaxItems(MaxLengthValidator):
    """``MaxLengthValidator`` for lists (its message names items, not characters)."""


#: most messages one append request may carry
MAX_BATCH = 1000
_B64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
_DETAIL = {"type": "string", "pattern": "^(?:|low|high|auto)$"}


def _is(*values: str) -> dict[str, str]:
    """JSON Schema of a string that is one of ``values`` (a pattern, not an ``enum``, which
    drf-spectacular would replace with the field's whole enum component)."""
    return {"type": "string", "pattern": f"^(?:{'|'.join(re.escape(v) for v in values)})$"}


#: ``{name: {name: {"maxLength": 0}}}``: a text key a role or kind may send only empty
_NO: dict[str, dict[str, Any]] = {
    name: {name: {"maxLength": 0}} for name in ("data", "url", "file_id", "text", "tool_call_id")
}


class ContentPartInputSerializer(StrictInputMixin, serializers.Serializer):
    """A content part of a native message (``agentmemory.messages.ContentPart``); ``type``
    picks the subclass that checks it."""

    text = StorableTextField(required=False, allow_blank=True)
    data = StorableTextField(
        required=False, allow_blank=True, help_text="Inline content, base64 (with mime_type)."
    )
    url = StorableTextField(
        required=False, allow_blank=True, help_text="An http(s) address or a base64 data URL."
    )
    file_id = StorableTextField(required=False, allow_blank=True, help_text="A provider's file id.")
    mime_type = StorableTextField(required=False, allow_blank=True)
    detail = StorableTextField(required=False, allow_blank=True)
    filename = StorableTextField(required=False, allow_blank=True)
    width = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**31 - 1)
    height = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**31 - 1)
    extra = JSONObjectField(required=False, help_text="Provider fields kept as they are.")
    unknown_message = f"unknown key; a part has {', '.join(sorted(_PART_KEYS))}"

    type = serializers.ChoiceField(choices=[k.value for k in PartKind])

    #: what ``agentmemory.validation.validate_parts`` checks of each kind, in JSON Schema: a text
    #: part carries no media; the others exactly one source (inline base64 ``data`` with its
    #: ``mime_type``, an http(s) or base64 data ``url``, a provider ``file_id``; a file may be
    #: its ``text``); audio inline only; inline images PNG, JPEG, GIF or WebP, ``detail`` low,
    #: high or auto
    schema_extra = {
        "oneOf": [
            {"properties": {"type": _is("text"), **_NO["data"], **_NO["url"], **_NO["file_id"]}},
            {
                "properties": {
                    "type": _is("image"),
                    "data": {"pattern": f"^{_B64}$"},
                    "mime_type": _is(*sorted(IMAGE_MIME_TYPES)),
                    "detail": _DETAIL,
                    **_NO["url"],
                    **_NO["file_id"],
                },
                "required": ["data", "mime_type"],
            },
            {
                "properties": {
                    "type": _is("image"),
                    "url": {"pattern": IMAGE_URL_PATTERN},
                    "detail": _DETAIL,
                    **_NO["data"],
                    **_NO["file_id"],
                },
                "required": ["url"],
            },
            {
                "properties": {
                    "type": _is("image"),
                    "file_id": {"minLength": 1},
                    "detail": _DETAIL,
                    **_NO["data"],
                    **_NO["url"],
                },
                "required": ["file_id"],
            },
            {
                "properties": {
                    "type": _is("audio"),
                    "data": {"pattern": f"^{_B64}$"},
                    "mime_type": {"minLength": 1},
                    **_NO["url"],
                    **_NO["file_id"],
                },
                "required": ["data", "mime_type"],
            },
            {
                "properties": {
                    "type": _is("file"),
                    "data": {"pattern": f"^{_B64}$"},
                    "mime_type": {"minLength": 1},
                    **_NO["url"],
                    **_NO["file_id"],
                    **_NO["text"],
                },
                "required": ["data", "mime_type"],
            },
            {
                "properties": {
                    "type": _is("file"),
                    "url": {"pattern": URL_PATTERN},
                    **_NO["data"],
                    **_NO["file_id"],
                    **_NO["text"],
                },
                "required": ["url"],
            },
            {
                "properties": {
                    "type": _is("file"),
                    "file_id": {"minLength": 1},
                    **_NO["data"],
                    **_NO["url"],
                    **_NO["text"],
                },
                "required": ["file_id"],
            },
            {
                "properties": {
                    "type": _is("file"),
                    "text": {"minLength": 1},
                    **_NO["data"],
                    **_NO["url"],
                    **_NO["file_id"],
                },
                "required": ["text"],
            },
        ]
    }


class ToolCallInputSerializer(StrictInputMixin, serializers.Serializer):
    """A tool call of a native ``ai`` message."""

    unknown_message = "unknown key; a tool call has id, name, arguments"

    id = StrictTextField(max_length=MAX_SHORT_TEXT, help_text="Unique among the calls awaiting results.")
    name = StrictTextField(max_length=MAX_SHORT_TEXT)
    arguments = JSONObjectField(
        required=False,
        allow_null=True,
        hint=" (the native format takes the object itself; OpenAI's JSON-string arguments are "
        "accepted with ?message_format=openai)",
        help_text="A JSON object, never a JSON string; null means {}.",
    )


_TEXT_OR_PARTS = [
    {"properties": {"content": {"type": "string"}}, "required": ["content"]},
    {"properties": {"parts": {"type": "array", "minItems": 1}}, "required": ["parts"]},
]


class NativeMessageInputSerializer(_SettingLimits, StrictInputMixin, serializers.Serializer):
    """One message to append, in the native shape (see the module docstring).

    Fields are checked here; ``validate()`` then builds the ``ChatMessage`` and runs
    ``agentmemory.validation.validate_message``, the one definition of a storable message.
    What depends on the conversation (a tool result answering a pending call, tool call ids
    not reused) is checked when it is stored.
    """

    unknown_message = f"unknown key; a native message has {', '.join(sorted(_NATIVE_KEYS))}"
    setting_limits = {
        "content": "MAX_MESSAGE_CHARS",
        "tool_calls": "MAX_TOOL_CALLS_PER_MESSAGE",
        "parts": "MAX_PARTS_PER_MESSAGE",
    }

    role = serializers.ChoiceField(
        choices=[r.value for r in Role],
        error_messages={"invalid_choice": "unknown role {input!r} (allowed: human, ai, tool, system)"},
    )
    content = StrictTextField(
        allow_null=True,
        allow_blank=True,
        required=False,
        help_text=(
            "Text; null only on an ai message that calls tools, or when parts are given (then "
            "null, empty or the parts' text: a different text is refused, never dropped)."
        ),
    )
    tool_calls = serializers.ListField(
        child=ToolCallInputSerializer(), required=False, help_text="ai messages only."
    )
    tool_call_id = StrictTextField(
        required=False, allow_blank=True, max_length=MAX_SHORT_TEXT, help_text="Tool results only."
    )
    name = StrictTextField(
        required=False, allow_blank=True, max_length=MAX_SHORT_TEXT, help_text="A tool result's tool name."
    )
    metadata = JSONObjectField(required=False, help_text="Stored, never sent to a model.")
    parts = serializers.ListField(
        child=ContentPartInputSerializer(),
        required=False,
        allow_null=True,
        help_text="Content parts of a multi-part message, in place of content: text, and on human "
        "and tool messages images, audio and files.",
    )

    #: what ``validate_message`` asks of each role: human, system and tool messages have text
    #: (content, or parts); an ai message text or tool calls; tool calls only on ai messages,
    #: a tool_call_id only (and always) on tool results; media parts on human and tool only
    schema_extra: dict[str, Any] = {
        "oneOf": [
            {
                "properties": {
                    "role": _is("human"),
                    **_NO["tool_call_id"],
                    "tool_calls": {"maxItems": 0},
                },
                "anyOf": _TEXT_OR_PARTS,
            },
            {
                "properties": {
                    "role": _is("system"),
                    **_NO["tool_call_id"],
                    "tool_calls": {"maxItems": 0},
                    "parts": {"items": {"properties": {"type": _is("text")}}},
                },
                "anyOf": _TEXT_OR_PARTS,
            },
            {
                "properties": {
                    "role": _is("ai"),
                    **_NO["tool_call_id"],
                    "parts": {"items": {"properties": {"type": _is("text")}}},
                },
                "anyOf": [
                    *_TEXT_OR_PARTS,
                    {"properties": {"tool_calls": {"minItems": 1}}, "required": ["tool_calls"]},
                ],
            },
            {
                "properties": {
                    "role": _is("tool"),
                    "tool_call_id": {"minLength": 1},
                    "tool_calls": {"maxItems": 0},
                },
                "required": ["tool_call_id"],
                "anyOf": _TEXT_OR_PARTS,
            },
        ]
    }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            role = data.get("role")
            if isinstance(role, str) and role in _OPENAI_ROLES:
                raise serializers.ValidationError(
                    {
                        "role": [
                            f"role {role!r} is an OpenAI role; the native role is {_OPENAI_ROLES[role]!r} "
                            "(or send OpenAI messages with ?message_format=openai)"
                        ]
                    }
                )
        # validate() parses the body as sent: run_validation calls it next, for this item (a
        # ListField child serializer checks its items one after another and has no initial_data)
        self._raw = data
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> ChatMessage:  # type: ignore[override]
        from agentmemory.conf import app_settings
        from agentmemory.validation import coerce_message, validate_message

        raw = dict(self._raw)
        raw.pop("csrfmiddlewaretoken", None)
        try:
            message = coerce_message(message_from_native(raw), 0)
            validate_message(message, 0, max_chars=app_settings().MAX_MESSAGE_CHARS)
        except InvalidMessageError as exc:
            raise serializers.ValidationError({message_error_field(exc.reason): [exc.reason]}) from None
        return message


class MessageBatchInputSerializer(StrictInputMixin, serializers.Serializer):
    """A batch of native messages to append atomically, in order."""

    messages = serializers.ListField(child=NativeMessageInputSerializer(), min_length=1, max_length=MAX_BATCH)


class MessageFormSerializer(serializers.Serializer):
    """The browsable API's form for appending one message (``MessageViewSet`` hands it to
    DRF's browsable renderer, which builds the "HTML form" tab and the raw data tab's initial
    JSON from the view's serializer): the native message's text fields. A form cannot send
    lists or objects: tool calls, parts and metadata go through the raw data tab as JSON.
    It only describes the form; the view checks what is posted like any other body
    (``NativeMessageInputSerializer``)."""

    role = serializers.ChoiceField(choices=[r.value for r in Role], initial=Role.HUMAN.value)
    content = serializers.CharField(
        required=False, allow_blank=True, style={"base_template": "textarea.html", "rows": 4}
    )
    tool_call_id = serializers.CharField(
        required=False, allow_blank=True, help_text="Tool results only: the id of the call answered."
    )
    name = serializers.CharField(required=False, allow_blank=True, help_text="A tool result's tool name.")


def message_error_field(reason: str) -> str:
    """The field of a native message that a ``validate_message`` / ``link_tool_message`` reason
    is about (``"tool_calls"``, ``"parts"``...), ``"non_field_errors"`` when it names none."""
    for prefix, field in _REASON_FIELDS:
        if reason.startswith(prefix):
            return field
    return "non_field_errors"


_REASON_FIELDS = (
    ("content", "content"),
    ("a human message needs content", "content"),
    ("a system message needs content", "content"),
    ("an ai message needs content", "content"),
    ("a tool result needs content", "content"),
    ("a tool result needs the tool_call_id", "tool_call_id"),
    ("tool result for", "tool_call_id"),
    ("only tool messages carry a tool_call_id", "tool_call_id"),
    ("tool_call_id", "tool_call_id"),
    ("name", "name"),
    ("metadata", "metadata"),
    ("part", "parts"),
    ("parts", "parts"),
    ("only ai messages carry tool calls", "tool_calls"),
    ("tool call", "tool_calls"),
    ("arguments", "tool_calls"),
    ("tool_calls", "tool_calls"),
    ("unknown role", "role"),
    ("unknown OpenAI role", "role"),
    ("role", "role"),
)


class CancelPendingToolCallsSerializer(StrictInputMixin, serializers.Serializer):
    """Body of cancel-pending-tool-calls: the reason written into each error result."""

    reason = StrictTextField(
        required=False,
        max_length=1000,
        default="the tool call was cancelled",
        help_text='Stored as "Error: <reason>" in each result (1-1,000 characters).',
    )


class ConversationSerializer(StrictInputMixin, serializers.ModelSerializer):
    """A conversation; the id is the public ``uuid``. Counters are maintained by the store:
    a body that sets one (or any read-only or unknown field) is a 400 naming it."""

    metadata = JSONObjectField(required=False, help_text="Your own JSON object (default {}).")
    #: text columns take strings only, of text storage accepts (DRF's CharField would turn a
    #: number into text)
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
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
    messages = serializers.ListField(child=_MessageRowField(), help_text="Its messages, in seq order.")
    summaries = serializers.ListField(child=_SummaryRowField(), required=False)

    @staticmethod
    def error_path(field: str) -> str:
        """A dotted error path (``messages.1``) in the notation of
        ``InvalidConversationData.path`` (``messages[1]``)."""
        return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", field)


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
            help_text="Validation errors only: messages by field or parameter name (nested "
            "fields by their dotted path, tool_calls.0.id).",
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
                "enum": [SYSTEM_PROMPT_PART, SUMMARY_PART, MEMORY_PART, HISTORY_PART],
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


class UncoveredMessagesSerializer(serializers.Serializer):
    """Stored messages a window leaves out that the summary does not cover either (they sit
    between the summary, or the pinned system prompt, and the window's oldest message)."""

    count = serializers.IntegerField(help_text="How many messages (exact).")
    tokens = serializers.IntegerField(help_text="Their stored token counts added up (exact).")
    seqs = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Their seqs, oldest first; the newest 1,000 when there are more.",
    )


class RecalledItemSerializer(serializers.Serializer):
    """One item of a memory block."""

    kind = serializers.ChoiceField(choices=["message", "fact"])
    text = serializers.CharField(help_text="What the block shows for it, provenance included.")
    tokens = serializers.IntegerField(help_text="Its share of the block (tokens).")
    score = serializers.FloatField(help_text="Its relevance to the query; orders the packing.")
    seqs = serializers.ListField(
        child=serializers.IntegerField(), help_text="Seqs of the stored messages it shows (none for a fact)."
    )
    said_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was said: the date a transcript gave, else when it was stored."
    )


class MemoryBlockSerializer(serializers.Serializer):
    """The memory block sent with a window: what the owner's past conversations and facts
    hold about the turn."""

    text = serializers.CharField(help_text="The block as the model reads it (one system message).")
    tokens = serializers.IntegerField(help_text="What its message costs (tokens).")
    query = serializers.CharField(help_text="What was recalled for.")
    items = RecalledItemSerializer(many=True)


class ContextWindowSerializer(serializers.Serializer):
    """A context window: the messages to send, oldest first, and its accounting (tokens)."""

    format = serializers.SerializerMethodField(help_text="The message format of `messages`.")
    messages = serializers.SerializerMethodField()
    max_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    system_tokens = serializers.IntegerField()
    summary_tokens = serializers.IntegerField()
    history_tokens = serializers.IntegerField()
    memory_tokens = serializers.IntegerField(help_text="Tokens of the memory block (0 without one).")
    memory = serializers.SerializerMethodField(
        help_text="The memory block sent after the summary (memory_recall=true), or null: recall "
        "off, nothing recalled, no room, or a conversation without an owner."
    )
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
    truncated = serializers.SerializerMethodField(
        help_text='What was sent as truncated copies (storage keeps it whole): "summary" first when '
        "the summary was cut (to leave the turn in progress, or the messages after it, their room), "
        "then the seqs of the messages sent cut."
    )
    uncovered = serializers.SerializerMethodField(
        help_text="Stored messages in neither the window nor the summary (count 0 when none): a "
        "compaction is due and could not run first, or the window is smaller than the summary "
        "was made for."
    )

    system = serializers.SerializerMethodField(
        help_text="message_format=anthropic: the request's `system` parameter (the system prompt, "
        "the summary and the memory block, which Anthropic takes apart from `messages`); null in "
        "other formats."
    )

    @extend_schema_field(MemoryBlockSerializer(allow_null=True))
    def get_memory(self, window: ContextWindow) -> dict[str, Any] | None:
        block = window.memory
        if block is None:
            return None
        return {
            "text": block.text,
            "tokens": window.memory_tokens,
            "query": block.query,
            "items": [
                {
                    "kind": item.kind,
                    "text": item.text,
                    "tokens": item.tokens,
                    "score": item.score,
                    "seqs": list(item.seqs),
                    "said_at": item.said_at.isoformat() if item.said_at is not None else None,
                }
                for item in block.items
            ],
        }

    def get_format(self, window: ContextWindow) -> str:
        return self.context.get("message_format", NATIVE)

    @extend_schema_field(
        {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "string", "enum": ["summary"]}]}}
    )
    def get_truncated(self, window: ContextWindow) -> list[int | str]:
        return list(window.truncated)

    @extend_schema_field(UncoveredMessagesSerializer)
    def get_uncovered(self, window: ContextWindow) -> dict[str, Any]:
        uncovered = window.uncovered
        return {"count": uncovered.count, "tokens": uncovered.tokens, "seqs": list(uncovered.seqs)}

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

    def get_fields(self) -> dict[str, serializers.Field]:
        # "fields" cannot be a class attribute: it is the serializer's own field mapping.
        fields = super().get_fields()
        fields["fields"] = serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            required=False,
            help_text="Messages by the path of the field at fault (messages.1.tool_calls.0.id).",
        )
        return fields


# -- long-term memory ----------------------------------------------------------------------


class StrictBooleanField(serializers.BooleanField):
    """A ``BooleanField`` that takes JSON's ``true`` and ``false`` only, as the schema says
    (``type: boolean``): DRF's also takes 0, 1, "yes", "off"... in a JSON body. A form (the
    browsable API's) sends text, which DRF's rules read as before."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if isinstance(data, str) and hasattr(getattr(self.parent, "initial_data", None), "getlist"):
            return bool(super().to_internal_value(data))
        raise serializers.ValidationError(f"Must be true or false, not {_json_type(data)}.")


class FiniteFloatField(serializers.FloatField):
    """A ``FloatField`` that refuses NaN and infinities (``float("nan")`` passes range checks)
    and JSON booleans (DRF's field reads ``true`` as 1.0; the schema says a number)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
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


# -- messages of a request -------------------------------------------------------------------


class InvalidMessageFields(InvalidMessageError):
    """A message of a request was refused, with the fields at fault.

    Attributes:
        fields: ``{field path within the message: [messages]}`` (``"tool_calls.0.id"``).
    """

    def __init__(self, fields: dict[str, list[str]], *, index: int) -> None:
        self.fields = fields
        field, texts = next(iter(fields.items()))
        reason = texts[0] if field == "non_field_errors" else f"{field}: {texts[0]}"
        super().__init__(reason, index=index)


def validated_messages(items: list[Any], message_format: str) -> list[ChatMessage]:
    """The request's messages as ``ChatMessage`` objects, each checked on its own.

    Native messages go through ``NativeMessageInputSerializer`` (fields, then
    ``validate_message``); the other formats through their converters
    (``messages_from_request``), whose results ``PersistentChatHistory`` checks when storing.

    Raises:
        InvalidMessageError: the first refused message (``InvalidMessageFields`` with the
            fields at fault for the native format), ``index`` its position.
    """
    if message_format != NATIVE:
        return messages_from_request(items, message_format)
    messages = []
    for index, item in enumerate(items):
        serializer = NativeMessageInputSerializer(data=item)
        if not serializer.is_valid():
            raise InvalidMessageFields(flatten_errors(serializer.errors), index=index)
        messages.append(serializer.validated_data)
    return messages
