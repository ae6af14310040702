"""The text rules of facts: what counts as an exact repeat (``normalize``, ``content_hash``),
the key of a "key: value" fact (``fact_key``), and what a fact is about (``fact_subject``,
``same_subject``). Pure: no database access; ``agentmemory.knowledge.storage`` writes by
them (design invariant R3, ``tests/test_knowledge.py``).
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import re
import unicodedata

from agentmemory.recall.text import INVISIBLE_RANGES, character_class, search_text

#: a "key: value" fact: up to 80 characters without a colon, then a colon and whitespace
#: before the value. The whitespace keeps a clock time ("Pickup at 8:15 for Lea"), a URL
#: ("https://..."), a port ("localhost:8000") or a ratio ("16:9") from reading as a key.
#: Chinese and Japanese write the full-width colon, U+FF1A, with no space after it;
#: between two digits it is a clock time ("14\uff1a30"), never a key's end.
#: The key ends on a character that is no whitespace and the whitespace around it is taken
#: whole (``*+``, never given back): with a lazy key and ``\s*`` after it, a run of
#: whitespace was scanned again from each of the key's 80 possible ends, and from each start
#: of a leading run, which took 40 ms for 10,000 spaces inside a fact and minutes for 10,000
#: before it.
_KEY = re.compile(r"^\s*+([^:\uff1a\n]{0,79}[^:\uff1a\s])\s*+(?::\s+|(\uff1a)\s*)(\S)")
#: labels that head an entry without naming what it is about ("Note: buy milk", "Reminder:
#: dentist on Monday", "Warning: the stove is hot", "Notiz: Milch kaufen", "Q: ... A: ...",
#: "Link: https://..."): a new note is another note, not a new value of the last one. Keys
#: are compared folded (``fact_key``): no accents, "tache" for "t\u00e2che"
_LABELS_TEXT = """
    note notes reminder reminders todo to-do task tasks fyi ps nb btw re fwd update updates
    important tip tips idea ideas memo warning caution alert attention example question answer
    hint quote comment observation thought insight lesson news log journal diary entry edit
    aside heads-up q a q&a faq link links url urls asap urgent eod eow eom
    notiz notizen nota notas rappel remarque erinnerung hinweis aufgabe tache tarea
    recordatorio aviso tipp astuce consejo frage pregunta antwort reponse respuesta promemoria
    lembrete herinnering notitie opmerking
"""
_LABELS = frozenset([*_LABELS_TEXT.split(), "note to self", "to do", "heads up", "side note", "quick note"])
#: nouns naming one of several things a person has at once: a key ending in one, singular,
#: heads an entry of a list ("Allergy: peanuts", then "Allergy: shellfish"; "Pet: a cat named
#: Tom", then "Pet: a dog named Rex"), not a value that replaces the last one. A plural key
#: ("Allergies: peanuts, shellfish") is the whole list and still supersedes.
_ONE_OF_SEVERAL_TEXT = """
    allergy intolerance medication medicine hobby interest skill pet child kid friend sibling
