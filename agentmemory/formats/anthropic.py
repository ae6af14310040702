"""Converters between ``ChatMessage`` and Anthropic Messages API messages.

The Anthropic shape follows the Messages API contract
(https://docs.anthropic.com/en/api/messages, ``system`` and ``messages`` parameters; tool use:
https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use; the typed request
params of the official ``anthropic`` SDK, ``anthropic/types/message_param.py``,
``text_block_param.py``, ``tool_use_block_param.py``, ``tool_result_block_param.py``):

- there is no ``system`` role among the messages: the system prompt is the top-level ``system``
  parameter (a string or a list of text blocks);
- ``messages`` holds ``user`` and ``assistant`` turns, starting with ``user``; consecutive
  messages of one role are combined into one turn, so this module merges them itself (one message
  with several content blocks) rather than rely on the API doing it;
- ``content`` is a string or a list of content blocks: ``{"type": "text", "text"}`` (never empty:
  the API answers 400 "text content blocks must be non-empty"), ``{"type": "tool_use", "id",
  "name", "input": <object>}`` in assistant turns, ``{"type": "tool_result", "tool_use_id",
  "content"}`` in user turns; user turns also take ``{"type": "image", "source": {"type":
  "base64", "media_type", "data"} | {"type": "url", "url"} | {"type": "file", "file_id"}}``
  and ``{"type": "document", "source": ...}`` (a base64 PDF, plain text, a URL or a file id,
  with optional ``title``, ``context``, ``citations``), and a ``tool_result``'s content may
  hold text and image blocks. Such blocks are stored as ``ContentPart``s
  (``ChatMessage.parts``) and sent back as blocks;
- every ``tool_use`` of an assistant turn is answered by a ``tool_result`` in the very next user
  turn, and a ``tool_result`` answers a ``tool_use`` of the turn right before it (otherwise 400
  "`tool_use` ids were found without `tool_result` blocks immediately after" or "unexpected
  `tool_use_id` found in `tool_result` blocks"); in that user turn the ``tool_result`` blocks come
  first and any text after them.

Mapping: ``system`` -> the ``system`` parameter, ``human`` -> ``user`` text, ``ai`` ->
``assistant`` text and ``tool_use`` blocks, ``tool`` -> ``user`` ``tool_result`` blocks.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from agentmemory.exceptions import InvalidMessageError
from agentmemory.formats import changes
from agentmemory.formats.media import image_format, image_size, with_media_limit
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall

__all__ = ["from_anthropic", "from_anthropic_message", "limit_request_size", "to_anthropic"]

#: the text sent for a blank human message that opens the conversation (the API requires a
#: non-empty first user turn; a blank one elsewhere is left out)
EMPTY_HUMAN_TEXT = "[empty message]"
#: the content sent for a tool result marked as an error that holds no text: the API refuses
#: such a result ("content cannot be empty if `is_error` is true")
EMPTY_ERROR_TEXT = "[the tool failed without a message]"

# Assistant block types that carry no text to store; kept in ``metadata`` so nothing is lost.
_THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


# -- ChatMessage -> Anthropic -------------------------------------------------------------------

#: fields of a part's ``extra`` that are copied onto its block (and read back)
_BLOCK_EXTRAS = ("cache_control", "title", "context", "citations")

# Per-request limits of the Messages API that a stored history, replayed into every later
# request, would otherwise break for good (each request refused whole, with a 400):
#: prompt-cache breakpoints: "A maximum of 4 blocks with cache_control may be provided"
MAX_CACHE_BREAKPOINTS = 4
#: images and documents: "Too much media: 0 document pages + 102 images > 100" (vision
#: guide: 100 images per API request for models with a 200k-token context window; a PDF's
#: pages count, and a document is counted here as one)
MAX_MEDIA_PER_REQUEST = 100
#: in a request with more than this many images, each may be at most
#: ``MANY_IMAGES_MAX_PIXELS`` on its longer side ("At least one of the image dimensions exceed
#: max allowed size for many-image requests: 2000 pixels")
MANY_IMAGES = 20
MANY_IMAGES_MAX_PIXELS = 2000
#: the longest side of any image ("At least one of the image dimensions exceed max allowed
#: size: 8000 pixels")
MAX_IMAGE_PIXELS = 8000
#: the largest request body the Messages API takes: "32 MB" (API overview, "Request size
#: limits": a larger one is answered 413 ``request_too_large``, by Cloudflare, before the API
#: reads it), read here as 32,000,000 bytes, the smaller of its two readings. A hundred
#: images of up to 5 MiB each pass every per-image limit and still make a request of 500 MB.
MAX_REQUEST_BYTES = 32_000_000
#: the media types an inline image may be sent with (``Base64ImageSourceParam.media_type``
#: of the SDK; 400 "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
#: for ``image/jpg``, which OpenAI takes); the API also refuses a type its data does not
#: match ("The image was specified using the image/jpeg media type, but the image appears
#: to be a image/png image")
IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: the most characters of one image's base64 data ("image exceeds 5 MB maximum: 6275800
#: bytes > 5242880 bytes": the encoded string is measured, a third more than the image's
#: bytes, so an image within ``AGENTMEMORY['MAX_PART_DATA_BYTES']`` may pass it)
MAX_IMAGE_BASE64_CHARS = 5 * 1024 * 1024


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _has_text(text: str | None) -> TypeGuard[str]:
    """Whether ``text`` may be sent as a text block: the API refuses empty ones ("text content
    blocks must be non-empty") and whitespace-only ones ("must contain non-whitespace text")."""
    return bool(text and not text.isspace())


def part_to_anthropic(part: ContentPart) -> dict[str, Any] | None:
    """One ``ContentPart`` as an Anthropic content block, or ``None`` for empty or
    whitespace-only text (the API refuses such text blocks). Audio, which Anthropic does not
    take, files it cannot carry (inline data that is not a PDF) and inline images of a
    format it does not take are sent as their placeholder text; an inline image goes with
    the media type its data shows (``_image_media_type``)."""
    if part.kind is PartKind.TEXT:
        block = _text_block(part.text) if _has_text(part.text) else None
    elif part.kind is PartKind.IMAGE:
        media_type = _image_media_type(part) if part.data else None
        if part.data and media_type is None:
            block = _text_block(part.placeholder)
            changes.note(
                changes.IMAGE_PLACEHOLDER,
                f"Anthropic takes images in {', '.join(sorted(IMAGE_MEDIA_TYPES))} only; "
                "this one's data is none of them",
            )
        else:
            block = {"type": "image", "source": _source(part)}
            if media_type is not None:
                block["source"]["media_type"] = media_type
                if media_type != part.mime_type:
                    changes.note(
                        changes.MEDIA_TYPE_CORRECTED,
                        f"stored as {part.mime_type[:100] or 'no media type'!r}; Anthropic takes "
                        "the media type the image's data shows",
                        sent=media_type,
                    )
    elif part.kind is PartKind.FILE and part.text:
        block = {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": part.text},
        }
    elif part.kind is PartKind.FILE and (part.url or part.file_id or part.mime_type == "application/pdf"):
        block = {"type": "document", "source": _source(part)}
    else:
        block = _text_block(part.placeholder)
        changes.note(
            changes.placeholder_change(part.kind),
            "Anthropic takes no audio"
            if part.kind is PartKind.AUDIO
            else "Anthropic takes inline documents as PDF or plain text only",
        )
    if (block is not None and block["type"] != "text") or (block is not None and part.kind is PartKind.TEXT):
        block.update({key: part.extra[key] for key in _BLOCK_EXTRAS if key in part.extra})
    return changes.tag(block)


def _part_block(part: ContentPart, position: int) -> dict[str, Any] | None:
    """``part_to_anthropic(part)``, its changes noted at part ``position`` of the message."""
    with changes.located(part=position):
        return part_to_anthropic(part)


def _image_media_type(part: ContentPart) -> str | None:
    """The media type an inline image is sent with: the one its data's signature shows
    (``image_format``), else its stored type when the API takes it, else ``None`` (it is
    sent as its placeholder text). Stored types come from every source a history was made
    from: ``image/jpg`` from an OpenAI data URL, a PNG labelled ``image/jpeg`` by a client;
    the Messages API refuses both (``IMAGE_MEDIA_TYPES``), in every later request."""
    stored = part.mime_type.lower()
    return image_format(part.data) or (stored if stored in IMAGE_MEDIA_TYPES else None)


def _source(part: ContentPart) -> dict[str, Any]:
    if part.data:
        return {"type": "base64", "media_type": part.mime_type, "data": part.data}
    if part.url:
        return {"type": "url", "url": part.url}
    return {"type": "file", "file_id": part.file_id}


def _part_blocks(message: ChatMessage, *, media: bool) -> list[dict[str, Any]]:
    """Blocks of ``message.parts``; without ``media`` (assistant turns), every part is text."""
    if not media:
        blocks = []
        for position, part in enumerate(message.parts):
            if part.kind is not PartKind.TEXT:
                _note_in_part(part, position, "Anthropic takes media in user turns only")
            if _has_text(part.placeholder):
                blocks.append(changes.tag(_text_block(part.placeholder), part=position))
        return blocks
    return [block for j, part in enumerate(message.parts) if (block := _part_block(part, j)) is not None]


def _note_in_part(part: ContentPart, position: int, reason: str) -> None:
    """Note that ``part`` (at ``position``) went as its placeholder text, for ``reason``."""
    with changes.located(part=position):
        changes.note(changes.placeholder_change(part.kind), reason)


def _user_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    parts = bool(message.parts) and not message.truncated
    if message.role is Role.TOOL:
        if not message.tool_call_id:
            raise InvalidMessageError("tool message has no tool_call_id naming the call it answers")
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        # ``content`` is optional on a tool_result; an empty string is left out rather than sent.
        if parts:
            # a tool_result holds text and image blocks; other parts go as their placeholder
            content = []
            for position, part in enumerate(message.parts):
                b = _part_block(part, position)
                if b is not None and b["type"] not in ("text", "image"):
                    _note_in_part(part, position, "Anthropic takes text and images in a tool result only")
                    b = changes.tag(_text_block(part.placeholder), part=position)
                if b is not None:
                    content.append(b)
            if content:
                block["content"] = content
        elif _has_text(message.content):
            block["content"] = message.content
        if message.metadata.get("is_error"):
            block["is_error"] = True
            if "content" not in block:
                block["content"] = EMPTY_ERROR_TEXT
                changes.note(
                    changes.ERROR_TEXT_ADDED,
                    "Anthropic refuses an error tool result without content",
                    sent=EMPTY_ERROR_TEXT,
                )
        return [block]
    if parts:
        return _part_blocks(message, media=True)
    return [_text_block(message.content)] if _has_text(message.content) else []


def thinking_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """The thinking blocks stored with an ``ai`` message (``metadata["thinking"]``, kept by
    ``from_anthropic_message``), verbatim. With extended thinking on, an assistant turn that
    calls tools must start with them, signature intact, or the API refuses the request
    ("Expected `thinking` or `redacted_thinking`, but found `tool_use`"); with thinking off
    the API ignores them. Entries the API would refuse (no signature, no data) are left out."""
    stored = message.metadata.get("thinking") if isinstance(message.metadata, Mapping) else None
    if not isinstance(stored, list | tuple):
        return []
    blocks = []
    for block in stored:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "thinking":
            complete = isinstance(block.get("thinking"), str) and isinstance(block.get("signature"), str)
            complete = complete and bool(block["signature"])
        elif block.get("type") == "redacted_thinking":
            complete = isinstance(block.get("data"), str) and bool(block["data"])
        else:
            complete = False
        if complete:
            blocks.append(dict(block))
    return blocks


def _assistant_blocks(message: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.parts and not message.truncated:
        blocks.extend(_part_blocks(message, media=False))
    elif _has_text(message.content):
        blocks.append(_text_block(message.content))
    for call in message.tool_calls:
        if not isinstance(call.arguments, Mapping):
            raise InvalidMessageError(
                f"tool call {call.id!r} ({call.name}) arguments must be a JSON object, "
                f"not {type(call.arguments).__name__}",
                field="tool_calls",
            )
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)})
    # thinking leads the turn; a turn with nothing else (no text, no call) is not sent at all
    return thinking_blocks(message) + blocks if blocks else []


