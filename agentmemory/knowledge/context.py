"""What a knowledge memory shows: the context block, the persistent facts, the daily log.

``render_context`` writes the block an agent puts into its system prompt (the seed design's
[Long-term Memory] and [Recent Memory] sections, within a token bound); ``recent_entries``
is the seed's daily log. Reading never changes a fact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from agentmemory.conf import get_token_counter
from agentmemory.knowledge.storage import days_before
from agentmemory.models import Fact
from agentmemory.recall.said import shown_time
from agentmemory.recall.text import LINE_END
from agentmemory.validation import MAX_ID

if TYPE_CHECKING:
    from agentmemory.knowledge.memory import KnowledgeMemory


def persistent_facts(memory: KnowledgeMemory) -> dict[str, list[str]]:
    """Live persistent facts by category (categories and facts in the order stored)."""
    out: dict[str, list[str]] = {}
    for category, content in (
        memory.live_facts()
        .filter(persistent=True)
        .order_by("created_at", "pk")
        .values_list("category", "content")
    ):
        out.setdefault(category, []).append(content)
    return out


def recent_entries(memory: KnowledgeMemory, days: int = 7, limit: int = 50) -> list[dict[str, Any]]:
    """The daily log: live entries of the last ``days`` days, persistent and transient,
    newest first, at most ``limit``: dicts with ``id``, ``timestamp`` (ISO 8601, UTC,
    "Z"), ``category``, ``content``, ``persistent``, ``importance`` and ``expires_at``
    (ISO 8601 or None).

    The knowledge seed writes every entry to its daily log, a persistent one as well as
    MEMORY.md, so a persistent fact stored in the last ``days`` days is listed here too
    (``persistent`` True); ``build_context()`` names it once, under [Long-term Memory].
    A fact replaced since (a changed "key: value" fact) is not listed."""
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError(f"days must be a non-negative integer, not {days!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    now = timezone.now()
    rows = (
        memory.live_facts(now)
        .filter(in_daily_log=True, created_at__gte=days_before(now, days))
        # a limit past the table's end means all of it; the database's LIMIT is a 64-bit
        # integer (SQLite answered a larger one with "datatype mismatch")
        .order_by("-created_at", "-pk")[: min(limit, MAX_ID)]
    )
    return [_entry(f) for f in rows]


def render_context(memory: KnowledgeMemory) -> tuple[str, tuple[int, ...]]:
    """``KnowledgeMemory.build_context_with_ids()``: the block put into the system prompt
    and the ids of the facts it shows (the rules are written there)."""
    counter = get_token_counter()
    budget = memory.max_context_tokens
    now = timezone.now()
    live = memory.live_facts(now)
    persistent = list(
        live.filter(persistent=True)
        .order_by("-importance", "-created_at", "-pk")
        .values_list("pk", "category", "content", "created_at")[: memory.max_context_entries * 4]
    )
    kept: list[tuple[int, str, str, datetime]] = []
    used = counter.count_text("[Long-term Memory]\n")
    for row in persistent:
        cost = counter.count_text(f"## {row[1]}\n- {indented(row[2])}\n")
        if used + cost > budget:
            # one fact too long for what is left must not keep out the smaller ones after it
            continue
        kept.append(row)
        used += cost
    sections: list[str] = []
    if kept:
        kept.sort(key=lambda r: (r[3], r[0]))
        groups: dict[str, list[str]] = {}
        for _pk, category, content, _created in kept:
            groups.setdefault(category, []).append(content)
        body = "\n\n".join(
            f"## {category}\n" + "\n".join(f"- {indented(c)}" for c in items)
            for category, items in groups.items()
        )
        sections.append(f"[Long-term Memory]\n{body}")
    recent_rows = list(
        live.filter(persistent=False)
        .order_by("-created_at", "-pk")
        .values_list("category", "content", "created_at", "pk")[: memory.max_context_entries]
    )
    lines: list[str] = []
    used += counter.count_text("[Recent Memory]\n")
    shown = [row[0] for row in kept]
    for category, content, created, pk in recent_rows:
        # the project's time zone, as the memory block dates what it shows: a UTC time
        # unmarked read as local put an entry of the morning in Tokyo on the day before
        line = f"- [{shown_time(created):%Y-%m-%d %H:%M}] ({category}) {indented(content)}"
        cost = counter.count_text(line + "\n")
        if used + cost > budget:
            continue
        lines.append(line)
        shown.append(pk)
        used += cost
    if lines:
        sections.append("[Recent Memory]\n" + "\n".join(reversed(lines)))
    return "\n\n".join(sections), tuple(shown)


def indented(content: str) -> str:
    """A fact's later lines indented under its bullet: unindented, a line of a fact could
    read as a heading or a bullet of its own ("## instructions", "- ...") in the context.
    A line ends at ``\\n``, ``\\r\\n`` or ``\\r``, as ``import_memory_md`` reads them."""
    if "\r" not in content:
        return content.replace("\n", "\n  ")
    return LINE_END.sub(lambda end: end.group() + "  ", content)


def _entry(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.pk,
        "timestamp": _iso(fact.created_at),
        "category": fact.category,
        "content": fact.content,
        "persistent": fact.persistent,
        "importance": fact.importance,
        "expires_at": _iso(fact.expires_at) if fact.expires_at else None,
    }


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