"""
_ONE_OF_SEVERAL = frozenset(_ONE_OF_SEVERAL_TEXT.split())
#: words that make such a key name one thing ("Favourite hobby: chess", "Main skill: Python")
_ONLY_TEXT = "favourite favorite preferred main primary current best first last only"
_ONLY = frozenset(_ONLY_TEXT.split())
#: words of a key that only says when ("Monday: dentist at 9", "2024-05-01: haircut", "9am:
#: gym", "May 3: recital", "Next week: parents visit", "In two weeks: exam", "8 o'clock:",
#: "Weekdays:", "Lundi:", "Am Montag um 9 Uhr:", "Ma\u00f1ana por la tarde:"): entries of a
#: day or a period, as a clock time is (two things happen on one day, in one week). English,
#: then French, German, Spanish, Italian, Portuguese and Dutch days, months and times of
#: day, folded as keys are (no accents)
_WHEN_TEXT = """
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri
    sat sun january february march april may june july august september october november
    december jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow tonight yesterday
    morning afternoon evening night noon midnight am pm at on of the this next every weekend
    weekends day days week weeks fortnight month months year years last in within by until
    end start beginning mid early late later soon spring summer autumn fall winter a an one
    two three four five six seven eight nine ten eleven twelve couple few
    mondays tuesdays wednesdays thursdays fridays saturdays sundays weekday weekdays daily
    weekly monthly yearly nightly other each o clock p m h hr hrs hour hours quarter half past
    lundi mardi mercredi jeudi vendredi samedi dimanche janvier fevrier mars avril mai juin
    juillet aout septembre octobre novembre decembre aujourd hui demain hier matin soir
    apres midi minuit semaine mois annee week-end le la les ce cette chaque prochain prochaine
    dernier derniere au du de des en heure heures lundis mardis mercredis jeudis vendredis samedis
    dimanches
    montag dienstag mittwoch donnerstag freitag samstag sonnabend sonntag montags dienstags
    mittwochs donnerstags freitags samstags sonntags januar februar marz juni juli oktober
    dezember heute morgen ubermorgen gestern fruh abend abends morgens nachmittag nachmittags
    mittag nacht woche wochen monat jahr wochenende um im jeden jede nachste nachsten diese
    diesen uhr
    lunes martes miercoles jueves viernes sabado domingo enero febrero marzo abril mayo junio
    julio agosto septiembre setiembre octubre noviembre diciembre hoy manana ayer tarde noche
    mes ano fin el los las cada proximo proxima este esta por
    lunedi martedi mercoledi giovedi venerdi sabato domenica gennaio febbraio aprile maggio
    giugno luglio settembre ottobre dicembre oggi domani ieri mattina pomeriggio sera notte
    settimana mese anno ogni prossimo il
    segunda terca quarta quinta sexta feira janeiro fevereiro marco maio junho julho setembro
    outubro novembro dezembro hoje amanha ontem manha noite semana
    maandag dinsdag woensdag donderdag vrijdag zaterdag zondag januari februari maart mei
    augustus vandaag gisteren ochtend middag avond maand jaar volgende elke op om
