"""Export a conversation to a JSON document, and import one back to the exact same state.

The document (``"format": "agentmemory.conversation"``, ``"version": 1``)::

    {"format": "agentmemory.conversation", "version": 1, "exported_at": "2026-...Z",
     "conversation": {"uuid": "...", "agent_key": "...", "title": "...", "metadata": {...},
                      "created_at": "...", "updated_at": "...", "last_seq": 42,
                      "message_count": 42, "human_message_count": 10, "stored_tokens": 5120,
                      "has_system_prompt": true, "pinned_seq": 1, "pinned_last_seq": 2,
                      "pending_tool_calls": {"call_1": 41},
                      "summary_through_seq": 30, ...},
     "messages": [{"seq": 1, "role": "system", "content": "...", "tool_calls": [],
                   "tool_call_id": "", "name": "", "token_count": 33,
                   "token_counter": "tiktoken:o200k_base", "exchange_seq": null,
                   "metadata": {}, "created_at": "...", ...}, ...],
     "summaries": [{"text": "...", "first_seq": 1, "through_seq": 30,
                    "previous_through_seq": null, "token_count": 140, ...}, ...]}

Every stored column is exported (new columns are picked up without changing this module), in
``seq`` order; a summary names the summary it extends by its ``through_seq``, and the
conversation names its current summary the same way. The owner, database ids and the
compaction lease are not exported.

Import writes exactly what the document holds, in one transaction: seqs, token counts (with the
id of the counter that made them), timestamps, counters, pending tool calls and summaries with
their spans. Nothing is trimmed, re-counted or re-summarised. The document is checked whole
before anything is written, so a refused document leaves nothing behind.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import uuid as uuid_lib
from collections.abc import Iterator, Mapping
from typing import Any

from django.db import IntegrityError, models, router, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agentmemory.conf import app_settings
from agentmemory.exceptions import AgentMemoryError, InvalidMessageError
from agentmemory.messages import PartKind, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.recall import index_new_messages
from agentmemory.validation import (
    _MAX_SHORT,
    TEXT_PATTERN,
    WHITE_SPACE_CLASS,
    json_problem,
    text_problem,
    validate_message,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "ConversationExists",
    "InvalidConversationData",
    "export_conversation",
    "export_json",
    "import_conversation",
]

FORMAT = "agentmemory.conversation"
VERSION = 1
_BATCH = 1000
#: largest seq a document may hold: the largest integer every JSON reader keeps exact
#: (2**53 - 1, RFC 8259 section 6), far below the 64-bit column, so appends after an import
#: never overflow it
MAX_SEQ = 2**53 - 1

# Columns that are not part of a conversation's state: identity in this database, the owner
# (given at import), the current summary (exported by its span) and compaction bookkeeping.
_CONVERSATION_SKIP = {"id", "owner", "summary"}
_MESSAGE_SKIP = {"id", "conversation"}
_SUMMARY_SKIP = {"id", "conversation", "previous"}


class InvalidConversationData(AgentMemoryError, ValueError):
    """An import document was refused before anything was written.

    Attributes:
        path: where in the document, e.g. ``"messages[3].seq"`` (``""`` for the whole).
        reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class ConversationExists(InvalidConversationData):
    """The document's conversation uuid is already used in this database (import with
    ``new_uuid=True`` to make a copy)."""


def _fields(model: type[models.Model], skip: set[str]) -> list[models.Field]:
    return [
        f
        for f in model._meta.concrete_fields
        if f.name not in skip and not (model is Conversation and f.name.startswith("compaction_"))
    ]


def _dump(field: models.Field, value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid_lib.UUID):
        return str(value)
    return value


def _row(obj: models.Model, fields: list[models.Field]) -> dict[str, Any]:
    return {f.name: _dump(f, getattr(obj, f.attname)) for f in fields}


