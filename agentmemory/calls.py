"""Recording model calls (``ModelCall``) and rebuilding the context window a chat call sent.

A chat call is recorded in one row, without copying stored messages: stored messages are
never edited, so the history part of a window is its seq range ``first_seq..last_seq`` read
back in window order (each tool result right after the AI message that called it, in
``tool_calls`` order), less what the row lists as changed. Texts sent that are not stored
messages (the system prompt with the owner's knowledge block, the summary message as sent,
the memory block, the tool declarations) are kept once per conversation in ``PromptText``,
named by their SHA-256 digest; the memory block's digest and tokens are in the row's
``window_changes["memory"]``. ``recorded_window(call)`` (``ModelCall.window()``) returns the messages
exactly as the model received them.

Recording costs one ``INSERT`` per model call, plus one more (``INSERT ... ON CONFLICT DO
NOTHING``) the first time in a turn that a text is sent; it reads nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, router
from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce

from agentmemory.conf import app_settings
from agentmemory.context.builder import memory_message
from agentmemory.context.packing import TRUNCATION_MARKER, _replace, pending_placeholder
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.llm.base import Usage
from agentmemory.messages import ChatMessage, ContentPart, Role
from agentmemory.models import Message, ModelCall, ModelCallKind, PromptText, UsageSource
from agentmemory.store.rows import _chat
from agentmemory.validation import safe_str, storable_text

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentmemory.agents.results import ModelCall as CallAccounting
    from agentmemory.context import ContextWindow
    from agentmemory.tokens import TokenCounter

__all__ = [
    "ChatCallRecorder",
    "UsageScope",
    "WindowUnavailable",
    "record_call",
    "recorded_context_window",
    "recorded_tools",
    "recorded_window",
    "recording_enabled",
    "text_digest",
    "usage_scope",
]

logger = logging.getLogger("agentmemory.calls")

#: what a truncated copy's content ends with, before the figures (``TRUNCATION_MARKER``)
_MARKER_START = TRUNCATION_MARKER.split("{", 1)[0]


class WindowUnavailable(LookupError):
    """The window of a recorded call cannot be rebuilt: not a chat call, its conversation
    was deleted, or a message or text it sent is no longer stored."""


def recording_enabled() -> bool:
    """``AGENTMEMORY['RECORD_MODEL_CALLS']`` (``True`` by default)."""
    return bool(app_settings().RECORD_MODEL_CALLS)


def text_digest(text: str) -> str:
    """SHA-256 of ``text`` (UTF-8), as 64 hex digits: the name of a ``PromptText``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """Tool declarations as the JSON text stored for them (keys in their given order)."""
    return json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- the scope


@dataclass(frozen=True, slots=True)
class UsageScope:
    """Who a model call made deep inside a service is billed to (embedding requests,
    summariser calls): the conversation, its owner and agent key, each optional."""

    conversation_id: int | None = None
    owner_id: int | None = None
    agent_key: str = ""


_scope: ContextVar[UsageScope | None] = ContextVar("agentmemory_usage_scope", default=None)


@contextmanager
def usage_scope(
    *, conversation_id: int | None = None, owner_id: int | None = None, agent_key: str = ""
) -> Iterator[UsageScope]:
    """Bill the model calls recorded inside the block (``record_call`` without a
    conversation or owner of its own) to this conversation, owner and agent key."""
    token = _scope.set(UsageScope(conversation_id, owner_id, agent_key))
    try:
        yield _scope.get()  # type: ignore[misc]  # just set
    finally:
        _scope.reset(token)


def current_scope() -> UsageScope:
    """The innermost ``usage_scope`` (an empty one outside any)."""
    return _scope.get() or UsageScope()


