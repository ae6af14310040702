"""An OpenAI Agents SDK session stored as an agentmemory conversation
(``pip install "django-agentmemory[openai-agents]"``).

``AgentMemorySession`` implements the SDK's ``Session`` protocol (``agents.memory.Session``:
``get_items(limit)``, ``add_items``, ``pop_item``, ``clear_session``, all ``async``) and its
optional compaction hook (``run_compaction``, the ``OpenAIResponsesCompactionAwareSession``
protocol), so ``Runner.run(agent, input, session=AgentMemorySession("user-42", owner=user))``
keeps the conversation in your database, where the admin, the API, search and compaction see
it like any other::

    from agents import Agent, Runner
    from agentmemory.contrib.openai_agents import AgentMemorySession

    session = AgentMemorySession("support-1042", owner=request.user, agent_key="support")
    result = await Runner.run(agent, "Where is my order?", session=session)

For the same operations it returns what the SDK's own ``SQLiteSession`` returns: each item
is one stored message, and every item comes back exactly as it went in. Items are mapped
to what agentmemory models (``item_to_message``):

- messages (``{"role": "user" | "system" | "developer" | "assistant", "content": ...}``):
  human, system and ai messages, content lists as content parts (``input_text``,
  ``input_image``, ``input_file``, ``input_audio``, ``output_text``, ``refusal``);
- calls answered by the client and their outputs (``function_call`` /
  ``function_call_output``, ``custom_tool_call``, ``computer_call``, ``shell_call``,
  ``apply_patch_call``, ``program`` and their ``*_output`` items, ``mcp_approval_request`` /
  ``mcp_approval_response``): an ai message with one tool call and a tool result that
  answers it, so context windows keep each call with its output;
- every other item (reasoning, hosted tools such as ``web_search_call``,
  ``file_search_call``, ``code_interpreter_call``, ``image_generation_call``, ``mcp_call``,
  ``mcp_list_tools``, compaction items, item references, and item types newer than this
  module): an ai message whose text names the item (``[reasoning] <summary>``), for search,
  summaries and the admin.

Whatever the typed columns do not give back exactly (ids, statuses, annotations, the
``developer`` role, whole items of the last kind) is kept whole in the message's
``metadata["openai_item"]``, and ``get_items`` returns that item.

Differences from ``SQLiteSession``, all deliberate:

- The conversation is owner-scoped: ``session_id`` names a conversation of ``owner`` for
  ``agent_key``; the same ``session_id`` of another owner (or agent key) is another
  conversation. Its public uuid is derived from the three (``session_uuid``), so concurrent
  first writes create one conversation, which is not found by the uuid of another
  framework's session of the same id.
- Bad input is refused (``InvalidMessageError``) with nothing stored, as for every
  agentmemory write: text with NUL characters, content over ``MAX_MESSAGE_CHARS``, an item
  that is not a JSON object.
- A tool output that answers no call awaiting its output (the SDK stores what it is given:
  an input list that opens with outputs, an output whose call was popped) is stored as an
  orphan, the way ``validate_tool_pairs=False`` imports legacy history, and logged:
  context windows never send it. A call that reuses the id of a call still awaiting its
  output supersedes that call, also logged.
- ``clear_session()`` keeps the (empty) conversation row: seqs keep counting up, so a late
  compaction cannot attach to new items.

What the SDK lacks: ``window_tokens=N`` makes ``get_items()`` return the context window that
``ContextWindowBuilder`` builds for at most N tokens (the pinned system prompt, the summary as
a system message, then the newest history that fits, tool calls whole with their outputs;
a call still awaiting its output is left out with the reasoning items before it) instead of
the whole history; off by default, so that the contract above holds.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "agentmemory.contrib.openai_agents needs the 'openai-agents' package; install it with: "
        "pip install 'django-agentmemory[openai-agents]'"
    ) from exc

from asgiref.sync import sync_to_async
from django.db import router

from agentmemory.compaction import request_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.contrib import sessions
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.formats.media import AUDIO_FORMATS, data_url, parse_data_url
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import (
    RAW_ARGUMENTS_KEY,
    ChatMessage,
    ContentPart,
    PartKind,
    Role,
    ToolCall,
    pending_calls,
)
from agentmemory.models import Conversation, Message

__all__ = [
    "ITEM_KEY",
    "AgentMemorySession",
    "item_to_message",
    "message_to_items",
    "session_uuid",
]

logger = logging.getLogger("agentmemory.contrib.openai_agents")

#: metadata key of the item a message was made from, kept when its columns do not give it back
ITEM_KEY = "openai_item"
#: metadata key of the session id on the conversation
SESSION_KEY = "openai_agents_session_id"
#: the framework's name in the conversations' uuids (``session_uuid``)
FRAMEWORK = "openai-agents"

Item = dict[str, Any]
_T = TypeVar("_T")

_ROLE_FROM_ITEM = {"user": Role.HUMAN, "system": Role.SYSTEM, "developer": Role.SYSTEM, "assistant": Role.AI}
_ROLE_TO_ITEM = {Role.HUMAN: "user", Role.SYSTEM: "system", Role.AI: "assistant"}

#: call item type -> (output item type, the key of the output naming the call, the tool
#: name when the call item carries none, the call's fields kept as arguments). The pairs
#: the client answers, after the SDK's own call-to-output map
#: (``agents.run_internal.items._TOOL_CALL_TO_OUTPUT_TYPE``) and the Responses API types.
_CALLS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "function_call": ("function_call_output", "call_id", "", ()),
    "custom_tool_call": ("custom_tool_call_output", "call_id", "", ("input",)),
    "computer_call": ("computer_call_output", "call_id", "computer", ("action",)),
    "shell_call": ("shell_call_output", "call_id", "shell", ("action",)),
    "apply_patch_call": ("apply_patch_call_output", "call_id", "apply_patch", ("operation",)),
    "program": ("program_output", "call_id", "program", ("code",)),
    "mcp_approval_request": ("mcp_approval_response", "approval_request_id", "", ()),
}
_OUTPUTS = {output: (call, key) for call, (output, key, _, _) in _CALLS.items()}


# -- items <-> messages ---------------------------------------------------------------------


def _json_item(item: Any) -> Item:
    """``item`` as the JSON object a store gives back (``SQLiteSession`` stores
    ``json.dumps(item)``): tuples become lists, keys strings.

    Raises:
        TypeError: not a JSON object, or a value JSON cannot encode.
    """
    if not isinstance(item, Mapping):
        raise TypeError(f"a session item is a JSON object (a dict), not {type(item).__name__}")
    loaded = json.loads(json.dumps(item))
    assert isinstance(loaded, dict)
    return loaded


def _part_from_item(block: Any) -> ContentPart:
    """One Responses content block as a ``ContentPart``.

    Raises:
        ValueError: a block this module has no part for (the item is then stored whole).
    """
    if not isinstance(block, Mapping):
        raise ValueError("not an object")
    kind = block.get("type")
    if kind in ("input_text", "output_text") and isinstance(block.get("text"), str):
        return ContentPart(PartKind.TEXT, text=block["text"])
    if kind == "refusal" and isinstance(block.get("refusal"), str):
        return ContentPart(PartKind.TEXT, text=block["refusal"])
    if kind == "input_image":
        detail = block.get("detail") or ""
        image_url, file_id = block.get("image_url"), block.get("file_id")
        if isinstance(image_url, str) and image_url:
            inline = parse_data_url(image_url)
            if inline is not None:
                return ContentPart(PartKind.IMAGE, data=inline[1], mime_type=inline[0], detail=detail)
            return ContentPart(PartKind.IMAGE, url=image_url, detail=detail)
        if isinstance(file_id, str) and file_id:
            return ContentPart(PartKind.IMAGE, file_id=file_id, detail=detail)
    if kind == "input_file":
        filename = block.get("filename") or ""
        file_data, file_url, file_id = block.get("file_data"), block.get("file_url"), block.get("file_id")
        if isinstance(file_data, str) and file_data and (inline := parse_data_url(file_data)):
            return ContentPart(PartKind.FILE, data=inline[1], mime_type=inline[0], filename=filename)
        if isinstance(file_url, str) and file_url:
            return ContentPart(PartKind.FILE, url=file_url, filename=filename)
        if isinstance(file_id, str) and file_id:
            return ContentPart(PartKind.FILE, file_id=file_id, filename=filename)
    if kind == "input_audio" and isinstance(block.get("input_audio"), Mapping):
        audio = block["input_audio"]
        fmt = audio.get("format") or ""
        return ContentPart(PartKind.AUDIO, data=audio.get("data") or "", mime_type=AUDIO_FORMATS.get(fmt, ""))
    raise ValueError(f"content block of type {kind!r}")


def _part_to_item(part: ContentPart, role: Role) -> dict[str, Any]:
    """One ``ContentPart`` as a Responses content block (``input_*`` for input roles,
    ``output_text`` for an assistant's text)."""
    if part.kind is PartKind.TEXT:
        if role is Role.AI:
            return {"type": "output_text", "text": part.text, "annotations": []}
        return {"type": "input_text", "text": part.text}
    if part.kind is PartKind.IMAGE:
        block: dict[str, Any] = {"type": "input_image", "detail": part.detail or "auto"}
        if part.data:
            block["image_url"] = data_url(part.mime_type, part.data)
        elif part.url:
            block["image_url"] = part.url
        else:
            block["file_id"] = part.file_id
        return block
    if part.kind is PartKind.AUDIO:
        fmt = next((k for k, v in AUDIO_FORMATS.items() if v == part.mime_type), "wav")
        return {"type": "input_audio", "input_audio": {"data": part.data, "format": fmt}}
    block = {"type": "input_file"}
    if part.data:
        block["file_data"] = data_url(part.mime_type, part.data)
    elif part.url:
        block["file_url"] = part.url
    elif part.file_id:
        block["file_id"] = part.file_id
    else:
        block["file_data"] = part.text
    if part.filename:
        block["filename"] = part.filename
    return block


def _content_to_item(message: ChatMessage, role: Role) -> str | list[dict[str, Any]]:
    if message.parts and not message.truncated:
        return [_part_to_item(part, role) for part in message.parts]
    return message.content or ""


def _content_message(role: Role, content: Any, **kwargs: Any) -> ChatMessage:
    """A message of a Responses ``content`` (a string or a list of blocks); blocks without a
    part are read as their type in brackets (the item is then kept whole)."""
    if isinstance(content, str):
        return ChatMessage(role=role, content=content, **kwargs)
    if not isinstance(content, list):
        return ChatMessage(role=role, content=_describe({"type": type(content).__name__}), **kwargs)
    parts: list[ContentPart] = []
    for block in content:
        try:
            parts.append(_part_from_item(block))
        except ValueError:
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            parts.append(ContentPart(PartKind.TEXT, text=f"[{kind}]"))
    if not parts:
        return ChatMessage(role=role, content="", **kwargs)
    return ChatMessage.from_parts(role, parts, **kwargs)


def _describe(item: Mapping[str, Any]) -> str:
    """The text of an item agentmemory has no columns for: its type in brackets, then the
    words it carries for a reader (a reasoning summary, a search query, a tool's output)."""
    words: list[str] = []
    for block in item.get("summary") or ():
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            words.append(block["text"])
    action = item.get("action")
    if isinstance(action, Mapping):
        for key in ("query", "command", "url"):
            value = action.get(key)
            if isinstance(value, str):
                words.append(value)
            elif isinstance(value, list):
                words.extend(str(v) for v in value if isinstance(v, str))
    for key in ("queries",):
        value = item.get(key)
        if isinstance(value, list):
            words.extend(v for v in value if isinstance(v, str))
    for key in ("name", "code", "output", "result", "error", "revised_prompt"):
        value = item.get(key)
        if isinstance(value, str) and value and not (key == "result" and len(value) > 2_000):
            words.append(value)
    text = f"[{item.get('type') or 'item'}]"
    return f"{text} {' '.join(words)}" if words else text


def _output_text(item: Mapping[str, Any]) -> Any:
    """The content of a tool result from an output item: its ``output`` (text or content
    blocks), a shell call's stdout and stderr, an approval's decision."""
    kind = item.get("type")
    if kind == "mcp_approval_response":
        decision = "approved" if item.get("approve") else "denied"
        reason = item.get("reason")
        return f"{decision}: {reason}" if isinstance(reason, str) and reason else decision
    if kind == "program_output":
        return item.get("result") if isinstance(item.get("result"), str) else ""
    output = item.get("output")
    if kind == "computer_call_output" and isinstance(output, Mapping):
        return [{**output, "type": "input_image", "detail": "auto"}]
    if kind == "shell_call_output" and isinstance(output, list):
        texts = []
        for chunk in output:
            if isinstance(chunk, Mapping):
                texts += [
                    chunk[k] for k in ("stdout", "stderr") if isinstance(chunk.get(k), str) and chunk[k]
                ]
        return "\n".join(texts)
    if isinstance(output, str | list):
        return output
    return ""


def _call_message(item: Mapping[str, Any], kind: str) -> ChatMessage | None:
    """The ai message with one tool call of a call item, or ``None`` without an id."""
    _, _, default_name, fields = _CALLS[kind]
    call_id = item.get("id") if kind == "mcp_approval_request" else item.get("call_id")
    name = default_name or item.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        return None
    if fields:
        arguments: dict[str, Any] = {key: item[key] for key in fields if key in item}
    else:
        raw = item.get("arguments")
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            parsed = None
        arguments = (
            parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS_KEY: raw if isinstance(raw, str) else ""}
        )
    return ChatMessage.ai(None, [ToolCall(id=call_id, name=name, arguments=arguments)])


