"""LangGraph on Django models: a checkpointer, a store and conversation mirroring.

- ``DjangoSaver``: a LangGraph checkpointer (``BaseCheckpointSaver``), sync and async, with
  the optional ``delete_for_runs``, ``copy_thread`` and ``prune``.
- ``DjangoStore``: a LangGraph ``BaseStore`` (long-term memory: namespaces, ``put``, ``get``,
  ``search``, ``delete``, ``list_namespaces``, TTL).
- ``ConversationMirror``: given to ``DjangoSaver(mirror=...)``, copies the messages of a chat
  graph's ``messages`` channel into an agentmemory conversation, so the admin, search and
  compaction work on it.

Add ``"agentmemory.contrib.langgraph"`` to ``INSTALLED_APPS`` (after ``"agentmemory"``) and
run ``migrate``: its tables exist only in projects that install it. Needs the ``langgraph``
extra (``pip install 'django-agentmemory[langgraph]'``); importing this module without it
raises ``ImportError`` with that hint. See ``docs/langgraph.md``.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any


def _missing(name: str) -> bool:
    try:
        return find_spec(name) is None
    except ModuleNotFoundError:
        return True


# Found, not imported: Django imports this module while it loads INSTALLED_APPS, for every
# management command, and the modules that use LangGraph import it.
if _missing("langgraph.checkpoint.base") or _missing("langgraph.store.base"):
    raise ImportError(
        "agentmemory.contrib.langgraph needs LangGraph: pip install 'django-agentmemory[langgraph]'"
    )

if TYPE_CHECKING:
    from agentmemory.contrib.langgraph.checkpoint import DjangoSaver
    from agentmemory.contrib.langgraph.mirror import ConversationMirror
    from agentmemory.contrib.langgraph.store import DjangoStore

__all__ = ["ConversationMirror", "DjangoSaver", "DjangoStore"]

_EXPORTS = {
    "DjangoSaver": "agentmemory.contrib.langgraph.checkpoint",
    "DjangoStore": "agentmemory.contrib.langgraph.store",
    "ConversationMirror": "agentmemory.contrib.langgraph.mirror",
}


def __getattr__(name: str) -> Any:
    # The classes use the app's models, which Django imports only once apps are loaded; this
    # module itself is imported while INSTALLED_APPS load, so they are imported on first use.
    if name in _EXPORTS:
        from importlib import import_module

        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
