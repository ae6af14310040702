"""``manage.py export_conversation UUID [-o FILE]``: a conversation as a JSON document."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentmemory.models import Conversation
from agentmemory.transfer import export_conversation


class Command(BaseCommand):
    help = (
        "Write a conversation (messages, tool calls, token counts, summaries, counters) as a JSON "
        "document that import_conversation restores exactly."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("uuid", help="the conversation's public uuid")
        parser.add_argument("-o", "--output", default="-", help="file to write (default: standard output)")
        parser.add_argument("--indent", type=int, default=None, help="indent the JSON by this many spaces")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            key = uuid.UUID(options["uuid"])
        except ValueError:
            raise CommandError(f"{options['uuid']!r} is not a uuid") from None
        conversation = Conversation.objects.filter(uuid=key).first()
        if conversation is None:
            raise CommandError(f"no conversation {key}")
        text = json.dumps(export_conversation(conversation), ensure_ascii=False, indent=options["indent"])
        if options["output"] == "-":
            self.stdout.write(text)
            return
        with open(options["output"], "w", encoding="utf-8") as handle:
            handle.write(text)
        self.stderr.write(f"exported {conversation.message_count} messages of {key} to {options['output']}")
