"""The memory flush: facts kept in the owner's knowledge memory in the compaction pass that
folds the messages they were said in. It runs inside compaction and lives in
``agentmemory.compaction.flush``; this module is its public name.
"""

from agentmemory.compaction.flush import (
    DEGRADE_AFTER_FAILURES,
    FACT_INSTRUCTIONS,
    FLUSH_MODES,
    FlushResult,
    MemoryFlush,
    summarize_with_facts,
)

__all__ = [
    "DEGRADE_AFTER_FAILURES",
    "FACT_INSTRUCTIONS",
    "FLUSH_MODES",
    "FlushResult",
    "MemoryFlush",
    "summarize_with_facts",
]
