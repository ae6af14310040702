"""The agent registry, keyed by ``AGENT_KEY`` (``agentmemory.agent_registry``, which lower
layers read; this module is its public name beside the agents)."""

from agentmemory.agent_registry import (
    AgentNotRegistered,
    all,
    autodiscover,
    find,
    get,
    memory_scope,
    register,
    unregister,
)

__all__ = [
    "AgentNotRegistered",
    "all",
    "autodiscover",
    "find",
    "get",
    "memory_scope",
    "register",
    "unregister",
]
