"""``BaseToolCallingAgent``: a tool-calling loop whose memory lives in agentmemory's storage.

One turn (``run``, ``arun``, ``stream``, ``astream``):

1. store the human message;
2. build the context window (system prompt, summary, recent history) with
   ``ContextWindowBuilder`` and apply the tools' memory policies to earlier turns;
3. call the LLM with the tool declarations;
4. if it calls tools: run them (concurrently in the async path), store the AI message and its
   results in ``tool_calls`` order as one atomic step, and go back to 2, at most
   ``MAX_TOOL_ROUNDS`` times;
5. store the answer, then the compactor's ``compact_if_needed()`` (agentmemory's own compactors go
   through ``request_compaction()``: inline, a Celery task or nothing, by ``COMPACTION_MODE``).

No database transaction is held while the model or a tool runs; each step is stored whole,
so a crash leaves a valid history: seq order, tool exchanges stored whole, every window within
its budget and starting on a human message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, ClassVar
from uuid import UUID

from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.utils.functional import Promise

from agentmemory.agent_registry import agent_scope
from agentmemory.agents import registry
from agentmemory.agents.config import AgentConfig, MemoryConfig
from agentmemory.agents.injector import AgentInjector
from agentmemory.agents.memory import PolicyOutcome, apply_memory_policy
from agentmemory.agents.memory_tools import memory_tools_for, with_knowledge
from agentmemory.agents.replies import clear_of, storable_reply
from agentmemory.agents.results import (
    STOP_ANSWER,
    STOP_MAX_TOOL_ROUNDS,
    AgentEvent,
    AgentRunResult,
    AIMessageEvent,
    FinalAnswer,
    ModelCall,
    ModelCallStarted,
    StepStored,
    ToolResultEvent,
    TurnStarted,
    add_usage,
)
from agentmemory.agents.tools import (
    MemoryPolicy,
    Tool,
    ToolOutcome,
    not_run_outcome,
    prepared_call,
)
from agentmemory.calls import USAGE_COUNTED, USAGE_PROVIDER, ChatCallRecorder, counted_usage, tools_text
from agentmemory.closing import build_closing_gap
from agentmemory.compaction import BaseMemoryCompactor
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.llm.config import DEFAULT_LLM, get_llm
from agentmemory.messages import ChatMessage, Role, ToolCall, pending_calls
from agentmemory.models import Conversation
from agentmemory.validation import json_problem, system_prompt_tokens, text_problem

__all__ = ["BaseToolCallingAgent", "resolve_llm"]

logger = logging.getLogger("agentmemory.agents")

LLM_HELP = (
    "No LLM is configured. Configure one of:\n"
    "  - AGENTMEMORY['LLMS'] = {'default': {'BACKEND': 'agentmemory.llm.openai.OpenAIChatModel', "
    "'OPTIONS': {'model': 'gpt-4o-mini'}}} in settings;\n"
    "  - the environment: OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (an OpenAI-compatible server such "
    "as Ollama: http://127.0.0.1:11434/v1), or ANTHROPIC_API_KEY (Anthropic), with AGENTMEMORY_LLM_MODEL "
    "for the model name (AGENTMEMORY_LLM_PROVIDER=openai|anthropic picks one when both are set);\n"
    "  - or pass a ChatModel to the agent: MyAgent(llm=...)."
)


def resolve_llm(spec: Any) -> ChatModel | None:
    """The ``ChatModel`` for ``AgentConfig.llm``: an instance as is, or a configured name
    resolved by ``agentmemory.llm.config.get_llm`` (``AGENTMEMORY['LLMS']``, or the
    environment for ``"default"``). Returns ``None`` when nothing is configured.

    Raises:
        ImproperlyConfigured: a name that is not configured, or a broken configuration.
    """
    if spec is None:
        spec = DEFAULT_LLM
    if not isinstance(spec, str):
        return spec
    return get_llm(spec)


def declared_system_prompt(agent_cls: type[BaseToolCallingAgent]) -> Any:
    """``SYSTEM_PROMPT`` as the class declares it: text (a lazy translation, ``gettext_lazy``,
    included), a ``property``, or a function (a staticmethod or classmethod unwrapped; a
    plain function is not bound to the agent, except a method whose first parameter is
    ``self``, see ``_bound_prompt``)."""
    prompt = inspect.getattr_static(agent_cls, "SYSTEM_PROMPT")
    if isinstance(prompt, staticmethod | classmethod):
        prompt = prompt.__get__(None, agent_cls)
    return prompt


def _is_method(prompt: Any) -> bool:
    """Whether ``prompt`` is a function written as a method of the agent: its first
    parameter is named ``self`` (``def SYSTEM_PROMPT(self): ...`` or ``(self, injector)``).
    Such a function was called with the injector in place of ``self``, and failed (an
    ``AttributeError`` on the injector) or read the injector as the agent."""
    if not inspect.isfunction(prompt):
        return False
    try:
        first = next(iter(inspect.signature(prompt).parameters.values()), None)
    except (TypeError, ValueError):
        return False
    return (
        first is not None
        and first.name == "self"
        and first.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    )


def _bound_prompt(prompt: Any, agent: Any) -> Any:
    """``prompt`` bound to ``agent`` when it is written as a method (``_is_method``): what
    is left to call takes the injector or nothing, as any other ``SYSTEM_PROMPT`` function."""
    return prompt.__get__(agent, type(agent)) if _is_method(prompt) else prompt


def _prompt_arguments(prompt: Any) -> int | None:
    """How many arguments to call a ``SYSTEM_PROMPT`` function with: 1 (the injector) when
    it takes one, 0 when it takes none, ``None`` when it can take neither (or is not a
    function)."""
    if not callable(prompt):
        return None
    try:
        signature = inspect.signature(prompt)
    except (TypeError, ValueError):  # a callable whose signature cannot be read: as before
        return 1
    for arguments in (1, 0):
        try:
            signature.bind(*([None] * arguments))
        except TypeError:
            continue
        return arguments
    return None


def system_prompt_problem(agent_cls: type[BaseToolCallingAgent]) -> str | None:
    """Why ``agent_cls.SYSTEM_PROMPT`` cannot make a system prompt, or ``None`` if it can."""
    prompt = declared_system_prompt(agent_cls)
    if isinstance(prompt, str | Promise | property):
        return None  # a property's value is checked when a turn reads it
    label = f"{agent_cls.__module__}.{agent_cls.__qualname__}.SYSTEM_PROMPT"
    if not callable(prompt):
        return f"{label} is {type(prompt).__name__} {prompt!r}, neither text nor a function"
    if _is_method(prompt):
        prompt = functools.partial(prompt, None)  # ``self`` is the agent
    if _prompt_arguments(prompt) is None:
        return f"{label} is a function that takes neither one argument (the AgentInjector) nor none"
    return None


SYSTEM_PROMPT_HINT = (
    "Set SYSTEM_PROMPT to text, or to a function returning text that takes the AgentInjector "
    "(def prompt(injector): ...) or nothing (def prompt(): ...), or an async def one."
)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def compactor_problem(agent_cls: type[BaseToolCallingAgent], config: AgentConfig) -> str | None:
    """Why ``config`` cannot serve ``agent_cls``'s memory compactor, or ``None`` if it can."""
    if not agent_cls.MEMORY_COMPACTOR_ENABLED:
        return None
    if config.memory.compactor_class is None:
        return (
            f"{agent_cls.__module__}.{agent_cls.__qualname__} has MEMORY_COMPACTOR_ENABLED = True but its "
            "get_config() names no compactor class (MemoryConfig(compactor_class=None))"
        )
    try:
        config.memory.get_compactor_class()
    except ImportError as exc:
        path = config.memory.compactor_class
        return f"{agent_cls.__qualname__}: compactor class {path!r} cannot be imported: {exc}"
    return None