def export_conversation(conversation: Conversation, *, using: str | None = None) -> dict[str, Any]:
    """The conversation as a JSON-able document (see the module docstring).

    Args:
        conversation: the conversation to export.
        using: database alias to read from (defaults to what the routers choose).

    Returns:
        A dict of JSON types only (``json.dumps`` needs no encoder). Messages are read in
        ``seq`` order a batch at a time. ``export_json`` writes the same document a message
        at a time, without holding it.
    """
    head, messages, summaries = _export_parts(conversation, using)
    return {**head, "messages": list(messages), "summaries": list(summaries)}


def export_json(conversation: Conversation, *, using: str | None = None) -> Iterator[bytes]:
    """The document of ``export_conversation`` as UTF-8 JSON, in pieces: the conversation,
    then each message as it is read (``_BATCH`` rows at a time), then the summaries. Memory
    stays that of one batch, whatever the length of the conversation (four exports of a
    conversation of 2 MB messages at once took one server process to 2.19 GB). The
    conversation row is read at once, the messages as the pieces are taken.

    Raises:
        Conversation.DoesNotExist: the conversation is gone (before the first piece).
    """
    head, messages, summaries = _export_parts(conversation, using)
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    def pieces() -> Iterator[bytes]:
        yield encode(head)[:-1].encode() + b',"messages":['
        for i, row in enumerate(messages):
            yield (b"," if i else b"") + encode(row).encode()
        yield b'],"summaries":' + encode(list(summaries)).encode() + b"}"

    return pieces()


def _export_parts(
    conversation: Conversation, using: str | None
) -> tuple[dict[str, Any], Iterator[dict[str, Any]], Iterator[dict[str, Any]]]:
    """The document's head (format, version, time, conversation row) read now, and its
    message and summary rows read as they are iterated, up to the head's ``last_seq``.

    Raises:
        Conversation.DoesNotExist: the conversation is gone.
    """
    alias = using or router.db_for_read(Conversation, instance=conversation)
    conv = Conversation.objects.using(alias).select_related("summary").get(pk=conversation.pk)
    data = _row(conv, _fields(Conversation, _CONVERSATION_SKIP))
    # Only a summary of its own (``own_summary``): one of another conversation's (a
    # ``summary_id`` written by hand) is no span of this document, which an import refuses.
    current = conv.own_summary
    data["summary_through_seq"] = current.through_seq if current is not None else None
    if conv.pinned_seq is None:
        # Nothing is pinned: a value here is one the previous release's ``clear()`` left
        # behind (it reset ``pinned_seq`` only), which no reader uses and an import refuses.
        data["pinned_last_seq"] = None
    head = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "conversation": data,
    }
    message_fields = _fields(Message, _MESSAGE_SKIP)
    # The rows as the head describes them: what was appended after the head was read (a live
    # conversation: a turn, a late tool result) is left out. Read whole, the counters of the
    # head disagreed with the messages and the import refused the document.
    messages = (
        _row(m, message_fields)
        for m in Message.objects.using(alias)
        .filter(conversation_id=conv.pk, seq__lte=conv.last_seq)
        .order_by("seq")
        .iterator(_BATCH)
    )

    def summaries() -> Iterator[dict[str, Any]]:
        summary_fields = _fields(Summary, _SUMMARY_SKIP)
        for s in (
            Summary.objects.using(alias)
            .filter(conversation_id=conv.pk, through_seq__lte=conv.last_seq)
            .select_related("previous")
            .order_by("through_seq")
        ):
            row = _row(s, summary_fields)
            row["previous_through_seq"] = s.previous.through_seq if s.previous else None
            yield row

    return head, messages, summaries()


# -- import ------------------------------------------------------------------------------------


