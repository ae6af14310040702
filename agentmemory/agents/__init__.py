"""Tool-calling agents with persistent memory: ``BaseToolCallingAgent``, its configuration,
the injector, ``@tool`` declarations, memory policies, results, events and the registry.

Import from here after Django is set up (the agent classes use the models)::

    from agentmemory.agents import BaseToolCallingAgent, tool
"""

from agentmemory.agents.base import BaseToolCallingAgent, resolve_llm
from agentmemory.agents.config import AgentConfig, MemoryConfig
from agentmemory.agents.injector import AgentInjector
from agentmemory.agents.memory import STUB_TEXT, apply_memory_policy
from agentmemory.agents.registry import AgentNotRegistered
from agentmemory.agents.results import (
    AgentEvent,
    AgentRunResult,
    AIMessageEvent,
    FinalAnswer,
    ModelCall,
    ModelCallStarted,
    StepStored,
    ToolResultEvent,
    TurnStarted,
)
from agentmemory.agents.tools import MemoryPolicy, Tool, ToolContext, ToolError, ToolOutcome, tool

__all__ = [
    "STUB_TEXT",
    "AIMessageEvent",
    "AgentConfig",
    "AgentEvent",
    "AgentInjector",
    "AgentNotRegistered",
    "AgentRunResult",
    "BaseToolCallingAgent",
    "FinalAnswer",
    "MemoryConfig",
    "MemoryPolicy",
    "ModelCall",
    "ModelCallStarted",
    "StepStored",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolResultEvent",
    "TurnStarted",
    "apply_memory_policy",
    "resolve_llm",
    "tool",
]
