"""Converters between ``ChatMessage`` and OpenAI chat-completions messages.

The OpenAI shape follows the Chat Completions API contract
(https://platform.openai.com/docs/api-reference/chat/create, ``messages`` parameter; the typed
request params in the official ``openai`` SDK, ``openai/types/chat/chat_completion_*_param.py``):

- roles ``system``/``developer``/``user``/``assistant``/``tool`` (``function`` is deprecated);
- ``content`` is a string, ``null`` (assistant messages that only call tools) or a list of
  content parts: ``{"type": "text", "text"}``; in user messages also ``{"type": "image_url",
  "image_url": {"url": <http(s) or base64 data URL>, "detail": "low"|"high"|"auto"}}``,
  ``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"|"mp3"}}`` and
  ``{"type": "file", "file": {"file_data": <base64 data URL>, "filename"} | {"file_id"}}``;
  in assistant messages also ``{"type": "refusal", "refusal"}``, read as a text part.
  Several parts are stored as ``ContentPart``s (``ChatMessage.parts``) and sent back as
  parts; a list holding one text part is plain text;
- assistant ``tool_calls`` are ``{"id", "type": "function", "function": {"name", "arguments"}}``
  where ``arguments`` is a JSON *string* (here parsed into a dict, see ``ToolCall``);
- ``tool`` messages answer one call through ``tool_call_id``.

Mapping: ``system`` and ``developer`` -> ``Role.SYSTEM``, ``user`` -> ``Role.HUMAN``,
``assistant`` -> ``Role.AI``, ``tool`` -> ``Role.TOOL``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats import changes
from agentmemory.formats.media import AUDIO_FORMATS, data_url, parse_data_url, with_media_limit
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall, parts_text

__all__ = ["from_openai", "from_openai_messages", "to_openai", "to_openai_messages"]

_ROLE_FROM_OPENAI = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.HUMAN,
    "assistant": Role.AI,
    "tool": Role.TOOL,
}
_ROLE_TO_OPENAI = {Role.SYSTEM: "system", Role.HUMAN: "user", Role.AI: "assistant", Role.TOOL: "tool"}
# Roles whose params accept an optional participant ``name`` (the tool message param has none).
_ROLES_WITH_NAME = {Role.SYSTEM, Role.HUMAN, Role.AI}
#: what the API refuses in a participant ``name``: 400 "Invalid 'messages[1].name': string
#: does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'"
#: (a display name with a space, an accent or a dot); each such character is sent as ``_``
_NAME_REFUSED = re.compile(r"[^a-zA-Z0-9_-]")
#: longest tool-call id the API accepts: 400 "Invalid 'messages[2].tool_calls[0].id': string
#: too long. Expected a string with maximum length 40" (ids made by other providers and
#: gateways run longer: ``ws_...`` of 51 characters, ``portkey-<uuid>`` of 44)
MAX_TOOL_CALL_ID_CHARS = 40


#: longest function name the API accepts: 400 "Invalid 'tools[0].function.name': string too
#: long. Expected a string with maximum length 64"; the name must also match
#: ``^[a-zA-Z0-9_-]+$``, in the declarations and in the calls of earlier assistant messages
#: ("Invalid 'messages[9].tool_calls[0].function.name': string does not match pattern")
MAX_FUNCTION_NAME_CHARS = 64
#: longest string the API takes as a message's content: 400 "Invalid 'messages[5].content':
#: string too long. Expected a string with maximum length 10485760" (code
#: ``string_above_max_length``; reported in Shopify/roast#52, a tool output that then failed
#: every request). Text parts are held to it as well.
MAX_CONTENT_CHARS = 10_485_760
#: what a text cut to ``MAX_CONTENT_CHARS`` ends with
CUT_MARKER = "\n[... cut to the API's longest message: {omitted} of {total} characters omitted ...]"
#: images one request may carry (OpenAI's vision guide: up to 500 image inputs per request)
MAX_IMAGES_PER_REQUEST = 500
#: the type of the entry in an ``ai`` message's ``metadata["thinking"]`` that holds the
#: ``reasoning_content`` an OpenAI-compatible server in thinking mode replied with (DeepSeek,
#: Kimi, vLLM's reasoning parsers); the Anthropic converter leaves such entries out
REASONING_CONTENT = "reasoning_content"


def _reasoning_metadata(message: Mapping[str, Any]) -> dict[str, Any]:
    """``{"thinking": [{"type": "reasoning_content", "thinking": text}]}`` for an assistant
    message with a non-empty ``reasoning_content``, else ``{}``. Kept under ``thinking``, the
    one metadata key context windows carry (and token counters count) for ``ai`` messages."""
    text = message.get(REASONING_CONTENT)
    if not isinstance(text, str) or not text:
        return {}
    return {"thinking": [{"type": REASONING_CONTENT, "thinking": text}]}


def reasoning_content(message: ChatMessage) -> str | None:
    """The ``reasoning_content`` stored with an ``ai`` message (``_reasoning_metadata``), or
    ``None``."""
    stored = message.metadata.get("thinking") if isinstance(message.metadata, Mapping) else None
    if not isinstance(stored, list | tuple):
        return None
    texts = [
        block["thinking"]
        for block in stored
        if isinstance(block, Mapping)
        and block.get("type") == REASONING_CONTENT
        and isinstance(block.get("thinking"), str)
    ]
    return "".join(texts) or None


def request_function_name(name: str) -> str:
    """A stored tool call's function name as sent to the API: itself when it matches
    ``^[a-zA-Z0-9_-]{1,64}$``, else with each other character sent as ``_`` and, past 64
    characters, its first 55, ``_`` and 8 hex digits of its SHA-256. Histories hold names
    the API never declared (a tool of another provider or an MCP server, ``"files.read"``,
    ``"lookup order"``); a pure function of the name, so a name is sent the same way in
    every message."""
    sent = _NAME_REFUSED.sub("_", name) or "_"
    if len(sent) <= MAX_FUNCTION_NAME_CHARS:
        return sent
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{sent[: MAX_FUNCTION_NAME_CHARS - 9]}_{digest}"


def request_call_id(call_id: str) -> str:
    """``call_id`` as sent to the API: itself when it has at most ``MAX_TOOL_CALL_ID_CHARS``
    characters, else its first 31 characters, ``_`` and 8 hex digits of its SHA-256. A pure
    function of the id, so a call and its result, converted one message at a time, carry
    the same id, and distinct long ids stay distinct (short of a 32-bit hash collision).
    Storage keeps the id as it was."""
    if len(call_id) <= MAX_TOOL_CALL_ID_CHARS:
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return f"{call_id[: MAX_TOOL_CALL_ID_CHARS - 9]}_{digest}"


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidMessageError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _string(value: Any, what: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise InvalidMessageError(f"{what} must be a non-empty string")
    return value


def part_from_openai(part: Any, where: str) -> ContentPart:
    """One OpenAI content part as a ``ContentPart`` (``where`` names it in errors).

    ``image_url`` with a base64 data URL keeps the data and its MIME type (the URL prefix is
    not stored twice); ``input_audio``'s ``format`` becomes a MIME type (``wav`` ->
    ``audio/wav``, ``mp3`` -> ``audio/mpeg``); a ``file``'s ``file_data`` data URL is split
    the same way.

    Raises:
        InvalidMessageError: not an object, an unknown type (``refusal`` parts included:
            only an assistant message takes them, read by ``_content_from_openai``), a
            missing or malformed field.
    """
    part = _object(part, where)
    kind = part.get("type")
    if kind == "text":
        return ContentPart(PartKind.TEXT, text=_string(part.get("text"), f"{where} 'text'", required=False))
    if kind == "image_url":
        image = _object(part.get("image_url"), f"{where} 'image_url'")
        url = _string(image.get("url"), f"{where} image_url 'url'")
        detail = _string(image.get("detail"), f"{where} image_url 'detail'", required=False)
        inline = parse_data_url(url)
        if inline is not None:
            return ContentPart(PartKind.IMAGE, data=inline[1], mime_type=inline[0], detail=detail)
        if url.startswith("data:"):
            raise InvalidMessageError(f"{where} image_url is a data URL that is not base64")
        return ContentPart(PartKind.IMAGE, url=url, detail=detail)
    if kind == "input_audio":
        audio = _object(part.get("input_audio"), f"{where} 'input_audio'")
        data = _string(audio.get("data"), f"{where} input_audio 'data'")
        audio_format = _string(audio.get("format"), f"{where} input_audio 'format'")
        return ContentPart(
            PartKind.AUDIO, data=data, mime_type=AUDIO_FORMATS.get(audio_format, f"audio/{audio_format}")
        )
    if kind == "file":
        file = _object(part.get("file"), f"{where} 'file'")
        filename = _string(file.get("filename"), f"{where} file 'filename'", required=False)
        file_id = _string(file.get("file_id"), f"{where} file 'file_id'", required=False)
        file_data = _string(file.get("file_data"), f"{where} file 'file_data'", required=False)
        if file_data:
            inline = parse_data_url(file_data)
            mime, data = inline if inline is not None else ("", file_data)
            return ContentPart(PartKind.FILE, data=data, mime_type=mime, filename=filename, file_id=file_id)
        if not file_id:
            raise InvalidMessageError(f"{where} file has neither 'file_data' nor 'file_id'")
        return ContentPart(PartKind.FILE, file_id=file_id, filename=filename)
    raise InvalidMessageError(
        f"{where} has type {kind!r}; supported content parts are text, image_url, input_audio and file"
    )


def _refusal_part(part: Mapping[str, Any], where: str) -> ContentPart:
    """An assistant's ``{"type": "refusal", "refusal": text}`` part (Chat Completions
    ``ChatCompletionContentPartRefusalParam``) as a text part: what the assistant said, which
    later turns and summaries must see."""
    return ContentPart(PartKind.TEXT, text=_string(part.get("refusal"), f"{where} 'refusal'"))


def _content_from_openai(content: Any, role: str) -> tuple[str | None, tuple[ContentPart, ...]]:
    """``(content, parts)`` of an OpenAI ``content`` value (string, ``None`` or parts)."""
    if content is None or isinstance(content, str):
        return content, ()
    if isinstance(content, list | tuple):
        parts = tuple(
            _refusal_part(part, f"{role} message content part {position}")
            if role == "assistant" and isinstance(part, Mapping) and part.get("type") == "refusal"
            else part_from_openai(part, f"{role} message content part {position}")
            for position, part in enumerate(content)
        )
        if len(parts) == 1 and parts[0].kind is PartKind.TEXT:
            return parts[0].text, ()
        if not parts:
            return "", ()
        return parts_text(parts), parts
    raise InvalidMessageError(
        f"{role} message content must be a string, null or a list of content parts, "
        f"not {type(content).__name__}"
    )


def part_to_openai(part: ContentPart) -> dict[str, Any]:
    """One ``ContentPart`` as an OpenAI content part (the inverse of ``part_from_openai``).

    An Anthropic document given by URL or as plain text, which OpenAI's ``file`` part cannot
    carry, is sent as a text part: its text, or ``[file: <url>]``.
    """
    if part.kind is PartKind.TEXT:
        return {"type": "text", "text": part.text}
    if part.kind is PartKind.IMAGE:
        if part.file_id:
            changes.note(changes.IMAGE_PLACEHOLDER, "OpenAI's chat messages take no image by file id")
            return {"type": "text", "text": part.placeholder}
        image: dict[str, Any] = {"url": data_url(part.mime_type, part.data) if part.data else part.url}
        if part.detail:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if part.kind is PartKind.AUDIO:
        formats = {mime: name for name, mime in AUDIO_FORMATS.items()}
        audio_format = formats.get(part.mime_type, part.mime_type.removeprefix("audio/"))
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": audio_format}}
    if part.text:
        return {"type": "text", "text": part.text}
    if part.url:
        changes.note(
            changes.FILE_PLACEHOLDER, "OpenAI's file part takes no URL", sent=f"[file: {part.url}]"[:200]
        )
        return {"type": "text", "text": f"[file: {part.url}]"}
    file: dict[str, Any] = {}
    if part.data:
        file["file_data"] = data_url(part.mime_type, part.data) if part.mime_type else part.data
    if part.file_id:
        file["file_id"] = part.file_id
    if part.filename:
        file["filename"] = part.filename
    return {"type": "file", "file": file}


def _parts_to_openai(message: ChatMessage, role: Role) -> list[dict[str, Any]]:
    """The parts of ``message`` for its OpenAI role: user messages take every kind; system,
    assistant and tool messages take only text parts, so other parts become their
    placeholder text (``[image]``)."""
    sent = []
    for position, part in enumerate(message.parts):
        with changes.located(part=position):
            if role is Role.HUMAN:
                sent.append(changes.tag(part_to_openai(part)))
                continue
            if part.kind is not PartKind.TEXT:
                changes.note(
                    changes.placeholder_change(part.kind), "OpenAI takes media in user messages only"
                )
            if part.placeholder:
                sent.append(changes.tag({"type": "text", "text": part.placeholder}))
    return sent


def _tool_call_from_openai(call: Any, position: int) -> ToolCall:
    """Parse one assistant ``tool_calls`` entry; ``arguments`` must decode to a JSON object."""
    if not isinstance(call, Mapping):
        raise InvalidMessageError(
            f"tool call {position} is {type(call).__name__}, not an object", field="tool_calls"
        )
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"tool call {position} has no 'id'", field="tool_calls")
    call_type = call.get("type", "function")
    if call_type != "function":
        raise InvalidMessageError(
            f"tool call {call_id!r} has type {call_type!r}; only 'function' tool calls are supported",
            field="tool_calls",
        )
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise InvalidMessageError(f"tool call {call_id!r} has no 'function' object", field="tool_calls")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidMessageError(f"tool call {call_id!r} has no function 'name'", field="tool_calls")
    raw = function.get("arguments")
    if raw is None:
        # Left out or null (serializers write either for a tool without parameters).
        raw = ""
    if isinstance(raw, Mapping):
        # Not the OpenAI contract (a JSON string), but some compatible servers send the object.
        arguments: Any = dict(raw)
    elif isinstance(raw, str):
        if not raw.strip():
            arguments = {}
        else:
            try:
                arguments = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InvalidMessageError(
                    f"tool call {call_id!r} ({name}) arguments are not valid JSON: {exc.msg} "
                    f"at position {exc.pos}",
                    field="tool_calls",
                ) from exc
            except RecursionError as exc:
                # Python's parser recurses once per level: about 1,000 levels exhaust the stack.
                raise InvalidMessageError(
                    f"tool call {call_id!r} ({name}) arguments are nested too deeply to parse",
                    field="tool_calls",
                ) from exc
    else:
        raise InvalidMessageError(
            f"tool call {call_id!r} ({name}) arguments must be a JSON string, not {type(raw).__name__}",
            field="tool_calls",
        )
    if not isinstance(arguments, dict):
        raise InvalidMessageError(
            f"tool call {call_id!r} ({name}) arguments must be a JSON object, not {type(arguments).__name__}",
            field="tool_calls",
        )
    return ToolCall(id=call_id, name=name, arguments=arguments)


def from_openai(message: Mapping[str, Any]) -> ChatMessage:
    """Convert one OpenAI chat-completions message dict into a ``ChatMessage``.

    Args:
        message: a request message (``{"role", "content", ...}``) or a response's
            ``choices[i].message``, as a dict or as the ``openai`` SDK's object.

    Returns:
        The ``ChatMessage``. ``content: null`` stays ``None`` (an assistant message that only
        calls tools round-trips exactly, bug case BUG-20); text content parts are joined with
        ``""``; tool-call ``arguments`` (a JSON string, ``""`` meaning ``{}``) become a dict;
        ``name`` is kept; content parts other than a single text part are kept as
        ``parts`` (``content`` then holds their text); a non-empty top-level assistant ``refusal`` is kept in
        ``metadata["refusal"]``; a non-empty assistant ``reasoning_content`` (the thinking of
        DeepSeek, Kimi and other OpenAI-compatible servers in thinking mode) is kept in
        ``metadata["thinking"]`` as ``[{"type": "reasoning_content", "thinking": text}]``,
        to go back with its turn (``to_openai``). Other keys (``annotations``,
        ``audio: null``, ...) are ignored.
        Null or missing content reads as ``""`` on an assistant message without tool calls
        (an empty completion; a refusal reads as its text) and on a tool message (a tool
        that returned nothing); null or missing tool-call ``arguments`` read as ``{}``.

    Raises:
        InvalidMessageError: not an object; missing or unknown role; the deprecated ``function``
            role or ``function_call`` field; unknown or malformed content parts; malformed tool calls,
            arguments that are not valid JSON or not a JSON object (the error names the call
            id), duplicate call ids; ``tool_calls`` on a non-assistant message; a tool message
            without ``tool_call_id``.
    """
    if not isinstance(message, Mapping) and callable(getattr(message, "model_dump", None)):
        # An SDK object such as ``response.choices[0].message`` (a pydantic model); its
        # unset optional fields (``function_call``, ``audio``, ...) come out as None.
        message = message.model_dump(exclude_none=True) | {"content": message.content}  # type: ignore[attr-defined]
    if not isinstance(message, Mapping):
        raise InvalidMessageError(f"an OpenAI message must be an object, not {type(message).__name__}")
    role_name = message.get("role")
    if not isinstance(role_name, str) and role_name is not None:
        raise InvalidMessageError(
            f"unknown OpenAI role: a {type(role_name).__name__}, not a string", field="role"
        )
    if role_name == "function":
        raise InvalidMessageError(
            "the legacy 'function' role is not supported; use 'tool' messages with a tool_call_id "
            "(OpenAI deprecated function calling in favour of tool calls)"
        )
    if role_name not in _ROLE_FROM_OPENAI:
        raise InvalidMessageError(
            f"unknown OpenAI role {role_name!r}; expected one of system, developer, user, assistant, tool",
            field="role",
        )
    role = _ROLE_FROM_OPENAI[role_name]
    content, parts = _content_from_openai(message.get("content"), role_name)
    name = message.get("name") or ""
    if not isinstance(name, str):
        raise InvalidMessageError(f"{role_name} message 'name' must be a string")

    raw_calls = message.get("tool_calls")
    if raw_calls is not None and role is not Role.AI:
        raise InvalidMessageError(f"only assistant messages may carry tool_calls, not {role_name} messages")

    if role is Role.AI:
        if message.get("function_call") is not None:
            raise InvalidMessageError(
                "the legacy assistant 'function_call' field is not supported; use 'tool_calls'"
            )
        if message.get("audio") is not None:
            raise InvalidMessageError("assistant audio responses cannot be stored as text")
        if raw_calls is None:
            raw_calls = []
        if not isinstance(raw_calls, list | tuple):
            raise InvalidMessageError("assistant 'tool_calls' must be a list")
        tool_calls = tuple(_tool_call_from_openai(call, i) for i, call in enumerate(raw_calls))
        ids = [call.id for call in tool_calls]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise InvalidMessageError(f"assistant message repeats tool call id(s) {duplicates}")
        refusal = message.get("refusal")
        metadata = {"refusal": refusal} if isinstance(refusal, str) and refusal else {}
        metadata.update(_reasoning_metadata(message))
        if content is None and not tool_calls:
            # No text and no call: a refusal, an empty completion, or a serializer that wrote
            # null or left the key out (BUG-20). The API takes content null only beside tool
            # calls. A refusal is what the assistant said, so later turns (and summaries)
            # see it; otherwise the turn is the empty text ``to_openai`` would send for it.
            content = metadata.get("refusal", "")
        return ChatMessage(
            role=role, content=content, tool_calls=tool_calls, name=name, metadata=metadata, parts=parts
        )

    if role is Role.TOOL:
        tool_call_id = message.get("tool_call_id")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise InvalidMessageError("tool message has no 'tool_call_id' naming the call it answers")
        # A tool that returned nothing, stored as null or without the key: the empty result
        # (what ``to_openai`` sends for it), so that its call keeps its answer.
        content = "" if content is None else content
        return ChatMessage(role=role, content=content, tool_call_id=tool_call_id, name=name, parts=parts)

    return ChatMessage(role=role, content=content, name=name, parts=parts)


def from_openai_messages(messages: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """Convert a list of OpenAI messages (the ``messages`` request parameter).

    Each message is converted by ``from_openai``; the sequence itself (tool results answering
    earlier calls) is validated by storage, not here. OpenAI's tool message has no ``name``
    (the Chat Completions API links a result to its call by ``tool_call_id`` only), so a tool
    result answering a call made earlier in the list takes that call's function name, as the
    Anthropic and LangChain converters give it.

    Raises:
        InvalidMessageError: as ``from_openai``, with ``index`` set to the 0-based position of the
            offending message.
    """
    result: list[ChatMessage] = []
    tool_names: dict[str, str] = {}
    for index, message in enumerate(messages):
        try:
            converted = from_openai(message)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
        if converted.role is Role.TOOL and not converted.name and converted.tool_call_id in tool_names:
            converted = replace(converted, name=tool_names[converted.tool_call_id])
        tool_names.update((call.id, call.name) for call in converted.tool_calls)
        result.append(converted)
    return result


def _sent_as_image(message: ChatMessage, part: ContentPart) -> bool:
    """An image part sent as an ``image_url`` (user messages; an image by file id, and the
    images of other roles, go as text)."""
    return message.role is Role.HUMAN and part.kind is PartKind.IMAGE and not part.file_id


def _within_length(text: str, where: tuple[int | None, int | None] | None = None) -> str:
    """``text``, or when longer than ``MAX_CONTENT_CHARS`` its start with ``CUT_MARKER``
    (the whole fits the limit; the cut is noted at ``where``, else at the current position,
    for the recorded call)."""
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    keep = cut_length(text)
    changes.note(
        changes.CONTENT_CUT,
        f"OpenAI takes at most {MAX_CONTENT_CHARS:,} characters of content per message",
        at=where,
        kept=keep,
    )
    return cut_text(text, keep)


def cut_length(text: str) -> int:
    """Characters of ``text`` (longer than ``MAX_CONTENT_CHARS``) kept before ``CUT_MARKER``:
    the marker's longest form (fewer characters are omitted than the text holds) fits."""
    return MAX_CONTENT_CHARS - len(CUT_MARKER.format(omitted=len(text), total=len(text)))


