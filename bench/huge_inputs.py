"""Time and memory of the largest inputs agentmemory accepts, through Python and the API.

Run from the project root (SQLite by default; ``DATABASE_URL`` for another database)::

    .venv/bin/python -m bench.huge_inputs            # every case
    .venv/bin/python -m bench.huge_inputs images     # one: big, batch, window, images, calls

Each case runs in a fresh process (so that one's memory does not count against the next) on
a scratch database it migrates (``/tmp`` SQLite file unless ``DATABASE_URL`` is set) and
prints one line per step: wall seconds, the growth of the process's peak resident memory
(MiB, ``ru_maxrss``) and the outcome (an HTTP status and body size, a token count, or the
typed error a step was refused with):

- ``big``: a 1.9M-character message (under ``MAX_MESSAGE_CHARS``) appended, built into a
  window at the default budget (refused: ``ContextBudgetExceeded``), with truncation and at
  1,000,000 tokens; through the API as well.
- ``batch``: a 10,000-message batch appended in Python; through the API (over the upload
  limit: 413).
- ``window``: a 1,000,000-token window over 20,000 messages, in Python and through the API.
- ``images``: a message of 1,000 image parts (inline and by URL), stored and built.
- ``calls``: one AI message with 5,000 tool calls, their results arriving after a later
  message, and the window built over them.

``images`` and ``calls`` are over the default caps (``MAX_PARTS_PER_MESSAGE``,
``MAX_TOOL_CALLS_PER_MESSAGE``), which refuse such messages; these cases raise the caps to
measure what a host that raises them takes on.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ("big", "batch", "window", "images", "calls")
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(label: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; print seconds, peak-memory growth and what it gave (or raised)."""
    before = _peak_mib()
    started = time.perf_counter()
    try:
        out: Any = fn()
        shown = f"{out.status_code} ({len(out.content):,} bytes)" if hasattr(out, "status_code") else out
    except Exception as exc:
        out, shown = None, f"refused: {type(exc).__name__}: {str(exc)[:90]}"
    seconds = time.perf_counter() - started
    print(f"  {label:<44} {seconds:7.2f} s  +{_peak_mib() - before:6.1f} MiB  {shown}", flush=True)
    return out


