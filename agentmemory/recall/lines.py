"""The lines of a memory block: the stored messages it shows, read in one statement with
their conversations, cut to what the block can show (``trimmed``) and given their provenance
(the date said: ``recall.said.session_date``, ``date_text``; the speaker: ``_speaker``).
``agentmemory.recall.memory`` packs them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.db import connections
from django.db.models import BooleanField, Exists, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr

from agentmemory.models import Conversation, Message
from agentmemory.recall import pg_instant, pg_message_rows
from agentmemory.recall.compiled import Scope
from agentmemory.recall.said import TRANSCRIPT_DATE_KEYS, date_text, session_date, shown_day
from agentmemory.recall.text import query_words

#: a message longer than this (characters) is cut to its relevant sentences (measured on
#: LoCoMo, docs/benchmarks.md: 160 and 120 put more evidence in the block than 240 and 160,
#: most with an embedder, where more hits compete for the budget)
LONG_MESSAGE_CHARS = 160
#: a message shown for a hit next to it is cut from this length (characters)
NEIGHBOUR_MESSAGE_CHARS = 120
#: the opening of a long message that is always kept (characters, whole sentences)
OPENING_CHARS = 100
#: most sentences kept from a long message beside its first one
MAX_KEPT_SENTENCES = 2

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
#: the roles of the messages a block shows: tool results are left out, whatever their tool's
#: ``memory=`` policy ("omit", "stub"), which is the agent's at run time and not stored
SHOWN_ROLES = ("human", "ai")
#: characters a reader does not see, which may sit inside a tag without showing: soft
#: hyphen, Mongolian vowel separator, zero-width spaces and joiners, direction marks,
#: embeddings, overrides and isolates, the word joiner and invisible operators, BOM
_HIDDEN = "\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
#: a letter of "memory" as a model may read it: the ASCII letter, its fullwidth form and the
#: Cyrillic or Greek letter drawn the same (either case with ``re.IGNORECASE``), then any
#: hidden characters
_LETTERS = {
    "m": "m\uff4d\u041c\u043c",
    "e": "e\uff45\u0415\u0435",
    "o": "o\uff4f\u041e\u043e\u039f\u03bf",
    "r": "r\uff52",
    "y": "y\uff59\u0423\u0443",
}
_WORD = "".join(f"[{_LETTERS[c]}][{_HIDDEN}]*" for c in "memory")
#: the block's delimiter tags written anywhere in recalled text: any case, spaces, a slash,
#: hidden characters between the letters, fullwidth and small forms of "<" and "/", look-alike
#: letters, and the "<" written as an HTML character reference (a model reads "&lt;" as "<"),
#: its ";" left out too, as HTML parsers read "&lt" and "&#60" (WHATWG HTML, "character reference state")
_TAG = re.compile(
    rf"(?:<|\uff1c|\ufe64|&lt;?|&#0*60;?|&#x0*3c;?)((?:\s|[{_HIDDEN}])*[/\uff0f]?(?:\s|[{_HIDDEN}])*{_WORD})",
    re.IGNORECASE,
)
#: a text holding none of these has no tag (the common case, tested before the pattern)
_OPENERS = ("<", "\uff1c", "\ufe64", "&")
_OPENER = re.compile("[" + "".join(_OPENERS) + "]")
#: role words a transcript's speaker name may not be shown as (any word of the name)
_ROLE_WORDS = frozenset({"system", "assistant", "user", "human", "ai", "tool", "developer", "model"})
#: the label of a message's role where no speaker name is shown
_ROLE_LABELS = {"human": "user", "ai": "assistant"}
#: the characters a speaker name keeps
_NAME_CHAR = re.compile(r"[^\w .'-]")
#: most characters of a stored message read and cut (``trimmed``): the cost of a block is
#: bounded by this, not by the size of a message
MAX_READ_CHARS = 8000


@dataclass
class _Line:
    conversation_id: int
    seq: int
    message_id: int
    role: str
    speaker: str
    text: str
    said_at: datetime
    score: float
    title: str
    #: ``date_text(said_at)``, computed once per line
    date: str = ""


def rough_stem(word: str) -> str:
    """The first five characters of a lower-cased ``word``: the rough stem the block's cutting,
    conversation scores and query feedback compare words by ("visited", "visiting" and
    "visits" meet as "visit"; it over-joins some unrelated words, which only weighs a
    sentence or conversation, never filters one)."""
    return word[:5]


def trimmed(text: str, words: Sequence[str], longest: int = LONG_MESSAGE_CHARS) -> str:
    """``text`` (its first ``MAX_READ_CHARS`` characters, whitespace collapsed, the block's
    tags made inert: ``neutralised``) or, when longer than ``LONG_MESSAGE_CHARS``, its
    opening (its first sentences up to ``OPENING_CHARS`` characters: what the message is
    about) and the ``MAX_KEPT_SENTENCES`` later sentences holding most of ``words`` (compared
    by their first five letters, a rough stem), in their order, "…" where sentences are left
    out."""
    return _cut(text, frozenset(rough_stem(word) for word in words), longest)


def _cut(text: str, wanted: frozenset[str], longest: int) -> str:
    """``trimmed`` with the stems of its words (``rough_stem``) worked out once by the caller."""
    text = neutralised(text[:MAX_READ_CHARS])
    if len(text) <= longest:
        return text
    sentences = _sentences(text)
    if len(sentences) <= 1:
        return text[:longest].rstrip() + " …"
    opening = 0
    length = 0
    for sentence in sentences:
        if length >= OPENING_CHARS:
            break
        opening += 1
        length += len(sentence) + 1
    scored = []
    if text.isascii():
        # An ASCII sentence's words are its lower-cased letters as written: a stem not in it
        # stems none of them, so it holds none of ``words`` without being split into words
        # (splitting each sentence cost about a third of cutting a recall's messages). The
        # text is lowered once and split alike (lowering ASCII keeps every character's place).
        lowered = text.lower()
        if any(stem in lowered for stem in wanted):
            lowered_sentences = _sentences(lowered)
            for index in range(opening, len(sentences)):
                low = lowered_sentences[index]
                if any(stem in low for stem in wanted):
                    found = {rough_stem(word) for word in query_words(sentences[index])} & wanted
                    if found:
                        scored.append((-len(found), index))
    else:
        for index in range(opening, len(sentences)):
            sentence = sentences[index]
            if sentence.isascii():
                low = sentence.lower()
                if not any(stem in low for stem in wanted):
                    continue
            found = {rough_stem(word) for word in query_words(sentence)} & wanted
            if found:
                scored.append((-len(found), index))
    keep = set(range(opening))
    keep |= {index for _n, index in sorted(scored)[:MAX_KEPT_SENTENCES]}
    parts: list[str] = []
    previous = -1
    for index in sorted(keep):
        if previous >= 0 and index != previous + 1:
            parts.append("…")
        parts.append(sentences[index])
        previous = index
    if previous != len(sentences) - 1:
        parts.append("…")
    return " ".join(parts)


def _sentences(text: str) -> list[str]:
    """``_SENTENCE.split(text)`` for a text ``neutralised`` made: its only whitespace is
    single spaces between other characters, so the sentences end where a space follows
    ".", "!" or "?", and it holds no newline to mark them with. Three ``str.replace`` and a
    split: the pattern's look-behind, tried at every character, cost twice as much."""
    return text.replace(". ", ".\n").replace("! ", "!\n").replace("? ", "?\n").split("\n")