def cut_text(text: str, keep: int) -> str:
    """``text`` cut to its first ``keep`` characters, ending in ``CUT_MARKER``."""
    keep = min(keep, len(text))
    return text[:keep] + CUT_MARKER.format(omitted=len(text) - keep, total=len(text))


def _content_within_length(content: Any) -> Any:
    """A message's ``content`` (a string, ``None`` or parts) with every string and text part
    within ``MAX_CONTENT_CHARS``."""
    if isinstance(content, str):
        return _within_length(content)
    if isinstance(content, list):
        return [
            {**part, "text": _within_length(part["text"], changes.origin(part))}
            if part.get("type") == "text" and len(part["text"]) > MAX_CONTENT_CHARS
            else part
            for part in content
        ]
    return content


def _arguments_json(call: ToolCall) -> str:
    try:
        return json.dumps(dict(call.arguments), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(
            f"tool call {call.id!r} ({call.name}) arguments are not JSON-serialisable: {exc}",
            field="tool_calls",
        ) from exc


def to_openai(message: ChatMessage) -> dict[str, Any]:
    """Convert one ``ChatMessage`` into the dict the OpenAI chat-completions API accepts.

    Shapes (Chat Completions ``messages`` contract):

    - system / human: ``{"role": "system"|"user", "content": str}`` (``None`` sent as ``""``),
      plus ``"name"`` when non-empty, in the characters the API accepts (``[a-zA-Z0-9_-]``;
      any other is sent as ``_``, storage keeps the name as it is);
    - ai: ``{"role": "assistant", "content": str|None}``, plus ``"tool_calls"`` as
      ``[{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}]`` when
      it calls tools, and ``"name"`` when non-empty. ``content`` stays ``None`` only when the
      message calls tools (the API requires content otherwise; then ``""`` is sent).
      ``"reasoning_content"`` is sent when the message was a reply that carried it
      (``from_openai``): servers in thinking mode refuse a tool loop whose assistant turns
      come back without it (400 "The `reasoning_content` in the thinking mode must be passed
      back to the API", DeepSeek's thinking-mode guide; crewAIInc/crewAI#5878). A reply of
      OpenAI's own never carries it, so nothing changes there;
    - tool: ``{"role": "tool", "tool_call_id": str, "content": str}`` (``None`` sent as ``""``;
      the tool message param has no ``name``, so a tool name is not sent).

    A content string or text part longer than the API's ``MAX_CONTENT_CHARS``
    (10,485,760) is sent cut, ending in ``CUT_MARKER``; storage keeps it whole.

    Tool-call ids longer than the API's 40 characters are sent shortened
    (``request_call_id``), the same for a call and its result; function names outside
    ``^[a-zA-Z0-9_-]{1,64}$`` are sent made to fit it (``request_function_name``).

    A message with ``parts`` sends them as a list of content parts (``part_to_openai``);
    roles other than ``user`` take only text parts, so their images, audio and files are
    sent as placeholder text. ``metadata``, ``seq``, ``id``, ``token_count`` and
    ``truncated`` are never sent.

    Raises:
        InvalidMessageError: a tool message without ``tool_call_id``; tool-call arguments that
            cannot be serialised to JSON; an unknown role.
    """
    try:
        role = Role(message.role)
    except ValueError as exc:
        raise InvalidMessageError(f"unknown role {message.role!r}", field="role") from exc
    # a copy truncated for the window is sent as its shortened text
    parts = _parts_to_openai(message, role) if message.parts and not message.truncated else None
    if role is Role.TOOL:
        if not message.tool_call_id:
            raise InvalidMessageError("tool message has no tool_call_id naming the call it answers")
        content = _content_within_length(parts if parts else message.content or "")
        return {"role": "tool", "tool_call_id": request_call_id(message.tool_call_id), "content": content}

    result: dict[str, Any] = {"role": _ROLE_TO_OPENAI[role]}
    if role is Role.AI:
        # content null is only valid next to tool_calls (BUG-20 keeps it null there).
        no_content = message.content is None and not message.tool_calls
        result["content"] = "" if no_content else message.content
        reasoning = reasoning_content(message)
        if reasoning is not None:
            result[REASONING_CONTENT] = reasoning
        if message.tool_calls:
            result["tool_calls"] = [
                {
                    "id": request_call_id(call.id),
                    "type": "function",
                    "function": {
                        "name": request_function_name(call.name),
                        "arguments": _arguments_json(call),
                    },
                }
                for call in message.tool_calls
            ]
    else:
        result["content"] = message.content or ""
    if parts:
        result["content"] = parts
    result["content"] = _content_within_length(result["content"])
    if message.name and role in _ROLES_WITH_NAME:
        result["name"] = _NAME_REFUSED.sub("_", message.name)
    return result


def to_openai_messages(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """Convert ``ChatMessage``s into the OpenAI ``messages`` request parameter.

    At most ``MAX_IMAGES_PER_REQUEST`` (500) images are sent, the newest; older ones go as
    their placeholder text (``[image]``): a stored history brings its images into every
    later request, and the API refuses a request with more.

    Raises:
        InvalidMessageError: as ``to_openai``, with ``index`` set to the 0-based position of the
            offending message.
    """
    result: list[dict[str, Any]] = []
    sent = with_media_limit(
        list(messages),
        _sent_as_image,
        MAX_IMAGES_PER_REQUEST,
        limit_reason=f"OpenAI takes at most {MAX_IMAGES_PER_REQUEST} images per request; the newest are sent",
    )
    for index, message in enumerate(sent):
        try:
            with changes.located(message=index, part=None):
                result.append(to_openai(message))
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
    return result