def _load(field: models.Field, value: Any, path: str) -> Any:
    """``value`` from the document as the Python value of ``field``, checked the way the
    database would check it (and PostgreSQL is the strictest).

    Raises:
        InvalidConversationData: the value does not fit the column.
    """
    if value is None:
        if field.null:
            return None
        raise InvalidConversationData(path, "must not be null")
    if isinstance(field, models.JSONField):
        problem = json_problem(value)
        if problem:
            raise InvalidConversationData(path, f"the value {problem}")
        return value
    if isinstance(field, models.BooleanField):
        if not isinstance(value, bool):
            raise InvalidConversationData(path, "must be true or false")
        return value
    if isinstance(field, models.IntegerField):  # also BigInteger and PositiveInteger
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidConversationData(path, "must be a whole number")
        low, high = -(2**63), 2**63 - 1
        if isinstance(field, models.PositiveIntegerField):
            low, high = 0, 2**31 - 1
        if not low <= value <= high:
            raise InvalidConversationData(path, f"must be between {low} and {high}")
        return value
    if isinstance(field, models.DateTimeField):
        parsed = None
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value)
            except ValueError:
                parsed = None
        if parsed is None:
            raise InvalidConversationData(path, "must be an ISO 8601 date and time")
        try:
            if timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed, dt.UTC)
            # The database stores UTC: a date at either end of the calendar may not convert.
            # Its instant in UTC is what is stored: Python reads offsets up to 23:59, and
            # PostgreSQL refuses one past 15:59 ("time zone displacement out of range").
            return parsed.astimezone(dt.UTC)
        except OverflowError:
            raise InvalidConversationData(path, "is out of the range of dates that can be stored") from None
    if isinstance(field, models.UUIDField):
        try:
            return uuid_lib.UUID(str(value))
        except ValueError:
            raise InvalidConversationData(path, "must be a UUID") from None
    if isinstance(field, models.CharField | models.TextField):
        if not isinstance(value, str):
            raise InvalidConversationData(path, "must be text")
        problem = text_problem(value)
        if problem:
            raise InvalidConversationData(path, f"the text {problem}")
        if field.max_length is not None and len(value) > field.max_length:
            raise InvalidConversationData(path, f"is longer than {field.max_length} characters")
        if field.choices and value not in {str(c[0]) for c in field.choices}:
            raise InvalidConversationData(
                path, f"must be one of {', '.join(str(c[0]) for c in field.choices)}"
            )
        return value
    raise InvalidConversationData(
        path, f"has a column type this version cannot import ({type(field).__name__})"
    )


def _column_schema(field: models.Field) -> dict[str, Any]:
    """The JSON schema of one column's value as ``_load`` accepts it."""
    schema: dict[str, Any]
    if isinstance(field, models.JSONField):
        # What import requires of each JSON column (``_check_stored_shape``, ``_document``):
        # an array where the default is one (tool calls) or the column holds a list (content
        # parts), an object where the default is one (metadata, pending tool calls).
        default = field.default() if callable(field.default) else field.default
        if isinstance(default, list) or field.name == "parts":
            schema = {"type": "array"}
        elif isinstance(default, dict):
            schema = {"type": "object"}
        else:
            schema = {}
    elif isinstance(field, models.BooleanField):
        schema = {"type": "boolean"}
    elif isinstance(field, models.IntegerField):
        positive = isinstance(field, models.PositiveIntegerField)
        schema = {"type": "integer", "minimum": 0 if positive else -(2**63)}
        schema["maximum"] = 2**31 - 1 if positive else 2**63 - 1
    elif isinstance(field, models.DateTimeField):
        schema = {"type": "string", "format": "date-time"}
    elif isinstance(field, models.UUIDField):
        schema = {"type": "string", "format": "uuid"}
    else:
        schema = {"type": "string", "pattern": TEXT_PATTERN}
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
        if field.choices:
            schema["enum"] = [str(choice[0]) for choice in field.choices]
    if field.null:
        schema["nullable"] = True
    return schema


#: the rows of a document, by name: (model, columns left out, extra names it may carry)
_ROWS = {
    "conversation": (Conversation, _CONVERSATION_SKIP, {"summary_through_seq"}),
    "message": (Message, _MESSAGE_SKIP, set()),
    "summary": (Summary, _SUMMARY_SKIP, {"previous_through_seq"}),
}