def _typed_message(item: Mapping[str, Any]) -> ChatMessage:
    """The message of an item from what agentmemory models, without the item itself."""
    kind = item.get("type")
    role = item.get("role")
    if (kind in (None, "message")) and role in _ROLE_FROM_ITEM and "content" in item:
        return _content_message(_ROLE_FROM_ITEM[role], item["content"])
    if isinstance(kind, str) and kind in _CALLS:
        message = _call_message(item, kind)
        if message is not None:
            return message
    if isinstance(kind, str) and kind in _OUTPUTS:
        call_id = item.get(_OUTPUTS[kind][1])
        if isinstance(call_id, str) and call_id:
            name = item.get("name") if isinstance(item.get("name"), str) else ""
            return _content_message(Role.TOOL, _output_text(item), tool_call_id=call_id, name=name)
    return ChatMessage.ai(_describe(item))


def item_to_message(item: Mapping[str, Any]) -> ChatMessage:
    """One session item as the ``ChatMessage`` it is stored as (see the module's mapping);
    ``message_to_items`` gives the item back, equal to ``item`` as JSON.

    The item itself goes in ``metadata["openai_item"]`` unless the message's columns give
    it back exactly (a plain ``{"role": "user", "content": "..."}``, a
    ``function_call_output`` with text output).

    Raises:
        TypeError: ``item`` is not a JSON object (a dict of JSON values).
    """
    item = _json_item(item)
    message = _typed_message(item)
    if message_to_items(message) != [item]:
        message = replace(message, metadata={ITEM_KEY: item})
    return message


