"""A LangGraph support agent on agentmemory (``manage.py langgraph_demo`` runs it).

- ``DjangoSaver`` keeps the graph's checkpoints in the project's database: a run survives a
  restart and resumes from where it stopped.
- ``ConversationMirror`` copies the graph's messages into an agentmemory conversation owned by
  the user: the admin shows it, search finds it, compaction summarises it.
- ``DjangoStore`` keeps long-term notes about the user across threads.

The model is LangChain's ``GenericFakeChatModel`` answering from a script, so the example runs
offline; put a real chat model (``langchain_openai.ChatOpenAI(...).bind_tools(TOOLS)``) in its
place for a real agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import BaseStore

from agentmemory.contrib.langgraph import ConversationMirror, DjangoSaver, DjangoStore
from project.agents import ORDERS


@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order's status, carrier and estimated delivery date."""
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        return {"error": f"no order {order_id}"}
    return {"order_id": order_id, **{k: v for k, v in order.items() if k != "items"}}


TOOLS = [lookup_order]


def scripted_replies() -> Iterator[AIMessage]:
    """What the fake model answers, turn after turn: a tool call, then an answer."""
    yield AIMessage(
        "", tool_calls=[{"id": "call_a1001", "name": "lookup_order", "args": {"order_id": "A-1001"}}]
    )
    yield AIMessage("Order A-1001 has shipped with DHL and should arrive on 14 March.")
    yield AIMessage(
        "", tool_calls=[{"id": "call_a1002", "name": "lookup_order", "args": {"order_id": "A-1002"}}]
    )
    yield AIMessage("Order A-1002 is still being processed; it should arrive on 18 March.")


def build_graph(owner: Any) -> Any:
    """The compiled graph: agent (the model) -> tools -> agent, with checkpoints, mirroring
    into ``owner``'s conversations and a long-term store."""
    model = GenericFakeChatModel(messages=scripted_replies())

    def agent(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        reply = model.invoke(state["messages"])
        if reply.content:  # an answer: note the question, for later threads
            question = next(m for m in reversed(state["messages"]) if m.type == "human")
            namespace = ("users", str(config["configurable"]["user_id"]), "notes")
            store.put(namespace, str(question.id), {"text": question.content})
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(TOOLS))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    saver = DjangoSaver(mirror=ConversationMirror(owner=owner, agent_key="langgraph-support"))
    return builder.compile(checkpointer=saver, store=DjangoStore())
