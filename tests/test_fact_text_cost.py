"""The fact text rules (``fact_key``, ``same_subject``) run on every store, under the scope's
write lock, once per candidate fact: their cost must stay linear in the fact's length
(``MAX_FACT_CHARS``, 10,000 characters), whatever the text holds. Each case here was
quadratic or worse: a run of whitespace scanned again from each of a key's possible ends,
every written date looked up again for every word, the text before each word copied to look
for a "#"."""

from __future__ import annotations

import time
from collections.abc import Callable

from agentmemory import knowledge


def _fastest(call: Callable[[], object], runs: int = 3) -> float:
    """The shortest of ``runs`` timings of ``call``, in seconds (the least disturbed by other
    work on the machine)."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def test_a_key_after_a_long_run_of_whitespace_is_read_in_linear_time() -> None:
    # 1,000 leading spaces took about a second (10,000: minutes); 10,000 spaces between a
    # word and the next took 20-40 ms
    assert knowledge.fact_key(" " * 1000 + "x") is None
    assert _fastest(lambda: knowledge.fact_key(" " * 1000 + "x")) < 0.005
    inside = "x" + " " * 9990 + "y: z"
    assert knowledge.fact_key(inside) is None
    assert _fastest(lambda: knowledge.fact_key(inside)) < 0.005


def test_keys_still_read_as_before() -> None:
    assert knowledge.fact_key("Favourite colour: blue") == "favourite colour"
    assert knowledge.fact_key("  Favourite   colour \t : blue") == "favourite colour"
    assert knowledge.fact_key("Favourite colour\n: blue") == "favourite colour"
    assert knowledge.fact_key("Favourite\ncolour: blue") is None  # a key is one line
    assert knowledge.fact_key("x" * 80 + ": y") == "x" * 80
    assert knowledge.fact_key("x" * 81 + ": y") is None
    assert knowledge.fact_key("x" * 80 + "   : y") == "x" * 80
    assert knowledge.fact_key("\u9996\u9009\u8bed\u8a00\uff1aPython") is not None
    assert knowledge.fact_key("14\uff1a30 \u5f00\u4f1a") is None
    assert knowledge.fact_key("   : y") is None


def test_comparing_facts_full_of_written_dates_takes_milliseconds() -> None:
    # every date was looked up again for every word: 0.4-0.9 s a comparison
    old = "I " + "1/1/2020 " * 1110
    new = "I " + "1/1/2020 " * 1109 + "2/2/2020"
    assert len(new) <= 10_000
    assert _fastest(lambda: knowledge.same_subject(old, new)) < 0.1


def test_dates_and_numbered_things_beyond_the_compared_words_change_nothing() -> None:
    # what is compared is the opening of a fact; the rest does not decide, nor cost
    tail = " and then " * 500
    assert knowledge.same_subject("Yoga on Monday" + tail, "Yoga on Wednesday" + tail) is False
    assert knowledge.same_subject("Room 101 is booked" + tail, "Room 205 is booked" + tail) is False
    assert knowledge.same_subject("Lives in Berlin" + tail, "Lives in Munich" + tail) is True
