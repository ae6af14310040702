"""The ``AGENTMEMORY`` settings dict: defaults, lazy typed access, reset on ``setting_changed``.

Usage::

    from agentmemory.conf import app_settings
    app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

ENV_TOKEN_LIMIT = "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT"


@dataclass(frozen=True)
class AgentMemorySettings:
    """Typed view of ``settings.AGENTMEMORY`` (see the README's settings table)."""

    #: token budget of a context window when the caller gives none (tokens)
    DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT: int = 10_000
    #: dotted path of the ``TokenCounter`` class (or a factory returning one) used at write
    #: time; the default counts with the tokenizer of ``TOKENIZER_MODEL`` (tiktoken)
    TOKEN_COUNTER: str = "agentmemory.tokens.model_token_counter"
    #: model whose tokenizer the default counter uses; None takes the model of
    #: ``LLMS["default"]`` (or of the environment's provider)
    TOKENIZER_MODEL: str | None = None
    #: the largest max_tokens any caller may ask for (tokens): the window builder raises
    #: ValueError above it, the API and the admin answer 400, so one request cannot make the
    #: server read and render a whole history
    MAX_CONTEXT_TOKENS: int = 1_000_000
    #: longest content accepted for one message (characters); longer input is refused
    MAX_MESSAGE_CHARS: int = 2_000_000
    #: largest inline data of one content part (bytes, decoded); larger parts are refused
    MAX_PART_DATA_BYTES: int = 5_000_000
    #: most content parts accepted in one message; more are refused (Anthropic accepts at
    #: most 100 images in one request, OpenAI at most 500 image inputs)
    MAX_PARTS_PER_MESSAGE: int = 500
    #: most tool calls accepted in one AI message; more are refused, and an agent runs the
    #: first ones only (every call waiting for a result costs each later append a check)
    MAX_TOOL_CALLS_PER_MESSAGE: int = 128
    #: tokens an image of unknown size costs (a URL, an unreadable header)
    IMAGE_TOKENS_UNKNOWN_SIZE: int = 1_600
    #: tokens one audio part is estimated to cost
    AUDIO_PART_TOKENS: int = 1_000
    #: tokens one file part (a PDF, a document by URL or id) is estimated to cost
    FILE_PART_TOKENS: int = 3_000
    #: cap on one tool result in the copy sent to the model (tokens); None disables
    MAX_TOOL_RESULT_TOKENS: int | None = 4_000
    #: what the builder does when the newest human message cannot fit: "error" or "truncate"
    OVERSIZED_MESSAGE_POLICY: str = "error"
    #: compaction runs after this many human messages since the last summary
    SUMMARIZE_EVERY_N_HUMAN_MESSAGES: int = 10
    #: the newest human turns that are never folded into a summary
    KEEP_RECENT_HUMAN_TURNS: int = 1
    #: longest summary that is stored (tokens); longer output is condensed first
    MAX_SUMMARY_TOKENS: int = 1_000
    #: largest share of a window's room after the system prompt that a summary may take
    #: (the rest stays for the turn in progress); the summary's limit is this share of the
    #: window a compaction is made for, capped by MAX_SUMMARY_TOKENS
    #: (``agentmemory.compaction.summary_token_budget``)
    SUMMARY_WINDOW_SHARE: float = 0.25
    #: also compact when the messages not covered by the summary fill this share of the window
    COMPACTION_TRIGGER_RATIO: float = 0.8
    #: largest span of new messages sent to the summariser in one call (tokens)
    SUMMARIZER_MAX_INPUT_TOKENS: int = 8_000
    #: dotted path of the compactor class agents use by default
    COMPACTOR_CLASS: str = "agentmemory.compaction.LLMMemoryCompactor"
    #: dotted path of a ``ChatModel`` class or factory for compaction; None picks one
    #: from LLMS or the environment, or the offline extractive compactor when none is set
    COMPACTION_LLM: str | None = None
    #: what agents (and the replay) do about stored messages
    #: a window would leave in neither itself nor the summary: "close" (compact first, then
    #: report what is left), "report" or "ignore"
    CONTEXT_GAP_POLICY: str = "close"
    #: how long a window build waits for a compaction it asked for, when a Celery worker
    #: runs compactions (seconds); inline compactions are always waited for
    COMPACTION_WAIT_SECONDS: float = 30.0
    #: the longest an append or a turn waits for the Celery broker to take a task it
    #: enqueues (a compaction, an embedding), refused, frozen or slow alike (seconds); the
    #: task is then recorded as not enqueued and picked up later (``agentmemory.broker``)
    ENQUEUE_TIMEOUT_SECONDS: float = 0.1
    #: how compactions run: "auto" (Celery when a broker is configured, else inline),
    #: "celery", "inline" (in process, after the caller's commit) or "off"
    COMPACTION_MODE: str = "auto"
    #: lease of a running compaction (seconds); renewed every third of it while the model
    #: works, so a dead worker's lease is taken over within this time
    COMPACTION_LEASE_SECONDS: int = 60
    #: summariser calls one compaction run may make; a longer backlog is folded over
    #: several runs, each storing a summary at a human-turn boundary
    COMPACTION_MAX_CALLS_PER_RUN: int = 20
    #: text put before the summary in the summary system message
    SUMMARY_MESSAGE_PREFIX: str = "Summary of the earlier conversation:\n"
    #: the memory flush: before turns are folded into a summary, the durable facts they
    #: state are stored in the owner's knowledge memory (``agentmemory.flush``). "auto": in
    #: conversations whose agent (registered under the conversation's agent key) sets
    #: KNOWLEDGE_MEMORY_ENABLED; "always": every conversation with an owner; "off": never
    MEMORY_FLUSH: str = "auto"
    #: memory recall: ``ContextWindowBuilder`` (and the API's context endpoint) put a memory
    #: block into each window, recalled from the owner's past conversations and facts about
    #: the turn (``agentmemory.recall.memory``), when not told otherwise; agents decide with
    #: their own MEMORY_RECALL_ENABLED class variable
    MEMORY_RECALL_ENABLED: bool = False
    #: share of a window's budget kept for the memory block (above 0, below 1): the window is
    #: built within the rest, and the block gets what the system prompt, the summary and the
    #: history leave, so at least this share when the history fills its part, and more when
    #: it does not (after a compaction)
    MEMORY_RECALL_SHARE: float = 0.25
    #: what a context window does with a tool exchange whose calls are not all answered yet:
    #: "omit" leaves it out (providers reject a call without its result), "placeholder" sends
    #: it with a marked placeholder result in the copy sent (storage is never changed)
    PENDING_TOOL_CALLS: str = "omit"
    #: a tool call unanswered for this long counts as abandoned, and compaction may fold its
    #: exchange into a summary (seconds); None waits for every result forever, which keeps
    #: compaction from passing a call that will never be answered
    PENDING_TOOL_CALL_TIMEOUT: int | None = 86_400
    #: conversations inactive (``updated_at``) for longer than this many days are purged by
    #: ``purge_conversations`` and the ``purge_expired`` task; None keeps them forever
    RETENTION_DAYS: int | None = None
    #: per-agent retention, {agent_key: days or None}, over RETENTION_DAYS; a conversation's
    #: own ``retention_days`` goes over both
    RETENTION_DAYS_BY_AGENT: dict[str, int | None] = field(default_factory=dict)
    #: ``agentmemory.contrib.langgraph``: records of deleted threads (``DeletedThread``) older
    #: than this many days are deleted by ``prune_deleted_threads``; a record only has to
    #: outlive the runs that were in flight when the thread was deleted
    LANGGRAPH_DELETED_THREAD_DAYS: int = 3
    #: named LLM configurations, like CACHES: {"default": {"BACKEND": path, "OPTIONS": {...}}}
    LLMS: dict[str, Any] = field(default_factory=dict)
    #: recall backend of long-term memory and conversation search: "fulltext" (no download),
    #: "embedding", "hybrid" (both fused by reciprocal rank) or a dotted path to a class
    RECALL_BACKEND: str = "fulltext"
    #: dotted path of an ``Embedder`` class or factory, called with ``EMBEDDER_OPTIONS``;
    #: None: no embeddings (full-text only)
    EMBEDDER: str | None = None
    EMBEDDER_OPTIONS: dict[str, Any] = field(default_factory=dict)
    #: a new fact this similar (cosine, 0..1) to a live fact of the same scope and category
    #: supersedes it (needs an embedder); None turns it off
    FACT_SUPERSEDE_SIMILARITY: float | None = 0.85
    #: ranking boosts: score * (1 + w * importance) * (1 + w * 0.5 ** (age / half-life))
    RECALL_IMPORTANCE_WEIGHT: float = 0.5
    RECALL_RECENCY_WEIGHT: float = 0.25
    RECALL_RECENCY_HALF_LIFE_DAYS: float = 30.0
    #: conversation search: a message's score gains these shares of the scores of the
    #: messages 1, 2, ... places before and after it in its conversation (the answer to a
    #: question is often the turn after the one holding the question's words); () turns it off
    RECALL_NEIGHBOUR_WEIGHTS: tuple[float, ...] = (0.3, 0.15)
    #: conversation search: a query that names a date ("on 3 June, 2023", "in May") scores
    #: the messages written then ``1 + RECALL_DATE_WEIGHT`` times higher, and the date's
    #: words are not matched as words; 0 turns it off
    RECALL_DATE_WEIGHT: float = 0.5
    #: token bound of ``KnowledgeMemory.build_context()`` (tokens)
    KNOWLEDGE_CONTEXT_MAX_TOKENS: int = 2_000
    #: longest fact accepted (characters)
    MAX_FACT_CHARS: int = 10_000
    #: the largest answer of the API's lists and search (bytes): a page holds the items that
    #: fit (at least one), search the hits that fit; exports are streamed
    API_MAX_RESPONSE_BYTES: int = 10_000_000
    #: the API lets active staff users read and change every conversation (every owner's and
    #: those without an owner), not only their own; facts and search stay the requester's own
    API_STAFF_SEES_ALL_CONVERSATIONS: bool = False

    #: on PostgreSQL with psycopg 3, prepare the statements of the context window's reads and
    #: of single appends once per connection (parsed once, planned once). ``None`` (default):
    #: as the database's settings say, prepared only where its OPTIONS give psycopg a
    #: ``prepare_threshold`` number (Django leaves prepared statements off unless told, to
    #: keep transaction poolers working); True: prepared; False: sent as text every time.
    #: Never for a database with DISABLE_SERVER_SIDE_CURSORS or an explicit
    #: OPTIONS["prepare_threshold"] = None (a transaction pooler such as PgBouncer)
    PREPARED_STATEMENTS: bool | None = None

    #: record every model call (agent chat calls with the window they sent, summariser and
    #: embedding calls) in ``ModelCall`` with its token usage
    RECORD_MODEL_CALLS: bool = True
    #: prices per model, in your currency per million tokens (Decimal or str, never float):
    #: {"gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"}};
    #: "cached_input" and "cache_creation_input" default to "input"
    MODEL_PRICES: dict[str, Any] = field(default_factory=dict)

    def import_token_counter(self) -> Any:
        return import_string(self.TOKEN_COUNTER)

    def import_compactor_class(self) -> Any:
        return import_string(self.COMPACTOR_CLASS)


DEFAULTS = {
    f.name: (f.default_factory() if f.default is MISSING else f.default)  # type: ignore[misc,operator]
    for f in fields(AgentMemorySettings)
}
KNOWN_KEYS = frozenset(DEFAULTS)


def _env_token_limit() -> int | None:
    raw = os.environ.get(ENV_TOKEN_LIMIT)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        return None  # reported by the system check agentmemory.E002


@cache
def app_settings() -> AgentMemorySettings:
    """The current settings. Precedence for the token limit: ``AGENTMEMORY`` key, a
    top-level Django setting of the same name, the environment variable, then 10,000."""
    raw = getattr(settings, "AGENTMEMORY", {}) or {}
    # not a dict: the defaults, and check agentmemory.E001 says so (a list here made every
    # other system check fail with a traceback instead)
    user = dict(raw) if isinstance(raw, dict) else {}
    known = {k: v for k, v in user.items() if k in KNOWN_KEYS}
    if ENV_TOKEN_LIMIT not in known:
        top = getattr(settings, ENV_TOKEN_LIMIT, None)
        env = _env_token_limit()
        if top is not None:
            known[ENV_TOKEN_LIMIT] = top
        elif env is not None:
            known[ENV_TOKEN_LIMIT] = env
    return AgentMemorySettings(**known)


@cache
def get_token_counter() -> Any:
    """The configured ``TokenCounter`` instance (built once; reset with the settings)."""
    return app_settings().import_token_counter()()


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("AGENTMEMORY", ENV_TOKEN_LIMIT):
        app_settings.cache_clear()
        get_token_counter.cache_clear()
