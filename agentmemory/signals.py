"""Signals sent by agentmemory's services: extension points, never needed by the app itself.

- ``message_appended(sender=PersistentChatHistory, conversation_id: int, messages: list[ChatMessage])``
  after messages are stored (inside the caller's transaction, if any).
- ``summary_created(sender=Summary, conversation_id: int, summary: Summary)`` after a
  compaction stored a new summary.
- ``context_built(sender=ContextWindowBuilder, conversation_id: int, window: ContextWindow)``
  after a context window was assembled.
"""

from django.dispatch import Signal

message_appended = Signal()
summary_created = Signal()
context_built = Signal()
