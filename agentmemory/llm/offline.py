"""The offline extractive summary and fact rules: what ``OfflineMemoryCompactor`` does without a model.

Used when no language model is configured, so that compaction, storage, context windows and
the memory flush can be seen working on a machine without API keys. Nothing here understands
the conversation; it is labelled so.

The summary starts with ``OFFLINE_LABEL``: it is a list of what was asked, what was answered
and which tools ran, not a summary written by a language model. Each line names its speaker
where the message gives one (a transcript's ``speaker``, a participant ``name``), and a line
said on another day than the line before it starts with that day in brackets ("[8 May
2023]": the date a transcript gave the message, such as a LoCoMo session date, else the day
it was stored), so that names and dates survive into the summary. When the oldest lines are
dropped to fit, one line keeps how many were dropped and the days they were said. It is built
from the messages themselves; no prompt is parsed.

``extract_facts`` finds durable facts by these rules (English only), and marks each fact as
found without a model (``FactDraft.extracted_by == OFFLINE_FACTS``):

1. Only what a person says about themselves: human messages, and messages of an imported
   transcript that name their speaker (two people talking, as in LoCoMo). An assistant's own
   words are not the user's facts.
2. Each sentence on its own. Questions, sentences addressed to the listener ("you", "your"),
   and sentences under 4 or over 40 words are skipped. A leading greeting or interjection
   ("Hey Mel!", "Oh,", "Yeah,", "Thanks!", "Well…", "Okay —") is dropped first; a
   sentence whose greeting runs into a condition or a dream ("Hello in my dreams, I live in
   Paris", "Thanks but if it works, I'm moving") is skipped: the rest alone was not said.
3. The sentence opens with a first-person subject ("I", "I'm", "I've", "My", "We", "Our")
   and, after at most two adverbs ("just", "really", ...), a verb of one of three kinds:
   a preference (like, love, enjoy, prefer, hate, eat, drink, ..., also negated: "I don't
   eat meat", or "my favourite ... is"): category
   "preferences"; a past event (a past tense: a regular "-ed" form or one of the common
   irregular ones, "went", "bought", ...): category "events"; a state ("I am", "I have",
   "I live", "I work", "my ... is", ...): category "personal". "I'm", "I am" and "I was"
   followed by a feeling or a passing state ("glad", "sorry", "so excited", "off to",
   "thinking") are small talk, not facts. Hedges and wishes ("I think", "I'd", "I'll",
   "I hope", "I wanted") match none of the kinds.
4. The fact is the sentence as said, word for word (its apostrophes and closing
   punctuation kept), attributed: ``Caroline said "I moved to Berlin last year." on 8 May
   2023.`` The date (the day it was said) is added to events and to sentences
   that place themselves in time relative to it ("yesterday", "last week", "two days ago");
   states and preferences are left undated, so that a repeat adds nothing.
5. Each fact is persistent, with importance 0.4 (below the 0.5 default of a fact remembered
   on purpose).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime

from agentmemory.llm.facts import FactDraft, said_at, speaker
from agentmemory.messages import ChatMessage, Role

OFFLINE_LABEL = "[Offline extractive summary, not written by a language model]"
#: the ``Summary.model`` of offline summaries
OFFLINE_MODEL = "offline-extractive"
#: ``FactDraft.extracted_by`` (and a fact's ``metadata["extracted_by"]``) of facts found by the
#: rules above, without a language model
OFFLINE_FACTS = "offline-rules"
#: importance of a fact found by the rules
OFFLINE_FACT_IMPORTANCE = 0.4
_ITEM_CHARS = 160

__all__ = [
    "OFFLINE_FACTS",
    "OFFLINE_LABEL",
    "OFFLINE_MODEL",
    "extract_facts",
    "extractive_items",
    "extractive_summary",
]

#: one summary line: the date it was said (or "") and its text
Item = tuple[str, str]


def extractive_summary(previous: str | None, messages: Sequence[ChatMessage], *, max_tokens: int) -> str:
    """The previous summary's items followed by one item per message of ``messages``, the
    oldest items dropped until the text fits ``max_tokens`` (counted with the configured
    token counter).

    Args:
        previous: the previous summary text (an offline one keeps its items and their dates;
            any other text is carried forward as one "Earlier: ..." item), or ``None``.
        messages: the messages to fold, oldest first.
        max_tokens: the longest text returned (tokens).

    Returns:
        ``OFFLINE_LABEL`` and one ``- item`` line per kept item; an item said on another day
        than the line before it starts with ``[day]``. When items were dropped to fit, a
        first line says how many and on which days they were said ("Left out to fit: 120
        earlier lines, said on 8 May 2023; 25 May 2023"), so that no date of the
        conversation is lost.
    """
    earlier, items = _previous_items(previous)
    return _fit(items + _dated_items(messages), max_tokens, earlier)


#: the marks a question ends with: "?", the full-width, small and Arabic question marks,
#: the interrobang and the double marks (Unicode's Sentence_Terminal characters of questions)
_QUESTION_MARKS = frozenset("?\uff1f\ufe56\u061f\u203d\u2047\u2048\u2049")


def _asks(text: str) -> bool:
    """Whether ``text`` ends as a question: a ``_QUESTION_MARKS`` mark before any spaces (any
    Unicode white space: "\\r", no-break and ideographic spaces), closing quotes and brackets
    (Unicode categories Pe and Pf, and the ASCII quotes: "」", "»", '"') and exclamation marks
    ("?!")."""
    for char in reversed(text):
        if char in _QUESTION_MARKS:
            return True
        if not (char.isspace() or char in "\"'!" or unicodedata.category(char) in ("Pe", "Pf")):
            return False
    return False


def extractive_items(messages: Sequence[ChatMessage]) -> list[str]:
    """One line per user message ("User asked: ..." for a question, its text ending with a
    question mark (``_asks``), else "User said: ...", or "NAME said: ..." when the message
    names its speaker), assistant reply ("Assistant said: ...", or "NAME said: ...") and tool
    call ("Assistant used tool NAME."), each cut to 160 characters; tool results and system
    messages are left out."""
    return [text for _when, text in _dated_items(messages)]


def _dated_items(messages: Sequence[ChatMessage]) -> list[Item]:
    items: list[Item] = []
    for m in messages:
        when = _day(said_at(m))
        name = speaker(m)
        if m.role is Role.HUMAN and m.text.strip():
            label = f"{name} said: " if name else "User asked: " if _asks(m.text) else "User said: "
            items.append((when, label + _clip(m.text)))
        elif m.role is Role.AI:
            if m.text.strip():
                items.append((when, f"{name or 'Assistant'} said: " + _clip(m.text)))
            items.extend((when, f"Assistant used tool {call.name}.") for call in m.tool_calls)
    return items


def _clip(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _ITEM_CHARS:
        return text
    cut = text[: _ITEM_CHARS - 3]
    # at the last word's end when one ends in the last fifth (a half word reads as a typo)
    space = cut.rfind(" ")
    if space >= (_ITEM_CHARS - 3) * 4 // 5:
        cut = cut[:space].rstrip(" ,;:")
    return cut + "..."


_DATED_LINE = re.compile(r"^\[([^\]\n]{1,80})\] (.*)$")
_LEFT_OUT_LINE = re.compile(r"^Left out to fit: (\d+) earlier lines?(?:, said on (.+))?$")

#: how many earlier lines were left out of an offline summary, and the days they were said
LeftOut = tuple[int, tuple[str, ...]]


def _previous_items(previous: str | None) -> tuple[LeftOut, list[Item]]:
    text = (previous or "").strip()
    if not text:
        return (0, ()), []
    if text.startswith(OFFLINE_LABEL):
        items: list[Item] = []
        earlier: LeftOut = (0, ())
        when = ""
        for line in text.splitlines():
            if not line.startswith("- "):
                continue
            body = line[2:]
            if not items and (left := _LEFT_OUT_LINE.match(body)):
                earlier = (
                    int(left.group(1)),
                    tuple((left.group(2) or "").split("; ")) if left.group(2) else (),
                )
                continue
            if match := _DATED_LINE.match(body):
                when, body = match.group(1), match.group(2)
            items.append((when, body))
        return earlier, items
    # A summary written by a model (or by hand) before this one: carry it forward as one
    # item instead of dropping it (the summary accumulates).
    return (0, ()), [("", "Earlier: " + " ".join(text.split())[: _ITEM_CHARS * 4])]


def _fit(items: list[Item], max_tokens: int, earlier: LeftOut = (0, ())) -> str:
    """The label and the newest items whose text stays within ``max_tokens`` by the
    configured token counter (dense scripts cost more tokens per character), after the line
    saying what was left out (``earlier``: what earlier summaries had left out already)."""
    from agentmemory.conf import get_token_counter

    counter = get_token_counter()

    # Where each day is first said: what ``left_out`` reads for every count it is asked
    # about, once (reading the dropped items again for each count was quadratic: a fold of
    # 700 messages parsed 250,000 dates).
    first_said: dict[str, int] = {}
    for index, (when, _text) in enumerate(items):
        if when:
            first_said.setdefault(_day(when), index)

    def left_out(dropped: int) -> LeftOut:
        days = dict.fromkeys(earlier[1])
        days.update(dict.fromkeys(day for day, index in first_said.items() if index < dropped))
        return earlier[0] + dropped, tuple(days)

    whole = _render(items, earlier)
    if counter.count_text(whole) <= max_tokens:
        return whole
    # The newest items while they and the line saying what is left out before them fit.
    base = counter.count_text(OFFLINE_LABEL) + 1
    kept_cost = 0
    start = len(items)
    for index in range(len(items) - 1, -1, -1):
        when, text = items[index]
        dated = bool(when) and (index == 0 or items[index - 1][0] != when)
        cost = counter.count_text(f"- [{when}] {text}" if dated else f"- {text}") + 1  # +1: line break
        line = _left_out_line(left_out(index))
        if base + kept_cost + cost + (counter.count_text(line) + 1 if line else 0) > max_tokens:
            break
        start = index
        kept_cost += cost
    # Counts are nearly additive across lines, and the oldest kept line may now need its
    # date: check the whole and trim if it does not fit.
    while start < len(items) and counter.count_text(_render(items[start:], left_out(start))) > max_tokens:
        start += 1
    text = _render(items[start:], left_out(start))
    if start == len(items) and counter.count_text(text) > max_tokens:
        text = _render([], (left_out(start)[0], ()))  # too many days for the room: the count alone
    return text


def _left_out_line(left_out: LeftOut) -> str:
    count, days = left_out
    if not count:
        return ""
    said = f", said on {'; '.join(days)}" if days else ""
    return f"- Left out to fit: {count} earlier line{'' if count == 1 else 's'}{said}"


def _render(items: list[Item], left_out: LeftOut = (0, ())) -> str:
    lines = [OFFLINE_LABEL]
    if line := _left_out_line(left_out):
        lines.append(line)
    last = ""
    for when, text in items:
        lines.append(f"- [{when}] {text}" if when and when != last else f"- {text}")
        last = when or last
    return "\n".join(lines)


# -- facts ---------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: a greeting a sentence opens with, with what follows it up to a comma, a full stop, an
#: exclamation mark, an ellipsis or a dash ("Hey Mel!", "Thanks for asking,", "Hello…")
_GREETING = re.compile(
    r"^(?:hey|hi|hello|thanks|thank you|congrats|congratulations)\b"
    r"[^,!.\u2026\u2013\u2014]{0,30}[,!.\u2026\u2013\u2014]\s*",
    re.I,
)
#: words that make what a greeting's words take a condition, a time to come or a dream
#: ("Hello in my dreams, I live in Paris", "Thanks but if it works, I'm moving"): the rest of
#: the sentence alone is not what was said
_NOT_A_GREETING = re.compile(
    r"\b(?:if|unless|when|whenever|once|until|till|after|before|while|because|since|though|"
    r"although|dream|dreams|dreaming|maybe|perhaps|not|never|no|wish|hope|imagine|pretend)\b",
    re.I,
)
_INTERJECTION = re.compile(
    r"^(?:(?:oh|ooh|yeah|yes|yep|no|nope|well|wow|whoa|ha(?:ha)+|hah|lol|aw+|ah+|hmm+|um+|so|and|but|"
    r"actually|anyway|btw|ok|okay|sure|great|cool|nice|totally|honestly|guess what)\b"
    r"[\s,!.;\u2026\u2013\u2014-]*)+",
    re.I,
)
#: what a statement never opens or closes with: separators left by the opening rules
_LEAD = " ,;:-.\u2026\u2013\u2014"
_TRAIL = " ,;:-\u2013\u2014"
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_ADDRESSED = re.compile(r"\b(?:you|your|yours|you're|you've|you'll|you'd|u|ur)\b", re.I)
_RELATIVE_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|recently|(?:last|this|next)\s+(?:week|weekend|month|year|"
    r"night|morning|afternoon|evening|summer|winter|spring|fall|autumn|monday|tuesday|wednesday|thursday|"
    r"friday|saturday|sunday))\b",
    re.I,
)
_ADVERBS = _words(
    "just really also finally recently usually always never still already actually totally "
    "officially now even often sometimes definitely absolutely truly"
)
_PREFERENCES = _words(
    "like likes love loves enjoy enjoys prefer prefers hate hates dislike dislikes adore adores "
    "eat eats drink drinks smoke smokes"
)
_STATES = _words(
    "am was have has had live lives work works own owns study studies teach teaches play plays speak speaks "
    "volunteer volunteers run runs practice practise belong come grew been"
)
_IRREGULAR_PAST = _words(
    "went got bought began came did found gave made met ran saw sold spent took told won wrote grew drove "
    "flew built became brought caught fought held kept paid put rode sang sat slept spoke swam taught threw "
    "woke wore chose ate drank broke hung lost left read"
)
#: "-ed" words that are no past events: other word classes, and wishes and guesses
_NOT_EVENTS = _words(
    "need feed seed bed red speed proceed succeed indeed wanted needed wondered hoped supposed guessed "
    "imagined assumed figured expected meant"
)
_FEELINGS = _words(
    "glad happy sorry sure excited thrilled proud thankful grateful sad afraid scared nervous curious here "
    "okay ok fine good great tired bored lucky blessed so not stoked pumped psyched impressed amazed "
    "touched jealous confused off thinking wondering hoping trying starting"
)
_SUBJECTS = {"i", "i'm", "i've", "my", "we", "we're", "we've", "our"}


def extract_facts(messages: Sequence[ChatMessage]) -> list[FactDraft]:
    """The durable first-person facts the rules of this module find in ``messages`` (see the
    module docstring), in the order said, each with its message's seq as its source and
    ``extracted_by=OFFLINE_FACTS``. A message without a seq gives facts without a source."""
    facts: list[FactDraft] = []
    for m in messages:
        name = speaker(m)
        if not (m.role is Role.HUMAN or (m.role is Role.AI and (m.metadata or {}).get("speaker"))):
            continue
        day = _day(said_at(m))
        for sentence in _SENTENCES.split(m.text):
            found = _fact_of(sentence)
            if found is None:
                continue
            statement, category = found
            dated = day and (category == "events" or _RELATIVE_TIME.search(statement))
            # the closing punctuation is the speaker's, inside the quote; a sentence that
            # ends without one gets the fact's own
            end = "" if statement.endswith((".", "!", "\u2026")) else "."
            content = f'{name or "The user"} said "{statement}"' + (f" on {day}." if dated else end)
            facts.append(
                FactDraft(
                    content=content,
                    category=category,
                    source_seq=m.seq,
                    persistent=True,
                    importance=OFFLINE_FACT_IMPORTANCE,
                    extracted_by=OFFLINE_FACTS,
                )
            )
    return facts


def _fact_of(sentence: str) -> tuple[str, str] | None:
    """``(statement, category)`` when ``sentence`` is a first-person fact by the rules. The
    statement is the sentence as written, white space collapsed, less a greeting or
    interjection it opens with, its first letter capitalised: its words, apostrophes and
    closing punctuation are the speaker's, so the fact quotes them word for word."""
    said = " ".join(sentence.split())
    # read with plain apostrophes (U+2019 as "'"); one character for one, so what the
    # opening rules leave is the same span of what was said
    plain = said.replace("\u2019", "'")
    greeting = _GREETING.match(plain)
    if greeting and _NOT_A_GREETING.search(greeting.group()):
        return None
    read = _INTERJECTION.sub("", plain[greeting.end() :] if greeting else plain)
    kept = said[len(said) - len(read) :]
    start = len(kept) - len(kept.lstrip(_LEAD))
    end = len(kept.rstrip(_TRAIL))
    text, kept = read[start:end], kept[start:end]
    if not text or "?" in text or _ADDRESSED.search(text):
        return None
    words = _WORD.findall(text.lower())
    if not 4 <= len(words) <= 40 or words[0] not in _SUBJECTS:
        return None
    category = _kind(words)
    return (kept[0].upper() + kept[1:], category) if category else None


def _kind(words: list[str]) -> str | None:
    subject, rest = words[0], words[1:]
    if subject in ("my", "our"):
        # "my sister lives in Lisbon", "my favourite food is sushi"
        head = rest[:5]
        if not any(w in ("is", "are", "was", "were", "has", "have", "lives", "works", "'s") for w in head):
            return None
        return "preferences" if head and head[0] in ("favourite", "favorite") else "personal"
    while rest and rest[0] in _ADVERBS:
        rest = rest[1:]
    if not rest:
        return None
    verb = rest[0]
    if subject in ("i'm", "we're") or (subject in ("i", "we") and verb in ("am", "are", "was", "were")):
        following = rest if subject in ("i'm", "we're") else rest[1:]
        following = [w for w in following if w not in _ADVERBS and w != "very"]
        return None if not following or following[0] in _FEELINGS else "personal"
    if subject in ("i've", "we've"):
        if verb == "been":  # "I've been volunteering at the shelter", not "I've been doing great"
            following = [w for w in rest[1:] if w not in _ADVERBS]
            return None if not following or following[0] in _FEELINGS | {"doing", "feeling"} else "personal"
        return "events" if _past(verb) and verb != "had" else "personal"
    if verb in ("don't", "do", "never", "no") and len(rest) > 1:
        verb = rest[2] if verb == "do" and len(rest) > 2 and rest[1] == "not" else rest[1]
    if verb in _PREFERENCES:
        return "preferences"
    if verb in _STATES:
        return "personal"
    if _past(verb):
        return "events"
    return None


def _past(verb: str) -> bool:
    return verb in _IRREGULAR_PAST or (
        len(verb) > 4 and verb.endswith("ed") and verb not in _NOT_EVENTS and not verb.endswith("eed")
    )


_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
    "%Y/%m/%d (%a) %H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
)


@functools.lru_cache(maxsize=4096)
def _day(when: str) -> str:
    """The day of a ``said_at`` text ("8 May 2023"), or the text as given when its format is
    not one of the known ones (LoCoMo's "1:56 pm on 8 May, 2023", LongMemEval's "2023/05/21
    (Sun) 19:50", the stored "2026-03-13 10:16")."""
    for fmt in _DATE_FORMATS:
        try:
            moment = datetime.strptime(when, fmt)
        except ValueError:
            continue
        return f"{moment.day} {moment:%B %Y}"
    return when
