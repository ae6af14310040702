"""agentmemory: persistent memory for LLM agents, as a reusable Django app."""

__version__ = "0.1.0"
