"""``manage.py recount_tokens``: recount stored token counts with the configured counter."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Q, Sum

from agentmemory.conf import get_token_counter
from agentmemory.models import Conversation, Message, Summary


class Command(BaseCommand):
    help = (
        "Recount the stored token count of messages (and summaries) with the configured "
        "AGENTMEMORY['TOKEN_COUNTER'], then refresh each conversation's token totals. "
        "By default only rows counted by another counter are touched."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--conversation", help="only this conversation (public uuid)")
        parser.add_argument("--all", action="store_true", help="recount every row, even ones already counted")
        parser.add_argument(
            "--batch-size", type=int, default=1000, help="rows per transaction (default 1000)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        counter = get_token_counter()
        batch_size = options["batch_size"]
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        conversations = Conversation.objects.all()
        if options["conversation"]:
            conversations = conversations.filter(uuid=options["conversation"])
            if not conversations.exists():
                raise CommandError(f"no conversation {options['conversation']}")
        stale = Q() if options["all"] else ~Q(token_counter=counter.id)
        messages = Message.objects.filter(conversation__in=conversations).filter(stale).order_by("pk")
        changed = 0
        last_pk = 0
        while True:
            batch = list(messages.filter(pk__gt=last_pk)[:batch_size])
            if not batch:
                break
            for message in batch:
                message.token_count = counter.count_message(message.to_chat_message())
                message.token_counter = counter.id
            with transaction.atomic():
                Message.objects.bulk_update(batch, ["token_count", "token_counter"])
            changed += len(batch)
            last_pk = batch[-1].pk
        from agentmemory.compaction import BaseMemoryCompactor

        summaries = 0
        for summary in Summary.objects.filter(conversation__in=conversations).filter(stale).iterator():
            compactor = BaseMemoryCompactor(
                Conversation.objects, summary.conversation_id, None, token_counter=counter
            )
            summary.token_count = compactor.summary_tokens(summary.text)
            summary.token_counter = counter.id
            tokens = Message.objects.filter(
                conversation_id=summary.conversation_id,
                seq__gte=summary.first_seq,
                seq__lte=summary.through_seq,
            ).aggregate(total=Sum("token_count"))["total"]
            summary.tokens_covered = tokens or 0
            summary.save(update_fields=["token_count", "token_counter", "tokens_covered"])
            summaries += 1
        refreshed = 0
        for conv_id in conversations.values_list("pk", flat=True).iterator():
            with transaction.atomic():
                Conversation.objects.select_for_update().filter(pk=conv_id).exists()
                total = Message.objects.filter(conversation_id=conv_id).aggregate(total=Sum("token_count"))[
                    "total"
                ]
                Conversation.objects.filter(pk=conv_id).update(stored_tokens=total or 0)
            refreshed += 1
        self.stdout.write(
            f"Recounted {changed} messages and {summaries} summaries with {counter.id}; "
            f"refreshed totals of {refreshed} conversations."
        )
