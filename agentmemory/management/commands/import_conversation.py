"""``manage.py import_conversation FILE``: restore a conversation exported by export_conversation."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import find_user_by_name
from agentmemory.transfer import ConversationExists, InvalidConversationData, import_conversation


class Command(TextArgumentsCommand):
    help = (
        "Create a conversation from a document written by export_conversation, in the exact state "
        "it describes (seqs, token counts, summaries, counters); nothing is re-counted or trimmed."
    )

    path_options = ("file",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSON document ('-' reads standard input)")
        parser.add_argument("--owner", help="username of the owner (default: nobody)")
        parser.add_argument(
            "--new-uuid", action="store_true", help="give the conversation a fresh uuid (to make a copy)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = None
        if options["owner"]:
            owner = find_user_by_name(options["owner"])
            if owner is None:
                raise CommandError(f"no user {options['owner']!r}")
        try:
            if options["file"] == "-":
                data = json.load(sys.stdin)
            else:
                with open(options["file"], encoding="utf-8") as handle:
                    data = json.load(handle)
        except (OSError, ValueError, RecursionError) as exc:
            raise CommandError(f"cannot read {options['file']}: {exc}") from None
        try:
            conversation = import_conversation(data, owner=owner, new_uuid=options["new_uuid"])
        except ConversationExists as exc:
            raise CommandError(f"refused, nothing imported: {exc} (--new-uuid imports a copy)") from None
        except InvalidConversationData as exc:
            raise CommandError(f"refused, nothing imported: {exc}") from None
        self.stdout.write(str(conversation.uuid))
        summaries = conversation.summaries.count()
        self.stderr.write(
            f"imported {conversation.message_count} messages and "
            f"{summaries} {'summary' if summaries == 1 else 'summaries'} as {conversation.uuid}"
        )
