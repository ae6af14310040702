"""Seeded benchmark data: target conversations of H messages among many others, loaded by COPY.

The same generated messages are written to three stores so that every approach reads the
same history: agentmemory's ``agentmemory_message`` table, the table LangChain's
``SQLChatMessageHistory`` uses (text column of JSON) and the table langchain-postgres'
``PostgresChatMessageHistory`` uses (JSONB). Rows of all conversations are interleaved in
time, as appends of many live conversations are, so a conversation's rows are spread over
the heap of each table.

Content is synthetic English-like text with realistic lengths (human messages of about 25
words, answers of about 90, tool results of JSON from a few hundred bytes to about 8 KB,
like the tau-bench airline transcripts), a third of the turns with a tool exchange of one
to three calls. Token counts are those of the configured counter, stored with each row.
A dataset is identified by a fingerprint of its parameters; a later run reuses it.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from agentmemory.conf import get_token_counter
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation
from agentmemory.tokens import BaseTokenCounter

FORMAT_VERSION = "v1"
LC_SQL_TABLE = "bench_lc_sql_message_store"
LC_PG_TABLE = "bench_lc_pg_message_store"
MARKER_TABLE = "bench_dataset"
AGENT_KEY_PREFIX = "bench:"

_WORD_TEXT = """
the of and to a in is it you that he was for on are with as I his they be at one have this from
or had by hot word but what some we can out other were all there when up use your how said an
each she which do their time if will way about many then them write would like so these her
long make thing see him two has look more day could go come did number sound no most people my
over know water than call first who may down side been now find any new work part take get
place made live where after back little only round man year came show every good me give our
under name very through just form sentence great think say help low line differ turn cause much
mean before move right boy old too same tell does set three want air well also play small end
put home read hand port large spell add even land here must big high such follow act why ask
men change went light kind off need house picture try us again animal point mother world near
build self earth father head stand own page should country found answer school grow study still
learn plant cover food sun four between state keep eye never last let thought city tree cross
farm hard start might story saw far sea draw left late run while press close night real life
few north flight booking reservation passenger baggage refund upgrade seat cabin economy
business airport delay cancel itinerary payment voucher membership insurance schedule arrival
departure gate connection customer policy account order shipment invoice
"""
_WORDS = tuple(_WORD_TEXT.split())
_TOOL_NAMES = (
    "get_reservation_details",
    "search_direct_flight",
    "search_onestop_flight",
    "get_user_details",
    "update_reservation_flights",
    "calculate",
    "list_all_airports",
    "send_certificate",
)


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate.

    Attributes:
        seed: seed of the random generator (same seed, same data).
        sizes: messages of each target conversation (H).
        total_rows: messages in all, targets included (other conversations fill the rest).
    """

    seed: int = 20240601
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    total_rows: int = 310_000

    @property
    def fingerprint(self) -> str:
        """Names the data: format, seed, sizes, rows and the token counter that counted them."""
        sizes = "-".join(str(s) for s in self.sizes)
        return f"{FORMAT_VERSION}.s{self.seed}.h{sizes}.n{self.total_rows}.{get_token_counter().id}"

    @property
    def agent_key(self) -> str:
        return AGENT_KEY_PREFIX + self.fingerprint


@dataclass(frozen=True)
class Target:
    """One target conversation: its size (messages), primary key and public uuid."""

    size: int
    conversation_id: int
    uuid: str


@dataclass
class Dataset:
    """A loaded dataset. ``seconds`` is the generation and load time (0 when reused)."""

    spec: DatasetSpec
    targets: dict[int, Target]
    rows: int
    conversations: int
    generated: bool = False
    seconds: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- generation


class _CachingCounter:
    """The configured counter with ``count_text`` memoised: the pools repeat texts, so the
    stored counts are the counter's own at a fraction of the cost."""

    def __init__(self) -> None:
        base = get_token_counter()
        self.id = base.id
        self.base = base
        if isinstance(base, BaseTokenCounter):
            cache: dict[str, int] = {}
            inner = type(base).count_text

            class Cached(type(base)):  # type: ignore[misc,valid-type]
                def count_text(self, text: str) -> int:
                    value = cache.get(text)
                    if value is None:
                        value = cache[text] = inner(self, text)
                    return value

            self.counter = Cached.__new__(Cached)
            self.counter.__dict__.update(base.__dict__)
        else:
            self.counter = base

    def count(self, message: ChatMessage) -> int:
        return self.counter.count_message(message)


