"""selectools' ``KnowledgeMemory``, ``Agent``, ``AgentConfig``, ``AgentResult`` and providers
(seed 001), over our knowledge memory and LLM adapters. Import them from
``agentmemory.compat.selectools``::

    from agentmemory.compat.selectools import (
        Agent, AgentConfig, ConversationMemory, KnowledgeMemory, LocalProvider, Message,
        OpenAIProvider, Role,
    )

The knowledge memory is ``agentmemory.knowledge.KnowledgeMemory`` in a namespace standing
for ``storage_dir`` (``namespace_for_dir``): no MEMORY.md or log file is written, and the
same directory reaches the same facts from any process, after a restart too. The agent runs
selectools' flow (its memory's window, the knowledge block as a system message, the
auto-registered ``remember`` tool) through ``agentmemory.compat.loop``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agentmemory.agents.tools import Tool
from agentmemory.compat.loop import as_tools, last_human_text, run_loop
from agentmemory.compat.owners import namespace_for_dir, owner_or_shared
from agentmemory.compat.types import Message, Role, ToolCall, from_chat_message, to_chat_message
from agentmemory.conf import get_token_counter
from agentmemory.knowledge import KnowledgeMemory as StoredKnowledgeMemory
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.llm.structured import without_reasoning
from agentmemory.messages import ChatMessage
from agentmemory.validation import whole_number

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentResult",
    "KnowledgeMemory",
    "LocalProvider",
    "OpenAIProvider",
]

logger = logging.getLogger(__name__)

#: the model a selectools ``AgentConfig`` names by default (selectools' ``AgentConfig.model``)
DEFAULT_MODEL = "gpt-5-mini"
#: what summarize-on-trim asks its model (selectools' wording is its own; this says the same)
TRIM_SUMMARY_SYSTEM = "You write short, exact summaries of conversation excerpts."
TRIM_SUMMARY_PROMPT = (
    "These messages were dropped from the conversation's memory. Summarize them in 2-3 "
    "sentences (at most {limit} tokens), keeping the facts, names, dates, decisions and open "
    "questions someone continuing the conversation needs:\n\n{transcript}"
)
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the tools you are given when they help."
REMEMBER_DESCRIPTION = "Save important information to long-term memory for future reference"


class KnowledgeMemory:
    """selectools' cross-session knowledge store, kept as facts in the database.

    Args:
        storage_dir: names the store: facts live in the namespace ``"selectools:<absolute
            path>"`` (``namespace_for_dir``). Nothing is written there; two objects given the
            same directory (in any process, after a restart) read and write the same facts.
        max_log_days: transient entries older than this are hidden and pruned (days).
        max_context_entries: most recent entries in ``build_context()``.
        owner: the user the facts belong to; default the shared compat user
            (``agentmemory.compat.owners``), so a directory is shared as a directory is.

    Raises:
        ValueError: a negative ``max_log_days`` or a ``max_context_entries`` below 1.
        MemoryScopeError: an ``owner`` that is not a saved user or a user id.

    ``memory`` is the ``agentmemory.knowledge.KnowledgeMemory`` underneath (importance, TTL,
    ``recall``, ``forget`` are there).
    """

    def __init__(
        self,
        storage_dir: str | Path = "./agent_memory",
        max_log_days: int = 30,
        max_context_entries: int = 50,
        *,
        owner: Any = None,
    ) -> None:
        self.storage_dir = str(storage_dir)
        self.namespace = namespace_for_dir(storage_dir)
        self.memory = StoredKnowledgeMemory(
            owner_or_shared(owner),
            namespace=self.namespace,
            max_log_days=max_log_days,
            max_context_entries=max_context_entries,
        )

    @property
    def max_log_days(self) -> int:
        return self.memory.max_log_days

    @property
    def max_context_entries(self) -> int:
        return self.memory.max_context_entries

    def __repr__(self) -> str:
        return f"KnowledgeMemory(storage_dir={self.storage_dir!r}, namespace={self.namespace!r})"

    def remember(self, content: str, category: str = "general", persistent: bool = False) -> str:
        """Store a knowledge entry; returns a confirmation message.

        Raises:
            InvalidFactError: empty or unstorable content, or a bad category.
        """
        return self.memory.remember(content, category, persistent)

    def build_context(self) -> str:
        """The ``[Long-term Memory]`` and ``[Recent Memory]`` block ("" when empty)."""
        return self.memory.build_context()

    def get_persistent_facts(self) -> dict[str, list[str]]:
        """All persistent facts, by category."""
        return self.memory.get_persistent_facts()

    def get_recent_entries(self, days: int = 7, limit: int = 50) -> list[dict[str, Any]]:
        """Recent entries of the last ``days`` days, newest first: dicts with ``timestamp``,
        ``category``, ``content``, ``persistent`` (and ``id``, ``importance``, ``expires_at``)."""
        return self.memory.get_recent_entries(days=days, limit=limit)

    def prune_logs(self, max_days: int | None = None) -> int:
        """Delete transient entries older than ``max_days`` (default ``max_log_days``) and
        expired ones; returns how many entries were deleted (selectools counts log files)."""
        return self.memory.prune_logs(max_days)

    def clear(self) -> None:
        """Remove all knowledge of this store."""
        self.memory.clear()

    def clear_logs(self) -> None:
        """Remove the transient entries; persistent facts stay."""
        self.memory.clear_logs()


@dataclass
class AgentConfig:
    """The part of selectools' ``AgentConfig`` these classes act on. Other selectools fields
    (sessions, entity memory, guardrails, ...) are not accepted: a ``TypeError`` names them.

    Attributes:
        model: the model name given to the provider (selectools' default ``"gpt-5-mini"``).
        temperature: sampling temperature (the OpenAI adapter sends it).
        max_tokens: accepted for compatibility; the reply length is the provider's default.
        max_iterations: model calls per run at most (selectools' default 6).
        system_prompt: replaces the default instructions.
        knowledge_memory: a ``KnowledgeMemory``: its block goes into every run and the
            ``remember`` tool is registered.
        name: the agent's name.
        summarize_on_trim: when the memory's window pushes messages out
            (``ConversationMemory._last_trimmed``), ask a model for a 2-3 sentence summary of
            them and add it to ``memory.summary``, which every later run sends as a
            ``[Conversation Summary]`` system message (selectools' summarize-on-trim). A
            failure is logged and the run goes on.
        summarize_provider: the provider (or one of our ``ChatModel``s) of those summaries;
            default the agent's.
        summarize_model: its model name; default ``model``.
        summarize_max_tokens: most tokens of one summary (stated in the request, and a
            longer reply is cut to it by the configured token counter).
    """

    name: str = "agent"
    model: str = DEFAULT_MODEL
    temperature: float = 0.0
    max_tokens: int = 1000
    max_iterations: int = 6
    system_prompt: str | None = None
    knowledge_memory: KnowledgeMemory | None = None
    summarize_on_trim: bool = False
    summarize_provider: Any = None
    summarize_model: str | None = None
    summarize_max_tokens: int = 150


@dataclass
class AgentResult:
    """selectools' result of a run: the final ``message``, the last tool's ``tool_name`` and
    ``tool_args``, ``iterations`` (model calls) and every ``tool_calls``; ``content`` and
    ``role`` read the message. ``usage`` is the summed token usage (tokens), ``None`` when
    no call reported it."""

    message: Message
    tool_name: str | None = None
    tool_args: dict[str, Any] = field(default_factory=dict)
    iterations: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None

    @property
    def content(self) -> str:
        return self.message.content

    @property
    def role(self) -> Role:
        return self.message.role


class OpenAIProvider:
    """selectools' OpenAI provider over ``agentmemory.llm.openai.OpenAIChatModel``.

    Args:
        api_key: default ``OPENAI_API_KEY`` (read by the SDK).
        default_model: the model when the agent's config names none.
        base_url: default ``OPENAI_BASE_URL`` (an OpenAI-compatible server); with a base URL
            and no key, the key ``"not-needed"`` is sent.
        timeout, max_retries: per request (seconds) and SDK retries.
    """

    name = "openai"

    def __init__(
        self,
        api_key: str | None = None,
        default_model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.api_key = api_key
        self.default_model = default_model
        self.base_url = base_url if base_url is not None else (os.environ.get("OPENAI_BASE_URL") or None)
        self.timeout = timeout
        self.max_retries = max_retries

    def chat_model(self, model: str | None, temperature: float | None = None) -> ChatModel:
        """Our ``ChatModel`` for ``model`` (default ``default_model``)."""
        from agentmemory.llm.openai import OpenAIChatModel

        return OpenAIChatModel(
            model=model or self.default_model,
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=self.max_retries,
            temperature=temperature,
        )


class _EchoModel:
    """``LocalProvider``'s model: answers ``"[local provider: <model>] <newest user text>"``,
    never calls a tool, reports zero usage."""

    def __init__(self, model: str) -> None:
        self.model_name = model

    def invoke(self, messages: Sequence[ChatMessage], *, tools: Any = None) -> ChatResponse:
        text = last_human_text(messages) or "No user message provided."
        return ChatResponse(
            message=ChatMessage.ai(f"[local provider: {self.model_name}] {text}"),
            usage=Usage(),
            model=self.model_name,
            finish_reason="stop",
        )

    async def ainvoke(self, messages: Sequence[ChatMessage], *, tools: Any = None) -> ChatResponse:
        return self.invoke(messages, tools=tools)


class LocalProvider:
    """selectools' offline provider: no model is called; each reply echoes the newest user
    message as ``"[local provider: <model>] <text>"`` (selectools' ``LocalProvider``)."""

    name = "local"

    def chat_model(self, model: str | None, temperature: float | None = None) -> ChatModel:
        return _EchoModel(model or DEFAULT_MODEL)


def _chat_model(provider: Any, model: str, temperature: float | None) -> ChatModel:
    """The ``ChatModel`` of ``provider`` for ``model``: ``provider.chat_model(model,
    temperature)`` (``OpenAIProvider``, ``LocalProvider``), or ``provider`` itself when it is
    one of our ``ChatModel``s."""
    make = getattr(provider, "chat_model", None)
    return make(model, temperature) if callable(make) else cast(ChatModel, provider)


def _cut_to_tokens(text: str, limit: int) -> str:
    """``text`` cut at a word to at most ``limit`` tokens by the configured counter (as a
    provider's ``max_tokens`` would have cut the reply)."""
    counter = get_token_counter()
    if counter.count_text(text) <= limit:
        return text
    words = text.split()
    low, high = 0, len(words)
    while low < high:  # the most words that fit
        middle = (low + high + 1) // 2
        if counter.count_text(" ".join(words[:middle])) <= limit:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])


def _remember_tool(knowledge: KnowledgeMemory) -> Tool:
    """selectools' auto-registered ``remember`` tool over ``knowledge`` (its definition: the
    description and the docstring's parameters are the seed's)."""

    def remember(content: str, category: str = "general", persistent: bool = False) -> str:
        """Remember a fact or piece of information.

        Args:
            content: The information to remember.
            category: Category for organization (e.g., "preferences", "personal", "technical").
            persistent: Whether this should be stored permanently.
        """
        return knowledge.remember(content, category, persistent)

    return Tool(remember, name="remember", description=REMEMBER_DESCRIPTION)


class Agent:
    """selectools' agent: ``run`` sends the memory's window (or the messages alone), with
    the knowledge block as a system message, runs the tools the model calls, and returns an
    ``AgentResult``.

    Args:
        tools: functions or ``@tool`` objects (``tool`` of this module or of
            ``agentmemory.agents``): our ``Tool``s, whose arguments are checked against the
            signature and types before the function runs (``agentmemory.compat.loop.as_tools``).
        provider: an ``OpenAIProvider``, a ``LocalProvider``, any object with
            ``chat_model(model, temperature)``, or one of our ``ChatModel``s.
        memory: a ``ConversationMemory`` (``agentmemory.compat.selectools``): its window is
            sent and every message of the run is added to it (the user messages first, each
            tool step, then the answer).
        config: an ``AgentConfig``; with ``knowledge_memory`` set, a ``remember`` tool is added
            to ``tools``; with ``summarize_on_trim``, each add that pushes messages out of the
            memory's window is followed by a summary of them (``AgentConfig``).

    Raises:
        TypeError: a tool that is not callable or that ``Tool`` refuses (``as_tools``); a
            ``summarize_max_tokens`` that is not a whole number.
        ValueError: two tools with one name (``remember`` included); a
            ``summarize_max_tokens`` below 1.
    """

    def __init__(
        self,
        tools: Sequence[Any] | None = None,
        provider: Any = None,
        memory: Any = None,
        config: AgentConfig | None = None,
    ) -> None:
        self.config = config if config is not None else AgentConfig()
        self.provider: Any = provider if provider is not None else OpenAIProvider()
        self.memory = memory
        added = [] if self.config.knowledge_memory is None else [_remember_tool(self.config.knowledge_memory)]
        self.tools: list[Tool] = as_tools([*(tools or ()), *added])
        self.llm: ChatModel = _chat_model(self.provider, self.config.model, self.config.temperature)
        self.summarize_llm: ChatModel | None = None
        if self.config.summarize_on_trim:
            whole_number(self.config.summarize_max_tokens, "summarize_max_tokens", minimum=1)
            provider = self.config.summarize_provider
            self.summarize_llm = (
                self.llm
                if provider is None and not self.config.summarize_model
                else _chat_model(
                    provider if provider is not None else self.provider,
                    self.config.summarize_model or self.config.model,
                    self.config.temperature,
                )
            )

    def _add(self, messages: Sequence[Message | ChatMessage]) -> None:
        """Add ``messages`` to the memory, then summarise what that pushed out of its window
        when ``summarize_on_trim`` is set."""
        if self.memory is None:
            return
        self.memory.add_many(messages)
        if self.summarize_llm is not None:
            self._summarize_trimmed(list(getattr(self.memory, "_last_trimmed", None) or ()))

    def _summarize_trimmed(self, trimmed: list[Message]) -> None:
        """Add a summary of ``trimmed`` to ``memory.summary`` (after the one there, as
        selectools does); a failed or unusable reply is logged and changes nothing."""
        if not trimmed or self.summarize_llm is None:
            return
        limit = self.config.summarize_max_tokens
        transcript = "\n".join(f"{m.role.value.upper()}: {m.content or ''}" for m in trimmed)
        request = [
            ChatMessage.system(TRIM_SUMMARY_SYSTEM),
            ChatMessage.human(TRIM_SUMMARY_PROMPT.format(limit=limit, transcript=transcript)),
        ]
        try:
            response = self.summarize_llm.invoke(request)
            text = without_reasoning(response.message.text).strip()
            if response.refused or not text:
                logger.warning("summarize-on-trim: no summary of %d trimmed messages", len(trimmed))
                return
            text = _cut_to_tokens(text, limit)
            existing = getattr(self.memory, "summary", None)
            self.memory.summary = f"{existing} {text}" if existing else text
        except Exception:
            # selectools never fails a run for a summary; the trimmed messages stay stored
            logger.warning("summarize-on-trim of %d messages failed", len(trimmed), exc_info=True)

    def _context(self, messages: list[Message]) -> list[ChatMessage]:
        history = list(messages)
        if self.memory is not None:
            history = self.memory.get_history() + history
            self._add(messages)
            summary = getattr(self.memory, "summary", None)
            if summary:
                history.insert(0, Message(role=Role.SYSTEM, content=f"[Conversation Summary] {summary}"))
        knowledge = self.config.knowledge_memory
        if knowledge is not None:
            block = knowledge.build_context()
            if block:
                history.insert(0, Message(role=Role.SYSTEM, content=block))
        prompt = self.config.system_prompt or DEFAULT_SYSTEM_PROMPT
        return [ChatMessage.system(prompt)] + [to_chat_message(m) for m in history]

    def run(self, messages: str | Sequence[Message] | Mapping[str, Any]) -> AgentResult:
        """Answer ``messages`` (a text is one user message).

        Raises:
            LLMError: a model call failed (what was added to the memory before stays).
            InvalidMessageError: a message the memory cannot store.
        """
        if isinstance(messages, str):
            batch = [Message(role=Role.USER, content=messages)]
        else:
            batch = [m if isinstance(m, Message) else Message.from_dict(m) for m in messages]  # type: ignore[arg-type]
        sent = self._context(batch)

        def store(step: list[ChatMessage]) -> None:
            self._add(step)

        loop = run_loop(self.llm, sent, self.tools, max_iterations=self.config.max_iterations, on_step=store)
        calls = [ToolCall(tool_name=c.name, parameters=dict(c.arguments), id=c.id) for c, _, _ in loop.calls]
        if loop.final is not None:
            message = from_chat_message(loop.final)
        else:
            message = Message(
                role=Role.ASSISTANT,
                content=f"Stopped after {loop.iterations} iterations without a final answer.",
            )
        return AgentResult(
            message=message,
            tool_name=calls[-1].tool_name if calls else None,
            tool_args=dict(calls[-1].parameters) if calls else {},
            iterations=loop.iterations,
            tool_calls=calls,
            usage=loop.usage if loop.iterations else None,
        )
