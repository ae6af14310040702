"""Pseudo-relevance feedback for questions that ask for every instance of something.

"How many doctors did I visit?" needs every conversation that mentions one, but the words
of the question name the kind ("doctors") while the conversations often name the instances
("Dr. Patel, the ENT specialist"). The first search finds some of them; the words those
first results share ("specialist", "appointment", "prescribed") find others that use them.
An instance that shares no word with the first results is still missed: that needs
matches by meaning (an embedder).
This is pseudo-relevance feedback in the manner of RM3 (Lavrenko and Croft 2001, "Relevance
based language models"; Abdul-Jaleel et al. 2004, "UMass at TREC 2004"): the query is
expanded with the words that weigh most in the best first results and searched again, and
the two rankings are mixed. The second search takes the question's topic
(``topic_words``: its words that most of the first results hold) in place of all its words,
whose verbs ("bought", "attended") find other things bought or attended.

``rank_messages`` (``agentmemory.recall.memory``) does this only for a question that asks
for every instance (``asks_for_every``: "how many", "how much", "in total", "the order
of", "list ..."), where finding one instance is not enough. Any other question is searched
once, as before: a second search costs the search's statements again (2 on PostgreSQL, 3
on SQLite), and on questions about one thing it measured no better. On LongMemEval-S (the
215 dev questions with evidence, full text, every haystack in one SQLite database) it moved
session recall_all@5 from 0.902 to 0.926, recall_any@5 and turn recall_any@10 unchanged
(docs/benchmarks.md, "Questions about every instance, pronouns, and long questions").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from agentmemory.recall.lines import rough_stem
from agentmemory.recall.text import STOP_WORDS, query_words, search_text, word_runs

__all__ = [
    "FEEDBACK_HITS",
    "FEEDBACK_SHARE",
    "FEEDBACK_WORDS",
    "TOPIC_SHARE",
    "asks_for_every",
    "expansion_words",
    "mixed",
    "topic_words",
]

#: the best first results (the user's own messages) whose words expand the query
FEEDBACK_HITS = 5
#: words added to the query, at most
FEEDBACK_WORDS = 6
#: the second search's score counts this share of the first's (both scaled to their best)
FEEDBACK_SHARE = 0.5
#: characters of each first result read for its words
FEEDBACK_CHARS = 2000
#: a word must be this long to expand a query (shorter ones are mostly function words)
MIN_WORD_CHARS = 3
#: a word of the question is its topic when at least this share of the first results hold it
TOPIC_SHARE = 0.8

# Questions whose answer needs every instance: a count, a sum, an order, a list.
_EVERY = re.compile(
    r"\b(how\s+many|how\s+much|in\s+total|total|altogether|combined|the\s+order\s+of|"
    r"list\s+(all|every|the)|all\s+the|every\s+(time|one))\b",
    re.IGNORECASE,
)


def asks_for_every(query: str) -> bool:
    """Whether ``query`` asks for every instance of something (a count, a total, an order or
    a list: "How many model kits have I bought?", "What is the total weight of the feed?",
    "What is the order of the museums I visited?"). Pure; about 2 µs."""
    return bool(_EVERY.search(query[:2000]))


def expansion_words(query: str, hits: Sequence[Any]) -> list[str]:
    """The words to add to ``query``: those of the best ``FEEDBACK_HITS`` human messages among
    ``hits`` (``MessageHit``s, best first) that occur in at least two of them, weighted by
    each message's score (scaled to the best) and the word's share of the message's words,
    times the number of messages holding it, best first; at most ``FEEDBACK_WORDS``. Stop
    words, numbers, words under ``MIN_WORD_CHARS`` characters and the query's own words
    (by rough stem) are left out. Empty when fewer than two human messages were found."""
    feedback = _feedback(hits)
    if len(feedback) < 2:
        return []
    asked = {rough_stem(word) for word in query_words(query)}
    best = max(hit.score for hit in feedback) or 1.0
    weight: dict[str, float] = {}
    held: dict[str, int] = {}
    for hit in feedback:
        words = [
            word
            for word in _words(hit)
            if len(word) >= MIN_WORD_CHARS and word not in STOP_WORDS and not word.isdigit()
        ]
        if not words:
            continue
        share = hit.score / best / len(words)
        counts: dict[str, int] = {}
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        for word, count in counts.items():
            weight[word] = weight.get(word, 0.0) + share * count
            held[word] = held.get(word, 0) + 1
    ranked = sorted(
        (word for word in weight if held[word] >= 2 and rough_stem(word) not in asked),
        key=lambda word: (-weight[word] * held[word], word),
    )
    return ranked[:FEEDBACK_WORDS]


def topic_words(query: str, hits: Sequence[Any]) -> list[str]:
    """The words of ``query`` (``query_words``, in order) that at least ``TOPIC_SHARE`` of the
    best ``FEEDBACK_HITS`` human messages among ``hits`` hold (by rough stem, in their first
    ``FEEDBACK_CHARS`` characters): what the question is about, as the results agree on it.
    "How many model kits have I worked on or bought?" is about "model" on LongMemEval's
    haystack (its first results say "model kit": "kits" is another rough stem); its verbs
    find other things bought ("the chicken breasts I bought"), which rank above a session
    about "model tanks" when they are searched again with the expansion words. The second
    search takes the topic words in the question's place, as RM3 (Lavrenko and Croft 2001)
    weighs each word of the question by its share of the first results. Empty when fewer
    than two human messages were found, or none of the words is held so widely."""
    feedback = _feedback(hits)
    if len(feedback) < 2:
        return []
    held = [{rough_stem(word) for word in _words(hit)} for hit in feedback]
    needed = math.ceil(TOPIC_SHARE * len(feedback))
    return [
        word for word in query_words(query) if sum(1 for stems in held if rough_stem(word) in stems) >= needed
    ]


def _feedback(hits: Sequence[Any]) -> list[Any]:
    """The best ``FEEDBACK_HITS`` human messages among ``hits`` (best first)."""
    return [hit for hit in hits if hit.role == "human"][:FEEDBACK_HITS]


def _words(hit: Any) -> Iterator[str]:
    """The words of ``hit``'s first ``FEEDBACK_CHARS`` characters, lower-cased, in the
    indexes' normal form (``search_text``)."""
    return word_runs(search_text(hit.content[:FEEDBACK_CHARS].lower()))


def mixed(first: Sequence[Any], second: Iterable[Any], k: int) -> list[Any]:
    """The hits of two searches as one ranking, best first, at most ``k``: each search's
    scores scaled to its best, the second's counting ``FEEDBACK_SHARE``, summed for a message
    both found (ties by the newer message first)."""
    second = list(second)
    top_first = max((hit.score for hit in first), default=0.0) or 1.0
    top_second = max((hit.score for hit in second), default=0.0) or 1.0
    merged: dict[int, Any] = {hit.message_id: replace(hit, score=hit.score / top_first) for hit in first}
    for hit in second:
        extra = FEEDBACK_SHARE * hit.score / top_second
        found = merged.get(hit.message_id)
        merged[hit.message_id] = replace(found or hit, score=(found.score if found else 0.0) + extra)
    ranked = sorted(merged.values(), key=lambda hit: (-hit.score, -hit.message_id))
    return ranked[:k]
