"""The five ways of building a context window that the benchmark compares.

Each approach is set up once per target conversation and then called with no arguments;
the call returns the approach's own result (agentmemory's ``ContextWindow``, a list of
``ChatMessage``s, LangChain ``BaseMessage``s or database rows), so its cost includes making
the objects a caller would use. ``window_key`` turns any of them into comparable
``(seq, role, content)`` triples.

Every approach uses the stored token counts and the same rule: the newest run of messages
that fits the budget, started on a human message. agentmemory's further rules (whole tool
exchanges, tool results capped at ``MAX_TOOL_RESULT_TOKENS``) give the same window on this
data: tool exchanges sit inside turns, so cutting at a human message never splits one, and
the cap is turned off (``max_tool_result_tokens=None``) because no peer caps tool results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import connection, connections

from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.messages import ChatMessage
from agentmemory.models import Message
from agentmemory.store.connection import statement_cursor
from bench.data import LC_PG_TABLE, LC_SQL_TABLE, Target

#: (seq, role, content) of one history message, content ``""`` for none
Key = tuple[int, str, str]

_LC_ROLES = {"human": "human", "ai": "ai", "tool": "tool", "system": "system"}


@dataclass(frozen=True)
class Approach:
    """One way of building a window: ``key`` (short id), ``label`` (for tables and plots)
    and ``setup(target, budget)``, which returns ``(build, close)``."""

    key: str
    label: str
    setup: Callable[[Target, int], tuple[Callable[[], Any], Callable[[], None]]]


def _noop() -> None:
    return None


# --------------------------------------------------------------------------- 1. agentmemory


def _setup_agentmemory(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    def build() -> ContextWindow:
        # Plain trimming, like every other approach: no search for messages left outside
        # the window and the summary (gap_policy "report" adds a query when there are some).
        return ContextWindowBuilder(
            target.conversation_id, max_tool_result_tokens=None, gap_policy="ignore"
        ).build(max_tokens=budget)

    return build, _noop


class statements_as_text:
    """agentmemory as Django leaves it by default: its statements sent as text
    (``DISABLE_SERVER_SIDE_CURSORS`` keeps them unprepared whatever ``PREPARED_STATEMENTS``
    says; a dict item set and restored, nothing else). The head statement and the gap probe
    then run through their server-side functions (``agentmemory.store.functions``), which
    ``migrate`` installed: only the short call is parsed and planned on every build.

    A class rather than a generator context manager: it wraps every timed text-mode build
    and append, and the harness should charge as little of its own to them as it can."""

    __slots__ = ("before", "settings_dict")

    def __enter__(self) -> None:
        self.settings_dict = connection.settings_dict
        self.before = self.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS", False)
        self.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = True

    def __exit__(self, *exc_info: object) -> None:
        self.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = self.before


def _setup_agentmemory_text(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    def build() -> ContextWindow:
        with statements_as_text():
            return ContextWindowBuilder(
                target.conversation_id, max_tool_result_tokens=None, gap_policy="ignore"
            ).build(max_tokens=budget)

    return build, _noop


def _setup_agentmemory_report(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    def build() -> ContextWindow:
        # The builder's default: also report what the window leaves outside itself and the
        # summary (here, everything older than the window: these conversations have none).
        return ContextWindowBuilder(target.conversation_id, max_tool_result_tokens=None).build(
            max_tokens=budget
        )

    return build, _noop


def _readme_default_build(target: Target, budget: int) -> ContextWindow:
    # ``ContextWindowBuilder(conversation).build()`` as the README writes it: the default gap
    # report, the default cap on tool results (``MAX_TOOL_RESULT_TOKENS``, 4,000: no tool
    # result of this data reaches it, so the window is the peers'), the budget passed.
    return ContextWindowBuilder(target.conversation_id).build(max_tokens=budget)


def _setup_agentmemory_default(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    def build() -> ContextWindow:
        with statements_as_text():
            return _readme_default_build(target, budget)

    return build, _noop


def _setup_agentmemory_default_prepared(
    target: Target, budget: int
) -> tuple[Callable[[], Any], Callable[[], None]]:
    return partial(_readme_default_build, target, budget), _noop


# --------------------------------------------------------------------------- 2. naive Django


def trim_start(token_counts: list[int], roles: list[str], budget: int) -> int:
    """Index of the first message of the newest run that fits ``budget`` and starts on a
    human message (``len(roles)`` when nothing fits)."""
    total = 0
    start = len(token_counts)
    for i in range(len(token_counts) - 1, -1, -1):
        total += token_counts[i]
        if total > budget:
            break
        start = i
    while start < len(roles) and roles[start] != "human":
        start += 1
    return start


def _setup_django(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    def build() -> list[ChatMessage]:
        rows = list(Message.objects.filter(conversation_id=target.conversation_id).order_by("created_at"))
        start = trim_start([r.token_count for r in rows], [r.role for r in rows], budget)
        return [r.to_chat_message() for r in rows[start:]]

    return build, _noop


# --------------------------------------------------------------------------- 3, 4. LangChain


def stored_token_count(messages: list[Any]) -> int:
    """LangChain token counter (list form): the sum of the counts stored with the messages."""
    return sum(m.additional_kwargs["token_count"] for m in messages)


def _trim(messages: list[Any], budget: int) -> list[Any]:
    from langchain_core.messages import trim_messages

    return trim_messages(
        messages,
        max_tokens=budget,
        token_counter=stored_token_count,
        strategy="last",
        start_on="human",
        include_system=True,
        allow_partial=False,
    )


def sqlalchemy_url() -> str:
    """The SQLAlchemy URL (psycopg 3 driver) of Django's default database."""
    from sqlalchemy.engine import URL

    s = connection.settings_dict
    return URL.create(
        "postgresql+psycopg",
        username=s.get("USER") or None,
        password=s.get("PASSWORD") or None,
        host=s.get("HOST") or None,
        port=int(s["PORT"]) if s.get("PORT") else None,
        database=s["NAME"],
    ).render_as_string(hide_password=False)


