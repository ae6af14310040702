"""``manage.py memory_md export|import``: a user's persistent facts to and from ``MEMORY.md``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from agentmemory.knowledge import InvalidFactError, KnowledgeMemory, export_memory_md, import_memory_md
from agentmemory.management.base import TextArgumentsCommand
from agentmemory.management.owners import find_user_by_name
from agentmemory.recall.scope import MemoryScopeError
from agentmemory.validation import parse_id


def find_user(value: str) -> Any:
    """A user by username (``find_user_by_name``: the user model's ``USERNAME_FIELD``, as
    typed or normalised) or by numeric id."""
    model = get_user_model()
    user = find_user_by_name(value)
    pk = parse_id(value)
    if user is None and pk is not None:
        user = model._default_manager.filter(pk=pk).first()
    if user is None:
        raise CommandError(f"no user {value!r}")
    return user


class Command(TextArgumentsCommand):
    help = (
        "Export a user's persistent long-term facts as MEMORY.md (categories as '## ' headings, "
        "facts as '- ' bullets), or import such a file as persistent facts. Importing a file "
        "twice adds nothing the second time."
    )

    path_options = ("file",)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action", choices=["export", "import"])
        parser.add_argument("--user", required=True, help="username or user id (the facts' owner)")
        parser.add_argument("--agent-key", default=None, help="agent key of the scope (exact)")
        parser.add_argument("--namespace", default=None, help="namespace of the scope (exact)")
        parser.add_argument("--file", "-f", default="-", help="path of MEMORY.md; '-' for stdout/stdin")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            memory = KnowledgeMemory(
                find_user(options["user"]), agent_key=options["agent_key"], namespace=options["namespace"]
            )
        except MemoryScopeError as exc:  # an argument that is not text (undecodable bytes)
            raise CommandError(str(exc)) from exc
        path = options["file"]
        if options["action"] == "export":
            text = export_memory_md(memory)
            if path == "-":
                self.stdout.write(text, ending="")
            else:
                try:
                    Path(path).write_text(text, encoding="utf-8")
                except OSError as exc:
                    raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
            return
        try:
            # utf-8-sig: a byte order mark (editors on Windows write one) is not text
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path} as UTF-8 text: {exc}") from exc
        try:
            report = import_memory_md(memory, text)
        except InvalidFactError as exc:
            raise CommandError(f"nothing imported: {exc}") from exc
        self.stdout.write(
            f"created {report.created}, already present {report.duplicate}, updated {report.updated}, "
            f"superseding {report.superseded}, skipped lines {report.skipped}"
        )
