"""Query words for full-text recall: the same words on every database, stop words left out,
and the one normal form of text that the indexes and the queries both see (``search_text``)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

#: common English function words (the indefinite pronouns among them: "something" in "I
#: cooked something for my friend" names nothing to look for); a query made only of them
#: keeps them (better than nothing)
_STOP_WORDS_TEXT = """
    anybody anyone anything anywhere everybody everyone everything everywhere nobody nothing
    somebody someone something somewhere
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
#: characters of a query that are read (``search_messages``, ``KnowledgeMemory.recall``):
#: its words and dates are found in them, and an embedding backend embeds them. A whole
#: message passed as a query (up to ``MAX_MESSAGE_CHARS``) cost seconds of CPU for words
#: past the first ``MAX_QUERY_WORDS``, which are not used.
MAX_QUERY_CHARS = 10_000


# Where one sentence ends and the next begins: after ".", "!" or "?" and space, or at a line
# break. Each branch starts at one character and takes one run: linear in the text.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*")


def asked_in(text: str, longest: int) -> str:
    """What ``text`` asks, the newest first: its last sentence (people often type a question
    without its "?"), then its other sentences ending in "?" from the last to the first, each
    stripped, joined by spaces, at most ``longest`` characters of them (a sentence that does
    not fit is left out): what a message pasting a long text, or listing other people's
    questions, asks at its end. ``""`` when it holds no sentence that fits."""
    sentences = [sentence for sentence in _SENTENCE_END.split(text) if sentence.strip()]
    if not sentences:
        return ""
    picked = [sentences[-1].strip()]
    picked.extend(s.strip() for s in reversed(sentences[:-1]) if s.rstrip().endswith("?"))
    found = []
    size = 0
    for sentence in picked:
        if size + len(sentence) < longest:
            found.append(sentence)
            size += len(sentence) + 1
            if size >= longest - 1:
                break  # no other sentence fits (a text of a million "a?")
    return " ".join(found)


def bounded_query(query: str, longest: int = MAX_QUERY_CHARS) -> str:
    """The part of ``query`` recall reads, at most ``longest`` characters: the whole query
    when it fits; otherwise what its last ``longest`` characters ask (``asked_in``, at most
    half of them: a question after a pasted text is what the message asks) and then its
    opening up to ``longest``. ``MAX_QUERY_CHARS`` characters by default (``search_messages``,
    ``KnowledgeMemory.recall``); the turn's query of a window is bounded the same way
    (``agentmemory.context.memory.turn_query``)."""
    if len(query) <= longest:
        return query
    asked = asked_in(query[-longest:], longest // 2)
    if not asked:
        return query[:longest]
    return f"{asked}\n{query[: longest - len(asked) - 1]}"


#: Combining marks that decorate a letter without making another one, left out of the text
#: the indexes and the queries see: Latin, Greek and Cyrillic diacritics (the Combining
#: Diacritical Marks blocks), Hebrew points and cantillation, Arabic vowel marks (harakat),
#: Quranic annotation and the tatweel (a stretching stroke). People write these words with
#: and without them ("Zürich" and "Zurich", "الطَّالِبُ" and "الطالب"). The marks of Indic and
#: other Brahmic scripts are vowels and viramas, letters of the word: they are kept.
OPTIONAL_MARK_RANGES = (
    (0x0300, 0x036F),
    (0x0591, 0x05BD),
    (0x05BF, 0x05BF),
    (0x05C1, 0x05C2),
    (0x05C4, 0x05C5),
    (0x05C7, 0x05C7),
    (0x0610, 0x061A),
    (0x0640, 0x0640),
    (0x064B, 0x065F),
    (0x0670, 0x0670),
    (0x06D6, 0x06DC),
    (0x06DF, 0x06E4),
    (0x06E7, 0x06E8),
    (0x06EA, 0x06ED),
    (0x08D3, 0x08E1),
    (0x08E3, 0x08FF),
    (0x1AB0, 0x1AFF),
    (0x1DC0, 0x1DFF),
    (0x20D0, 0x20FF),
    (0xFE20, 0xFE2F),
)
#: Invisible format characters that join or break a word without being part of it, left out
#: as well: the soft hyphen (U+00AD, in text copied from typeset pages), the Mongolian vowel
#: separator, the zero-width space, non-joiner and joiner (U+200B-U+200D: Persian puts the
#: non-joiner inside words, emoji sequences the joiner), the direction marks, the word
#: joiner and invisible operators (U+2060-U+2064) and the byte order mark, all Unicode
#: "Default_Ignorable" characters of category Cf; and the variation selectors (U+FE00-U+FE0F,
#: U+E0100-U+E01EF, Default_Ignorable marks that pick a glyph: "❤\ufe0f" is the red heart
#: emoji, and "coffee\ufe0f" or "\u2764\ufe0fParis" in chat text kept the word from being found).
#: People type the same words without them; the tokenizers of both databases cut a word at
#: them ("pass\u200bword" was "pass" and "word") or take them into it.
INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2060, 0x2064),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xE0100, 0xE01EF),
)


