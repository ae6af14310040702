"""``manage.py compact_conversations``: run or enqueue compactions that were requested and
never ran (a dead broker, a failed model call, a killed worker), or every due one."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from agentmemory.compaction import compaction_mode, pending_compactions, sweep
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.models import Conversation


class Command(TextArgumentsCommand):
    help = (
        "Compact conversations whose compaction was requested and has not run (requested more "
        "than COMPACTION_LEASE_SECONDS ago or failed, and not running now). With --all, also "
        "every conversation for which a compaction is due. Runs them in this process, one "
        "bounded run after another until each backlog is folded, or with --enqueue hands them "
        "to the Celery worker."
    )

    def add_arguments(self, parser: Any) -> None:
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--pending", action="store_true", help="requested and not run (the default)")
        scope.add_argument(
            "--all", action="store_true", help="also every conversation for which a compaction is due"
        )
        parser.add_argument("--conversation", help="only this conversation (public uuid)")
        parser.add_argument(
            "--enqueue", action="store_true", help="enqueue the Celery task instead of running here"
        )
        parser.add_argument("--limit", type=int, default=None, help="at most this many conversations")
        parser.add_argument("--dry-run", action="store_true", help="list the conversations, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        if options["enqueue"] and compaction_mode() != "celery":
            self.stderr.write(
                "warning: COMPACTION_MODE is not 'celery' here; the tasks go to the configured broker anyway"
            )
        only: int | None = None
        if options["conversation"]:
            only = (
                Conversation.objects.filter(uuid=options["conversation"]).values_list("pk", flat=True).first()
                if _is_uuid(options["conversation"])
                else None
            )
            if only is None:
                raise CommandError(f"no conversation {options['conversation']}")
        if options["dry_run"]:
            ids = (
                [only]
                if only is not None
                else pending_compactions(include_due=options["all"], limit=limit, backoff=False)
            )
            uuids = dict(Conversation.objects.filter(pk__in=ids).values_list("pk", "uuid"))
            for pk in ids:
                self.stdout.write(f"would compact conversation {uuids.get(pk, pk)}")
            self.stdout.write(f"{len(ids)} conversations to compact")
            return

        def progress(pk: int, outcome: str) -> None:
            self.stdout.write(f"conversation {public_id(pk)}: {outcome}")

        if only is not None:
            from agentmemory.compaction import compact_backlog, enqueue_compaction

            outcome = (
                ("enqueued" if enqueue_compaction(only, only_if_needed=False) is None else "failed")
                if options["enqueue"]
                else compact_backlog(only)
            )
            progress(only, outcome)
            counts = {outcome: 1}
        else:
            # Asked for by hand: conversations whose failing runs are pausing are tried too.
            counts = sweep(
                enqueue=options["enqueue"],
                include_due=options["all"],
                limit=limit,
                progress=progress,
                backoff=False,
            )
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "nothing to do"
        self.stdout.write(summary)
        if counts.get("failed"):
            raise CommandError(
                f"{counts['failed']} compactions failed; see compaction_error on each conversation"
            )


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def public_id(pk: int) -> str:
    """A conversation's public uuid, the id ``--conversation``, the API and the admin use
    (the primary key where the conversation is gone)."""
    found = Conversation.objects.filter(pk=pk).values_list("uuid", flat=True).first()
    return str(found) if found is not None else str(pk)
