"""What a summariser keeps besides the summary: facts with their source, and who said what when.

Before turns are folded into a summary, the durable facts they state are kept as facts of the
owner's knowledge memory (the memory flush, ``agentmemory.flush``). This module holds the
parts a summariser needs for it, free of the database:

- ``FactDraft``: one fact as a summariser extracted it, with the seq of the message stating it;
- ``SUMMARY_WITH_FACTS``: the ``OutputSchema`` of the one structured call that returns the
  updated summary and the facts, and ``read_summary_with_facts``, which checks a reply strictly;
- ``said_at`` and ``speaker``: the date and the name each message is given to the summariser
  with. A date a transcript gave (the session date of a replayed LoCoMo turn, in the message's
  metadata) wins over the time the message was stored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agentmemory.exceptions import StructuredOutputError
from agentmemory.llm.base import OutputSchema
from agentmemory.llm.structured import schema_problems
from agentmemory.messages import ChatMessage, Role
from agentmemory.validation import text_problem

__all__ = [
    "FACT_CATEGORIES",
    "MAX_FACTS_PER_CALL",
    "STORED_AT_KEY",
    "SUMMARY_WITH_FACTS",
    "TRANSCRIPT_DATE_KEYS",
    "FactDraft",
    "read_summary_with_facts",
    "said_at",
    "speaker",
    "with_stored_time",
]

#: the categories a summariser files facts under (a fact supersedes only facts of its category)
FACT_CATEGORIES = ("personal", "preferences", "relationships", "work", "health", "plans", "events", "other")
#: the most facts one summariser call may return; a longer list is a malformed reply
MAX_FACTS_PER_CALL = 40
#: message metadata keys that hold the date a transcript gave a message, first found wins:
#: ``session_date_time`` (the LoCoMo importer, ``agentmemory.formats.transcripts``) and
#: ``session_date`` (``bench/recall.py``)
TRANSCRIPT_DATE_KEYS = ("session_date_time", "session_date")
#: the metadata key of the copy of a message handed to a summariser that holds the time the
#: message was stored ("2026-03-13 10:16", in the project's time zone); never stored
STORED_AT_KEY = "agentmemory:stored_at"


@dataclass(frozen=True, slots=True)
class FactDraft:
    """One durable fact a summariser found in the messages it folded.

    Attributes:
        content: the fact, one self-contained sentence (or "subject: value").
        category: one of ``FACT_CATEGORIES`` (offline rules use "personal", "preferences"
            and "events").
        source_seq: the seq of the message that states it.
        persistent: kept until forgotten (True) or a recent entry that ages out (False).
        importance: 0.0-1.0; ranks recall and decides eviction.
        extracted_by: the model that extracted it, or ``agentmemory.llm.offline.OFFLINE_FACTS``
            for the rules used without a model.
    """

    content: str
    category: str = "personal"
    source_seq: int | None = None
    persistent: bool = True
    importance: float = 0.5
    extracted_by: str = ""


# Only the keywords every strict mode accepts: OpenAI's Structured Outputs took no numeric or
# length bounds at first, and OpenAI-compatible servers still differ there; the importance's
# range and the number of facts are checked by ``read_summary_with_facts`` instead.
_FACT_ITEM = {
    "type": "object",
    "properties": {
        "content": {
            "type": "string",
            "description": "the fact: one short self-contained sentence in the third person that "
            "names the person, with calendar dates for events",
        },
        "category": {"type": "string", "enum": list(FACT_CATEGORIES)},
        "source": {"type": "integer", "description": "the number (#N) of the message that states the fact"},
        "persistent": {
            "type": "boolean",
            "description": "false for what will soon stop being true (a plan for this week), true otherwise",
        },
        "importance": {"type": "number", "description": "from 0 (trivia) to 1 (health, family, identity)"},
    },
    "required": ["content", "category", "source", "persistent", "importance"],
    "additionalProperties": False,
}

SUMMARY_WITH_FACTS = OutputSchema(
    name="conversation_memory",
    description="the updated summary of the conversation and the durable facts its new messages state",
    schema={
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "the updated running summary"},
            "facts": {
                "type": "array",
                "description": "durable facts the new messages state; empty when there are none",
                "items": _FACT_ITEM,
            },
        },
        "required": ["summary", "facts"],
        "additionalProperties": False,
    },
)


def read_summary_with_facts(
    parsed: Any, sources: Collection[int], *, extracted_by: str = "", max_fact_chars: int | None = None
) -> tuple[str, tuple[FactDraft, ...]]:
    """The summary text and the facts of a structured reply, checked strictly.

    Args:
        parsed: ``ChatResponse.parsed`` of a ``SUMMARY_WITH_FACTS`` call.
        sources: the seqs a fact may cite (the messages of the span that was sent).
        extracted_by: recorded on each ``FactDraft`` (the model's name).
        max_fact_chars: the longest fact (characters); default ``AGENTMEMORY["MAX_FACT_CHARS"]``.

    Returns:
        ``(summary, facts)``: the summary as sent (the compactor validates and condenses
        it) and the facts, content stripped, in the order sent.

    Raises:
        StructuredOutputError: ``parsed`` is not such an object (no JSON value, a missing or
            extra key, a wrong type, a category outside ``FACT_CATEGORIES``, an importance
            outside 0-1, more than ``MAX_FACTS_PER_CALL`` facts), or a fact is empty, too
            long, holds text no database can store, or cites a message outside ``sources``.
            Nothing of the reply is used then.
    """
    if parsed is None:
        raise StructuredOutputError("the summariser's reply held no JSON object")
    problems = schema_problems(parsed, SUMMARY_WITH_FACTS.schema)
    if not problems:
        problems = _fact_problems(parsed["facts"], sources, max_fact_chars)
    if problems:
        raise StructuredOutputError(
            "the summariser's reply does not match the summary-with-facts schema: " + "; ".join(problems),
            problems=tuple(problems),
        )
    facts = tuple(
        FactDraft(
            content=item["content"].strip(),
            category=item["category"],
            source_seq=item["source"],
            persistent=item["persistent"],
            importance=float(item["importance"]),
            extracted_by=extracted_by,
        )
        for item in parsed["facts"]
    )
    return parsed["summary"], facts


def _fact_problems(items: list[Mapping[str, Any]], sources: Collection[int], limit: int | None) -> list[str]:
    if limit is None:
        from agentmemory.conf import app_settings

        limit = app_settings().MAX_FACT_CHARS
    problems = []
    if len(items) > MAX_FACTS_PER_CALL:
        problems.append(f"$.facts: more than {MAX_FACTS_PER_CALL} items")
    for index, item in enumerate(items):
        where = f"$.facts[{index}]"
        content = item["content"]
        if not content.strip():
            problems.append(f"{where}.content: empty")
        elif len(content.strip()) > limit:
            problems.append(f"{where}.content: longer than {limit} characters")
        elif problem := text_problem(content):
            problems.append(f"{where}.content: {problem}")
        if not 0 <= item["importance"] <= 1:
            problems.append(f"{where}.importance: {item['importance']} is not from 0 to 1")
        if item["source"] not in sources:
            problems.append(f"{where}.source: #{item['source']} is not one of the messages sent")
    return problems[:5]


# -- who said what, when ---------------------------------------------------------------------


def said_at(message: ChatMessage) -> str:
    """When ``message`` was said, as text for a summariser or a fact's metadata: the date a
    transcript gave it (``TRANSCRIPT_DATE_KEYS``, as written there: "1:56 pm on 8 May,
    2023"), else the stored time compaction put on the copy (``STORED_AT_KEY``), else ""."""
    metadata = message.metadata or {}
    for key in (*TRANSCRIPT_DATE_KEYS, STORED_AT_KEY):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return ""


def speaker(message: ChatMessage) -> str:
    """Who wrote ``message`` by name, or "": the ``speaker`` a transcript gave in the
    metadata, else the participant ``name`` of a human or AI message (OpenAI's ``name``).
    A tool message's ``name`` is its tool's, not a speaker's."""
    value = (message.metadata or {}).get("speaker")
    if isinstance(value, str) and value.strip():
        return " ".join(value.split())
    if message.role in (Role.HUMAN, Role.AI) and message.name.strip():
        return message.name.strip()
    return ""


def with_stored_time(message: ChatMessage, created_at: datetime | None) -> ChatMessage:
    """The copy of a stored message handed to a summariser: its metadata also holds the time
    it was stored (``STORED_AT_KEY``, "YYYY-MM-DD HH:MM" in the current time zone: the
    project's ``TIME_ZONE`` unless the caller activated another), so
    that a message without a transcript date still reaches the summariser with a date."""
    if created_at is None:
        return message
    from django.utils import timezone

    local = timezone.localtime(created_at) if timezone.is_aware(created_at) else created_at
    return replace(message, metadata={**(message.metadata or {}), STORED_AT_KEY: f"{local:%Y-%m-%d %H:%M}"})
