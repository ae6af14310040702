"""Checks a message must pass before it is stored: storable text and JSON, a known role, fields
that fit the role, and the link between tool calls and their results."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sized
from dataclasses import replace
from typing import Any

from agentmemory.conf import app_settings
from agentmemory.exceptions import ContextBudgetExceeded, InvalidMessageError
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall, parts_text

_MAX_SHORT = 255

#: deepest nesting accepted in tool arguments and metadata (JSON objects and arrays)
MAX_JSON_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


#: ``text_problem`` as a JSON schema pattern: no NUL character (a lone UTF-16 surrogate has no
#: pattern: JSON text holds none but as an escape)
TEXT_PATTERN = "^[^\\x00]*$"
#: white space as Python's ``str.strip`` and ``str.isspace`` see it, in a regex character
#: class for the OpenAPI schema: JSON Schema's ``\\s`` is ECMAScript's, which leaves out
#: U+001C-U+001F and U+0085 and holds U+FEFF, so it cannot say what the server strips
WHITE_SPACE_CLASS = (
    "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)


#: largest primary key a 64-bit integer column holds (PostgreSQL ``bigint``, SQLite ``INTEGER``)
MAX_ID = 2**63 - 1


def whole_number(value: Any, name: str, *, minimum: int | None = None, unit: str = "") -> int:
    """``value`` as an ``int``, checked to be a whole number (any ``numbers.Integral`` but a
    ``bool``) of at least ``minimum``: a float, a string or a bool would be cut, or compared
    as something its caller did not write. ``unit`` ("tokens") names what it counts in the
    errors.

    Raises:
        TypeError: not a whole number (a float, NaN, infinity, a string, a bool).
        ValueError: below ``minimum``.
    """
    if type(value) is int and (minimum is None or value >= minimum):
        return value  # the usual argument, without the ``numbers.Integral`` check's cost
    what = f"a whole number of {unit}" if unit else "a whole number"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {what}, not {type(value).__name__}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}{f' {unit}' if unit else ''}, not {number}")
    return number


def parse_id(value: str) -> int | None:
    """``value`` as a primary key, or ``None``: only ASCII digits (``str.isdigit()`` also
    takes ``"²"`` and other digits ``int()`` refuses), at most ``MAX_ID`` (a larger number
    overflows SQLite's integers)."""
    value = value.strip()
    if not value or not value.isascii() or not value.isdigit() or len(value) > 19:
        return None
    number = int(value)
    return number if number <= MAX_ID else None


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``: PostgreSQL refuses NUL bytes and
    no database can encode a lone UTF-16 surrogate (``"\\ud800"``) as UTF-8."""
    if "\x00" in value:
        return "contains a NUL character"
    # ``isascii`` reads a flag of the string: most text is ASCII and holds no surrogate
    if not value.isascii() and _SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def json_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a storable JSON value, or ``None``: non-string object keys
    (they would be rewritten as strings), NaN or infinities, nesting deeper than
    ``MAX_JSON_DEPTH``, text that ``text_problem`` refuses, or a non-JSON type."""
    if depth > MAX_JSON_DEPTH:
        return f"is nested deeper than {MAX_JSON_DEPTH} levels"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "contains NaN or an infinity"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a non-string key {key!r}"
            problem = text_problem(key) or json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in value:
            problem = json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"holds a {type(value).__name__}, which is not a JSON type"


# -- making text and values from outside storable ----------------------------------------------
#
# A model's reply and a tool's return value are not the caller's input: refusing them would fail
# an agent's turn after the human message was stored. They are made storable instead.

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: replaces what storage refuses (U+FFFD REPLACEMENT CHARACTER, Unicode's sign for it)
REPLACEMENT = "\ufffd"


def storable_text(value: str, *, max_chars: int | None = None) -> str:
    """``value`` as text every database stores: NUL characters and lone surrogates replaced
    by U+FFFD and, when longer than ``max_chars`` characters, cut to ``max_chars`` with a
    note at the end saying how long it was."""
    text = value
    if max_chars is not None and len(text) > max_chars:
        # cut first (a replacement is one character for one): a 20 MB tool result is not
        # scanned whole to keep its first 2 MB
        note = f"\n[cut here: {len(text):,} characters, over the {max_chars:,} stored]"
        text = text[: max(0, max_chars - len(note))] + note[:max_chars]
    if text.isascii() and "\x00" not in text:
        # ASCII text holds no surrogate; these two checks run at memory speed where the
        # pattern took about 16 ms a 2 MB tool result
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def safe_str(value: Any) -> str:
    """``str(value)``, or a placeholder naming its type when ``__str__`` itself fails."""
    try:
        text = str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown as text>"
    return text if isinstance(text, str) else f"<{type(value).__name__}>"


def storable_json(value: Any, depth: int = 0) -> Any:
    """``value`` as a JSON value ``json_problem`` accepts: text made storable, NaN and
    infinities as ``null``, keys as text, tuples and sets as arrays, anything else (and
    anything nested deeper than ``MAX_JSON_DEPTH``) as its text."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return storable_text(value)
    if depth >= MAX_JSON_DEPTH:
        return storable_text(safe_str(value))
    if isinstance(value, Mapping):
        return {storable_text(safe_str(k)): storable_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [storable_json(item, depth + 1) for item in value]
    return storable_text(safe_str(value))


def _check_json(value: Any, what: str, index: int, field: str) -> None:
    problem = json_problem(value)
    if problem:
        raise InvalidMessageError(f"{what} {problem}", index=index, field=field)


def coerce_message(message: Any, index: int) -> ChatMessage:
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(
            f"expected a ChatMessage, got {type(message).__name__} (convert provider formats with "
            "agentmemory.formats first)",
            index=index,
        )
    try:
        role = Role(message.role)
    except ValueError as exc:
        allowed = ", ".join(r.value for r in Role)
        raise InvalidMessageError(
            f"unknown role {message.role!r} (allowed: {allowed})", index=index, field="role"
        ) from exc
    parts = message.parts
    if parts and isinstance(parts, tuple | list) and all(isinstance(p, ContentPart) for p in parts):
        # the stored text of a multi-part message is always its parts' text, and an inline
        # image's size is read once here so that pricing it never needs the header again;
        # both need fields of the right types, checked first
        for position, part in enumerate(parts):
            check_part_fields(part, f"part {position}", index)
        parts = tuple(_with_size(p) for p in parts)
        content: str | None = parts_text(parts)
    else:
        content = message.content
    if role is not message.role or parts is not message.parts or content != message.content:
        message = ChatMessage(
            role=role,
            content=content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
            name=message.name,
            metadata=message.metadata,
            parts=parts,
        )
    return message


def _with_size(part: ContentPart) -> ContentPart:
    if part.kind is not PartKind.IMAGE or not part.data or part.width is not None:
        return part
    from agentmemory.formats.media import image_size

    size = image_size(part.data)
    if size is None:
        return part
    return replace(part, width=size[0], height=size[1])


#: image types both OpenAI and Anthropic accept inline
IMAGE_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_IMAGE_DETAILS = frozenset({"", "low", "high", "auto"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# ASCII letters only in the scheme: IGNORECASE took "http" + U+017F (long s, folded to "s"), which
# the schema's pattern (agentmemory.api.serializers.URL_PATTERN) refuses
_URL = re.compile(r"[hH][tT][tT][pP][sS]?://[^\x00\s]+")
#: parts on roles other than human and tool may only be text: OpenAI takes only text parts
#: in system and assistant messages, Anthropic only text (and tool use) in assistant turns
_ANY_PART_ROLES = frozenset({Role.HUMAN, Role.TOOL})


def check_part_fields(part: ContentPart, where: str, index: int) -> None:
    """Check the types of a part's fields (text fields are storable strings, the size is
    positive whole pixels, ``extra`` a mapping): what joining the parts' text and reading an
    image's size rely on, so ``coerce_message`` runs it before either.

    Raises:
        InvalidMessageError: with ``index`` set to the message's place in its batch.
    """
    for name in ("text", "data", "url", "file_id", "mime_type", "detail", "filename"):
        value = getattr(part, name)
        if not isinstance(value, str):
            raise InvalidMessageError(f"{where} {name} must be a string", index=index, field="parts")
        problem = text_problem(value)
        if problem:
            raise InvalidMessageError(f"{where} {name} {problem}", index=index, field="parts")
    for name in ("width", "height"):
        value = getattr(part, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise InvalidMessageError(
                f"{where} {name} must be a positive number of pixels", index=index, field="parts"
            )
    if not isinstance(part.extra, Mapping):
        raise InvalidMessageError(f"{where} extra must be a JSON object", index=index, field="parts")


def validate_parts(message: ChatMessage, index: int, *, max_data_bytes: int) -> None:
    """Check the content parts of one message: ``ContentPart`` objects of a known kind, on a
    role that takes them (images, audio and files only on human and tool messages), with
    exactly one source for media (inline base64 ``data``, an ``http(s)`` ``url`` or a
    provider ``file_id``; audio only inline, as OpenAI's ``input_audio``), inline data that
    is base64 of at most ``max_data_bytes`` bytes (``AGENTMEMORY['MAX_PART_DATA_BYTES']``),
    inline images of a type both providers accept (PNG, JPEG, GIF, WebP), a known image
    ``detail``, storable text (no NUL character) and JSON ``extra`` fields.

    Raises:
        InvalidMessageError: with ``index`` set to the message's place in its batch.
    """
    parts = message.parts
    if not isinstance(parts, tuple | list):
        raise InvalidMessageError("parts must be a list of ContentPart objects", index=index, field="parts")
    for position, part in enumerate(parts):
        where = f"part {position}"
        if not isinstance(part, ContentPart):
            raise InvalidMessageError(
                f"{where} is a {type(part).__name__}, not a ContentPart", index=index, field="parts"
            )
        try:
            kind = PartKind(part.kind)
        except ValueError:
            allowed = ", ".join(k.value for k in PartKind)
            raise InvalidMessageError(
                f"{where} has an unknown kind {part.kind!r} (allowed: {allowed})", index=index, field="parts"
            ) from None
        check_part_fields(part, where, index)
        _check_json(part.extra, f"{where} extra", index, "parts")
        if kind is PartKind.TEXT:
            if part.data or part.url or part.file_id:
                raise InvalidMessageError(
                    f"{where} is text but carries data, a url or a file id", index=index, field="parts"
                )
            continue
        if message.role not in _ANY_PART_ROLES:
            raise InvalidMessageError(
                f"{where} is {kind.value}; a {message.role} message takes only text parts",
                index=index,
                field="parts",
            )
        sources = [name for name in ("data", "url", "file_id") if getattr(part, name)]
        if kind is PartKind.FILE and part.text:
            sources.append("text")
        if len(sources) != 1:
            raise InvalidMessageError(
                f"{where} ({kind.value}) needs exactly one source (inline data, an http(s) url or a "
                f"file id), not {', '.join(sources) or 'none'}",
                index=index,
                field="parts",
            )
        if part.url and not _URL.fullmatch(part.url):
            raise InvalidMessageError(
                f"{where} url must be an http(s) address (inline data goes in 'data', base64, "
                "with its mime_type)",
                index=index,
                field="parts",
            )
        if part.data:
            if not _BASE64.fullmatch(part.data) or len(part.data) % 4:
                raise InvalidMessageError(f"{where} data is not base64", index=index, field="parts")
            if part.data_bytes > max_data_bytes:
                raise InvalidMessageError(
                    f"{where} holds {part.data_bytes} bytes of inline data, over the maximum of "
                    f"{max_data_bytes} (AGENTMEMORY['MAX_PART_DATA_BYTES'])",
                    index=index,
                    field="parts",
                )
            if not part.mime_type:
                raise InvalidMessageError(
                    f"{where} has inline data but no mime_type", index=index, field="parts"
                )
        if kind is PartKind.IMAGE:
            if part.data and part.mime_type not in IMAGE_MIME_TYPES:
                raise InvalidMessageError(
                    f"{where} is an image of type {part.mime_type!r}; inline images must be "
                    f"{', '.join(sorted(IMAGE_MIME_TYPES))}",
                    index=index,
                    field="parts",
                )
            if part.detail not in _IMAGE_DETAILS:
                raise InvalidMessageError(
                    f"{where} detail {part.detail!r} is not one of low, high, auto",
                    index=index,
                    field="parts",
                )
        elif kind is PartKind.AUDIO and not part.data:
            raise InvalidMessageError(
                f"{where} is audio; audio is sent inline only (base64 data)", index=index, field="parts"
            )


def _check_error_flag(message: ChatMessage, index: int) -> None:
    """``metadata["is_error"]``, the flag of a failed tool result that goes to the model
    (Anthropic's ``tool_result`` ``is_error``, LangChain's ``ToolMessage.status``), is a JSON
    boolean, and ``true`` only on a tool message: a result stored with ``"yes"`` or ``1`` was
    sent to the model as a success, with no word to anyone."""
    if "is_error" not in message.metadata:
        return
    flag = message.metadata["is_error"]
    if not isinstance(flag, bool):
        raise InvalidMessageError(
            f"metadata.is_error must be true or false, not {flag!r:.40}", index=index, field="metadata"
        )
    if flag and message.role is not Role.TOOL:
        raise InvalidMessageError(
            f"metadata.is_error marks a failed tool result; a {message.role} message cannot carry it",
            index=index,
            field="metadata",
        )


def validate_message(message: ChatMessage, index: int, *, max_chars: int) -> None:
    """Check one message on its own: a known role, the fields that role allows, storable text and
    JSON, content within ``max_chars`` characters, at most ``MAX_PARTS_PER_MESSAGE`` content
    parts and ``MAX_TOOL_CALLS_PER_MESSAGE`` tool calls, tool calls with ids, names and
    JSON-object arguments, ``metadata["is_error"]`` a boolean, true only on a tool message.

    Raises:
        InvalidMessageError: with ``index`` set to the message's place in its batch.
    """
    content = message.content
    if content is not None and not isinstance(content, str):
        raise InvalidMessageError(
            f"content must be text or None, not {type(content).__name__}", index=index, field="content"
        )
    if content is not None:
        problem = text_problem(content)
        if problem:
            raise InvalidMessageError(f"content {problem}", index=index, field="content")
        if len(content) > max_chars:
            raise InvalidMessageError(
                f"content has {len(content)} characters, over the maximum of {max_chars} "
                "(AGENTMEMORY['MAX_MESSAGE_CHARS'])",
                index=index,
                field="content",
            )
    for field_name in ("tool_call_id", "name"):
        value = getattr(message, field_name)
        if not isinstance(value, str):
            raise InvalidMessageError(f"{field_name} must be a string", index=index, field=field_name)
        problem = text_problem(value)
        if problem:
            raise InvalidMessageError(f"{field_name} {problem}", index=index, field=field_name)
        if len(value) > _MAX_SHORT:
            raise InvalidMessageError(
                f"{field_name} is longer than {_MAX_SHORT} characters", index=index, field=field_name
            )
    if not isinstance(message.metadata, Mapping):
        raise InvalidMessageError(
            f"metadata must be a JSON object, not {type(message.metadata).__name__}",
            index=index,
            field="metadata",
        )
    _check_json(message.metadata, "metadata", index, "metadata")
    limits = app_settings()
    if message.parts:
        if isinstance(message.parts, Sized) and len(message.parts) > limits.MAX_PARTS_PER_MESSAGE:
            raise InvalidMessageError(
                f"{len(message.parts)} content parts, over the maximum of "
                f"{limits.MAX_PARTS_PER_MESSAGE} (AGENTMEMORY['MAX_PARTS_PER_MESSAGE'])",
                index=index,
            )
        validate_parts(message, index, max_data_bytes=limits.MAX_PART_DATA_BYTES)
    if not isinstance(message.tool_calls, tuple | list):
        raise InvalidMessageError(
            "tool_calls must be a list of ToolCall objects", index=index, field="tool_calls"
        )
    if len(message.tool_calls) > limits.MAX_TOOL_CALLS_PER_MESSAGE:
        raise InvalidMessageError(
            f"{len(message.tool_calls)} tool calls, over the maximum of "
            f"{limits.MAX_TOOL_CALLS_PER_MESSAGE} (AGENTMEMORY['MAX_TOOL_CALLS_PER_MESSAGE'])",
            index=index,
        )
    role = message.role
    if role in (Role.HUMAN, Role.SYSTEM) and content is None:
        raise InvalidMessageError(
            f"a {role} message needs content (text, possibly empty)", index=index, field="content"
        )
    if message.tool_calls and role is not Role.AI:
        raise InvalidMessageError(
            f"only ai messages carry tool calls, not {role}", index=index, field="tool_calls"
        )
    if role is Role.AI and content is None and not message.tool_calls:
        raise InvalidMessageError("an ai message needs content or tool calls", index=index, field="content")
    _check_error_flag(message, index)
    if role is Role.TOOL:
        if not message.tool_call_id:
            raise InvalidMessageError(
                "a tool result needs the tool_call_id of the call it answers",
                index=index,
                field="tool_call_id",
            )
        if content is None:
            raise InvalidMessageError(
                "a tool result needs content (text, possibly empty)", index=index, field="content"
            )
    elif message.tool_call_id:
        raise InvalidMessageError(
            f"only tool messages carry a tool_call_id, not {role}", index=index, field="tool_call_id"
        )
    seen: set[str] = set()
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            raise InvalidMessageError(
                "tool_calls must hold ToolCall objects", index=index, field="tool_calls"
            )
        if not isinstance(call.id, str) or not call.id or len(call.id) > _MAX_SHORT or text_problem(call.id):
            raise InvalidMessageError(
                f"tool call id {call.id!r} is empty, too long or not text", index=index, field="tool_calls"
            )
        if call.id in seen:
            raise InvalidMessageError(
                f"tool call id {call.id!r} appears twice", index=index, field="tool_calls"
            )
        seen.add(call.id)
        if (
            not isinstance(call.name, str)
            or not call.name
            or len(call.name) > _MAX_SHORT
            or text_problem(call.name)
        ):
            raise InvalidMessageError(
                f"tool call {call.id!r} needs a name of at most {_MAX_SHORT} characters of text",
                index=index,
                field="tool_calls",
            )
        if not isinstance(call.arguments, Mapping):
            raise InvalidMessageError(
                f"arguments of tool call {call.id!r} must be a JSON object, "
                f"not {type(call.arguments).__name__}",
                index=index,
                field="tool_calls",
            )
        _check_json(call.arguments, f"arguments of tool call {call.id!r}", index, "tool_calls")


def link_tool_message(
    message: ChatMessage, seq: int, index: int, pending: dict[str, int], *, strict: bool
) -> int | None:
    """Link a message to the tool exchange it belongs to, updating ``pending`` in place.

    Messages are stored in the order they happen: a human, system or AI message may follow a
    tool call that still awaits its result (an approval flow, a tool that runs for minutes, a
    client that died), and a result may arrive after later messages. Each tool call stays
    pending until a result with its id arrives.

    Args:
        message: the message about to be stored.
        seq: the seq it will be stored at.
        index: its place in the batch (for the error).
        pending: the conversation's unanswered tool calls, ``{tool_call_id: seq of the AI
            message that made the call}``; calls made by ``message`` are added, the call a
            tool result answers is removed.
        strict: refuse a tool result that answers no pending call, and a call whose id is
            still pending; otherwise (importing legacy history) such a result is stored as an
            orphan, which context windows skip, and such a call supersedes the pending one.

    Returns:
        The message's ``exchange_seq``: its own seq for an AI message with tool calls, the
        seq of the AI message whose call it answers for a tool result, ``None`` otherwise
        (and for an orphaned result).

    Raises:
        InvalidMessageError: in strict mode, an AI message reuses the id of a call still
            pending (a result could not tell which call it answers), or a tool result answers
            no pending call (OpenAI and Anthropic reject a result without its call).
    """
    if message.role is Role.AI and message.tool_calls:
        clash = sorted(c.id for c in message.tool_calls if c.id in pending)
        if clash and strict:
            raise InvalidMessageError(
                f"tool call id(s) {clash} are already awaiting results", index=index, field="tool_calls"
            )
        # Legacy history (``strict=False``): a model that numbers its calls afresh each turn
        # reuses the id of a call whose result never came; the new call supersedes it, so
        # later results answer the new call, and the abandoned exchange, no longer pending,
        # stays out of windows (its call is unanswered) without holding compaction back.
        for call in message.tool_calls:
            pending[call.id] = seq
        return seq
    if message.role is Role.TOOL:
        exchange = pending.pop(message.tool_call_id, None)
        if exchange is None and strict:
            raise InvalidMessageError(
                f"tool result for {message.tool_call_id!r} answers no earlier unanswered tool call",
                index=index,
                field="tool_call_id",
                hint="import legacy history with validate_tool_pairs=False to keep it as an orphan",
            )
        return exchange
    return None


# --------------------------------------------------------------------------- window arguments


def validate_max_tokens(max_tokens: Any, *, name: str = "max_tokens") -> int:
    """``max_tokens`` as an ``int``, checked: a whole number of tokens, at least 1, at
    most ``AGENTMEMORY['MAX_CONTEXT_TOKENS']`` (1,000,000 by default).

    Raises:
        TypeError: not an integer (a float, NaN, infinity, a string, a bool).
        ValueError: below 1 or above the ceiling.
    """
    value = whole_number(max_tokens, name, minimum=1, unit="tokens")
    ceiling = app_settings().MAX_CONTEXT_TOKENS
    if value > ceiling:
        raise ValueError(f"{name}={value} is above AGENTMEMORY['MAX_CONTEXT_TOKENS'] ({ceiling:,} tokens)")
    return value


def _tool_result_cap(cap: Any) -> int | None:
    """``max_tool_result_tokens`` checked: ``None`` (no cap) or a whole number of tokens of at
    least 1; a cap past ``AGENTMEMORY['MAX_CONTEXT_TOKENS']`` is that ceiling (no window is
    larger, and the database's integers are not unbounded).

    Raises:
        TypeError: not an integer (a float, a string, a bool).
        ValueError: below 1.
    """
    if cap is None:
        return None
    cap = whole_number(cap, "max_tool_result_tokens", minimum=1, unit="tokens")
    return min(cap, app_settings().MAX_CONTEXT_TOKENS)


def check_system_prompt(prompt: str | None) -> None:
    """Refuse a system prompt longer than any message may be, before anything counts or
    copies it: a 10-million-character prompt took 25 s of token counting and 491 MB before
    the window's budget refused it.

    Raises:
        TypeError: ``prompt`` is neither a string nor ``None``.
        InvalidMessageError: ``prompt`` holds more than ``AGENTMEMORY["MAX_MESSAGE_CHARS"]``
            characters, or text no database stores (a NUL character, a lone surrogate:
            ``text_problem``), which the model call's record could not keep.
    """
    if prompt is None:
        return
    if not isinstance(prompt, str):
        raise TypeError(f"the system prompt must be a string or None, not {type(prompt).__name__}")
    limit = app_settings().MAX_MESSAGE_CHARS
    if len(prompt) > limit:
        raise InvalidMessageError(
            f"the system prompt has {len(prompt):,} characters, over the maximum of {limit:,} "
            "(AGENTMEMORY['MAX_MESSAGE_CHARS'])"
        )
    problem = text_problem(prompt)
    if problem:
        raise InvalidMessageError(f"the system prompt {problem}")


def system_prompt_tokens(prompt: str, counter: Any, max_tokens: int) -> int:
    """Tokens the system prompt ``prompt`` costs on every call of a turn (``counter`` a
    ``TokenCounter``), refused before the turn stores its human message when it leaves no
    room in a window of ``max_tokens`` tokens: every call of that turn would fail, and each
    retry would leave one more unanswered human message behind.

    Raises:
        TypeError, InvalidMessageError: as ``check_system_prompt``, which runs first.
        ContextBudgetExceeded: the prompt (with its knowledge block) needs ``max_tokens``
            tokens or more (``seq`` None, ``tokens`` the prompt's, ``available`` the window).
    """
    check_system_prompt(prompt)
    tokens = int(counter.count_message(ChatMessage.system(prompt)))
    if tokens >= max_tokens:
        raise ContextBudgetExceeded(
            seq=None,
            tokens=tokens,
            available=max_tokens,
            message=(
                f"the system prompt needs {tokens} tokens, leaving nothing of the context window "
                f"of {max_tokens} for the human message; nothing was stored. Shorten the prompt "
                "(or its knowledge block) or raise CONVERSATION_HISTORY_TOKEN_LIMIT"
            ),
        )
    return tokens
