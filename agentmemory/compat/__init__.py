"""Compatibility classes: the in-process memories of other frameworks, as their documents
describe them, kept in agentmemory's database. Change the import line and their examples run.

- ``agentmemory.compat.selectools``: ``ConversationMemory(max_messages=20, max_tokens=None)``,
  ``Message``, ``Role`` (selectools' memory module); ``KnowledgeMemory(storage_dir=...)`` (facts
  in the database, in a namespace standing for the directory), ``Agent``, ``AgentConfig``,
  ``AgentResult``, ``OpenAIProvider``, ``LocalProvider`` (its knowledge module and agent);
- ``agentmemory.compat.windlass``: ``BufferMemory``, ``WindowMemory``, ``SummaryMemory``,
  ``Message``, ``FakeLLM`` (windlass' conversation memories, one conversation per thread id);
- ``agentmemory.compat.agentspan``: ``ConversationMemory(max_messages=...)`` (agentspan's
  chat history), ``SemanticMemory(max_results=3)``, ``Agent``, ``AgentRuntime``, ``tool``
  (its agents run in process through our LLM adapters, ``"openai/gpt-4o"`` naming one).

Each trims what it returns the way its framework does; every message stays stored, and
``clear()`` deletes, as their ``clear`` forgets. docs/coming-from.md says what differs.
Import after Django is set up (the classes use the models).
"""

from agentmemory.compat.types import Message, Role, ToolCall

__all__ = ["Message", "Role", "ToolCall"]
