"""``manage.py export_conversation UUID [-o FILE]``: a conversation as a JSON document."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from agentmemory.management.base import TextArgumentsCommand
from agentmemory.models import Conversation
from agentmemory.transfer import export_conversation, export_json


class Command(TextArgumentsCommand):
    help = (
        "Write a conversation (messages, tool calls, token counts, summaries, counters) as a JSON "
        "document that import_conversation restores exactly."
    )

    path_options = ("output",)
    #: the widest ``--indent`` (spaces): more only makes the file larger (a huge one ran out
    #: of memory)
    max_indent = 16

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("uuid", help="the conversation's public uuid")
        parser.add_argument("-o", "--output", default="-", help="file to write (default: standard output)")
        parser.add_argument("--indent", type=int, default=None, help="indent the JSON by this many spaces")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["indent"] is not None and not 0 <= options["indent"] <= self.max_indent:
            raise CommandError(
                f"--indent must be from 0 to {self.max_indent} spaces, not {options['indent']}"
            )
        try:
            key = uuid.UUID(options["uuid"])
        except ValueError:
            raise CommandError(f"{options['uuid']!r} is not a uuid") from None
        conversation = Conversation.objects.filter(uuid=key).first()
        if conversation is None:
            raise CommandError(f"no conversation {key}")
        if options["indent"] is None:
            # a message at a time, as the API's export: the document is never held whole
            pieces: Iterable[str] = (piece.decode() for piece in export_json(conversation))
        else:
            pieces = [
                json.dumps(export_conversation(conversation), ensure_ascii=False, indent=options["indent"])
            ]
        if options["output"] == "-":
            for piece in pieces:
                self.stdout.write(piece, ending="")
            self.stdout.write("")
            return
        with open(options["output"], "w", encoding="utf-8") as handle:
            handle.writelines(pieces)
        self.stderr.write(f"exported {conversation.message_count} messages of {key} to {options['output']}")
