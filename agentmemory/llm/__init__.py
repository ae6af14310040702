"""Language model interface (``ChatModel``), adapters and test doubles."""

from agentmemory.llm.base import ChatModel, ChatResponse, OutputSchema, StructuredChatModel, Usage

__all__ = ["ChatModel", "ChatResponse", "OutputSchema", "StructuredChatModel", "Usage"]
