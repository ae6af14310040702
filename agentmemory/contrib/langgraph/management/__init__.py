"""Management commands of ``agentmemory.contrib.langgraph``."""