def _lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma))))


def _sentence_text(rng: random.Random, n_words: int) -> str:
    out: list[str] = []
    left = n_words
    while left > 0:
        n = min(left, rng.randint(4, 18))
        words = rng.choices(_WORDS, k=n)
        words[0] = words[0].capitalize()
        if n > 6 and rng.random() < 0.4:
            words[n // 2] += ","
        if rng.random() < 0.1:
            words.append(str(rng.randint(2, 9999)))
        out.append(" ".join(words) + rng.choice(".....?!"))
        left -= n
    return " ".join(out)


def _tool_result_text(rng: random.Random) -> str:
    target = _lognormal_int(rng, 700, 0.9, 60, 8_000)
    records = []
    size = 0
    while size < target:
        record = {
            "id": "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=6)),
            "status": rng.choice(("confirmed", "pending", "cancelled", "available")),
            "origin": rng.choice(("JFK", "LAX", "SFO", "ORD", "SEA", "BOS", "DFW", "MIA")),
            "destination": rng.choice(("ATL", "DEN", "PHX", "LAS", "MSP", "DTW", "EWR", "IAH")),
            "date": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "price": rng.randint(49, 2400),
            "note": " ".join(rng.choices(_WORDS, k=rng.randint(2, 12))),
        }
        records.append(record)
        size += len(json.dumps(record))
    return json.dumps({"ok": True, "results": records})


class _Pools:
    """Pre-generated texts that messages draw from (generation stays fast at 300,000 rows)."""

    def __init__(self, rng: random.Random) -> None:
        self.human = [_sentence_text(rng, _lognormal_int(rng, 25, 0.7, 2, 400)) for _ in range(2_000)]
        self.ai = [_sentence_text(rng, _lognormal_int(rng, 90, 0.8, 3, 1_500)) for _ in range(2_000)]
        self.ai_preamble = [_sentence_text(rng, rng.randint(3, 15)) for _ in range(200)]
        self.tool = [_tool_result_text(rng) for _ in range(800)]
        self.args = [
            {"query": " ".join(rng.choices(_WORDS, k=rng.randint(1, 5))), "limit": rng.randint(1, 20)}
            for _ in range(300)
        ]


#: one generated message: role, content, tool calls (dicts), tool_call_id, name, tokens,
#: exchange_seq (seq of the AI message that opened its tool exchange, else None)
Row = tuple[str, str | None, list[dict[str, Any]], str, str, int, int | None]


def generate_conversation(
    rng: random.Random, pools: _Pools, counter: _CachingCounter, n: int, call_prefix: str
) -> list[Row]:
    """Exactly ``n`` messages in turns: a human message, then either an answer or (one turn
    in three) a tool exchange of one to three calls with its results, then the answer. The
    last turn is cut to plain messages when a whole exchange would not fit."""
    rows: list[Row] = []
    calls = 0

    def plain(role: Role, content: str) -> None:
        rows.append(
            (role.value, content, [], "", "", counter.count(ChatMessage(role=role, content=content)), None)
        )

    while len(rows) < n:
        plain(Role.HUMAN, rng.choice(pools.human))
        left = n - len(rows)
        if left <= 0:
            break
        k = rng.choice((1, 1, 2, 3))
        if rng.random() < 1 / 3 and left >= k + 2:
            seq = len(rows) + 1
            tool_calls = []
            for _ in range(k):
                calls += 1
                tool_calls.append(
                    ToolCall(
                        id=f"call_{call_prefix}_{calls}",
                        name=rng.choice(_TOOL_NAMES),
                        arguments=rng.choice(pools.args),
                    )
                )
            content = rng.choice(pools.ai_preamble) if rng.random() < 0.3 else None
            ai = ChatMessage.ai(content, tool_calls)
            rows.append(("ai", content, [c.to_dict() for c in tool_calls], "", "", counter.count(ai), seq))
            for call in tool_calls:
                result = ChatMessage.tool(rng.choice(pools.tool), tool_call_id=call.id, name=call.name)
                rows.append(("tool", result.content, [], call.id, call.name, counter.count(result), seq))
        plain(Role.AI, rng.choice(pools.ai))
    return rows[:n]


def _other_sizes(rng: random.Random, rows: int) -> list[int]:
    sizes = []
    while rows > 0:
        n = min(rows, _lognormal_int(rng, 180, 0.9, 6, 3_000))
        if rows - n < 6:
            n = rows
        sizes.append(n)
        rows -= n
    return sizes


# --------------------------------------------------------------------------- LangChain rows


def langchain_dict(row: Row, seq: int) -> dict[str, Any]:
    """The ``message_to_dict`` form LangChain stores for one generated message; the stored
    token count rides in ``additional_kwargs`` and the message id is the agentmemory seq,
    so trimmed windows can be compared message by message."""
    role, content, tool_calls, tool_call_id, name, tokens, _ = row
    data: dict[str, Any] = {
        "content": content or "",
        "additional_kwargs": {"token_count": tokens},
        "response_metadata": {},
        "name": None,
        "id": str(seq),
    }
    if role == "human":
        data["type"] = "human"
    elif role == "ai":
        data.update(
            type="ai",
            tool_calls=[
                {"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"}
                for c in tool_calls
            ],
            invalid_tool_calls=[],
            usage_metadata=None,
        )
    elif role == "tool":
        data.update(type="tool", name=name, tool_call_id=tool_call_id, artifact=None, status="success")
    else:
        data["type"] = "system"
    return {"type": data["type"], "data": data}


# --------------------------------------------------------------------------- storage


def _cursor() -> Any:
    return connection.cursor()


def ensure_tables() -> None:
    """Create the marker table and both LangChain tables (schemas as the libraries create
    them), plus an index on ``session_id`` for ``SQLChatMessageHistory``'s table, which
    LangChain does not create: without it every read is a scan of the whole table."""
    from langchain_postgres import PostgresChatMessageHistory

    with _cursor() as cur:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (fingerprint text PRIMARY KEY, "
            "agent_key text NOT NULL, rows bigint NOT NULL, targets jsonb NOT NULL, stats jsonb NOT NULL, "
            "created_at timestamptz NOT NULL)"
        )
        # The DDL of langchain_community.chat_message_histories.sql.create_message_model.
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {LC_SQL_TABLE} "
            "(id SERIAL PRIMARY KEY, session_id TEXT, message TEXT)"
        )
        cur.execute(f"CREATE INDEX IF NOT EXISTS {LC_SQL_TABLE}_session_idx ON {LC_SQL_TABLE} (session_id)")
        PostgresChatMessageHistory.create_tables(_raw_connection(), LC_PG_TABLE)


