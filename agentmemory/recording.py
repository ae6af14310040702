"""Model-call records and usage accounting: one ``ModelCall`` row per model call, who it
is billed to (``usage_scope``), the texts a chat call sent (``PromptText``, named by their
SHA-256 digest) and their read-back.

This module sits just above the models: knowledge, recall and compaction record their
embedding and summariser calls here. Rebuilding a chat call's window as sent, and recording
a chat call from its ``ContextWindow``, need the window code and live in
``agentmemory.calls``, which re-exports every name of this module.

Recording costs one ``INSERT`` per model call, plus one more (``INSERT ... ON CONFLICT DO
NOTHING``) the first time in a turn that a text is sent; it reads nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, router, transaction
from django.db.models import Q, Subquery, Value
from django.db.models.functions import Coalesce

from agentmemory.conf import app_settings
from agentmemory.exceptions import WindowUnavailable
from agentmemory.llm.base import Usage
from agentmemory.models import Conversation, Fact, ModelCall, PromptText, UsageSource
from agentmemory.validation import safe_str, storable_text

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "USAGE_COUNTED",
    "USAGE_PROVIDER",
    "UsageScope",
    "WindowUnavailable",
    "current_scope",
    "record_call",
    "recorded_memory_tokens",
    "recorded_tools",
    "recording_enabled",
    "redact_if_quoted_gone",
    "redact_recorded_copies",
    "text_digest",
    "tools_text",
    "usage_scope",
]

logger = logging.getLogger("agentmemory.calls")


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


# --------------------------------------------------------------------------- reading back


def _texts(call: ModelCall, digests: Sequence[str]) -> dict[str, str]:
    return call.sent_texts(digests)


def recorded_tools(call: ModelCall) -> list[dict[str, Any]]:
    """The tool declarations ``call`` sent, ``[]`` when it sent none (``ModelCall.tools()``).

    Raises:
        WindowUnavailable: its conversation or the stored declarations are gone.
    """
    return call.tools()


def recorded_memory_tokens(call: ModelCall) -> int:
    """Tokens of the memory block ``call`` sent (0 when it sent none)."""
    memory = (call.window_changes or {}).get("memory")
    return int(memory.get("tokens") or 0) if isinstance(memory, Mapping) else 0


# --------------------------------------------------------------------------- deleted memory

#: what a recorded memory block reads once something it quoted was deleted
MEMORY_BLOCK_REMOVED = "[memory block removed: a conversation, message or fact it quoted was deleted]"
#: what replaces a recorded knowledge block once a fact it showed was deleted
KNOWLEDGE_BLOCK_REMOVED = "[knowledge block removed: a fact it showed was deleted]"
#: model calls read per round trip while looking for copies
REDACT_BATCH = 2000
#: rows renamed per ``UPDATE`` statement
UPDATE_BATCH = 500


def redact_recorded_copies(
    sender: Any = None,
    *,
    using: str,
    owner_ids: Sequence[int],
    conversation_ids: Sequence[int] = (),
    messages: Sequence[tuple[int, int]] = (),
    fact_ids: Sequence[int] = (),
    **kwargs: Any,
) -> int:
    """Remove the text of deleted memory from what recorded model calls keep.

    A chat call's record keeps, beside references to its own conversation's messages, copies
    of text from elsewhere: the memory block (messages of the owner's other conversations and
    facts, ``window_changes["memory"]["sources"]``) and the knowledge block at the end of the
    system prompt (facts, ``window_changes["knowledge"]``). When a conversation, a message or
    a fact is deleted (the ``memory_deleted`` signal, sent in the deleting transaction), every
    such copy in the calls of ``owner_ids`` that quoted it is replaced: a memory block by
    ``MEMORY_BLOCK_REMOVED``, the knowledge block by ``KNOWLEDGE_BLOCK_REMOVED`` (the system
    prompt before it is kept), and the text's name changes from the SHA-256 of the deleted words
    to a random one. Token counts stay what was sent. Deleting must mean the words
    are gone wherever the app shows them (the admin's "Window sent", ``/model-calls/{id}/window/``),
    as ``purge_conversations --blank-content`` does for a conversation's own texts.

    Args:
        using: the database alias of the delete.
        owner_ids: owners of what was deleted (user ids).
        conversation_ids: conversations deleted, or emptied by ``clear()``.
        messages: (conversation id, seq) of single messages deleted.
        fact_ids: facts deleted (history included).

    Returns:
        The number of recorded texts changed. Reads the calls of ``owner_ids`` that sent a
        memory or knowledge block and whose conversation is still stored, ``REDACT_BATCH``
        per round trip.
    """
    conversations = {int(pk) for pk in conversation_ids}
    pairs = {(int(c), int(s)) for c, s in messages}
    facts = {int(pk) for pk in fact_ids}
    if not owner_ids or not (conversations or pairs or facts):
        return 0
    memory_texts: set[tuple[int, str]] = set()
    knowledge_texts: dict[tuple[int, str], int] = {}
    #: the calls naming each memory block text, found by the one scan (a second look-up per
    #: text read every call of its conversation again: quadratic in a conversation's calls)
    naming: dict[tuple[int, str], list[int]] = {}
    calls = (
        ModelCall.objects.using(using)
        .filter(owner_id__in=list(owner_ids))
        # A call whose conversation is gone (``ModelCall.conversation`` is SET_NULL) keeps no
        # text: its ``PromptText`` rows went with the conversation.
        .filter(conversation_id__isnull=False)
        .filter(Q(window_changes__has_key="memory") | Q(window_changes__has_key="knowledge"))
        .values_list("pk", "conversation_id", "system_prompt_digest", "window_changes")
    )
    if connections[using].vendor == "postgresql":
        # only the calls that quoted something deleted come back (``jsonb`` containment on
        # the server); elsewhere every call of the owners that sent a block is read
        wanted = Q()
        for conversation in sorted(conversations | {c for c, _s in pairs}):
            wanted |= Q(window_changes__memory__sources__conversations__contains=[conversation])
        for fact in sorted(facts):
            wanted |= Q(window_changes__memory__sources__facts__contains=[fact])
            wanted |= Q(window_changes__knowledge__facts__contains=[fact])
        calls = calls.filter(wanted)
    for pk, conversation_id, system_digest, changes in calls.iterator(chunk_size=REDACT_BATCH):
        changes = changes if isinstance(changes, dict) else {}
        memory = changes.get("memory")
        memory = memory if isinstance(memory, dict) else {}
        if isinstance(memory.get("digest"), str):
            naming.setdefault((conversation_id, memory["digest"]), []).append(pk)
        sources = memory.get("sources")
        if isinstance(sources, dict) and memory.get("digest"):
            quoted = sources.get("messages") or []
            if any(
                pair[0] in conversations or (pair[0], pair[1]) in pairs for pair in quoted
            ) or facts.intersection(sources.get("facts") or ()):
                memory_texts.add((conversation_id, memory["digest"]))
        knowledge = changes.get("knowledge")
        if isinstance(knowledge, dict) and system_digest and facts.intersection(knowledge.get("facts") or ()):
            knowledge_texts[(conversation_id, system_digest)] = int(knowledge.get("chars") or 0)
    changed = 0
    texts = PromptText.objects.using(using)
    calls_of = ModelCall.objects.using(using)
    # A replaced text gets a random name: the SHA-256 of the deleted words would let anyone
    # confirm a guess of them.
    fresh_names = {key: secrets.token_hex(32) for key in memory_texts}
    keys = sorted(memory_texts)
    for start in range(0, len(keys), REDACT_BATCH):
        chunk = keys[start : start + REDACT_BATCH]
        rows = [
            row
            for row in texts.filter(
                conversation_id__in={c for c, _d in chunk}, digest__in={d for _c, d in chunk}
            ).only("pk", "conversation_id", "digest")
            if (row.conversation_id, row.digest) in fresh_names
        ]
        for row in rows:
            row.text, row.digest = MEMORY_BLOCK_REMOVED, fresh_names[(row.conversation_id, row.digest)]
        texts.bulk_update(rows, ["text", "digest"], batch_size=UPDATE_BATCH)
        changed += len(rows)
    pks = [pk for key in keys for pk in naming.get(key, [])]
    for start in range(0, len(pks), REDACT_BATCH):
        renamed = []
        batch = calls_of.filter(pk__in=pks[start : start + REDACT_BATCH])
        for call in batch.only("pk", "conversation_id", "window_changes"):
            memory = call.window_changes.get("memory")
            name = (call.conversation_id, memory.get("digest")) if isinstance(memory, dict) else None
            if name in fresh_names:
                memory["digest"] = fresh_names[name]  # type: ignore[index]
                memory.pop("sources", None)  # type: ignore[union-attr]  # nothing it quoted is shown
                renamed.append(call)
        calls_of.bulk_update(renamed, ["window_changes"], batch_size=UPDATE_BATCH)
    for (conversation_id, digest), chars in sorted(knowledge_texts.items()):
        found = texts.filter(conversation_id=conversation_id, digest=digest).first()
        if found is None:
            continue
        row = found
        if chars <= 0 or len(row.text) < chars or row.text.endswith(KNOWLEDGE_BLOCK_REMOVED):
            continue
        row.text = f"{row.text[:-chars]}\n\n{KNOWLEDGE_BLOCK_REMOVED}"
        row.digest = secrets.token_hex(32)
        row.save(using=using, update_fields=["text", "digest"])
        calls_of.filter(conversation_id=conversation_id, system_prompt_digest=digest).update(
            system_prompt_digest=row.digest
        )
        changed += 1
    return changed


def redact_if_quoted_gone(call: ModelCall, *, using: str | None = None) -> int:
    """After ``call`` was recorded: if a conversation or fact its memory block or knowledge
    block quoted was deleted while the model worked (the delete's own pass ran before this
    row existed), remove the copies as the delete would have (``redact_recorded_copies``).

    Locks the quoted rows (``FOR NO KEY UPDATE`` on PostgreSQL, which waits for a delete in
    progress to commit or roll back; SQLite runs one writer at a time), so a delete either
    sees this row or is seen by it. Conversations are locked before facts (the order of the
    memory flush and of a conversation's delete, which clears ``source_message`` on the facts
    quoting it), each table in ascending primary key (docs/architecture.md, "Lock order"):
    facts first deadlocked with such a delete, and in their default, newest-first order two
    turns recording at once deadlocked with each other and with the recall counters' update.
    Returns the number of texts changed; costs nothing for a call that sent neither block,
    two statements otherwise."""

    def part(value: Any, key: str) -> dict[str, Any]:
        found = value.get(key) if isinstance(value, dict) else None
        return found if isinstance(found, dict) else {}

    memory, knowledge = part(call.window_changes, "memory"), part(call.window_changes, "knowledge")
    sources = part(memory, "sources")
    conversations = {int(pk) for pk in sources.get("conversations") or ()}
    facts = {int(pk) for pk in [*(sources.get("facts") or ()), *(knowledge.get("facts") or ())]}
    if call.owner_id is None or not (conversations or facts):
        return 0
    alias = using or router.db_for_write(ModelCall)
    no_key = connections[alias].features.has_select_for_no_key_update
    with transaction.atomic(using=alias):
        found_conversations = set(
            Conversation.objects.using(alias)
            .select_for_update(no_key=no_key)
            .filter(pk__in=sorted(conversations))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        found_facts = set(
            Fact.objects.using(alias)
            .select_for_update(no_key=no_key)
            .filter(pk__in=sorted(facts))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    gone_conversations, gone_facts = conversations - found_conversations, facts - found_facts
    if not (gone_conversations or gone_facts):
        return 0
    return redact_recorded_copies(
        using=alias,
        owner_ids=[call.owner_id],
        conversation_ids=sorted(gone_conversations),
        fact_ids=sorted(gone_facts),
    )


USAGE_PROVIDER = UsageSource.PROVIDER.value
USAGE_COUNTED = UsageSource.COUNTED.value