def neutralised(text: str) -> str:
    """``text`` on one line (whitespace collapsed) with the block's delimiter tags written
    in it made inert: their ``<`` (or the form of it written, ``_TAG``) becomes U+2039
    (single left-pointing angle quotation mark), so stored text can neither close the block
    nor open another, also when spelled with hidden characters, fullwidth or look-alike
    letters, or ``&lt;``."""
    text = " ".join(text.split())
    if _OPENER.search(text) is None:
        return text  # most text has no tag
    return _TAG.sub("\u2039\\1", text)


def _speaker(role: str, metadata: Any) -> str:
    """Who said a message: the transcript's speaker name (``metadata["speaker"]``) kept to
    letters, digits, spaces, ``.'-`` and 40 characters, unless it is empty or one of its
    words is a role word (``_ROLE_WORDS``); else the stored role's label ("user" /
    "assistant"). A stored name can thus never pass a message off as another role's."""
    label = _ROLE_LABELS.get(role, "tool")
    if isinstance(metadata, dict):
        name = metadata.get("speaker")
        if isinstance(name, str):
            name = " ".join(_NAME_CHAR.sub(" ", name).split())[:40].strip()
            if name and not any(word.lower() in _ROLE_WORDS for word in name.split()):
                return name
    return label


def read_lines(
    owner_id: int,
    wanted: dict[int, set[int]],
    using: str,
    words: Sequence[str],
    hit_keys: Collection[tuple[int, int]] = (),
    read: dict[tuple[int, int], tuple[Any, ...]] | None = None,
    *,
    probe: QuerySet[Any] | Scope | None = None,
) -> tuple[dict[tuple[int, int], _Line], bool | None]:
    """The messages ``wanted`` ({conversation id: seqs}) of the owner's conversations, with
    their conversations' titles: those of ``read`` (rows the search read, in the form of
    ``_LINE_FIELDS`` with the title and uuid) as they are, the others in one query (none
    when ``read`` holds them all). Each conversation's title and each session date a
    transcript gave is read once.

    ``probe``: a queryset (of any model), or a ``compiled.Scope`` of one, whose ``exists()``
    that query answers too (it is
    then run even when ``read`` holds every line), saving the caller a round trip. Returns
    the lines by ``(conversation id, seq)`` and whether ``probe`` holds a row (None without
    a probe, or when nothing is ``wanted``: no query is run)."""
    if not wanted:
        return {}, None
    read = read or {}
    rows = [
        row for c, seqs in wanted.items() for q in seqs if (row := read.get((c, q))) and row[3] in SHOWN_ROLES
    ]
    wanted = {c: left for c, seqs in wanted.items() if (left := {q for q in seqs if (c, q) not in read})}
    probed = None
    if wanted or probe is not None:
        read_lines = _pg_lines if connections[using].vendor == "postgresql" else _orm_lines
        more, probed = read_lines(owner_id, wanted, using, probe)
        rows += more
    lines = {}
    stems = frozenset(rough_stem(word) for word in words)
    titles = _headings({row[1]: (row[7], row[8]) for row in rows})
    dates: dict[tuple[Any, ...], datetime | None] = {}
    shown_dates: dict[date, str] = {}
    for message_id, conversation_id, seq, role, content, metadata, created_at, _title, _uuid in rows:
        heading = titles[conversation_id]
        said_at = created_at
        if metadata and isinstance(metadata, dict):  # most messages have none
            # only text is read as a date (``session_date``): other values (a list, an
            # object) count as absent, and a key of texts can be hashed
            given = tuple(
                value if isinstance(value := metadata.get(key), str) else None for key in TRANSCRIPT_DATE_KEYS
            )
            if given not in dates:
                dates[given] = session_date(dict(zip(TRANSCRIPT_DATE_KEYS, given, strict=True)), None)
            said_at = dates[given] or created_at
        # the text shows the day only: worked out once per day (nearly every stored message
        # has an instant of its own; formatting each cost 6 ms a recall)
        day = shown_day(said_at)
        shown = shown_dates.get(day)
        if shown is None:
            shown = shown_dates[day] = date_text(said_at)
        lines[(conversation_id, seq)] = _Line(
            conversation_id=conversation_id,
            seq=seq,
            message_id=message_id,
            role=role,
            speaker=_speaker(role, metadata) if metadata else _ROLE_LABELS.get(role, "tool"),
            text=_cut(
                content or "",
                stems,
                LONG_MESSAGE_CHARS if (conversation_id, seq) in hit_keys else NEIGHBOUR_MESSAGE_CHARS,
            ),
            said_at=said_at,
            score=0.0,
            title=heading,
            date=shown,
        )
    return lines, probed


