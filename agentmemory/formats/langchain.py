"""Converters between ``ChatMessage`` and LangChain messages (``langchain_core.messages``).

Needs ``langchain-core`` (the optional extra ``pip install 'django-agentmemory[langchain]'``); importing
this module without it raises ``ImportError`` with that hint.

LangChain shapes (``langchain_core.messages``, v0.3 and v1): ``SystemMessage``, ``HumanMessage``,
``AIMessage`` whose ``tool_calls`` are ``ToolCall`` dicts ``{"name", "args": dict, "id",
"type": "tool_call"}``, and ``ToolMessage(content, tool_call_id, name, status)``. ``content`` is a
string or a list of content blocks (strings and ``{"type": "text", "text"}`` dicts, plus images
and provider-specific blocks).

Content parts are written as LangChain's provider-neutral standard blocks (``{"type":
"image"|"audio"|"file", "base64"|"url"|"file_id", "mime_type", "extras"}`` and ``{"type":
"text-plain"}``; ``langchain_core.messages.content``), which each LangChain chat model
translates for its provider. Read back are those, the older ``source_type`` form, OpenAI's
content parts and Anthropic's image and document blocks.

Mapping: ``Role.SYSTEM`` <-> ``SystemMessage``, ``Role.HUMAN`` <-> ``HumanMessage``, ``Role.AI``
<-> ``AIMessage``, ``Role.TOOL`` <-> ``ToolMessage``. LangChain has no ``null`` content, so an
``ai`` message that only calls tools is sent with ``""`` and read back as ``None``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.messages import ChatMessage as LangChainGenericMessage
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "agentmemory.formats.langchain needs the 'langchain-core' package; install it with: "
        "pip install 'django-agentmemory[langchain]'"
    ) from exc

from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats.anthropic import part_from_anthropic, thinking_blocks
from agentmemory.formats.openai import REASONING_CONTENT, part_from_openai, reasoning_content
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall

__all__ = ["from_langchain", "from_langchain_message", "to_langchain", "to_langchain_message"]

_GENERIC_ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.HUMAN,
    "human": Role.HUMAN,
    "assistant": Role.AI,
    "ai": Role.AI,
}


#: the source fields of a standard block, and the ``ContentPart`` field each maps to
_SOURCES = (("base64", "data"), ("url", "url"), ("file_id", "file_id"))
_MEDIA = {"image": PartKind.IMAGE, "audio": PartKind.AUDIO, "file": PartKind.FILE}
#: fields of LangChain's ``text-plain`` block kept in a ``ContentPart``'s ``extra`` (as
#: Anthropic's document block keeps them)
_PLAIN_TEXT_FIELDS = ("title", "context")


def part_to_langchain(part: ContentPart) -> dict[str, Any]:
    """One ``ContentPart`` as a LangChain standard content block."""
    if part.kind is PartKind.TEXT:
        return {"type": "text", "text": part.text}
    if part.kind is PartKind.FILE and part.text:
        # The block's ``mime_type`` is always text/plain and ``title`` and ``context`` are its
        # own fields; the rest of the part (its file name, a MIME type such as text/markdown,
        # provider fields) goes in ``extras``, so that the part comes back whole.
        block: dict[str, Any] = {"type": "text-plain", "mime_type": "text/plain", "text": part.text}
        extras = dict(part.extra)
        for key in _PLAIN_TEXT_FIELDS:
            if key in extras:
                block[key] = extras.pop(key)
        if part.filename:
            extras["filename"] = part.filename
        if part.mime_type and part.mime_type != "text/plain":
            extras["mime_type"] = part.mime_type
        if extras:
            block["extras"] = extras
        return block
    block = {"type": part.kind.value}
    for key, name in _SOURCES:
        if getattr(part, name):
            block[key] = getattr(part, name)
    if part.mime_type:
        block["mime_type"] = part.mime_type
    extras = dict(part.extra)
    if part.detail:
        extras["detail"] = part.detail
    if part.filename:
        extras["filename"] = part.filename
    if extras:
        block["extras"] = extras
    return block


def part_from_langchain(block: Any, where: str) -> ContentPart:
    """One LangChain content block as a ``ContentPart``: a string, a standard block (v1, or
    the older ``source_type`` form), an OpenAI content part or an Anthropic block.

    Raises:
        InvalidMessageError: another block type, a block without a source.
    """
    if isinstance(block, str):
        return ContentPart(PartKind.TEXT, text=block)
    if not isinstance(block, Mapping):
        raise InvalidMessageError(f"{where} is {type(block).__name__}, not a string or an object")
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidMessageError(f"{where} text block has no string 'text'")
        return ContentPart(PartKind.TEXT, text=text)
    if kind in ("image_url", "input_audio") or (kind == "file" and isinstance(block.get("file"), Mapping)):
        return part_from_openai(block, where)
    if kind in ("image", "document") and isinstance(block.get("source"), Mapping):
        return part_from_anthropic(block, where)
    if kind == "text-plain":
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidMessageError(f"{where} text-plain block has no string 'text'")
        extra = dict(block.get("extras") or {}) if isinstance(block.get("extras"), Mapping) else {}
        filename = extra.pop("filename", "")
        mime_type = extra.pop("mime_type", "")
        extra.update((key, block[key]) for key in _PLAIN_TEXT_FIELDS if isinstance(block.get(key), str))
        return ContentPart(
            PartKind.FILE,
            text=text,
            mime_type=mime_type if isinstance(mime_type, str) and mime_type else "text/plain",
            filename=filename if isinstance(filename, str) else "",
            extra=extra,
        )
    if kind not in _MEDIA:
        raise InvalidMessageError(
            f"{where} has type {kind!r}; text, image, audio, file and text-plain blocks can be stored"
        )
    fields: dict[str, Any] = {}
    source_type = block.get("source_type")  # the form before langchain-core 1.0
    if source_type == "base64":
        fields["data"] = block.get("data")
    elif source_type == "url":
        fields["url"] = block.get("url")
    elif source_type == "id":
        fields["file_id"] = block.get("id")
    else:
        fields = {name: block[key] for key, name in _SOURCES if block.get(key)}
    if len(fields) != 1 or not all(isinstance(v, str) and v for v in fields.values()):
        raise InvalidMessageError(f"{where} {kind} block needs one of base64, url or file_id")
    extras = dict(block.get("extras") or {})
    detail = extras.pop("detail", "")
    filename = extras.pop("filename", "") or block.get("filename") or ""
    return ContentPart(
        _MEDIA[kind],
        mime_type=block.get("mime_type") or "",
        detail=detail if isinstance(detail, str) else "",
        filename=filename if isinstance(filename, str) else "",
        extra=extras,
        **fields,
    )


def _content_to_langchain(message: ChatMessage, role: Role) -> str | list[str | dict[str, Any]]:
    if not message.parts or message.truncated:
        return message.content or ""
    if role in (Role.HUMAN, Role.TOOL):
        return [part_to_langchain(part) for part in message.parts]
    return [{"type": "text", "text": part.placeholder} for part in message.parts if part.placeholder]


def _content_from_langchain(content: Any, kind: str) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (ContentPart(PartKind.TEXT, text=content),)
    if not isinstance(content, list | tuple):
        raise InvalidMessageError(f"{kind} content must be a string or a list, not {type(content).__name__}")
    return tuple(
        part_from_langchain(block, f"{kind} content block {position}")
        for position, block in enumerate(content)
    )


def to_langchain_message(message: ChatMessage) -> BaseMessage:
    """Convert one ``ChatMessage`` into a LangChain message.

    Returns:
        ``SystemMessage(content)``, ``HumanMessage(content, name)``, ``AIMessage(content,
        tool_calls=[{"id", "name", "args", "type": "tool_call"}], name)`` or
        ``ToolMessage(content, tool_call_id, name)`` (``status="error"`` when
        ``metadata["is_error"]``). ``None`` content is sent as ``""``; an empty ``name`` is not
        set; metadata, seq and ids are not copied. ``parts`` are sent as a list of standard
        content blocks (``part_to_langchain``); system and ai messages take their text, with
        placeholders such as ``[image]`` for other parts.

    Raises:
        InvalidMessageError: an unknown role; a tool message without ``tool_call_id``.
    """
    try:
        role = Role(message.role)
    except ValueError as exc:
        raise InvalidMessageError(f"unknown role {message.role!r}", field="role") from exc
    content: Any = _content_to_langchain(message, role)
    name = message.name or None
    if role is Role.SYSTEM:
        return SystemMessage(content=content, name=name)
    if role is Role.HUMAN:
        return HumanMessage(content=content, name=name)
    if role is Role.AI:
        tool_calls = [
            {"id": call.id, "name": call.name, "args": dict(call.arguments), "type": "tool_call"}
            for call in message.tool_calls
        ]
        return AIMessage(content=content, tool_calls=tool_calls, name=name)
    if not message.tool_call_id:
        raise InvalidMessageError("tool message has no tool_call_id naming the call it answers")
    status = "error" if message.metadata.get("is_error") else "success"
    return ToolMessage(content=content, tool_call_id=message.tool_call_id, name=name, status=status)


def to_langchain(messages: Iterable[ChatMessage]) -> list[BaseMessage]:
    """Convert ``ChatMessage``s into LangChain messages (see ``to_langchain_message``).

    Order and message boundaries are kept as they are: LangChain chat models place system
    messages and merge turns as their provider requires. The ``ai`` messages of the tool loop
    in progress (after the last human message) carry the Anthropic thinking blocks stored
    with them (``metadata["thinking"]``) at the head of their content; earlier turns are
    sent without them, as ``to_anthropic`` sends them. A stored ``reasoning_content`` goes in
    ``additional_kwargs`` of every turn that carried it (``_with_thinking``).

    Raises:
        InvalidMessageError: as ``to_langchain_message``, with ``index`` set to the 0-based
            position of the offending message.
    """
    messages = list(messages)
    # the tool loop in progress: the messages after the last human one
    loop_start = max((i for i, m in enumerate(messages) if m.role == Role.HUMAN), default=-1) + 1
    result: list[BaseMessage] = []
    for index, message in enumerate(messages):
        try:
            converted = to_langchain_message(message)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
        if isinstance(converted, AIMessage):
            converted = _with_thinking(converted, message, blocks=index >= loop_start)
        result.append(converted)
    return result


def _with_thinking(converted: AIMessage, message: ChatMessage, *, blocks: bool) -> AIMessage:
    """``converted`` with the thinking stored with ``message`` (``metadata["thinking"]``).

    With ``blocks`` (the tool loop in progress), the Anthropic blocks lead its content, which
    ``ChatAnthropic`` sends verbatim (with extended thinking on, the API refuses an assistant
    turn of the tool loop that calls tools without them: "Expected `thinking` or
    `redacted_thinking`, but found `tool_use`"). The ``reasoning_content`` of an
    OpenAI-compatible server goes in ``additional_kwargs`` on every turn that carried it, as
    ``to_openai`` sends it, where ``ChatDeepSeek`` sends it back: DeepSeek's thinking-mode
    guide requires the reasoning of every assistant turn that called tools in all later
    requests."""
    blocks_sent = thinking_blocks(message) if blocks else []
    reasoning = reasoning_content(message)
    if not blocks_sent and reasoning is None:
        return converted
    content: Any = converted.content
    if blocks_sent:
        text = [{"type": "text", "text": content}] if isinstance(content, str) and content else []
        content = [*blocks_sent, *(text if isinstance(content, str) else content)]
    extra = dict(converted.additional_kwargs)
    if reasoning is not None:
        extra[REASONING_CONTENT] = reasoning
    return converted.model_copy(update={"content": content, "additional_kwargs": extra})


def _text(content: Any, kind: str, *, ignore_other_blocks: bool) -> str:
    """Text of a LangChain ``content``: a string, or strings and text blocks joined with ``""``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        raise InvalidMessageError(f"{kind} content must be a string or a list, not {type(content).__name__}")
    texts: list[str] = []
    for position, block in enumerate(content):
        if isinstance(block, str):
            texts.append(block)
            continue
        block_type = block.get("type") if isinstance(block, Mapping) else None
        if block_type == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif not ignore_other_blocks:
            raise InvalidMessageError(
                f"{kind} content block {position} has type {block_type!r}; only text can be stored "
                "(images, audio and files are not supported)"
            )
    return "".join(texts)


def _ai_from_langchain(message: AIMessage, *, fill_missing_ids: bool) -> ChatMessage:
    if message.invalid_tool_calls:
        bad = message.invalid_tool_calls[0]
        raise InvalidMessageError(
            f"tool call {bad.get('id')!r} ({bad.get('name')}) could not be parsed: "
            f"{bad.get('error') or 'arguments are not a JSON object'} (arguments {bad.get('args')!r})",
            field="tool_calls",
        )
    calls: list[ToolCall] = []
    for position, call in enumerate(message.tool_calls):
        call_id = call.get("id")
        if not call_id:
            if not fill_missing_ids:
                raise InvalidMessageError(
                    f"tool call {position} ({call.get('name')}) has no 'id'", field="tool_calls"
                )
            # Some local servers return calls without ids; the results must still name their call.
            call_id = f"call_{uuid.uuid4().hex[:24]}"
        arguments = call.get("args")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise InvalidMessageError(
                f"tool call {call_id!r} ({call.get('name')}) args must be a JSON object, "
                f"not {type(arguments).__name__}",
                field="tool_calls",
            )
        calls.append(ToolCall(id=call_id, name=call["name"], arguments=dict(arguments)))
    ids = [call.id for call in calls]
    if len(set(ids)) != len(ids):
        raise InvalidMessageError(f"ai message repeats tool call id(s) {sorted(set(ids))}")
    # Provider blocks (tool_use, thinking, reasoning) duplicate tool_calls or carry no answer text.
    text = _text(message.content, "ai", ignore_other_blocks=True)
    content = None if not text and calls else text
    # Anthropic thinking blocks (ChatAnthropic keeps them in the content list) are kept as
    # ``from_anthropic_message`` keeps them: ``to_anthropic`` must send them back with the turn.
    thinking = [
        dict(block)
        for block in (message.content if isinstance(message.content, list) else ())
        if isinstance(block, Mapping) and block.get("type") in ("thinking", "redacted_thinking")
    ]
    reasoning = message.additional_kwargs.get(REASONING_CONTENT)
    if isinstance(reasoning, str) and reasoning:
        # ``ChatDeepSeek`` (and OpenAI-compatible integrations) put it here; it goes back there
        thinking.append({"type": REASONING_CONTENT, "thinking": reasoning})
    metadata = {"thinking": thinking} if thinking else {}
    return ChatMessage.ai(content, calls, name=message.name or "", metadata=metadata)


def from_langchain_message(message: BaseMessage, *, fill_missing_ids: bool = False) -> ChatMessage:
    """Convert one LangChain message into a ``ChatMessage``.

    Args:
        message: a ``SystemMessage``, ``HumanMessage``, ``AIMessage`` (or chunk), ``ToolMessage``
            or a generic LangChain ``ChatMessage`` whose role is system/developer/user/assistant.
        fill_missing_ids: give tool calls without an id a fresh ``call_...`` id instead of
            refusing them (for replies of servers that omit ids; stored transcripts need real ids).

    Returns:
        The ``ChatMessage``: a single text block is plain text, several blocks (texts, images,
        audio, files) are kept as ``parts``; for ``ai`` messages text blocks are joined with
        ``""`` and non-text blocks
        are ignored (tool calls are read from ``tool_calls``; Anthropic ``thinking`` and
        ``redacted_thinking`` blocks are kept in ``metadata["thinking"]``, as
        ``from_anthropic_message`` keeps them) and content is ``None`` when the message only
        calls tools; ``ToolMessage.status == "error"`` becomes
        ``metadata["is_error"]``; ``name`` is kept.

    Raises:
        InvalidMessageError: another message type (``FunctionMessage``, ``RemoveMessage``, an
            unknown generic role); unknown or malformed content blocks outside ``ai`` messages;
            ``invalid_tool_calls`` (arguments the model produced that are not JSON); a tool call
            without id (unless ``fill_missing_ids``); repeated call ids; a tool message without
            ``tool_call_id``.
    """
    if isinstance(message, AIMessage):
        return _ai_from_langchain(message, fill_missing_ids=fill_missing_ids)
    name = getattr(message, "name", None) or ""
    if isinstance(message, SystemMessage):
        return ChatMessage.from_parts(
            Role.SYSTEM, _content_from_langchain(message.content, "system"), name=name
        )
    if isinstance(message, HumanMessage):
        return ChatMessage.from_parts(
            Role.HUMAN, _content_from_langchain(message.content, "human"), name=name
        )
    if isinstance(message, ToolMessage):
        if not message.tool_call_id:
            raise InvalidMessageError("tool message has no tool_call_id naming the call it answers")
        metadata = {"is_error": True} if message.status == "error" else {}
        return ChatMessage.from_parts(
            Role.TOOL,
            _content_from_langchain(message.content, "tool"),
            tool_call_id=message.tool_call_id,
            name=name,
            metadata=metadata,
        )
    if isinstance(message, LangChainGenericMessage) and message.role in _GENERIC_ROLES:
        role = _GENERIC_ROLES[message.role]
        if role is Role.AI:
            text = _text(message.content, message.role, ignore_other_blocks=True)
            return ChatMessage(role=role, content=text, name=name)
        return ChatMessage.from_parts(role, _content_from_langchain(message.content, message.role), name=name)
    raise InvalidMessageError(
        f"LangChain message type {type(message).__name__} (type {getattr(message, 'type', None)!r}) is "
        "not supported; use SystemMessage, HumanMessage, AIMessage or ToolMessage"
    )


def from_langchain(messages: Iterable[BaseMessage]) -> list[ChatMessage]:
    """Convert LangChain messages into ``ChatMessage``s (see ``from_langchain_message``).

    Raises:
        InvalidMessageError: as ``from_langchain_message``, with ``index`` set to the 0-based
            position of the offending message.
    """
    result: list[ChatMessage] = []
    for index, message in enumerate(messages):
        try:
            result.append(from_langchain_message(message))
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
    return result