def _thinking_of_current_loop_only(turns: list[dict[str, Any]]) -> None:
    """Keep thinking blocks only in the assistant turns after the last user turn without tool
    results: the tool loop in progress, whose last assistant turn must start with its thinking.
    The API drops thinking of earlier turns anyway, and a signature made by another model
    (the conversation switched models) can be refused there."""
    last_human = max(
        (i for i, t in enumerate(turns) if t["role"] == "user" and not _has_results(t)), default=-1
    )
    for turn in turns[:last_human]:
        if turn["role"] == "assistant":
            turn["content"] = [b for b in turn["content"] if b["type"] not in _THINKING_BLOCKS]


def _without_trailing_whitespace(turns: list[dict[str, Any]]) -> None:
    """A request that ends on an assistant turn (a prefill, which the model continues) is
    refused when that turn's text ends in whitespace ("final assistant content cannot end
    with trailing whitespace"): its last block, when it is text, is sent stripped at the end
    (text blocks are never blank here, so some text is left)."""
    if turns and turns[-1]["role"] == "assistant" and turns[-1]["content"][-1]["type"] == "text":
        last = turns[-1]["content"][-1]
        stripped = last["text"].rstrip()
        if stripped != last["text"]:
            changes.note(
                changes.TRAILING_WHITESPACE_STRIPPED,
                "Anthropic refuses a final assistant turn whose text ends in whitespace",
                at=changes.origin(last),
            )
        last["text"] = stripped


