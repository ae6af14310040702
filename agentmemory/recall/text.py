"""Query words for full-text recall: the same words on every database, stop words left out."""

from __future__ import annotations

import re

#: common English function words; a query made only of them keeps them (better than nothing)
_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

# Letters and digits only: the underscore and every punctuation mark separate words, so a
# query can never carry an operator of the full-text query languages.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: most words taken from one query (a pasted document is not a query)
MAX_QUERY_WORDS = 32


def query_words(query: str) -> list[str]:
    """The distinct lower-cased words of ``query`` in order, stop words removed unless the
    query has nothing else; at most ``MAX_QUERY_WORDS``."""
    words: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(query.lower()):
        word = match.group(0)
        if word not in seen:
            seen.add(word)
            words.append(word)
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:MAX_QUERY_WORDS]


# Scripts written without spaces between words: Thai, Hiragana and Katakana, Han (CJK
# ideographs and their compatibility forms) and Hangul syllables (Korean spaces its phrases,
# but particles cling to the word before them). The full-text tokenizers (SQLite's unicode61,
# PostgreSQL's parser) take a whole run of them for one word, so a word inside it is never
# found through the index.
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def unspaced_terms(words: list[str]) -> list[str]:
    """The distinct character bigrams (a lone character stands for itself) of the runs of
    unspaced scripts in ``words``, in order; at most ``MAX_QUERY_WORDS``. "东京出差" gives
    "东京", "京出", "出差": found inside "我下周去东京出差" as in any other spelling of the
    same words."""
    terms: list[str] = []
    for word in words:
        for run in _UNSPACED.findall(word):
            grams = [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
            terms.extend(g for g in grams if g not in terms)
    return terms[:MAX_QUERY_WORDS]