"""
_WHEN = frozenset(_WHEN_TEXT.split())
#: a number of a time or a date: "9", "3rd", "9am", "8h15" and "14h30" (French), "1er",
#: "2e", "1o" ("1\u00ba" folded), a quarter or a half of a year ("q1", "h2")
_WHEN_NUMBER = re.compile(r"\d+(?:st|nd|rd|th|am|pm|h\d*|uhr|er|e|eme|o|a)?|q[1-4]|h[12]")
#: a word of Chinese, Japanese or Korean that only says when: days of the week ("\u5468\u4e00",
#: "\u661f\u671f\u4e00", "\u6708\u66dc\u65e5", "\uc6d4\uc694\uc77c"), today and tomorrow, morning and
#: afternoon, and numbers of hours, days, months and years ("\u4e0b\u53483\u70b9", "3\u67085\u65e5")
_CJK_WHEN = re.compile(
    "(?:\\d+"
    "|[\u4eca\u660e\u6628\u524d\u540e\u5f8c]\u5929|[\u4eca\u660e\u6628]\u65e5"
    "|[\u4e0a\u4e0b\u4e2d]\u5348|\u5348[\u524d\u5f8c\u540e]|\u665a\u4e0a|\u65e9\u4e0a"
    "|\u591c|\u671d|\u6669|\u665a"
    "|\u5468[\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u65e5\u5929\u672b]"
    "|(?:\u661f\u671f|\u793c\u62dc)[\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u65e5\u5929]"
    "|[\u6708\u706b\u6c34\u6728\u91d1\u571f\u65e5]\u66dc\u65e5?"
    "|[\u70b9\u9ede\u6642\u65f6\u5206\u534a\u53f7\u865f\u65e5\u6708\u5e74]"
    "|\uc624\ub298|\ub0b4\uc77c|\uc5b4\uc81c|\uc624\uc804|\uc624\ud6c4|\uc800\ub141|\uc544\uce68"
    "|[\uc6d4\ud654\uc218\ubaa9\uae08\ud1a0\uc77c]\uc694\uc77c|\uc2dc|\ubd84)+"
)


#: invisible characters a repeat may hold or lack without being another fact
#: (``recall.text.INVISIBLE_RANGES`` less the zero-width non-joiner and joiner, which change
#: how a Persian word or an emoji sequence is drawn): the soft hyphen, the zero-width space,
#: direction marks, the word joiner, variation selectors ("❤\ufe0f"), the byte order mark
_UNSEEN = re.compile(
    character_class(
        [(a, b) for a, b in INVISIBLE_RANGES if (a, b) != (0x200B, 0x200F)]
        + [(0x200B, 0x200B), (0x200E, 0x200F)]
    )
)


def normalize(content: str) -> str:
    """The form compared for exact repeats: compatibility forms unfolded (Unicode NFKC: a
    letter typed composed or decomposed, "ü" and "u\u0308", full-width and ligature forms,
    "\uff44" and "d"), invisible characters left out (``_UNSEEN``: a zero-width space pasted
    with the text), every run of whitespace made one space and the ends stripped. Case and
    punctuation are kept (they may be the change). The same text in two Unicode forms was
    two live facts, both shown in the context."""
    return " ".join(_UNSEEN.sub("", unicodedata.normalize("NFKC", content)).split())


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize(content).encode()).hexdigest()


#: what a key is read without beyond ``search_text``: the typographic apostrophes a phone's
#: keyboard types (U+2018, U+2019) and the modifier letter apostrophe (U+02BC) read as "'"
#: ("Mom\u2019s phone" and "Mom's phone" were two keys, both values in force), and the
#: direction embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), which are
#: not drawn, left out
_KEY_FOLD = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u02bc": "'"}
    | dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
)


def fact_key(content: str) -> str | None:
    """The key of a "key: value" fact ("Preferred language: Python" has the key
    "preferred language"), or None. A new fact with the key of a live fact of the same scope
    and category supersedes it. The colon must be followed by whitespace: "Pickup at 8:15
    for Lea", "See https://example.com" and "Slides in 16:9" have no key (a clock time read
    as a key made "Pickup at 8:40 for Tom" replace Lea's pickup); nor has a fact headed by
    a label ("Note: buy milk", "Reminder: ...", ``_LABELS``), by one of several things a
    person has at once ("Allergy: peanuts", ``_ONE_OF_SEVERAL``) or by a day, a time or a period
    alone ("Monday: dentist at 9", "2024-05-01: haircut", "9am: gym", "Next week: parents
    visit": two entries of one day or week).
    The full-width colon of Chinese and Japanese ends a key without a space after it
    ("\u9996\u9009\u8bed\u8a00\uff1aPython" has a key), except between two digits
    (a clock time, "14\uff1a30").
    A key is compared as both databases' full-text indexes see its words
    (``recall.text.search_text``), case-folded: "\uff25mail" (full width) and "Email",
    "\ufb01le" (a ligature) and "file", "Stra\u00dfe" and "STRASSE", "\u0130stanbul" and
    "Istanbul", "Caf\u00e9" and "Cafe", "Pass\u200bword" and "Password", "Mom\u2019s" and
    "Mom's" are one key (``_KEY_FOLD``).
    Folded by NFKC and ``str.casefold`` alone, each pair was two keys, and the new value of
    a key stayed in force beside the old one."""
    match = _KEY.match(content)
    if not match or (match.group(2) and match.group(1)[-1:].isdigit() and match.group(3).isdigit()):
        return None
    key = " ".join(search_text(match.group(1)).translate(_KEY_FOLD).casefold().split())
    words = re.findall(r"[^\W_]+", key)
    if key in _LABELS or all(
        word in _WHEN or _WHEN_NUMBER.fullmatch(word) or _CJK_WHEN.fullmatch(word) for word in words
    ):
        return None
    if words and words[-1] in _ONE_OF_SEVERAL and not _ONLY.intersection(words):
        return None  # "Allergy: peanuts" and "Allergy: shellfish": two allergies
    return key


#: words of a fact for comparing subjects: runs of letters and digits, a possessive or an
#: elision kept whole ("alice's", "o'neil"), and each emoji or pictograph ("Likes \U0001f355"
#: and "Likes \U0001f363" are two things liked)
_SUBJECT_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*|[\u2600-\u27bf\U0001f000-\U0001faff]")
#: words that lead a subject without naming it: articles, possessive and demonstrative
#: determiners ("my sister", "the dentist", "this laptop")
_DETERMINERS_TEXT = """
    a an the my your his her its our their this that these those
    mi mis tu tus su sus nuestro nuestra nuestros nuestras el la los las un una
    ma mon mes ta ton tes sa son ses notre nos votre vos leur leurs le les une ce cette ces
    mein meine meinen meinem meiner dein deine sein seine ihr ihre unser unsere der die das
    dem den des ein eine einen
    mio mia miei mie tuo tua suo sua il lo gli
    meu minha meus minhas teu tua seu sua um uma os
    mijn zijn haar ons onze het een
"""
_DETERMINERS = frozenset(_DETERMINERS_TEXT.split())
#: subjects of one word: personal pronouns (with the verb they are contracted with: "I'm
#: allergic to peanuts"), and "user" as facts about a user write it
_PRONOUNS_TEXT = """
    i we you he she they it user i'm i've i'd i'll we're we've we'd we'll
    i\u2019m i\u2019ve i\u2019d i\u2019ll we\u2019re we\u2019ve we\u2019d we\u2019ll
    yo ella nosotros je il elle nous ich er sie wir io lui lei noi eu ele ela nós ik hij zij
"""
_PRONOUNS = frozenset(_PRONOUNS_TEXT.split())
#: verbs that a suffix does not show (auxiliaries, common irregular past forms): after a first
#: word, they make it a named subject ("Lea is 7", "Tom went to Oslo")
_VERBS_TEXT = """
    is are was were am be been has have had does do did can could will would should may might
    must shall went got made took left came saw said told gave kept bought sold began became
    ran met wrote drove flew lost won paid
"""
_VERBS = frozenset(_VERBS_TEXT.split())
#: words between a subject and its verb that are neither ("Alice now works at Stripe",
#: "Tom no longer lives in Oslo")
_ADVERBS_TEXT = """
    not never now no longer still also always usually often recently just already finally currently
"""
_ADVERBS = frozenset(_ADVERBS_TEXT.split())
#: the subjects that are the user: a fact saying nothing of whom it is about ("Likes tea"),
#: or saying "I", "we" or "user"
_USER_SUBJECTS = frozenset(
    [(), *((word,) for word in ("i", "we", "user", "i'm", "i\u2019m", "we're", "we\u2019re"))]
)
#: verbs (and an adjective) whose objects add up rather than replace each other: a person
#: likes, speaks, plays, owns and is allergic to several things ("Likes hiking" and "Likes
#: swimming", "Speaks French" and "Speaks German", "I have a cat" and "I have a dog"). Lives
#: in, works at and prefers take one value at a time and are not here.
_ADDITIVE_TEXT = """
    like likes liked love loves loved enjoy enjoys enjoyed adore adores hate hates hated
    dislike dislikes disliked speak speaks spoke know knows knew play plays played visit visits
    visited own owns owned have has had collect collects collected watch watches watched
    read reads follow follows followed learn learns learned learnt learning study studies
    studied studying attend attends attended use uses used using buy buys bought need needs
    needed want wants wanted drink drinks drank eat eats ate listen listens listened allergic
"""
_ADDITIVE = frozenset(_ADDITIVE_TEXT.split())
#: names of days and months, and words of a day: a different one is another occasion ("Yoga
#: on Monday" and "Yoga on Wednesday"), never a verb ("Mondays")
_DAYS_TEXT = """
    monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays
    thursdays fridays saturdays sundays mon tue tues wed thu thur thurs fri today tomorrow
    tonight yesterday weekend weekends
"""
_DAYS = frozenset(_DAYS_TEXT.split())
#: month names ("may" only beside a number: "May 3", else it is the verb)
_MONTHS_TEXT = """
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
"""
_MONTHS = frozenset(_MONTHS_TEXT.split())
#: a day of a month or a year beside a month name ("May 3", "3rd of May", "June 2026")
_DAY_NUMBER = re.compile(r"\d{1,2}(?:st|nd|rd|th)?|\d{4}")
#: a written date: ISO "2026-01-05", or day, month and year with "/" or "." ("05/01/2026",
#: "5.1.26"; without a year "4/5" may be a score and "3.11" a version)
_DATE = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}([/.])\d{1,2}\1\d{2,4}\b")
#: most words of a subject named before its verb ("Room 101 is booked", "Flight LH123 leaves")
_SUBJECT_WORDS = 3
#: a replaced span of at most this many words on each side is a slot of a shared template
_SLOT_WORDS = 2
#: words of each fact compared after its subject: what a fact is about, and the slots of its
#: template, are in its opening. difflib's comparison grows with the product of the lengths:
#: two long facts alike (10,000 characters, ``MAX_FACT_CHARS``) took 1.5-2.2 s each, under the
#: scope's write lock; 200 words take milliseconds
_COMPARED_WORDS = 200


def _verb_like(word: str) -> bool:
    """A word written like an English verb form: a known one, a negated one ("doesn't",
    "isn't"), or a third-person "-s" or a past "-ed" of three letters or more ("likes",
    "joined"; not "as", "bus", "class")."""
    if word in _VERBS or word.endswith(("n't", "n\u2019t")):
        return True
    if len(word) < 3 or not word.isalpha() or word in _DAYS:
        return False
    return word.endswith("ed") or _ends_in_s(word)


def _ends_in_s(word: str) -> bool:
    """Whether ``word`` ends in an English "-s" of a verb or a plural ("likes", "cats"; not
    "class", "bus", "this")."""
    return word.endswith("s") and not word.endswith(("ss", "us", "is"))


def fact_subject(content: str) -> tuple[str, ...]:
    """The leading words that name what a fact is about, case-folded, or ``()`` when it
    names none (a fact about the user written without a subject: "Likes spicy food",
    "Works at Northwind"). Named: determiners and the word after them ("my sister", "the
    dentist"), a pronoun ("i", "user"), a possessive and the word after it ("alice's
    birthday"), or up to ``_SUBJECT_WORDS`` first words followed by a verb, adverbs such as
    "now" or "no longer" between them left out ("alice" in "Alice works at Google" and in
    "Alice now works at Stripe", "room 101" in "Room 101 is booked").
    A rule of thumb for English word order (subject first), not a parser: both facts
    compared go through the same rule."""
    words = _words(content)
    if not words:
        return ()
    end = 0
    if words[0] in _PRONOUNS:
        end = 1
    elif words[0] in _DETERMINERS:
        while end < len(words) - 1 and words[end] in _DETERMINERS:
            end += 1
        end += 1
    elif words[0].endswith(("'s", "\u2019s")):
        end = 1
    elif words[0] not in _VERBS:
        return _named_before_verb(words)
    while 0 < end < len(words) and words[end - 1].endswith(("'s", "\u2019s")):
        end += 1
    return tuple(words[:end])


def _named_before_verb(words: list[str]) -> tuple[str, ...]:
    """The first words of ``words`` (at most ``_SUBJECT_WORDS``, adverbs left out) when a verb
    follows them, else ``()``. In a fact that opens with a verb and a number, the plural
    after the number is its unit, not a verb: "Works 40 hours a week" names no subject
    ("works 40" did, so "Works 32 hours a week" was about something else and never replaced
    it), while "Team 2 handles billing" names "team 2"."""
    named: list[str] = []
    for word in words:
        unit = len(named) == 2 and _verb_like(named[0]) and _number(named[1]) and word not in _VERBS
        if named and _verb_like(word) and not unit:
            return tuple(named)
        if word not in _ADVERBS:
            if len(named) == _SUBJECT_WORDS:
                return ()
            named.append(word)
    return ()


def same_subject(old: str, new: str) -> bool:
    """Whether ``new`` says something new about what ``old`` is about, the condition for a
    fact found similar by its embedding to supersede another. Both must name the same
    subject (``fact_subject``; none named counts as the same: the user), and the rest must
    not be the same sentence with two or more of its slots filled differently ("Pickup at
    8:40 for Tom" after "Pickup at 8:15 for Lea" is another pickup, "Favourite food is sushi"
    after "Favourite colour is blue" another favourite; slots that are all numbers are new
    amounts of the same fact: "Boys are 9, 6 and 2" after "Boys are 8, 5 and 1"). A number
    or code naming which thing (``_names``: "Room 205", "Seat 22A", "Order #1043") makes it
    another thing, another "key:" another fact, adverbs of time (``_WHEN_ADVERBS``: "now",
    "currently", "still") are no slot ("I now live in Munich" after "I currently live in
    Berlin" is a change), and text the rule cannot read
    (``_readable``: letters of a script other than Latin) is never the same subject. Of a
    long fact, the first ``_COMPARED_WORDS`` words after its subject are compared.
    "My sister now lives in Porto" after "My sister lives in Lisbon", "Dislikes spicy food"
    after "Likes spicy food" and "Started a new job at Contoso" after "Works at Northwind"
    are changes; "My brother lives in Lisbon" is a fact about someone else. Embedding
    similarity alone replaced such facts: sentences that differ in one name embed above a
    cosine of 0.85.
    Nor is it the same thing when a replaced word other than an amount or a time (a word
    holding a digit) is: a word of a note without a verb ("Call dad at 5pm" after "Call mom
    at 5pm", "Haircut appointment on Monday" after "Dentist appointment on Monday": an entry
    of a to-do list or a calendar, 0.85 alike by the local model); another day or date of the
    user's (``_dates``: "Yoga on Wednesday" after "Yoga on Monday", 0.93 alike; a named
    subject's date still changes: "Alice's birthday is March 4"); or the object of a verb
    whose objects add up (``_ADDITIVE``: "Likes swimming" after "Likes hiking", "Speaks
    German" after "Speaks French"; the verb itself changing, "Dislikes hiking", is a change
    of mind). "Dinner at 8pm on Friday" after "Dinner at 7pm on Friday" is a changed time."""
    if not (_readable(old) and _readable(new)):
        return False
    old_key, new_key = fact_key(old), fact_key(new)
    if old_key is not None and new_key is not None and old_key != new_key:
        return False  # "Room 101: ..." and "Room 205: ...": a key names what a fact is about
    subject = fact_subject(old)
    if subject != fact_subject(new):
        return False
    end = len(subject) + _COMPARED_WORDS
    old_rest = _words(old)[len(subject) : end]
    new_rest = _words(new)[len(subject) : end]
    old_names = _names(old, end)[len(subject) :]
    new_names = _names(new, end)[len(subject) :]
    old_dates = _dates(old, end)[len(subject) :]
    new_dates = _dates(new, end)[len(subject) :]
    # adverbs of time say nothing of what a fact is: "I now live in Munich" after "I currently
    # live in Berlin" is one change, not two slots of a template filled differently
    old_rest, old_names, old_dates = _without_when(old_rest, old_names, old_dates)
    new_rest, new_names, new_dates = _without_when(new_rest, new_names, new_dates)
    # a unit counted is one word in the singular and the plural ("Has one cat", "Has two cats")
    old_rest, new_rest = _counted(old_rest), _counted(new_rest)
    about_user = subject in _USER_SUBJECTS
    # a note without a verb ("Call mom at 5pm", "Dentist appointment on Monday") is named by
    # all of its words but its amounts and times
    note = not subject and not any(_verb_like(word) for word in [*old_rest, *new_rest])
    old_verb, new_verb = _first_additive(old_rest), _first_additive(new_rest)
    matcher = difflib.SequenceMatcher(None, old_rest, new_rest, autojunk=False)
    replaced = []
    amounts = True  # whether every replaced word is a number on both sides
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "replace":
            continue
        if any(old_names[i1:i2]) or any(new_names[j1:j2]):
            return False  # another room, seat or flight: a number or code naming which one
        if about_user and (any(old_dates[i1:i2]) or any(new_dates[j1:j2])):
            return False  # another day or date of the user's: another occasion
        if not all(_amount(word) for word in [*old_rest[i1:i2], *new_rest[j1:j2]]) and (
            note or i2 - 1 > old_verb or j2 - 1 > new_verb
        ):
            return False  # another word of a note, or another thing liked, spoken, owned
        replaced.append((i2 - i1, j2 - j1))
        amounts = amounts and all(_number(word) for word in [*old_rest[i1:i2], *new_rest[j1:j2]])
    # several numbers changed together are the same fact's new values ("Boys are 8, 5 and 1",
    # a year later "9, 6 and 2"), not another instance of a template
    slots = (
        len(replaced) >= 2 and not amounts and all(a <= _SLOT_WORDS and b <= _SLOT_WORDS for a, b in replaced)
    )
    return not slots


#: adverbs that only say when or how often ("now", "currently", "still"), left out of the
#: words compared; "not", "never" and "no longer" change what a fact says and stay
_WHEN_ADVERBS_TEXT = "now currently still recently just already finally always usually often"
_WHEN_ADVERBS = frozenset(_WHEN_ADVERBS_TEXT.split())


def _without_when(
    words: list[str], names: list[bool], dates: list[bool]
) -> tuple[list[str], list[bool], list[bool]]:
    """``words`` and their flags less the adverbs of ``_WHEN_ADVERBS``."""
    kept = [index for index, word in enumerate(words) if word not in _WHEN_ADVERBS]
    return [words[i] for i in kept], [names[i] for i in kept], [dates[i] for i in kept]


def _counted(words: list[str]) -> list[str]:
    """``words`` with the word after a number (``_number``) in a rough singular: the "-s"
    (``_ends_in_s``) dropped from a word of four letters or more ("cats" after "two" is
    "cat", as after "one"), so that only the amount differs between "Has one cat" and "Has
    two cats"."""
    return [
        word[:-1] if index and _number(words[index - 1]) and len(word) > 3 and _ends_in_s(word) else word
        for index, word in enumerate(words)
    ]


def _first_additive(words: list[str]) -> int:
    """The index of the first word of ``words`` in ``_ADDITIVE``, or past the last index
    when there is none."""
    return next((index for index, word in enumerate(words) if word in _ADDITIVE), len(words))


def _amount(word: str) -> bool:
    """Whether ``word`` is an amount or a time rather than a name of something: it holds a
    digit ("3", "8gb", "7pm") or is a number written out ("three", ``_NUMBER_WORDS``)."""
    return word in _NUMBER_WORDS or any(char.isdigit() for char in word)


def _number(word: str) -> bool:
    """Whether ``word`` is a number: digits, or one written out ("Has three cats" after
    "Has two cats" is a new amount, as "Has 3 cats" after "Has 2 cats" is)."""
    return word.isdigit() or word in _NUMBER_WORDS


#: English numbers written out: amounts, like a number in digits
_NUMBER_WORDS_TEXT = """
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
    eighty ninety hundred thousand million dozen half couple few several
"""
_NUMBER_WORDS = frozenset(_NUMBER_WORDS_TEXT.split())


def _dates(content: str, stop: int) -> list[bool]:
    """For each of the first ``stop`` words of ``content`` (as ``_words`` gives them), whether
    it says which day: a name of a day (``_DAYS``), a month name, a number beside one ("May
    3"), or part of a written date (``_DATE``: "2026-01-05"). Linear in the characters read:
    the dates and the words are both read in order, once (a scan of every date for every word
    of a fact of 10,000 characters of dates took 0.5-0.9 s)."""
    spans = (match.span() for match in _DATE.finditer(content))
    span = next(spans, None)
    found = list(itertools.islice(_SUBJECT_WORD.finditer(content), stop + 1))  # and the next
    words = [match.group().casefold() for match in found]
    flags = []
    for index, match in enumerate(found[:stop]):
        while span is not None and span[1] <= match.start():
            span = next(spans, None)
        word = words[index]
        beside = [words[i] for i in (index - 1, index + 1) if 0 <= i < len(words)]
        flags.append(
            word in _DAYS
            or (word in _MONTHS and (word != "may" or any(_DAY_NUMBER.fullmatch(w) for w in beside)))
            or (bool(_DAY_NUMBER.fullmatch(word)) and any(w in _MONTHS for w in beside))
            or (span is not None and span[0] <= match.start())
        )
    return flags


def _words(content: str) -> list[str]:
    """The words of ``content`` compared for subjects (``_SUBJECT_WORD``), case-folded."""
    return [word.casefold() for word in _SUBJECT_WORD.findall(content)]


#: nouns a number after them names one of ("Room 101", "Gate 12", "Seat 14"), not an amount
#: or a progress ("level 7", "chapter 5", "step 3" are values of one thing and still change)
_NUMBERED_TEXT = """
    room gate seat table floor apartment apt flat unit suite building platform terminal door
    desk office locker cabin bed ward bay dock booth row aisle hall lot spot order invoice
    ticket case issue bug pr account flight policy claim parcel package classroom lab court
    field pitch lane track bus tram line route exit stop station channel server node host
    printer car coach carriage berth pier shelf drawer bin box slot site zone sector block
    house studio theater theatre screen counter
"""
_NUMBERED = frozenset(_NUMBERED_TEXT.split())
#: a code naming a thing: capitals then digits ("LH123", "A320", "P12"), or digits and one
#: capital ("4B", "14C")
_CODE = re.compile(r"[A-Z]{1,3}\d{1,6}[A-Z]?|\d{1,5}[A-Z]")


def _names(content: str, stop: int) -> list[bool]:
    """For each of the first ``stop`` words of ``content`` (as ``_words`` gives them), whether
    it names which thing a fact is about rather than giving a value: a code (``_CODE``), a
    number after "#" ("Order #1042") or after a noun of ``_NUMBERED`` ("Room 101", "seat 14").
    A fact about Room 205 says nothing new about Room 101; "I have 3 kids" does about "I have
    2 kids". Linear in the characters read (the text before each word, copied to look for a
    "#", took 0.1-0.2 s for 10,000 emoji)."""
    names = []
    previous = ""
    for match in itertools.islice(_SUBJECT_WORD.finditer(content), stop):
        word = match.group()
        named = bool(_CODE.fullmatch(word)) or (
            word.isdigit() and (content[match.start() - 1 : match.start()] == "#" or previous in _NUMBERED)
        )
        names.append(named)
        previous = word.casefold()
    return names


def _readable(content: str) -> bool:
    """Whether the subject rule can read ``content``: its letters are all of the Latin
    script. Words of other scripts were read as English ones (Chinese and Japanese, written
    without spaces, as one word for the whole sentence; "Моя сестра" and "Мой брат" as no
    subject at all), so any two similar facts in them were "about the same subject"."""
    return all(
        not char.isalpha() or char.isascii() or unicodedata.name(char, "").startswith("LATIN")
        for char in content
    )