def _has_results(turn: dict[str, Any]) -> bool:
    return any(b["type"] == "tool_result" for b in turn["content"])


def _order_user_turn(blocks: list[dict[str, Any]], call_order: Sequence[str]) -> list[dict[str, Any]]:
    """Tool results first, in the order of the calls they answer; then the other blocks."""
    results = [b for b in blocks if b["type"] == "tool_result"]
    others = [b for b in blocks if b["type"] != "tool_result"]
    position = {call_id: i for i, call_id in enumerate(call_order)}
    results.sort(key=lambda b: position.get(b["tool_use_id"], len(position)))
    return results + others


#: what the Messages API accepts as a ``tool_use`` id (a 400 "String should match pattern
#: '^[a-zA-Z0-9_-]+$'" otherwise); ids made by other providers may hold dots or colons
#: (``functions.lookup:0``)
_TOOL_USE_ID_REFUSED = re.compile(r"[^a-zA-Z0-9_-]")


def _request_ids(turns: list[dict[str, Any]]) -> None:
    """Give every ``tool_use`` of the request an id the API accepts, unique in the request, and
    point each ``tool_result`` at its call's new id.

    The Messages API refuses a request in which two ``tool_use`` blocks share an id ("`tool_use`
    ids must be unique") or an id holds characters outside ``[a-zA-Z0-9_-]``. Stored histories
    can hold both: some models number their calls ``call_0``, ``call_1`` afresh on every turn,
    and histories imported from other providers carry their id formats. Storage keeps the ids
    as they were; only the request changes. A refused character becomes ``_``, and an id already
    used in the request gets the suffix ``_2``, ``_3``, ... The renaming depends on the window
    alone, so the same window always gives the same request. Results are matched to the calls
    of the assistant turn right before them, in call order when one id repeats within a turn.
    """
    used: set[str] = set()
    renamed: dict[str, deque[str]] = {}  # ids of the previous assistant turn -> sent ids
    for turn in turns:
        blocks = turn["content"]
        if turn["role"] == "assistant":
            renamed = {}
            for block in blocks:
                if block["type"] != "tool_use":
                    continue
                base = _TOOL_USE_ID_REFUSED.sub("_", block["id"]) or "toolu"
                sent, n = base, 1
                while sent in used:
                    n += 1
                    sent = f"{base}_{n}"
                used.add(sent)
                renamed.setdefault(block["id"], deque()).append(sent)
                block["id"] = sent
            continue
        for block in blocks:
            if block["type"] == "tool_result" and renamed.get(block["tool_use_id"]):
                block["tool_use_id"] = renamed[block["tool_use_id"]].popleft()
        renamed = {}


