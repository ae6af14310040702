"""``manage.py purge_conversations``: delete (or blank) conversations past their retention."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError

from agentmemory.management.base import TextArgumentsCommand
from agentmemory.retention import parse_period, purge_conversations


class Command(TextArgumentsCommand):
    help = (
        "Delete conversations inactive for longer than their retention period (the conversation's "
        "retention_days, else AGENTMEMORY['RETENTION_DAYS_BY_AGENT'], else "
        "AGENTMEMORY['RETENTION_DAYS']; --older-than replaces the settings), with their messages, "
        "summaries and embeddings, in batches; then long-term facts whose expiry has passed. "
        "--blank-content keeps the rows and counters for statistics and blanks what they say."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--older-than",
            metavar="PERIOD",
            help="one period for all conversations instead of the settings: 90d, 12h, 2w (unit: days)",
        )
        parser.add_argument("--agent", metavar="KEY", help="only conversations and facts of this agent key")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be purged, change nothing"
        )
        parser.add_argument(
            "--blank-content",
            action="store_true",
            help="blank message content, parts, tool arguments and summaries; keep rows and counters",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = None
        if options["older_than"] is not None:
            try:
                older_than = parse_period(options["older_than"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        verb = "blank" if options["blank_content"] else "delete"
        if options["dry_run"]:
            report = purge_conversations(
                older_than=older_than,
                agent_key=options["agent"],
                dry_run=True,
                blank_content=options["blank_content"],
            )
            self.stdout.write(
                f"would {verb} {report.conversations} conversations ({report.messages} messages, "
                f"{report.summaries} summaries, {report.message_embeddings} message embeddings) "
                f"and delete {report.facts} expired facts"
            )
            return
        progress, close = self._progress(options["no_progress"])
        try:
            report = purge_conversations(
                older_than=older_than,
                agent_key=options["agent"],
                blank_content=options["blank_content"],
                progress=progress,
            )
        finally:
            close()
        done = "blanked" if report.blanked else "deleted"
        self.stdout.write(
            f"{done} {report.conversations} conversations ({report.messages} messages, "
            f"{report.summaries} summaries, {report.message_embeddings} message embeddings); "
            f"deleted {report.facts} expired facts"
        )

    def _progress(self, disabled: bool) -> tuple[Any, Any]:
        """A progress callback and its closer: a tqdm bar on a terminal when tqdm is installed,
        else a line per batch on standard error (nothing with --no-progress)."""
        if disabled:
            return None, lambda: None
        bar: Any = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                bar = tqdm(total=0, unit="conversation", file=sys.stderr, desc="purge")

        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar.total = total
                bar.update(done - bar.n)
            else:
                self.stderr.write(f"purged {done}/{total} conversations")

        def close() -> None:
            if bar is not None:
                bar.close()

        return progress, close