def _headings(conversations: dict[int, tuple[str | None, Any]]) -> dict[int, str]:
    """Each conversation's heading in a block, from ``{id: (title, uuid)}``: its title in
    quotes (without the heading's own syntax, brackets and quotes; at most 48 characters),
    else "conversation" and the first 8 characters of its uuid. Conversations whose titles
    give one heading ("Support chat" twice) get their uuid's 8 characters after it, so the
    model can tell which conversation an item is in."""
    headings: dict[int, str] = {}
    for conversation_id, (title, uuid) in conversations.items():
        text = neutralised(re.sub(r'[\[\]"]', " ", title or ""))
        if len(text) > 48:
            text = text[:47].rstrip() + "…"
        headings[conversation_id] = f'"{text}"' if text else f"conversation {str(uuid)[:8]}"
    seen = Counter(headings.values())
    return {
        conversation_id: f"{heading} ({str(conversations[conversation_id][1])[:8]})"
        if seen[heading] > 1
        else heading
        for conversation_id, heading in headings.items()
    }


#: the columns ``read_lines`` reads, in order
_LINE_FIELDS = ("id", "conversation", "seq", "role", "content", "metadata", "created_at")


def _pg_lines(
    owner_id: int, wanted: dict[int, set[int]], using: str, probe: QuerySet[Any] | Scope | None = None
) -> tuple[list[tuple[Any, ...]], bool | None]:
    """PostgreSQL: the rows of ``read_lines``, each message found by the unique index of
    ``(conversation, seq)`` (a ``LATERAL`` lookup per place, as ``recall._pg_near`` does); a
    wide ``OR`` of ``(conversation = x AND seq IN (...))`` made the planner read every
    message of the conversations named and filter them (40-60 ms at 100,000 messages).
    With ``probe``, the statement also says whether it holds a row: the places are joined
    to one row of that ``EXISTS`` (``LEFT JOIN``: the answer comes back when no message is
    found; None without a probe)."""

    connection = connections[using]
    quote = connection.ops.quote_name
    meta = Message._meta
    columns = {field.name: str(field.column) for field in meta.concrete_fields}
    column = {name: quote(columns[name]) for name in _LINE_FIELDS}
    conversations = Conversation._meta
    of_conversation = {field.name: str(field.column) for field in conversations.concrete_fields}
    owner_column, title, uuid = (quote(of_conversation[name]) for name in ("owner", "title", "uuid"))
    pairs = [(int(c), int(q)) for c, seqs in wanted.items() for q in sorted(seqs)]
    created_at, instant = pg_instant(connection, "created_at")
    sql = (
        f"SELECT m.id, m.conversation_id, m.seq, m.role, m.opening, m.metadata, {created_at}, "
        f"c.{title}, c.{uuid} FROM unnest(%s::bigint[], %s::bigint[]) AS p(c, s) "
        f"CROSS JOIN LATERAL (SELECT {column['id']} AS id, {column['conversation']} AS conversation_id, "
        f"{column['seq']} AS seq, {column['role']} AS role, "
        # a bounded prefix of each message: reading and cutting cost what the block can show,
        # whatever the message's size
        f"SUBSTRING({column['content']}, 1, {MAX_READ_CHARS}) AS opening, "
        f"{column['metadata']} AS metadata, {column['created_at']} AS created_at "
        f"FROM {quote(meta.db_table)} WHERE {column['conversation']} = p.c AND {column['seq']} = p.s "
        f"OFFSET 0) AS m JOIN {quote(conversations.db_table)} AS c ON c.{quote('id')} = m.conversation_id "
        f"WHERE c.{owner_column} = %s AND m.role = ANY(%s) AND m.opening > ''"
    )
    # the arrays as literals: psycopg's adaptation of a list cost ten times as much
    arrays = ["{" + ",".join(str(place[i]) for place in pairs) + "}" for i in (0, 1)]
    params: list[Any] = [*arrays, int(owner_id), list(SHOWN_ROLES)]
    if probe is not None:
        if isinstance(probe, Scope):  # a scope of the first row's primary key, compiled once
            inner, probe_params = probe.sql_with_params()
        else:
            inner, compiled_params = probe.order_by().values("pk")[:1].query.sql_with_params()
            probe_params = list(compiled_params)
        probed = f"(SELECT EXISTS({inner}) AS probed) AS f"
        sql = f"SELECT l.*, f.probed FROM {probed} LEFT JOIN ({sql}) AS l ON true"
        params = [*probe_params, *params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if probe is None:
        return pg_message_rows(connection, rows, instant), None
    found = [row[:-1] for row in rows if row[0] is not None]
    return pg_message_rows(connection, found, instant), bool(rows[0][-1])


def _orm_lines(
    owner_id: int, wanted: dict[int, set[int]], using: str, probe: QuerySet[Any] | Scope | None = None
) -> tuple[list[tuple[Any, ...]], bool | None]:
    """The rows of ``read_lines`` on other databases: one query with an ``OR`` of the places
    of each conversation; with ``probe``, whether it holds a row, as ``_pg_lines`` says it."""

    first: QuerySet[Any] | None = None  # the probe's first row's primary key
    if isinstance(probe, Scope):
        first = probe.queryset()
    elif probe is not None:
        first = probe.order_by().values("pk")[:1]
    if not wanted:
        return [], None if first is None else first.exists()
    quote = connections[using].ops.quote_name
    meta = Message._meta
    table = quote(meta.db_table)
    conversation_column = f"{table}.{quote(str(meta.get_field('conversation').column))}"
    seq_column = f"{table}.{quote(str(meta.get_field('seq').column))}"
    terms, params = [], []
    for conversation_id, seqs in wanted.items():
        terms.append(f"({conversation_column} = %s AND {seq_column} IN ({', '.join(['%s'] * len(seqs))}))")
        params += [int(conversation_id), *sorted(int(seq) for seq in seqs)]
    near = RawSQL(" OR ".join(terms), params, output_field=BooleanField())
    fields = [
        "pk",
        "conversation_id",
        "seq",
        "role",
        "opening",
        "metadata",
        "created_at",
        "conversation__title",
        "conversation__uuid",
    ]
    annotations: dict[str, Any] = {"opening": Substr("content", 1, MAX_READ_CHARS)}
    if first is not None:
        annotations["probed"] = Exists(first)
        fields.append("probed")
    rows = list(
        Message.objects.using(using)
        .filter(
            near,
            conversation_id__in=list(wanted),
            conversation__owner_id=owner_id,
            role__in=SHOWN_ROLES,
            content__gt="",
        )
        .order_by()
        .annotate(**annotations)
        .values_list(*fields)
    )
    if probe is None or not rows:
        return rows, None
    return [row[:-1] for row in rows], bool(rows[0][-1])