def _escaped(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def character_class(ranges: Iterable[tuple[int, int]]) -> str:
    """``ranges`` (inclusive ``(first, last)`` code points) as a bracket expression that
    Python's ``re`` and PostgreSQL's regular expressions read alike (``\\uXXXX`` and
    ``\\UXXXXXXXX`` escapes)."""
    return "[" + "".join(_escaped(a) if a == b else f"{_escaped(a)}-{_escaped(b)}" for a, b in ranges) + "]"


#: ``OPTIONAL_MARK_RANGES`` and ``INVISIBLE_RANGES`` as one ``character_class``
OPTIONAL_MARKS_CLASS = character_class(OPTIONAL_MARK_RANGES + INVISIBLE_RANGES)
_OPTIONAL_MARKS = re.compile(OPTIONAL_MARKS_CLASS)

#: Letters whose diacritic or ligature Unicode does not decompose, written as the letters
#: people type without them, as PostgreSQL's ``unaccent`` rules write them: "Łódź" and
#: "Lodz", "Straße" and "Strasse", the Turkish dotless i and "i", "Œuvre" and "Oeuvre"; and
#: the Greek final sigma (U+03C2) as the sigma it is (an upper-case "ΟΔΥΣΣΕΥΣ" lower-cases
#: to a final U+03C3 on PostgreSQL, to U+03C2 in Python).
FOLDED_LETTERS = {
    "ß": "ss",
    "ẞ": "SS",
    "æ": "ae",
    "Æ": "AE",
    "œ": "oe",
    "Œ": "OE",
    "\u0131": "i",
    "ł": "l",
    "Ł": "L",
    "ø": "o",
    "Ø": "O",
    "đ": "d",
    "Đ": "D",
    "ħ": "h",
    "Ħ": "H",
    "\u03c2": "\u03c3",
}
_FOLD = str.maketrans(FOLDED_LETTERS)


def search_text(text: str) -> str:
    """``text`` in the form the full-text indexes of both databases and the query words see
    it: compatibility forms unfolded (NFKD: full-width letters, ligatures, superscripts),
    the ``OPTIONAL_MARK_RANGES`` marks and ``INVISIBLE_RANGES`` characters left out,
    composed again (NFC), the ``FOLDED_LETTERS`` written as their plain letters.
    "Zu\u0308rich" (decomposed), "Zürich" and "Zurich" become "Zurich"; "الطَّالِبُ" becomes
    "الطالب"; "full" in full-width letters becomes "full"; "Straße" becomes "Strasse";
    "pass\u200bword" becomes "password"; "हिन्दी" stays as it is. Case is kept (lower-case
    before, not after: Python lower-cases a final "Σ" to "ς"). The same rule runs in
    PostgreSQL (``agentmemory_tsvector``) and SQLite (the ``agentmemory_search_text``
    function of the FTS5 triggers), so a word stored in one form is found in any other."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFC", _OPTIONAL_MARKS.sub("", unicodedata.normalize("NFKD", text)))
    return text.translate(_FOLD)


def word_runs(text: str) -> Iterator[str]:
    """The words of ``text`` as they appear (case kept, stop words kept), in order: runs of letters,
    digits and combining marks: a mark inside a word (a vowel sign, a virama, a diacritic) never
    splits it, as Python's ``\\w`` alone would ("हिन्दी" was cut into "ह", "न", "द")."""
    if text.isascii():
        yield from _WORD.findall(text)
        return
    start = -1
    for index, char in enumerate(text):
        if char.isalnum() or unicodedata.category(char)[0] == "M":
            if start < 0:
                start = index
        elif start >= 0:
            yield text[start:index]
            start = -1
    if start >= 0:
        yield text[start:]


#: where a sentence ends for ``said_keys``: ".", "!" or "?" before white space (not the point
#: of "3.5"), a line break, or a full stop of Chinese and Japanese
_SAID_END = re.compile(r"(?<=[.!?])\s+|\n\s*|[\u3002\uff01\uff1f]")


def words_key(text: str) -> str:
    """The words of ``text`` (``word_runs`` of its NFKC form), case-folded, joined by single
    spaces: what two texts compare in the memory block's repeat check (``said_keys``).
    White space, punctuation and case do not count; every word does."""
    return " ".join(word.casefold() for word in word_runs(unicodedata.normalize("NFKC", text)))


def said_keys(text: str) -> set[str]:
    """The ``words_key`` of ``text`` and of each of its sentences: a fact whose ``words_key``
    is among them is said by ``text`` ("Tom plays the violin" by "Tom plays the violin.
    Which camp suits him?"), so a memory block that sends the text leaves the fact out
    (design R3). A text that holds the fact's words among others ("My brother likes jazz")
    does not say the fact ("Likes jazz")."""
    keys = {words_key(text)}
    keys.update(words_key(part) for part in _SAID_END.split(text))
    keys.discard("")
    return keys


#: where a line of a text ends: a fact's or a MEMORY.md file's lines (``knowledge``'s
#: ``indented`` and ``import_memory_md``), a knowledge block's (``entry_keys``)
LINE_END = re.compile(r"\r\n|\r|\n")


#: the opening of an entry of ``KnowledgeMemory.build_context()``: its bullet, and the time
#: and category of a recent entry ("- [2026-03-13 10:16] (context) ")
_ENTRY_HEAD = re.compile(r"- (?:\[[^\]\n]*\] \([^)\n]*\) )?")


def entry_keys(text: str) -> set[str]:
    """``said_keys`` of ``text`` and of each fact a knowledge block in it shows (a bullet of
    ``KnowledgeMemory.build_context()`` without its time and category, its indented lines
    joined to it): a fact whose ``words_key`` is among them is in the text already, so a
    memory block sent beside it leaves the fact out (design R3)."""
    keys = said_keys(text)
    entry: list[str] = []
    # the line ends ``indented`` indents after (``str.splitlines`` also splits at U+2028)
    for line in [*LINE_END.split(text), ""]:
        if entry and line.startswith("  "):
            entry.append(line[2:])
            continue
        if entry:
            keys.add(words_key("\n".join(entry)))
            entry = []
        head = _ENTRY_HEAD.match(line)
        if head:
            entry = [line[head.end() :]]
    keys.discard("")
    return keys


def unsaid_facts(fact_hits: list[Any], texts: Iterable[Any], said_in: Iterable[Any]) -> list[Any]:
    """``fact_hits`` (``FactHit``, best first) less the facts a request says already: one
    that a message of ``texts`` (the window's) says as a whole or as a sentence
    (``said_keys``), or that a knowledge block or summary of ``said_in`` shows
    (``entry_keys``); and of two live facts that differ only in case, spacing or closing
    punctuation (two facts to the store) the better ranked only, since the model reads them
    as one line."""
    said: set[str] = set()
    for text in texts:
        if isinstance(text, str):
            said |= said_keys(text)
    for text in said_in:
        if isinstance(text, str):
            said |= entry_keys(text)
    kept: dict[str, Any] = {}
    for hit in fact_hits:
        if words_key(hit.fact.content) not in said:
            # case, spacing and closing punctuation aside; a sign or an inner mark still
            # tells two facts apart ("Balance is -200" and "Balance is 200")
            same = " ".join(hit.fact.content.casefold().split()).rstrip(".!?;,: ")
            kept.setdefault(same, hit)
    return list(kept.values())


#: fewest words of a text that ``said_within`` counts as said by another: a short line
#: ("Thanks!", "Me too") is said in passing by many texts
SAID_MIN_WORDS = 4


@dataclass(frozen=True)
class SaidIn:
    """Texts that ``said_within`` looks in: each text's ``words_key`` with a space on each
    side (``keys``) and every word of them (``words``)."""

    keys: tuple[str, ...]
    words: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.keys)


