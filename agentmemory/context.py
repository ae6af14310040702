"""``ContextWindowBuilder``: the token-limited context for one model call, read from the database.

A window is the pinned system prompt, the current summary (a second system message), then
the newest contiguous run of history that fits, starting on a human message, with every tool
exchange whole (design invariants C1-C8). The builder reads, in one statement, the
conversation row with its summary and pinned system prompt and the first page of the tail
(stored token counts newest first on the ``(conversation, seq)`` index, the page sized from
the conversation's average message size, with the content of the rows inside the budget);
a window longer than the first page reads further pages, each twice the size of the last:
a constant number of queries, whatever the length of the conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async
from django.db import connections, models, router

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound
from agentmemory.history import resolve_conversation_id
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter

TRUNCATION_MARKER = "\n[... truncated for the context window: {omitted} of {total} characters omitted ...]"
_META_FIELDS = ("seq", "role", "token_count", "exchange_seq", "tool_call_id", "tool_calls")


@dataclass(frozen=True, slots=True)
class RowMeta:
    """What the builder knows of a stored message before reading its content."""

    seq: int
    role: str
    token_count: int
    exchange_seq: int | None = None
    tool_call_id: str = ""
    tool_calls: Sequence[dict[str, Any]] = ()

    @property
    def is_orphan(self) -> bool:
        return self.role == Role.TOOL and self.exchange_seq is None


@dataclass
class PackResult:
    """Outcome of ``pack_history`` (pure logic, no database).

    Attributes:
        units: the chosen units, oldest first, each in canonical order (an AI message, then
            its results in ``tool_calls`` order).
        tokens: tokens of the chosen units, tool results counted at their capped size.
        blocked: ``(seq, tokens)`` of the newest unit that did not fit, if any.
        available_at_block: tokens that were left for the blocked unit.
        skipped_orphans: seqs of tool results that answer no stored call.
        skipped_incomplete: seqs of tool exchanges whose calls are not all answered.
        dropped_leading: seqs dropped so that the history starts on a human message.
        capped: seqs of tool results to send as truncated copies.
        truncate: ``(seq, tokens)`` of an oversized newest human message taken at that size.
        blocked_by_count: the blocked unit fitted the tokens but not ``max_messages``.
        rows_consumed: metadata rows taken from the input iterator.
    """

    units: list[list[RowMeta]] = field(default_factory=list)
    tokens: int = 0
    blocked: tuple[int, int] | None = None
    available_at_block: int = 0
    skipped_orphans: list[int] = field(default_factory=list)
    skipped_incomplete: list[int] = field(default_factory=list)
    dropped_leading: list[int] = field(default_factory=list)
    capped: list[int] = field(default_factory=list)
    truncate: tuple[int, int] | None = None
    blocked_by_count: bool = False
    rows_consumed: int = 0

    @property
    def rows(self) -> list[RowMeta]:
        return [row for unit in self.units for row in unit]


def _effective_tokens(row: RowMeta, cap: int | None) -> int:
    if cap is not None and row.role == Role.TOOL and row.token_count > cap:
        return cap
    return row.token_count


def _canonical(unit_rows: list[RowMeta]) -> tuple[list[RowMeta], bool]:
    """Order a tool exchange: each AI message followed by its results in ``tool_calls``
    order (invariant W4); second value is False when some call has no result."""
    ai_rows = sorted((r for r in unit_rows if r.role == Role.AI), key=lambda r: r.seq)
    results = {r.tool_call_id: r for r in unit_rows if r.role == Role.TOOL}
    ordered: list[RowMeta] = []
    complete = True
    for ai in ai_rows:
        ordered.append(ai)
        for call in ai.tool_calls:
            result = results.pop(call["id"], None)
            if result is None:
                complete = False
            else:
                ordered.append(result)
    # Results left over belong to no AI message of the unit: data written around validation.
    return ordered, complete and not results


def pack_history(
    rows_newest_first: Iterable[RowMeta],
    *,
    budget: int,
    max_messages: int | None = None,
    max_tool_result_tokens: int | None = None,
    truncate_oversized_human: bool = False,
) -> PackResult:
    """Choose the newest contiguous run of whole units that fits ``budget`` tokens.

    A unit is a plain message or a whole tool exchange (stored with the same
    ``exchange_seq``). Units are taken newest first until the first that does not fit; then
    leading units are dropped until the run starts on a human message. Orphaned results and
    exchanges with unanswered calls are skipped and reported (invariants C1-C5; the rules
    are spelled out in shared/data/bug-cases.md).

    Args:
        rows_newest_first: stored metadata rows after the summary boundary, newest first.
        budget: tokens available for history (after system prompt and summary).
        max_messages: optional cap on the number of history messages.
        max_tool_result_tokens: tool results above this size count as this size (they are
            sent as truncated copies); ``None`` counts them whole.
        truncate_oversized_human: when the newest human message alone does not fit, take
            it anyway at the size left (``PackResult.truncate``), to be sent truncated.
    """
    result = PackResult()
    it = iter(rows_newest_first)
    pushback: list[RowMeta] = []
    count = 0

    def next_row() -> RowMeta | None:
        if pushback:
            return pushback.pop()
        row = next(it, None)
        if row is not None:
            result.rows_consumed += 1
        return row

    newest_first_units: list[list[RowMeta]] = []
    while True:
        row = next_row()
        if row is None:
            break
        if row.is_orphan:
            result.skipped_orphans.append(row.seq)
            continue
        if row.exchange_seq is None:
            unit = [row]
            complete = True
        else:
            start = row.exchange_seq
            members = [row]
            while members[-1].seq > start:
                prev = next_row()
                if prev is None:
                    break
                if prev.is_orphan:
                    result.skipped_orphans.append(prev.seq)
                    continue
                if prev.exchange_seq != start:
                    pushback.append(prev)
                    break
                members.append(prev)
            unit, complete = _canonical(members)
            if members[-1].seq != start:
                complete = False
            if not complete:
                result.skipped_incomplete.extend(sorted(m.seq for m in members))
                continue
        cost = sum(_effective_tokens(r, max_tool_result_tokens) for r in unit)
        too_many = max_messages is not None and count + len(unit) > max_messages
        if result.tokens + cost > budget or too_many:
            result.blocked = (min(r.seq for r in unit), cost)
            result.blocked_by_count = too_many and result.tokens + cost <= budget
            result.available_at_block = budget - result.tokens
            newest_human = unit[0].role == Role.HUMAN and not any(
                u[0].role == Role.HUMAN for u in newest_first_units
            )
            room = budget - result.tokens
            if truncate_oversized_human and newest_human and not too_many and len(unit) == 1 and room > 0:
                newest_first_units.append(unit)
                result.tokens += room
                result.truncate = (unit[0].seq, room)
            break
        newest_first_units.append(unit)
        result.tokens += cost
        count += len(unit)

    while newest_first_units and newest_first_units[-1][0].role != Role.HUMAN:
        dropped = newest_first_units.pop()
        result.tokens -= sum(_effective_tokens(r, max_tool_result_tokens) for r in dropped)
        result.dropped_leading.extend(r.seq for r in dropped)
    result.units = list(reversed(newest_first_units))
    if max_tool_result_tokens is not None:
        result.capped = [
            r.seq for r in result.rows if r.role == Role.TOOL and r.token_count > max_tool_result_tokens
        ]
    return result


def truncate_message(message: ChatMessage, max_tokens: int, counter: TokenCounter) -> ChatMessage:
    """A copy of ``message`` whose content is cut, with a visible marker, so that the whole
    message costs at most ``max_tokens`` by ``counter``.

    Raises:
        ContextBudgetExceeded: not even the marker fits.
    """
    text = message.text
    total = len(text)

    def candidate(keep: int) -> ChatMessage:
        marker = TRUNCATION_MARKER.format(omitted=total - keep, total=total)
        return _replace(message, content=text[:keep] + marker, truncated=True)

    if counter.count_message(candidate(0)) > max_tokens:
        raise ContextBudgetExceeded(seq=message.seq, tokens=message.token_count or 0, available=max_tokens)
    # A token covers at least one character, and rarely more than a few dozen: bound the
    # search so that counting stays cheap on multi-megabyte tool output.
    lo, hi = 0, min(total, max(64, max_tokens * 32))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count_message(candidate(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return candidate(lo)


def _replace(message: ChatMessage, **changes: Any) -> ChatMessage:
    values = {name: getattr(message, name) for name in message.__slots__}  # type: ignore[attr-defined]
    values.update(changes)
    return ChatMessage(**values)


@dataclass(frozen=True)
class ContextWindow:
    """What to send for one model call, with its accounting.

    Attributes:
        messages: pinned system prompt, summary message, history; oldest first.
        max_tokens: the budget it was built for (tokens).
        system_tokens, summary_tokens, history_tokens: tokens of each part.
        first_seq, last_seq: seqs of the oldest and newest history messages (None if empty).
        summary_id, summary_through_seq: the summary used, if any.
        skipped_orphans: seqs of stored tool results left out because they answer no call.
        skipped_incomplete: seqs of tool exchanges left out because calls lack results.
        truncated: seqs of messages sent as truncated copies (storage keeps them whole).
        rows_read: metadata rows read from the message table.
    """

    messages: list[ChatMessage]
    max_tokens: int
    system_tokens: int = 0
    summary_tokens: int = 0
    history_tokens: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    summary_id: int | None = None
    summary_through_seq: int | None = None
    skipped_orphans: tuple[int, ...] = ()
    skipped_incomplete: tuple[int, ...] = ()
    truncated: tuple[int, ...] = ()
    rows_read: int = 0

    @property
    def total_tokens(self) -> int:
        return self.system_tokens + self.summary_tokens + self.history_tokens

    @property
    def history(self) -> list[ChatMessage]:
        """The history part: messages that carry a seq, excluding the pinned system prompt."""
        return [m for m in self.messages if m.seq is not None and not (m.seq == 1 and m.role is Role.SYSTEM)]


class ContextWindowBuilder:
    """Builds ``ContextWindow``s for one conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid.
        token_counter: counts what is not stored (summary message, truncated copies, an
            explicit system prompt); defaults to ``AGENTMEMORY['TOKEN_COUNTER']``. Stored
            messages are budgeted with their stored counts.
        system_prompt: the agent's system prompt. When given it replaces a stored leading
            system message; otherwise a stored system message at seq 1 is pinned.
        max_tool_result_tokens: cap on one tool result in the copy sent (tokens);
            defaults to ``AGENTMEMORY['MAX_TOOL_RESULT_TOKENS']``; ``None`` disables.
        oversized_message_policy: ``"error"`` (raise ``ContextBudgetExceeded``) or
            ``"truncate"`` (send a marked, truncated copy) when the newest human message
            cannot fit; defaults to ``AGENTMEMORY['OVERSIZED_MESSAGE_POLICY']``.
    """

    _UNSET: Any = object()

    def __init__(
        self,
        conversation: Conversation | int | str | UUID,
        *,
        token_counter: TokenCounter | None = None,
        system_prompt: str | None = None,
        max_tool_result_tokens: int | None = _UNSET,
        oversized_message_policy: str | None = None,
    ) -> None:
        conf = app_settings()
        self.conversation_id = resolve_conversation_id(conversation)
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        self.system_prompt = system_prompt
        self.max_tool_result_tokens = (
            conf.MAX_TOOL_RESULT_TOKENS if max_tool_result_tokens is self._UNSET else max_tool_result_tokens
        )
        self.oversized_message_policy = oversized_message_policy or conf.OVERSIZED_MESSAGE_POLICY
        if self.oversized_message_policy not in ("error", "truncate"):
            raise ValueError("oversized_message_policy must be 'error' or 'truncate'")

    def build(self, max_tokens: int | None = None, *, max_messages: int | None = None) -> ContextWindow:
        """Assemble the context window.

        Args:
            max_tokens: budget for everything returned (tokens); defaults to
                ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` (10,000).
            max_messages: optional cap on the number of history messages.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
            ContextBudgetExceeded: the newest human message cannot fit (policy "error").
        """
        if max_tokens is None:
            max_tokens = app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        if max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        if max_messages is not None and max_messages < 0:
            raise ValueError("max_messages must be >= 0")
        counter = self.token_counter
        messages: list[ChatMessage] = []
        system_tokens = 0
        if self.system_prompt is not None:
            pinned_message = ChatMessage.system(self.system_prompt)
            system_tokens = counter.count_message(pinned_message)
            messages.append(pinned_message)
        alias = router.db_for_read(Message)
        # The first page is sized, and its content read, for the budget before the summary
        # and a stored system prompt are taken off: never less than the history can use.
        head = _read_head(
            alias,
            self.conversation_id,
            with_pinned=self.system_prompt is None,
            # Clamped: no window holds 2**31 tokens, and the page-size arithmetic in SQL
            # must stay within 64-bit integers.
            budget=min(max_tokens - system_tokens, _MAX_READ),
            max_messages=None if max_messages is None else min(max_messages, _MAX_READ),
            max_tool_result_tokens=self.max_tool_result_tokens,
        )
        if head is None:
            raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
        conv, summary = head.conv, head.summary
        if head.pinned is not None:
            messages.append(head.pinned)
            system_tokens = head.pinned.token_count or 0

        summary_tokens = 0
        if summary is not None:
            summary_message = ChatMessage.system(
                app_settings().SUMMARY_MESSAGE_PREFIX + summary.text, metadata={"summary_id": summary.pk}
            )
            summary_tokens = (
                summary.token_count
                if summary.token_counter == counter.id
                else counter.count_message(summary_message)
            )
            messages.append(summary_message)

        floor_seq = max(summary.through_seq if summary else 0, 1 if conv.has_system_prompt else 0)
        humans_after_floor = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        available = max_tokens - system_tokens - summary_tokens
        if available < 0:
            # The fixed part alone breaks the budget (C1): nothing can be sent.
            raise ContextBudgetExceeded(
                seq=1 if head.pinned is not None else None,
                tokens=system_tokens + summary_tokens,
                available=max_tokens,
                what="the system prompt and summary",
            )
        reader = _TailReader(
            conv.pk,
            floor_seq,
            head.page_size,
            first_rows=head.page,
            content_budget=available,
            max_tool_result_tokens=self.max_tool_result_tokens,
            using=alias,
        )
        packed = pack_history(
            reader,
            budget=available,
            max_messages=max_messages,
            max_tool_result_tokens=self.max_tool_result_tokens,
            truncate_oversized_human=self.oversized_message_policy == "truncate",
        )

        has_human = any(unit[0].role == Role.HUMAN for unit in packed.units)
        if not has_human and humans_after_floor > 0 and (max_messages is None or max_messages > 0):
            blocked_seq, blocked_tokens = packed.blocked or (None, 0)
            if packed.blocked_by_count:
                raise ContextBudgetExceeded(
                    seq=blocked_seq,
                    tokens=blocked_tokens,
                    available=packed.available_at_block,
                    message=f"the newest turn needs more than max_messages={max_messages} messages "
                    f"(its unit from seq={blocked_seq} does not fit); raise max_messages",
                )
            raise ContextBudgetExceeded(
                seq=blocked_seq, tokens=blocked_tokens, available=packed.available_at_block
            )
        truncate_newest = packed.truncate

        rows = packed.rows
        contents = reader.contents
        missing = [r.seq for r in rows if r.seq not in contents]
        if missing:
            # Rows past the running budget (skipped orphans before them, or the oversized
            # newest human message taken truncated) were read without their content.
            contents.update(_read_contents(alias, conv.pk, missing))

        history: list[ChatMessage] = []
        history_tokens = 0
        truncated: list[int] = []
        cap = self.max_tool_result_tokens
        for row in rows:
            chat = contents.get(row.seq)
            if chat is None:  # deleted between the reads (conversation cleared)
                continue
            tokens = chat.token_count or 0
            if truncate_newest and row.seq == truncate_newest[0]:
                chat = truncate_message(chat, truncate_newest[1], counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            elif cap is not None and row.role == Role.TOOL and tokens > cap:
                chat = truncate_message(chat, cap, counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            history.append(chat)
            history_tokens += tokens
        messages.extend(history)

        window = ContextWindow(
            messages=messages,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            summary_tokens=summary_tokens,
            history_tokens=history_tokens,
            # Parallel results are sent in call order, not seq order: take min and max.
            first_seq=min(m.seq for m in history) if history else None,  # type: ignore[type-var]
            last_seq=max(m.seq for m in history) if history else None,  # type: ignore[type-var]
            summary_id=summary.pk if summary else None,
            summary_through_seq=summary.through_seq if summary else None,
            skipped_orphans=tuple(sorted(packed.skipped_orphans)),
            skipped_incomplete=tuple(sorted(packed.skipped_incomplete)),
            truncated=tuple(truncated),
            rows_read=reader.rows_read,
        )
        signals.context_built.send(sender=ContextWindowBuilder, conversation_id=conv.pk, window=window)
        return window

    async def abuild(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> ContextWindow:
        """``build`` for async code: the ORM work runs in a worker thread, never on the event
        loop (bug report langchain-ai/langchain#23716)."""
        return await sync_to_async(self.build)(max_tokens, max_messages=max_messages)


def _first_page_size(budget: int, conv: Any, max_messages: int | None) -> int:
    """Rows to read first: enough for ``budget`` at the conversation's average message size
    (``conv.stored_tokens / conv.message_count``, at least 1), with a 1.5x margin, plus 8;
    at least 16, and at most ``max_messages + 16``. Later pages double.

    Integer arithmetic, so that ``_head_sql`` computes the same number in the database.
    """
    budget = max(budget, 0)
    if conv.message_count <= 0:
        size = 16
    else:
        if conv.stored_tokens <= conv.message_count:  # average at most one token: counts as one
            more = (3 * budget + 1) // 2
        else:  # ceil(budget / average * 1.5)
            more = (3 * budget * conv.message_count + 2 * conv.stored_tokens - 1) // (2 * conv.stored_tokens)
        size = max(16, more + 8)
    if max_messages is not None:
        size = min(size, max_messages + 16)
    return size


# -- reading ---------------------------------------------------------------------------------
#
# The read path is hand-written SELECTs through the connection's cursor rather than
# querysets: a window is built for every model call, and the ORM's query construction,
# compilation and model instances cost several times the database work here (measured in
# docs/benchmarks.md). One statement reads the conversation row, its summary, its pinned
# system prompt and the first page of the tail with the content of the rows inside the
# budget; a longer window reads further pages. The SQL is plain (UNION ALL, a window
# function, scalar sub-selects), runs on PostgreSQL and SQLite, and takes table and column
# names from the models' metadata. Its text is built once per database alias and variant.


@dataclass(frozen=True, slots=True)
class _ConversationRow:
    """The conversation fields the builder needs."""

    pk: int
    message_count: int
    human_message_count: int
    stored_tokens: int
    has_system_prompt: bool


@dataclass(frozen=True, slots=True)
class _SummaryRow:
    """The current summary's fields the builder needs."""

    pk: int
    text: str
    through_seq: int
    token_count: int
    token_counter: str
    human_messages_covered: int


_SQL_CACHE: dict[tuple[Any, ...], str] = {}
#: largest budget (tokens) and message cap passed to the database
_MAX_READ = 2**31
_NO_CAP = 2**62
#: columns of a tail row: the metadata (``_META_FIELDS``), then id, name, whether the
#: content was read, and the content
_TAIL_WIDTH = len(_META_FIELDS) + 4


def _names(alias: str) -> tuple[Any, Any, Any]:
    """Quoted column-name helpers ``(conversation, summary, message)`` for ``alias``."""
    from agentmemory.models import Summary

    qn = connections[alias].ops.quote_name

    def helper(model: Any) -> Any:
        return lambda name: qn(model._meta.get_field(name).column)

    return helper(Conversation), helper(Summary), helper(Message)


def _tail_select(
    alias: str,
    *,
    capped: bool,
    where: str,
    limit: str,
    before: str = "",
    after: str = "",
    ordered: bool = True,
) -> str:
    """A page of the tail: rows newest first on the ``(conversation, seq)`` index, at most
    ``limit``. A running sum of the (capped) stored token counts, newest first, decides
    which rows also bring their content: those inside ``%(room)s``, so that text past the
    budget (a multi-megabyte tool output just too old to fit) is never read. The inner
    ``ORDER BY seq DESC LIMIT`` keeps the plan on the index even for a conversation that
    holds a large share of the table. ``before`` and ``after`` are extra output columns."""
    qn = connections[alias].ops.quote_name
    _, _, m = _names(alias)
    meta = [m(f) for f in _META_FIELDS]
    tokens = m("token_count")
    if capped:
        tokens = f"CASE WHEN {m('role')} = %(tool)s AND {tokens} > %(cap)s THEN %(cap)s ELSE {tokens} END"
    return (
        f"SELECT {before}{', '.join(meta)}, {m('id')}, {m('name')}, "
        f"CASE WHEN running <= %(room)s THEN 1 ELSE 0 END, "
        f"CASE WHEN running <= %(room)s THEN {m('content')} END{after} FROM ("
        f"SELECT {', '.join(meta)}, {m('id')}, {m('name')}, {m('content')}, "
        f"SUM({tokens}) OVER (ORDER BY {m('seq')} DESC) AS running "
        f"FROM {qn(Message._meta.db_table)} WHERE {where} ORDER BY {m('seq')} DESC LIMIT {limit}) tail"
        + (f" ORDER BY {m('seq')} DESC" if ordered else "")
    )


def _page_expression(alias: str, c: Any, table: str) -> str:
    """``_first_page_size`` in SQL over the conversation row of ``table``."""
    greatest, least = ("MAX", "MIN") if connections[alias].vendor == "sqlite" else ("GREATEST", "LEAST")
    count, stored = f"{table}.{c('message_count')}", f"{table}.{c('stored_tokens')}"
    more = (
        f"CASE WHEN {stored} <= {count} THEN %(half)s "
        f"ELSE (%(triple)s * {count} + 2 * {stored} - 1) / (2 * {stored}) END"
    )
    return f"{least}(CASE WHEN {count} <= 0 THEN 16 ELSE {greatest}(16, {more} + 8) END, %(max_page)s)"


#: Kinds of the rows of the head statement (its first column).
_CONVERSATION, _SUMMARY, _PINNED, _TAIL = 0, 1, 2, 3


def _head_sql(alias: str, *, with_pinned: bool, capped: bool) -> str:
    """One statement, four kinds of rows in one column layout (``kind`` first, then the
    tail row layout, then ``metadata``):

    * the first page of the tail (``_tail_select``), whose LIMIT is the page size computed
      from the conversation row in a scalar sub-select (``_first_page_size`` gives the same
      number from the conversation row read alongside). Rows at or below the summary
      boundary are dropped by the caller (newest first, they can only come last);
    * (``with_pinned``) the system message at seq 1 with its ``metadata``;
    * the conversation: ``id`` in ``id``, ``message_count`` in ``seq``,
      ``human_message_count`` in ``token_count``, ``stored_tokens`` in ``exchange_seq``,
      ``has_system_prompt`` in ``has_content``;
    * its summary: ``id``, ``through_seq`` in ``seq``, ``token_count``,
      ``human_messages_covered`` in ``exchange_seq``, ``token_counter`` in ``name`` and
      ``text`` in ``content``.

    Single-table branches keep planning cheap: joins and repeated sub-selects cost more to
    plan than the whole statement takes to run.
    """
    key = ("head", alias, with_pinned, capped)
    sql = _SQL_CACHE.get(key)
    if sql is not None:
        return sql
    from agentmemory.models import Summary

    qn = connections[alias].ops.quote_name
    c, s, m = _names(alias)
    conversations, summaries = qn(Conversation._meta.db_table), qn(Summary._meta.db_table)
    messages = qn(Message._meta.db_table)
    null = "NULL"
    limit = (
        f"COALESCE((SELECT {_page_expression(alias, c, conversations)} FROM {conversations} "
        f"WHERE {c('id')} = %(id)s), 0)"
    )
    # The tail comes first and the pinned message second: PostgreSQL resolves the type of
    # each column of a UNION from left to right, and these two branches give every column
    # its type (two NULLs first would make text, which clashes with jsonb or bigint).
    branches = [
        _tail_select(
            alias,
            capped=capped,
            where=f"{m('conversation')} = %(id)s",
            limit=limit,
            before=f"{_TAIL}, ",
            after=f", {null}",
            ordered=False,
        )
    ]
    if with_pinned:
        pinned = [
            str(_PINNED),
            *(m(f) for f in _META_FIELDS),
            m("id"),
            m("name"),
            "1",
            m("content"),
            m("metadata"),
        ]
        branches.append(
            f"SELECT {', '.join(pinned)} FROM {messages} "
            f"WHERE {m('conversation')} = %(id)s AND {m('seq')} = 1 AND {m('role')} = %(system)s"
        )
    conversation = [
        str(_CONVERSATION),
        c("message_count"),
        null,
        c("human_message_count"),
        c("stored_tokens"),
        null,
        null,
        c("id"),
        null,
        f"CASE WHEN {c('has_system_prompt')} = %(true)s THEN 1 ELSE 0 END",
        null,
        null,
    ]
    summary = [
        str(_SUMMARY),
        s("through_seq"),
        null,
        s("token_count"),
        s("human_messages_covered"),
        null,
        null,
        s("id"),
        s("token_counter"),
        "1",
        s("text"),
        null,
    ]
    branches.append(f"SELECT {', '.join(conversation)} FROM {conversations} WHERE {c('id')} = %(id)s")
    branches.append(
        f"SELECT {', '.join(summary)} FROM {summaries} WHERE {s('id')} = "
        f"(SELECT {c('summary')} FROM {conversations} WHERE {c('id')} = %(id)s)"
    )
    sql = _SQL_CACHE[key] = " UNION ALL ".join(branches)
    return sql


def _next_page_sql(alias: str, *, capped: bool) -> str:
    key = ("next", alias, capped)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        _, _, m = _names(alias)
        where = f"{m('conversation')} = %(id)s AND {m('seq')} > %(floor)s AND {m('seq')} < %(upper)s"
        sql = _SQL_CACHE[key] = _tail_select(alias, capped=capped, where=where, limit="%(size)s")
    return sql


def _json_value(field_name: str, value: Any, conn: Any) -> Any:
    """A JSON column as the model field returns it (the raw cursor gives text)."""
    field = Message._meta.get_field(field_name)
    assert isinstance(field, models.JSONField)
    return field.from_db_value(value, None, conn)  # type: ignore[arg-type]  # Django passes None too


def _tool_calls(value: Any, conn: Any) -> Any:
    if not value or value == "[]":
        return ()
    return _json_value("tool_calls", value, conn) or ()


_ROLES = {role.value: role for role in Role}


def _chat(
    pk: int,
    seq: int,
    role: str,
    content: str | None,
    tool_calls: Any,
    tool_call_id: str,
    name: str,
    tokens: int,
) -> ChatMessage:
    return ChatMessage(
        role=_ROLES[role],
        content=content,
        tool_calls=tuple(ToolCall.from_dict(c) for c in tool_calls) if tool_calls else (),
        tool_call_id=tool_call_id,
        name=name,
        seq=seq,
        id=pk,
        token_count=tokens,
    )


@dataclass
class _Head:
    """What the first statement read."""

    conv: _ConversationRow
    summary: _SummaryRow | None
    pinned: ChatMessage | None
    page_size: int
    page: list[tuple[Any, ...]]


def _read_head(
    alias: str,
    conversation_id: int,
    *,
    with_pinned: bool,
    budget: int,
    max_messages: int | None,
    max_tool_result_tokens: int | None,
) -> _Head | None:
    """The conversation, its summary, its pinned system prompt (``with_pinned``) and the
    first page of its tail in one statement; ``None`` when the conversation does not exist.

    ``budget`` (tokens) sizes the first page and bounds the content read with it; it must
    not be less than what the history may use (here: the budget before the summary and the
    pinned prompt are taken off), so the page brings at least the content that is needed.
    """
    conn = connections[alias]
    capped = max_tool_result_tokens is not None
    budget = max(budget, 0)
    params: dict[str, Any] = {
        "id": conversation_id,
        "true": True,
        "system": Role.SYSTEM.value,
        "room": budget,
        "half": (3 * budget + 1) // 2,
        "triple": 3 * budget,
        "max_page": _NO_CAP if max_messages is None else max_messages + 16,
    }
    if capped:
        params.update(tool=Role.TOOL.value, cap=max_tool_result_tokens)
    with conn.cursor() as cursor:
        cursor.execute(_head_sql(alias, with_pinned=with_pinned, capped=capped), params)
        rows = cursor.fetchall()
    conv = summary = pinned = None
    page: list[tuple[Any, ...]] = []
    for row in rows:
        kind = row[0]
        if kind == _TAIL:
            page.append(row[1 : _TAIL_WIDTH + 1])
            continue
        values = row[1:]
        if kind == _CONVERSATION:
            conv = _ConversationRow(values[6], values[0], values[2], values[3], bool(values[8]))
        elif kind == _SUMMARY:
            summary = _SummaryRow(values[6], values[9], values[0], values[2], values[7], values[3])
        else:
            seq, role, tokens, _, tool_call_id, tool_calls, pk, name, _, content, metadata = values
            pinned = ChatMessage(
                role=Role(role),
                content=content,
                tool_calls=tuple(ToolCall.from_dict(c) for c in _tool_calls(tool_calls, conn)),
                tool_call_id=tool_call_id,
                name=name,
                metadata=_json_value("metadata", metadata, conn) or {},
                seq=seq,
                id=pk,
                token_count=tokens,
            )
    if conv is None:
        return None
    if not conv.has_system_prompt:
        pinned = None
    page.sort(key=lambda r: r[0], reverse=True)  # UNION ALL promises no order
    # The LIMIT of the tail branch, computed from the same row of the same snapshot.
    page_size = _first_page_size(budget, conv, max_messages)
    return _Head(conv=conv, summary=summary, pinned=pinned, page_size=page_size, page=page)


def _read_contents(alias: str, conversation_id: int, seqs: list[int]) -> dict[int, ChatMessage]:
    """Messages of the given seqs, by seq (the rare rows the tail read left without content)."""
    rows = (
        Message.objects.using(alias)
        .filter(conversation_id=conversation_id, seq__in=seqs)
        .values_list("id", "seq", "role", "content", "tool_calls", "tool_call_id", "name", "token_count")
    )
    return {r[1]: _chat(r[0], r[1], r[2], r[3], r[4] or (), r[5], r[6], r[7]) for r in rows}


class _TailReader:
    """Iterates metadata rows newest first, one page (one query) at a time, from the first
    page the caller read (``first_rows``, ``first_page`` rows asked for) when given.

    Each page also brings the content of the rows whose running token count (tool results
    counted at ``max_tool_result_tokens`` when set) stays within ``content_budget``, kept in
    ``contents`` by seq: in the usual case the window's messages come with the page that
    found them and no further read is needed. Rows at or below ``floor_seq`` are not
    yielded; ``rows_read`` counts every row read.
    """

    def __init__(
        self,
        conversation_id: int,
        floor_seq: int,
        first_page: int,
        *,
        first_rows: list[tuple[Any, ...]] | None = None,
        content_budget: int = 0,
        max_tool_result_tokens: int | None = None,
        using: str | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.floor_seq = floor_seq
        self.page_size = first_page
        self.first_rows = first_rows
        self.content_budget = content_budget
        self.cap = max_tool_result_tokens
        self.using = using or router.db_for_read(Message)
        self.rows_read = 0
        self.contents: dict[int, ChatMessage] = {}

    def _fetch(self, upper: int | None, size: int, room: int) -> list[tuple[Any, ...]]:
        params: dict[str, Any] = {
            "id": self.conversation_id,
            "floor": self.floor_seq,
            "size": size,
            "room": room,
        }
        if upper is None:  # no page read yet: start above the newest seq
            upper = 2**62
        params["upper"] = upper
        if self.cap is not None:
            params.update(tool=Role.TOOL.value, cap=self.cap)
        with connections[self.using].cursor() as cursor:
            cursor.execute(_next_page_sql(self.using, capped=self.cap is not None), params)
            return cursor.fetchall()

    def __iter__(self) -> Iterator[RowMeta]:
        conn = connections[self.using]
        cap = self.cap
        upper: int | None = None
        size = self.page_size
        spent = 0  # (capped) tokens of the rows already yielded
        page = self.first_rows
        while True:
            if page is None:
                page = self._fetch(upper, size, self.content_budget - spent)
            self.rows_read += len(page)
            complete = len(page) < size
            for values in page:
                (
                    seq,
                    role,
                    token_count,
                    exchange_seq,
                    tool_call_id,
                    raw_calls,
                    pk,
                    name,
                    has_content,
                    content,
                ) = values
                if seq <= self.floor_seq:
                    complete = True  # everything above the boundary has been read
                    break
                tool_calls = _tool_calls(raw_calls, conn) if raw_calls and raw_calls != "[]" else ()
                if has_content:
                    self.contents[seq] = _chat(
                        pk, seq, role, content, tool_calls, tool_call_id, name, token_count
                    )
                spent += cap if cap is not None and role == Role.TOOL and token_count > cap else token_count
                yield RowMeta(seq, role, token_count, exchange_seq, tool_call_id, tool_calls)
            if complete or not page:
                return
            upper = page[-1][0]
            size *= 2
            page = None
