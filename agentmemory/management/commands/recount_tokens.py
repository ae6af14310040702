"""``manage.py recount_tokens``: recount stored token counts with the configured counter.

Every message and summary stores the id of the counter that counted it
(``"tiktoken:o200k_base"``, ``"tiktoken:cl100k_base"``, ``"approx-v3"``). After a change of
counter (a new ``TOKENIZER_MODEL``, tiktoken installed, a recalibrated estimate) this command
moves existing conversations over: it recounts the rows counted by another counter in
batches (one transaction per batch, so appends are never blocked for long), then the token
counts of the summaries and the totals of the conversations it touched. Running it twice
changes nothing the second time.

A message is counted as it is stored (``count_message`` of ``to_chat_message()``), so the
counter's rules apply whole: an ``ai`` message's thinking blocks are in its count. Counts
made before that rule by the same counter are recounted with ``--all``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.db import router, transaction
from django.db.models import Q, Sum

from agentmemory.conf import app_settings, get_token_counter
from agentmemory.management.base import TextArgumentsCommand, check_batch_size
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary


class Command(TextArgumentsCommand):
    help = (
        "Recount the stored token counts of messages and summaries with the configured counter "
        "(AGENTMEMORY['TOKEN_COUNTER'], by default the tokenizer of AGENTMEMORY['TOKENIZER_MODEL']), "
        "then refresh the token totals of the conversations touched. By default only rows "
        "counted by another counter are recounted."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--conversation", help="only this conversation (public uuid)")
        parser.add_argument("--all", action="store_true", help="recount every row, even ones already counted")
        parser.add_argument(
            "--batch-size", type=int, default=1000, help="rows per transaction (default 1000)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        counter = get_token_counter()
        batch_size = check_batch_size(options["batch_size"])
        conversations = Conversation.objects.all()
        if options["conversation"]:
            try:
                conversations = conversations.filter(uuid=options["conversation"])
                found = conversations.exists()
            except Exception as exc:  # a malformed uuid raises ValidationError
                raise CommandError(f"no conversation {options['conversation']}") from exc
            if not found:
                raise CommandError(f"no conversation {options['conversation']}")
        stale = Q() if options["all"] else ~Q(token_counter=counter.id)
        touched: set[int] = set()

        messages = Message.objects.filter(conversation__in=conversations).filter(stale).order_by("pk")
        changed = 0
        last_pk = 0
        while batch := list(messages.filter(pk__gt=last_pk)[:batch_size]):
            for message in batch:
                message.token_count = counter.count_message(message.to_chat_message())
                message.token_counter = counter.id
                touched.add(message.conversation_id)
            with transaction.atomic(using=router.db_for_write(Message)):
                Message.objects.bulk_update(batch, ["token_count", "token_counter"])
            changed += len(batch)
            last_pk = batch[-1].pk

        # a summary's count is the summary system message as the context window sends it
        prefix = app_settings().SUMMARY_MESSAGE_PREFIX
        summaries = Summary.objects.filter(conversation__in=conversations)
        summaries = summaries.filter(stale | Q(conversation_id__in=touched)).order_by("pk")
        recounted = 0
        last_pk = 0
        while batch_s := list(summaries.filter(pk__gt=last_pk)[:batch_size]):
            for summary in batch_s:
                summary.token_count = counter.count_message(ChatMessage.system(prefix + summary.text))
                summary.token_counter = counter.id
                tokens = Message.objects.filter(
                    conversation_id=summary.conversation_id,
                    seq__gte=summary.first_seq,
                    seq__lte=summary.through_seq,
                ).aggregate(total=Sum("token_count"))["total"]
                summary.tokens_covered = tokens or 0
            with transaction.atomic(using=router.db_for_write(Summary)):
                Summary.objects.bulk_update(batch_s, ["token_count", "token_counter", "tokens_covered"])
            recounted += len(batch_s)
            last_pk = batch_s[-1].pk

        ids = conversations.values_list("pk", flat=True) if options["all"] else sorted(touched)
        refreshed = 0
        for conv_id in ids:
            with transaction.atomic(using=router.db_for_write(Conversation)):
                # the row lock orders this against concurrent appends, which bump the total
                Conversation.objects.select_for_update().filter(pk=conv_id).exists()
                total = Message.objects.filter(conversation_id=conv_id).aggregate(total=Sum("token_count"))[
                    "total"
                ]
                Conversation.objects.filter(pk=conv_id).update(stored_tokens=total or 0)
            refreshed += 1
        self.stdout.write(
            f"Recounted {changed} messages and {recounted} summaries with {counter.id}; "
            f"refreshed totals of {refreshed} conversations."
        )
