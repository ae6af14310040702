"""Language model interface (``ChatModel``), adapters and test doubles."""

from agentmemory.llm.base import ChatModel, ChatResponse, Usage

__all__ = ["ChatModel", "ChatResponse", "Usage"]
