"""Signal receivers of recall, connected in ``AgentMemoryConfig.ready()``: the embedding of
new messages (``message_appended``) and the SQL function the SQLite full-text triggers call
(``connection_created``), and the compiled scopes emptied when ``DATABASES`` changes."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from agentmemory import signals
from agentmemory.recall import compiled


@receiver(signals.message_appended, dispatch_uid="agentmemory_recall_index_appended")
def index_appended_messages(sender: Any, messages: Any, using: str = "default", **kwargs: Any) -> None:
    """New messages on the database ``using`` get their embedding scheduled for after its
    transaction commits, with an embedding or hybrid backend
    (``agentmemory.recall.index_new_messages``); full-text needs nothing."""
    from agentmemory.recall import index_new_messages

    index_new_messages(messages, using=using)


@receiver(connection_created)
def add_sqlite_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Every SQLite connection gets ``agentmemory_search_text``, which the FTS5 triggers call
    (``agentmemory.recall.fulltext.register_sqlite_functions``)."""
    from agentmemory.recall.fulltext import register_sqlite_functions

    register_sqlite_functions(sender, connection, **kwargs)


@receiver(setting_changed)
def clear_compiled_scopes(sender: Any, setting: str, **kwargs: Any) -> None:
    """A changed ``DATABASES`` empties the compiled SQL of ``agentmemory.recall.compiled``
    (keyed by alias) and the searched scopes' querysets (``searched_messages``)."""
    if setting == "DATABASES":
        from agentmemory.recall import _searched_scope

        compiled.clear()
        _searched_scope.cache_clear()
