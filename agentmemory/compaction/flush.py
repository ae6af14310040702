"""The memory flush: before turns are folded into a summary, the facts they state are kept.

A summary is short by design, so it loses detail; the facts a user states ("I moved to
Lisbon", "my daughter is allergic to peanuts") must outlive it. Before compaction folds turns
into a summary, the durable facts those turns state are stored in the owner's knowledge
memory (``agentmemory.knowledge.KnowledgeMemory``) with their source message and the date it
was said (design invariant R4). The knowledge rules apply as they do to ``remember()``: an
exact repeat of a live fact adds nothing, a changed "subject: value" fact (or, with an
embedder, a very similar one) supersedes the old one, which stays as history.

When it runs (``AGENTMEMORY["MEMORY_FLUSH"]``):

- ``"auto"`` (default): in conversations whose agent, registered under the conversation's
  agent key, sets ``KNOWLEDGE_MEMORY_ENABLED = True``;
- ``"always"``: in every conversation with an owner;
- ``"off"``: never.

A conversation without an owner has no knowledge memory and is never flushed. The facts go to
the scope the agent's own memory tools use (``agentmemory.knowledge.
knowledge_memory_for``: the owner, the agent's ``KNOWLEDGE_MEMORY_AGENT_KEY`` and
``KNOWLEDGE_MEMORY_NAMESPACE``), so that the agent's ``build_context()``, ``recall`` tool and
recall find them; a conversation of no registered agent uses the owner's default scope.

Who extracts them: the summariser, in the same pass as the summary. ``LLMMemoryCompactor``
makes one structured call that returns both (``summarize_with_facts``, the schema
``agentmemory.llm.facts.SUMMARY_WITH_FACTS``); ``OfflineMemoryCompactor`` applies the rules of
``agentmemory.llm.offline.extract_facts`` and marks its facts as found without a model. A
compactor of your own whose ``summarize`` returns no facts stores none.

How compaction keeps its guarantees (``MemoryFlush``): the facts are checked and embedded
before any lock is taken (``prepare``); they are written in the transaction that stores the
summary: the owner's user row and the scope's write lock first (``lock``), then the
conversation row, then every fact the writes may supersede or evict, in ascending id, and the
writes (``store``; docs/architecture.md, "Lock order"). So they land with the summary or not at all:
of duplicate or concurrent runs only the one that stores the summary stores facts, and a run
that fails stores nothing, so its retry stores each fact once. A fact that cannot be stored
(too long, a bad source) is dropped and logged; an embedder that fails leaves the fact without
a vector (``manage.py rebuild_recall_index`` adds it later); a database error while writing the
facts rolls back their savepoint only: the summary is stored, the failure logged. Messages are
never edited.

A summariser whose structured replies keep failing cannot hold a conversation's summaries
back for ever: after ``DEGRADE_AFTER_FAILURES`` failed runs in a row whose last failure was a
malformed structured reply, the next run writes a plain summary without facts (and logs a
warning naming the messages whose facts were not extracted).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction

from agentmemory import agent_registry
from agentmemory.compaction.prompts import SUMMARY_RULES, render_transcript
from agentmemory.conf import app_settings
from agentmemory.exceptions import StructuredOutputError
from agentmemory.knowledge import (
    InvalidFactError,
    KnowledgeMemory,
    MemoryScopeError,
    PreparedFact,
    knowledge_memory_for,
)
from agentmemory.llm.facts import SUMMARY_WITH_FACTS, FactDraft, read_summary_with_facts, said_at
from agentmemory.llm.offline import extract_facts
from agentmemory.messages import ChatMessage

if TYPE_CHECKING:
    from agentmemory.compaction.summarisers import LLMMemoryCompactor
    from agentmemory.llm.base import ChatResponse
    from agentmemory.models import Conversation, Summary

logger = logging.getLogger("agentmemory.flush")

__all__ = [
    "DEGRADE_AFTER_FAILURES",
    "FACT_INSTRUCTIONS",
    "FLUSH_MODES",
    "FlushResult",
    "MemoryFlush",
    "summarize_with_facts",
]

#: the values of ``AGENTMEMORY["MEMORY_FLUSH"]``
FLUSH_MODES = ("auto", "always", "off")
#: failed runs in a row, the last one a malformed structured reply, after which the next run
#: writes a plain summary without facts
DEGRADE_AFTER_FAILURES = 3
#: ``Fact.metadata["source"]`` of the facts a flush stores
FLUSH_SOURCE = "compaction"

FACT_INSTRUCTIONS = (
    "Also list the durable facts the new messages state: about the user and about the people, "
    "places, pets, work, health, possessions, plans, preferences and events in their lives; what "
    "would still be worth knowing in a conversation weeks later. One fact per item: a short, "
    "self-contained sentence in the third person that names the person it is about (never "
    "'I', 'you', 'he' or 'she'), in the language of the conversation, with the calendar date of "
    "an event (from the date of its message). Write a fact that may change later as "
    "'subject: value' with a stable subject, such as \"Caroline's home city: Lisbon\", so that a "
    "later value replaces it. 'source' is the number (#N) of the message that states the fact. "
    "'persistent' is false for what will soon stop being true (a plan for this week), true "
    "otherwise; 'importance' goes from 0 (trivia) to 1 (health, family, identity). Leave out "
    "small talk, questions, what the assistant offers to do, and facts the previous summary "
    "already holds unless they changed. When the messages state no such fact, the list is "
    "empty. Answer with the JSON object of the schema: the summary and the facts."
)


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What ``MemoryFlush.store()`` did: facts created, repeats of live facts (nothing
    written), live facts updated (made persistent, ...), facts that superseded older ones,
    and facts dropped (could not be prepared or written)."""

    created: int = 0
    repeated: int = 0
    updated: int = 0
    superseded: int = 0
    dropped: int = 0