def _raw_connection() -> Any:
    connection.ensure_connection()
    return connection.connection


def find_dataset(spec: DatasetSpec) -> Dataset | None:
    """The dataset of ``spec`` if it was loaded before (found by its marker row)."""
    ensure_tables()
    with _cursor() as cur:
        cur.execute(
            f"SELECT rows, targets, stats FROM {MARKER_TABLE} WHERE fingerprint = %s", [spec.fingerprint]
        )
        found = cur.fetchone()
        if found is None:
            return None
        rows, targets, stats = found
        if isinstance(targets, str):
            targets, stats = json.loads(targets), json.loads(stats)
        cur.execute("SELECT count(*) FROM agentmemory_conversation WHERE agent_key = %s", [spec.agent_key])
        conversations = cur.fetchone()[0]
    loaded = {
        int(k): Target(size=int(k), conversation_id=v["id"], uuid=v["uuid"]) for k, v in targets.items()
    }
    if conversations == 0 or any(size not in loaded for size in spec.sizes):
        # The conversations were deleted (a test database flushed, say): start afresh.
        drop_all()
        return None
    return Dataset(spec=spec, targets=loaded, rows=rows, conversations=conversations, stats=stats)


def drop_all() -> None:
    """Delete every benchmark dataset (conversations with an ``agent_key`` starting with
    ``bench:``, their messages and summaries, both LangChain tables and the markers)."""
    ensure_tables()
    with transaction.atomic(), _cursor() as cur:
        ids = "SELECT id FROM agentmemory_conversation WHERE agent_key LIKE 'bench:%%'"
        cur.execute(f"UPDATE agentmemory_conversation SET summary_id = NULL WHERE id IN ({ids})")
        cur.execute(f"DELETE FROM agentmemory_summary WHERE conversation_id IN ({ids})")
        cur.execute(f"DELETE FROM agentmemory_message WHERE conversation_id IN ({ids})")
        cur.execute("DELETE FROM agentmemory_conversation WHERE agent_key LIKE 'bench:%%'")
        cur.execute(f"TRUNCATE {LC_SQL_TABLE}, {LC_PG_TABLE}, {MARKER_TABLE}")


