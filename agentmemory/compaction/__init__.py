"""Memory compaction: incremental summaries of a conversation's earlier messages.

``BaseMemoryCompactor`` holds the protocol (when to compact, which span, how to store the
result safely under a lease); ``LLMMemoryCompactor`` writes the summary with a ``ChatModel``;
``OfflineMemoryCompactor`` writes a labelled extractive summary when no model is configured.

``request_compaction()`` is the one entry point every caller uses (agents, the API, the admin,
the replay): it decides whether a compaction is due and then runs it in process after the
caller's transaction commits ("inline"), hands it to the Celery task
``agentmemory.tasks.compact_conversation`` ("celery"), or does nothing ("off"), following
``AGENTMEMORY["COMPACTION_MODE"]``. A broker or model failure never reaches the caller: it is
logged and recorded on the conversation, and the periodic sweep (``sweep_compactions`` task,
``compact_conversations`` command) or the next trigger picks the work up again.

The package has one module per job, each importing only those listed before it (but for
``compact_if_needed()``, the compactor's door back to ``dispatch``, and ``tasks``, which
``dispatch`` enqueues; ``docs/architecture.md``):

- ``prompts``: the summariser's instructions, the transcript it reads, the summary's budget;
- ``state``: what a run returns, the lease, the request bookkeeping on the conversation row;
- ``compactors``: ``BaseMemoryCompactor``;
- ``summarisers``: ``LLMMemoryCompactor`` and ``OfflineMemoryCompactor``;
- ``runs``: one compaction run (``build_compactor``, ``run_compaction``, ``compact_backlog``);
- ``dispatch``: the mode, ``request_compaction``, the Celery hand-off, the sweep;
- ``tasks``: the Celery tasks ``compact_conversation`` and ``sweep_compactions``.

Every name is importable from ``agentmemory.compaction`` itself, as before the split, and
dotted paths such as ``"agentmemory.compaction.LLMMemoryCompactor"`` (``COMPACTOR_CLASS``)
keep resolving.
"""

# Re-exported beyond ``__all__`` for code that imported them from the module this package
# replaced.
from agentmemory.broker import celery_broker  # noqa: F401
from agentmemory.compaction.compactors import BaseMemoryCompactor
from agentmemory.compaction.dispatch import (  # noqa: F401
    COMPACTION_MODES,
    ENQUEUE_RETRY_POLICY,
    compact_if_needed,
    compaction_mode,
    describe_compaction_mode,
    enqueue_compaction,
    pending_compactions,
    request_compaction,
    sweep,
)
from agentmemory.compaction.prompts import (  # noqa: F401
    CONDENSE_INSTRUCTIONS,
    MIN_SUMMARY_BUDGET_TOKENS,
    PROMPT_VERSION,
    SUMMARY_INSTRUCTIONS,
    SUMMARY_RULES,
    render_transcript,
    summary_token_budget,
)
from agentmemory.compaction.runs import build_compactor, compact_backlog, get_compaction_llm, run_compaction
from agentmemory.compaction.state import (  # noqa: F401
    BUSY,
    FAILED_RETRY_MAX_SECONDS,
    GONE,
    LOST_LEASE,
    NOTHING,
    PARTIAL,
    STORED,
    SUPERSEDED,
    CompactionRequest,
    CompactionRun,
    Lease,
    LeaseKeeper,
    SummaryDraft,
    record_compaction_failure,
    retry_delay,
)
from agentmemory.compaction.summarisers import LLMMemoryCompactor, OfflineMemoryCompactor

__all__ = [
    "COMPACTION_MODES",
    "BaseMemoryCompactor",
    "CompactionRequest",
    "CompactionRun",
    "LLMMemoryCompactor",
    "OfflineMemoryCompactor",
    "SummaryDraft",
    "build_compactor",
    "compact_backlog",
    "compact_if_needed",
    "compaction_mode",
    "enqueue_compaction",
    "get_compaction_llm",
    "pending_compactions",
    "record_compaction_failure",
    "render_transcript",
    "request_compaction",
    "run_compaction",
    "sweep",
]
