"""System checks of registered agents (ids ``agentmemory.E101`` and up).

- ``E101``: ``MEMORY_COMPACTOR_ENABLED = True`` but ``get_config()`` names no compactor class,
  or one that cannot be imported.
- ``E102``: ``get_config()`` raised.
- ``E103``: ``TOOLS`` is invalid (two tools with one name, an entry that is not a function,
  a parameter type without a JSON Schema).
- ``E104``: an ``agents`` module of an installed app failed to import.
- ``E105``: ``SYSTEM_PROMPT`` is neither text nor a function callable with the injector or
  with nothing (a turn would fail on it).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured


@register()
def check_agents(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Report misconfigured agents of the registry before the first request needs them."""
    from agentmemory.agents import registry
    from agentmemory.agents.base import (
        COMPACTOR_HINT,
        SYSTEM_PROMPT_HINT,
        compactor_problem,
        system_prompt_problem,
    )

    errors: list[Error] = []
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
        try:
            agent_cls.get_tools()
        except (ImproperlyConfigured, TypeError) as exc:
            errors.append(
                Error(
                    f"{label}: invalid TOOLS: {exc}",
                    hint="Declare each tool once with @tool, with JSON-describable parameter types.",
                    obj=agent_cls,
                    id="agentmemory.E103",
                )
            )
    return errors
