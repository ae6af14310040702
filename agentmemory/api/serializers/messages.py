"""Messages: the native message shape the API reads and writes, the serializers that check a
message to append, and the request formats (native, OpenAI, Anthropic, LangChain).

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

A native message is defined once: ``NativeMessageInputSerializer`` checks the JSON types of
its fields (what the OpenAPI schema states), and its ``validate()`` builds the
``ChatMessage`` and runs ``agentmemory.validation.validate_message``, whose errors name the
field at fault (``InvalidMessageError.field``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from agentmemory.api.errors import FormatUnavailable, flatten_errors
from agentmemory.api.serializers.common import (
    IMAGE_URL_PATTERN,
    MAX_SHORT_TEXT,
    URL_PATTERN,
    AppModelSerializer,
    BoundedListField,
    JSONObjectField,
    PixelsField,
    StrictInputMixin,
    StrictTextField,
    _SettingLimits,
)
from agentmemory.conf import app_settings
from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic
from agentmemory.formats.media import parse_data_url
from agentmemory.formats.openai import from_openai_messages
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall, parts_text
from agentmemory.models import Message
from agentmemory.validation import IMAGE_MIME_TYPES, coerce_message, validate_message

NATIVE = "native"
OPENAI = "openai"
ANTHROPIC = "anthropic"
LANGCHAIN = "langchain"
MESSAGE_FORMATS = (NATIVE, OPENAI, ANTHROPIC, LANGCHAIN)


def _langchain() -> Any:
    """``agentmemory.formats.langchain`` with ``langchain_core.messages``' dict converters.

    Raises:
        FormatUnavailable: langchain-core (the ``langchain`` extra) is not installed on this
            server (a 501: the request is not at fault).
    """
    try:
        from langchain_core.messages import messages_from_dict, messages_to_dict

        from agentmemory.formats import langchain
    except ImportError:
        raise FormatUnavailable(
            "The langchain message format needs langchain-core, which is not installed on this "
            "server (its administrator can install it: pip install 'django-agentmemory[langchain]'); "
            "message_format=native, openai and anthropic need nothing more."
        ) from None
    return langchain, messages_from_dict, messages_to_dict


def check_format_available(message_format: str) -> None:
    """Refuse, before anything is read or written, a ``message_format`` whose optional
    package this server lacks (``langchain`` needs langchain-core).

    Raises:
        FormatUnavailable: the package is not installed here.
    """
    if message_format == LANGCHAIN:
        _langchain()


_NATIVE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name", "metadata", "parts"})
_OPENAI_ROLES = {"user": "human", "assistant": "ai", "developer": "system"}


# -- the native message shape --------------------------------------------------------------

_PART_KEYS = frozenset(
    {"type", "text", "data", "url", "file_id", "mime_type", "detail", "filename", "width", "height", "extra"}
)


def message_from_native(data: Any, index: int = 0) -> ChatMessage:
    """Parse and check one message in the native shape (see the module docstring) with
    ``NativeMessageInputSerializer``.

    Args:
        data: the decoded JSON value.
        index: its 0-based position in the request, reported in errors.

    Raises:
        InvalidMessageFields: not an object, unknown keys, an unknown role (OpenAI role names
            are named as such), values of the wrong type, a message ``validate_message``
            refuses; ``fields`` names the fields at fault. Rules that need the conversation
            (a tool result answering an earlier call) are checked by ``PersistentChatHistory``.
    """
    serializer = NativeMessageInputSerializer(data=data)
    if not serializer.is_valid():
        raise InvalidMessageFields(flatten_errors(serializer.errors), index=index)
    message: ChatMessage = serializer.validated_data
    return message


def _part_from_fields(item: Mapping[str, Any]) -> ContentPart:
    """A ``ContentPart`` of a part's checked fields; a base64 data URL in ``url`` becomes
    inline ``data`` with its ``mime_type``."""
    item = dict(item)
    inline = parse_data_url(item["url"]) if isinstance(item.get("url"), str) else None
    if inline is not None and not item.get("data"):
        item["mime_type"], item["data"], item["url"] = inline[0], inline[1], ""
    return ContentPart.from_dict(item)


def message_from_fields(attrs: Mapping[str, Any]) -> ChatMessage:
    """The ``ChatMessage`` of a native message's fields as ``NativeMessageInputSerializer``
    checked them (absent fields take their defaults: no tool calls, empty ``tool_call_id``
    and ``name``, no metadata, no parts).

    Raises:
        InvalidMessageError: both ``content`` and ``parts`` given, and the content is not the
            parts' text (it would be dropped without a word).
    """
    parts = tuple(_part_from_fields(item) for item in attrs.get("parts") or ())
    content = attrs.get("content")
    if parts and content and content != parts_text(parts):
        # The stored text of a multi-part message is its parts' text: a different content
        # would be dropped without a word. Equal text is what reading a message gives back.
        raise InvalidMessageError(
            "give content or parts, not both: with parts, content must be null, empty or the "
            "parts' text (their texts joined by a newline)",
            index=0,
        )
    return ChatMessage(
        role=Role(attrs["role"]),
        content=content,
        tool_calls=tuple(
            ToolCall(id=call["id"], name=call["name"], arguments=dict(call.get("arguments") or {}))
            for call in attrs.get("tool_calls") or ()
        ),
        tool_call_id=attrs.get("tool_call_id", ""),
        name=attrs.get("name", ""),
        metadata=dict(attrs.get("metadata") or {}),
        parts=parts,
    )


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
    """The native JSON shape of a ``ChatMessage`` (without stored-only fields). A tool result
    carries ``is_error``: whether the call failed (``metadata["is_error"]`` is ``true``), which
    the provider shapes send as Anthropic's ``tool_result`` ``"is_error": true`` and LangChain's
    ``status: "error"``; the native shape sends no metadata, so it says it here."""
    native: dict[str, Any] = {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": [call.to_dict() for call in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        **({"parts": [part.to_dict() for part in message.parts]} if message.parts else {}),
    }
    if message.role is Role.TOOL:
        native["is_error"] = message.metadata.get("is_error") is True
    return native


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.DictField(help_text="A JSON object, never a JSON string.")


class MessageSerializer(AppModelSerializer):
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


class CancelledToolCallsSerializer(serializers.Serializer):
    """The error results cancel-pending-tool-calls stored, in ``seq`` order: as many as fit in
    ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` (at least one); ``left_out`` counts the others,
    stored all the same right after them (read them with ``GET .../messages/?after_seq=``
    the last seq listed)."""

    messages = MessageSerializer(many=True, read_only=True)
    left_out = serializers.IntegerField(
        min_value=0,
        help_text="Results stored but not listed, to keep the answer within "
        "AGENTMEMORY['API_MAX_RESPONSE_BYTES']; they follow the last one listed.",
    )


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

    text = StrictTextField(required=False, allow_blank=True)
    data = StrictTextField(
        required=False, allow_blank=True, help_text="Inline content, base64 (with mime_type)."
    )
    url = StrictTextField(
        required=False, allow_blank=True, help_text="An http(s) address or a base64 data URL."
    )
    file_id = StrictTextField(required=False, allow_blank=True, help_text="A provider's file id.")
    mime_type = StrictTextField(required=False, allow_blank=True)
    detail = StrictTextField(required=False, allow_blank=True)
    filename = StrictTextField(required=False, allow_blank=True)
    width = PixelsField(required=False, allow_null=True, min_value=1, max_value=2**31 - 1)
    height = PixelsField(required=False, allow_null=True, min_value=1, max_value=2**31 - 1)
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
    tool_calls = BoundedListField(
        child=ToolCallInputSerializer(), required=False, help_text="ai messages only."
    )
    tool_call_id = StrictTextField(
        required=False, allow_blank=True, max_length=MAX_SHORT_TEXT, help_text="Tool results only."
    )
    name = StrictTextField(
        required=False, allow_blank=True, max_length=MAX_SHORT_TEXT, help_text="A tool result's tool name."
    )
    metadata = JSONObjectField(required=False, help_text="Stored, never sent to a model.")
    parts = BoundedListField(
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
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> ChatMessage:  # type: ignore[override]
        """The checked fields as a ``ChatMessage``, which ``validate_message`` accepts.

        Raises:
            serializers.ValidationError: ``{field: [reason]}``, the field named by the
                ``InvalidMessageError`` (``non_field_errors`` when it names none).
        """
        try:
            message = coerce_message(message_from_fields(attrs), 0)
            validate_message(message, 0, max_chars=app_settings().MAX_MESSAGE_CHARS)
        except InvalidMessageError as exc:
            raise serializers.ValidationError(exc.field_errors()) from None
        return message


class MessageBatchInputSerializer(StrictInputMixin, serializers.Serializer):
    """A batch of native messages to append atomically, in order."""

    messages = BoundedListField(child=NativeMessageInputSerializer(), min_length=1, max_length=MAX_BATCH)


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


class CancelPendingToolCallsSerializer(StrictInputMixin, serializers.Serializer):
    """Body of cancel-pending-tool-calls: the reason written into each error result."""

    reason = StrictTextField(
        required=False,
        max_length=1000,
        default="the tool call was cancelled",
        help_text='Stored as "Error: <reason>" in each result (1-1,000 characters).',
    )


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
        super().__init__(reason, index=index, field=None if field == "non_field_errors" else field)

    def field_errors(self) -> dict[str, list[str]]:
        return dict(self.fields)


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
    return [message_from_native(item, index) for index, item in enumerate(items)]