def run_case(case: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from agentmemory.context import ContextWindowBuilder
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
    from agentmemory.models import Conversation

    if case in ("images", "calls"):
        # Over the default caps (MAX_PARTS_PER_MESSAGE 500, MAX_TOOL_CALLS_PER_MESSAGE 128):
        # these cases measure what a host that raises them takes on.
        from django.conf import settings
        from django.test.utils import override_settings

        raised = {"MAX_PARTS_PER_MESSAGE": 1_000, "MAX_TOOL_CALLS_PER_MESSAGE": 5_000}
        override_settings(AGENTMEMORY={**getattr(settings, "AGENTMEMORY", {}), **raised}).enable()
        print(f"  (caps raised for this case: {raised})", flush=True)
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench-huge")
    api = APIClient(raise_request_exception=False)
    api.force_login(user)

    def new() -> Conversation:
        return Conversation.objects.create(owner=user, agent_key="bench-huge")

    def turns(n: int) -> list[ChatMessage]:
        return [
            ChatMessage.human(f"question {i} " + "word " * 30)
            if i % 2 == 0
            else ChatMessage.ai(f"answer {i} " + "word " * 60)
            for i in range(n)
        ]

    print(f"{case}:", flush=True)
    if case == "big":
        text = ("lorem ipsum dolor sit amet " * 80_000)[:1_900_000]
        conv = new()
        step(
            "python: append 1.9M characters",
            lambda: PersistentChatHistory(conv).add_message(ChatMessage.human(text)).token_count,
        )
        step("python: build, default budget", lambda: ContextWindowBuilder(conv).build().total_tokens)
        step(
            "python: build, truncate policy",
            lambda: ContextWindowBuilder(conv, oversized_message_policy="truncate").build().total_tokens,
        )
        step(
            "python: build at 1,000,000 tokens",
            lambda: ContextWindowBuilder(conv).build(1_000_000).total_tokens,
        )
        conv = new()
        body = json.dumps({"role": "human", "content": text})
        step(
            "api: append 1.9M characters",
            lambda: api.post(
                f"/api/conversations/{conv.uuid}/messages/", body, content_type="application/json"
            ),
        )
        step(
            "api: context at 1,000,000 tokens",
            lambda: api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 1_000_000}),
        )
    elif case == "batch":
        messages = turns(10_000)
        conv = new()
        step(
            "python: append 10,000 messages at once",
            lambda: len(PersistentChatHistory(conv).add_messages(messages)),
        )
        body = json.dumps({"messages": [{"role": m.role.value, "content": m.content} for m in messages]})
        conv = new()
        step(
            "api: append 10,000 messages at once",
            lambda: api.post(
                f"/api/conversations/{conv.uuid}/messages/", body, content_type="application/json"
            ),
        )
    elif case == "window":
        conv = new()
        history = PersistentChatHistory(conv)
        messages = turns(20_000)
        for start in range(0, len(messages), 1_000):
            history.add_messages(messages[start : start + 1_000])
        step(
            "python: 1,000,000-token window, 20,000 msgs",
            lambda: len(ContextWindowBuilder(conv).build(1_000_000).messages),
        )
        step(
            "api: 1,000,000-token context",
            lambda: api.get(f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 1_000_000}),
        )
        step(
            "api: same, OpenAI format",
            lambda: api.get(
                f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 1_000_000, "format": "openai"}
            ),
        )
    elif case == "images":
        inline = [ContentPart(kind=PartKind.IMAGE, data=PNG_1X1, mime_type="image/png") for _ in range(1_000)]
        by_url = [ContentPart(kind=PartKind.IMAGE, url=f"https://example.com/{i}.png") for i in range(1_000)]
        conv = new()
        step(
            "python: 1,000 inline images",
            lambda: (
                PersistentChatHistory(conv)
                .add_message(ChatMessage.from_parts(Role.HUMAN, inline))
                .token_count
            ),
        )
        step("python: build, default budget", lambda: ContextWindowBuilder(conv).build().total_tokens)
        step(
            "python: build at 1,000,000 tokens",
            lambda: ContextWindowBuilder(conv).build(1_000_000).total_tokens,
        )
        conv = new()
        step(
            "python: 1,000 images by URL",
            lambda: (
                PersistentChatHistory(conv)
                .add_message(ChatMessage.from_parts(Role.HUMAN, by_url))
                .token_count
            ),
        )
        step(
            "python: build, truncate policy",
            lambda: ContextWindowBuilder(conv, oversized_message_policy="truncate").build().total_tokens,
        )
        body = json.dumps(
            {"role": "human", "parts": [{"type": "image", "url": "data:image/png;base64," + PNG_1X1}] * 1_000}
        )
        conv = new()
        step(
            "api: 1,000 inline images",
            lambda: api.post(
                f"/api/conversations/{conv.uuid}/messages/", body, content_type="application/json"
            ),
        )
        step(
            "api: context, OpenAI format, 1,000,000",
            lambda: api.get(
                f"/api/conversations/{conv.uuid}/context/", {"max_tokens": 1_000_000, "format": "openai"}
            ),
        )
    elif case == "calls":
        n = 5_000
        conv = new()
        history = PersistentChatHistory(conv)
        calls = [ToolCall(id=f"c{i}", name="lookup", arguments={"i": i}) for i in range(n)]
        step(
            f"python: AI message with {n:,} tool calls",
            lambda: (
                history.add_messages([ChatMessage.human("all of them"), ChatMessage.ai(None, calls)])[-1].seq
            ),
        )
        step(
            "python: a human message while they wait",
            lambda: history.add_message(ChatMessage.human("still there?")).seq,
        )
        step(
            f"python: {n:,} late results",
            lambda: len(history.add_messages([ChatMessage.tool("found", tool_call_id=c.id) for c in calls])),
        )
        step("python: build, default budget", lambda: len(ContextWindowBuilder(conv).build().messages))
        step(
            "python: build at 1,000,000 tokens",
            lambda: len(ContextWindowBuilder(conv).build(1_000_000).messages),
        )
    else:
        raise SystemExit(f"unknown case {case!r}; one of {', '.join(CASES)}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        run_case(argv[1])
        return 0
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "sqlite:////tmp/agentmemory-bench-huge.sqlite3")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    print(f"database: {env['DATABASE_URL']}")
    status = 0
    for case in argv or CASES:
        done = subprocess.run([sys.executable, "-m", "bench.huge_inputs", "--one", case], cwd=ROOT, env=env)
        status = status or done.returncode
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