def record_call(
    kind: str,
    *,
    model: str,
    usage: Usage,
    usage_source: str,
    conversation_id: int | None = None,
    owner_id: int | None = None,
    agent_key: str = "",
    latency: float = 0.0,
    finish_reason: str = "",
    first_seq: int | None = None,
    last_seq: int | None = None,
    summary_id: int | None = None,
) -> ModelCall | None:
    """Store one summariser or embedding call (``kind`` a ``ModelCallKind``) in one
    ``INSERT``; a missing conversation, owner or agent key comes from ``usage_scope``.

    With a conversation but no owner or agent key, those are the conversation's, read by
    the ``INSERT`` itself (subqueries, no extra round trip).

    Returns the row, or ``None`` when recording is turned off
    (``AGENTMEMORY['RECORD_MODEL_CALLS'] = False``) or the conversation was deleted
    meanwhile. Never raises for a database refusal of the row: usage records must not
    break the work they describe (logged instead).
    """
    if not recording_enabled():
        return None
    scope = current_scope()
    if conversation_id is None and owner_id is None:
        conversation_id, owner_id = scope.conversation_id, scope.owner_id
    agent_key = agent_key or scope.agent_key
    owner: Any = owner_id
    agent: Any = agent_key
    if conversation_id is not None:
        from agentmemory.models import Conversation

        same = Conversation.objects.filter(pk=conversation_id)
        if owner_id is None:
            owner = Subquery(same.values("owner_id")[:1])
        if not agent_key:
            agent = Coalesce(Subquery(same.values("agent_key")[:1]), Value(""))
    row = ModelCall(
        kind=kind,
        conversation_id=conversation_id,
        owner_id=owner,
        agent_key=agent,
        model=_short(model, 200),
        finish_reason=_short(finish_reason, 50),
        latency=latency,
        first_seq=first_seq,
        last_seq=last_seq,
        summary_id=summary_id,
        usage_source=usage_source,
        **_usage_fields(usage),
    )
    stored = _insert(row)
    if stored is not None:
        # Read back lazily, on first access, what the INSERT computed.
        for name, value in (("owner_id", owner), ("agent_key", agent)):
            if hasattr(value, "resolve_expression"):
                del stored.__dict__[name]
    return stored


def _short(value: Any, limit: int) -> str:
    """A provider's name or reason as storable text of at most ``limit`` characters, whatever
    it sent (an object, a NUL character)."""
    return storable_text(safe_str(value or ""))[:limit]


def _tokens(value: Any) -> int:
    """A token count for a column that holds 0..2**31-1, whatever the provider sent."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return min(max(value, 0), 2**31 - 1)


def _usage_fields(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": _tokens(usage.input_tokens),
        "output_tokens": _tokens(usage.output_tokens),
        "cached_input_tokens": _tokens(usage.cached_input_tokens),
        "cache_creation_input_tokens": _tokens(usage.cache_creation_input_tokens),
    }


def _insert(row: ModelCall, texts: Iterable[PromptText] = ()) -> ModelCall | None:
    alias = router.db_for_write(ModelCall)
    texts = list(texts)
    # No transaction of its own: a text stored without its call is harmless (it goes with
    # its conversation), and a savepoint would cost two statements inside a caller's.
    try:
        if texts:
            PromptText.objects.using(alias).bulk_create(texts, ignore_conflicts=True)
        row.save(using=alias, force_insert=True)
    except IntegrityError:
        # The conversation or its owner was deleted while the model worked (a foreign key
        # refused): nothing to bill it to, and a record never brings a deleted one back.
        logger.info(
            "model call of conversation %s not recorded: the conversation or its owner is gone",
            row.conversation_id,
        )
        return None
    return row


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
    ) -> None:
        self.conversation_id = conversation_id
        self.owner_id = owner_id
        self.agent_key = agent_key
        self.texts: dict[str, str] = {}
        self.system_digest = self._text(system_prompt)
        self.tools_digest = self._text(tools_text(tools)) if tools else ""
        self.tools_tokens = tools_tokens
        self.knowledge_tokens = 0
        suffix = f"\n\n{knowledge_context}"
        if knowledge_context and system_prompt.endswith(suffix):
            whole = counter.count_message(ChatMessage.system(system_prompt))
            bare = counter.count_message(ChatMessage.system(system_prompt[: -len(suffix)]))
            self.knowledge_tokens = max(whole - bare, 0)
        self.written: set[str] = set()

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
            }
        changes.update(window_changes(window, stubbed=call.stubbed, omitted=call.omitted))
        new = [
            d
            for d in dict.fromkeys((self.system_digest, summary_digest, memory_digest, self.tools_digest))
            if d and d not in self.written
        ]
        texts = [
            PromptText(conversation_id=self.conversation_id, digest=d, text=storable_text(self.texts[d]))
            for d in new
        ]
        system_tokens = max(window.system_tokens - self.knowledge_tokens, 0)
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
            knowledge_tokens=self.knowledge_tokens if window.system_tokens else 0,
            summary_tokens=window.summary_tokens,
            history_tokens=window.history_tokens,
            tools_tokens=self.tools_tokens if self.tools_digest else 0,
            usage_source=call.usage_source,
            **_usage_fields(call.usage),
        )
        stored = _insert(row, texts)
        if stored is not None:
            self.written.update(new)
        return stored


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


# --------------------------------------------------------------------------- rebuilding


def _texts(call: ModelCall, digests: Sequence[str]) -> dict[str, str]:
    wanted = [d for d in digests if d]
    if not wanted or call.conversation_id is None:
        return {}
    found = dict(
        PromptText.objects.using(router.db_for_read(PromptText))
        .filter(conversation_id=call.conversation_id, digest__in=wanted)
        .values_list("digest", "text")
    )
    missing = [d for d in wanted if d not in found]
    if missing:
        raise WindowUnavailable(f"model call {call.pk}: the texts {missing} it sent are no longer stored")
    return found


def recorded_tools(call: ModelCall) -> list[dict[str, Any]]:
    """The tool declarations ``call`` sent, ``[]`` when it sent none.

    Raises:
        WindowUnavailable: its conversation or the stored declarations are gone.
    """
    if not call.tools_digest:
        return []
    if call.conversation_id is None:
        raise WindowUnavailable(f"model call {call.pk}: its conversation was deleted")
    return list(json.loads(_texts(call, [call.tools_digest])[call.tools_digest]))


def recorded_window(call: ModelCall) -> list[ChatMessage]:
    """The messages chat call ``call`` sent, rebuilt from storage, equal to the
    ``ChatMessage``s the model received (``ContextWindow.messages`` after the tools' memory
    policy): system prompt, summary message, memory block, then the history in window order
    with the recorded changes applied. Three queries: the texts, the messages of the seq range, and
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
    return messages


