"""Recording model calls (``ModelCall``) and rebuilding the context window a chat call sent.

A chat call is recorded in one row, without copying stored messages: stored messages are
never edited, so the history part of a window is its seq range ``first_seq..last_seq`` read
back in window order (each tool result right after the AI message that called it, in
``tool_calls`` order), less what the row lists as changed. Texts sent that are not stored
messages (the system prompt with the owner's knowledge block, the summary message as sent,
the memory block, the tool declarations) are kept once per conversation in ``PromptText``,
named by their SHA-256 digest; the memory block's digest and tokens are in the row's
``window_changes["memory"]``. What the provider adapter changed after the window was built,
to meet the provider's per-request limits (an image sent as its placeholder text, a media type
corrected, text cut, a cache breakpoint left out), is listed in
``window_changes["provider_changes"]`` (``SentChange``s, at most ``MAX_PROVIDER_CHANGES``).
``recorded_window(call)`` (``ModelCall.window()``) returns the messages exactly as the model
received them, those changes applied.

The rows, the usage scope and the read-back of texts are ``agentmemory.recording`` (below
knowledge, recall and compaction, which record their calls there); this module adds what needs
the window code: recording a chat call from its ``ContextWindow`` and rebuilding the window it
sent. It re-exports every name of ``agentmemory.recording``; code below the context layer
imports that module, never this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db import router

from agentmemory.context.builder import memory_message
from agentmemory.context.packing import TRUNCATION_MARKER, _replace, pending_placeholder
from agentmemory.context.window import MEMORY_BLOCK_KEY, SUMMARY_CUT, ContextWindow
from agentmemory.formats import changes as sent
from agentmemory.formats.openai import cut_text
from agentmemory.llm.base import Usage
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, parts_text
from agentmemory.models import Message, ModelCall, ModelCallKind, PromptText
from agentmemory.recording import (
    MEMORY_BLOCK_REMOVED,
    USAGE_COUNTED,
    USAGE_PROVIDER,
    UsageScope,
    WindowUnavailable,
    _insert,
    _short,
    _texts,
    _usage_fields,
    current_scope,
    record_call,
    recorded_memory_tokens,
    recorded_tools,
    recording_enabled,
    redact_if_quoted_gone,
    text_digest,
    tools_text,
    usage_scope,
)
from agentmemory.store.rows import _chat
from agentmemory.store.sent_metadata import sent_metadata, sent_metadata_column
from agentmemory.validation import storable_text

if TYPE_CHECKING:
    from agentmemory.agents.results import ModelCall as CallAccounting
    from agentmemory.tokens import TokenCounter

__all__ = [
    "USAGE_COUNTED",
    "USAGE_PROVIDER",
    "ChatCallRecorder",
    "RecordedMemory",
    "UsageScope",
    "WindowUnavailable",
    "counted_usage",
    "current_scope",
    "record_call",
    "recorded_context_window",
    "recorded_knowledge_facts",
    "recorded_memory",
    "recorded_memory_tokens",
    "recorded_provider_changes",
    "recorded_tools",
    "recorded_window",
    "recording_enabled",
    "text_digest",
    "tools_text",
    "usage_scope",
    "window_changes",
]

#: what a truncated copy's content ends with, before the figures (``TRUNCATION_MARKER``)
_MARKER_START = TRUNCATION_MARKER.split("{", 1)[0]
#: the most adapter changes one call's record keeps (``window_changes["provider_changes"]``);
#: past it, ``window_changes["provider_changes_more"]`` counts the rest. A stored history
#: can bring hundreds of images into every request: the list is bounded like the row.
MAX_PROVIDER_CHANGES = 100
#: the longest ``reason`` and ``sent`` a recorded change keeps (characters)
_CHANGE_TEXT_CHARS = 300


# --------------------------------------------------------------------------- chat calls


class ChatCallRecorder:
    """Records the chat calls of one agent turn (``BaseToolCallingAgent`` makes one per
    turn). Texts written in this turn are remembered so that later rounds send none again.

    Args:
        conversation_id, owner_id, agent_key: who the calls are billed to.
        system_prompt: the system prompt of the turn as sent (knowledge block included).
        knowledge_context: the knowledge block inside it (``""`` when none), for the
            split of the system tokens.
        tools: the tool declarations sent (``[]`` for none).
        tools_tokens: their tokens by the agent's counter.
        counter: the agent's token counter.
    """

    def __init__(
        self,
        *,
        conversation_id: int,
        owner_id: int | None,
        agent_key: str,
        system_prompt: str,
        knowledge_context: str,
        tools: Sequence[Mapping[str, Any]],
        tools_tokens: int,
        counter: TokenCounter,
        knowledge_fact_ids: Sequence[int] = (),
    ) -> None:
        self.conversation_id = conversation_id
        self.owner_id = owner_id
        self.agent_key = agent_key
        self.texts: dict[str, str] = {}
        self.system_digest = self._text(system_prompt)
        self.tools_digest = self._text(tools_text(tools)) if tools else ""
        self.tools_tokens = tools_tokens
        self.knowledge_tokens = 0
        #: the facts the knowledge block shows and its length (characters) at the end of the
        #: system prompt, so that deleting one removes the recorded copy
        self.knowledge: dict[str, Any] = {}
        suffix = f"\n\n{knowledge_context}"
        if knowledge_context and system_prompt.endswith(suffix):
            whole = counter.count_message(ChatMessage.system(system_prompt))
            bare = counter.count_message(ChatMessage.system(system_prompt[: -len(suffix)]))
            self.knowledge_tokens = max(whole - bare, 0)
            if knowledge_fact_ids:
                self.knowledge = {
                    "facts": sorted({int(pk) for pk in knowledge_fact_ids}),
                    "chars": len(suffix),
                }
        self.written: set[str] = set()

    def with_knowledge_share(self, window: ContextWindow) -> ContextWindow:
        """``window`` with its ``knowledge_tokens`` set: the knowledge block's share of the
        system message, as this call's record keeps it (0 when the window sends no system
        prompt of the turn, or the prompt carries no block)."""
        share = self.knowledge_tokens if window.system_tokens else 0
        return window if window.knowledge_tokens == share else replace(window, knowledge_tokens=share)

    def _text(self, text: str) -> str:
        digest = text_digest(text)
        self.texts[digest] = text
        return digest

    def record(self, call: CallAccounting, *, message_id: int | None) -> ModelCall | None:
        """Store one call of the turn: its window (``call.window``, as sent), its usage and
        the AI message it produced (``message_id``). One ``INSERT``, two the first time a
        text is sent in this turn. Returns the row (``None`` when recording is off or the
        conversation is gone)."""
        if not recording_enabled():
            return None
        window = call.window
        history = window.history
        leading = window.messages[: len(window.messages) - len(history)]
        memory = next((m for m in leading if MEMORY_BLOCK_KEY in m.metadata), None)
        leading = [m for m in leading if m is not memory]
        summary_digest = memory_digest = ""
        changes: dict[str, Any] = {}
        if len(leading) > 1:
            summary_message = leading[1]
            summary_digest = self._text(summary_message.text)
            if summary_message.truncated:
                changes["summary_truncated"] = True
        if memory is not None:
            memory_digest = self._text(memory.text)
            changes["memory"] = {
                "digest": memory_digest,
                "tokens": window.memory_tokens,
                "items": memory.metadata[MEMORY_BLOCK_KEY],
                "sources": memory_sources(window.memory),
            }
        if self.knowledge and window.system_tokens:
            changes["knowledge"] = self.knowledge
        changes.update(window_changes(window, stubbed=call.stubbed, omitted=call.omitted))
        changes.update(provider_changes(window, getattr(call, "sent_changes", ())))
        new = [
            d
            for d in dict.fromkeys((self.system_digest, summary_digest, memory_digest, self.tools_digest))
            if d and d not in self.written
        ]
        texts = [
            PromptText(conversation_id=self.conversation_id, digest=d, text=storable_text(self.texts[d]))
            for d in new
        ]
        knowledge_tokens = self.knowledge_tokens if window.system_tokens else 0
        system_tokens = max(window.system_tokens - knowledge_tokens, 0)
        row = ModelCall(
            kind=ModelCallKind.CHAT,
            conversation_id=self.conversation_id,
            owner_id=self.owner_id,
            agent_key=self.agent_key,
            message_id=message_id,
            round=min(call.round, 32_767),
            model=_short(call.model, 200),
            finish_reason=_short(call.finish_reason, 50),
            latency=call.latency_s,
            max_tokens=window.max_tokens,
            first_seq=window.first_seq,
            last_seq=window.last_seq,
            summary_id=window.summary_id,
            system_prompt_digest=self.system_digest,
            summary_digest=summary_digest,
            tools_digest=self.tools_digest,
            window_changes=changes,
            system_tokens=system_tokens,
            knowledge_tokens=knowledge_tokens,
            summary_tokens=window.summary_tokens,
            history_tokens=window.history_tokens,
            tools_tokens=self.tools_tokens if self.tools_digest else 0,
            usage_source=call.usage_source,
            **_usage_fields(call.usage),
        )
        stored = _insert(row, texts)
        if stored is not None:
            self.written.update(new)
            if "memory" in changes or "knowledge" in changes:
                redact_if_quoted_gone(stored)  # a delete that ran while the model worked
        return stored


@dataclass(frozen=True)
class RecordedMemory:
    """The memory block a recorded chat call sent, as its record keeps it (not each item).

    Attributes:
        text: the block as sent, or what replaced it once its words were removed.
        tokens: what its message cost (tokens; ``recorded_memory_tokens``).
        item_count: how many recalled items it held.
        removed: its words were removed since (``MEMORY_BLOCK_REMOVED``: something it quoted
            was deleted; empty: ``purge_conversations --blank-content``).
        conversation_ids, fact_ids: the conversations whose messages it quoted and the
            facts it quoted (ids; none once removed).
    """

    text: str
    tokens: int
    item_count: int
    removed: bool
    conversation_ids: tuple[int, ...]
    fact_ids: tuple[int, ...]


def _ids(values: Any) -> tuple[int, ...]:
    """The integers of a recorded list, in order, once each (a row edited by hand may hold
    anything else: left out)."""
    if not isinstance(values, list):
        return ()
    return tuple(dict.fromkeys(v for v in values if isinstance(v, int) and not isinstance(v, bool)))


def recorded_memory(call: ModelCall, messages: Sequence[ChatMessage] | None = None) -> RecordedMemory | None:
    """The memory block chat call ``call`` sent (``RecordedMemory``), or None when it sent
    none. Its text is taken from ``messages`` (``recorded_window(call)``) when given, else
    read (one query).

    Raises:
        WindowUnavailable: without ``messages``, its conversation or the text is gone.
    """
    memory = (call.window_changes or {}).get("memory")
    if not isinstance(memory, Mapping) or not isinstance(memory.get("digest"), str) or not memory["digest"]:
        return None
    if messages is not None:
        text = next((m.text for m in messages if MEMORY_BLOCK_KEY in m.metadata), "")
    else:
        text = _texts(call, [memory["digest"]])[memory["digest"]]
    sources = memory.get("sources")
    sources = sources if isinstance(sources, Mapping) else {}
    items = memory.get("items")
    return RecordedMemory(
        text=text,
        tokens=recorded_memory_tokens(call),
        item_count=items if isinstance(items, int) and not isinstance(items, bool) and items > 0 else 0,
        removed=text == MEMORY_BLOCK_REMOVED or not text.strip(),
        conversation_ids=_ids(sources.get("conversations")),
        fact_ids=_ids(sources.get("facts")),
    )


def recorded_knowledge_facts(call: ModelCall) -> tuple[int, ...]:
    """Ids of the facts the knowledge block at the end of ``call``'s system prompt showed
    (``window_changes["knowledge"]``; empty when it had none)."""
    knowledge = (call.window_changes or {}).get("knowledge")
    return _ids(knowledge.get("facts")) if isinstance(knowledge, Mapping) else ()


def memory_sources(block: Any) -> dict[str, list[Any]]:
    """What a memory block quoted: ``{"conversations": [conversation id, ...], "messages":
    [[conversation id, seq], ...], "facts": [fact id, ...]}``
    (``agentmemory.recording.redact_recorded_copies`` reads it; on PostgreSQL it finds the
    calls by ``conversations`` and ``facts`` with ``jsonb`` containment)."""
    items = getattr(block, "items", None) or ()
    quoted = sorted(
        {
            (item.conversation_id, seq)
            for item in items
            if item.conversation_id is not None
            for seq in item.seqs
        }
    )
    facts = sorted({item.fact_id for item in items if item.fact_id is not None})
    conversations = sorted({conversation for conversation, _seq in quoted})
    return {"conversations": conversations, "messages": [list(pair) for pair in quoted], "facts": facts}


def window_changes(
    window: ContextWindow, *, stubbed: Sequence[int] = (), omitted: Sequence[int] = ()
) -> dict[str, Any]:
    """How the history sent differs from the stored messages ``first_seq..last_seq`` read
    in window order: ``left_out`` (seqs of AI messages whose exchanges were not sent: still
    waiting for a result, or left out by a tool's memory policy), ``truncated`` (seq ->
    characters kept before the truncation marker), ``stubbed`` (seq -> the stub text sent),
    ``placeholders`` (tool call id -> tokens of the placeholder result sent). Empty in the
    usual case. Tool results outside an exchange that was sent (orphans, late results) need
    no entry: they are never sent."""
    changes: dict[str, Any] = {}
    first, last = window.first_seq, window.last_seq
    if first is None or last is None:
        return changes
    left_out = sorted({s for s in (*window.skipped_pending, *omitted) if first <= s <= last})
    if left_out:
        changes["left_out"] = left_out
    stubs = set(stubbed)
    truncated: dict[str, int] = {}
    stub_texts: dict[str, str] = {}
    placeholders: dict[str, int] = {}
    for message in window.history:
        if message.seq is None:
            if message.metadata.get("pending_tool_call"):
                placeholders[message.tool_call_id] = message.token_count or 0
            continue
        if message.seq in stubs:
            stub_texts[str(message.seq)] = message.text
        elif message.truncated:
            truncated[str(message.seq)] = message.text.rfind(_MARKER_START)
    if truncated:
        changes["truncated"] = truncated
    if stub_texts:
        changes["stubbed"] = stub_texts
    if placeholders:
        changes["placeholders"] = placeholders
    return changes


def provider_changes(window: ContextWindow, changes: Sequence[sent.SentChange]) -> dict[str, Any]:
    """The adapter's changes of ``window``'s messages as recorded: ``{"provider_changes":
    [{"message", "seq", "part", "change", "reason", "sent"?, "kept"?}, ...]}`` (``message``
    the position in ``window.messages``, ``seq`` that message's seq, ``None`` for the
    system prompt, summary, memory block and placeholder results), the first
    ``MAX_PROVIDER_CHANGES`` in request order, and ``"provider_changes_more"``: how many
    more there were. Empty when the adapter changed nothing."""
    entries: list[dict[str, Any]] = []
    for change in changes:
        entry = change.as_dict()
        position = change.message
        in_window = position is not None and 0 <= position < len(window.messages)
        entry["message"] = position if in_window else None
        entry["seq"] = window.messages[position].seq if in_window else None  # type: ignore[index]
        entry["reason"] = storable_text(change.reason)[:_CHANGE_TEXT_CHARS]
        if change.sent:
            entry["sent"] = storable_text(change.sent)[:_CHANGE_TEXT_CHARS]
        entries.append(entry)
    if not entries:
        return {}
    recorded: dict[str, Any] = {"provider_changes": entries[:MAX_PROVIDER_CHANGES]}
    if len(entries) > MAX_PROVIDER_CHANGES:
        recorded["provider_changes_more"] = len(entries) - MAX_PROVIDER_CHANGES
    return recorded


def recorded_provider_changes(
    call: ModelCall, messages: Sequence[ChatMessage] | None = None
) -> list[dict[str, Any]]:
    """The adapter's changes ``call`` recorded (``provider_changes``), each
    ``{"message", "seq", "part", "change", "reason"}`` plus ``"sent"`` and ``"kept"`` where
    recorded. With ``messages`` (``recorded_window(call)``), ``message`` is the position of
    the changed message there (found by its seq; ``None`` when it is no longer in the
    window). Entries of another shape (a row edited by hand) are left out."""
    found = (call.window_changes or {}).get("provider_changes")
    entries = [dict(e) for e in found if _valid_change(e)] if isinstance(found, list) else []
    if messages is not None:
        for entry in entries:
            entry["message"] = _position(messages, entry)
    return entries


def _valid_change(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and isinstance(entry.get("change"), str)
        and isinstance(entry.get("reason"), str)
        and all(
            entry.get(key) is None or (isinstance(entry[key], int) and not isinstance(entry[key], bool))
            for key in ("message", "seq", "part", "kept")
        )
    )


def _position(messages: Sequence[ChatMessage], entry: Mapping[str, Any]) -> int | None:
    """Where the message ``entry`` names sits in ``messages``: by its seq, else by its
    recorded position when the message there has no seq either."""
    seq, index = entry.get("seq"), entry.get("message")
    if seq is not None:
        return next((i for i, m in enumerate(messages) if m.seq == seq), None)
    if index is not None and 0 <= index < len(messages) and messages[index].seq is None:
        return int(index)
    return None


def _apply_change(message: ChatMessage, entry: Mapping[str, Any]) -> ChatMessage:
    """``message`` as the adapter sent it after the recorded change ``entry``."""
    kind, part_index = entry["change"], entry.get("part")
    text = entry.get("sent") or ""
    if part_index is None or message.truncated or not 0 <= part_index < len(message.parts):
        if kind == sent.CONTENT_CUT and message.content and entry.get("kept") is not None:
            return _replace(message, content=cut_text(message.content, entry["kept"]), truncated=True)
        if kind in (sent.ERROR_TEXT_ADDED, sent.EMPTY_TEXT_ADDED) and text:
            return _replace(message, content=text)
        if kind == sent.TRAILING_WHITESPACE_STRIPPED and message.content:
            return _replace(message, content=message.content.rstrip())
        return message
    parts = list(message.parts)
    part = parts[part_index]
    if kind.endswith("_placeholder"):
        part = ContentPart(PartKind.TEXT, text=part.placeholder)
    elif kind == sent.MEDIA_TYPE_CORRECTED and text:
        part = replace(part, mime_type=text)
    elif kind == sent.CONTENT_CUT and part.text and entry.get("kept") is not None:
        part = replace(part, text=cut_text(part.text, entry["kept"]))
    elif kind == sent.TRAILING_WHITESPACE_STRIPPED:
        part = replace(part, text=part.text.rstrip())
    elif kind == sent.CACHE_CONTROL_DROPPED:
        part = replace(part, extra={k: v for k, v in part.extra.items() if k != "cache_control"})
    elif kind == sent.CACHE_TTL_SHORTENED and isinstance(part.extra.get("cache_control"), Mapping):
        control = {k: v for k, v in part.extra["cache_control"].items() if k != "ttl"}
        part = replace(part, extra={**part.extra, "cache_control": control})
    else:
        return message
    parts[part_index] = part
    return _replace(message, parts=tuple(parts), content=parts_text(parts))


def apply_provider_changes(
    messages: list[ChatMessage], entries: Sequence[Mapping[str, Any]]
) -> list[ChatMessage]:
    """``messages`` with the recorded adapter changes ``entries`` applied (positions as
    ``recorded_provider_changes(call, messages)`` gives them), in copies."""
    result = list(messages)
    for entry in entries:
        index = entry.get("message")
        if index is not None and 0 <= index < len(result):
            result[index] = _apply_change(result[index], entry)
    return result


# --------------------------------------------------------------------------- rebuilding


def recorded_window(call: ModelCall) -> list[ChatMessage]:
    """The messages chat call ``call`` sent, rebuilt from storage, equal to the
    ``ChatMessage``s the model received (``ContextWindow.messages`` after the tools' memory
    policy): system prompt, summary message, memory block, then the history in window order
    with the recorded changes applied, and then the changes the provider adapter made to
    meet the provider's limits (``recorded_provider_changes``: an image it sent as its
    placeholder text is a text part here, a text it cut is cut, a content it stripped or
    filled in reads as sent). Three queries: the texts, the messages of the seq range, and
    nothing more.

    Raises:
        WindowUnavailable: not a chat call, the conversation was deleted, or a message or
            text it sent is no longer stored.
    """
    if call.kind != ModelCallKind.CHAT:
        raise WindowUnavailable(f"model call {call.pk} is a {call.kind} call: it sent no context window")
    if call.conversation_id is None:
        raise WindowUnavailable(f"model call {call.pk}: its conversation was deleted")
    changes = call.window_changes or {}
    memory = changes.get("memory") or {}
    texts = _texts(call, [call.system_prompt_digest, call.summary_digest, memory.get("digest", "")])
    messages: list[ChatMessage] = []
    if call.system_prompt_digest:
        messages.append(ChatMessage.system(texts[call.system_prompt_digest]))
    if call.summary_digest:
        summary = ChatMessage.system(
            texts[call.summary_digest], metadata={"summary_id": call.summary_id} if call.summary_id else {}
        )
        if changes.get("summary_truncated"):
            summary = replace(summary, truncated=True)
        messages.append(summary)
    if memory.get("digest"):
        messages.append(memory_message(texts[memory["digest"]], int(memory.get("items") or 0)))
    if call.first_seq is not None and call.last_seq is not None:
        messages.extend(_history(call, changes))
    return apply_provider_changes(messages, recorded_provider_changes(call, messages))


def recorded_context_window(call: ModelCall) -> ContextWindow:
    """``recorded_window(call)`` as a ``ContextWindow`` with the call's accounting (tokens):
    ``system_tokens`` is the system message as sent (``call.system_tokens``, the prompt's
    own, plus ``call.knowledge_tokens``), ``knowledge_tokens`` the knowledge block's share of
    it, so that ``total_tokens`` is every message sent; ``placeholders`` and ``truncated`` say
    which results were sent as placeholders and which messages as shortened copies (stubbed
    results included, as in the window the call was built from).

    Raises:
        WindowUnavailable: as ``recorded_window``.
    """
    messages = recorded_window(call)
    changes = call.window_changes or {}
    # a message whose whole content the adapter cut is a truncated copy like the window's own
    cut = {m.seq for m in messages if m.truncated and m.seq is not None and not m.metadata.get("summary_id")}
    return ContextWindow(
        messages=messages,
        max_tokens=call.max_tokens or 0,
        system_tokens=call.system_tokens + call.knowledge_tokens,
        knowledge_tokens=call.knowledge_tokens,
        summary_tokens=call.summary_tokens,
        memory_tokens=recorded_memory_tokens(call),
        history_tokens=call.history_tokens,
        first_seq=call.first_seq,
        last_seq=call.last_seq,
        summary_id=call.summary_id,
        summary_through_seq=call.summary.through_seq if call.summary_id and call.summary else None,
        placeholders=tuple(changes.get("placeholders") or ()),
        truncated=(
            *((SUMMARY_CUT,) if changes.get("summary_truncated") else ()),
            # a stubbed result is a copy sent in place of the stored one, listed with the
            # cut copies as the live window lists it (``apply_memory_policy``)
            *sorted({int(seq) for key in ("truncated", "stubbed") for seq in (changes.get(key) or {})} | cut),
        ),
    )


def _history(call: ModelCall, changes: Mapping[str, Any]) -> list[ChatMessage]:
    assert call.conversation_id is not None  # checked by the caller
    using = router.db_for_read(Message)
    rows = (
        Message.objects.using(using)
        .filter(conversation_id=call.conversation_id, seq__gte=call.first_seq, seq__lte=call.last_seq)
        .order_by("seq")
        .values_list(
            "id",
            "seq",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "token_count",
            "parts",
            "exchange_seq",
            # what the live window carried of the metadata: thinking blocks, error flags
            sent_metadata_column(using),
        )
    )
    left_out = set(changes.get("left_out") or ())
    truncated = {int(k): v for k, v in (changes.get("truncated") or {}).items()}
    stubbed = {int(k): v for k, v in (changes.get("stubbed") or {}).items()}
    placeholders: Mapping[str, int] = changes.get("placeholders") or {}
    ordered: list[ChatMessage] = []
    results: dict[tuple[int, str], ChatMessage] = {}
    seen: set[int] = set()
    for pk, seq, role, content, tool_calls, call_id, name, tokens, parts, exchange_seq, kept_raw in rows:
        seen.add(seq)
        message = _chat(
            pk,
            seq,
            role,
            content,
            tool_calls or (),
            call_id,
            name,
            tokens,
            tuple(ContentPart.from_dict(p) for p in parts or ()),
        )
        if kept_raw is not None and (kept := sent_metadata(role, kept_raw)) is not None:
            message = _replace(message, metadata=kept)
        if seq in stubbed:
            message = _replace(message, content=stubbed[seq], truncated=True)
        elif seq in truncated:
            text = message.text
            # at most the text stored now: blanking (purge_conversations) empties it
            keep = min(truncated[seq], len(text))
            marker = TRUNCATION_MARKER.format(omitted=len(text) - keep, total=len(text))
            message = _replace(message, content=text[:keep] + marker, truncated=True)
        if role == Role.TOOL:
            if exchange_seq is not None:
                results[(exchange_seq, call_id)] = message
        elif seq not in left_out:
            ordered.append(message)
    if call.first_seq not in seen or call.last_seq not in seen:
        raise WindowUnavailable(
            f"model call {call.pk}: the messages {call.first_seq}..{call.last_seq} it sent "
            "are no longer all stored"
        )
    history: list[ChatMessage] = []
    for message in ordered:
        history.append(message)
        for tool_call in message.tool_calls if message.role is Role.AI else ():
            result = results.get((message.seq or 0, tool_call.id))
            if result is not None:
                history.append(result)
            elif tool_call.id in placeholders:
                placeholder = pending_placeholder(tool_call.id, tool_call.name)
                history.append(_replace(placeholder, token_count=placeholders[tool_call.id]))
    return history


def counted_usage(window: ContextWindow, tools_tokens: int, reply_tokens: int) -> Usage:
    """The usage of a call whose provider reported none, by the agent's counter: the window's
    tokens plus the tool declarations' in, the reply's out."""
    return Usage(input_tokens=window.total_tokens + tools_tokens, output_tokens=reply_tokens)
