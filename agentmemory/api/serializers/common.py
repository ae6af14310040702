"""Fields and mixins every serializer of the API shares: strict input (unknown and read-only
keys refused), text the database can store, JSON objects, limits read from settings, and
the API's error shape."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.core.validators import MaxLengthValidator
from django.db import models
from django.utils import timezone
from rest_framework import serializers
from rest_framework.settings import api_settings

from agentmemory.api.errors import MAX_ERROR_FIELDS
from agentmemory.api.schema import extend_schema_field
from agentmemory.validation import TEXT_PATTERN, WHITE_SPACE_CLASS, json_problem, text_problem

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
            raise serializers.ValidationError(f"must be a string, not {json_type(data)}.")
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


def json_type(value: Any) -> str:
    """What a decoded JSON ``value`` is, as an error message names it: "null", "a boolean",
    "a number", "a string", "an array" or "an object"."""
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
            raise serializers.ValidationError(f"must be a JSON object, not {json_type(data)}{self.hint}.")
        if problem := json_problem(data):
            raise serializers.ValidationError(f"The value {problem}.")
        return dict(data)


class BoundedListField(serializers.ListField):
    """DRF's ``ListField`` that refuses a list over its ``max_length`` before validating its
    items, and stops validating them after ``MAX_ERROR_FIELDS`` refused items. DRF checks the
    length after every item and collects an error for each: 100,000 wrong tool calls in a
    200 kB body took 5 s to refuse (and an import document's messages, without a length
    bound, 3 s per 100,000), where the answer names at most ``MAX_ERROR_FIELDS`` of them."""

    def to_internal_value(self, data: Any) -> Any:
        if self.max_length is not None and isinstance(data, list) and len(data) > self.max_length:
            self.run_validators(data)  # the setting's own message (``_SettingLimits``), if any
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)

    def run_child_validation(self, data: Any) -> list[Any]:
        result: list[Any] = []
        errors: dict[int, Any] = {}
        for index, item in enumerate(data):
            try:
                result.append(self.child.run_validation(item))
            except serializers.ValidationError as exc:
                errors[index] = exc.detail
                if len(errors) >= MAX_ERROR_FIELDS:
                    break
        if errors:
            raise serializers.ValidationError(errors)
        return result


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


class ErrorSerializer(serializers.Serializer):
    """The API's error shape: every 4xx answer is a JSON object with at least these keys."""

    error = serializers.CharField(
        help_text="A stable code: invalid, not_found, parse_error, too_large, too_many_fields, "
        "not_authenticated, "
        "permission_denied, method_not_allowed, invalid_message, context_budget_exceeded, "
        "format_unavailable, database_unavailable, ..."
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


# -- long-term memory ----------------------------------------------------------------------


class PixelsField(serializers.IntegerField):
    """An image's width or height: DRF's ``IntegerField`` (its errors and ``min_value`` /
    ``max_value`` checks, and the schema's ``integer``), except that a value sent as another
    JSON type that DRF would turn into a whole number (``"10"``, ``10.0``) is kept as sent, so
    that ``agentmemory.validation.check_part_fields`` refuses it with the reason it gives for
    any part (a size is a positive number of pixels), rather than being stored converted."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if isinstance(data, int) and not isinstance(data, bool):
            return value
        super().run_validators(value)
        return data

    def run_validators(self, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            super().run_validators(value)


class StrictBooleanField(serializers.BooleanField):
    """A ``BooleanField`` that takes JSON's ``true`` and ``false`` only, as the schema says
    (``type: boolean``): DRF's also takes 0, 1, "yes", "off"... in a JSON body. A form (the
    browsable API's) sends text, which DRF's rules read as before."""

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        if isinstance(data, str) and hasattr(getattr(self.parent, "initial_data", None), "getlist"):
            return bool(super().to_internal_value(data))
        raise serializers.ValidationError(f"Must be true or false, not {json_type(data)}.")


#: a public id as the schema's ``format: uuid`` writes it (RFC 9562: 8-4-4-4-12 hex digits,
#: either case)
UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class StrictUUIDField(serializers.UUIDField):
    """A ``UUIDField`` that takes a public id as the schema writes one (``type: string,
    format: uuid``: 8-4-4-4-12 hex digits) and nothing else: DRF's also takes a JSON number
    (``UUID(int=...)``) and the other spellings Python's ``UUID`` reads (32 hex digits,
    ``urn:uuid:``, braces), as its ``BooleanField`` took 0 and 1."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not UUID_TEXT.fullmatch(data):
            self.fail("invalid", value=data if isinstance(data, str) else json_type(data))
        return super().to_internal_value(data)


class FiniteFloatField(serializers.FloatField):
    """A ``FloatField`` that refuses NaN and infinities (``float("nan")`` passes range checks),
    JSON booleans (DRF's field reads ``true`` as 1.0) and JSON strings (DRF's reads ``"0.5"``
    as 0.5, as its ``BooleanField`` read 0 as false): the schema says a number. A form (the
    browsable API's) sends text, which is read as before. A stored value that is not finite
    reads as ``null`` (give the field ``allow_null=True``): JSON has no NaN, and DRF's strict
    renderer raised on one, so a single such row made a page a 500."""

    def to_representation(self, value: Any) -> float | None:
        number: float = super().to_representation(value)
        return number if math.isfinite(number) else None

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, str) and not hasattr(getattr(self.parent, "initial_data", None), "getlist"):
            raise serializers.ValidationError(f"Must be a number, not {json_type(data)}.")
        value: float = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("A finite number is required.")
        return value


class StoredDateTimeField(serializers.DateTimeField):
    """A stored date and time, written in the current time zone as DRF writes it, or in UTC
    (the same instant) when it has no date there.

    Python's dates end at years 1 and 9999: with a ``TIME_ZONE`` other than UTC, a stored
    9999-12-31 23:59 UTC is year 10000 at +14:00, and DRF's field answered the read that
    showed it with a 400, "Datetime value out of range.", for a value the client never sent.
    """

    def to_representation(self, value: Any) -> Any:
        try:
            return super().to_representation(value)
        except serializers.ValidationError:
            # only the conversion to the current time zone raises on a stored value
            if not isinstance(value, datetime) or not timezone.is_aware(value):
                raise
        output_format = getattr(self, "format", api_settings.DATETIME_FORMAT)
        moment = value.astimezone(UTC)
        if output_format.lower() != "iso-8601":
            return moment.strftime(output_format)
        return moment.isoformat().removesuffix("+00:00") + "Z"


class AppModelSerializer(serializers.ModelSerializer):
    """The API's model serializers: stored dates with ``StoredDateTimeField``."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: StoredDateTimeField,
    }