def recorded_context_window(call: ModelCall) -> ContextWindow:
    """``recorded_window(call)`` as a ``ContextWindow`` with the call's accounting (tokens):
    the system part counts the knowledge block too; ``placeholders`` and ``truncated`` say
    which results were sent as placeholders and which messages as shortened copies.

    Raises:
        WindowUnavailable: as ``recorded_window``.
    """
    from agentmemory.context import ContextWindow
    from agentmemory.context.window import SUMMARY_CUT

    messages = recorded_window(call)
    changes = call.window_changes or {}
    return ContextWindow(
        messages=messages,
        max_tokens=call.max_tokens or 0,
        system_tokens=call.system_tokens + call.knowledge_tokens,
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
            *sorted(int(seq) for seq in (changes.get("truncated") or {})),
        ),
    )


def recorded_memory_tokens(call: ModelCall) -> int:
    """Tokens of the memory block ``call`` sent (0 when it sent none)."""
    memory = (call.window_changes or {}).get("memory")
    return int(memory.get("tokens") or 0) if isinstance(memory, Mapping) else 0


def _history(call: ModelCall, changes: Mapping[str, Any]) -> list[ChatMessage]:
    assert call.conversation_id is not None  # checked by the caller
    rows = (
        Message.objects.using(router.db_for_read(Message))
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
        )
    )
    left_out = set(changes.get("left_out") or ())
    truncated = {int(k): v for k, v in (changes.get("truncated") or {}).items()}
    stubbed = {int(k): v for k, v in (changes.get("stubbed") or {}).items()}
    placeholders: Mapping[str, int] = changes.get("placeholders") or {}
    ordered: list[ChatMessage] = []
    results: dict[tuple[int, str], ChatMessage] = {}
    seen: set[int] = set()
    for pk, seq, role, content, tool_calls, call_id, name, tokens, parts, exchange_seq in rows:
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


USAGE_PROVIDER = UsageSource.PROVIDER.value
USAGE_COUNTED = UsageSource.COUNTED.value
