"""``manage.py chat_frameworks_demo``: the OpenAI Agents SDK, LangChain and pydantic-ai keeping
their conversations in agentmemory, offline (scripted models, no key, no network)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation

FRAMEWORKS = ("openai-agents", "langchain", "pydantic-ai")
QUESTIONS = ("Where is my order 1042?", "Which order did I ask about?")


def lookup_order(order_id: str) -> str:
    """Look an order up by its number."""
    return json.dumps({"order_id": order_id, "status": "shipped", "carrier": "DHL"})


def describe(messages: list[ChatMessage]) -> list[str]:
    lines = []
    for message in messages:
        calls = ", ".join(f"{c.name}({json.dumps(dict(c.arguments))})" for c in message.tool_calls)
        text = message.text[:70] + (f" [calls {calls}]" if calls else "")
        lines.append(f"  #{message.seq} {message.role.value:>5}: {text}")
    return lines


async def openai_agents_demo(owner: Any) -> Any:
    """Two turns of an Agents SDK ``Runner.run`` on an ``AgentMemorySession``; the model is
    a scripted ``agents.models.interface.Model`` that calls the tool, then answers."""
    from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
    from agents.models.interface import Model
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from agentmemory.contrib.openai_agents import AgentMemorySession

    class ScriptedModel(Model):
        def __init__(self) -> None:
            self.calls = 0

        async def get_response(self, system_instructions, input, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls += 1
            if self.calls == 1:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id="call_1",
                    name="lookup_order",
                    arguments='{"order_id": "1042"}',
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            seen = sum(1 for item in input if isinstance(item, dict) and item.get("role") == "user")
            text = (
                "Order 1042 has shipped with DHL."
                if self.calls == 2
                else f"You asked about order 1042 ({seen} questions)."
            )
            message = ResponseOutputMessage(
                id=f"msg_{self.calls}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    agent = Agent(name="support", tools=[function_tool(lookup_order)], model=ScriptedModel())
    session = AgentMemorySession("demo-order-1042", owner=owner, agent_key="support")
    await session.clear_session()
    for question in QUESTIONS:
        await Runner.run(agent, question, session=session, run_config=RunConfig(tracing_disabled=True))
    return session.conversation_uuid


def langchain_demo(owner: Any) -> Any:
    """Two turns of a ``RunnableWithMessageHistory`` on ``DjangoChatMessageHistory``; the
    model is a ``RunnableLambda`` that answers from the history it is shown."""
    import warnings

    from langchain_core.messages import AIMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from agentmemory.contrib.langchain import DjangoChatMessageHistory

    def model(prompt: Any) -> AIMessage:
        earlier = [m for m in prompt.to_messages() if m.type == "human"][:-1]
        return AIMessage(f"Answered, with {len(earlier)} earlier question(s) in view.")

    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You answer questions about orders."),
            MessagesPlaceholder("history"),
            ("human", "{question}"),
        ]
    )
    histories: dict[str, DjangoChatMessageHistory] = {}

    def history(session_id: str) -> DjangoChatMessageHistory:
        return histories.setdefault(session_id, DjangoChatMessageHistory.for_session(session_id, owner=owner))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in langchain-core 1.x, still shipped
        chain = RunnableWithMessageHistory(
            prompt | RunnableLambda(model),
            history,
            input_messages_key="question",
            history_messages_key="history",
        )
    history("demo-order-1042").clear()
    for question in QUESTIONS:
        chain.invoke({"question": question}, config={"configurable": {"session_id": "demo-order-1042"}})
    return history("demo-order-1042").conversation_id


async def pydantic_ai_demo(owner: Any) -> Any:
    """Two turns of a pydantic-ai ``Agent`` (``FunctionModel``) whose history is the context
    window of the stored conversation; each run's new messages are stored after it."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentmemory.contrib.pydantic_ai import ContextWindowProcessor, from_pydantic_ai

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "1042"})])
        return ModelResponse(parts=[TextPart(f"Order 1042 has shipped ({len(messages)} messages in view).")])

    window = ContextWindowProcessor(max_tokens=2_000)
    agent = Agent(
        FunctionModel(model),
        instructions="You answer questions about orders.",
        capabilities=[window.capability()],
    )
    agent.tool_plain(lookup_order)
    conversation = await Conversation.objects.acreate(
        owner=owner, agent_key="support", title="pydantic-ai demo"
    )
    history = PersistentChatHistory(conversation)
    for question in QUESTIONS:
        result = await agent.run(question, deps=conversation)
        await history.aadd_messages(from_pydantic_ai(result.new_messages()))
    return conversation.uuid


class Command(BaseCommand):
    help = (
        "Run two turns of an agent in each of the OpenAI Agents SDK, LangChain and pydantic-ai, "
        "with scripted models (offline), their conversations stored by agentmemory, and print what "
        "was stored. A framework whose package is not installed is skipped with the extra to install."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--framework", choices=(*FRAMEWORKS, "all"), default="all")
        parser.add_argument("--owner", default="", help="username owning the conversations (default: none)")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = None
        if options["owner"]:
            user_model = get_user_model()
            try:
                owner = user_model._default_manager.get(**{user_model.USERNAME_FIELD: options["owner"]})
            except user_model.DoesNotExist as exc:
                raise CommandError(f"no user {options['owner']!r}") from exc
        chosen = FRAMEWORKS if options["framework"] == "all" else (options["framework"],)
        for framework in chosen:
            try:
                if framework == "openai-agents":
                    conversation = asyncio.run(openai_agents_demo(owner))
                elif framework == "langchain":
                    conversation = langchain_demo(owner)
                else:
                    conversation = asyncio.run(pydantic_ai_demo(owner))
            except ImportError as exc:
                self.stdout.write(f"{framework}: skipped ({exc})")
                continue
            history = PersistentChatHistory(conversation)
            messages = history.get_messages()
            uuid = Conversation.objects.values_list("uuid", flat=True).get(pk=history.conversation_id)
            self.stdout.write(f"{framework}: conversation {uuid}, {len(messages)} messages")
            self.stdout.write("\n".join(describe(messages)))