def row_schema(kind: str) -> dict[str, Any]:
    """The JSON schema (OpenAPI 3.0) of one row of an export document: ``kind`` is
    ``"conversation"``, ``"message"`` or ``"summary"``. Its properties are the stored columns
    (``_fields``) with the types, lengths and choices import checks, ``required`` the columns
    without a default (timestamps may be left out), no other key (``additionalProperties:
    false``). How rows fit together (seqs, counters, exchanges, spans) is checked by import,
    not described here."""
    model, skip, extra = _ROWS[kind]
    fields = _fields(model, skip)
    properties = {field.name: _column_schema(field) for field in fields}
    for name in sorted(extra):
        # the seq at which a summary of the document ends (``_seq``), or null
        properties[name] = {"type": "integer", "nullable": True, "minimum": 0, "maximum": MAX_SEQ}
    required = [
        field.name
        for field in fields
        if not field.has_default() and not field.null and field.name not in ("created_at", "updated_at")
    ]
    if kind == "message":
        required.append("seq")
        properties["seq"].update(minimum=1, maximum=MAX_SEQ)
    if kind == "conversation":
        properties["retention_days"]["minimum"] = 1  # the table's check constraint
        properties["pinned_seq"].update(minimum=1, maximum=MAX_SEQ)  # a message's seq, or null
        properties["pinned_last_seq"].update(minimum=1, maximum=MAX_SEQ)
        # the table's check constraint (agentmemory_conv_counts_nonneg)
        for name in ("last_seq", "message_count", "human_message_count", "stored_tokens"):
            properties[name]["minimum"] = 0
        # ``_document``: each pending tool call id names the seq of the AI message that made it
        properties["pending_tool_calls"]["additionalProperties"] = {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEQ,
        }
    if kind == "message":
        # ``_check_stored_shape``: tool calls are objects with a text id and name, content
        # parts objects with a type (what each holds beyond that is the message rules')
        # and ``validate_message``: ids and names of 1 to 255 characters of text
        short = {"type": "string", "minLength": 1, "maxLength": _MAX_SHORT, "pattern": TEXT_PATTERN}
        properties["tool_calls"]["items"] = {
            "type": "object",
            "required": ["id", "name"],
            "properties": {"id": short, "name": short},
        }
        properties["metadata"]["properties"] = {"is_error": {"type": "boolean"}}
        properties["parts"]["items"] = {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"type": "string", "enum": [part_kind.value for part_kind in PartKind]}},
        }
    if kind == "summary":
        # ``_check_document``: 0 <= first_seq <= through_seq <= the last message's seq, and
        # human_messages_covered a count of the document's human messages
        properties["first_seq"].update(minimum=0, maximum=MAX_SEQ)
        properties["through_seq"].update(minimum=0, maximum=MAX_SEQ)
        properties["human_messages_covered"]["minimum"] = 0
        # import refuses a summary without text (``_summaries``): at least one character
        # other than white space
        properties["text"].update(minLength=1, allOf=[{"pattern": f"[^{WHITE_SPACE_CLASS}]"}])
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = sorted(set(required))
    if kind == "message":
        schema["oneOf"] = _ROLE_RULES
    return schema


#: what ``validate_message`` asks of a stored message of each role, in JSON Schema: content
#: (text, possibly empty; not null) on human, system and tool messages, content or tool calls
#: on an ai message; tool calls only on ai messages; a tool_call_id only, and always, on tool
#: results; ``metadata.is_error`` true only on tool results; media parts only on human and
#: tool messages; and (``_check_document``) no tool exchange on a human or system message.
#: (What each content part holds is ``validate_parts``' to check.)
_TEXT = {"properties": {"content": {"type": "string"}}, "required": ["content"]}
_NOT_TOOL = {
    "tool_call_id": {"maxLength": 0},
    "metadata": {"properties": {"is_error": {"enum": [False]}}},
}
_TEXT_PARTS = {"parts": {"items": {"properties": {"type": {"enum": [PartKind.TEXT.value]}}}}}
_NO_EXCHANGE = {"tool_calls": {"maxItems": 0}, "exchange_seq": {"nullable": True, "enum": [None]}}


def _role(role: Role, properties: dict[str, Any], **rules: Any) -> dict[str, Any]:
    return {"properties": {"role": {"enum": [role.value]}, **properties}, "required": ["role"], **rules}