def word_keys(texts: Iterable[str]) -> SaidIn:
    """What ``said_within`` looks in for ``texts`` (those that have words)."""
    keys = tuple(f" {key} " for key in (words_key(t) for t in texts if isinstance(t, str)) if key)
    return SaidIn(keys, frozenset(word for key in keys for word in key.split()))


def said_within(said: SaidIn, text: str) -> bool:
    """Whether one of the texts of ``said`` (``word_keys``) says ``text`` word for word: its
    ``words_key`` within one of theirs, on word boundaries, ``text`` being at least
    ``SAID_MIN_WORDS`` words. A memory flush keeps a turn as a fact quoting it, an
    extractive summary quotes its turns: the texts sending them say the turn. A text cut
    short ("…" where sentences are left out) is compared as it stands, so it counts as said
    only when its pieces are said together."""
    if not said.keys:
        return False
    # A quick look first (most texts are said by none): each plain word of ``text`` must be
    # a word of ``said``. It can only miss a text that is said (a word in another Unicode
    # form), never count one that is not: the full comparison decides.
    for word in text.casefold().split():
        if word.isalnum() and word not in said.words:
            return False
    words = words_key(text)
    if not words or words.count(" ") + 1 < SAID_MIN_WORDS:
        return False
    padded = f" {words} "
    return any(padded in key for key in said.keys)


def query_words(query: str) -> list[str]:
    """The distinct lower-cased words of ``query`` in its normal form (``search_text``), in
    order, stop words removed unless the query has nothing else; at most
    ``MAX_QUERY_WORDS``, and when it holds more, the words of what it asks (``asked_in``: its
    last sentence and its questions, the newest first) first: a long message asking about a
    text it pastes is searched by what it asks."""
    return _asked_first(search_text(query.lower()))


def literal_words(query: str) -> list[str]:
    """The words of ``query`` as written (only composed, NFC), lower-cased, stop words
    removed as in ``query_words``: what a substring match against stored text compares
    (``unspaced_terms``), since the stored text is not in the normal form."""
    return _asked_first(unicodedata.normalize("NFC", query).lower())


def _asked_first(text: str) -> list[str]:
    words = _distinct(word_runs(text))
    if len(words) < MAX_QUERY_WORDS or not (asked := asked_in(text, MAX_QUERY_CHARS)):
        return words
    return _distinct(word_runs(f"{asked}\n{text}"))


def _distinct(found: Iterator[str]) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    for word in found:
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
