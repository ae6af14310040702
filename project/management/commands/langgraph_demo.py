"""``manage.py langgraph_demo``: two turns of the example LangGraph agent
(``project/langgraph_example.py``), offline, then what agentmemory holds of them."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from langchain_core.messages import HumanMessage


class Command(BaseCommand):
    help = (
        "Run two turns of a LangGraph chat graph whose checkpoints live in DjangoSaver, whose "
        "messages are mirrored into an agentmemory conversation and whose notes go to "
        "DjangoStore; the model is a scripted fake (offline). Prints the conversation as stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", default="demo", help="owner of the conversation (created when missing)")
        parser.add_argument("--thread", default=None, help="LangGraph thread id (default: a new one)")

    def handle(self, *args: Any, **options: Any) -> None:
        from agentmemory.contrib.langgraph import ConversationMirror, DjangoStore
        from agentmemory.models import Message
        from agentmemory.recall import search_messages
        from project.langgraph_example import build_graph

        user, _created = get_user_model()._default_manager.get_or_create(
            **{get_user_model().USERNAME_FIELD: options["user"]}
        )
        thread = options["thread"] or f"demo-{uuid.uuid4().hex[:8]}"
        graph = build_graph(user)
        config = {"configurable": {"thread_id": thread, "user_id": user.pk}}
        for question in ("Where is my order A-1001?", "And A-1002?"):
            state = graph.invoke({"messages": [HumanMessage(question)]}, config)
            self.stdout.write(f"user: {question}\nagent: {state['messages'][-1].content}")

        conversation = ConversationMirror().conversation_for(thread)
        assert conversation is not None
        self.stdout.write(f"\nConversation {conversation.uuid} (thread {thread}), as agentmemory stores it:")
        for seq, role, content, calls in (
            Message.objects.filter(conversation=conversation)
            .order_by("seq")
            .values_list("seq", "role", "content", "tool_calls")
        ):
            shown = (
                content if content is not None else ", ".join(f"{c['name']}({c['arguments']})" for c in calls)
            )
            self.stdout.write(f"  {seq}. {role}: {shown}")
        checkpoints = len(list(graph.checkpointer.list({"configurable": {"thread_id": thread}})))
        self.stdout.write(f"{checkpoints} checkpoints saved for the thread")
        hits = search_messages("DHL", owner=user, conversation=conversation)
        self.stdout.write(f"search 'DHL': {[h.content for h in hits][:1]}")
        notes = DjangoStore().search(("users", str(user.pk), "notes"), query="order")
        self.stdout.write(f"notes about the user: {[n.value['text'] for n in notes]}")
