"""``manage.py chat AGENT_KEY``: an interactive session with a registered agent."""

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

QUIT = ("/quit", "/exit")
_PREVIEW = 200


class Command(TextArgumentsCommand):
    help = (
        "Chat with a registered agent in the terminal: each line you type is one turn, stored in a "
        "conversation. /quit (or end of input) leaves."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "agent_key", help="AGENT_KEY of a registered agent (or the agent class's dotted path)"
        )
        parser.add_argument("--conversation", help="continue the conversation with this public uuid")
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

        if options["conversation"]:
            try:
                conversation = load_conversation(options["conversation"])
            except ConversationNotFound as exc:
                raise CommandError(str(exc)) from exc
        else:
            conversation = agent.start_conversation(title=options["title"])
        name = agent.NAME or agent.AGENT_KEY
        self.stdout.write(
            f"Conversation {conversation.uuid} with {name} (model {getattr(llm, 'model_name', '?')}). "
            f"Type {QUIT[0]} to leave."
        )
        self._loop(agent, conversation)
        self.stdout.write(
            f"Bye. Continue later with: manage.py chat {agent.AGENT_KEY} --conversation {conversation.uuid}"
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
