"""``manage.py chat AGENT_KEY``: an interactive conversation with a registered agent, owned
by a user (``--owner``) when the memory features should have one."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.utils.module_loading import import_string

from agentmemory.agents import registry
from agentmemory.agents.base import LLM_HELP, BaseToolCallingAgent, resolve_llm
from agentmemory.agents.injector import load_conversation
from agentmemory.agents.results import FinalAnswer, ToolResultEvent
from agentmemory.exceptions import AgentMemoryError, ConversationNotFound, PermanentLLMError
from agentmemory.llm._sdk import import_sdk
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import OWNER_HELP, resolve_owner

QUIT = ("/quit", "/exit")
_PREVIEW = 200


def _uses_memory(agent: BaseToolCallingAgent) -> bool:
    """Whether ``agent`` reads or writes its conversations' owner's long-term memory."""
    cls = type(agent)
    return bool(
        cls.KNOWLEDGE_MEMORY_ENABLED or cls.MEMORY_RECALL_ENABLED or "search_conversations" in agent.tools
    )


class Command(TextArgumentsCommand):
    help = (
        "Chat with a registered agent in the terminal: each line you type is one turn, stored in a "
        "conversation (owned by --owner USERNAME, whose long-term memory the agent's memory "
        "features use). /quit (or end of input) leaves."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "agent_key", help="AGENT_KEY of a registered agent (or the agent class's dotted path)"
        )
        parser.add_argument(
            "--conversation",
            help="continue the conversation with this public uuid (with its owner; --owner, when "
            "given too, must be that owner)",
        )
        parser.add_argument(
            "--owner",
            metavar="USERNAME",
            default=None,
            help=OWNER_HELP.format(what="a new conversation", them="it"),
        )
        parser.add_argument("--llm", help="name of an AGENTMEMORY['LLMS'] entry (default: the agent's own)")
        parser.add_argument("--title", default="Chat session", help="title of a new conversation")

    def handle(self, *args: Any, **options: Any) -> None:
        agent_cls = self._agent_class(options["agent_key"])
        spec = options["llm"] or agent_cls.get_config().llm
        try:
            llm = resolve_llm(spec)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if llm is None:
            self.stderr.write(LLM_HELP)
            raise CommandError(f"no LLM configured for agent {agent_cls.AGENT_KEY!r}")
        package = getattr(type(llm), "SDK_PACKAGE", None)
        if package:
            try:
                import_sdk(package)
            except PermanentLLMError as exc:  # before a conversation is made or a line stored
                raise CommandError(str(exc)) from exc
        try:
            agent = agent_cls(llm=llm)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc

        owner_name = options["owner"]
        if options["conversation"]:
            try:
                conversation = load_conversation(options["conversation"])
            except ConversationNotFound as exc:
                raise CommandError(str(exc)) from exc
            if owner_name is not None:
                self._check_owner(conversation, owner_name)
        else:
            owner = (
                resolve_owner(owner_name, self.stdout, purpose="to own the conversation")
                if owner_name is not None
                else None
            )
            conversation = agent.start_conversation(owner=owner, title=options["title"])
        name = agent.NAME or agent.AGENT_KEY
        owned = (
            f", owned by {conversation.owner.get_username()}"
            if conversation.owner is not None
            else ", no owner"
        )
        self.stdout.write(
            f"Conversation {conversation.uuid} with {name} (model {getattr(llm, 'model_name', '?')}){owned}. "
            f"Type {QUIT[0]} to leave."
        )
        if conversation.owner is None and _uses_memory(agent):
            self.stdout.write(
                "  Long-term memory (the remember and recall tools, the memory block) belongs to a "
                "conversation's owner: start one with --owner USERNAME to use it."
            )
        self._loop(agent, conversation)
        self.stdout.write(
            f"Bye. Continue later with: manage.py chat {agent.AGENT_KEY} --conversation {conversation.uuid}"
        )

    def _check_owner(self, conversation: Any, owner_name: str) -> None:
        """Refuse ``--owner`` naming another user than the conversation's owner (its messages,
        and the facts the memory tools write, would mix two users' memory)."""
        owner = conversation.owner
        current = owner.get_username() if owner is not None else None
        if current != owner_name:
            whose = f"belongs to {current}" if current is not None else "belongs to no user"
            raise CommandError(
                f"conversation {conversation.uuid} {whose}, not {owner_name}: leave out --owner to "
                "continue it, or start a new conversation with --owner"
            )

    def _agent_class(self, key: str) -> type[BaseToolCallingAgent]:
        try:
            return registry.get(key)
        except registry.AgentNotRegistered as exc:
            if "." in key:
                try:
                    found = import_string(key)
                except ImportError:
                    found = None
                if isinstance(found, type) and issubclass(found, BaseToolCallingAgent):
                    return found
            raise CommandError(str(exc)) from exc

    def _loop(self, agent: BaseToolCallingAgent, conversation: Any) -> None:
        stdin = sys.stdin
        interactive = stdin.isatty()
        failures = 0
        while True:
            if interactive:
                self.stdout.write("you> ", ending="")
                self.stdout.flush()
            line = stdin.readline()
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            if text in QUIT:
                break
            try:
                for event in agent.stream(conversation, text):
                    if isinstance(event, ToolResultEvent):
                        args = json.dumps(dict(event.call.arguments), ensure_ascii=False)
                        result = event.message.text
                        if len(result) > _PREVIEW:
                            result = result[:_PREVIEW] + "..."
                        self.stdout.write(f"  [tool] {event.call.name}({args}) -> {result}")
                    elif isinstance(event, FinalAnswer):
                        self.stdout.write(f"{agent.NAME or 'agent'}> {event.answer}")
                        if event.result.stopped_reason != "answer":
                            self.stdout.write(f"  (stopped: {event.result.stopped_reason})")
            except AgentMemoryError as exc:
                # The history stays valid (each step is stored whole); the user may retry.
                self.stderr.write(f"error: {exc}")
                failures += 1
        if failures and not interactive:
            # Scripted input (a pipe, a file): let the caller see that a turn failed.
            raise CommandError(f"{failures} turn(s) failed", returncode=1)