def _check_tool_pairs(turns: list[dict[str, Any]], first_index: list[int]) -> None:
    """Refuse what the API would refuse: a result without its call, a call without its result.

    A trailing assistant turn may keep unanswered calls (a transcript that stops mid-exchange).
    """
    calls: list[str] = []  # tool_use ids of the previous assistant turn
    for turn, index in zip(turns, first_index, strict=True):
        blocks = turn["content"]
        if turn["role"] == "assistant":
            # Turns alternate (runs are merged), so the previous turn was a user turn.
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            continue
        answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        orphans = [call_id for call_id in answered if call_id not in calls]
        if orphans:
            raise InvalidMessageError(
                f"tool result(s) for {', '.join(orphans)} do not answer a tool call of the assistant "
                "message right before them; Anthropic requires each tool_result to follow its tool_use",
                index=index,
            )
        missing = [call_id for call_id in calls if call_id not in answered]
        if missing:
            raise InvalidMessageError(
                f"tool call(s) {', '.join(missing)} have no tool result before the next user message; "
                "Anthropic requires every tool_use to be answered in the next user message",
                index=index,
                field="tool_calls",
            )
        calls = []


def to_anthropic(
    messages: Iterable[ChatMessage], *, system_blocks: bool = False
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Convert ``ChatMessage``s into the Anthropic ``system`` and ``messages`` request parameters.

    Args:
        messages: a context window (pinned system prompt, summary message, history) or any
            stored conversation, oldest first.
        system_blocks: return ``system`` as a list of ``{"type": "text", "text"}`` blocks, one
            per system message (to add ``cache_control`` to one of them), instead of one string.

    Returns:
        ``(system, messages)``. ``system`` holds every system message in order (the pinned
        system prompt, the summary system message after it, any other): joined with blank lines
        (``"\\n\\n"``), or as text blocks; ``None`` when there is no non-empty system text.
        ``messages`` alternates ``user``/``assistant`` (runs of one role are merged into one
        message, tool results before text in a user turn, results ordered like the calls they
        answer); a message whose only content is a single text block (without
        ``cache_control`` or another field) is sent as a plain string.
        Empty and whitespace-only text is dropped (the API refuses such text blocks, and a
        stored blank would be refused on every later request), so an ``ai`` message with
        neither text nor tool calls disappears, and so does a blank ``human`` message, except
        one that opens the conversation: it is sent as ``EMPTY_HUMAN_TEXT``, since the first
        turn must be a non-empty user turn; and one that is the newest message after an
        assistant turn, sent the same way: a request that ends on an assistant turn is a
        prefill, which the model continues instead of answering. A request that does end on
        an assistant turn has that turn's final text sent without its trailing whitespace
        (refused otherwise), and a tool result marked as an error with no text is sent with
        ``EMPTY_ERROR_TEXT`` (the API refuses an empty one). Thinking blocks stored with an ``ai`` message
        (``metadata["thinking"]``) lead its turn verbatim, signatures intact, in the tool loop
        in progress (the turns after the last user turn without tool results); the API
        ignores those of earlier turns. Tool call ids
        are sent unique within the request and in the characters the API accepts (see
        ``_request_ids``: a repeated ``call_0`` becomes ``call_0_2``, ``functions.f:0``
        becomes ``functions_f_0``), results following their call; storage is not changed.
        Names, seq, message ids and other metadata are never sent; ``metadata["is_error"]``
        on a tool message becomes ``"is_error": true``. The list is empty when there are no
        human, ai or tool messages.

        The request keeps within the API's per-request limits, which a stored history would
        otherwise break on every later call: at most ``MAX_CACHE_BREAKPOINTS`` (4) blocks
        with ``cache_control``, the newest kept, and no ``ttl`` of "1h" after a shorter one
        (``limit_cache_breakpoints``); at most ``MAX_MEDIA_PER_REQUEST`` (100) images and
        documents, the newest kept and the older sent as their placeholder text
        (``[image]``); and with more than ``MANY_IMAGES`` (20) of them, images over
        ``MANY_IMAGES_MAX_PIXELS`` (2000) on a side (their size known) sent as placeholders;
        so is, in any request, an image over ``MAX_IMAGE_PIXELS`` (8000) on a side or with
        more than ``MAX_IMAGE_BASE64_CHARS`` (5 MiB) of base64 data.

    Raises:
        InvalidMessageError (a ``ValueError``): the first non-system message is not ``human`` or
            ``tool`` (Anthropic requires a ``user`` first turn; the context window builder always
            starts history on a human message); a tool result that answers no call of the
            assistant turn right before it; a tool call whose result is missing when the next user
            turn arrives; a tool message without ``tool_call_id``; an unknown role. ``index`` is
            the position of the offending message in ``messages``.
    """
    system_texts: list[str] = []
    turns: list[dict[str, Any]] = []
    first_index: list[int] = []  # position in ``messages`` of the first message of each turn
    messages = with_media_limit(
        list(messages),
        _sent_as_media,
        MAX_MEDIA_PER_REQUEST,
        also_placeholder=_too_large,
        limit_reason=f"Anthropic takes at most {MAX_MEDIA_PER_REQUEST} images and documents per "
        "request; the newest are sent",
    )
    blank_last = None  # position of the newest non-system message when it is a blank human one
    for index, message in enumerate(messages):
        try:
            role = Role(message.role)
        except ValueError as exc:
            raise InvalidMessageError(f"unknown role {message.role!r}", index=index, field="role") from exc
        if role is Role.SYSTEM:
            if _has_text(message.content):
                system_texts.append(message.content)
            continue
        try:
            with changes.located(message=index, part=None):
                if role is Role.AI:
                    api_role, blocks = "assistant", _assistant_blocks(message)
                else:
                    api_role, blocks = "user", _user_blocks(message)
                for block in blocks:
                    changes.tag(block)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
        blank_last = index if not blocks and role is Role.HUMAN else None
        if not blocks and not turns and role is Role.HUMAN:
            # The window starts on this human message; without it the request would start
            # with an assistant turn, which the API refuses: send it marked as empty.
            blocks = [changes.tag(_text_block(EMPTY_HUMAN_TEXT), message=index, part=None)]
            _note_empty(index, "Anthropic requires a request to open on a non-empty user turn")
        if not blocks:
            continue
        if not turns and api_role != "user":
            raise InvalidMessageError(
                "the first non-system message is an ai message; the Anthropic Messages API requires "
                "the conversation to start with a user turn (start the history on a human message)",
                index=index,
            )
        if turns and turns[-1]["role"] == api_role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": api_role, "content": blocks})
            first_index.append(index)

    if blank_last is not None and turns and turns[-1]["role"] == "assistant":
        # The newest message is a blank human one: without it the request would end on the
        # assistant's previous answer, which the API takes as a prefill to continue (and a
        # model with extended thinking refuses): send it marked as empty.
        turns.append({"role": "user", "content": [_text_block(EMPTY_HUMAN_TEXT)]})
        first_index.append(blank_last)
        _note_empty(blank_last, "a request ending on an assistant turn would be continued, not answered")
    _without_trailing_whitespace(turns)
    _thinking_of_current_loop_only(turns)
    _request_ids(turns)
    for position, turn in enumerate(turns):
        if turn["role"] == "user" and position > 0:
            previous = turns[position - 1]["content"]
            call_order = [b["id"] for b in previous if b["type"] == "tool_use"]
            turn["content"] = _order_user_turn(turn["content"], call_order)
    _check_tool_pairs(turns, first_index)
    for turn in turns:
        content = turn["content"]
        if len(content) == 1 and content[0].keys() == {"type", "text"}:
            turn["content"] = content[0]["text"]
    limit_cache_breakpoints(None, None, turns)

    system: str | list[dict[str, Any]] | None
    if not system_texts:
        system = None
    elif system_blocks:
        system = [{"type": "text", "text": text} for text in system_texts]
    else:
        system = "\n\n".join(system_texts)
    return system, turns


def _note_empty(index: int, reason: str) -> None:
    changes.note(changes.EMPTY_TEXT_ADDED, reason, at=(index, None), sent=EMPTY_HUMAN_TEXT)


def _sent_as_media(message: ChatMessage, part: ContentPart) -> bool:
    """Whether ``part`` goes as an image or document block (what the media count takes):
    images of user and tool messages, documents of user messages (a tool result sends them
    as text)."""
    if message.role not in (Role.HUMAN, Role.TOOL):
        return False
    if part.kind is PartKind.IMAGE:
        return True
    if part.kind is not PartKind.FILE or message.role is not Role.HUMAN:
        return False
    return bool(part.text or part.url or part.file_id or part.mime_type == "application/pdf")


def _too_large(part: ContentPart, sent: int) -> str:
    """Why the API refuses an image for its size (``""`` when it does not): inline data over
    ``MAX_IMAGE_BASE64_CHARS``, a side over ``MAX_IMAGE_PIXELS``, or, in a request of more
    than ``MANY_IMAGES`` media parts, over ``MANY_IMAGES_MAX_PIXELS`` (its size from the part
    or its inline data's header)."""
    if part.kind is not PartKind.IMAGE:
        return ""
    if len(part.data or "") > MAX_IMAGE_BASE64_CHARS:
        return (
            f"Anthropic takes at most {MAX_IMAGE_BASE64_CHARS:,} characters of base64 data per image (5 MiB)"
        )
    size = (part.width, part.height) if part.width and part.height else None
    if size is None and part.data:
        size = image_size(part.data)
    if size is None:
        return ""
    if sent > MANY_IMAGES and max(size) > MANY_IMAGES_MAX_PIXELS:
        return (
            f"{size[0]}x{size[1]} pixels: in a request of more than {MANY_IMAGES} images, Anthropic "
            f"takes at most {MANY_IMAGES_MAX_PIXELS} pixels on a side"
        )
    if max(size) > MAX_IMAGE_PIXELS:
        return f"{size[0]}x{size[1]} pixels: Anthropic takes at most {MAX_IMAGE_PIXELS} pixels on a side"
    return ""


def _marked(blocks: Iterable[Any]) -> Iterable[dict[str, Any]]:
    """The blocks of ``blocks`` (and of the content of its ``tool_result`` blocks) that
    carry ``cache_control``, in request order."""
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if "cache_control" in block:
            yield block
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            yield from _marked(block["content"])


def limit_cache_breakpoints(
    tools: list[dict[str, Any]] | None,
    system: str | list[dict[str, Any]] | None,
    turns: list[dict[str, Any]],
) -> None:
    """Keep a request within the Messages API's prompt-cache rules, in place: at most
    ``MAX_CACHE_BREAKPOINTS`` (4) blocks carry ``cache_control``, and a ``ttl`` of ``"1h"``
    never comes after a shorter one (400 "a ttl='1h' cache_control block must not come after
    a ttl='5m' cache_control block"; blocks count in the order tools, system, messages).

    Markers stored with a history's parts are sent back on every later request, so a long
    conversation gathers more than four. The breakpoints of ``tools`` and ``system`` (set for
    this request) are kept first, then the newest of the messages (a later breakpoint caches
    the longer prefix); the others are left out of the request. Thinking blocks never carry
    one (the API refuses it there). A ``"1h"`` breakpoint after a shorter one is sent with
    the default lifetime. Storage is not changed (the blocks are the request's own)."""
    fixed = [*_marked(tools or ()), *_marked(system if isinstance(system, list) else ())]
    replayed = []
    for turn in turns:
        if isinstance(turn.get("content"), list):
            for block in _marked(turn["content"]):
                if block.get("type") in _THINKING_BLOCKS:
                    del block["cache_control"]
                else:
                    replayed.append(block)
    kept = fixed[-MAX_CACHE_BREAKPOINTS:]
    room = MAX_CACHE_BREAKPOINTS - len(kept)
    kept += replayed[-room:] if room else []
    keep = {id(block) for block in kept}
    shorter_seen = False
    for block in [*fixed, *replayed]:
        if id(block) not in keep:
            del block["cache_control"]
            changes.note(
                changes.CACHE_CONTROL_DROPPED,
                f"Anthropic takes at most {MAX_CACHE_BREAKPOINTS} cache breakpoints per request; "
                "the tools', the system prompt's and the newest are sent",
                at=changes.origin(block),
            )
            continue
        control = block["cache_control"]
        if not isinstance(control, Mapping):
            continue
        if control.get("ttl") != "1h":
            shorter_seen = True
        elif shorter_seen:
            block["cache_control"] = {key: value for key, value in control.items() if key != "ttl"}
            changes.note(
                changes.CACHE_TTL_SHORTENED,
                "Anthropic refuses a one-hour cache breakpoint after a shorter one",
                at=changes.origin(block),
            )


def _json_bytes(value: Any) -> int:
    """Bytes of ``value`` as JSON, as the SDK sends it (``json`` with its default
    separators and ``ensure_ascii``: the larger encoding of non-ASCII text)."""
    return len(json.dumps(value, default=str))


def _inline_media(blocks: Any) -> Iterable[tuple[list[Any], int]]:
    """``(list, index)`` of each image or document block with inline (base64) data in
    ``blocks`` and in the content of its ``tool_result`` blocks, in request order."""
    if not isinstance(blocks, list):
        return
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            yield from _inline_media(block.get("content"))
        elif block.get("type") in ("image", "document"):
            source = block.get("source")
            if isinstance(source, Mapping) and source.get("type") == "base64":
                yield blocks, index


def limit_request_size(request: dict[str, Any]) -> None:
    """Keep a Messages API request within ``MAX_REQUEST_BYTES`` (32 MB), in place: while its
    JSON is larger, the oldest inline image or document of ``request["messages"]`` is sent
    as its placeholder text (``[image]``, ``[file]`` or ``[file: <title>]``, keeping the
    block's ``cache_control``). The newest media are kept, as with the count limit.

    Stored images and PDFs come back in every later request; past 32 MB each one is refused
    with a 413 before the API reads it, so a conversation would fail on every later turn.
    Storage is not changed (the blocks are the request's own). A request still too large
    without its inline media (text alone) is left as it is: the window's token budget
    keeps text far below that size. A request without inline media is not measured.
    """
    media = [found for turn in request.get("messages") or () for found in _inline_media(turn.get("content"))]
    if not media:  # nothing to take out: the request's JSON is not even measured
        return
    excess = _json_bytes(request) - MAX_REQUEST_BYTES
    if excess <= 0:
        return
    for blocks, index in media:
        block = blocks[index]
        if block["type"] == "image":
            text = "[image]"
        else:
            title = block.get("title")
            text = f"[file: {title}]" if isinstance(title, str) and title else "[file]"
        placeholder = _text_block(text)
        if "cache_control" in block:
            placeholder["cache_control"] = block["cache_control"]
        excess -= _json_bytes(block) - _json_bytes(placeholder)
        blocks[index] = placeholder
        where = changes.origin(block)
        changes.tag(placeholder, message=where[0], part=where[1])
        changes.note(
            changes.IMAGE_PLACEHOLDER if block["type"] == "image" else changes.FILE_PLACEHOLDER,
            f"Anthropic takes requests of at most {MAX_REQUEST_BYTES:,} bytes; the oldest inline "
            "media are sent as placeholders",
            at=where,
        )
        if excess <= 0:
            return


# -- Anthropic -> ChatMessage -------------------------------------------------------------------


def _as_dict(value: Any) -> Any:
    """SDK response objects (pydantic models) become plain dicts; dicts pass through."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", warnings=False) if callable(dump) else value


def part_from_anthropic(block: Mapping[str, Any], where: str) -> ContentPart:
    """One Anthropic ``text``, ``image`` or ``document`` block as a ``ContentPart``.

    Raises:
        InvalidMessageError: another block type, a missing or unknown ``source``.
    """
    kind = block.get("type")
    extra = {key: block[key] for key in _BLOCK_EXTRAS if block.get(key) is not None}
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidMessageError(f"{where} text block has no string 'text'")
        return ContentPart(PartKind.TEXT, text=text, extra=extra)
    if kind not in ("image", "document"):
        raise InvalidMessageError(
            f"{where} has type {kind!r}; only text, image, document and tool_result blocks can be stored"
        )
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise InvalidMessageError(f"{where} {kind} block has no 'source' object")
    source_type = source.get("type")
    part_kind = PartKind.IMAGE if kind == "image" else PartKind.FILE
    fields: dict[str, Any]
    if source_type == "base64":
        fields = {"data": source.get("data"), "mime_type": source.get("media_type")}
    elif source_type == "url":
        fields = {"url": source.get("url")}
    elif source_type == "file":
        fields = {"file_id": source.get("file_id")}
    elif source_type == "text" and kind == "document":
        fields = {"text": source.get("data"), "mime_type": source.get("media_type") or "text/plain"}
    else:
        raise InvalidMessageError(
            f"{where} {kind} block has source type {source_type!r}; supported: base64, url, file"
            + (", text" if kind == "document" else "")
        )
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise InvalidMessageError(f"{where} {kind} source has no string {name!r}")
    return ContentPart(part_kind, extra=extra, **fields)


def _text_of(content: Any, where: str) -> str:
    """Text of a string or a list of text blocks (``tool_result`` content, ``system``)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list | tuple):
        texts = []
        for position, block in enumerate(content):
            block = _as_dict(block)
            if not isinstance(block, Mapping) or block.get("type") != "text":
                kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
                raise InvalidMessageError(
                    f"{where} block {position} has type {kind!r}; only text can be stored"
                )
            if not isinstance(block.get("text"), str):
                raise InvalidMessageError(f"{where} text block {position} has no string 'text'")
            texts.append(block["text"])
        return "".join(texts)
    raise InvalidMessageError(f"{where} must be a string or a list of blocks, not {type(content).__name__}")


def _blocks(content: Any, role: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list | tuple):
        raise InvalidMessageError(
            f"{role} message content must be a string or a list of content blocks, "
            f"not {type(content).__name__}"
        )
    blocks = []
    for position, block in enumerate(content):
        block = _as_dict(block)
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise InvalidMessageError(f"{role} message content block {position} is not a typed object")
        blocks.append(block)
    return blocks


def _assistant_from_anthropic(blocks: list[Mapping[str, Any]]) -> ChatMessage:
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    for position, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise InvalidMessageError(f"tool_use block {position} has no 'id' or 'name'")
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                raise InvalidMessageError(
                    f"tool_use {call_id!r} ({name}) input must be a JSON object, "
                    f"not {type(arguments).__name__}"
                )
            calls.append(ToolCall(id=call_id, name=name, arguments=dict(arguments)))
        elif kind in _THINKING_BLOCKS:
            thinking.append(dict(block))
        else:
            raise InvalidMessageError(
                f"assistant content block {position} has type {kind!r}; only text, tool_use and "
                "thinking blocks are supported"
            )
    ids = [call.id for call in calls]
    if len(set(ids)) != len(ids):
        raise InvalidMessageError(f"assistant message repeats tool_use id(s) {sorted(set(ids))}")
    # Citations split one answer into consecutive text blocks, so they are joined without a separator.
    content = "".join(texts) if texts or not calls else None
    metadata = {"thinking": thinking} if thinking else {}
    return ChatMessage.ai(content, calls, metadata=metadata)


def _tool_result_parts(content: Any, where: str) -> tuple[ContentPart, ...]:
    if content is None or isinstance(content, str):
        return (ContentPart(PartKind.TEXT, text=content or ""),)
    if not isinstance(content, list | tuple):
        raise InvalidMessageError(
            f"{where} must be a string or a list of blocks, not {type(content).__name__}"
        )
    parts = []
    for position, block in enumerate(content):
        block = _as_dict(block)
        if not isinstance(block, Mapping):
            raise InvalidMessageError(f"{where} block {position} is not a typed object")
        parts.append(part_from_anthropic(block, f"{where} block {position}"))
    return tuple(parts)


def _user_from_anthropic(blocks: list[Mapping[str, Any]], tool_names: Mapping[str, str]) -> list[ChatMessage]:
    result: list[ChatMessage] = []
    run: list[ContentPart] = []

    def flush() -> None:
        if run:
            result.append(ChatMessage.from_parts(Role.HUMAN, run))
            run.clear()

    for position, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_result":
            flush()
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidMessageError(f"tool_result block {position} has no 'tool_use_id'")
            parts = _tool_result_parts(block.get("content"), f"tool_result {call_id!r} content")
            metadata = {"is_error": True} if block.get("is_error") else {}
            result.append(
                ChatMessage.from_parts(
                    Role.TOOL,
                    parts,
                    tool_call_id=call_id,
                    name=tool_names.get(call_id, ""),
                    metadata=metadata,
                )
            )
        else:
            run.append(part_from_anthropic(block, f"user content block {position}"))
    flush()
    return result


def from_anthropic_message(
    message: Mapping[str, Any] | Any, *, tool_names: Mapping[str, str] | None = None
) -> list[ChatMessage]:
    """Convert one Anthropic message (request param or response ``Message``) into ``ChatMessage``s.

    Args:
        message: ``{"role": "user"|"assistant", "content": str | [blocks]}``, or an SDK
            ``anthropic.types.Message`` (its ``model_dump`` is read).
        tool_names: tool names by ``tool_use`` id, to name the ``tool`` messages made from
            ``tool_result`` blocks (the blocks carry only the id).

    Returns:
        For an assistant message, one ``ai`` message: text blocks joined with ``""`` (citations
        split one answer into several blocks), ``tool_use`` blocks as ``ToolCall``s with dict
        arguments, content ``None`` when it only calls tools, thinking blocks kept in
        ``metadata["thinking"]``. For a user message, in block order: one ``tool`` message per
        ``tool_result`` (``is_error`` kept in ``metadata``), and one ``human`` message per run of
        text, image and document blocks: one part per block (``ChatMessage.from_parts``: a
        single text block is plain text, several blocks are kept as ``parts``).

    Raises:
        InvalidMessageError: an unknown role (``system`` included: it is a top-level parameter),
            server-tool blocks, images or documents of an unknown source, a ``tool_use``
            without id or name or whose input is not an object, repeated ``tool_use`` ids.
    """
    data = _as_dict(message)
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"an Anthropic message must be an object, not {type(data).__name__}")
    role = data.get("role")
    if role not in ("user", "assistant"):
        raise InvalidMessageError(
            f"unknown Anthropic role {role!r}; expected 'user' or 'assistant' (the system prompt is "
            "the top-level 'system' parameter)"
        )
    blocks = _blocks(data.get("content"), role)
    if role == "assistant":
        return [_assistant_from_anthropic(blocks)]
    return _user_from_anthropic(blocks, tool_names or {})