def psycopg_conninfo() -> str:
    """A libpq connection string for Django's default database."""
    from psycopg.conninfo import make_conninfo

    s = connection.settings_dict
    parts = {"dbname": s["NAME"], "user": s.get("USER"), "password": s.get("PASSWORD"), "host": s.get("HOST")}
    if s.get("PORT"):
        parts["port"] = str(s["PORT"])
    return make_conninfo(**{k: v for k, v in parts.items() if v})


def _setup_langchain_sql(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from sqlalchemy import create_engine

    engine = create_engine(sqlalchemy_url())
    history = SQLChatMessageHistory(session_id=target.uuid, connection=engine, table_name=LC_SQL_TABLE)

    def build() -> list[Any]:
        return _trim(history.messages, budget)

    def close() -> None:
        history.session_maker.remove()
        engine.dispose()

    return build, close


def _setup_langchain_postgres(target: Target, budget: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory

    # Autocommit keeps the reads from leaving the connection idle in a transaction.
    conn = psycopg.connect(psycopg_conninfo(), autocommit=True)
    history = PostgresChatMessageHistory(LC_PG_TABLE, target.uuid, sync_connection=conn)

    def build() -> list[Any]:
        return _trim(history.get_messages(), budget)

    return build, conn.close


# --------------------------------------------------------------------------- 5. lower bound

#: One query: the newest rows of the conversation, newest first on the (conversation, seq)
#: index, with a running sum of stored token counts; the scan is capped by a LIMIT sized
#: like the builder's first page (budget / average message size x 1.5 + 8, from the
#: conversation row in a sub-select), and the outer ORDER BY seq DESC keeps the plan on the
#: index for a conversation that holds a large share of the table. The first row that does
#: not fit comes back too, and the conversation's message count with every row, so the
#: caller can tell a page that was too small (then it reads the safe number of rows).
LOWER_BOUND_SQL = """
SELECT seq, role, content, tool_calls, tool_call_id, name, token_count, running,
       (SELECT message_count FROM agentmemory_conversation WHERE id = %(conversation)s) AS total
FROM (
    SELECT seq, role, content, tool_calls, tool_call_id, name, token_count,
           SUM(token_count) OVER (ORDER BY seq DESC) AS running
    FROM agentmemory_message
    WHERE conversation_id = %(conversation)s
    ORDER BY seq DESC
    LIMIT %(fixed_limit)s + (
        SELECT CEIL(%(budget)s / GREATEST(1.0, stored_tokens::numeric / GREATEST(message_count, 1)) * 1.5) + 8
        FROM agentmemory_conversation WHERE id = %(conversation)s) * %(scale)s
) AS tail
WHERE running - token_count <= %(budget)s
ORDER BY seq DESC
"""


@dataclass
class LowerBoundStats:
    """How often the lower bound's first page was too small (it then reads again)."""

    calls: int = 0
    retries: int = 0


def psycopg_default_connection() -> Any:
    """A psycopg 3 connection to Django's default database, in autocommit, with psycopg's own
    defaults: server-side binding and ``prepare_threshold=5`` (a statement is prepared on the
    connection after it has run five times), what a plain psycopg program gets."""
    import psycopg

    conn = psycopg.connect(psycopg_conninfo(), autocommit=True)
    assert conn.prepare_threshold == 5, conn.prepare_threshold
    return conn


def _setup_lower_bound(
    target: Target, budget: int, *, prepared: bool = False, psycopg_default: bool = False
) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The lower bound's build. ``prepared``: the same statement prepared once on the
    connection, as agentmemory prepares its own (``agentmemory.store.connection.statement_cursor``), to
    show the ratio against a bound that is not parsed and planned on every call either.
    ``psycopg_default``: the same statement on a connection of its own with psycopg's
    defaults (``psycopg_default_connection``: prepared from its sixth run on), without
    Django's cursor wrapper."""
    stats = LowerBoundStats()
    close: Callable[[], None] = _noop
    if psycopg_default:
        conn = psycopg_default_connection()
        cursor_for: Callable[[str], Any] = lambda alias: conn.cursor()  # noqa: E731
        close = conn.close
    elif prepared:
        cursor_for = statement_cursor
    else:
        cursor_for = lambda alias: connections[alias].cursor()  # noqa: E731
    # Every stored message costs at least 4 tokens (3 of framing and its role), so this many
    # rows always cover the budget: the fallback when the first page was too small.
    cover_all = budget // 4 + 1

    def build() -> list[tuple[Any, ...]]:
        stats.calls += 1
        params = {"conversation": target.conversation_id, "budget": budget, "fixed_limit": 0, "scale": 1}
        with cursor_for("default") as cur:
            cur.execute(LOWER_BOUND_SQL, params)
            rows = cur.fetchall()
            fit = [r for r in rows if r[7] <= budget]
            if rows and len(fit) == len(rows) and len(rows) < rows[0][8]:
                stats.retries += 1
                cur.execute(LOWER_BOUND_SQL, {**params, "fixed_limit": cover_all, "scale": 0})
                fit = [r for r in cur.fetchall() if r[7] <= budget]
        fit.reverse()
        start = trim_start([0] * len(fit), [r[1] for r in fit], budget)
        return fit[start:]

    build.stats = stats  # type: ignore[attr-defined]
    return build, close


APPROACHES: tuple[Approach, ...] = (
    Approach("agentmemory", "agentmemory ContextWindowBuilder", _setup_agentmemory),
    Approach(
        "agentmemory_text",
        "agentmemory ContextWindowBuilder, statements sent as text (Django's default)",
        _setup_agentmemory_text,
    ),
    Approach("django_naive", "Django: load all, trim in Python", _setup_django),
    Approach("langchain_sql", "LangChain SQLChatMessageHistory + trim_messages", _setup_langchain_sql),
    Approach(
        "langchain_postgres",
        "langchain-postgres PostgresChatMessageHistory + trim_messages",
        _setup_langchain_postgres,
    ),
    Approach("lower_bound", "lower bound: one raw SQL query", _setup_lower_bound),
    Approach(
        "lower_bound_prepared",
        "lower bound: the same query, prepared",
        partial(_setup_lower_bound, prepared=True),
    ),
    Approach(
        "lower_bound_psycopg",
        "lower bound: the same query, prepared as psycopg does by default (prepare_threshold=5)",
        partial(_setup_lower_bound, psycopg_default=True),
    ),
    Approach(
        "agentmemory_report",
        "agentmemory ContextWindowBuilder, default gap report",
        _setup_agentmemory_report,
    ),
    Approach(
        "agentmemory_default",
        "agentmemory ContextWindowBuilder(conversation).build(), the README's default "
        "(gap report, tool-result cap), statements sent as text (Django's default)",
        _setup_agentmemory_default,
    ),
    Approach(
        "agentmemory_default_prepared",
        "agentmemory ContextWindowBuilder(conversation).build(), the README's default, "
        "with PREPARED_STATEMENTS",
        _setup_agentmemory_default_prepared,
    ),
)
#: the README's default build, as Django leaves it and with ``PREPARED_STATEMENTS``
DEFAULT_PATH = ("agentmemory_default", "agentmemory_default_prepared")
#: the lower bound prepared as psycopg prepares by default, the bound the default path is judged by
LOWER_BOUND_PSYCOPG = "lower_bound_psycopg"
LOWER_BOUND = "lower_bound"


# --------------------------------------------------------------------------- comparison


def window_key(approach: str, result: Any) -> list[Key]:
    """The history part of any approach's result as ``(seq, role, content)``, oldest first."""
    if approach.startswith("agentmemory"):
        return [(m.seq, m.role.value, m.content or "") for m in result.history]
    if approach == "django_naive":
        return [(m.seq, m.role.value, m.content or "") for m in result]
    if approach.startswith("lower_bound"):
        return [(r[0], r[1], r[2] or "") for r in result]
    out: list[Key] = []
    for m in result:
        if m.type == "system":
            continue
        content = m.content if isinstance(m.content, str) else str(m.content)
        out.append((int(m.id), _LC_ROLES[m.type], content))
    return out


def explain_difference(reference: list[Key], other: list[Key]) -> str:
    """Why two windows differ, in one line (empty when they are equal)."""
    if reference == other:
        return ""
    ref_seqs = [k[0] for k in reference]
    seqs = [k[0] for k in other]
    if ref_seqs != seqs:
        missing = sorted(set(ref_seqs) - set(seqs))
        extra = sorted(set(seqs) - set(ref_seqs))
        return (
            f"different messages: {len(other)} vs {len(reference)} "
            f"(first seq {seqs[:1]} vs {ref_seqs[:1]}; missing {missing[:5]}, extra {extra[:5]})"
        )
    for a, b in zip(reference, other, strict=True):
        if a != b:
            return (
                f"message seq {a[0]} differs: role {b[1]!r} vs {a[1]!r}, "
                f"content {b[2][:40]!r} vs {a[2][:40]!r}"
            )
    return "windows differ"
