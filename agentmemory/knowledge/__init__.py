"""Knowledge memory: facts a user's agents keep across conversations, on the ORM.

``KnowledgeMemory(owner)`` follows the knowledge-memory contract of the seed design
(``remember()``, categories, persistent facts, recent entries, ``build_context()``, pruning)
with the storage in the host's database instead of files:

- a *persistent* fact is the seed's ``MEMORY.md`` line: kept until forgotten;
- a *transient* fact is the seed's daily-log entry: it is hidden once it is older than
  ``max_log_days`` and deleted by ``prune_logs()``.

Rules (each pinned by tests): scope is the owner plus an optional agent key and namespace,
matched exactly; an exact repeat adds nothing; a changed fact supersedes the old one, which
stays as history out of default recall; a near-duplicate never discards new content (a peer
bug report, cyzus/suzent#34, dropped a changed fact because it embedded close to the old
one); expiry is enforced when reading and a read never extends it; forgetting deletes rows
for real, in batches with no cap, and never anything of another owner (mem0ai/mem0#3928).

The package has one module per job: ``memory`` (``KnowledgeMemory``, the public face),
``storage`` (the checks, repeats, supersession, eviction and deletion), ``context`` (the
context block and the daily log) and ``memory_md`` (MEMORY.md export and import). Every name
is importable from ``agentmemory.knowledge`` itself, as before the split.
"""

# Re-exported beyond ``__all__`` for code that imported them from the module this package
# replaced.
from agentmemory.knowledge.memory import (  # noqa: F401
    KnowledgeMemory,
    knowledge_memory_for,
    max_recall_count,
    unrecorded_recalls,
)
from agentmemory.knowledge.memory_md import (  # noqa: F401
    MEMORY_MD_TITLE,
    ImportReport,
    export_memory_md,
    import_memory_md,
)
from agentmemory.knowledge.storage import (  # noqa: F401
    DELETE_BATCH,
    MAX_TTL_SECONDS,
    Action,
    FactHit,
    InvalidFactError,
    PreparedFact,
    RememberResult,
    category_filter,
    days_before,
)
from agentmemory.knowledge.text import (  # noqa: F401
    content_hash,
    fact_key,
    fact_subject,
    normalize,
    same_subject,
)
from agentmemory.recall.scope import MemoryScopeError

__all__ = [
    "FactHit",
    "InvalidFactError",
    "KnowledgeMemory",
    "MemoryScopeError",
    "PreparedFact",
    "RememberResult",
    "knowledge_memory_for",
    "unrecorded_recalls",
]
