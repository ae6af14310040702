"""MEMORY.md transfer: a scope's persistent facts as the seed design's ``MEMORY.md`` file,
and such a file read back into a scope (``manage.py memory_md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import transaction

from agentmemory.knowledge.context import indented
from agentmemory.knowledge.storage import InvalidFactError, PreparedFact
from agentmemory.recall.text import LINE_END

if TYPE_CHECKING:
    from agentmemory.knowledge.memory import KnowledgeMemory

MEMORY_MD_TITLE = "# Agent Memory"


@dataclass(frozen=True)
class ImportReport:
    """What ``import_memory_md`` did: facts created, already present (duplicates), updated
    or superseding an older fact, and lines that were not facts (skipped)."""

    created: int = 0
    duplicate: int = 0
    updated: int = 0
    superseded: int = 0
    skipped: int = 0


def export_memory_md(memory: KnowledgeMemory) -> str:
    """The scope's live persistent facts in the seed's ``MEMORY.md`` layout::

        # Agent Memory

        ## preferences
        - Preferred language: Python

    Categories and facts in the order stored; a fact spanning lines keeps its later lines
    indented under its bullet."""
    parts = [MEMORY_MD_TITLE]
    for category, facts in memory.get_persistent_facts().items():
        lines = "\n".join("- " + indented(fact) for fact in facts)
        parts.append(f"## {category}\n{lines}")
    return "\n\n".join(parts) + "\n"


def import_memory_md(memory: KnowledgeMemory, text: str) -> ImportReport:
    """Store the facts of a ``MEMORY.md`` text as persistent facts of ``memory``'s scope:
    each ``- fact`` bullet under a ``## category`` heading (bullets before any heading go to
    "general"; indented lines continue the bullet above). Facts already stored, in force or
    as history (a fact since replaced), are repeats and add nothing, so importing twice
    changes nothing the second time, also for a file that lists a "key: value" fact and, below
    it, its new value.

    Raises:
        InvalidFactError: a fact that cannot be stored, its message starting with the line
            of the file its bullet begins on ("line 12: ..."); nothing of the file is stored
            then.
    """
    counts = {"created": 0, "duplicate": 0, "updated": 0, "superseded": 0, "skipped": 0}
    facts: list[tuple[str, str, int]] = []
    category = "general"
    # a byte order mark is not text of the first line (it hid a "## category" heading there);
    # lines end at \n, \r\n or \r only: str.splitlines also breaks at U+2028, U+0085, \x0b,
    # \x1c-\x1e, which a fact may hold and the export writes as they are, so a fact holding
    # "\u2028## secrets\u2028- ..." came back as a heading and a fact of its own
    for number, raw in enumerate(LINE_END.split(text.removeprefix("\ufeff")), start=1):
        line = raw.rstrip()
        if line.startswith("## "):
            category = line[3:].strip() or "general"
        elif line.startswith(("- ", "* ")):
            facts.append((category, line[2:].strip(), number))
        elif line.startswith("  ") and line.strip() and facts:
            cat, content, first = facts[-1]
            facts[-1] = (cat, f"{content}\n{line.strip()}", first)
        elif line.strip() and not line.startswith("# "):
            counts["skipped"] += 1
    # checked and embedded before the transaction (the embedder is a model call); then every
    # fact the bullets may supersede is locked in ascending id before the first is written:
    # one at a time, in the file's order, a newer fact was held while an older one was
    # waited for (docs/architecture.md, "Lock order")
    prepared: list[PreparedFact] = []
    for cat, content, number in facts:
        if not content:
            counts["skipped"] += 1
            continue
        try:
            prepared.append(memory.prepare(content, cat, persistent=True))
        except InvalidFactError as exc:
            raise InvalidFactError(f"line {number}: {exc}") from exc
    with transaction.atomic(using=memory.using):
        memory.lock_for_store(prepared)
        for fact in prepared:
            _import_fact(memory, fact, counts)
    return ImportReport(**counts)


def _import_fact(memory: KnowledgeMemory, fact: PreparedFact, counts: dict[str, int]) -> None:
    """One bullet of ``import_memory_md``, its outcome added to ``counts``."""
    history = memory.all_facts().filter(superseded_by__isnull=False)
    if history.filter(content_hash=fact.digest).exists():
        # Already stored and since replaced: the seed's MEMORY.md appends a changed
        # "key: value" line below the old one, and storing the old line again made
        # it supersede the newer fact, which the next line then superseded back, two
        # new rows on every import of the same file.
        counts["duplicate"] += 1
        return
    counts[memory.store_prepared(fact).action] += 1