class MemoryFlush:
    """The facts one compaction run keeps, from the summariser's drafts to stored facts.

    Built by ``for_conversation()`` for each run (``BaseMemoryCompactor.run``); the compactor
    calls ``collect()`` after each summariser call, ``prepare()`` before its transaction,
    and ``lock()`` and ``store()`` inside it (see the module docstring).

    Args:
        memory: the owner's ``KnowledgeMemory`` in the agent's scope.
        conversation: the conversation being compacted.
        extract: whether the summariser extracts facts (``False`` in the degraded run that
            writes a plain summary).

    Attributes:
        memory, extract: the arguments.
        drafts: the facts collected so far, with the messages they cite.
        result: what ``store()`` did (``None`` before).
    """

    def __init__(self, memory: KnowledgeMemory, conversation: Conversation, *, extract: bool = True) -> None:
        self.memory = memory
        self.conversation_id = conversation.pk
        self.conversation_uuid = str(conversation.uuid)
        self.extract = extract
        self.drafts: list[tuple[FactDraft, ChatMessage | None]] = []
        self.prepared: list[PreparedFact] = []
        self.dropped = 0
        self.result: FlushResult | None = None

    def __repr__(self) -> str:
        return f"<MemoryFlush conversation={self.conversation_id} {self.memory!r} extract={self.extract}>"

    # -- deciding ----------------------------------------------------------------------

    @classmethod
    def for_conversation(cls, conversation: Conversation) -> MemoryFlush | None:
        """The flush of a run over ``conversation``, or ``None`` when none runs: the setting
        is "off", the conversation has no owner, or ("auto") its agent does not enable
        knowledge memory. Never raises: a scope that cannot be built is logged and no flush
        runs (the summary is made as without one)."""
        mode = app_settings().MEMORY_FLUSH
        if mode == "off" or conversation.owner_id is None:
            return None
        try:
            agent = agent_registry.find(conversation.agent_key)
            if mode != "always" and not getattr(agent, "KNOWLEDGE_MEMORY_ENABLED", False):
                return None
            memory = knowledge_memory_for(agent, conversation)
        except Exception:
            logger.exception(
                "memory flush of conversation %s: cannot build its knowledge memory; no facts kept",
                conversation.pk,
            )
            return None
        if memory is None:
            return None
        extract = not _degraded(conversation)
        if not extract:
            logger.warning(
                "memory flush of conversation %s: the summariser's structured replies failed %s "
                "runs in a row; this run writes a plain summary without facts",
                conversation.pk,
                conversation.compaction_failures,
            )
        return cls(memory, conversation, extract=extract)

    # -- the compactor's calls ---------------------------------------------------------

    def offline_facts(self, messages: Sequence[ChatMessage]) -> tuple[FactDraft, ...]:
        """The facts the offline rules find in ``messages`` (``extract_facts``); an error in
        the rules is logged and gives none: the summary does not depend on them."""
        try:
            return tuple(extract_facts(messages))
        except Exception:
            logger.exception(
                "memory flush of conversation %s: the offline fact rules failed", self.conversation_id
            )
            return ()

    def collect(self, facts: Sequence[FactDraft], messages: Sequence[ChatMessage]) -> None:
        """Keep ``facts``, found in ``messages`` (one summariser call's span), each with the
        message it cites (by seq; ``None`` when it cites none of them)."""
        by_seq = {m.seq: m for m in messages if m.seq is not None}
        self.drafts.extend(
            (fact, by_seq.get(fact.source_seq) if fact.source_seq is not None else None) for fact in facts
        )

    def prepare(self) -> None:
        """Check and embed the collected facts, before the compactor takes any lock (the
        embedder is a model call). A fact that cannot be stored is dropped and logged; when
        the embedder fails, the fact is kept without a vector."""
        for draft, source in self.drafts:
            options: dict[str, Any] = {
                "importance": draft.importance,
                "source_message": source.id if source is not None else None,
                "metadata": self._metadata(draft, source),
            }
            try:
                # an embedder that fails leaves the fact without a vector (``embed_content``)
                prepared = self.memory.prepare(draft.content, draft.category, draft.persistent, **options)
            except InvalidFactError as exc:
                self.dropped += 1
                logger.info(
                    "memory flush of conversation %s: fact of #%s dropped: %s",
                    self.conversation_id,
                    draft.source_seq,
                    exc,
                )
                continue
            except Exception:
                self.dropped += 1
                logger.exception(
                    "memory flush of conversation %s: fact of #%s dropped",
                    self.conversation_id,
                    draft.source_seq,
                )
                continue
            self.prepared.append(prepared)

    def lock(self) -> None:
        """Take the owner's user row and the scope's write lock at the start of the summary's
        transaction, before the conversation row is locked: a request that stores a fact and
        then appends a message in one transaction takes them in the same order, and so does
        deleting the user (its row, its conversations, its facts), so none of them deadlock.
        An owner deleted meanwhile leaves nothing to store (its conversation is gone too)."""
        if not self.prepared:
            return
        try:
            self.memory.lock_scope()
        except MemoryScopeError:
            logger.info(
                "memory flush of conversation %s: the owner was deleted; no facts kept", self.conversation_id
            )
            self.dropped += len(self.prepared)
            self.prepared = []

    def store(self, summary: Summary) -> FlushResult:
        """Write the prepared facts inside the transaction storing ``summary`` (a savepoint of
        it). A database error rolls back the facts only, is logged, and the summary stays."""
        if not self.extract:
            first = summary.previous.through_seq + 1 if summary.previous is not None else summary.first_seq
            logger.warning(
                "memory flush of conversation %s: the facts of messages #%s to #%s were not extracted "
                "(a plain summary after failed structured replies)",
                self.conversation_id,
                first,
                summary.through_seq,
            )
        counts = {"created": 0, "duplicate": 0, "updated": 0, "superseded": 0}
        try:
            with transaction.atomic(using=self.memory.using):
                # every fact the writes may supersede or evict, in ascending id, before the
                # first write: one at a time they came in the order the model listed them
                self.memory.lock_for_store(self.prepared)
                for prepared in self.prepared:
                    counts[self.memory.store_prepared(prepared).action] += 1
        except (DatabaseError, ValueError) as exc:
            logger.error(
                "memory flush of conversation %s: storing %s facts failed, the summary through #%s "
                "is stored without them: %s",
                self.conversation_id,
                len(self.prepared),
                summary.through_seq,
                exc,
                exc_info=True,
            )
            self.result = FlushResult(dropped=self.dropped + len(self.prepared))
            return self.result
        self.result = FlushResult(
            created=counts["created"],
            repeated=counts["duplicate"],
            updated=counts["updated"],
            superseded=counts["superseded"],
            dropped=self.dropped,
        )
        if self.drafts:
            logger.info(
                "memory flush of conversation %s through #%s: %s facts created, %s superseding, "
                "%s repeats, %s updated, %s dropped",
                self.conversation_id,
                summary.through_seq,
                self.result.created,
                self.result.superseded,
                self.result.repeated,
                self.result.updated,
                self.result.dropped,
                extra={"memory_flush": {"conversation_id": self.conversation_id, **_counts(self.result)}},
            )
        return self.result

    def _metadata(self, draft: FactDraft, source: ChatMessage | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "source": FLUSH_SOURCE,
            "extracted_by": draft.extracted_by,
            "conversation": self.conversation_uuid,
        }
        when = said_at(source) if source is not None else ""
        if when:
            metadata["said_at"] = when
        return metadata


