"""What the row decoding shortcuts of ``agentmemory.store.rows`` save, per object made.

Run from the project root (no database needed)::

    .venv/bin/python -m bench.rows

Prints, in microseconds per object (the median of 7 repeats), each shortcut beside the plain
way it replaces, and the ratio: ``ChatMessage`` and ``ToolCall`` made by the generated
positional constructors (``_fast_init``) against their dataclass constructors, ``RowMeta``
made with ``tuple.__new__`` against the named tuple's ``__new__``, a message's ``metadata``
written into its slot against ``dataclasses.replace``, and a JSON column decoded by
``_loads`` against ``json.loads``. A window decodes one of each per row it reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import timeit
from collections.abc import Callable


def _per_call(fn: Callable[[], object], number: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=7)
    return statistics.median(runs) / number * 1e6


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from agentmemory.messages import ChatMessage, Role, ToolCall
    from agentmemory.store import rows

    number = 50_000
    calls = [{"id": "call_1", "name": "search", "arguments": {"q": "lisbon"}}]
    raw_calls = json.dumps(calls)
    made = rows._new_chat(Role.HUMAN, "hello", (), "", "", 5, 7, 3, ())
    cases = [
        (
            "ChatMessage",
            lambda: rows._new_chat(Role.HUMAN, "hello", (), "", "", 5, 7, 3, ()),
            lambda: ChatMessage(
                role=Role.HUMAN,
                content="hello",
                tool_calls=(),
                tool_call_id="",
                name="",
                seq=5,
                id=7,
                token_count=3,
                parts=(),
            ),
        ),
        (
            "ToolCall",
            lambda: rows._call_objects(calls),
            lambda: tuple(ToolCall.from_dict(c) for c in calls),
        ),
        (
            "RowMeta",
            lambda: rows._tuple_new(rows.RowMeta, (5, "human", 3, None, "", (), False, "")),
            lambda: rows.RowMeta(5, "human", 3, None, "", ()),
        ),
        (
            "metadata",
            lambda: rows._set_metadata(made, {"thinking": []}),
            lambda: dataclasses.replace(made, metadata={"thinking": []}),
        ),
        ("JSON column", lambda: rows._loads(raw_calls), lambda: json.loads(raw_calls)),
    ]
    print(f"{'object':<12} {'shortcut us':>12} {'plain us':>10} {'ratio':>6}")
    for name, fast, plain in cases:
        quick, slow = _per_call(fast, number), _per_call(plain, number)
        print(f"{name:<12} {quick:>12.3f} {slow:>10.3f} {quick / slow:>6.2f}")


if __name__ == "__main__":
    main()
