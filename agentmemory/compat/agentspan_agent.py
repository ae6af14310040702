"""agentspan's ``SemanticMemory``, ``Agent``, ``AgentRuntime`` and ``AgentResult`` (seed 003).
Import them from ``agentmemory.compat.agentspan``.

agentspan runs agents as workflows on its server; here ``AgentRuntime.run`` runs the turn in
process (``agentmemory.compat.loop``) with the model its string names (``"openai/gpt-4o"``:
``OpenAIChatModel``), prepending ``memory.messages`` as agentspan does, and returns
agentspan's result fields. Nothing of the run is stored: as in agentspan, the example adds
to its ``ConversationMemory`` itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmemory.agents.tools import Tool
from agentmemory.compat.agentspan_messages import as_dict, from_dict
from agentmemory.compat.loop import as_tools, model_from_string, model_provider, run_loop
from agentmemory.compat.owners import owner_or_shared
from agentmemory.exceptions import LLMError
from agentmemory.llm.base import ChatModel
from agentmemory.messages import ChatMessage
from agentmemory.recall.backends import RecallBackend
from agentmemory.recall.embedders import Embedder
from agentmemory.semantic import MemoryStore
from agentmemory.semantic import SemanticMemory as StoredSemanticMemory

__all__ = ["Agent", "AgentResult", "AgentRuntime", "SemanticMemory", "TokenUsage"]

#: the namespace of ``SemanticMemory`` entries unless ``namespace=`` names another
DEFAULT_NAMESPACE = "agentspan"
#: agentspan's default of LLM turns per run (``Agent(max_turns=25)``)
DEFAULT_MAX_TURNS = 25


class SemanticMemory(StoredSemanticMemory):
    """agentspan's ``SemanticMemory(max_results=3)``: ``add``, ``search``, ``get_context``,
    ``delete``, ``clear``, ``list_all``, kept in the database (``agentmemory.semantic``).

    Args:
        max_results: entries ``get_context`` lists.
        store: a ``MemoryStore`` of yours (agentspan's ``PineconeStore`` example); default our
            ORM store.
        owner: whose entries these are; default the shared compat user
            (``agentmemory.compat.owners``).
        namespace: entries are shared by every ``SemanticMemory`` of the same owner and
            namespace, in any process (agentspan's default store lives in one object).
        agent_key, embedder, backend: as ``agentmemory.semantic.SemanticMemory``.

    Raises:
        ValueError: ``max_results`` below 1.

    Ranking is our recall backend's (full-text by default, embeddings or hybrid by
    setting), not agentspan's Jaccard word overlap.
    """

    def __init__(
        self,
        max_results: int = 3,
        store: MemoryStore | None = None,
        *,
        owner: Any = None,
        namespace: str | None = DEFAULT_NAMESPACE,
        agent_key: str | None = None,
        embedder: Embedder | None = None,
        backend: RecallBackend | None = None,
    ) -> None:
        super().__init__(
            owner_or_shared(owner) if store is None else owner,
            max_results,
            store,
            agent_key=agent_key,
            namespace=namespace,
            embedder=embedder,
            backend=backend,
        )


@dataclass
class TokenUsage:
    """Token usage of a run (tokens): ``prompt_tokens``, ``completion_tokens``, ``total_tokens``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass
class AgentResult:
    """agentspan's result of a run.

    Attributes:
        output: ``{"result": <final text or None>}``.
        execution_id: an id of this run (a uuid4 hex; agentspan's is its workflow's).
        messages: the run's messages as agentspan's dicts: the memory's, the prompt, each
            tool call and result, the answer (not the instructions).
        tool_calls: ``{"name", "input", "output"}`` per call made.
        status: ``"COMPLETED"``, or ``"FAILED"`` when a model call failed (``error`` says why).
        token_usage: summed usage of the model calls, ``None`` when none reported it.
        finish_reason: ``"stop"``, ``"LENGTH"`` (cut at the output limit), ``"error"``, or
            ``"timeout"`` when ``max_turns`` ran out.
    """

    output: Any = None
    execution_id: str = ""
    correlation_id: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: str = "COMPLETED"
    token_usage: TokenUsage | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    error: str | None = None

    @property
    def is_success(self) -> bool:
        return self.status == "COMPLETED"

    @property
    def is_failed(self) -> bool:
        return self.status in ("FAILED", "TERMINATED", "TIMED_OUT")

    def print_result(self) -> None:
        """Print the output between agentspan's separators, then the tool count, tokens,
        finish reason and execution id."""
        width = 50
        print(f"\n╒{'═' * width}╕")
        print(f"│ {'Agent Output':<{width - 1}}│")
        print(f"╘{'═' * width}╛")
        print()
        if self.is_failed and self.error:
            print(f"ERROR: {self.error}")
        elif isinstance(self.output, dict) and self.output.get("result") is not None:
            print(self.output["result"])
        else:
            print(self.output)
        print()
        if self.tool_calls:
            print(f"Tool calls: {len(self.tool_calls)}")
        if self.token_usage:
            usage = self.token_usage
            print(
                f"Tokens: {usage.total_tokens} total "
                f"({usage.prompt_tokens} prompt, {usage.completion_tokens} completion)"
            )
        else:
            print("Tokens: —")
        if self.finish_reason:
            print(f"Finish reason: {self.finish_reason}")
        if self.execution_id:
            print(f"Execution ID: {self.execution_id}")
        print("\n")


class Agent:
    """agentspan's agent definition.

    Args:
        name: the agent's name.
        model: ``"provider/model"`` (``"openai/gpt-4o"``, ``"anthropic/claude-..."``) or one
            of our ``ChatModel``s; resolved when a run starts.
        instructions: the system prompt: text, or a function of no arguments returning it
            (called on each run).
        tools: functions or ``@tool`` objects: our ``Tool``s, whose arguments are checked
            against the signature and types before the function runs
            (``agentmemory.compat.loop.as_tools``).
        memory: a ``ConversationMemory`` (``agentmemory.compat.agentspan``) whose
            ``messages`` are sent before the prompt.
        max_turns: model calls per run at most.

    Raises:
        TypeError: a ``model`` that is neither a string nor a ``ChatModel``; a ``memory``
            without ``messages`` (a ``SemanticMemory``: expose it as a
            tool or in ``instructions``, as agentspan's document shows); a tool that is not
            callable or that ``Tool`` refuses (``as_tools``).
        ValueError: two tools with one name; a model string naming no supported provider
            (``loop.model_provider``).
    """

    def __init__(
        self,
        name: str,
        model: str | ChatModel = "openai/gpt-4o",
        instructions: str | Callable[[], str] = "",
        tools: Sequence[Any] | None = None,
        memory: Any = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        if isinstance(model, str):
            model_provider(model)  # refused now, not at the first run
        elif not callable(getattr(model, "invoke", None)):
            raise TypeError(
                f"model must be a 'provider/name' string or a ChatModel, not {type(model).__name__}"
            )
        if memory is not None and not hasattr(memory, "messages"):
            raise TypeError(
                f"memory must be a ConversationMemory, not {type(memory).__name__}; expose a "
                "SemanticMemory through a @tool or the instructions"
            )
        self.name = name
        self.model = model
        self.instructions = instructions
        self.tools: list[Tool] = as_tools(tools)
        self.memory = memory
        self.max_turns = max_turns

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model!r})"

    def system_prompt(self) -> str:
        """``instructions`` as text (called when it is a function)."""
        text = self.instructions() if callable(self.instructions) else self.instructions
        return str(text or "")


