"""``manage.py export_conversation UUID [-o FILE]``: a conversation as a JSON document."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
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
        write_whole(options["output"], pieces)
        self.stderr.write(f"exported {conversation.message_count} messages of {key} to {options['output']}")


def write_whole(path: str, pieces: Iterable[str]) -> None:
    """Write ``pieces`` to the file ``path`` whole or not at all: into a new file beside it,
    renamed over ``path`` once complete, so a run that fails half-way (a lost database
    connection, a full disk) leaves no truncated document and an existing file as it was. The
    file gets the permissions an existing one had, else those ``open`` gives. A path that is
    not a regular file (``/dev/stdout``, a named pipe) is written directly.

    Raises:
        CommandError: the file cannot be created or written (no such directory, a directory,
            no permission; an ``OSError`` traceback before).
    """
    temporary = None
    try:
        if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(pieces)
            return
        directory = os.path.dirname(os.path.abspath(path))
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".export-", suffix=".json.part")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.writelines(pieces)
        if os.path.isfile(path):
            shutil.copymode(path, temporary)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
        temporary = None
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
