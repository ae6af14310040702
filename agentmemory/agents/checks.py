"""System checks of registered agents (ids ``agentmemory.E101`` and up).

- ``E101``: ``MEMORY_COMPACTOR_ENABLED = True`` but ``get_config()`` names no compactor class,
  or one that cannot be imported.
- ``E102``: ``get_config()`` raised.
- ``E103``: ``TOOLS`` is invalid (two tools with one name, an entry that is not a function,
  a parameter type without a JSON Schema).
- ``E104``: an ``agents`` module of an installed app failed to import.
- ``E105``: ``SYSTEM_PROMPT`` is neither text nor a function callable with the injector or
  with nothing (a turn would fail on it).
- ``E106``: ``MEMORY_RECALL_ENABLED`` is not ``True`` or ``False``.
- ``W101``: more tools than OpenAI's Chat Completions API takes in one request (128).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

#: most tools one Chat Completions request may declare (400 "Invalid 'tools': array too long.
#: Expected an array with maximum length 128")
MAX_TOOLS_PER_REQUEST = 128


@register()
def check_agents(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report misconfigured agents of the registry before the first request needs them."""
    from agentmemory.agents import registry
    from agentmemory.agents.base import (
        COMPACTOR_HINT,
        SYSTEM_PROMPT_HINT,
        compactor_problem,
        system_prompt_problem,
    )

    errors: list[CheckMessage] = []
    try:
        agents = registry.all()
    except Exception as exc:
        return [
            Error(
                f"importing the agents modules of installed apps failed: {type(exc).__name__}: {exc}",
                hint="Fix the import error in that agents.py (run `python -c 'import <app>.agents'`).",
                id="agentmemory.E104",
            )
        ]
    for key, agent_cls in agents.items():
        label = f"{agent_cls.__module__}.{agent_cls.__qualname__} (AGENT_KEY {key!r})"
        try:
            config = agent_cls.get_config()
        except Exception as exc:
            errors.append(
                Error(
                    f"{label}: get_config() raised {type(exc).__name__}: {exc}",
                    hint="get_config() must return an AgentConfig without needing a request or a database.",
                    obj=agent_cls,
                    id="agentmemory.E102",
                )
            )
            continue
        problem = compactor_problem(agent_cls, config)
        if problem:
            errors.append(Error(problem, hint=COMPACTOR_HINT, obj=agent_cls, id="agentmemory.E101"))
        prompt_problem = system_prompt_problem(agent_cls)
        if prompt_problem:
            errors.append(
                Error(prompt_problem, hint=SYSTEM_PROMPT_HINT, obj=agent_cls, id="agentmemory.E105")
            )
        recall = getattr(agent_cls, "MEMORY_RECALL_ENABLED", False)
        if not isinstance(recall, bool):
            errors.append(
                Error(
                    f"{label}: MEMORY_RECALL_ENABLED must be True or False, not {recall!r}",
                    hint="Set MEMORY_RECALL_ENABLED = True to send a memory block on every model call.",
                    obj=agent_cls,
                    id="agentmemory.E106",
                )
            )
        try:
            tools = agent_cls.get_tools()
        except (ImproperlyConfigured, TypeError) as exc:
            errors.append(
                Error(
                    f"{label}: invalid TOOLS: {exc}",
                    hint="Declare each tool once with @tool, with JSON-describable parameter types.",
                    obj=agent_cls,
                    id="agentmemory.E103",
                )
            )
            continue
        if len(tools) > MAX_TOOLS_PER_REQUEST:
            errors.append(
                Warning(
                    f"{label} declares {len(tools)} tools (its memory tools included); OpenAI's Chat "
                    f"Completions API refuses a request with more than {MAX_TOOLS_PER_REQUEST} "
                    "(\"Invalid 'tools': array too long\"), so every model call of this agent would "
                    "fail there.",
                    hint="Split the tools between agents, or use a provider that takes more.",
                    obj=agent_cls,
                    id="agentmemory.W101",
                )
            )
    return errors
