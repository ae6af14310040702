"""Signals sent by agentmemory's services: extension points, never needed by the app itself.

- ``message_appended(sender=PersistentChatHistory, conversation_id: int, messages: list[ChatMessage],
  using: str)`` after messages are stored on the database ``using`` (inside the caller's
  transaction, if any). Recall schedules their embedding from it
  (``agentmemory.recall.receivers.index_appended_messages``).
- ``summary_created(sender=Summary, conversation_id: int, summary: Summary)`` after a
  compaction stored a new summary.
- ``context_built(sender=ContextWindowBuilder, conversation_id: int, window: ContextWindow)``
  after a context window was assembled.
- ``messages_left_out(sender=ContextWindowBuilder, conversation_id: int, window: ContextWindow,
  uncovered: UncoveredMessages, messages_removed: int, messages_remaining: int, reason: str)``
  when a window leaves stored messages in neither itself nor the summary, after the builder's
  gap policy ran (a compaction asked for and waited on, under the default policy).
  ``uncovered`` has their count, seqs and tokens, ``messages_removed`` is their count,
  ``messages_remaining`` the number of history messages in the window, and ``reason`` says
  why they are left out ("compaction did not cover them: <error>", "no memory compactor",
  "compaction not requested (gap policy 'report')", "the summary was left out to make room for
  the turn in progress", which agents' gap policy "close" never sends).
- ``compaction_finished(sender=BaseMemoryCompactor, conversation_id: int, outcome: str,
  duration_s: float, input_tokens: int, output_tokens: int, llm_calls: int, error: str)`` after
  each compaction run: ``outcome`` is a ``CompactionRun`` status ("stored", "partial",
  "nothing", "busy", "gone", "lost_lease", "superseded") or "failed" (then ``error`` says why);
  tokens are the summariser's usage of this run.
- ``recall_searched(sender=str, kind: str, owner_id: int, backend: str, hits: int,
  duration_s: float)`` after ``search_messages`` (``kind`` "messages") or
  ``KnowledgeMemory.recall`` (``kind`` "facts") answered.

- ``vectors_stored(sender=EmbeddingBackend, using: str, objects: list[Fact | Message],
  embedding_model: str, vectors: list[list[float]])`` after embeddings were stored for
  ``objects`` on the database ``using`` (``agentmemory.contrib.pgvector`` mirrors them into
  its ``vector`` tables).

- ``recall_index_rebuilt(sender=Command, using: str, embedding_model: str, batch_size: int,
  write: Callable[[str], None])`` at the end of ``manage.py rebuild_recall_index`` with an
  embedder: ``agentmemory.contrib.pgvector`` copies the vectors stored before it was
  installed and reports with ``write``.

- ``memory_deleted(sender=type, using: str, owner_ids: list[int], conversation_ids: list[int] = (),
  messages: list[tuple[int, int]] = (), fact_ids: list[int] = ())`` (each list given only when it
  has items) inside the transaction that deleted
  stored memory: whole conversations (or every message of one, ``PersistentChatHistory.clear``,
  or the words of every message, ``purge_conversations --blank-content``), single messages as
  (conversation id, seq) pairs (``pop``), facts with their history. ``owner_ids`` may be empty
  (conversations without owner); ``kept=True`` says the conversations themselves stay
  (``clear``, blanking). The copies of their text that recorded model calls of the
  same owners keep are removed from it (``agentmemory.recording.redact_recorded_copies``), and
  ``agentmemory.contrib.langgraph`` erases the checkpoints of a mirrored thread whose
  conversation was cleared or blanked, and ``agentmemory.contrib.pgvector`` the ``vector``
  copies of a blanked conversation's messages.

Every signal is also a metrics hook (``docs/operations.md``; ``agentmemory.contrib.prometheus``
exports them), and each service writes a structured log record (logger ``agentmemory``, the
same values in ``extra``).
"""

from django.dispatch import Signal

message_appended = Signal()
summary_created = Signal()
context_built = Signal()
messages_left_out = Signal()
compaction_finished = Signal()
recall_searched = Signal()
vectors_stored = Signal()
recall_index_rebuilt = Signal()
memory_deleted = Signal()
