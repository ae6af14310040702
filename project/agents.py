"""Example agents of the example project: a support agent with three tools and memory
compaction, a variant that overrides ``get_config()`` with its own compactor, and one with
long-term memory of each customer.

Try them with ``python manage.py chat support`` (or ``support-early-summary``, or
``support-memory --owner alice``) once an LLM is configured (see docs/agents.md). The order
data is a small in-memory table standing in for the host project's own models.
"""

from __future__ import annotations

from typing import Any, Literal

from django.db import transaction

from agentmemory.agents import AgentConfig, BaseToolCallingAgent, MemoryConfig, ToolContext, ToolError, tool
from agentmemory.agents.injector import AgentInjector
from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.models import Conversation

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"status": "shipped", "carrier": "DHL", "eta": "2025-03-14", "items": ["kettle", "2 mugs"]},
    "A-1002": {"status": "processing", "carrier": None, "eta": "2025-03-18", "items": ["desk lamp"]},
    "A-1003": {"status": "delivered", "carrier": "UPS", "eta": "2025-03-02", "items": ["headphones"]},
}

FAQ = {
    "returns": "Items can be returned within 30 days of delivery, unused and in their original packaging.",
    "shipping": "Standard shipping takes 3-5 working days; express shipping takes 1-2 working days.",
    "warranty": "Electronics carry a two-year warranty from the delivery date.",
}


@tool
def lookup_order(order_id: str, include_items: bool = False) -> dict:
    """Look up an order's status, carrier and estimated delivery date.

    Args:
        order_id: the order number, like "A-1001".
        include_items: also list the items of the order.
    """
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ToolError(f"no order {order_id!r}; order numbers look like A-1001")
    result = {"order_id": order_id.upper(), **{k: v for k, v in order.items() if k != "items"}}
    if include_items:
        result["items"] = order["items"]
    return result


@tool(memory="stub")
def search_faq(topic: Literal["returns", "shipping", "warranty"]) -> str:
    """Read the help-centre answer for a topic.

    Its text is long-lived reference material: later turns keep only a stub of it
    (memory="stub"), the model can look it up again when needed.

    Args:
        topic: which help-centre page to read.
    """
    return FAQ[topic]


@tool
def create_ticket(summary: str, priority: Literal["low", "normal", "high"], context: ToolContext) -> str:
    """Open a support ticket for a human colleague when the question cannot be solved here.

    Args:
        summary: one or two sentences describing the customer's problem.
        priority: how urgent the problem is.
    """
    with transaction.atomic():
        conv = Conversation.objects.select_for_update().only("id", "metadata").get(pk=context.conversation.pk)
        tickets = list(conv.metadata.get("tickets", []))
        ticket_id = f"T-{conv.pk}-{len(tickets) + 1}"
        tickets.append({"id": ticket_id, "summary": summary, "priority": priority})
        Conversation.objects.filter(pk=conv.pk).update(metadata={**conv.metadata, "tickets": tickets})
    return f"Ticket {ticket_id} opened with {priority} priority."


def support_prompt(injector: AgentInjector) -> str:
    """The system prompt, addressed to the conversation's owner when there is one."""
    owner = injector.conversation.owner
    name = (owner.get_full_name() or owner.get_username()) if owner is not None else "the customer"
    return (
        "You are the customer support assistant of a small online shop. You are talking to "
        f"{name}. Use lookup_order for order questions and search_faq for policies; open a ticket "
        "with create_ticket only when you cannot solve the problem. Answer briefly."
    )


class SupportAgent(BaseToolCallingAgent):
    """Customer support with order lookup, FAQ and tickets; long conversations are compacted
    into summaries by the default ``LLMMemoryCompactor`` (every 10 human messages)."""

    NAME = "Support agent"
    AGENT_KEY = "support"
    SYSTEM_PROMPT = support_prompt
    TOOLS = [lookup_order, search_faq, create_ticket]
    MEMORY_COMPACTOR_ENABLED = True
    CONVERSATION_HISTORY_TOKEN_LIMIT = 6_000
    MAX_TOOL_ROUNDS = 5


class EarlySummaryCompactor(LLMMemoryCompactor):
    """Summarises every 4 human messages and keeps the two newest turns verbatim."""

    def __init__(self, conversation_repo, conversation_id, llm, chat_history=None, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("summarize_every_n_human", 4)
        kwargs.setdefault("keep_recent_human_turns", 2)
        super().__init__(conversation_repo, conversation_id, llm, chat_history, **kwargs)


class EarlySummarySupportAgent(SupportAgent):
    """The support agent with its own compactor, chosen by overriding ``get_config()``.

    The Celery task rebuilds the compactor from its dotted path, so the class lives at module
    level.
    """

    NAME = "Support agent (early summaries)"
    AGENT_KEY = "support-early-summary"
    CONVERSATION_HISTORY_TOKEN_LIMIT = 3_000

    @classmethod
    def get_config(cls) -> AgentConfig:
        return AgentConfig(memory=MemoryConfig(compactor_class=EarlySummaryCompactor))


class MemorySupportAgent(SupportAgent):
    """The support agent with long-term memory of each customer: the ``remember`` and
    ``recall`` tools, the customer's facts in the system prompt, and a memory block recalled
    from their past conversations on every model call. The memory is the conversation
    owner's: ``manage.py chat support-memory --owner alice``."""

    NAME = "Support agent (with memory)"
    AGENT_KEY = "support-memory"
    KNOWLEDGE_MEMORY_ENABLED = True
    MEMORY_RECALL_ENABLED = True