class AgentRuntime:
    """agentspan's runtime, in process: ``with AgentRuntime() as runtime:`` and
    ``runtime.run(agent, prompt)``. Models are made once per runtime and model string, and
    closed on leaving the ``with`` block. Its keyword options (agentspan's server URL and
    credentials) are accepted and unused: there is no server."""

    def __init__(self, **_options: Any) -> None:
        self._models: dict[str, ChatModel] = {}

    def __enter__(self) -> AgentRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        for model in self._models.values():
            close = getattr(model, "close", None)
            if callable(close):
                close()
        self._models.clear()

    def _model(self, spec: str | ChatModel) -> ChatModel:
        if not isinstance(spec, str):
            return spec
        if spec not in self._models:
            self._models[spec] = model_from_string(spec)
        return self._models[spec]

    def run(self, agent: Agent, prompt: str) -> AgentResult:
        """Run ``agent`` on ``prompt``: instructions, the memory's messages, the prompt; the
        tools it calls are run until it answers or ``max_turns`` model calls were made.

        Raises:
            ValueError: a model string naming no supported provider.

        A failed model call (``LLMError``) is returned as ``status="FAILED"`` with ``error``,
        as agentspan reports a failed workflow.
        """
        history = [from_dict(m) for m in agent.memory.messages] if agent.memory is not None else []
        prompt_message = ChatMessage.human(prompt)
        sent = [*history, prompt_message]
        system = agent.system_prompt()
        if system:
            sent.insert(0, ChatMessage.system(system))
        result = AgentResult(execution_id=uuid.uuid4().hex)
        try:
            loop = run_loop(self._model(agent.model), sent, agent.tools, max_iterations=agent.max_turns)
        except LLMError as exc:
            result.status, result.error, result.finish_reason = "FAILED", str(exc), "error"
            result.output = {"result": None}
            result.messages = [as_dict(m) for m in (*history, prompt_message)]
            return result
        result.messages = [as_dict(m) for m in (*history, prompt_message, *loop.added)]
        result.tool_calls = [
            {"name": call.name, "input": dict(call.arguments), "output": text} for call, text, _ in loop.calls
        ]
        result.output = {"result": loop.final.text if loop.final is not None else None}
        if loop.final is None:
            result.finish_reason = "timeout"
        elif loop.finish_reason in ("length", "max_tokens"):
            result.finish_reason = "LENGTH"
        else:
            result.finish_reason = "stop"
        usage = loop.usage
        if usage.input_tokens or usage.output_tokens:
            result.token_usage = TokenUsage(
                usage.input_tokens, usage.output_tokens, usage.input_tokens + usage.output_tokens
            )
        return result
