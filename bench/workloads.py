"""Timed workloads: window builds, peak memory of a build, appends, and the compaction replay."""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
import tracemalloc
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.store.connection import statement_cursor
from bench.approaches import (
    APPROACHES,
    LOWER_BOUND,
    Approach,
    explain_difference,
    psycopg_default_connection,
    statements_as_text,
    window_key,
)
from bench.data import LC_PG_TABLE, LC_SQL_TABLE, Dataset, Target, _sentence_text

# --------------------------------------------------------------------------- statistics


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p95, min and max of timings, in milliseconds (p95 by nearest rank)."""
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": p95 * 1000,
        "min_ms": ordered[0] * 1000,
        "max_ms": ordered[-1] * 1000,
        "n": len(ordered),
    }


def rotated(keys: Sequence[str], round_: int) -> list[str]:
    """``keys`` in the order of round ``round_``: each round starts one place later, so that
    over the rounds every approach runs in every position equally often.

    The position in a round matters: measured on PostgreSQL, the approach that ran right
    after LangChain's ``SQLChatMessageHistory`` append took about 0.5 ms longer than when
    it ran second (each approach has its own connection state, driver and code paths, and
    the one that follows pays for the switch), so a fixed order charged that cost to one
    approach on every round."""
    if not keys:
        return []
    start = round_ % len(keys)
    return [*keys[start:], *keys[:start]]


# --------------------------------------------------------------------------- builds


@dataclass
class BuildResult:
    """Timings and window of one approach at one conversation length."""

    approach: str
    size: int
    timings: list[float] = field(default_factory=list)
    window: list[tuple[int, str, str]] = field(default_factory=list)
    window_tokens: int = 0
    same_as_reference: bool = True
    difference: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _window_tokens(approach: str, result: Any, stored: Mapping[int, int]) -> int:
    return sum(stored.get(seq, 0) for seq, _, _ in window_key(approach, result))


def _stored_counts(target: Target, seqs: list[int]) -> dict[int, int]:
    if not seqs:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, token_count FROM agentmemory_message WHERE conversation_id = %s AND seq = ANY(%s)",
            [target.conversation_id, seqs],
        )
        return dict(cur.fetchall())


def time_builds(
    dataset: Dataset,
    *,
    budget: int,
    runs: int,
    warmup: int,
    approaches: Sequence[Approach] = APPROACHES,
    slow_warmup: int = 1,
    slow_runs: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[int, dict[str, BuildResult]]:
    """Time every approach on every target conversation.

    For each length, all approaches are set up, warmed up (``warmup`` builds; ``slow_warmup``
    for approaches that take over 100 ms a build), then built ``runs`` times in rounds, one
    build of each approach per round, so that drifts of the machine hit all of them alike.
    The approaches that read only the tail (agentmemory and the lower bound) have rounds of
    their own: a build that loads a whole conversation evicts caches and would slow the next
    build, which would flatter the ratio to the lower bound. Approaches over 100 ms a build
    are timed ``slow_runs`` times when given (seconds each at H=100,000 on a busy machine).
    Each window is compared with agentmemory's.
    """
    results: dict[int, dict[str, BuildResult]] = {}
    for size in sorted(dataset.targets):
        target = dataset.targets[size]
        builders: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {}
        per: dict[str, BuildResult] = {}
        started = time.perf_counter()
        slow: set[str] = set()
        try:
            for approach in approaches:
                build, close = approach.setup(target, budget)
                builders[approach.key] = (build, close)
                first_started = time.perf_counter()
                result = build()
                first = time.perf_counter() - first_started
                if first > 0.1:
                    slow.add(approach.key)
                for _ in range(max(0, (slow_warmup if first > 0.1 else warmup) - 1)):
                    build()
                per[approach.key] = BuildResult(approach.key, size, window=window_key(approach.key, result))
                stored = _stored_counts(target, [k[0] for k in per[approach.key].window])
                per[approach.key].window_tokens = _window_tokens(approach.key, result, stored)
            for group in _groups(builders):
                for round_ in range(runs):
                    for key in rotated(group, round_):
                        if slow_runs is not None and key in slow and round_ >= slow_runs:
                            continue
                        build = builders[key][0]
                        gc.collect(0)
                        t0 = time.perf_counter()
                        build()
                        per[key].timings.append(time.perf_counter() - t0)
        finally:
            for _, close in builders.values():
                close()
        reference = per["agentmemory"].window if "agentmemory" in per else next(iter(per.values())).window
        for result in per.values():
            result.difference = explain_difference(reference, result.window)
            result.same_as_reference = not result.difference
        lower = builders.get(LOWER_BOUND)
        if lower is not None and hasattr(lower[0], "stats"):
            per[LOWER_BOUND].extra["second_reads"] = lower[0].stats.retries  # type: ignore[attr-defined]
        results[size] = per
        medians = ", ".join(f"{k} {statistics.median(r.timings) * 1000:.2f} ms" for k, r in per.items())
        log(f"  H={size:,}: {medians} ({time.perf_counter() - started:.0f} s)")
        for key, result in per.items():
            if result.difference:
                log(f"  !! H={size:,} {key} returns a different window: {result.difference}")
    return results


#: approaches that read only the tail of a conversation
TAIL_READERS = (
    "agentmemory",
    "agentmemory_text",
    LOWER_BOUND,
    "lower_bound_prepared",
    "lower_bound_psycopg",
    "agentmemory_report",
    "agentmemory_default",
    "agentmemory_default_prepared",
)


def _groups(builders: Mapping[str, Any]) -> list[list[str]]:
    tail = [k for k in builders if k in TAIL_READERS]
    whole = [k for k in builders if k not in TAIL_READERS]
    return [g for g in (tail, whole) if g]


def agentmemory_queries(target: Target, budget: int, approach: str = "agentmemory") -> int:
    """Queries one agentmemory build issues (counted with Django's query capture)."""
    from django.test.utils import CaptureQueriesContext

    build, close = next(a for a in APPROACHES if a.key == approach).setup(target, budget)
    try:
        build()
        with CaptureQueriesContext(connection) as ctx:
            build()
    finally:
        close()
    return len(ctx.captured_queries)


def peak_memory(target: Target, budget: int, approaches: Sequence[Approach] = APPROACHES) -> dict[str, int]:
    """Peak Python heap (bytes, by ``tracemalloc``) of one build per approach. Memory that
    libpq holds for a result set outside Python's allocator is not included."""
    peaks: dict[str, int] = {}
    for approach in approaches:
        build, close = approach.setup(target, budget)
        try:
            build()
            gc.collect()
            tracemalloc.start()
            result = build()
            peaks[approach.key] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            del result
        finally:
            close()
    return peaks


# --------------------------------------------------------------------------- appends


def _text(rng: random.Random, words: int) -> str:
    """Text of ``words`` words drawn as the dataset's are (``bench.data``: sentences over its
    vocabulary): about as many distinct words as the dataset's messages (38 lexemes a
    message of the append mix against 42 in the dataset), so an append pays what a real one
    pays in the full-text index. Nine words, as drawn before, made 8 lexemes a message."""
    return _sentence_text(rng, words)


def _turns(rng: random.Random, count: int, prefix: str) -> list[ChatMessage]:
    """``count`` valid messages: human, ai, every third turn a tool exchange."""
    out: list[ChatMessage] = []
    turn = 0
    while len(out) < count:
        turn += 1
        out.append(ChatMessage.human(_text(rng, rng.randint(8, 40))))
        if turn % 3 == 0 and count - len(out) >= 3:
            call = ToolCall(
                id=f"{prefix}_{turn}", name="get_reservation_details", arguments={"id": f"R{turn}"}
            )
            out.append(ChatMessage.ai(None, [call]))
            out.append(
                ChatMessage.tool(json.dumps({"id": f"R{turn}", "status": "confirmed"}), tool_call_id=call.id)
            )
        if len(out) < count:
            out.append(ChatMessage.ai(_text(rng, rng.randint(20, 120))))
    return out[:count]


def _scratch_conversation() -> Any:
    from agentmemory.models import Conversation

    return Conversation.objects.create(agent_key="bench:appends", title="bench appends (temporary)")


def _delete_conversation(conversation_id: int) -> None:
    # Through the ORM: the conversation's messages go in bulk, and the rows that point at it
    # (summaries, recorded model calls, prompt texts) are deleted or unlinked as declared.
    from agentmemory.models import Conversation

    Conversation.objects.filter(pk=conversation_id).delete()


def _to_langchain(messages: Sequence[ChatMessage]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "human":
            out.append(HumanMessage(m.text))
        elif m.role == "ai":
            calls = [
                {"name": c.name, "args": dict(c.arguments), "id": c.id, "type": "tool_call"}
                for c in m.tool_calls
            ]
            out.append(AIMessage(m.text, tool_calls=calls))
        else:
            out.append(ToolMessage(m.text, tool_call_id=m.tool_call_id))
    return out


#: GC policy of every timed call, builds and appends alike: automatic collection stays on
#: (as in a real process) and a generation-0 collection runs just before each timed call,
#: so no approach pays for garbage another one left behind
GC_POLICY = "automatic GC on; gc.collect(0) before every timed call, for every approach"

#: how many single appends warm connections and caches up before timing starts
_APPEND_WARMUP = 20

#: One statement, the bound for a committed append that allocates its seq safely: bump the
#: conversation's counter (the row lock orders concurrent writers) and insert the row with
#: the seq it returns, in autocommit. No validation, no token counting (the count is made
#: beforehand), no pending tool calls: what is left is the database's share of an append.
RAW_APPEND_SQL = """
WITH c AS (
    UPDATE agentmemory_conversation SET last_seq = last_seq + 1, message_count = message_count + 1
    WHERE id = %(conversation)s RETURNING last_seq
)
INSERT INTO agentmemory_message (
    conversation_id, seq, role, content, tool_calls, tool_call_id, name,
    token_count, token_counter, exchange_seq, metadata, created_at
)
SELECT %(conversation)s, c.last_seq, %(role)s, %(content)s, %(tool_calls)s::jsonb, %(tool_call_id)s,
       %(name)s, %(tokens)s, %(counter)s, NULL, '{}'::jsonb, now()
FROM c
"""

#: the approaches of the single-append comparison, in the order of each round
APPEND_APPROACHES = (
    "agentmemory",
    "agentmemory_text",
    "raw_sql",
    "raw_sql_prepared",
    "raw_sql_psycopg",
    "django_naive",
    "langchain_postgres",
    "langchain_sql",
)


def time_appends(
    *, singles: int, bulk_messages: int, batch: int, seed: int, log: Callable[[str], None] = print
) -> dict:
    """Single committed appends and bulk throughput, side by side on the same messages.

    Singles: ``singles`` appends per approach, each its own transaction, in rounds (one
    append of each approach per round, so drifts of the machine hit all of them alike),
    after ``_APPEND_WARMUP`` untimed rounds, under ``GC_POLICY``. The approaches are
    agentmemory (``PersistentChatHistory.add_message``: validation, token count, seq
    allocation, counters; prepared, and with statements as text as Django leaves it), the
    one-statement raw SQL bound (``RAW_APPEND_SQL``: as text on Django's connection,
    prepared there, and on a psycopg connection of its own with psycopg's defaults), a naive
    ORM insert (``Message.objects.create`` with a seq kept in Python: no lock, no count),
    langchain-postgres and LangChain's ``SQLChatMessageHistory`` (one JSON document per
    message). ``append_ratio`` is agentmemory's median over the raw bound's as text;
    ``default_append_ratio`` (and ``_prepared``) agentmemory's as text (prepared) over the
    raw bound's as psycopg runs it by default.

    Bulk: ``add_messages`` in batches of ``batch`` for agentmemory and the two LangChain
    histories. Scratch conversations are deleted afterwards.
    """
    from agentmemory.conf import get_token_counter
    from agentmemory.history import PersistentChatHistory
    from agentmemory.models import Message

    rng = random.Random(seed)
    singles_msgs = _turns(rng, singles + _APPEND_WARMUP, "s")
    bulk_msgs = _turns(rng, bulk_messages, "b")
    counter = get_token_counter()
    counts = [counter.count_message(m) for m in singles_msgs]
    lc_singles = _to_langchain(singles_msgs)
    out: dict[str, Any] = {}
    # singles, raw, naive, bulk, raw prepared, singles with statements as text, raw on a
    # psycopg connection of its own
    conversations = [_scratch_conversation() for _ in range(7)]
    history = PersistentChatHistory(conversations[0])
    text_history = PersistentChatHistory(conversations[5])
    raw_id, naive_id, raw_prepared_id = conversations[1].pk, conversations[2].pk, conversations[4].pk
    raw_psycopg_id = conversations[6].pk
    psycopg_conn = psycopg_default_connection()

    def agentmemory_append(i: int) -> None:
        history.add_message(singles_msgs[i])

    def agentmemory_text_append(i: int) -> None:
        with statements_as_text():
            text_history.add_message(singles_msgs[i])

    def raw_params(i: int, conversation_id: int) -> dict[str, Any]:
        message = singles_msgs[i]
        return {
            "conversation": conversation_id,
            "role": message.role.value,
            "content": message.content,
            "tool_calls": json.dumps([c.to_dict() for c in message.tool_calls]),
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "tokens": counts[i],
            "counter": counter.id,
        }

    def raw_append(i: int) -> None:
        with connection.cursor() as cur:
            cur.execute(RAW_APPEND_SQL, raw_params(i, raw_id))

    def raw_prepared_append(i: int) -> None:
        with statement_cursor("default") as cur:
            cur.execute(RAW_APPEND_SQL, raw_params(i, raw_prepared_id))

    def raw_psycopg_append(i: int) -> None:
        # psycopg's defaults: server-side binding, prepared from the sixth run on
        with psycopg_conn.cursor() as cur:
            cur.execute(RAW_APPEND_SQL, raw_params(i, raw_psycopg_id))

    def naive_append(i: int) -> None:
        message = singles_msgs[i]
        Message.objects.create(
            conversation_id=naive_id,
            seq=i + 1,
            role=message.role.value,
            content=message.content,
            tool_calls=[c.to_dict() for c in message.tool_calls],
            tool_call_id=message.tool_call_id,
            name=message.name,
            token_count=counts[i],
            token_counter=counter.id,
        )

    appenders: dict[str, Callable[[int], None]] = {
        "agentmemory": agentmemory_append,
        "agentmemory_text": agentmemory_text_append,
        "raw_sql": raw_append,
        "raw_sql_prepared": raw_prepared_append,
        "raw_sql_psycopg": raw_psycopg_append,
        "django_naive": naive_append,
    }
    lc = _LangChainStores()
    try:
        appenders["langchain_postgres"] = lambda i: lc.postgres_single.add_message(lc_singles[i])
        appenders["langchain_sql"] = lambda i: lc.sql_single.add_message(lc_singles[i])
        timings: dict[str, list[float]] = {key: [] for key in appenders}
        for i in range(len(singles_msgs)):
            for key in rotated(list(appenders), i):
                append = appenders[key]
                gc.collect(0)
                t0 = time.perf_counter()
                append(i)
                if i >= _APPEND_WARMUP:
                    timings[key].append(time.perf_counter() - t0)
        for key, seconds in timings.items():
            out[key] = {"single": summarize(seconds)}
        out["agentmemory"]["bulk"] = _bulk(
            PersistentChatHistory(conversations[3]).add_messages, bulk_msgs, batch
        )
        lc_bulk = _to_langchain(bulk_msgs)
        out["langchain_postgres"]["bulk"] = _bulk(lc.postgres_bulk.add_messages, lc_bulk, batch)
        out["langchain_sql"]["bulk"] = _bulk(lc.sql_bulk.add_messages, lc_bulk, batch)
    finally:
        lc.close()
        psycopg_conn.close()
        for conv in conversations:
            _delete_conversation(conv.pk)
    raw = out["raw_sql"]["single"]["median_ms"]
    out["append_ratio"] = out["agentmemory"]["single"]["median_ms"] / raw
    # The same statement prepared once, as agentmemory prepares its own (shown beside it).
    out["append_ratio_text"] = out["agentmemory_text"]["single"]["median_ms"] / raw
    out["append_ratio_prepared"] = (
        out["agentmemory"]["single"]["median_ms"] / out["raw_sql_prepared"]["single"]["median_ms"]
    )
    # The README's append (``history.add_message``) as Django leaves it (text) and with
    # ``PREPARED_STATEMENTS``, over the raw statement as psycopg runs it by default.
    psycopg_raw = out["raw_sql_psycopg"]["single"]["median_ms"]
    out["default_append_ratio"] = out["agentmemory_text"]["single"]["median_ms"] / psycopg_raw
    out["default_append_ratio_prepared"] = out["agentmemory"]["single"]["median_ms"] / psycopg_raw
    out["gc"] = GC_POLICY
    for key in APPEND_APPROACHES:
        stats = out[key]
        bulk = f", bulk {stats['bulk']['messages_per_second']:,.0f} messages/s" if "bulk" in stats else ""
        log(
            f"  {key}: single append median {stats['single']['median_ms']:.2f} ms "
            f"(x{stats['single']['median_ms'] / raw:.2f} raw){bulk}"
        )
    return out


def _bulk(add: Callable[[list[Any]], Any], messages: list[Any], batch: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    for start in range(0, len(messages), batch):
        add(messages[start : start + batch])
    seconds = time.perf_counter() - t0
    return {
        "messages": len(messages),
        "batch": batch,
        "seconds": seconds,
        "messages_per_second": len(messages) / seconds,
    }


class _LangChainStores:
    """LangChain's two SQL histories, a single-append and a bulk session each, on scratch
    session ids that ``close()`` deletes."""

    def __init__(self) -> None:
        import psycopg
        from langchain_community.chat_message_histories import SQLChatMessageHistory
        from langchain_postgres import PostgresChatMessageHistory
        from sqlalchemy import create_engine

        from bench.approaches import psycopg_conninfo, sqlalchemy_url

        self.sessions = [str(uuid.uuid4()) for _ in range(4)]
        self.engine = create_engine(sqlalchemy_url())
        self.conn = psycopg.connect(psycopg_conninfo())
        self.sql_single = SQLChatMessageHistory(
            session_id=self.sessions[0], connection=self.engine, table_name=LC_SQL_TABLE
        )
        self.sql_bulk = SQLChatMessageHistory(
            session_id=self.sessions[1], connection=self.engine, table_name=LC_SQL_TABLE
        )
        self.postgres_single = PostgresChatMessageHistory(
            LC_PG_TABLE, self.sessions[2], sync_connection=self.conn
        )
        self.postgres_bulk = PostgresChatMessageHistory(
            LC_PG_TABLE, self.sessions[3], sync_connection=self.conn
        )

    def close(self) -> None:
        with connection.cursor() as cur:
            cur.execute(f"DELETE FROM {LC_SQL_TABLE} WHERE session_id = ANY(%s)", [self.sessions[:2]])
            cur.execute(f"DELETE FROM {LC_PG_TABLE} WHERE session_id = ANY(%s::uuid[])", [self.sessions[2:]])
        for history in (self.sql_single, self.sql_bulk):
            history.session_maker.remove()
        self.engine.dispose()
        self.conn.close()


# --------------------------------------------------------------------------- compaction


class RecordingLLM:
    """Wraps a ``ChatModel`` and records the prompt size (tokens, by ``counter``) of each call."""

    def __init__(self, inner: Any, counter: Any) -> None:
        self.inner = inner
        self.counter = counter
        self.model_name = getattr(inner, "model_name", "recording")
        self.calls: list[int] = []

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> Any:
        self.calls.append(sum(self.counter.count_message(m) for m in messages))
        return self.inner.invoke(messages, tools=tools)

    async def ainvoke(self, messages: Sequence[ChatMessage], *, tools: Any = None) -> Any:
        return self.invoke(messages, tools=tools)


class TailWordsModel:
    """A stand-in summariser for measuring prompt sizes without an LLM: it answers with the
    last 300 words of the prompt, a bounded text like a real summary."""

    model_name = "tail-words"

    def invoke(self, messages: Sequence[ChatMessage], *, tools: Any = None) -> Any:
        from agentmemory.llm.base import ChatResponse

        words = (messages[-1].text if messages else "").split()
        return ChatResponse(message=ChatMessage.ai(" ".join(words[-300:]) or "-"), model=self.model_name)

    async def ainvoke(self, messages: Sequence[ChatMessage], *, tools: Any = None) -> Any:
        return self.invoke(messages, tools=tools)


def locomo_messages(item: Mapping[str, Any]) -> list[ChatMessage]:
    """One LoCoMo conversation as messages: whoever opens the first session is the human,
    the other speaker the AI."""
    conv = item["conversation"]
    sessions = sorted(
        (int(k.split("_")[1]), v) for k, v in conv.items() if k.startswith("session_") and isinstance(v, list)
    )
    human = next((turns[0]["speaker"] for _, turns in sessions if turns), conv["speaker_a"])
    out = []
    for _, turns in sessions:
        for turn in turns:
            text = turn.get("text") or ""
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            out.append(ChatMessage.human(text) if turn["speaker"] == human else ChatMessage.ai(text))
    return out


def replay_compaction(
    path: Path, *, limit_conversations: int | None, limit_messages: int | None, log: Callable
) -> dict:
    """Replay LoCoMo conversations message by message; after each AI message run the
    compaction when ``needs_compaction()`` says so (as the task would), and record each
    compaction's prompt size against the conversation's length at that moment."""
    from agentmemory.compaction import LLMMemoryCompactor
    from agentmemory.conf import app_settings, get_token_counter
    from agentmemory.history import PersistentChatHistory
    from agentmemory.models import Conversation

    items = json.loads(path.read_text())[:limit_conversations]
    counter = get_token_counter()
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    for index, item in enumerate(items):
        messages = locomo_messages(item)[:limit_messages]
        conv = Conversation.objects.create(
            agent_key="bench:compaction", title=f"LoCoMo {item.get('sample_id')}"
        )
        try:
            history = PersistentChatHistory(conv)
            llm = RecordingLLM(TailWordsModel(), counter)
            compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history)
            for position, message in enumerate(messages, start=1):
                history.add_message(message)
                if message.role != "ai" or not compactor.needs_compaction():
                    continue
                before = len(llm.calls)
                summary = compactor.compact()
                calls = llm.calls[before:]
                if summary is None or not calls:
                    continue
                stored = Conversation.objects.values_list("stored_tokens", flat=True).get(pk=conv.pk)
                records.append(
                    {
                        "conversation": index,
                        "messages": position,
                        "stored_tokens": stored,
                        "prompt_tokens": sum(calls),
                        "max_call_prompt_tokens": max(calls),
                        "llm_calls": len(calls),
                        "summary_tokens": summary.token_count,
                    }
                )
        finally:
            from agentmemory.models import Summary

            Conversation.objects.filter(pk=conv.pk).update(summary=None)
            Summary.objects.filter(conversation_id=conv.pk).delete()
            _delete_conversation(conv.pk)
    seconds = time.perf_counter() - started
    conf = app_settings()
    result = {
        "conversations": len(items),
        "compactions": len(records),
        "seconds": seconds,
        "summarizer": "TailWordsModel (the last 300 words of each prompt, no LLM)",
        "settings": {
            "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": conf.SUMMARIZE_EVERY_N_HUMAN_MESSAGES,
            "MAX_SUMMARY_TOKENS": conf.MAX_SUMMARY_TOKENS,
            "SUMMARIZER_MAX_INPUT_TOKENS": conf.SUMMARIZER_MAX_INPUT_TOKENS,
        },
        "records": records,
    }
    result.update(flatness(records))
    log(
        f"  {len(records)} compactions over {len(items)} conversations in {seconds:.1f} s; prompt tokens "
        f"median {result.get('prompt_median', 0):.0f}, "
        f"middle third {result.get('middle_third_median', 0):.0f}, "
        f"last third {result.get('last_third_median', 0):.0f}, max {result.get('prompt_max', 0):.0f}"
    )
    return result


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3 or len(set(xs)) < 2:
        return None
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )


def flatness(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """How prompt size moves with conversation length.

    Each conversation's compactions are split in thirds of its length. The first third
    holds the warm-up (the first compaction has no previous summary, and the summary grows
    to its size limit), so flatness compares the last third with the middle third: an
    incremental compactor stays near 1, one that re-reads the history grows with the
    length (about 1.7 from the middle to the last third). Also: the least-squares slope of
    prompt tokens against the conversation's stored tokens over the second half of each
    conversation (median over conversations), and the growth it implies over that half as a
    fraction of the mean prompt.
    """
    if not records:
        return {}
    thirds: list[list[int]] = [[], [], []]
    slopes, growths = [], []
    by_conv: dict[int, list[Mapping[str, Any]]] = {}
    for r in records:
        by_conv.setdefault(r["conversation"], []).append(r)
    for rows in by_conv.values():
        length = max(r["messages"] for r in rows)
        for r in rows:
            thirds[min(2, int(3 * (r["messages"] - 1) / length))].append(r["prompt_tokens"])
        half = [r for r in rows if r["messages"] > length / 2]
        xs, ys = [r["stored_tokens"] for r in half], [r["prompt_tokens"] for r in half]
        slope = _slope(xs, ys)
        if slope is not None:
            slopes.append(slope * 1000)
            growths.append(slope * (max(xs) - min(xs)) / statistics.fmean(ys))
    first, middle, last = (statistics.median(t) if t else 0.0 for t in thirds)
    out = {
        "prompt_median": statistics.median(r["prompt_tokens"] for r in records),
        "prompt_max": max(r["prompt_tokens"] for r in records),
        "first_third_median": first,
        "middle_third_median": middle,
        "last_third_median": last,
        "last_to_middle_ratio": last / middle if middle else 0.0,
    }
    if slopes:
        out["slope_per_1000_tokens"] = statistics.median(slopes)
        out["second_half_growth"] = statistics.median(growths)
    return out
