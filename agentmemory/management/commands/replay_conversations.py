"""``manage.py replay_conversations``: import transcripts and replay them turn by turn."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from django.core.management.base import CommandError, CommandParser
from django.db import connection

from agentmemory.conf import app_settings
from agentmemory.formats.transcripts import FORMATS, TranscriptError, load_transcripts
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import OWNER_HELP, resolve_owner

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "support_demo.json"


class _Progress(Protocol):
    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


class TextProgress:
    """A one-line progress counter, for when tqdm (the ``progress`` extra) is not installed.

    Redraws at most every ``interval`` seconds (and on the last message), so a replay of
    100,000 messages does not spend its time writing to the terminal.
    """

    def __init__(self, total: int, *, file: TextIO, interval: float = 0.25) -> None:
        self.total, self.count, self.file, self.interval = total, 0, file, interval
        self._drawn_at: float | None = None

    def update(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if self._drawn_at is None or now - self._drawn_at >= self.interval or self.count >= self.total:
            self._drawn_at = now
            share = 100 * self.count // self.total if self.total else 100
            self.file.write(f"\rreplay: {self.count}/{self.total} msg ({share}%)")
            self.file.flush()

    def close(self) -> None:
        self.file.write("\n")
        self.file.flush()


def progress_bar(total: int, file: TextIO) -> _Progress:
    """A tqdm bar over ``total`` messages, or a ``TextProgress`` counter without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:
        return TextProgress(total, file=file)
    # tqdm's own probe reads a 0x0 size on some pseudo-terminals and then draws nothing;
    # shutil falls back to 80x24 there.
    size = shutil.get_terminal_size()
    return tqdm(
        total=total, unit="msg", file=file, desc="replay", ncols=min(size.columns, 120), nrows=size.lines
    )


class Command(TextArgumentsCommand):
    help = (
        "Import transcripts (tau-bench runs, LoCoMo conversations or OpenAI message lists) and "
        "replay them turn by turn as an agent would: store the human message, build the context "
        "window as an agent does (compacting first when it would leave stored messages in neither "
        "window nor summary) and check the window invariants, store the recorded AI and tool "
        "messages, let compaction trigger. Counts, in every window, the messages left in neither "
        "window nor summary. Ends with a report whose last line is 'Replay finished: N invariant "
        "violations, M messages left out, B budget errors'; the exit status is 1 when any of them "
        "is above 0. Without PATH the bundled sample "
        "(agentmemory/samples/support_demo.json, a bookstore support agent) is replayed. Each run "
        "creates new conversations. LoCoMo: the first speaker (speaker_a) is the human, the second the AI; "
        "each dialogue turn is one message with its dia_id and session date in metadata."
    )

    path_options = ("path",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "path",
            nargs="?",
            default=None,
            help=f"JSON transcript file (default: the bundled sample {SAMPLE.name})",
        )
        parser.add_argument(
            "--format",
            choices=FORMATS,
            default=None,
            help="transcript format (default: detected from the file's first item)",
        )
        parser.add_argument(
            "--max-tokens",
            type=int,
            default=None,
            help="token budget of every context window (default: "
            "AGENTMEMORY['DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT'], 10,000)",
        )
        parser.add_argument("--limit", type=int, default=None, help="replay only the first K conversations")
        parser.add_argument(
            "--owner",
            metavar="USERNAME",
            default=None,
            help=OWNER_HELP.format(what="the conversations created", them="them"),
        )
        parser.add_argument(
            "--no-progress",
            action="store_true",
            help="no progress bar (it is also off when stderr is no TTY); tqdm draws it when installed "
            "(the 'progress' extra), a plain counter otherwise",
        )
        parser.add_argument(
            "--compact-before-build",
            action="store_true",
            help="also let compaction trigger right after each human message, before its window is "
            "built (by default only after the turn, once the agent has answered)",
        )
        parser.add_argument(
            "--through-agent",
            action="store_true",
            help="replay through BaseToolCallingAgent.run() with the memory compactor enabled and a "
            "scripted model answering with the recorded messages; every model call of a turn is "
            "checked (windows built then counts model calls)",
        )
        parser.add_argument(
            "--show",
            type=int,
            default=5,
            help="how many violations, budget errors and left-out windows to print (default 5)",
        )
        parser.add_argument(
            "--wait-for-compaction",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="with a Celery broker, wait at most this long for the worker's compactions before "
            "counting summaries (default 60; tasks run in-process without a broker)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from agentmemory.compaction import compaction_mode, get_compaction_llm
        from agentmemory.replay import (
            refresh_summary_counts,
            replay_through_agent,
            replay_transcripts,
            wait_for_compaction,
        )

        path = Path(options["path"]) if options["path"] else SAMPLE
        max_tokens, limit = options["max_tokens"], options["limit"]
        most = app_settings().MAX_CONTEXT_TOKENS
        if max_tokens is not None and not 0 < max_tokens <= most:
            raise CommandError(
                f"--max-tokens must be from 1 to {most:,} tokens (AGENTMEMORY['MAX_CONTEXT_TOKENS'])"
            )
        if limit is not None and limit <= 0:
            raise CommandError("--limit must be at least 1")
        try:
            transcripts = load_transcripts(path, options["format"], limit=limit)
        except TranscriptError as exc:
            raise CommandError(str(exc)) from exc
        if not transcripts:
            raise CommandError(f"{path}: no conversations to replay")
        owner = (
            resolve_owner(options["owner"], self.stdout, purpose="to own the replayed conversations")
            if options["owner"] is not None
            else None
        )

        eager = compaction_mode() != "celery"  # inline (or off): nothing to wait for
        llm = get_compaction_llm()
        model = (
            "offline extractive compactor"
            if llm is None
            else getattr(llm, "model_name", "") or "configured model"
        )
        database = connection.settings_dict.get("NAME")
        self.stdout.write(
            f"Replaying {len(transcripts)} conversations from {path} into {connection.vendor} "
            f"database {database}; compaction: {'in process (inline)' if eager else 'Celery worker'}, "
            f"summariser {model}"
        )

        total = sum(len(t.messages) for t in transcripts)
        show_bar = not options["no_progress"] and sys.stderr.isatty()
        bar = progress_bar(total, sys.stderr) if show_bar else None
        try:
            if options["through_agent"]:
                report = replay_through_agent(
                    transcripts, max_tokens=max_tokens, progress=bar.update if bar else None, owner=owner
                )
            else:
                report = replay_transcripts(
                    transcripts,
                    max_tokens=max_tokens,
                    progress=bar.update if bar else None,
                    compact_before_build=options["compact_before_build"],
                    owner=owner,
                )
        finally:
            if bar is not None:
                bar.close()
        if not eager and options["wait_for_compaction"] > 0:
            settled = wait_for_compaction(
                report.conversation_ids, timeout=options["wait_for_compaction"], max_tokens=report.max_tokens
            )
            if not settled:
                self.stdout.write(
                    "compaction still pending on the worker; summary counts may be low "
                    "(is a worker running? celery -A project worker)"
                )
            refresh_summary_counts(report)

        for line in report.lines(show=max(0, options["show"])):
            self.stdout.write(line)
        self.stdout.flush()
        if report.failed:
            raise CommandError(
                f"{report.violation_count} invariant violations, {report.left_out_messages} messages left "
                f"out, {report.budget_error_count} budget errors",
                returncode=1,
            )
