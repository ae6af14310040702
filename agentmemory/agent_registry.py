"""The agent registry, keyed by ``AGENT_KEY``.

Subclasses of ``BaseToolCallingAgent`` that set ``AGENT_KEY`` register themselves when their
class is created (``class MyAgent(BaseToolCallingAgent, register=False)`` opts out). On the
first lookup, the ``agents`` module of every installed app is imported
(``django.utils.module_loading.autodiscover_modules``, the pattern of ``admin.py``), so agents
defined there are found without importing them by hand.

The registry imports nothing of the app, so that lower layers can read it: the memory flush
(``agentmemory.flush``) looks up which knowledge scope a conversation's agent uses. Public
as ``agentmemory.agents.registry``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from agentmemory.conf import app_settings

if TYPE_CHECKING:
    from agentmemory.agents.base import BaseToolCallingAgent

__all__ = [
    "AgentNotRegistered",
    "agent_scope",
    "all",
    "autodiscover",
    "find",
    "get",
    "memory_scope",
    "register",
    "unregister",
]

logger = logging.getLogger("agentmemory.agents")

_agents: dict[str, type[BaseToolCallingAgent]] = {}
_lock = threading.RLock()
_discovered = False


class AgentNotRegistered(LookupError):
    """No agent is registered under that key."""


def _identity(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(agent_cls: type[BaseToolCallingAgent]) -> type[BaseToolCallingAgent]:
    """Register ``agent_cls`` under its ``AGENT_KEY``; usable as a class decorator.

    Re-registering a class of the same module and name (a reloaded module) replaces it.

    Raises:
        ImproperlyConfigured: the class has no ``AGENT_KEY``, or another class already holds it.
    """
    key = getattr(agent_cls, "AGENT_KEY", "")
    if not key:
        raise ImproperlyConfigured(f"{_identity(agent_cls)} has no AGENT_KEY; set one to register it")
    with _lock:
        current = _agents.get(key)
        if current is not None and current is not agent_cls and _identity(current) != _identity(agent_cls):
            raise ImproperlyConfigured(
                f"AGENT_KEY {key!r} of {_identity(agent_cls)} is already used by {_identity(current)}; "
                "agent keys must be unique"
            )
        _agents[key] = agent_cls
    return agent_cls


def unregister(agent_key: str) -> None:
    """Remove the agent registered under ``agent_key`` (no error if there is none)."""
    with _lock:
        _agents.pop(agent_key, None)


def autodiscover(*, force: bool = False) -> None:
    """Import the ``agents`` module of every installed app, once (again with ``force``,
    e.g. after ``INSTALLED_APPS`` changed in a test)."""
    global _discovered
    with _lock:
        if _discovered and not force:
            return
        _discovered = True
        try:
            autodiscover_modules("agents")
        except Exception:
            _discovered = False  # let the next lookup report the import error again
            raise


def get(agent_key: str) -> type[BaseToolCallingAgent]:
    """The agent class registered under ``agent_key``.

    Raises:
        AgentNotRegistered: no such key (the message lists the known keys).
    """
    autodiscover()
    with _lock:
        try:
            return _agents[agent_key]
        except KeyError:
            known = ", ".join(sorted(_agents)) or "none"
            raise AgentNotRegistered(
                f"no agent registered under {agent_key!r} (registered: {known})"
            ) from None


def all() -> dict[str, type[BaseToolCallingAgent]]:
    """A copy of the registry: ``{AGENT_KEY: class}``, sorted by key."""
    autodiscover()
    with _lock:
        return dict(sorted(_agents.items()))


def find(agent_key: str) -> type[BaseToolCallingAgent] | None:
    """The agent class registered under ``agent_key``, or ``None`` (no agent holds that key,
    or it is empty). An ``agents`` module that fails to import (``autodiscover``) is logged,
    and the agents registered so far are looked in: a preview or a memory flush is not
    refused for another app's broken module. Raises nothing."""
    if not agent_key:
        return None
    try:
        return get(agent_key)
    except AgentNotRegistered:
        return None
    except Exception:
        logger.exception("cannot discover the agents; %r is looked up among those loaded", agent_key)
        with _lock:
            return _agents.get(agent_key)


def memory_scope(agent_key: str) -> tuple[str | None, str | None]:
    """``(agent key, namespace)``: the scope, besides the owner, in which the agent registered
    under ``agent_key`` recalls its memory block (its ``KNOWLEDGE_MEMORY_AGENT_KEY`` and
    ``KNOWLEDGE_MEMORY_NAMESPACE``, ``None`` by default: every conversation of the owner and
    the facts stored without an agent key), so that a preview of a conversation's window
    (the API's context endpoint, the admin's context page) recalls what its agent sends.
    For a key no agent holds (``find``), or an empty one: ``(agent_key or None, None)``, the
    conversations and facts of that agent key. Raises nothing."""
    cls = find(agent_key)
    if cls is None:
        return (agent_key or None, None)
    return agent_scope(cls)


def memory_recall_enabled(agent_key: str) -> bool:
    """Whether the agent registered under ``agent_key`` sends a memory block (its
    ``MEMORY_RECALL_ENABLED``, ``False`` unless it sets it); for a key no agent holds
    (``find``), ``AGENTMEMORY['MEMORY_RECALL_ENABLED']``, the setting a plain
    ``ContextWindowBuilder`` follows. The default of the previews (the API's context
    endpoint, the admin's context page), so that they show the block the agent sends.
    Raises nothing."""
    cls = find(agent_key)
    if cls is None:
        return bool(app_settings().MEMORY_RECALL_ENABLED)
    return getattr(cls, "MEMORY_RECALL_ENABLED", False) is True


def agent_scope(agent: Any) -> tuple[str | None, str | None]:
    """``(agent key, namespace)`` of an agent class or instance's knowledge memory and memory
    block: its ``KNOWLEDGE_MEMORY_AGENT_KEY`` and ``KNOWLEDGE_MEMORY_NAMESPACE``, ``None``
    for each it does not set (and for ``agent`` ``None``). The one rule the agent's windows,
    its memory tools, the memory flush and the previews (``memory_scope``) follow."""
    return (
        getattr(agent, "KNOWLEDGE_MEMORY_AGENT_KEY", None),
        getattr(agent, "KNOWLEDGE_MEMORY_NAMESPACE", None),
    )
