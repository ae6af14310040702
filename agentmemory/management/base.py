"""The base of agentmemory's management commands: arguments that are text are checked first."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentmemory.validation import text_problem

#: the most rows a command's ``--batch-size`` reads at once: a larger batch is a transaction
#: and a list in memory of that many rows, and past 64 bits a database error
MAX_BATCH_SIZE = 100_000


def check_batch_size(value: int) -> int:
    """``value`` when it is from 1 to ``MAX_BATCH_SIZE``.

    Raises:
        CommandError: any other value, saying the range.
    """
    if not 1 <= value <= MAX_BATCH_SIZE:
        raise CommandError(f"--batch-size must be from 1 to {MAX_BATCH_SIZE:,}, not {value}")
    return value


class TextArgumentsCommand(BaseCommand):
    """A ``BaseCommand`` that refuses, before any work, a text argument the database cannot
    take: Python reads bytes of the command line that are not UTF-8 (a terminal in Latin-1,
    a pasted file name) as lone surrogates (PEP 383), which no database driver encodes, and
    the command stopped with a ``UnicodeEncodeError`` traceback at its first query.

    ``path_options``: the destinations of arguments that name files, which may hold any bytes
    the file system allows.

    Raises:
        CommandError: naming the argument, when it holds a NUL or a lone surrogate.
    """

    path_options: tuple[str, ...] = ()

    def execute(self, *args: Any, **options: Any) -> Any:
        for name, value in options.items():
            if name in self.path_options or not isinstance(value, str):
                continue
            problem = text_problem(value)
            if problem:
                raise CommandError(
                    f"the argument {name.replace('_', '-')} {problem}: is the terminal's encoding UTF-8?"
                )
        return super().execute(*args, **options)