def from_anthropic(
    messages: Iterable[Mapping[str, Any] | Any], *, system: str | Iterable[Any] | None = None
) -> list[ChatMessage]:
    """Convert an Anthropic conversation (``system`` and ``messages``) into ``ChatMessage``s.

    The inverse of ``to_anthropic`` for stored transcripts and responses: ``system`` becomes
    ``system`` messages first (a string gives one, a list of text blocks one per block), then each
    message is converted by ``from_anthropic_message``; ``tool`` messages are named after the
    ``tool_use`` they answer. Runs merged by ``to_anthropic`` come back as one message (the
    boundaries inside a run are not part of the Anthropic shape).

    Raises:
        InvalidMessageError: as ``from_anthropic_message``, with ``index`` set to the 0-based
            position of the offending message; a ``system`` that is not a string or text blocks.
    """
    result: list[ChatMessage] = []
    if isinstance(system, str):
        if system:
            result.append(ChatMessage.system(system))
    elif system is not None:
        for block in system:
            text = _text_of([block], "system")
            if text:
                result.append(ChatMessage.system(text))
    tool_names: dict[str, str] = {}
    for index, message in enumerate(messages):
        try:
            converted = from_anthropic_message(message, tool_names=tool_names)
        except InvalidMessageError as exc:
            raise InvalidMessageError(exc.reason, index=index, field=exc.field) from exc
        for chat_message in converted:
            tool_names.update((call.id, call.name) for call in chat_message.tool_calls)
        result.extend(converted)
    return result
