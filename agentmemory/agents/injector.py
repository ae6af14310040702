"""``AgentInjector``: what one conversation's turn hands to the agent and to its tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.core.exceptions import ValidationError

from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import check_conversation_argument
from agentmemory.models import Conversation

if TYPE_CHECKING:
    from agentmemory.agents.base import BaseToolCallingAgent
    from agentmemory.compaction import BaseMemoryCompactor
    from agentmemory.history import PersistentChatHistory
    from agentmemory.llm.base import ChatModel
    from agentmemory.tokens import TokenCounter

__all__ = ["AgentInjector", "load_conversation"]


@dataclass
class AgentInjector:
    """The services of one conversation, built by ``BaseToolCallingAgent.get_injector``.

    Attributes:
        agent: the agent instance.
        conversation: the ``Conversation`` row.
        llm: the agent's ``ChatModel``.
        chat_history: ``MemoryConfig.chat_history_class(conversation, token_counter=...)``.
        memory_compactor: ``compactor_class(conversation_repo, conversation_id, llm,
            chat_history)`` when ``MEMORY_COMPACTOR_ENABLED``, else ``None``.
        token_counter: the counter used for storage and windows.
        knowledge_context: the owner's long-term memory block put into this turn's system
            prompt (``with_knowledge``), ``""`` when none.
        knowledge_fact_ids: ids of the facts that block shows (the memory block leaves them
            out).
        system_tokens: tokens of this turn's system prompt as sent (framing included), set
            once the prompt is known; the compactor leaves room for it in the window
            (``agentmemory.compaction.summary_token_budget``). ``None`` before.
    """

    agent: BaseToolCallingAgent
    conversation: Conversation
    llm: ChatModel
    chat_history: PersistentChatHistory
    memory_compactor: BaseMemoryCompactor | None
    token_counter: TokenCounter
    knowledge_context: str = ""
    knowledge_fact_ids: tuple[int, ...] = ()
    system_tokens: int | None = None

    @property
    def conversation_id(self) -> int:
        return self.conversation.pk

    @classmethod
    def build(
        cls, agent: BaseToolCallingAgent, conversation: Conversation | int | str | UUID
    ) -> AgentInjector:
        """Load the conversation and build its history and compactor from the agent's config.

        Raises:
            ConversationNotFound: no such conversation.
        """
        conv = load_conversation(conversation)
        memory = agent.config.memory
        counter = agent.token_counter
        history = memory.get_chat_history_class()(conv, token_counter=counter)
        compactor = None
        if agent.MEMORY_COMPACTOR_ENABLED:
            compactor_class = memory.get_compactor_class()
            repo = memory.conversation_repo if memory.conversation_repo is not None else Conversation.objects
            compactor = compactor_class(repo, conv.pk, agent.llm, history)  # type: ignore[misc]
        return cls(
            agent=agent,
            conversation=conv,
            llm=agent.llm,
            chat_history=history,
            memory_compactor=compactor,
            token_counter=counter,
        )


def load_conversation(conversation: Conversation | int | str | UUID | Any) -> Conversation:
    """The ``Conversation`` for an instance, a primary key or a public uuid.

    Raises:
        ConversationNotFound: no such conversation.
        TypeError: what cannot name a conversation (a bool, None, a float...).
    """
    check_conversation_argument(conversation)
    if isinstance(conversation, Conversation):
        return conversation
    try:
        if isinstance(conversation, int):
            return Conversation.objects.get(pk=conversation)
        return Conversation.objects.get(uuid=conversation)
    except (Conversation.DoesNotExist, ValidationError, ValueError, TypeError) as exc:
        raise ConversationNotFound(f"no conversation {conversation!r}") from exc