COMPACTOR_HINT = (
    "Return AgentConfig(memory=MemoryConfig(compactor_class='agentmemory.compaction.LLMMemoryCompactor')) "
    "(or your own BaseMemoryCompactor subclass) from get_config(), or set MEMORY_COMPACTOR_ENABLED = False."
)


#: the injector of the turn an agent is running, per thread and asyncio task (``_injector``)
_RUNNING: ContextVar[AgentInjector | None] = ContextVar("agentmemory_running_turn", default=None)


def _forget_running(token: Any) -> None:
    """Undo ``_RUNNING.set``; a generator closed from another context (garbage collected in
    another thread) cannot, and its turn is over anyway."""
    with contextlib.suppress(ValueError):
        _RUNNING.reset(token)


class BaseToolCallingAgent:
    """Base class of tool-calling agents with persistent memory.

    Class variables:
        NAME: a human-readable name.
        AGENT_KEY: the registry key, stored on conversations (``Conversation.agent_key``).
            A subclass that sets it is registered automatically
            (``class A(BaseToolCallingAgent, register=False)`` opts out).
        SYSTEM_PROMPT: text (``gettext_lazy`` text too), a property, or a callable taking
            the ``AgentInjector`` or nothing and returning text (a method whose first
            parameter is ``self`` is called on the agent); sent first on every model call,
            never stored.
        TOOLS: ``@tool`` functions (plain functions are wrapped with default options).
        MEMORY_COMPACTOR_ENABLED: build a compactor and call ``compact_if_needed()`` after
            each turn (off by default).
        MEMORY_RECALL_ENABLED: every model call of a turn carries a memory block: what the
            owner's past conversations and facts hold about the newest human message and
            the turn so far (``ContextWindowBuilder(memory_recall=True)``), within the
            window's budget. Scoped by ``KNOWLEDGE_MEMORY_AGENT_KEY`` and
            ``KNOWLEDGE_MEMORY_NAMESPACE``; facts already in the system prompt's knowledge
            block are not repeated. A conversation without an owner gets none, and a recall
            that fails is logged and the call sent without the block (off by default).
        CONVERSATION_HISTORY_TOKEN_LIMIT: budget of each context window (tokens); ``None``
            uses ``AGENTMEMORY['DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT']`` (10,000).
        MAX_TOOL_ROUNDS: tool rounds per turn; when the model still calls tools after that,
            the calls are answered with an error result and the turn stops
            (``stopped_reason = "max_tool_rounds"``).

    Args:
        llm: the ``ChatModel``; defaults to ``get_config().llm`` (a configured name).
        config: overrides ``get_config()``.

    Raises:
        ImproperlyConfigured: ``MEMORY_COMPACTOR_ENABLED`` without a compactor class (also the
            system check ``agentmemory.E101``), duplicate tool names, or no LLM available.
    """

    NAME: ClassVar[str] = ""
    AGENT_KEY: ClassVar[str] = ""
    SYSTEM_PROMPT: ClassVar[str | Callable[[AgentInjector], str]] = "You are a helpful assistant."
    TOOLS: ClassVar[Sequence[Tool | Callable[..., Any]]] = ()
    MEMORY_COMPACTOR_ENABLED: ClassVar[bool] = False
    #: registers the ``remember`` and ``recall`` tools and puts the owner's long-term memory
    #: into the system prompt (``agentmemory.agents.memory_tools``)
    KNOWLEDGE_MEMORY_ENABLED: ClassVar[bool] = False
    #: puts a memory block recalled from the owner's past into every model call
    #: (``ContextWindowBuilder(memory_recall=True)``)
    MEMORY_RECALL_ENABLED: ClassVar[bool] = False
    CONVERSATION_HISTORY_TOKEN_LIMIT: ClassVar[int | None] = None
    MAX_TOOL_ROUNDS: ClassVar[int] = 8

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Only a class that sets its own key registers: a subclass inheriting a key must not
        # take it over from its parent.
        if register and cls.__dict__.get("AGENT_KEY"):
            registry.register(cls)

    def __init__(self, llm: ChatModel | None = None, *, config: AgentConfig | None = None) -> None:
        cls = type(self)
        self.config = config if config is not None else cls.get_config()
        problem = compactor_problem(cls, self.config)
        if problem:
            raise ImproperlyConfigured(f"{problem}. {COMPACTOR_HINT}")
        self.tools: dict[str, Tool] = {t.name: t for t in cls.get_tools()}
        self.token_counter = self.config.memory.token_counter or get_token_counter()
        resolved = llm if llm is not None else resolve_llm(self.config.llm)
        if resolved is None:
            raise ImproperlyConfigured(f"{cls.__qualname__}: {LLM_HELP}")
        self.llm: ChatModel = resolved

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} {self.AGENT_KEY!r} llm={getattr(self.llm, 'model_name', '?')!r}>"

    # -- configuration ------------------------------------------------------------------

    @classmethod
    def get_config(cls) -> AgentConfig:
        """The agent's wiring; override to choose another history or compactor class.

        The default comes from settings: ``PersistentChatHistory`` and
        ``AGENTMEMORY['COMPACTOR_CLASS']`` (``LLMMemoryCompactor``), LLM ``"default"``.
        """
        return AgentConfig(memory=MemoryConfig.from_settings())

    @classmethod
    def get_tools(cls) -> list[Tool]:
        """``TOOLS`` as ``Tool`` objects.

        Raises:
            ImproperlyConfigured: two tools share a name, or an entry is not callable.
        """
        tools: list[Tool] = []
        seen: set[str] = set()
        for entry in cls.TOOLS:
            if isinstance(entry, Tool):
                item = entry
            elif callable(entry):
                item = Tool(entry)
            else:
                raise ImproperlyConfigured(
                    f"{cls.__qualname__}.TOOLS holds {entry!r}, which is not a function"
                )
            if item.name in seen:
                raise ImproperlyConfigured(f"{cls.__qualname__}.TOOLS has two tools named {item.name!r}")
            seen.add(item.name)
            tools.append(item)
        return tools + memory_tools_for(cls, seen)

    @property
    def token_limit(self) -> int:
        """Budget of each context window (tokens)."""
        limit = self.CONVERSATION_HISTORY_TOKEN_LIMIT
        return limit if limit is not None else app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT

    @property
    def _conversation_history_token_limit(self) -> int:
        """``token_limit`` under the seed document's name (tokens)."""
        return self.token_limit

    @property
    def _injector(self) -> AgentInjector:
        """The injector of the turn this agent is running in this thread or asyncio task,
        under the seed document's name, for code inside the agent's own methods (an
        overridden ``build_window``, a tool, a hook), as the seed writes its window::

            ContextWindowBuilder(
                chat_history=self._injector.chat_history,
                memory_compactor=self._injector.memory_compactor,
            ).build(max_tokens=self._conversation_history_token_limit)

        One agent instance may run turns of several conversations at once: each thread or
        task sees its own turn's injector.

        Raises:
            AttributeError: no turn of this agent is running here (outside ``run``,
                ``stream`` and their async forms, use ``get_injector(conversation)``).
        """
        injector = _RUNNING.get()
        if injector is None or injector.agent is not self:
            raise AttributeError(
                f"{type(self).__qualname__} is running no turn here: _injector exists inside a turn "
                "(run, stream, arun, astream); elsewhere use get_injector(conversation)"
            )
        return injector

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The declarations sent to the model, in ``TOOLS`` order."""
        return [t.schema() for t in self.tools.values()]

    def memory_policy(self, tool_name: str) -> MemoryPolicy:
        """The memory policy of a tool (``REPLAY`` for names the agent does not know)."""
        found = self.tools.get(tool_name)
        return found.memory if found is not None else MemoryPolicy.REPLAY

    def get_system_prompt(self, injector: AgentInjector) -> str:
        """``SYSTEM_PROMPT`` as text, with the owner's long-term memory block when
        ``KNOWLEDGE_MEMORY_ENABLED``. A function is called with the injector when it takes an
        argument, with none when it takes none (seed 003's ``build_instructions()``); an
        ``async def`` function is awaited. Called before the turn stores anything: an error
        here leaves no unanswered message.

        Raises:
            ImproperlyConfigured: ``SYSTEM_PROMPT`` is neither text nor a function callable
                with the injector or with nothing (also the system check
                ``agentmemory.E105``), or its function returned something other than text
                (``None``, from a missing ``return``, was sent as the prompt "None").
        """
        cls = type(self)
        prompt = declared_system_prompt(cls)
        if isinstance(prompt, property):
            # read on the agent: its value is text or a function, as a declared one
            prompt = getattr(self, "SYSTEM_PROMPT")  # noqa: B009  # the class declares a function type
            if (
                callable(prompt)
                and not isinstance(prompt, str | Promise)
                and _prompt_arguments(prompt) is None
            ):
                raise ImproperlyConfigured(
                    f"{cls.__module__}.{cls.__qualname__}.SYSTEM_PROMPT (a property) gave a function "
                    f"that takes neither one argument (the AgentInjector) nor none. {SYSTEM_PROMPT_HINT}"
                )
        if isinstance(prompt, str | Promise):
            return with_knowledge(self, injector, str(prompt))
        prompt = _bound_prompt(prompt, self)
        arguments = _prompt_arguments(prompt)
        if arguments is None:
            if not callable(prompt):
                raise ImproperlyConfigured(
                    f"{cls.__module__}.{cls.__qualname__}.SYSTEM_PROMPT is {type(prompt).__name__} "
                    f"{prompt!r}, neither text nor a function. {SYSTEM_PROMPT_HINT}"
                )
            raise ImproperlyConfigured(f"{system_prompt_problem(cls)}. {SYSTEM_PROMPT_HINT}")
        text = prompt(injector) if arguments else prompt()
        if inspect.isawaitable(text):
            # sent as "<coroutine object ...>" before; in ``arun`` this runs in a worker
            # thread, from which the awaitable runs on the turn's event loop
            text = async_to_sync(_awaited)(text)
        if not isinstance(text, str | Promise):
            raise ImproperlyConfigured(
                f"{cls.__module__}.{cls.__qualname__}.SYSTEM_PROMPT returned {type(text).__name__} "
                f"{text!r}, not text. {SYSTEM_PROMPT_HINT}"
            )
        return with_knowledge(self, injector, str(text))

    # -- conversations ------------------------------------------------------------------

    def start_conversation(
        self, owner: Any = None, title: str = "", metadata: Mapping[str, Any] | None = None
    ) -> Conversation:
        """Create a conversation for this agent (``agent_key = AGENT_KEY``).

        Args:
            title: at most 200 characters (the column's), without NUL or lone surrogates.
            metadata: a JSON object the database stores (no NaN, infinities, NUL or lone
                surrogates), as the API requires of a conversation's.

        Raises:
            ValueError: a title or metadata the API refuses too, before any query (the
                database refused them, each its own way: PostgreSQL a NUL, a long title or
                NaN, SQLite NaN; SQLite kept a long title whole).
        """
        metadata = dict(metadata or {})
        limit = Conversation._meta.get_field("title").max_length or 0
        if not isinstance(title, str) or len(title) > limit or text_problem(title):
            raise ValueError(
                f"title must be text of at most {limit} characters without NUL or lone surrogates"
            )
        problem = json_problem(metadata)
        if problem:
            raise ValueError(f"metadata {problem}")
        return Conversation.objects.create(
            owner=owner, title=title, agent_key=self.AGENT_KEY, metadata=metadata
        )

    async def astart_conversation(
        self, owner: Any = None, title: str = "", metadata: Mapping[str, Any] | None = None
    ) -> Conversation:
        return await sync_to_async(self.start_conversation)(owner, title, metadata)

    def get_injector(self, conversation: Conversation | int | str | UUID) -> AgentInjector:
        """The services for one conversation (instance, primary key or public uuid).

        Raises:
            ConversationNotFound: no such conversation.
        """
        return AgentInjector.build(self, conversation)

    def get_window_builder(self, injector: AgentInjector, system_prompt: str) -> ContextWindowBuilder:
        """The builder of this turn's windows. With a compactor, its ``get_summary()`` gives
        the summary and a window that would leave stored messages in neither itself nor the
        summary first gets a compaction (``AGENTMEMORY['CONTEXT_GAP_POLICY']``, "close" by
        default). Without one, the stored summary is sent and no compaction is asked for:
        what trimming leaves out is reported, at WARNING under "close" (no memory
        compactor), at INFO under "report", not at all under "ignore". With
        ``MEMORY_RECALL_ENABLED`` each window carries the memory block
        (``memory_recall=True``, scoped by ``KNOWLEDGE_MEMORY_AGENT_KEY`` and
        ``KNOWLEDGE_MEMORY_NAMESPACE``, leaving out the facts of the system prompt's knowledge
        block)."""
        memory: dict[str, Any] = {"memory_recall": False}
        if self.MEMORY_RECALL_ENABLED:
            agent_key, namespace = agent_scope(self)
            memory = {
                "memory_recall": True,
                "memory_agent_key": agent_key,
                "memory_namespace": namespace,
                "memory_exclude_fact_ids": injector.knowledge_fact_ids,
                # what the knowledge block says was said; the rest of the prompt is instructions
                "memory_said_in": (injector.knowledge_context,) if injector.knowledge_context else (),
            }
        if injector.memory_compactor is None:
            return ContextWindowBuilder(
                injector.conversation,
                system_prompt=system_prompt,
                token_counter=injector.token_counter,
                gap_policy=app_settings().CONTEXT_GAP_POLICY,
                compaction=False,
                **memory,
            )
        return ContextWindowBuilder(
            # the row, when recall needs its owner: read from it, not queried
            injector.conversation if self.MEMORY_RECALL_ENABLED else None,
            chat_history=injector.chat_history,
            memory_compactor=injector.memory_compactor,
            system_prompt=system_prompt,
            token_counter=injector.token_counter,
            gap_policy=app_settings().CONTEXT_GAP_POLICY,
            **memory,
        )

    # -- tools --------------------------------------------------------------------------

    def _prepared(self, call: ToolCall) -> Tool | ToolOutcome:
        """The tool to run, or the error result for a call that cannot run (``prepared_call``)."""
        return prepared_call(call, self.tools)

    def execute_tool(self, call: ToolCall, injector: AgentInjector) -> ToolOutcome:
        """Run one call; every failure (unknown tool, bad arguments, exception) becomes an
        ``"Error: ..."`` result the model can read."""
        prepared = self._prepared(call)
        return prepared if isinstance(prepared, ToolOutcome) else prepared.run(call, injector)

    async def aexecute_tool(self, call: ToolCall, injector: AgentInjector) -> ToolOutcome:
        """Async ``execute_tool``."""
        prepared = self._prepared(call)
        return prepared if isinstance(prepared, ToolOutcome) else await prepared.arun(call, injector)

    async def _aresult(self, call: ToolCall, injector: AgentInjector) -> ToolOutcome:
        """``aexecute_tool`` without the raw ``value``, freed as soon as each call ends: the
        results of one reply (up to ``MAX_TOOL_CALLS_PER_MESSAGE``) wait for each other."""
        return dataclasses.replace(await self.aexecute_tool(call, injector), value=None)

    # -- one turn -----------------------------------------------------------------------

    def run(self, conversation: Conversation | int | str | UUID, user_input: str) -> AgentRunResult:
        """Answer ``user_input`` in ``conversation`` (see the module docstring).

        Returns:
            ``AgentRunResult``: answer, stored messages, usage, per-call window accounting.

        Raises:
            ConversationNotFound: no such conversation.
            LLMError, TransientLLMError: the model call failed (the human message and the
                steps stored before stay; the history remains valid).
            ContextBudgetExceeded: the human message alone does not fit the window;
                ``TurnTooLarge`` (a subclass): the turn's human and AI messages, its tool
                results at their shortest (down to the truncation marker alone) and the
                shortest cut of the summary do not fit
                (the error names the sizes; the steps stored before stay).
        """
        result = None
        for event in self.stream(conversation, user_input):
            if isinstance(event, FinalAnswer):
                result = event.result
        assert result is not None
        return result

    async def arun(self, conversation: Conversation | int | str | UUID, user_input: str) -> AgentRunResult:
        """Async ``run``: the ORM work runs in a worker thread; the tool calls of one model
        reply run concurrently (``asyncio.gather``)."""
        result = None
        async for event in self.astream(conversation, user_input):
            if isinstance(event, FinalAnswer):
                result = event.result
        assert result is not None
        return result

    def stream(self, conversation: Conversation | int | str | UUID, user_input: str) -> Iterator[AgentEvent]:
        """``run`` as a generator of events: ``TurnStarted``, then per model call
        ``ModelCallStarted``, ``AIMessageEvent``, ``ToolResultEvent``s, ``StepStored``, and
        finally ``FinalAnswer`` (holding the ``AgentRunResult``). Tools run one after another."""
        injector = self.get_injector(conversation)
        running = _RUNNING.set(injector)
        try:
            yield from self._turn(injector, user_input)
        finally:
            _forget_running(running)

    def _turn(self, injector: AgentInjector, user_input: str) -> Iterator[AgentEvent]:
        turn = _Turn(injector.conversation_id)
        # before anything is stored: a prompt that cannot be made leaves no unanswered message
        prompt = self.get_system_prompt(injector)
        # refused (too long, unstorable, over the window) before the turn stores anything
        injector.system_tokens = system_prompt_tokens(prompt, self.token_counter, self.token_limit)
        [human] = injector.chat_history.add_messages([ChatMessage.human(user_input)])
        turn.stored.append(human)
        yield TurnStarted(injector.conversation_id, human)
        builder = self.get_window_builder(injector, prompt)
        schemas = self.tool_schemas() or None
        recorder = self.get_call_recorder(injector, prompt)
        for round_ in itertools.count():
            window = self._with_system_prompt(self.build_window(builder, injector), prompt)
            if self._lacks_memory_block(window, builder):
                window = builder.add_memory_block(window)
            window = recorder.with_knowledge_share(window)
            shaped = self._shape(window, human.seq or 0)
            yield ModelCallStarted(round_, shaped.window, tuple(self.tools))
            started = time.monotonic()
            response = self.llm.invoke(shaped.window.messages, tools=schemas)
            ai, call = self._reply(response, shaped, round_, time.monotonic() - started)
            if ai.tool_calls:
                ai = clear_of(ai, self.pending_call_ids(injector))
            yield AIMessageEvent(round_, ai, call)
            if not ai.tool_calls:
                stored = injector.chat_history.add_messages([ai])
                turn.record(self._record_call(recorder, call, stored))
                turn.finish(stored, ai, STOP_ANSWER)
                yield StepStored(round_, stored)
                break
            bound = turn.rounds >= self.MAX_TOOL_ROUNDS
            results = []  # the messages only: each tool's raw value is freed once converted
            for tool_call in ai.tool_calls:
                outcome = (
                    not_run_outcome(tool_call, self.MAX_TOOL_ROUNDS)
                    if bound
                    else self.execute_tool(tool_call, injector)
                )
                results.append(outcome.message)
                yield ToolResultEvent(round_, tool_call, outcome.message, outcome.error)
            stored = injector.chat_history.add_messages([ai, *results])
            turn.record(self._record_call(recorder, call, stored))
            yield StepStored(round_, stored)
            if bound:
                turn.finish(stored, ai, STOP_MAX_TOOL_ROUNDS)
                break
            turn.stored.extend(stored)
            turn.rounds += 1
        enqueued = self.compact_if_needed(injector)
        yield FinalAnswer(turn.result(enqueued))

    async def astream(
        self, conversation: Conversation | int | str | UUID, user_input: str
    ) -> AsyncIterator[AgentEvent]:
        """Async ``stream``; the tool calls of one reply run concurrently and their events
        come in ``tool_calls`` order once all have finished."""
        injector = await sync_to_async(self.get_injector)(conversation)
        running = _RUNNING.set(injector)
        try:
            async for event in self._aturn(injector, user_input):
                yield event
        finally:
            _forget_running(running)

    async def _aturn(self, injector: AgentInjector, user_input: str) -> AsyncIterator[AgentEvent]:
        turn = _Turn(injector.conversation_id)
        # before anything is stored: a prompt that cannot be made leaves no unanswered message
        prompt = await sync_to_async(self.get_system_prompt)(injector)
        # refused (too long, unstorable, over the window) before the turn stores anything
        injector.system_tokens = system_prompt_tokens(prompt, self.token_counter, self.token_limit)
        [human] = await injector.chat_history.aadd_messages([ChatMessage.human(user_input)])
        turn.stored.append(human)
        yield TurnStarted(injector.conversation_id, human)
        builder = self.get_window_builder(injector, prompt)
        schemas = self.tool_schemas() or None
        recorder = self.get_call_recorder(injector, prompt)
        for round_ in itertools.count():
            window = self._with_system_prompt(
                await sync_to_async(self.build_window)(builder, injector), prompt
            )
            if self._lacks_memory_block(window, builder):  # a thread hop only then
                window = await sync_to_async(builder.add_memory_block)(window)
            window = recorder.with_knowledge_share(window)
            shaped = self._shape(window, human.seq or 0)
            yield ModelCallStarted(round_, shaped.window, tuple(self.tools))
            started = time.monotonic()
            response = await self.llm.ainvoke(shaped.window.messages, tools=schemas)
            ai, call = self._reply(response, shaped, round_, time.monotonic() - started)
            if ai.tool_calls:
                ai = clear_of(ai, await sync_to_async(self.pending_call_ids)(injector))
            yield AIMessageEvent(round_, ai, call)
            if not ai.tool_calls:
                stored = await injector.chat_history.aadd_messages([ai])
                turn.record(await sync_to_async(self._record_call)(recorder, call, stored))
                turn.finish(stored, ai, STOP_ANSWER)
                yield StepStored(round_, stored)
                break
            bound = turn.rounds >= self.MAX_TOOL_ROUNDS
            if bound:
                outcomes = [not_run_outcome(c, self.MAX_TOOL_ROUNDS) for c in ai.tool_calls]
            else:
                outcomes = list(await asyncio.gather(*(self._aresult(c, injector) for c in ai.tool_calls)))
            for tool_call, outcome in zip(ai.tool_calls, outcomes, strict=True):
                yield ToolResultEvent(round_, tool_call, outcome.message, outcome.error)
            stored = await injector.chat_history.aadd_messages([ai, *(o.message for o in outcomes)])
            turn.record(await sync_to_async(self._record_call)(recorder, call, stored))
            yield StepStored(round_, stored)
            if bound:
                turn.finish(stored, ai, STOP_MAX_TOOL_ROUNDS)
                break
            turn.stored.extend(stored)
            turn.rounds += 1
        enqueued = await sync_to_async(self.compact_if_needed)(injector)
        yield FinalAnswer(turn.result(enqueued))

    def build_window(self, builder: ContextWindowBuilder, injector: AgentInjector) -> ContextWindow:
        """The window of one model call, within ``token_limit`` tokens (a compactor's own
        ``get_summary()`` text counts against it). An override may build its own window
        (docs/agents.md, the seed's window code): the agent's system prompt is then put first
        when the window has none of its own (``_with_system_prompt``).

        A window that would leave stored messages in neither itself nor the summary gets a
        compaction first and is built again when the builder's gap policy is "close"
        (``agentmemory.closing.build_closing_gap``): the builder itself only reads."""
        return build_closing_gap(builder, self.token_limit)

    def _with_system_prompt(self, window: ContextWindow, prompt: str) -> ContextWindow:
        """``window`` with the turn's system prompt first. A window built by an overridden
        ``build_window`` as the seed writes it (``ContextWindowBuilder(chat_history=...,
        memory_compactor=...)``, no ``system_prompt=``) has none, or the conversation's stored
        pinned prompt; the seed's agent sends its system prompt apart from the history, so it
        goes first here, in place of a stored one (as in the agent's own windows), and counts
        in ``system_tokens`` (the window's budget then held the summary and history only, as
        the seed's history limit does). A window whose builder was given a system prompt
        (the agent's own builder, or an override that chose one) is returned as it is.

        An override may return the window's messages as a list (the seed names the builder's
        result ``context_messages``): they are taken as a window of ``token_limit`` tokens,
        counted by the agent's counter.

        Raises:
            TypeError: the override returned something else (a ``ContextWindow`` or a list
                of ``ChatMessage`` is needed)."""
        window = self._as_window(window)
        messages = window.messages
        if not prompt or (window.system_tokens and messages and messages[0].seq is None):
            return window
        pinned = 0
        while (
            pinned < len(messages)
            and messages[pinned].role is Role.SYSTEM
            and messages[pinned].seq is not None
        ):
            pinned += 1
        message = ChatMessage.system(prompt)
        tokens = self.token_counter.count_message(message)
        return dataclasses.replace(window, messages=[message, *messages[pinned:]], system_tokens=tokens)

    def _as_window(self, result: Any) -> ContextWindow:
        """``build_window``'s result as a ``ContextWindow`` (see ``_with_system_prompt``)."""
        if isinstance(result, ContextWindow):
            return result
        if isinstance(result, list | tuple) and all(isinstance(m, ChatMessage) for m in result):
            messages = list(result)
            seqs = [m.seq for m in messages if m.seq is not None]
            return ContextWindow(
                messages=messages,
                max_tokens=self.token_limit,
                history_tokens=sum(self.token_counter.count_message(m) for m in messages),
                first_seq=min(seqs, default=None),
                last_seq=max(seqs, default=None),
            )
        raise TypeError(
            f"{type(self).__name__}.build_window() must return a ContextWindow or a list of "
            f"ChatMessage, not {type(result).__name__}"
        )

    def _lacks_memory_block(self, window: ContextWindow, builder: ContextWindowBuilder) -> bool:
        """Whether ``window`` should get the memory block of ``MEMORY_RECALL_ENABLED`` from the
        agent's builder (``builder.add_memory_block``: its scope, within what the window
        leaves of its ``max_tokens``): an overridden ``build_window`` made it with a builder
        of its own (the seed's window code builds without ``memory_recall``). The agent's
        own windows, and windows that carry a block, need nothing."""
        return (
            builder.memory_recall
            and window.memory is None
            and type(self).build_window is not BaseToolCallingAgent.build_window
        )

    def compact_if_needed(self, injector: AgentInjector) -> bool:
        """After a turn: let a compaction run when one is due. Returns whether one was
        enqueued or run; ``False`` when the compactor is disabled.

        agentmemory's own compactors are asked through their ``compact_if_needed(max_tokens=,
        system_tokens=)`` with the agent's budget (less the memory block's share,
        ``MEMORY_RECALL_SHARE``, with ``MEMORY_RECALL_ENABLED``: the history's windows are
        built within that) and this turn's system prompt, so the "no
        longer fits" trigger uses the agent's limit and the summary leaves the turn room
        beside the prompt (``summary_token_budget``). A
        compactor that overrides ``compact_if_needed`` is called the way the seed's contract
        writes it, ``compact_if_needed()`` (with ``max_tokens=`` only when its signature takes
        it). The answer is already stored: an exception from a compactor is logged, never
        raised, so the caller always gets the answer.
        """
        compactor = injector.memory_compactor
        if compactor is None:
            return False
        method = compactor.compact_if_needed
        # With memory recall the history's windows are built within the budget less the
        # memory block's share: compaction is sized for those.
        limit = self.token_limit
        if self.MEMORY_RECALL_ENABLED:
            limit = max(limit - int(limit * app_settings().MEMORY_RECALL_SHARE), 1)
        try:
            if _is_own(compactor, "compact_if_needed"):
                return bool(method(max_tokens=limit, system_tokens=injector.system_tokens))
            if _takes_max_tokens(method):
                return bool(method(max_tokens=limit))
            return bool(method())
        except Exception:
            logger.exception(
                "compact_if_needed() of %s failed for conversation %s; the turn's answer is stored",
                type(compactor).__qualname__,
                injector.conversation_id,
            )
            return False

    def pending_call_ids(self, injector: AgentInjector) -> set[str]:
        """Ids of the conversation's tool calls still awaiting a result (an approval flow, a
        client that died): a reply may not reuse one, so such ids are renamed before the
        tools run. One query, made only for replies that call tools."""
        pending = (
            Conversation.objects.using(router.db_for_read(Conversation))
            .filter(pk=injector.conversation_id)
            .values_list("pending_tool_calls", flat=True)
            .first()
        )
        return set(pending_calls(pending))

    # -- helpers ------------------------------------------------------------------------

    def _shape(self, window: ContextWindow, current_turn_seq: int) -> PolicyOutcome:
        return apply_memory_policy(
            window, policy_for=self.memory_policy, before_seq=current_turn_seq, counter=self.token_counter
        )

    def _reply(
        self, response: ChatResponse, shaped: PolicyOutcome, round_: int, latency: float
    ) -> tuple[ChatMessage, ModelCall]:
        """The AI message to store (usage, model, finish reason and latency in its metadata;
        tool call ids made unique) and the call's accounting."""
        message = response.message
        usage = response.usage
        source = USAGE_PROVIDER
        if usage is None:
            # The provider reported none (some OpenAI-compatible servers, test doubles):
            # count with the agent's counter, and say so.
            source = USAGE_COUNTED
            usage = counted_usage(
                shaped.window, self.tool_schemas_tokens(), self.token_counter.count_message(message)
            )
        model = response.model or getattr(self.llm, "model_name", "")
        usage_metadata: dict[str, Any] = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        }
        if usage.cached_input_tokens:
            usage_metadata["cached_input_tokens"] = usage.cached_input_tokens
        if usage.cache_creation_input_tokens:
            usage_metadata["cache_creation_input_tokens"] = usage.cache_creation_input_tokens
        usage_metadata["source"] = source
        # What the model sent is stored whatever it holds (a NUL character, a lone surrogate,
        # a provider field that is not JSON): refusing it would fail the turn after the human
        # message is stored.
        ai = storable_reply(
            message,
            {
                "usage": usage_metadata,
                "model": model,
                "finish_reason": response.finish_reason,
                "latency_s": round(latency, 6),
            },
        )
        call = ModelCall(
            round=round_,
            window=shaped.window,
            stubbed=shaped.stubbed,
            omitted=shaped.omitted,
            usage=usage,
            model=model,
            finish_reason=response.finish_reason,
            latency_s=round(latency, 6),
            usage_source=source,
            sent_changes=getattr(response, "sent_changes", ()),
        )
        return ai, call

    def tool_schemas_tokens(self) -> int:
        """Tokens of the tool declarations by the agent's counter (their JSON text; a
        provider's own framing of tools differs a little). Counted once per agent."""
        cached = getattr(self, "_tool_schemas_tokens", None)
        if cached is None:
            schemas = self.tool_schemas()
            cached = self.token_counter.count_text(tools_text(schemas)) if schemas else 0
            self._tool_schemas_tokens = cached
        return cached

    def get_call_recorder(self, injector: AgentInjector, system_prompt: str) -> ChatCallRecorder:
        """The recorder of this turn's model calls (``agentmemory.calls``): who they are
        billed to, the system prompt and its knowledge block, the tool declarations."""
        conversation = injector.conversation
        return ChatCallRecorder(
            conversation_id=conversation.pk,
            owner_id=conversation.owner_id,
            agent_key=conversation.agent_key or self.AGENT_KEY,
            system_prompt=system_prompt,
            knowledge_context=injector.knowledge_context,
            knowledge_fact_ids=injector.knowledge_fact_ids,
            tools=self.tool_schemas(),
            tools_tokens=self.tool_schemas_tokens(),
            counter=self.token_counter,
        )

    def _record_call(
        self, recorder: ChatCallRecorder, call: ModelCall, stored: list[ChatMessage]
    ) -> ModelCall:
        """Store the call's row once its AI message (``stored[0]``) is stored; the call's
        accounting with ``record`` set."""
        row = recorder.record(call, message_id=stored[0].id if stored else None)
        return dataclasses.replace(call, record=row) if row is not None else call


def _is_own(compactor: Any, name: str) -> bool:
    """Whether ``compactor``'s method ``name`` is ``BaseMemoryCompactor``'s own."""
    return getattr(type(compactor), name, None) is getattr(BaseMemoryCompactor, name)


def _takes_max_tokens(method: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "max_tokens" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class _Turn:
    """Accumulates one turn's stored messages, usage and calls."""

    def __init__(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.stored: list[ChatMessage] = []
        self.calls: list[ModelCall] = []
        self.usage = Usage()
        self.rounds = 0
        self.answer = ""
        self.stopped_reason = ""

    def record(self, call: ModelCall) -> None:
        self.calls.append(call)
        self.usage = add_usage(self.usage, call.usage)

    def finish(self, stored: list[ChatMessage], ai: ChatMessage, reason: str) -> None:
        self.stored.extend(stored)
        self.answer = ai.text
        self.stopped_reason = reason

    def result(self, compaction_enqueued: bool) -> AgentRunResult:
        return AgentRunResult(
            answer=self.answer,
            messages=list(self.stored),
            usage=self.usage,
            calls=list(self.calls),
            rounds=self.rounds,
            stopped_reason=self.stopped_reason,
            conversation_id=self.conversation_id,
            compaction_enqueued=compaction_enqueued,
        )