def _counts(result: FlushResult) -> dict[str, int]:
    return {name: getattr(result, name) for name in FlushResult.__slots__}


def _degraded(conversation: Conversation) -> bool:
    return conversation.compaction_failures >= DEGRADE_AFTER_FAILURES and (
        conversation.compaction_error.startswith(StructuredOutputError.__name__)
    )


def summarize_with_facts(
    compactor: LLMMemoryCompactor, previous: str | None, messages: Sequence[ChatMessage]
) -> tuple[str, tuple[FactDraft, ...], list[ChatResponse]]:
    """Fold ``messages`` into ``previous`` and extract their facts in one structured call
    (``SUMMARY_WITH_FACTS``), checked strictly (``read_summary_with_facts``); a malformed
    reply is asked again, up to ``compactor.max_format_attempts`` calls in all.

    The prompt is the summary's (previous summary plus only the new messages, each with its
    number, date and speaker: incremental, design invariant K2) with ``FACT_INSTRUCTIONS``.

    Returns:
        ``(summary text, facts, responses)``: the summary as the model wrote it (the compactor
        validates and condenses it), the facts, and every response (for their usage).

    Raises:
        StructuredOutputError: the last reply still did not match the schema.
        LLMRefusalError, InvalidSummaryError, TransientLLMError, PermanentLLMError: as the
            compactor's other calls.
    """
    transcript = render_transcript(
        messages, token_counter=compactor.token_counter, max_tokens_per_message=compactor.max_input_tokens
    )
    prompt = (
        f"Previous summary:\n{previous or '(none yet)'}\n\n"
        f"New messages:\n{transcript}\n\n"
        "Write the updated summary and list the durable facts of the new messages."
    )
    instructions = SUMMARY_RULES.format(max_tokens=compactor.max_summary_tokens) + " " + FACT_INSTRUCTIONS
    sources = {m.seq for m in messages if m.seq is not None}
    responses: list[ChatResponse] = []
    attempts = max(1, compactor.max_format_attempts)
    for attempt in range(1, attempts + 1):
        _text, response = compactor._call(instructions, prompt, messages, output=SUMMARY_WITH_FACTS)
        responses.append(response)
        try:
            summary, facts = read_summary_with_facts(
                response.parsed,
                sources,
                extracted_by=response.model or getattr(compactor.llm, "model_name", ""),
            )
        except StructuredOutputError as exc:
            if attempt == attempts:
                raise
            logger.warning(
                "compaction of conversation %s: malformed structured reply (%s); asking again",
                compactor.conversation_id,
                exc,
            )
            continue
        return summary, facts, responses
    raise AssertionError("unreachable")  # pragma: no cover