def _column_defaults(model: Any, given: set[str]) -> dict[str, Any]:
    """Column -> COPY value of the NOT NULL columns of ``model`` outside ``given``: each
    field's Python default (JSON dumped)."""
    from django.db import models

    out: dict[str, Any] = {}
    for model_field in model._meta.concrete_fields:
        if model_field.primary_key or model_field.null or model_field.column in given:
            continue
        value = model_field.get_default()
        out[model_field.column] = json.dumps(value) if isinstance(model_field, models.JSONField) else value
    return out


def _copy(cur: Any, statement: str, rows: Iterator[Sequence[Any]]) -> None:
    with cur.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def load_dataset(spec: DatasetSpec, *, log: Callable[[str], None] = print) -> Dataset:
    """Generate ``spec``'s data and load it into the three stores in one transaction.

    Raises:
        ValueError: ``total_rows`` is smaller than the target sizes together.
    """
    if spec.total_rows < sum(spec.sizes):
        raise ValueError("total_rows must cover the target conversations")
    started = time.perf_counter()
    ensure_tables()
    rng = random.Random(spec.seed)
    pools = _Pools(rng)
    counter = _CachingCounter()

    # (size, is_target) for every conversation, targets first.
    layout = [(size, True) for size in spec.sizes]
    layout += [(size, False) for size in _other_sizes(rng, spec.total_rows - sum(spec.sizes))]
    conversations = []
    for index, (size, is_target) in enumerate(layout):
        rows = generate_conversation(rng, pools, counter, size, call_prefix=f"{index:x}")
        conv_uuid = uuid.UUID(int=rng.getrandbits(128), version=4)
        if is_target:
            start, span = rng.uniform(0.0, 0.05), rng.uniform(0.85, 0.95)
        else:
            start, span = rng.uniform(0.0, 0.9), rng.uniform(0.01, 0.1)
        conversations.append((conv_uuid, size, is_target, rows, start, span))
    generated_at = time.perf_counter()
    log(
        f"  generated {spec.total_rows:,} messages in {len(layout):,} conversations "
        f"in {generated_at - started:.1f} s"
    )

    # Interleave all messages in time, as live conversations append.
    base = datetime(2024, 1, 1, tzinfo=UTC)
    order: list[tuple[float, int, int]] = []
    for ci, (_, size, _, _, start, span) in enumerate(conversations):
        step = span / size
        order.extend((start + step * (i + 1), ci, i) for i in range(size))
    order.sort()

    now = datetime.now(UTC)
    with transaction.atomic(), _cursor() as cur:
        given = (
            "uuid, agent_key, title, metadata, created_at, updated_at, last_seq, message_count, "
            "human_message_count, stored_tokens, has_system_prompt, pending_tool_calls"
        )
        # columns added to the model later, NOT NULL with a default in Python only, get it here
        defaults = _column_defaults(Conversation, set(given.split(", ")))
        _copy(
            cur,
            f"COPY agentmemory_conversation ({', '.join([given, *defaults])}) FROM STDIN",
            (
                (
                    conv_uuid,
                    spec.agent_key,
                    f"bench target H={size}" if is_target else "bench background",
                    json.dumps({"bench_target": size} if is_target else {}),
                    base + timedelta(days=180 * start),
                    base + timedelta(days=180 * (start + span)),
                    size,
                    size,
                    sum(1 for r in rows if r[0] == "human"),
                    sum(r[5] for r in rows),
                    False,
                    "{}",
                    *defaults.values(),
                )
                for conv_uuid, size, is_target, rows, start, span in conversations
            ),
        )
        cur.execute("SELECT uuid, id FROM agentmemory_conversation WHERE agent_key = %s", [spec.agent_key])
        ids = {str(u): pk for u, pk in cur.fetchall()}
        conv_ids = [ids[str(c[0])] for c in conversations]
        sessions = [str(c[0]) for c in conversations]

        def created(t: float) -> datetime:
            return base + timedelta(days=180 * t)

        counter_id = counter.id
        _copy(
            cur,
            "COPY agentmemory_message (conversation_id, seq, role, content, tool_calls, tool_call_id, name, "
            "token_count, token_counter, exchange_seq, metadata, created_at) FROM STDIN",
            (
                (
                    conv_ids[ci],
                    i + 1,
                    row[0],
                    row[1],
                    json.dumps(row[2]),
                    row[3],
                    row[4],
                    row[5],
                    counter_id,
                    row[6],
                    "{}",
                    created(t),
                )
                for t, ci, i in order
                for row in (conversations[ci][3][i],)
            ),
        )
        log(f"  loaded agentmemory_message ({time.perf_counter() - generated_at:.1f} s)")
        lc_json = [None] * len(order)
        for k, (_, ci, i) in enumerate(order):
            lc_json[k] = json.dumps(langchain_dict(conversations[ci][3][i], i + 1))
        _copy(
            cur,
            f"COPY {LC_SQL_TABLE} (session_id, message) FROM STDIN",
            ((sessions[ci], lc_json[k]) for k, (_, ci, _) in enumerate(order)),
        )
        _copy(
            cur,
            f"COPY {LC_PG_TABLE} (session_id, message, created_at) FROM STDIN",
            ((sessions[ci], lc_json[k], created(t)) for k, (t, ci, _) in enumerate(order)),
        )
        del lc_json
        log(f"  loaded LangChain tables ({time.perf_counter() - generated_at:.1f} s)")
        targets = {
            size: {"id": conv_ids[ci], "uuid": sessions[ci]}
            for ci, (_, size, is_target, *_rest) in enumerate(conversations)
            if is_target
        }
        all_rows = [r for c in conversations for r in c[3]]
        stats = {
            "messages": len(all_rows),
            "conversations": len(conversations),
            "tool_results": sum(1 for r in all_rows if r[0] == "tool"),
            "mean_tokens": round(sum(r[5] for r in all_rows) / len(all_rows), 1),
            "mean_chars": round(sum(len(r[1] or "") for r in all_rows) / len(all_rows), 1),
            "max_chars": max(len(r[1] or "") for r in all_rows),
        }
        cur.execute(
            f"INSERT INTO {MARKER_TABLE} (fingerprint, agent_key, rows, targets, stats, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            [spec.fingerprint, spec.agent_key, spec.total_rows, json.dumps(targets), json.dumps(stats), now],
        )
    with _cursor() as cur:
        for table in ("agentmemory_conversation", "agentmemory_message", LC_SQL_TABLE, LC_PG_TABLE):
            cur.execute(f"ANALYZE {table}")
    seconds = time.perf_counter() - started
    log(f"  dataset {spec.fingerprint} ready in {seconds:.1f} s")
    return Dataset(
        spec=spec,
        targets={
            int(k): Target(size=int(k), conversation_id=v["id"], uuid=v["uuid"]) for k, v in targets.items()
        },
        rows=spec.total_rows,
        conversations=len(conversations),
        generated=True,
        seconds=seconds,
        stats=stats,
    )


def get_dataset(spec: DatasetSpec, *, reset: bool = False, log: Callable[[str], None] = print) -> Dataset:
    """The dataset of ``spec``: reused when its marker is found, generated otherwise
    (``reset`` drops every benchmark dataset first)."""
    if reset:
        drop_all()
    found = None if reset else find_dataset(spec)
    if found is not None:
        log(
            f"  reusing dataset {spec.fingerprint} "
            f"({found.rows:,} messages, {found.conversations:,} conversations)"
        )
        return found
    return load_dataset(spec, log=log)
