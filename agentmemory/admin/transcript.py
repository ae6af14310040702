"""The transcript on a conversation's admin page: one page of messages read by seq range.

A page is the messages with ``(page - 1) * size < seq <= page * size``: a range read on the
unique ``(conversation, seq)`` index, so a page costs the same two queries (its messages, and
the summaries that end on it) at 10 or at 100,000 messages. Tool calls link to their results
and results back to their calls by anchors; a result stored on another page is reached through
``result_url`` (one lookup when followed, none while the page is drawn).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote as urlquote

from django.db import router
from django.db.models.functions import Length, Substr
from django.urls import reverse

from agentmemory.admin.utils import short_datetime
from agentmemory.messages import pending_calls
from agentmemory.models import Conversation, Message, Summary

#: messages per transcript page
PAGE_SIZE = 50
#: a system prompt longer than this (characters) is shown folded, its first line visible
FOLD_SYSTEM_CHARS = 300
#: a tool result longer than this (characters, as shown) is shown folded
FOLD_TOOL_CHARS = 1_200
#: a message of more lines than this is shown folded
FOLD_LINES = 30
#: any other message longer than this (characters) is shown folded
FOLD_CHARS = 3_000
#: characters of a folded message shown in its summary line
PREVIEW_CHARS = 160
#: characters of one message's text, tool call's arguments or summary shown on a transcript
#: page; the rest is on the message's or summary's own page (a page of 50 messages of 2 MB
#: each was a 100 MB page, as the API's message list was before its byte bound)
SHOWN_CHARS = 20_000
#: characters of a message's content a transcript page or the message list reads from the
#: database (the rest stays there; the message's own page reads it whole): a JSON text up to
#: this long is shown re-indented, a longer one as stored. Reading whole contents, a page of
#: two 50 MB messages took 133 s and 720 MB to draw 20,000 characters of each.
READ_CHARS = 200_000


def content_head() -> dict[str, Any]:
    """Annotations reading a message's content as far as ``READ_CHARS`` (``content_head``)
    and its length in characters (``content_chars``) in the database, for
    ``QuerySet.annotate`` on a query that leaves ``content`` out."""
    return {"content_head": Substr("content", 1, READ_CHARS), "content_chars": Length("content")}


def shown(text: str | None) -> tuple[str | None, int]:
    """``(text cut to SHOWN_CHARS characters, characters cut off)``."""
    if text is None or len(text) <= SHOWN_CHARS:
        return text, 0
    return text[:SHOWN_CHARS], len(text) - SHOWN_CHARS


def call_anchor(ai_seq: int, call_id: str) -> str:
    """The HTML id of the block of tool call ``call_id`` made by the AI message at ``ai_seq``
    (the id percent-encoded, so any call id is safe; with the seq, since recorded runs reuse
    call ids within one conversation)."""
    return f"call-{ai_seq}-" + urlquote(call_id, safe="")


def message_anchor(seq: int) -> str:
    return f"msg-{seq}"


def page_of(seq: int, size: int = PAGE_SIZE) -> int:
    """The transcript page (1-based) that shows ``seq``."""
    return max(1, math.ceil(seq / size))


def pretty_text(text: str | None) -> tuple[str | None, bool]:
    """``(text, is_json)``: a JSON object or array re-indented (tool outputs are often one long
    line of JSON), anything else unchanged."""
    if not text:
        return text, False
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return text, False
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return text, False
    if not isinstance(value, dict | list):
        return text, False
    return json.dumps(value, indent=2, ensure_ascii=False), True


@dataclass
class TranscriptCall:
    """One tool call of an AI message as the transcript shows it."""

    id: str
    name: str
    arguments: str
    anchor: str
    result_href: str | None = None
    result_seq: int | None = None
    pending: bool = False
    abandoned: bool = False
    #: characters of the arguments not shown (``SHOWN_CHARS``)
    cut: int = 0


@dataclass
class TranscriptEntry:
    """One message (``kind="message"``) or the end of a summary (``kind="summary_end"``)."""

    kind: str
    seq: int
    role: str = ""
    name: str = ""
    text: str | None = None
    is_json: bool = False
    folded: bool = False
    preview: str = ""
    tokens: int = 0
    #: when it was stored, as ``short_datetime`` writes it
    created: str = ""
    model: str = ""
    parts: list[str] = field(default_factory=list)
    calls: list[TranscriptCall] = field(default_factory=list)
    tool_call_id: str = ""
    call_href: str | None = None
    orphan: bool = False
    error: bool = False
    anchor: str = ""
    summary: Summary | None = None
    summary_current: bool = False
    #: characters of the whole text (``text`` holds at most ``SHOWN_CHARS`` of them)
    chars: int = 0
    #: characters of the text not shown, which the message's or summary's own page shows
    cut: int = 0
    #: the message's own admin page, when something of it is not shown here
    whole_href: str = ""


@dataclass
class TranscriptPage:
    number: int
    count: int
    size: int
    first_seq: int
    last_seq: int
    entries: list[TranscriptEntry]
    pending: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.count

    @property
    def previous_number(self) -> int:
        return self.number - 1

    @property
    def next_number(self) -> int:
        return self.number + 1

    @property
    def numbers(self) -> list[int | None]:
        """Page numbers to link (first, last, and two either side of this one); None is a gap."""
        wanted = {1, self.count, *range(self.number - 2, self.number + 3)}
        shown: list[int | None] = []
        for n in sorted(p for p in wanted if 1 <= p <= self.count):
            if shown and shown[-1] is not None and n > shown[-1] + 1:
                shown.append(None)
            shown.append(n)
        return shown


def parse_page(raw: str | None, count: int) -> int:
    """The page asked for in ``?page=``: a whole number clamped to ``1..count``; the last page
    (the newest messages) when absent or not a number."""
    raw = (raw or "").strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        return count
    return min(max(1, int(raw)), count)


def build_page(
    conversation: Conversation,
    page: int | None,
    *,
    change_url: str,
    result_url: str,
    size: int = PAGE_SIZE,
    abandoned_ids: frozenset[str] = frozenset(),
) -> TranscriptPage:
    """One page of ``conversation``'s transcript.

    Args:
        page: 1-based page number, or None for the last page; clamped to the pages there are.
        change_url: the conversation's change page (links to other pages of the transcript).
        result_url: the view that finds a tool result on another page (``?call=<id>`` added).
        abandoned_ids: ids of pending calls older than ``PENDING_TOOL_CALL_TIMEOUT``.

    Reads two queries: the page's messages and the summaries whose span ends on it.
    """
    count = max(1, math.ceil(conversation.last_seq / size))
    number = count if page is None else min(max(1, page), count)
    low, high = (number - 1) * size + 1, number * size
    using = router.db_for_read(Message, instance=conversation)
    rows = list(
        Message.objects.using(using)
        .filter(conversation_id=conversation.pk, seq__gte=low, seq__lte=high)
        .order_by("seq")
        .only(
            "seq",
            "role",
            "name",
            "parts",
            "tool_calls",
            "tool_call_id",
            "exchange_seq",
            "token_count",
            "metadata",
            "created_at",
        )
        .annotate(**content_head())
    )
    summaries = {
        s.through_seq: s
        for s in Summary.objects.using(using)
        .filter(conversation_id=conversation.pk, through_seq__gte=low, through_seq__lte=high)
        .only("id", "first_seq", "through_seq", "token_count", "model", "text", "created_at")
    }
    pending = pending_calls(conversation.pending_tool_calls)
    # A result belongs to the call of its exchange (call ids are not unique in every
    # provider's history: some recorded runs reuse them).
    results_here = {
        (m.exchange_seq, m.tool_call_id): m.seq for m in rows if m.role == "tool" and m.exchange_seq
    }

    def href(seq: int, anchor: str) -> str:
        if low <= seq <= high:
            return f"#{anchor}"
        return f"{change_url}?page={page_of(seq, size)}#{anchor}"

    entries: list[TranscriptEntry] = []
    for message in rows:
        content = message.content_head  # type: ignore[attr-defined]
        whole = content is None or message.content_chars <= READ_CHARS  # type: ignore[attr-defined]
        text, is_json = pretty_text(content) if whole else (content, False)
        chars = len(text or "") if whole else message.content_chars  # type: ignore[attr-defined]
        limit = {"system": FOLD_SYSTEM_CHARS, "tool": FOLD_TOOL_CHARS}.get(message.role, FOLD_CHARS)
        folded = bool(text) and (chars > limit or (text or "").count("\n") >= FOLD_LINES)
        text, cut = shown(text)
        cut = chars - len(text or "")
        entry = TranscriptEntry(
            kind="message",
            seq=message.seq,
            role=message.role,
            name=message.name,
            text=text,
            chars=chars,
            cut=cut,
            is_json=is_json,
            folded=folded,
            preview=" ".join((content or "").split())[:PREVIEW_CHARS] if folded else "",
            tokens=message.token_count,
            created=short_datetime(message.created_at),
            model=str((message.metadata or {}).get("model") or ""),
            anchor=message_anchor(message.seq),
            tool_call_id=message.tool_call_id,
        )
        for part in message.parts or ():
            kind = part.get("type") or part.get("kind") or "part"
            if kind != "text":
                entry.parts.append(str(part.get("mime_type") or kind))
        for call in message.tool_calls or ():
            call_id = str(call.get("id", ""))
            arguments, cut = shown(
                json.dumps(call.get("arguments", {}), indent=2, ensure_ascii=False, sort_keys=True)
            )
            item = TranscriptCall(
                id=call_id,
                name=str(call.get("name", "?")),
                arguments=arguments or "",
                anchor=call_anchor(message.seq, call_id),
                cut=cut,
            )
            if call_id in pending:
                item.pending = True
                item.abandoned = call_id in abandoned_ids
            elif (message.seq, call_id) in results_here:
                item.result_seq = results_here[message.seq, call_id]
                item.result_href = f"#{message_anchor(item.result_seq)}"
            else:
                item.result_href = f"{result_url}?call={urlquote(call_id, safe='')}&after={message.seq}"
            entry.calls.append(item)
        if entry.cut or any(call.cut for call in entry.calls):
            entry.whole_href = reverse("admin:agentmemory_message_change", args=[message.pk])
        if message.role == "tool":
            # What the model read as a failure: a failed result is marked in the metadata
            # (``is_error``, sent to Anthropic and LangChain; an agent's older results carry
            # ``error``), and every error result (an agent's, a cancelled call's) starts with
            # "Error: " (docs/agents.md, "Tools").
            metadata = message.metadata or {}
            entry.error = (
                metadata.get("is_error") is True
                or metadata.get("error") is True
                or (content or "").startswith("Error: ")
            )
            if message.exchange_seq is None:
                entry.orphan = True
            else:
                entry.call_href = href(
                    message.exchange_seq, call_anchor(message.exchange_seq, message.tool_call_id)
                )
        entries.append(entry)
        summary = summaries.pop(message.seq, None)
        if summary is not None:
            entries.append(_summary_end(summary, conversation))
    for summary in summaries.values():  # a summary ending on a seq with no row here
        entries.append(_summary_end(summary, conversation))
    return TranscriptPage(
        number=number,
        count=count,
        size=size,
        first_seq=low,
        last_seq=min(high, conversation.last_seq),
        entries=entries,
        pending=len(pending),
    )


def _summary_end(summary: Summary, conversation: Conversation) -> TranscriptEntry:
    text, cut = shown(summary.text)
    return TranscriptEntry(
        kind="summary_end",
        seq=summary.through_seq,
        summary=summary,
        text=text,
        chars=len(summary.text),
        cut=cut,
        summary_current=summary.pk == conversation.summary_id,
        anchor=f"summary-{summary.pk}",
    )


def result_redirect(conversation: Conversation, call_id: str, *, after: int, change_url: str) -> str | None:
    """Where the result of tool call ``call_id`` (made by the AI message at seq ``after``) is
    shown: a change-page URL with its page and anchor, or None when no result is stored. One
    query, reading the conversation forward from ``after`` on the ``(conversation, seq)`` index
    until the first tool message that answers the call."""
    using = router.db_for_read(Message, instance=conversation)
    seq = (
        Message.objects.using(using)
        .filter(conversation_id=conversation.pk, seq__gt=after, role="tool", tool_call_id=call_id)
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if seq is None:
        return None
    return reverse_page(change_url, seq)


def reverse_page(change_url: str, seq: int) -> str:
    """The change-page URL that shows ``seq``, with its anchor."""
    return f"{change_url}?page={page_of(seq)}#{message_anchor(seq)}"
