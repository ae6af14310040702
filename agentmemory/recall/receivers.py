"""Signal receivers of recall, connected in ``AgentMemoryConfig.ready()``: the embedding of
new messages (``message_appended``) and the SQL function the SQLite full-text triggers call
(``connection_created``), and the compiled scopes emptied when ``DATABASES`` changes."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from agentmemory import signals
from agentmemory.recall import _searched_scope, compiled, embeddings_wanted, index_new_messages

#: ``dispatch_uid`` of ``index_appended_messages`` on ``message_appended``
INDEX_APPENDED = "agentmemory_recall_index_appended"


@receiver(signals.message_appended, dispatch_uid=INDEX_APPENDED)
def index_appended_messages(sender: Any, messages: Any, using: str = "default", **kwargs: Any) -> None:
    """New messages on the database ``using`` get their embedding scheduled for after its
    transaction commits, with an embedding or hybrid backend
    (``agentmemory.recall.index_new_messages``); full-text needs nothing.

    Without an embedding backend (``embeddings_wanted()``: the default) it disconnects
    itself, so that ``message_appended`` goes back to costing an append nothing while no
    other receiver listens (Django's ``Signal.send`` returns at once without receivers;
    with this one it cost about 5 µs of every append, in a loop of appends three times
    that). ``reconnect_index_receiver`` connects it again whenever ``AGENTMEMORY``
    changes, and it asks again on the next append."""
    if not embeddings_wanted():
        signals.message_appended.disconnect(dispatch_uid=INDEX_APPENDED)
        return
    index_new_messages(messages, using=using)


@receiver(setting_changed)
def reconnect_index_receiver(sender: Any, setting: str, **kwargs: Any) -> None:
    """A changed ``AGENTMEMORY`` (which may name an embedder now) connects
    ``index_appended_messages`` again; it decides on the next append, once every receiver
    of the change (the settings' own cache included) has run."""
    if setting == "AGENTMEMORY":
        signals.message_appended.connect(index_appended_messages, dispatch_uid=INDEX_APPENDED)


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
        compiled.clear()
        _searched_scope.cache_clear()
