"""``AgentConfig`` and ``MemoryConfig``: which history, compactor and LLM an agent uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string

from agentmemory.conf import app_settings

__all__ = ["AgentConfig", "MemoryConfig", "resolve_class"]


@dataclass
class MemoryConfig:
    """How an agent remembers. Mutable: ``get_config()`` builds a fresh one on every call, so a
    subclass may change it (``config.memory = MemoryConfig(...)``) without touching anyone else's.

    Attributes:
        chat_history_class: class (or dotted path) built as ``cls(conversation,
            token_counter=...)``; ``PersistentChatHistory`` by default.
        compactor_class: class (or dotted path) built as ``cls(conversation_repo,
            conversation_id, llm, chat_history)``; ``None`` means "no compactor", which is an
            ``ImproperlyConfigured`` error for an agent with ``MEMORY_COMPACTOR_ENABLED = True``
            (system check ``agentmemory.E101``). The Celery task rebuilds the same class from
            its dotted path, so it must be importable at module level.
        token_counter: counts messages for storage and windows; ``None`` uses
            ``AGENTMEMORY['TOKEN_COUNTER']``.
        conversation_repo: the queryset or manager compactors read conversations from;
            ``None`` uses ``Conversation.objects``.
    """

    chat_history_class: type | str = "agentmemory.history.PersistentChatHistory"
    compactor_class: type | str | None = None
    token_counter: Any = None
    conversation_repo: Any = None

    def get_chat_history_class(self) -> type:
        return resolve_class(self.chat_history_class)

    def get_compactor_class(self) -> type | None:
        return None if self.compactor_class is None else resolve_class(self.compactor_class)

    @classmethod
    def from_settings(cls) -> MemoryConfig:
        """Defaults: ``PersistentChatHistory`` and ``AGENTMEMORY['COMPACTOR_CLASS']``
        (``LLMMemoryCompactor``)."""
        return cls(compactor_class=app_settings().COMPACTOR_CLASS)


@dataclass
class AgentConfig:
    """An agent's wiring, returned by ``BaseToolCallingAgent.get_config()``.

    Mutable, and a fresh instance on every ``get_config()`` call: the seed contract is
    ``config = super().get_config(); config.memory = MemoryConfig(...); return config``.

    Attributes:
        memory: the ``MemoryConfig``.
        llm: the name of an entry of ``AGENTMEMORY['LLMS']`` (``"default"``) used when no
            model is passed to the agent, or a ``ChatModel`` instance.
    """

    memory: MemoryConfig = field(default_factory=MemoryConfig.from_settings)
    llm: Any = "default"

    @classmethod
    def from_settings(cls) -> AgentConfig:
        return cls(memory=MemoryConfig.from_settings())


def resolve_class(value: type | str) -> type:
    """A class given as itself or as a dotted path.

    Raises:
        ImportError: the dotted path does not resolve.
    """
    return import_string(value) if isinstance(value, str) else value