def _text_only(message: ChatMessage) -> ChatMessage:
    """``message`` with its parts read as text, for parts that storage refuses (an image of
    a type or detail it does not know); the item stays whole in the metadata."""
    return replace(message, parts=(), content=message.content or "")


def message_to_items(message: ChatMessage) -> list[Item]:
    """The session items of a stored message: the item it was made from when kept, else
    its columns as Responses items (one per message stored by ``AgentMemorySession``; a
    message written elsewhere gives its text, then one ``function_call`` per tool call).
    A truncated copy from a context window sends its shortened text."""
    stored = message.metadata.get(ITEM_KEY) if message.metadata else None
    if isinstance(stored, Mapping):
        if message.truncated and isinstance(stored.get("output"), str):
            return [{**copy.deepcopy(dict(stored)), "output": message.content or ""}]
        if not message.truncated or message.role is not Role.TOOL or "output" not in stored:
            return [copy.deepcopy(dict(stored))]
    role = message.role
    if role is Role.TOOL:
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": _content_to_item(message, role),
            }
        ]
    items: list[Item] = []
    if role is not Role.AI or message.content is not None or not message.tool_calls:
        items.append({"role": _ROLE_TO_ITEM[role], "content": _content_to_item(message, role)})
    for call in message.tool_calls:
        arguments = dict(call.arguments)
        raw = arguments.get(RAW_ARGUMENTS_KEY) if set(arguments) == {RAW_ARGUMENTS_KEY} else None
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": raw if isinstance(raw, str) else json.dumps(arguments),
            }
        )
    return items