_ROLE_RULES: list[dict[str, Any]] = [
    _role(Role.HUMAN, {**_NO_EXCHANGE, **_NOT_TOOL}, allOf=[_TEXT]),
    _role(Role.SYSTEM, {**_NO_EXCHANGE, **_NOT_TOOL, **_TEXT_PARTS}, allOf=[_TEXT]),
    _role(
        Role.AI,
        {**_NOT_TOOL, **_TEXT_PARTS},
        anyOf=[_TEXT, {"properties": {"tool_calls": {"minItems": 1}}, "required": ["tool_calls"]}],
    ),
    _role(Role.TOOL, {"tool_calls": {"maxItems": 0}, "tool_call_id": {"minLength": 1}}, allOf=[_TEXT]),
]


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidConversationData(path, "must be a JSON object")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidConversationData(path, "must be a JSON array")
    return value


def _seq(value: Any, path: str, *, low: int = 1) -> int:
    """A seq named by the document (a message's, a summary's span, a pending call's)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConversationData(path, "must be a whole number")
    if not low <= value <= MAX_SEQ:
        raise InvalidConversationData(path, f"must be between {low} and {MAX_SEQ}")
    return value


def _check_stored_shape(message: Message, path: str) -> None:
    """The JSON columns of a message hold what ``Message.to_chat_message`` reads: tool calls
    as objects with a text ``id`` and ``name``, content parts as objects with a ``type``."""
    if not isinstance(message.tool_calls, list):
        raise InvalidConversationData(f"{path}.tool_calls", "must be a JSON array")
    for j, call in enumerate(message.tool_calls):
        if not isinstance(call, Mapping) or not all(isinstance(call.get(k), str) for k in ("id", "name")):
            raise InvalidConversationData(
                f"{path}.tool_calls[{j}]", "must be an object with a text id and name"
            )
    if message.parts is not None:
        if not isinstance(message.parts, list):
            raise InvalidConversationData(f"{path}.parts", "must be a JSON array or null")
        for j, part in enumerate(message.parts):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise InvalidConversationData(f"{path}.parts[{j}]", "must be an object with a type")
    if not isinstance(message.metadata, Mapping):
        raise InvalidConversationData(f"{path}.metadata", "must be a JSON object")


def _values(
    model: type[models.Model],
    skip: set[str],
    row: Mapping[str, Any],
    path: str,
    *,
    extra: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    fields = _fields(model, skip)
    names = {f.name for f in fields}
    unknown = set(row) - names - extra
    if unknown:
        raise InvalidConversationData(f"{path}.{sorted(unknown)[0]}", "is not a field of this version")
    values: dict[str, Any] = {}
    for field in fields:
        if field.name in row:
            values[field.attname] = _load(field, row[field.name], f"{path}.{field.name}")
        elif not field.has_default() and not field.null and field.name not in ("created_at", "updated_at"):
            raise InvalidConversationData(f"{path}.{field.name}", "is missing")
    return values


def _check_document(data: Any) -> tuple[dict[str, Any], list[Message], list[tuple[dict[str, Any], Any]], Any]:
    """Everything import needs, checked whole before a single write.

    Returns:
        (conversation values, unsaved messages, [(summary values, previous through_seq)],
        current summary through_seq).
    """
    doc = _object(data, "")
    if doc.get("format") != FORMAT:
        raise InvalidConversationData("format", f"must be {FORMAT!r}")
    version = doc.get("version")
    if version != VERSION:
        raise InvalidConversationData("version", f"is {version!r}; this version reads version {VERSION}")
    conv_row = _object(doc.get("conversation"), "conversation")
    conv = _values(
        Conversation, _CONVERSATION_SKIP, conv_row, "conversation", extra=frozenset({"summary_through_seq"})
    )
    if not isinstance(conv.get("metadata", {}), Mapping):
        raise InvalidConversationData("conversation.metadata", "must be a JSON object")
    if conv.get("retention_days") is not None and conv["retention_days"] < 1:
        # the table's check constraint (agentmemory_conv_retention_positive): days, or null
        raise InvalidConversationData("conversation.retention_days", "must be at least 1 (days) or null")

    max_chars = app_settings().MAX_MESSAGE_CHARS
    messages: list[Message] = []
    last = 0
    humans = tokens = 0
    ai_calls: dict[int, set[str]] = {}
    answered: set[tuple[int, str]] = set()  # (exchange seq, call id) of the results stored
    for i, raw in enumerate(_list(doc.get("messages"), "messages")):
        path = f"messages[{i}]"
        row = _object(raw, path)
        message = Message(**_values(Message, _MESSAGE_SKIP, row, path))
        if "seq" not in row or message.seq is None or message.seq <= last:
            raise InvalidConversationData(f"{path}.seq", "seqs must start at 1 or more and strictly increase")
        last = _seq(message.seq, f"{path}.seq")
        _check_stored_shape(message, path)
        try:
            validate_message(message.to_chat_message(), i, max_chars=max_chars)
        except (InvalidMessageError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InvalidConversationData(path, str(getattr(exc, "reason", exc))) from None
        humans += message.role == Role.HUMAN
        tokens += message.token_count
        if message.role == Role.AI and message.tool_calls:
            ai_calls[message.seq] = {str(c.get("id")) for c in message.tool_calls if isinstance(c, Mapping)}
        messages.append(message)
    for i, message in enumerate(messages):
        exchange = message.exchange_seq
        if exchange is None:
            continue
        path = f"messages[{i}].exchange_seq"
        if message.role == Role.AI:
            # An AI message that makes calls is its own exchange.
            if exchange != message.seq or message.seq not in ai_calls:
                raise InvalidConversationData(
                    path, "an AI message's exchange is its own seq, with tool calls"
                )
        elif message.role == Role.TOOL:
            if exchange not in ai_calls or exchange > message.seq:
                raise InvalidConversationData(
                    path, "names no earlier AI message with tool calls in the document"
                )
            if message.tool_call_id not in ai_calls[exchange]:
                raise InvalidConversationData(
                    path, f"the AI message at seq {exchange} makes no call {message.tool_call_id!r}"
                )
            answered.add((exchange, message.tool_call_id))
        else:
            raise InvalidConversationData(path, f"a {message.role} message belongs to no tool exchange")

    # The first message of the document is the first stored: a system message there is the
    # pinned system prompt, whatever its seq (a conversation cleared before export).
    pinned_seq = messages[0].seq if messages and messages[0].role == Role.SYSTEM else None
    expected = {
        "message_count": len(messages),
        "human_message_count": humans,
        "stored_tokens": tokens,
        "has_system_prompt": pinned_seq is not None,
        "pinned_seq": pinned_seq,
    }
    if (
        "pinned_seq" not in conv_row
        and pinned_seq not in (None, 1)
        and conv.get("has_system_prompt") is False
    ):
        # A document from before ``pinned_seq`` existed, when only seq 1 was pinned: its
        # false flag is right by that rule. Imported, the prompt is pinned by today's rule.
        del conv["has_system_prompt"]
    for name, value in expected.items():
        if name in conv and conv[name] != value:
            raise InvalidConversationData(
                f"conversation.{name}", f"is {conv[name]!r} but the messages give {value!r}"
            )
        conv[name] = value
    if conv.setdefault("last_seq", last) < last:
        raise InvalidConversationData("conversation.last_seq", f"is below the last message's seq {last}")
    _seq(conv["last_seq"], "conversation.last_seq", low=0)
    pending = conv.get("pending_tool_calls") or {}
    if not isinstance(pending, Mapping):
        raise InvalidConversationData("conversation.pending_tool_calls", "must be a JSON object")
    for call_id, seq in pending.items():
        path = f"conversation.pending_tool_calls.{call_id}"
        _seq(seq, path)
        if seq not in ai_calls or call_id not in ai_calls[seq]:
            raise InvalidConversationData(path, f"names no tool call of an AI message at seq {seq!r}")
        if (seq, call_id) in answered:
            raise InvalidConversationData(path, "is answered by a tool result in the document")
    human_seqs = [m.seq for m in messages if m.role == Role.HUMAN]

    summaries: list[tuple[dict[str, Any], Any]] = []
    spans: set[int] = set()
    for i, raw in enumerate(_list(doc.get("summaries", []), "summaries")):
        path = f"summaries[{i}]"
        row = _object(raw, path)
        values = _values(Summary, _SUMMARY_SKIP, row, path, extra=frozenset({"previous_through_seq"}))
        first, through = values.get("first_seq"), values.get("through_seq")
        if first is None or through is None or not 0 <= first <= through <= last:
            raise InvalidConversationData(
                path, "needs 0 <= first_seq <= through_seq <= the seq of the last message"
            )
        if not values.get("text", "").strip():
            raise InvalidConversationData(f"{path}.text", "must not be empty")
        if through in spans:
            raise InvalidConversationData(f"{path}.through_seq", "two summaries end at the same seq")
        # Context windows take the human messages after the summary from this count.
        covered = bisect.bisect_right(human_seqs, through)
        if values.get("human_messages_covered", 0) != covered:
            raise InvalidConversationData(
                f"{path}.human_messages_covered",
                f"is {values.get('human_messages_covered', 0)!r} but the messages up to seq {through} "
                f"hold {covered} human messages",
            )
        spans.add(through)
        previous = row.get("previous_through_seq")
        if previous is not None and _seq(previous, f"{path}.previous_through_seq", low=0) >= through:
            raise InvalidConversationData(
                f"{path}.previous_through_seq", "must name a summary that ends earlier"
            )
        summaries.append((values, previous))
    for i, (_, previous) in enumerate(summaries):
        if previous is not None and previous not in spans:
            raise InvalidConversationData(
                f"summaries[{i}].previous_through_seq", "names no summary in the document"
            )
    current = conv_row.get("summary_through_seq")
    if current is not None and _seq(current, "conversation.summary_through_seq", low=0) not in spans:
        raise InvalidConversationData("conversation.summary_through_seq", "names no summary in the document")
    conv["pinned_last_seq"] = _pinned_last_seq(conv, messages, [values for values, _ in summaries])
    return conv, messages, summaries, current


def _pinned_last_seq(
    conv: Mapping[str, Any], messages: list[Message], summaries: list[dict[str, Any]]
) -> int | None:
    """The last pinned seq of a document's conversation (``Conversation.pinned_last_seq``).

    The pinned run is the system messages that open the conversation, never reaching into a
    summary's span (a summary made before the run was pinned may have folded a leading
    system message). The document's value is kept when its range holds exactly that run
    (seqs without a message after the run's last one and before the next message are
    allowed: an imported document can leave holes); a document from before the column
    existed gets the run's last seq, or ``last_seq`` when every message is pinned (the
    next system message stored extends the run). ``None`` when nothing is pinned.

    Raises:
        InvalidConversationData: the document's value leaves out a pinned message or takes
            in another one.
    """
    pinned_seq = conv.get("pinned_seq")
    given = conv.get("pinned_last_seq")
    if pinned_seq is None:
        if given is not None:
            raise InvalidConversationData("conversation.pinned_last_seq", "is set but no message is pinned")
        return None
    firsts = [values["first_seq"] for values in summaries]
    cap = min(firsts) - 1 if firsts else MAX_SEQ
    run_end = pinned_seq
    following = None  # seq of the first message after the run
    for message in messages:
        if message.role == Role.SYSTEM and message.seq <= cap:
            run_end = message.seq
        else:
            following = message.seq
            break
    # Holes after the run are allowed up to the next message and never into a summary's span.
    low, high = run_end, max(run_end, min(cap, following - 1 if following is not None else conv["last_seq"]))
    if given is None:
        return run_end if following is not None else high
    if not low <= given <= high:
        raise InvalidConversationData(
            "conversation.pinned_last_seq",
            f"is {given!r} but the messages pin seqs {pinned_seq} to {run_end}",
        )
    return int(given)


def import_conversation(
    data: Mapping[str, Any],
    *,
    owner: Any = None,
    new_uuid: bool = False,
    using: str | None = None,
) -> Conversation:
    """Create a conversation from an ``export_conversation`` document, in the exact state the
    document describes (see the module docstring).

    Args:
        data: the document (parsed JSON).
        owner: the user who owns the imported conversation (``None``: nobody).
        new_uuid: give the conversation a fresh public uuid instead of the document's.
        using: database alias to write to (defaults to what the routers choose).

    Returns:
        The new ``Conversation``.

    Raises:
        InvalidConversationData: the document is not one this version can restore exactly
            (wrong format or version, a value a column cannot hold, seqs out of order or over
            ``MAX_SEQ``, counters that disagree with the messages, a summary that ends past the
            last message or whose ``human_messages_covered`` disagrees with the messages, a
            tool result linked to a call its exchange does not make, a pending tool call that
            names nothing or is answered in the document). Nothing is written.
        ConversationExists: the uuid is taken (and ``new_uuid`` is false). Nothing is written.
    """
    conv_values, messages, summaries, current = _check_document(data)
    alias = using or router.db_for_write(Conversation)
    if new_uuid or "uuid" not in conv_values:
        conv_values["uuid"] = uuid_lib.uuid4()
    stamps: dict[str, Any] = {k: conv_values.pop(k) for k in ("created_at", "updated_at") if k in conv_values}
    with transaction.atomic(using=alias):
        taken = ConversationExists("conversation.uuid", f"{conv_values['uuid']} is already used here")
        if _uuid_taken(alias, conv_values["uuid"]):
            raise taken
        conv = Conversation(owner=owner, **conv_values)
        try:
            with transaction.atomic(using=alias):
                conv.save(using=alias, force_insert=True)
        except IntegrityError:
            # Another import of the same document committed between the check and the insert.
            if Conversation.objects.using(alias).filter(uuid=conv_values["uuid"]).exists():
                raise taken from None
            raise
        created = [m.created_at for m in messages]
        for message in messages:
            message.conversation = conv
        Message.objects.using(alias).bulk_create(messages, batch_size=_BATCH)
        _restore_created_at(Message, messages, created, alias)
        # With an embedding or hybrid backend the imported messages get their vectors after
        # the commit, as appended ones do: a bulk insert sends no ``message_appended``, and
        # imported conversations stayed out of the dense side of search until someone ran
        # ``rebuild_recall_index``.
        index_new_messages(messages, using=alias)

        by_through: dict[int, Summary] = {}
        summary_stamps = []
        for values, _previous in sorted(summaries, key=lambda item: item[0]["through_seq"]):
            stamp = values.pop("created_at", None)
            summary = Summary(conversation=conv, **values)
            summary.save(using=alias, force_insert=True)
            by_through[summary.through_seq] = summary
            summary_stamps.append((summary, stamp))
        for values, previous in summaries:
            if previous is not None:
                Summary.objects.using(alias).filter(pk=by_through[values["through_seq"]].pk).update(
                    previous=by_through[previous]
                )
        _restore_created_at(
            Summary,
            [s for s, stamp in summary_stamps if stamp is not None],
            [stamp for _s, stamp in summary_stamps if stamp is not None],
            alias,
        )
        conv_update: dict[str, Any] = dict(stamps)
        if current is not None:
            conv_update["summary"] = by_through[current]
        if conv_update:
            Conversation.objects.using(alias).filter(pk=conv.pk).update(**conv_update)
    conv.refresh_from_db(using=alias)
    return conv


def _uuid_taken(alias: str, uuid: uuid_lib.UUID) -> bool:
    return Conversation.objects.using(alias).filter(uuid=uuid).exists()


def _restore_created_at(model: type[models.Model], objs: list[Any], stamps: list[Any], alias: str) -> None:
    """``auto_now_add`` overwrote ``created_at`` at insert: put the document's times back."""
    keep = [(obj, stamp) for obj, stamp in zip(objs, stamps, strict=True) if stamp is not None]
    for obj, stamp in keep:
        obj.created_at = stamp
    if keep:
        model._default_manager.using(alias).bulk_update(
            [obj for obj, _ in keep], ["created_at"], batch_size=500
        )
