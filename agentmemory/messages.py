"""In-memory message types used everywhere outside the ORM: ``ChatMessage``, ``ToolCall`` and
``ContentPart``."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: key under which the text of tool-call arguments that were not a JSON object is kept
#: (a model's malformed output), so the call can be answered with an error result
RAW_ARGUMENTS_KEY = "_raw_arguments"


class PartKind(enum.StrEnum):
    """Kinds of content parts, provider-neutral (OpenAI content parts, Anthropic blocks)."""

    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    FILE = "file"


#: separator of the texts of a message's parts in ``ChatMessage.content``. Neither OpenAI nor
#: Anthropic documents one: each part reaches the model as a part of its own, which is why
#: the parts themselves are stored and sent back. The joined text serves search, the admin
#: and summaries, where the words of adjacent parts must not run together.
PART_SEPARATOR = "\n"


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a multi-part message: text, an image, audio or a file.

    Args:
        kind: a ``PartKind``.
        text: the text of a text part (and of a plain-text document).
        data: inline data, base64-encoded (never the ``data:`` prefix); ``mime_type`` says
            what it is.
        url: an ``http(s)`` address the provider fetches (images, documents).
        file_id: a file uploaded to the provider beforehand (OpenAI ``file_id``, Anthropic
            ``file`` source).
        mime_type: ``"image/png"``, ``"audio/wav"``, ``"application/pdf"``, ``"text/plain"``.
        detail: OpenAI's image ``detail``: ``"low"``, ``"high"``, ``"auto"`` or ``""`` (not
            given; the API's default is ``"auto"``).
        filename: the file name of a file part.
        width, height: the image size in pixels when known (read from the header of inline
            data); they price the image (``agentmemory.tokens``).
        extra: provider fields kept so that a part round-trips (Anthropic's ``title``,
            ``context``, ``citations``, ``cache_control``).
    """

    kind: PartKind
    text: str = ""
    data: str = ""
    url: str = ""
    file_id: str = ""
    mime_type: str = ""
    detail: str = ""
    filename: str = ""
    width: int | None = None
    height: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def placeholder(self) -> str:
        """How the part reads as text where only text fits (summaries, search, the admin):
        the text of a text part, else ``[image]``, ``[audio]``, ``[file: report.pdf]``."""
        if self.kind is PartKind.TEXT:
            return self.text
        if self.kind is PartKind.FILE and self.filename:
            return f"[file: {self.filename}]"
        return f"[{self.kind.value}]"

    @property
    def data_bytes(self) -> int:
        """Size of the inline data once decoded (bytes), from the base64 length."""
        n = len(self.data)
        return n * 3 // 4 - self.data[-2:].count("=") if n else 0

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON shape: ``{"type": kind, ...}`` with only the fields that are set."""
        out: dict[str, Any] = {"type": self.kind.value}
        for name in ("text", "data", "url", "file_id", "mime_type", "detail", "filename"):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.width is not None and self.height is not None:
            out["width"], out["height"] = self.width, self.height
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContentPart:
        """The inverse of ``to_dict``.

        Raises:
            ValueError: an unknown ``type``.
        """
        return cls(
            kind=PartKind(data["type"]),
            text=data.get("text") or "",
            data=data.get("data") or "",
            url=data.get("url") or "",
            file_id=data.get("file_id") or "",
            mime_type=data.get("mime_type") or "",
            detail=data.get("detail") or "",
            filename=data.get("filename") or "",
            width=data.get("width"),
            height=data.get("height"),
            extra=dict(data.get("extra") or {}),
        )


def parts_text(parts: tuple[ContentPart, ...] | list[ContentPart], separator: str = PART_SEPARATOR) -> str:
    """The text of ``parts``: each part's ``placeholder`` (the text of text parts), joined by
    ``separator``; empty texts are left out."""
    return separator.join(text for part in parts if (text := part.placeholder))


class Role(enum.StrEnum):
    """Roles of stored messages (OpenAI calls them system/user/assistant/tool)."""

    SYSTEM = "system"
    HUMAN = "human"
    AI = "ai"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call inside an ``ai`` message.

    ``arguments`` is a JSON object (a ``dict``), never a JSON string inside JSON.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(id=data["id"], name=data["name"], arguments=dict(data.get("arguments") or {}))

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> ToolCall:
        """A call read back from a stored row: as ``from_dict``, with ``arguments`` read by
        ``stored_arguments`` (a row written around validation may hold arguments that are
        not a JSON object)."""
        return cls(id=data["id"], name=data["name"], arguments=stored_arguments(data.get("arguments")))


def stored_arguments(value: Any) -> dict[str, Any]:
    """A stored call's ``arguments`` as the JSON object every provider takes: the object
    itself (a copy); ``{}`` for null or a missing value; the object a JSON *string* holds
    (``'{"path": "a.txt"}'``, OpenAI's wire form written as it came); anything else (a list,
    a number, text that is not a JSON object) as ``{RAW_ARGUMENTS_KEY: <its text>}``.

    Storage refuses arguments that are not an object, but rows written around it (the ORM,
    SQL, an older version) are read by every later window. Each provider refuses such a
    call in the request: Anthropic's ``tool_use.input`` is an object (Messages API,
    ``ToolUseBlockParam.input: Dict[str, object]``) and OpenAI's ``function.arguments`` is
    the JSON text of one; reading the row failed every later turn. The row is not changed.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            decoded = json.loads(value, cls=StoredJSONDecoder)  # 1e400: its text, not infinity
        except (ValueError, RecursionError):  # RecursionError: nested ~1,000 levels deep
            decoded = None
        if isinstance(decoded, dict):
            return decoded
        return {RAW_ARGUMENTS_KEY: value}
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return {RAW_ARGUMENTS_KEY: text}


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation, framework-neutral.

    Args:
        role: a ``Role`` (``"system"``, ``"human"``, ``"ai"`` or ``"tool"``).
        content: the text; ``None`` is kept distinct from ``""`` so that an OpenAI
            assistant message with ``content: null`` round-trips exactly.
        tool_calls: the calls an ``ai`` message makes, in the model's order.
        tool_call_id: for ``tool`` messages, the id of the call this result answers.
        name: the tool name of a ``tool`` message (or a participant name).
        metadata: model, usage, finish reason, latency, provider payload: never sent, except
            an ``ai`` message's Anthropic thinking blocks (``metadata["thinking"]``), which
            ``to_anthropic`` sends back at the head of its turn, as the API requires, and a
            ``tool`` message's ``metadata["is_error"]`` (a failed call: Anthropic's
            ``"is_error": true``, LangChain's ``status="error"``).
        seq, id, token_count: set on messages read back from storage.
        truncated: ``True`` on a copy shortened for the context window (storage keeps
            the whole text); such a copy is sent as its (shortened) text, without parts.
        parts: the content parts of a multi-part message (several texts, images, audio,
            files), in order; ``()`` for plain text. ``content`` then holds their text
            (``parts_text``: texts, and placeholders such as ``[image]``), which is what
            search, the admin and summaries read; converters send the parts.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    seq: int | None = None
    id: int | None = None
    token_count: int | None = None
    truncated: bool = False
    parts: tuple[ContentPart, ...] = ()

    @classmethod
    def from_parts(
        cls, role: Role, parts: tuple[ContentPart, ...] | list[ContentPart], **kwargs: Any
    ) -> ChatMessage:
        """A message of ``parts``. A single text part gives a plain-text message; otherwise
        ``parts`` are kept and ``content`` is their text (``parts_text``)."""
        parts = tuple(parts)
        if len(parts) == 1 and parts[0].kind is PartKind.TEXT and not parts[0].extra:
            return cls(role=role, content=parts[0].text, **kwargs)
        return cls(role=role, content=parts_text(parts), parts=parts, **kwargs)

    @classmethod
    def system(cls, content: str, **kwargs: Any) -> ChatMessage:
        return cls(role=Role.SYSTEM, content=content, **kwargs)

    @classmethod
    def human(cls, content: str, **kwargs: Any) -> ChatMessage:
        return cls(role=Role.HUMAN, content=content, **kwargs)

    @classmethod
    def ai(
        cls,
        content: str | None = None,
        tool_calls: Sequence[ToolCall | Mapping[str, Any]] = (),
        **kwargs: Any,
    ) -> ChatMessage:
        """An ``ai`` message; each tool call is a ``ToolCall`` or a mapping with ``id``,
        ``name`` and ``arguments`` (a JSON object), turned into a ``ToolCall`` here."""
        calls = tuple(c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in tool_calls)
        return cls(role=Role.AI, content=content, tool_calls=calls, **kwargs)

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str = "", **kwargs: Any) -> ChatMessage:
        return cls(role=Role.TOOL, content=content, tool_call_id=tool_call_id, name=name, **kwargs)

    @property
    def text(self) -> str:
        """The content as text (``""`` for ``None``)."""
        return self.content or ""


