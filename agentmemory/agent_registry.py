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

import inspect
import logging
import threading
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import Promise
from django.utils.module_loading import autodiscover_modules

from agentmemory.conf import app_settings, get_token_counter
from agentmemory.messages import ChatMessage

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
    "window_budget",
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


def window_budget(agent_key: str) -> tuple[int, int | None] | None:
    """``(budget, system prompt tokens or None)`` of the context windows the agent registered
    under ``agent_key`` builds: its ``CONVERSATION_HISTORY_TOKEN_LIMIT`` (tokens) and, when its
    ``SYSTEM_PROMPT`` is text, the tokens of that prompt's message by the configured counter
    (``None`` for a prompt made per turn, a function or a property). ``None`` when no agent
    holds the key (``find``) or it sets no limit of its own (its windows then have
    ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` tokens, as everyone else's).

    The default budget of what names none: a compaction requested without one (an API
    append, the sweep, the admin's "Compact now", ``compact_conversations``) makes its
    summary for the agent's window, and the previews of a conversation's window (the API's
    context endpoint, the admin's context page) show what the agent sends. A summary made
    for 10,000 tokens took most of a 1,500-token agent's window. Raises nothing."""
    cls = find(agent_key)
    if cls is None:
        return None
    limit = getattr(cls, "CONVERSATION_HISTORY_TOKEN_LIMIT", None)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None
    prompt = inspect.getattr_static(cls, "SYSTEM_PROMPT", None)  # as declared, never called
    system: int | None = None
    if isinstance(prompt, str | Promise):
        try:
            system = int(get_token_counter().count_message(ChatMessage.system(str(prompt))))
        except Exception:
            logger.exception("cannot count the system prompt of %r", agent_key)
    return limit, system


def agent_scope(agent: Any) -> tuple[str | None, str | None]:
    """``(agent key, namespace)`` of an agent class or instance's knowledge memory and memory
    block: its ``KNOWLEDGE_MEMORY_AGENT_KEY`` and ``KNOWLEDGE_MEMORY_NAMESPACE``, ``None``
    for each it does not set (and for ``agent`` ``None``). The one rule the agent's windows,
    its memory tools, the memory flush and the previews (``memory_scope``) follow."""
    return (
        getattr(agent, "KNOWLEDGE_MEMORY_AGENT_KEY", None),
        getattr(agent, "KNOWLEDGE_MEMORY_NAMESPACE", None),
    )
