"""The tool-calling loop of the compat agents (selectools' ``Agent``, agentspan's ``Agent`` run
by its ``AgentRuntime``), their tools, and the models named by their provider objects and
model strings.

The loop is the frameworks' own: their memories decide what is sent (selectools sends its
``ConversationMemory`` window, agentspan prepends ``memory.messages``), so the turn does
not go through ``BaseToolCallingAgent`` (which builds our token-budgeted window over a
stored conversation). Their tools are ours (``agentmemory.agents.tools.Tool``, what the
frameworks' ``@tool`` and a plain function become), run as our agents run them
(``run_call``), and the models are our adapters (``agentmemory.llm``), so a compat agent
reaches the same providers as ours.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmemory.agents.replies import storable_reply
from agentmemory.agents.tools import Tool, run_call
from agentmemory.llm.base import ChatModel, ChatResponse, Usage
from agentmemory.messages import ChatMessage, Role, ToolCall

__all__ = ["LoopResult", "as_tools", "model_from_string", "run_loop"]


def as_tools(items: Sequence[Any] | None) -> list[Tool]:
    """The ``tools=[...]`` of a compat agent as our ``Tool`` objects: a ``Tool`` (``@tool``
    from ``agentmemory.compat.selectools``, ``agentmemory.compat.agentspan`` or
    ``agentmemory.agents``) as it is, a plain function as ``Tool(function)``.

    Raises:
        TypeError: an item that is not callable; a function ``Tool`` refuses (a parameter
            type without a JSON Schema, ``*args``/``**kwargs``, a name the providers refuse);
            a tool taking a ``ToolContext`` (only our agents have one to give).
        ValueError: two tools with one name.
    """
    tools: list[Tool] = []
    for item in items or ():
        if not isinstance(item, Tool):
            if not callable(item):
                raise TypeError(f"a tool is a function or a @tool, not {type(item).__name__}")
            item = Tool(item)
        if item.context_param is not None:
            raise TypeError(
                f"tool {item.name!r}: parameter {item.context_param!r} asks for a ToolContext, which "
                "only our agents give; annotate it with its type if the model should fill it"
            )
        tools.append(item)
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"two tools share a name: {names}")
    return tools


@dataclass
class LoopResult:
    """One run of ``run_loop``.

    Attributes:
        added: the messages the run produced, in order: each tool-calling AI message with its
            results, then the final AI message (or none when ``max_iterations`` ran out).
        final: the final AI message, or ``None``.
        calls: every tool call made, as ``(call, result text, error)``.
        iterations: model calls made.
        usage: summed token usage (tokens) of the calls that reported it.
    """

    added: list[ChatMessage] = field(default_factory=list)
    final: ChatMessage | None = None
    calls: list[tuple[ToolCall, str, bool]] = field(default_factory=list)
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""


def run_loop(
    llm: ChatModel,
    messages: Sequence[ChatMessage],
    tools: Sequence[Tool],
    *,
    max_iterations: int,
    on_step: Callable[[list[ChatMessage]], None] | None = None,
) -> LoopResult:
    """Call ``llm`` with ``messages`` and the tools' declarations; run the tools it calls
    (one after another, in its order), send their results back, and repeat until it answers
    without calling a tool or ``max_iterations`` model calls were made.

    ``on_step`` gets each step as it is made (an AI message with its results, or the final
    answer), for a memory to store it. Each call is answered as our agents answer one
    (``agentmemory.agents.tools.run_call``): arguments checked against the tool's signature
    and types, and an unknown tool, arguments that do not fit, or the tool's failure sent
    back as an ``"Error: ..."`` result the model reads.

    Raises:
        LLMError: a model call failed (``on_step`` has had the steps made before).
    """
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools] or None
    sent = list(messages)
    result = LoopResult()
    while result.iterations < max_iterations:
        response: ChatResponse = llm.invoke(sent, tools=schemas)
        result.iterations += 1
        if response.usage is not None:
            result.usage = result.usage + response.usage
        result.finish_reason = response.finish_reason
        ai = storable_reply(response.message)
        if not ai.tool_calls:
            result.final = ai
            result.added.append(ai)
            if on_step is not None:
                on_step([ai])
            break
        step = [ai]
        for call in ai.tool_calls:
            outcome = run_call(call, by_name)
            # the result as the frameworks keep one: its text (made storable), no timing
            message = dataclasses.replace(outcome.message, metadata={})
            result.calls.append((call, message.text, outcome.error))
            step.append(message)
        sent.extend(step)
        result.added.extend(step)
        if on_step is not None:
            on_step(step)
    return result


def model_from_string(spec: str | ChatModel) -> ChatModel:
    """The ``ChatModel`` for agentspan's ``"provider/model"`` strings: ``"openai/gpt-4o"``
    is ``OpenAIChatModel(model="gpt-4o")`` (``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` read
    as the OpenAI SDK reads them), ``"anthropic/claude-..."`` is ``AnthropicChatModel``
    (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``). A ``ChatModel`` passes unchanged.

    Raises:
        ValueError: no ``provider/`` prefix, or a provider other than those two.
    """
    if not isinstance(spec, str):
        return spec
    provider, name = model_provider(spec)
    if provider == "openai":
        from agentmemory.llm.openai import OpenAIChatModel

        return OpenAIChatModel(model=name, base_url=os.environ.get("OPENAI_BASE_URL") or None)
    from agentmemory.llm.anthropic import AnthropicChatModel

    return AnthropicChatModel(model=name, base_url=os.environ.get("ANTHROPIC_BASE_URL") or None)


#: the providers of agentspan's ``"provider/model"`` strings that ``model_from_string`` makes
MODEL_PROVIDERS = ("openai", "anthropic")


def model_provider(spec: str) -> tuple[str, str]:
    """``(provider, model name)`` of agentspan's ``"provider/model"`` string, checked
    without making the model (so an agent can refuse it when it is made, not at its first run).

    Raises:
        ValueError: no ``provider/`` prefix, or a provider not in ``MODEL_PROVIDERS``.
    """
    provider, _, name = spec.partition("/")
    if not name:
        raise ValueError(f"a model is 'provider/name' (e.g. 'openai/gpt-4o'), not {spec!r}")
    if provider not in MODEL_PROVIDERS:
        raise ValueError(
            f"model provider {provider!r} is not supported here; use 'openai/...' or 'anthropic/...'"
        )
    return provider, name


def last_human_text(messages: Sequence[ChatMessage]) -> str:
    """The text of the newest human message ("" when there is none)."""
    for message in reversed(messages):
        if message.role is Role.HUMAN:
            return message.text
    return ""