@dataclass(frozen=True)
class PendingToolCall:
    """A tool call that has no stored result yet (see ``Conversation.pending_calls``).

    Attributes:
        tool_call_id, name, arguments: the call as the AI message made it.
        ai_seq: seq of the AI message that made the call.
        requested_at: when that AI message was stored.
        age_seconds: seconds since then.
        abandoned: older than ``AGENTMEMORY['PENDING_TOOL_CALL_TIMEOUT']``: compaction may fold
            its exchange into a summary.
    """

    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    ai_seq: int
    requested_at: datetime
    age_seconds: float
    abandoned: bool


#: the largest seq: the largest value of the 64-bit ``seq`` column
_MAX_SEQ = 2**63 - 1


def pending_calls(value: Any) -> dict[str, int]:
    """A stored ``Conversation.pending_tool_calls`` value as ``{tool call id: seq of the AI
    message that made the call}``, whatever the column holds: the entries with a text key and
    a whole number from 1 to 2**63 - 1 (a ``bool`` is not one). Anything else, the value
    itself when it is not a JSON object, is left out. A new dict: the caller may change it.

    agentmemory writes the column under the conversation's row lock, always in that shape; a
    row written by hand (raw SQL, a data migration) can hold anything JSON holds. Read as it
    was, an array or a seq written as text failed every window of the conversation (a
    ``ValueError`` the API reported as a wrong ``max_tokens``, an ``AttributeError``: a 500)
    and every append that read it. The next append that changes the pending calls writes back
    only these entries; ``manage.py repair_conversations`` does it at once."""
    if not isinstance(value, dict) or not value:
        return {}
    return {
        key: seq
        for key, seq in value.items()
        if isinstance(key, str) and type(seq) is int and 0 < seq <= _MAX_SEQ
    }


