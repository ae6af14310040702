"""The memory block's token counts added up from its lines (``recall.memory._Counts``) are
the counts the token counter gives for the texts themselves."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agentmemory.messages import ChatMessage
from agentmemory.recall.memory import RecalledItem, _Counts, render
from agentmemory.tokens import ApproximateTokenCounter, TiktokenCounter

COUNTER = TiktokenCounter("cl100k_base")

#: line openings and endings where pieces could join across a newline: punctuation runs
#: (which take the newlines after them), digits, contractions, marks, other scripts
FRAGMENTS = [
    '[Mon 8 May 2023 · "Trip"]',
    "Caroline: I went to the LGBTQ support group yesterday.",
    "user: what?!",
    "…",
    "assistant: 42",
    "Mel: 1,250",
    "'s fine",
    "Zu\u0308rich",
    "東京出差",
    "a -- b ---",
    "x\ty",
    "emoji 🙂",
    "<\u2039memory>",
    "'ll do :)",
    "end.)",
    "/path/",
]


def block_cost(bodies: list[str]) -> int:
    return int(COUNTER.count_message(ChatMessage.system(render(bodies))))


def test_the_cl100k_counter_adds_up() -> None:
    assert _Counts(COUNTER, 0, block_cost).adds_up
    assert not _Counts(ApproximateTokenCounter(), 0, block_cost).adds_up


def test_item_and_block_counts_are_the_counters_own() -> None:
    counts = _Counts(COUNTER, block_cost([]), block_cost)
    for parts in itertools.product(FRAGMENTS, repeat=2):
        text, tokens = counts.item(list(parts))
        assert text == "\n".join(parts)
        assert tokens == COUNTER.count_text(text)
        assert counts.texts[text][1] == COUNTER.count_text(text + "\n")
    bodies = [
        counts.item([a, b, c])[0] for a, b, c in zip(FRAGMENTS, FRAGMENTS[3:], FRAGMENTS[5:], strict=False)
    ]
    items = [RecalledItem("message", body, 0, 0.0, 1, (), None, None) for body in bodies]
    assert counts.block(items) == block_cost(bodies)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4))
def test_any_lines_count_as_the_counter_counts_them(parts: list[str]) -> None:
    """Lines that begin with whitespace are counted whole: the rule needs a line to begin
    with something else, and every other line is counted by the rule."""
    counts = _Counts(COUNTER, 0, block_cost)
    text, tokens = counts.item(parts)
    assert tokens == COUNTER.count_text(text)
    assert counts.texts[text][1] == COUNTER.count_text(text + "\n")


def test_counts_are_kept_by_encoding_so_a_counter_made_per_build_reuses_them() -> None:
    # a host that makes a TiktokenCounter for each build must neither miss the cache nor
    # keep every counter alive in it
    import gc
    import weakref

    from agentmemory.recall.memory import _encoding_count, _tiktoken_count

    text = "Caroline: a line counted by one counter, then by another one."
    first = TiktokenCounter("cl100k_base")
    assert _tiktoken_count(first, text) == first.count_text(text)
    hits = _encoding_count.cache_info().hits
    second = TiktokenCounter("cl100k_base")
    assert _tiktoken_count(second, text) == second.count_text(text)
    assert _encoding_count.cache_info().hits == hits + 1
    gone = weakref.ref(second)
    del second
    gc.collect()
    assert gone() is None


#: characters where a line's last piece is decided: punctuation runs (ASCII and "…"),
#: spaces, letters and digits of several scripts, marks, quotes, whitespace of other kinds
ENDINGS = "ab Z9 .…!?)(]['\"-:,é中\u0301\u00a0\t\u2019\u2039🙂"


@hypothesis_settings(max_examples=500, deadline=None)
@given(st.text(alphabet=ENDINGS, min_size=1, max_size=12))
def test_a_line_with_a_newline_counts_as_the_counter_counts_it(text: str) -> None:
    """``count(text + "\\n")`` worked out from the count of ``text`` and of its last piece
    is the counter's own count, whatever the text ends with."""
    from agentmemory.recall.memory import _newline_count, _tiktoken_count

    if text[0].isspace():
        text = "x" + text  # a line of the block never begins with whitespace
    count = lambda t: _tiktoken_count(COUNTER, t)  # noqa: E731
    assert _newline_count(count, text) == COUNTER.count_text(text + "\n")


def test_lines_cut_or_closed_by_punctuation_count_their_newline_from_the_last_piece() -> None:
    from agentmemory.recall.memory import _last_piece

    assert _last_piece("Caroline: I went there. …") == " …"
    assert _last_piece("user: what?!") == "?!"
    assert _last_piece("end.)") == ".)"
    assert _last_piece('[Mon 8 May 2023 · "Trip"]') == '"]'
    assert _last_piece("…") == "…"
    assert _last_piece("assistant: 42") is None  # a digit: the newline is a piece of its own
    assert _last_piece("emoji 🙂") is None  # not ASCII punctuation: counted with its newline
    assert _last_piece("a\u00a0.") is None  # whitespace of another kind before the run
