"""``manage.py repair_conversations``: work conversations' bookkeeping out again from their
stored messages (``agentmemory.repair.repair_conversation``): what a ``ConversationStateError``
(the API's 409 ``conversation_inconsistent``) asks for after rows were changed by hand."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import CommandError

from agentmemory.management.base import TextArgumentsCommand, check_batch_size
from agentmemory.models import Conversation
from agentmemory.repair import repair_conversation


class Command(TextArgumentsCommand):
    help = (
        "Work the bookkeeping of conversations out again from their stored messages: last_seq, "
        "the message, human message and token counts, the pinned system prompt, the current "
        "summary and the pending tool calls. Each conversation is repaired under its row lock "
        "in a transaction of its own; messages and summaries are never changed. Prints each "
        "conversation that changed."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--conversation", help="only this conversation (public uuid)")
        parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
        parser.add_argument(
            "--batch-size", type=int, default=1000, help="conversation ids read at once (default 1000)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        batch_size = check_batch_size(options["batch_size"])
        conversations = Conversation.objects.order_by("pk")
        if options["conversation"]:
            try:
                wanted = uuid.UUID(options["conversation"])
            except ValueError:
                raise CommandError(f"no conversation {options['conversation']}") from None
            conversations = conversations.filter(uuid=wanted)
            if not conversations.exists():
                raise CommandError(f"no conversation {options['conversation']}")
        verb = "would change" if options["dry_run"] else "changed"
        seen = changed = 0
        last = 0
        while ids := list(conversations.filter(pk__gt=last).values_list("pk", flat=True)[:batch_size]):
            for pk in ids:
                repair = repair_conversation(pk, dry_run=options["dry_run"])
                seen += 1
                if repair.changes:
                    changed += 1
                    self.stdout.write(f"{verb} {repair}")
            last = ids[-1]
        self.stdout.write(f"{seen} conversations checked, {changed} {verb}.")