def _stored_text(value: Any) -> str | None:
    """A stored id or name as text: itself, a whole number as its digits, else ``None``."""
    if type(value) is str:
        return value
    if type(value) is int:
        return str(value)
    return None


def _stored_call_ok(call: Any) -> bool:
    return (
        type(call) is dict
        and type(call.get("id")) is str
        and type(call.get("name")) is str
        and type(call.get("arguments")) is dict
    )


def stored_tool_calls(value: Any) -> list[dict[str, Any]]:
    """A stored ``Message.tool_calls`` value as the list of calls every reader takes,
    whatever the column holds: its entries that are JSON objects with an ``id``, each with
    its ``id`` and ``name`` as text (a whole number as its digits; a ``name`` of another
    type, or none, as ``""``) and its ``arguments`` a JSON object (``stored_arguments``:
    a JSON string's object, ``{}`` for none, else the value as text under
    ``RAW_ARGUMENTS_KEY``); the value itself when it is in that shape already (no copy). An entry without an
    ``id`` names no call any result can answer and is left out; so is the whole value when
    it is no JSON array.

    agentmemory writes the column in that shape (``validate_message`` refuses anything
    else); a row written by hand (the ORM, SQL, a data migration) can hold any JSON value.
    Read as it was, a string or a number there failed every window of the conversation,
    its message list, the admin's transcript and the recorded windows that held it (500s).
    The row is not changed."""
    if type(value) is not list:
        return []
    if all(_stored_call_ok(call) for call in value):
        return value
    calls = []
    for call in value:
        if type(call) is dict and (call_id := _stored_text(call.get("id"))) is not None:
            name = _stored_text(call.get("name")) or ""
            arguments = call.get("arguments")
            arguments = arguments if type(arguments) is dict else stored_arguments(arguments)
            calls.append({**call, "id": call_id, "name": name, "arguments": arguments})
    return calls