def _is_reasoning(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "reasoning"


def _follows_reasoning(seq: int | None, following: ChatMessage | None, skipped: Sequence[int]) -> bool:
    """Whether the window message ``following`` is the item the reasoning item stored at
    ``seq`` was made for: an item of the model's own (an ``ai`` message: a call, an answer,
    another reasoning item) with no message left out of the window stored between the two.

    The Responses API refuses a reasoning item sent without the item that followed it in
    the model's output (400 "Item 'rs_...' of type 'reasoning' was provided without its
    required following item"). A window leaves out a call still awaiting its output (and
    orphaned or late outputs), so the reasoning before such a call would be sent alone,
    followed by the next user message, and every later request of the session would fail
    (openai/openai-agents-js#1280, continuedev/continue#8933, openai/codex#15542)."""
    if following is None or following.role is not Role.AI or seq is None or following.seq is None:
        return False
    return not any(seq < s < following.seq for s in skipped)


# -- the session ----------------------------------------------------------------------------


def session_uuid(session_id: str, *, owner_id: Any = None, agent_key: str = "") -> uuid.UUID:
    """The public uuid of the conversation holding an Agents SDK session of ``owner_id``
    (a user's primary key, or ``None``) for ``agent_key`` (see
    ``agentmemory.contrib.sessions.session_uuid``)."""
    return sessions.session_uuid(FRAMEWORK, session_id, owner_id=owner_id, agent_key=agent_key)


async def _settled(awaitable: Awaitable[_T]) -> _T:
    """Await a write to the end even when the caller is cancelled meanwhile, then pass the
    cancellation on: a write cancelled half-way would leave the caller unsure whether it
    happened (the SDK's own stores wait the same way)."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    result = task.result()
    if cancelled is not None:
        raise cancelled
    return result


class AgentMemorySession:
    """An OpenAI Agents SDK ``Session`` stored as one agentmemory conversation.

    Args:
        session_id: the SDK's session id (any text; the conversation's title shows its
            first 200 characters).
        owner: the user the conversation belongs to (a user instance or its primary key),
            or ``None`` for a conversation of nobody (visible to staff only in the API).
        agent_key: the conversation's agent key; part of the session's identity.
        session_settings: the SDK's ``SessionSettings`` (or a dict): ``limit`` is the
            default of ``get_items(limit=None)``, as for the SDK's stores.
        window_tokens: when set, ``get_items()`` returns the context window of at most this
            many tokens that ``ContextWindowBuilder`` builds (pinned system prompt, summary,
            the newest history that fits with tool calls whole), not the whole history;
            ``limit`` then caps its history messages. ``None`` (default): the whole history,
            as ``SQLiteSession``.
        compaction_tokens: the window budget (tokens) the compactor makes summaries for when
            the SDK calls ``run_compaction``; defaults to ``window_tokens``, else
            ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``.

    The ``Session`` protocol's methods are coroutines, as the SDK defines them, and so is
    ``aget_conversation()``; the database work runs in a worker thread
    (``asgiref.sync.sync_to_async``), never on the event loop, where Django refuses queries.
    ``get_conversation()`` is its sync form, for code outside the event loop. The
    conversation is created by the first ``add_items``; reads of a session never written
    return nothing.

    Raises:
        TypeError, ValueError: a ``session_id`` that is not text, an ``agent_key`` the
            conversation cannot hold (``agentmemory.contrib.sessions.check_session``).
    """

    def __init__(
        self,
        session_id: str,
        *,
        owner: Any = None,
        agent_key: str = "",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        window_tokens: int | None = None,
        compaction_tokens: int | None = None,
    ) -> None:
        sessions.check_session(session_id, agent_key)
        self.session_id = session_id
        self.owner_id = sessions.session_owner_id(owner)
        self.agent_key = agent_key
        if session_settings is None:
            self.session_settings: SessionSettings | None = SessionSettings()
        elif isinstance(session_settings, SessionSettings):
            self.session_settings = session_settings
        else:
            self.session_settings = SessionSettings(**dict(session_settings))
        self.window_tokens = window_tokens
        self.compaction_tokens = compaction_tokens
        self.conversation_uuid = session_uuid(session_id, owner_id=self.owner_id, agent_key=agent_key)
        self._conversation_id: int | None = None

    def __repr__(self) -> str:
        return f"AgentMemorySession({self.session_id!r}, conversation={self.conversation_uuid})"

    # -- the conversation ---------------------------------------------------------------

    def _find(self) -> int | None:
        if self._conversation_id is None:
            self._conversation_id = (
                Conversation.objects.using(router.db_for_read(Conversation))
                .filter(uuid=self.conversation_uuid)
                .values_list("pk", flat=True)
                .first()
            )
        return self._conversation_id

    def _get_or_create(self) -> int:
        if self._conversation_id is None:
            self._conversation_id = sessions.get_or_create_session_conversation(
                self.conversation_uuid,
                session_id=self.session_id,
                metadata_key=SESSION_KEY,
                owner_id=self.owner_id,
                agent_key=self.agent_key,
            )
        return self._conversation_id

    def get_conversation(self) -> Conversation | None:
        """The conversation holding this session, or ``None`` before its first item.

        Sync, for code outside the event loop; in a coroutine (beside ``Runner.run``) Django
        raises ``SynchronousOnlyOperation`` for it: await ``aget_conversation()`` there."""
        pk = self._find()
        return None if pk is None else Conversation.objects.filter(pk=pk).first()

    async def aget_conversation(self) -> Conversation | None:
        """``get_conversation()`` as a coroutine (the query runs in asgiref's worker thread,
        as the session's other methods do)."""
        return await sync_to_async(self.get_conversation)()

    # -- Session protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The session's items, oldest first; with ``limit`` (or the settings' ``limit``) the
        newest ``limit`` of them; ``0`` gives none and a negative limit all, as
        ``SQLiteSession`` (SQLite's ``LIMIT``). With ``window_tokens``, the context window
        (see the class)."""
        return await sync_to_async(self._get_items)(resolve_session_limit(limit, self.session_settings))

    def _get_items(self, limit: int | None) -> list[Item]:
        pk = self._find()
        if pk is None or limit == 0:
            return []
        if self.window_tokens is not None:
            return self._window_items(pk, limit)
        history = PersistentChatHistory(pk)
        try:
            messages = history.get_messages(limit=limit if limit is not None and limit > 0 else None)
        except ConversationNotFound:
            self._conversation_id = None
            return []
        items = [item for message in messages for item in message_to_items(message)]
        return items[-limit:] if limit is not None and limit > 0 else items

    def _window_items(self, pk: int, limit: int | None) -> list[Item]:
        try:
            window = ContextWindowBuilder(pk, pending_tool_calls="omit").build(
                self.window_tokens, max_messages=limit if limit is not None and limit > 0 else None
            )
        except ConversationNotFound:
            self._conversation_id = None
            return []
        seqs = [m.seq for m in window.messages if m.seq is not None]
        stored = dict(
            Message.objects.using(router.db_for_read(Message))
            .filter(conversation_id=pk, seq__in=seqs, metadata__has_key=ITEM_KEY)
            .values_list("seq", f"metadata__{ITEM_KEY}")
        )
        skipped = sorted({*window.skipped_pending, *window.skipped_orphans, *window.skipped_late})
        sent: list[ChatMessage] = []  # newest first
        for message in reversed(window.messages):
            if message.seq in stored:
                item = stored[message.seq]
                following = sent[-1] if sent else None
                if _is_reasoning(item) and not _follows_reasoning(message.seq, following, skipped):
                    continue
                message = replace(message, metadata={ITEM_KEY: item})
            sent.append(message)
        return [item for message in reversed(sent) for item in message_to_items(message)]

    async def add_items(self, items: list[Item]) -> None:
        """Append ``items`` in order, atomically, one message each.

        Raises:
            TypeError: an item is not a JSON object.
            InvalidMessageError: an item cannot be stored (NUL characters, content over
                ``MAX_MESSAGE_CHARS``); nothing of the batch is stored.
            MemoryScopeError: the first write of the session, whose ``owner`` is a primary key
                that names no user; nothing is stored.
        """
        if not items:
            return
        messages = [item_to_message(item) for item in items]
        await _settled(sync_to_async(self._add)(messages))

    def _add(self, messages: list[ChatMessage]) -> None:
        for attempt in range(2):
            history = PersistentChatHistory(self._get_or_create())
            try:
                self._append(history, messages)
                return
            except ConversationNotFound:
                self._conversation_id = None  # deleted meanwhile (the admin): made again
                if attempt:
                    raise

    def _append(self, history: PersistentChatHistory, messages: list[ChatMessage]) -> None:
        strict = self._check_tool_pairs(history, messages)
        checked_again = False
        while True:
            try:
                history.add_messages(messages, validate_tool_pairs=strict)
                return
            except InvalidMessageError as exc:
                index = exc.index
                if index is None or not messages[index].parts:
                    if strict and not checked_again and index is not None:
                        # Another writer may have answered or made a call since the check.
                        checked_again = True
                        strict = self._check_tool_pairs(history, messages)
                        if not strict:
                            continue
                    raise
                # Parts storage refuses (an image type or detail it does not know): stored as
                # text, the item whole in the metadata.
                message = messages[index]
                metadata = dict(message.metadata) or {ITEM_KEY: message_to_items(message)[0]}
                messages = [
                    *messages[:index],
                    replace(_text_only(message), metadata=metadata),
                    *messages[index + 1 :],
                ]

    def _check_tool_pairs(self, history: PersistentChatHistory, messages: Sequence[ChatMessage]) -> bool:
        """Whether the batch passes the strict tool-pair check; logs the outputs that will be
        stored as orphans and the calls that supersede a call awaiting its output."""
        if not any(m.role is Role.TOOL or m.tool_calls for m in messages):
            return True
        pending = set(
            pending_calls(
                Conversation.objects.using(router.db_for_read(Conversation))
                .filter(pk=history.conversation_id)
                .values_list("pending_tool_calls", flat=True)
                .first()
            )
        )
        orphans: list[str] = []
        superseding: list[str] = []
        for message in messages:
            for call in message.tool_calls:
                if call.id in pending:
                    superseding.append(call.id)
                pending.add(call.id)
            if message.role is Role.TOOL:
                if message.tool_call_id in pending:
                    pending.discard(message.tool_call_id)
                else:
                    orphans.append(message.tool_call_id)
        if orphans or superseding:
            logger.warning(
                "session %r: tool outputs answering no call awaiting them stored as orphans "
                "(never sent in a context window): %s; calls superseding a call awaiting its "
                "output: %s",
                self.session_id,
                orphans,
                superseding,
                extra={"conversation_id": history.conversation_id},
            )
            return False
        return True

    async def pop_item(self) -> Item | None:
        """Remove and return the newest item, or ``None`` when the session has none
        (``PersistentChatHistory.pop``: a call popped stops awaiting its output, an output
        popped makes its call await one again)."""
        return await _settled(sync_to_async(self._pop)())

    def _pop(self) -> Item | None:
        pk = self._find()
        if pk is None:
            return None
        try:
            message = PersistentChatHistory(pk).pop()
        except ConversationNotFound:
            self._conversation_id = None
            return None
        return None if message is None else message_to_items(message)[-1]

    async def clear_session(self) -> None:
        """Delete every item (and summary) of the session; the conversation row stays."""
        await _settled(sync_to_async(self._clear)())

    def _clear(self) -> None:
        pk = self._find()
        if pk is None:
            return
        try:
            PersistentChatHistory(pk).clear()
        except ConversationNotFound:
            self._conversation_id = None

    # -- compaction hook (agents.memory.OpenAIResponsesCompactionAwareSession) ------------

    async def run_compaction(self, args: Mapping[str, Any] | None = None) -> None:
        """Fold older turns into agentmemory's incremental summary when one is due
        (``request_compaction``: inline after the write, a Celery task or nothing, by
        ``AGENTMEMORY['COMPACTION_MODE']``); ``args["force"]`` skips the "is it due"
        check. The SDK calls it after each turn whose model returned a response id.

        Unlike ``OpenAIResponsesCompactionSession``, no item is replaced or deleted: the
        summary is what ``window_tokens`` windows send in place of the turns it covers, and
        ``get_items()`` without a window keeps returning every item."""
        force = bool(args and args.get("force"))
        await sync_to_async(self._compact)(force)

    def _compact(self, force: bool) -> None:
        pk = self._find()
        if pk is None:
            return
        request_compaction(
            pk,
            max_tokens=self.compaction_tokens or self.window_tokens,
            force=force,
            reason="openai-agents run_compaction",
        )