#: the text fields of a stored content part (``ContentPart.to_dict``)
_PART_TEXTS = ("text", "data", "url", "file_id", "mime_type", "detail", "filename")
_PART_KINDS = frozenset(kind.value for kind in PartKind)


def _stored_part_ok(part: Any) -> bool:
    return (
        type(part) is dict
        and part.get("type") in _PART_KINDS
        and all(type(part.get(name, "")) is str for name in _PART_TEXTS)
        and all(type(part.get(name, 0)) is int for name in ("width", "height"))
        and type(part.get("extra", {})) is dict
    )


def stored_parts(value: Any) -> list[dict[str, Any]] | None:
    """A stored ``Message.parts`` value as the list of parts ``ContentPart.from_dict``
    reads, whatever the column holds: its entries that are JSON objects of a known
    ``type``, each with the fields of the wrong type left out (text fields that are not
    text, a size that is not two whole numbers, ``extra`` that is not an object); the value
    itself when it is in that shape already (no copy); ``None`` (no parts: the message is
    its ``content``) when nothing is left or the value is no JSON array.

    As ``stored_tool_calls``: a row written by hand failed every window that held the
    message, and its admin page."""
    if type(value) is not list:
        return None
    if all(_stored_part_ok(part) for part in value):
        return value or None
    parts = []
    for part in value:
        if type(part) is not dict or part.get("type") not in _PART_KINDS:
            continue
        kept = {"type": part["type"]}
        kept.update((name, part[name]) for name in _PART_TEXTS if type(part.get(name)) is str)
        if type(part.get("width")) is int and type(part.get("height")) is int:
            kept["width"], kept["height"] = part["width"], part["height"]
        if type(part.get("extra")) is dict:
            kept["extra"] = part["extra"]
        parts.append(kept)
    return parts or None


def stored_object(value: Any) -> dict[str, Any]:
    """A stored JSON column that holds an object (``metadata``, ``window_changes``): the
    object, or ``{}`` when a row written by hand holds another JSON value there (an array, a
    string, a number, ``null``), which failed every reader that looks a key up (the search,
    the admin's transcript, the model call list)."""
    return value if type(value) is dict else {}


def _finite_or_text(text: str) -> float | str:
    number = float(text)
    return number if math.isfinite(number) else text


def _int_or_text(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (``sys.get_int_max_str_digits``)
        return text


class StoredJSONDecoder(json.JSONDecoder):
    """A JSON decoder that reads any number a JSON column holds: the ``decoder`` of every
    ``JSONField`` of agentmemory's models, and of the rows its raw statements read
    (``agentmemory.store.rows``).

    agentmemory refuses NaN and infinities on write (``agentmemory.validation.json_problem``),
    but a row written by hand (raw SQL, a data migration) can hold what JSON text or the
    column can: ``1e400`` (a float past 1.8e308, which Python reads as infinity, and no JSON
    renderer writes back: the API's answers, exports and admin pages failed with a 500), an
    integer of more than 4,300 digits (PostgreSQL's ``jsonb`` holds up to 131,072; Python
    refuses to convert it, so every read of the row failed, recall of the whole owner with
    it), or SQLite's JSON text ``NaN``. Such a number is read as the text it was stored as
    (``"1e400"``), a string: a stored value never makes a read fail, and what is shown is
    what is stored. Every other value decodes as ``json.loads`` decodes it.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("parse_float", _finite_or_text)
        kwargs.setdefault("parse_constant", str)
        super().__init__(**kwargs)
        self._digits: json.JSONDecoder | None = None

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            return super().raw_decode(s, idx)
        except json.JSONDecodeError:
            raise
        except ValueError:
            # an integer too long to convert: only then is each integer read in Python
            if self._digits is None:
                self._digits = json.JSONDecoder(
                    parse_float=_finite_or_text, parse_constant=str, parse_int=_int_or_text
                )
            return self._digits.raw_decode(s, idx)
