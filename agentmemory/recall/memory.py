"""The memory block: what a user's past conversations and facts hold about a query, packed
into one delimited message of at most a given number of tokens.

``recall_memory(owner=..., query=..., max_tokens=...)`` returns a ``MemoryBlock`` (or None):

1. **What is searched.** The stored messages of the owner's conversations (of ``agent_key``
   when given) through ``agentmemory.recall.search_messages`` (its neighbour scoring and
   dates named in the query included; the query less ``QUESTION_WORDS``: ``searched_query``),
   and the owner's live facts through
   ``KnowledgeMemory.recall`` in the scope ``fact_agent_key`` / ``namespace``. Another
   user's rows are never read. In the conversation being answered (``conversation_id``),
   the messages the window already sends (``exclude_seqs``) are left out; its older
   messages, folded into a summary, are recallable like every past conversation's.
2. **What comes along.** Each message found brings the message before it (the question an
   answer needs) and the one after it (the reply); the messages two places away rank at
   ``NEIGHBOUR_SHARE`` of its score among the other hits. With full text, the search's
   candidates are raised for their passage's score before the hits are chosen
   (``fulltext.passage_scores``, ``PASSAGE_WEIGHT``). Messages are raised for the weight of
   their conversation (``CONVERSATION_WEIGHT``), with another backend for their
   conversation's score as one document (``conversation_scores``, ``DOCUMENT_WEIGHT``), for a
   speaker the query names
   (``SPEAKER_WEIGHT``) and for being said in a time the query names relative to ``now``,
   when it is asked ("four weeks ago", "last Saturday": ``when.windows_in``, ``TIME_WEIGHT``).
3. **How it is packed.** Messages are taken best first until the budget is spent; a long
   message is cut to its first sentence and the sentences holding the query's words
   (``…`` marks a cut). Messages next to each other in one conversation become one item.
   A fact whose source message is shown is left out, its tokens given back. With a
   tiktoken counter of cl100k_base each unit is counted at exactly what it adds to the
   block (its lines, headings and gap marks with their newlines), so the block fills its
   budget to within a line; with another counter the estimates reserve a little more and
   the packing runs again in what the count of the block says is left (``REFILLS``).
4. **How it is rendered.** One ``<memory>`` ... ``</memory>`` block with a one-line header;
   items oldest first, each opening with its provenance: the date it was said (the session
   date a transcript gave in the message metadata, else the time it was stored), the
   conversation (its title, else the first 8 characters of its public id; left out when
   the item of messages above is of the same conversation) and, on each
   line, who said it (the transcript's speaker name, else "user" / "assistant").

Cost: the queries of ``search_messages`` and ``KnowledgeMemory.recall`` and one query
reading the messages shown with their conversations, which also asks whether the fact
scope holds a fact (``KnowledgeMemory.recall`` runs only when it does): a number
independent of the history's length (pinned in ``tests/test_recall_memory.py``).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import lru_cache, partial
from itertools import pairwise
from typing import Any

from django.db import router
from django.utils import timezone

from agentmemory.conf import get_token_counter
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Message
from agentmemory.recall import _search, embeddings_wanted
from agentmemory.recall.dates import Period
from agentmemory.recall.feedback import asks_for_every, expansion_words, mixed, topic_words
from agentmemory.recall.lines import (
    MAX_READ_CHARS,
    SHOWN_ROLES,
    _Line,
    neutralised,
    read_lines,
    rough_stem,
)
from agentmemory.recall.said import (
    TRANSCRIPT_DATE_KEYS,
    date_text,
    fact_said_at,
    said_by,
    session_date,
    shown_day,
)
from agentmemory.recall.scope import owner_id_of
from agentmemory.recall.text import (
    STOP_WORDS,
    bounded_query,
    query_words,
    said_keys,
    said_within,
    search_text,
    unsaid_facts,
    word_keys,
    words_key,
)
from agentmemory.recall.when import windows_in, without_times
from agentmemory.tokens import TiktokenCounter
from agentmemory.validation import MAX_ID

__all__ = ["MemoryBlock", "RecalledItem", "rank_messages", "recall_memory"]

#: the line that opens the block and the one that closes it
BLOCK_OPEN = "<memory>"
BLOCK_CLOSE = "</memory>"
BLOCK_HEADER = (
    "Recalled from the user's past conversations and saved facts, oldest first; each item "
    "gives the date it was said, the conversation (when it changes) and the speaker."
)
#: most messages searched for per block (five times as many candidates): with full text 50, no
#: fewer found than at 100 at half the cost; with an embedder 100, more found (docs/benchmarks.md)
MAX_HITS = 50
MAX_HITS_WITH_EMBEDDINGS = 100
#: a message two places from a hit ranks at this share of the hit's score, among the hits
#: (LoCoMo, docs/benchmarks.md: 0.6 put more evidence in the block than 0.3, 0.5 and 0.85)
NEIGHBOUR_SHARE = 0.6
#: the places, relative to a hit, packed with it (the hit itself at 0) ...
NEAR_OFFSETS = (-1, 0, 1)
#: ... and the places packed at ``NEIGHBOUR_SHARE`` of its score
AROUND_OFFSETS = (-2, 2)
#: a message's score is raised by up to this share for the weight of its conversation (its
#: hits' scores summed, each next one counting ``CONVERSATION_DECAY`` of the one before,
#: scaled to the heaviest conversation's): a session that matches in several places ranks
#: its messages above a lone match elsewhere
CONVERSATION_WEIGHT = 0.5
CONVERSATION_DECAY = 0.5
#: a message's score is raised by up to this share for the score of its conversation as one
#: document (``conversation_scores``), scaled to the best conversation's; with full text the
#: passages' weight takes its place. Measured with the local embedder on every LongMemEval-S
#: dev question (each haystack session a conversation; docs/benchmarks.md): 0.5 ranked at
#: least as well as 1 on each measure and half the questions; 0, 0.25 and 2 lower on
#: session recall
DOCUMENT_WEIGHT = 0.5
#: with full text, a message's score is raised by up to this share for the score of its
#: passage (``fulltext.passage_scores`` over all of the search's candidates, up to
#: ``PG_MAX_MATCHES``, scaled to the best passage's) before the ``MAX_HITS`` are chosen, in
#: place of ``DOCUMENT_WEIGHT``: an answer of the best passages enters the hits though its own
#: words rank it low (docs/benchmarks.md: 2 and 4 lost LoCoMo evidence at 2,000 tokens)
PASSAGE_WEIGHT = 1.0
#: BM25's term-frequency saturation for those documents
DOCUMENT_K1 = 1.2
#: characters of a hit read for its conversation's score (bounds its cost: ``_stems_in``)
DOCUMENT_CHARS = 2000
#: a message said by someone the query names (the transcript's ``speaker``, one of the
#: words of the name among the query's) scores this share more
SPEAKER_WEIGHT = 0.3
#: a message said in a time the query names relative to when it is asked ("four weeks ago",
#: "last Saturday": ``when.windows_in``) scores this share more
TIME_WEIGHT = 2.0
#: most facts recalled per block
MAX_FACTS = 10
#: the line between two messages of one item that are not next to each other
GAP_MARK = "…"
#: with a counter whose counts do not add up line by line, the packing passes run again in
#: what the count of the block says is left, at most this many times (each one count more)
REFILLS = 3


@dataclass(frozen=True)
class RecalledItem:
    """One item of a memory block.

    Attributes:
        kind: ``"message"`` (stored messages of one conversation, next to each other) or
            ``"fact"``.
        text: exactly what the block shows for this item, provenance included.
        tokens: the token counter's count of ``text`` (its share of the block).
        score: its relevance (the best of its messages'); orders the packing, not the block.
        conversation_id: the conversation of the messages (None for a fact).
        seqs: the ``seq`` of the stored messages it shows (empty for a fact).
        fact_id: the fact's id (None for messages).
        said_at: the session date a transcript gave (message metadata), else ``created_at``.
        source_message_id: the id of the stored message a fact was taken from (its
            ``source_message``; None for messages and for facts without one).
        words: a fact's ``recall.text.words_key``: a request sending a message that says it
            (``said_keys``) repeats the fact; "" for messages.
    """

    kind: str
    text: str
    tokens: int
    score: float
    conversation_id: int | None
    seqs: tuple[int, ...]
    fact_id: int | None
    said_at: datetime | None
    source_message_id: int | None = None
    words: str = ""


@dataclass(frozen=True)
class MemoryBlock:
    """A memory block as sent: ``text`` is one message's content, ``tokens`` what that
    message costs (``token_counter.count_message`` of a system message holding it, as the
    context builder counts the summary message it makes), ``items`` what it shows in block
    order, ``query`` the query it answers."""

    text: str
    tokens: int
    items: tuple[RecalledItem, ...]
    query: str


@dataclass
class _Unit:
    score: float
    conversation_id: int | None = None
    seqs: list[int] = field(default_factory=list)
    fact: Any = None


def recall_memory(
    *,
    owner: Any,
    query: str,
    max_tokens: int,
    token_counter: Any = None,
    agent_key: str | None = None,
    namespace: str | None = None,
    conversation_id: int | None = None,
    exclude_seqs: Collection[int] = (),
    exclude_fact_ids: Collection[int] = (),
    exclude_message_ids: Collection[int] = (),
    exclude_texts: Collection[str] = (),
    exclude_said_in: Collection[str] = (),
    facts: bool = True,
    using: str | None = None,
    fact_agent_key: str | None = None,
    now: datetime | None = None,
    as_of: bool = True,
) -> MemoryBlock | None:
    """The memory block of ``owner`` for ``query`` in at most ``max_tokens`` tokens.

    Args:
        owner: a saved user or a user id (required).
        query: what to recall for: the newest human message, with the turn so far; read as
            ``recall.text.bounded_query`` gives it (``MAX_QUERY_CHARS``, what it asks first).
        max_tokens: the most the block may cost as a message (tokens).
        token_counter: counts the block; default the configured one.
        agent_key: only conversations of this agent key (exact match); None: all of the owner's.
        namespace: the facts' namespace (``KnowledgeMemory``'s).
        conversation_id: the conversation being answered; its ``exclude_seqs`` are left out.
        exclude_seqs: seqs of ``conversation_id`` the window already sends.
        exclude_fact_ids: facts already sent (by ``build_context()`` for instance).
        exclude_message_ids: ids of the stored messages the request already sends whole (the
            window's, less its truncated copies): a fact taken from one of them (its
            ``source_message``, such as the fact the ``remember`` tool keeps from the turn's
            own question) is left out, as the message says it. Without it the second model
            call of that turn was sent the question and, in the block, the fact made of it.
        exclude_texts: the texts of the messages the request already sends whole: a fact
            that one of them, or one of its sentences, says word for word (``said_keys``:
            case, white space and punctuation aside) is left out, with or without a
            ``source_message`` (a host's own ``remember()`` calls, an import, MEMORY.md
            keep none). So is a fact that a message the block shows says.
        exclude_said_in: the other texts the request sends (the system prompt with its
            knowledge block, the summary): a message of at least ``recall.text.SAID_MIN_WORDS``
            words that one of them says word for word (``recall.text.said_within``: case,
            white space and punctuation aside) is left out, as a hit or beside one, its room given to
            others. A memory flush keeps a turn as a fact quoting it ("The user said "..." on
            7 December 2026"), an extractive summary quotes its turns: the knowledge block or
            the summary already sends them (design R3: the request never repeats itself).
        facts: whether facts are recalled too.
        using: the database alias; default the router's choice for reading messages.
        fact_agent_key: the facts' agent key (the agent's ``KNOWLEDGE_MEMORY_AGENT_KEY``;
            None: the facts stored without one).
        now: when ``query`` is asked (an aware datetime): the times it names relative to
            then ("last Saturday") favour the messages said then (``rank_messages``), and
            the block is recalled as the memory stood then, for a user replaying a
            transcript or evaluating history at a past date: a message or fact said after
            ``now`` (the date a transcript gave it, else when it was stored) was not there
            yet and is left out, also as the neighbour of a hit; a fact superseded after
            ``now`` was the current one then and is recalled; one expired by then is not
            (``KnowledgeMemory.recall``). Their recall is recorded at ``now``. Default: the
            current time and the memory as it is (the time of a turn being answered).
        as_of: with ``now``, whether to recall as the memory stood then (the default);
            ``False`` reads only the relative times and expiry from ``now`` and recalls
            every stored message and live fact, whatever its date (a benchmark whose
            transcript dates do not run in order with its question dates: LongMemEval dates
            an evidence session after the question in 25 of 236 dev questions).

    Returns:
        A ``MemoryBlock`` of at most ``max_tokens`` tokens, or None when nothing matches or
        the budget holds no item.

    Raises:
        MemoryScopeError: no owner. TypeError / ValueError: ``query`` not a string,
            ``max_tokens`` not an integer, a bad ``agent_key`` or ``conversation_id``.
    """

    owner_id = owner_id_of(owner)
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, not {type(query).__name__}")
    query = bounded_query(query)  # as search reads it: a pasted 10 MB text cost 10-30 s
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise TypeError(f"max_tokens must be an integer, not {type(max_tokens).__name__}")
    if conversation_id is not None and (
        isinstance(conversation_id, bool) or not isinstance(conversation_id, int)
    ):
        raise TypeError("conversation_id must be an integer or None")
    counter = token_counter or get_token_counter()
    using = using or router.db_for_read(Message)

    def block_cost(body: list[str]) -> int:
        return int(counter.count_message(ChatMessage.system(render(body))))

    empty = block_cost([])
    words = query_words(query)
    if max_tokens <= empty or not words:
        return None
    budget = max_tokens - empty
    excluded = {int(seq) for seq in exclude_seqs} if conversation_id is not None else set()
    then = now if now is not None and as_of else None  # recalled as the memory stood then

    # 1. candidates: messages (with their scores) and facts
    read: dict[tuple[int, int], tuple[Any, ...]] = {}  # most of the messages shown (PostgreSQL)
    hits = _ranked(
        owner=owner_id,
        query=query,
        k=MAX_HITS_WITH_EMBEDDINGS,
        agent_key=agent_key,
        using=using,
        conversation_id=conversation_id,
        exclude_seqs=excluded,
        now=now,
        as_of=as_of,
        read=read,
    )
    # 2. what each hit brings along: the message before an answer found through it, the reply
    # after a matching question; the messages next to those at a share of the hit's score
    best = max((h.score for h in hits), default=0.0) or 1.0
    units: list[_Unit] = []
    later: list[_Unit] = []
    wanted: dict[int, set[int]] = {}
    for hit in hits:
        # the message before (the question an answer needs) and the one after (the reply):
        # measured on LoCoMo, both beat bringing only the one a message's role suggests
        seqs = [hit.seq + offset for offset in NEAR_OFFSETS]
        around = [hit.seq + offset for offset in AROUND_OFFSETS]
        keep = [
            s
            for s in [*seqs, *around]
            if 0 <= s <= MAX_ID and not (hit.conversation_id == conversation_id and s in excluded)
        ]
        score = hit.score / best
        units.append(_Unit(score, hit.conversation_id, [s for s in seqs if s in keep]))
        later.append(_Unit(score * NEIGHBOUR_SHARE, hit.conversation_id, [s for s in around if s in keep]))
        wanted.setdefault(hit.conversation_id, set()).update(keep)
    hit_keys = {(h.conversation_id, h.seq) for h in hits}

    # the facts: whether the scope holds one is asked in the statement reading the lines
    # when there is one (a round trip less), else on its own
    fact_hits: list[Any] = []
    memory = None
    holds_facts: bool | None = None
    if facts:
        memory = KnowledgeMemory(owner_id, agent_key=fact_agent_key, namespace=namespace, using=using)
    lines, holds_facts = read_lines(
        owner_id,
        wanted,
        using,
        words,
        hit_keys,
        read,
        probe=None if memory is None else memory.live_probe(now, as_of=then is not None),
    )
    if then is not None:
        # as of ``now``: a message said after it was not there yet, also beside a hit
        lines = {key: line for key, line in lines.items() if said_by(line.said_at, then)}
    if exclude_said_in:
        lines = _unsaid(lines, exclude_said_in)
    if memory is not None:
        skip = {int(pk) for pk in exclude_fact_ids}
        sent = {int(pk) for pk in exclude_message_ids}
        # most owners of a long history keep few or no facts in a scope: ranking none cost more
        # (the ranking statement's planning, 3-8 ms) than asking whether there is one
        if holds_facts is None:
            holds_facts = (memory.live_facts(now) if then is None else memory.facts_as_of(then)).exists()
        if holds_facts:
            fact_hits = [
                h
                for h in memory.recall(query, k=MAX_FACTS, now=now, as_of=as_of)
                if h.fact.pk not in skip and h.fact.source_message_id not in sent
            ]
        fact_hits = unsaid_facts(fact_hits, exclude_texts, exclude_said_in)
    if not hits and not fact_hits:
        return None
    fact_best = max((h.score for h in fact_hits), default=0.0) or 1.0
    units += [_Unit(h.score / fact_best, fact=h.fact) for h in fact_hits]
    units += later
    units.sort(key=lambda u: -u.score)

    for unit in units:
        if unit.fact is None:
            unit.seqs = [s for s in unit.seqs if (unit.conversation_id, s) in lines]
            for seq in unit.seqs:
                line = lines[(unit.conversation_id, seq)]  # type: ignore[index]
                line.score = max(line.score, unit.score)

    # 3. packing: best units first while the rendered block fits. A conversation is named in
    # its first group's header only (``_items``); a fact whose source message is shown is
    # left out (the message says it, with its neighbours), its tokens given back. Each line
    # and each heading is counted once (a unit that does not fit may be tried again later).
    counts = _Counts(counter, empty, block_cost)  # an item left as it was is not counted again
    # With a counter whose counts add up line by line (``_Counts.adds_up``) a unit costs
    # exactly what it adds to the block: its lines and new headings each with their newline
    # (``_newline_count``), and the gap marks ("…") it opens or closes in its groups. Else
    # each line is reserved 2 tokens more (its newline and a possible gap mark) and each
    # heading 1, as before: at 2,000 tokens that left about 110 tokens of a LoCoMo block
    # unused. The one cost left uncertain is a heading naming its conversation again where
    # groups of two conversations alternate in time; the check after the loop trims then.
    exact = counts.adds_up
    line_costs: dict[tuple[int, int], int] = {}
    line_floors: dict[tuple[int, int], int] = {}  # a line's fewest tokens, worked out once
    head_costs: dict[tuple[int, str, bool], int] = {}
    # A unit that cannot fit even at its fewest possible tokens is passed over uncounted:
    # with a tiktoken counter a line costs at least one token a word (its texts' only
    # whitespace is single spaces, ``neutralised``; tiktoken's pre-tokenizer never joins two
    # words in one piece, and each piece is at least one token). Most units tried once the
    # block is nearly full are passed over so, instead of counting each of their lines.
    floors = type(counter) is TiktokenCounter
    count_text = partial(_tiktoken_count, counter) if floors else counter.count_text
    reserve = 0 if exact else 2  # tokens a line's estimate adds beside the line (and its floor)

    def counted(text: str) -> int:
        """``text``'s tokens in the block: with its newline when they add up."""
        return _newline_count(count_text, text) if exact else int(count_text(text))

    def line_cost(key: tuple[int, int]) -> int:
        cost = line_costs.get(key)
        if cost is None:
            cost = line_costs[key] = counted(_line_text(lines[key])) + reserve
        return cost

    def head_cost(line: _Line, titled: bool) -> int:
        key = (line.conversation_id, line.date, titled)
        cost = head_costs.get(key)
        if cost is None:
            cost = head_costs[key] = counted(_head(line, titled=titled)) + (0 if exact else 1)
        return cost

    gap_cost = counted(GAP_MARK) if exact else 0
    group_seqs: dict[tuple[int, str], list[int]] = {}  # the seqs chosen in each group, in order
    chosen: set[tuple[int, int]] = set()
    groups: set[tuple[int, str]] = set()
    named: set[int] = set()
    shown_ids: set[int] = set()
    shown_said: set[str] = set()  # ``said_keys`` of the messages chosen
    fact_words = {h.fact.pk: words_key(h.fact.content) for h in fact_hits}
    chosen_facts: list[Any] = []
    fact_costs: dict[int, int] = {}

    def pack(estimate: int) -> None:
        """Take the units, best first, that fit in ``budget`` with ``estimate`` tokens used."""
        nonlocal groups, named
        for unit in units:
            if unit.fact is not None:
                if (
                    unit.fact.pk in fact_costs  # taken (or left out for a message shown) before
                    or unit.fact.source_message_id in shown_ids
                    or fact_words[unit.fact.pk] in shown_said
                ):
                    continue
                cost = counted(_fact_text(unit.fact)) + (0 if exact else 1)
                if estimate + cost <= budget:
                    chosen_facts.append((unit.fact, unit.score))
                    fact_costs[unit.fact.pk] = cost
                    estimate += cost
                continue
            conversation = unit.conversation_id
            new = [(conversation, s) for s in unit.seqs if (conversation, s) not in chosen]
            if not new:
                continue
            if floors:
                fewest = estimate
                for key in new:
                    least = line_floors.get(key)  # type: ignore[arg-type]
                    if least is None:
                        least = line_floors[key] = len(_line_text(lines[key]).split()) + reserve  # type: ignore[index]
                    fewest += least
                if fewest > budget:
                    continue
            cost = 0
            heads = set()
            names = set()
            added: dict[tuple[int, str], list[int]] = {}
            for key in new:
                line = lines[key]  # type: ignore[index]
                cost += line_cost(key)  # type: ignore[arg-type]
                group = (line.conversation_id, line.date)
                added.setdefault(group, []).append(line.seq)
                if group not in groups and group not in heads:
                    heads.add(group)
                    if line.conversation_id in named or line.conversation_id in names:
                        cost += head_cost(line, False)
                    else:
                        names.add(line.conversation_id)
                        cost += head_cost(line, True)
            if exact:  # the gap marks between the messages of each group it adds to
                for group, seqs in added.items():
                    before = group_seqs.get(group, [])
                    cost += gap_cost * (_gaps(sorted([*before, *seqs])) - _gaps(before))
            if estimate + cost > budget:
                continue
            chosen.update(new)  # type: ignore[arg-type]
            for group, seqs in added.items():
                group_seqs[group] = sorted([*group_seqs.get(group, []), *seqs])
            groups |= heads
            named |= names
            estimate += cost
            shown_ids.update(lines[key].message_id for key in new)  # type: ignore[index]
            if fact_words:  # only a block with facts compares texts
                for key in new:
                    shown_said.update(said_keys(lines[key].text))  # type: ignore[index]
            for fact, score in list(chosen_facts):
                if fact.source_message_id in shown_ids or fact_words[fact.pk] in shown_said:
                    chosen_facts.remove((fact, score))
                    estimate -= fact_costs[fact.pk]

    pack(0)
    items = _items(lines, chosen, chosen_facts, counts)
    tokens = counts.block(items)
    for _pass in range(0 if exact else REFILLS):
        # the estimates reserved tokens the block did not use: pack again in what the count
        # of the block says is left (each pass one more count of the block)
        taken = len(chosen) + len(chosen_facts)
        if tokens >= max_tokens:
            break
        pack(tokens - empty)
        if len(chosen) + len(chosen_facts) == taken:
            break
        items = _items(lines, chosen, chosen_facts, counts)
        tokens = counts.block(items)
    while items and tokens > max_tokens:
        weakest = min(chosen, key=lambda key: lines[key].score, default=None)
        if weakest is not None:
            chosen.discard(weakest)
        elif chosen_facts:
            chosen_facts.pop()
        items = _items(lines, chosen, chosen_facts, counts)
        tokens = counts.block(items)
    if not items:
        return None
    text = render([item.text for item in items])
    return MemoryBlock(text=text, tokens=tokens, items=tuple(items), query=query)


#: most texts whose tiktoken counts ``_tiktoken_count`` keeps
COUNTS_KEPT = 4096


def _tiktoken_count(counter: Any, text: str) -> int:
    """``counter.count_text(text)`` for a ``TiktokenCounter`` (whose count depends on its
    encoding and the text alone), kept across recalls by encoding (``_encoding_count``): the
    lines and headings of a user's blocks recur (over 200 LoCoMo questions at 100,000 stored
    messages, 59% of the characters of the lines counted and 91% of the headings' had been
    counted by an earlier recall). Keyed by the encoding, which tiktoken makes once per
    process, so a counter made for each build neither misses the cache nor is kept alive."""
    return _encoding_count(counter._encoding, text)


@lru_cache(maxsize=COUNTS_KEPT)
def _encoding_count(encoding: Any, text: str) -> int:
    """``TiktokenCounter.count_text``: tokens of ``text`` by ``encoding.encode_ordinary``."""
    return len(encoding.encode_ordinary(text)) if text else 0


#: the pre-tokenizer pattern of tiktoken's cl100k_base (``tiktoken_ext.openai_public``).
#: Under it, for texts A and B where B begins with a character other than whitespace,
#: count(A + "\n" + B) == count(A + "\n") + count(B): no alternative of the pattern
#: reaches past a newline into a character that is not whitespace (a punctuation run takes
#: the newlines after it and stops; a whitespace run ends at the newline, ``\s++$`` and
#: ``\s*[\r\n]`` giving the same piece there), and none looks behind, so the pieces of
#: A + "\n" + B are those of A + "\n" followed by those of B, and tiktoken encodes each
#: piece on its own. And count(A + "\n") == count(A) + count("\n") when A ends with a
#: letter or digit: its last piece ends there whatever follows.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


#: characters that are neither whitespace nor letters nor digits (``\s``, ``\p{L}``,
#: ``\p{N}``) in any Unicode version: the ASCII punctuation and "…", which ``trimmed`` puts
#: at a cut
_PUNCTUATION = frozenset(string.punctuation + "\u2026")


def _last_piece(text: str) -> str | None:
    r"""The last piece of ``text`` under ``_CL100K_PATTERN`` when it is a run of
    ``_PUNCTUATION`` at its end (with the one space before it, which the pattern's
    `` ?[^\s\p{L}\p{N}]++`` takes), else None (not known without splitting ``text``).
    The piece before such a run ends with a letter or a digit, or with a character other
    than whitespace before the space: no piece reaches into the run from the left, and the
    run cannot be split (no letter or digit follows any of its characters)."""
    end = start = len(text)
    while start > 0 and text[start - 1] in _PUNCTUATION:
        start -= 1
    if start == end:
        return None
    if start == 0:
        return text
    before = text[start - 1]
    if before == " ":
        return text[start - 1 :] if start == 1 or not text[start - 2].isspace() else None
    return text[start:] if unicodedata.category(before)[0] in "LN" else None


def _newline_count(count: Any, text: str) -> int:
    r"""``count(text + "\n")`` for a tiktoken ``count`` of ``_CL100K_PATTERN`` and a text
    that begins with a character other than whitespace, from ``count(text)`` and counts of
    short texts that recur (the newline, a closing "." or " …"): a newline after a letter
    or a digit is a piece of its own, and one after a punctuation run joins that run's
    piece (``[\r\n]*+``), the pieces before it unchanged. Encoding each line again with
    its newline was about 40% of a recall's tiktoken time (0.9 of 2.2 ms CPU a recall at
    100,000 messages, docs/benchmarks.md). Where the last piece is not known
    (``_last_piece``), ``text + "\n"`` is counted."""
    if unicodedata.category(text[-1])[0] in "LN":
        return int(count(text) + count("\n"))
    piece = _last_piece(text)
    if piece is None:
        return int(count(text + "\n"))
    return int(count(text) - count(piece) + count(piece + "\n"))


class _Counts:
    """The token counts of one recall's items (``item``) and of its block (``block``), each
    item's kept by its text. With a tiktoken counter of ``_CL100K_PATTERN`` they are added
    up from the counts of the lines (``_tiktoken_count``, kept across recalls) instead of
    counting the items and the whole block again: the same numbers (the rule above; every
    line, heading and the block's header and closing tag begin with a character other
    than whitespace, which is checked), about a third of a recall's counting."""

    def __init__(self, counter: Any, empty: int, block_cost: Any) -> None:

        self.counter = counter
        self.empty = empty
        self.block_cost = block_cost
        encoding = getattr(counter, "_encoding", None)
        self.adds_up = (
            type(counter) is TiktokenCounter and getattr(encoding, "_pat_str", None) == _CL100K_PATTERN
        )
        #: {item text: (its tokens, its tokens with a newline after it)}
        self.texts: dict[str, tuple[int, int]] = {}

    def item(self, parts: list[str]) -> tuple[str, int]:
        """The text of the lines ``parts`` joined by newlines, and its tokens."""
        text = "\n".join(parts)
        known = self.texts.get(text)
        if known is None:
            count = partial(_tiktoken_count, self.counter) if self.adds_up else self.counter.count_text
            if self.adds_up and all(part and not part[0].isspace() for part in parts):
                ends = [_newline_count(count, part) for part in parts]
                known = (sum(ends[:-1]) + count(parts[-1]), sum(ends))
            else:
                known = (int(count(text)), int(count(text + "\n")) if self.adds_up else 0)
            self.texts[text] = known
        return text, known[0]

    def block(self, items: Sequence[RecalledItem]) -> int:
        """What the block of ``items`` costs as a message (``block_cost``)."""
        if self.adds_up and all(item.text and not item.text[0].isspace() for item in items):
            return self.empty + sum(self.texts[item.text][1] for item in items)
        return int(self.block_cost([item.text for item in items]))


def _unsaid(lines: dict[tuple[int, int], _Line], texts: Collection[str]) -> dict[tuple[int, int], _Line]:
    """``lines`` less those that one of ``texts`` says word for word (``recall.text.said_within``)."""
    said = word_keys(texts)
    if not said:
        return lines
    return {key: line for key, line in lines.items() if not said_within(said, line.text)}


def rank_messages(
    *,
    owner: Any,
    query: str,
    k: int,
    agent_key: str | None = None,
    conversation_id: int | None = None,
    exclude_seqs: Collection[int] = (),
    using: str | None = None,
    now: datetime | None = None,
    as_of: bool = True,
) -> list[Any]:
    """The stored messages of ``owner``'s conversations that ``recall_memory`` considers for
    ``query``, best first (``MessageHit``, at most ``k``), less ``exclude_seqs`` of
    ``conversation_id``. The ranking of the memory block, also measured on its own by
    ``bench.memory_in_context``.

    ``now`` is when ``query`` is asked (an aware datetime; default ``timezone.now()``): the
    times the query names relative to it ("four weeks ago", "last Saturday": ``when.windows_in``,
    read on its day as ``shown_day`` gives it) raise the messages said then by
    ``TIME_WEIGHT`` (the said-at date: ``session_date``), and their words are not searched.
    Costs no statement: the hits carry their metadata and ``created_at``. Given, the
    messages are ranked as the memory stood then: those said after ``now`` (the date a
    transcript gave, else when they were stored) are left out, and recency is measured from
    ``now`` (``recall._search``'s ``as_of``); without it, or with ``as_of=False`` (the
    relative times alone read from ``now``: ``recall_memory``'s ``as_of``), every stored
    message counts."""
    return _ranked(
        owner=owner,
        query=query,
        k=k,
        agent_key=agent_key,
        conversation_id=conversation_id,
        exclude_seqs=exclude_seqs,
        using=using,
        now=now,
        as_of=as_of,
    )


def _ranked(
    *,
    owner: Any,
    query: str,
    k: int,
    agent_key: str | None = None,
    conversation_id: int | None = None,
    exclude_seqs: Collection[int] = (),
    using: str | None = None,
    now: datetime | None = None,
    as_of: bool = True,
    read: dict[tuple[int, int], tuple[Any, ...]] | None = None,
) -> list[Any]:
    """``rank_messages``; ``read`` gets the rows the search read by place (``recall._search``)."""
    excluded = set(exclude_seqs) if conversation_id is not None else set()
    query = bounded_query(query)  # at most MAX_QUERY_CHARS characters, what it asks first
    today = shown_day(now or timezone.now())
    windows = windows_in(query, today)
    searched = query
    if windows:
        rest = without_times(query, today)
        searched = rest if any(word not in STOP_WORDS for word in query_words(rest)) else query
    searched = searched_query(searched)
    most = MAX_HITS_WITH_EMBEDDINGS if embeddings_wanted() else MAX_HITS
    passages: dict[int, float] = {}
    search = partial(
        _search,
        owner=owner,
        agent_key=agent_key,
        k=most,
        using=using,
        read=read,
        passage_weight=PASSAGE_WEIGHT,
        as_of=now if as_of else None,
        read_chars=MAX_READ_CHARS,  # what a line reads of a message (``lines.trimmed``)
    )

    def shown(found: Iterable[Any]) -> list[Any]:
        return [h for h in found if h.role in SHOWN_ROLES and (h.conversation_id, h.seq) not in left_out]

    left_out = {(conversation_id, seq) for seq in excluded}
    hits = shown(search(searched, passages=passages))
    # a count or a list needs every instance: search again by its topic and the words the
    # first results share (the window's own messages left out: it sends them), mix the two
    # rankings, and weigh a conversation by the topic, not the question's verbs (below)
    weighed = query
    if asks_for_every(query) and (extra := expansion_words(searched, hits)):
        weighed = " ".join(topic_words(searched, hits)) or searched
        hits = shown(mixed(hits, search(f"{weighed} {' '.join(extra)}", passages=passages), most))
    if not hits:
        return []
    best = max(h.score for h in hits) or 1.0
    # a conversation's weight: its hits' scores, each next one counting half the one before
    found: dict[int, list[float]] = {}
    for hit in hits:
        found.setdefault(hit.conversation_id, []).append(hit.score / best)
    weight = {
        conv: sum(score * CONVERSATION_DECAY**i for i, score in enumerate(sorted(scores, reverse=True)))
        for conv, scores in found.items()
    }
    top = max(weight.values()) or 1.0
    named = set(query_words(query))
    said: dict[tuple[Any, ...], date | None] = {}
    # the full-text ranking weighed each candidate's passage before the hits were chosen;
    # another backend's hits are weighed by their conversation's text among them
    documents = {} if passages else conversation_scores(hits, weighed)
    top_document = max(documents.values(), default=0.0) or 1.0
    ranked = [
        replace(
            hit,
            score=hit.score
            / best
            * (1.0 + CONVERSATION_WEIGHT * weight[hit.conversation_id] / top)
            * (1.0 + DOCUMENT_WEIGHT * documents.get(hit.conversation_id, 0.0) / top_document)
            * (1.0 + SPEAKER_WEIGHT * _named(hit.metadata, named))
            * (1.0 + TIME_WEIGHT * said_in(hit, windows, said)),
        )
        for hit in hits
    ]
    ranked.sort(key=lambda h: (-h.score, -h.message_id))
    return ranked[: min(most, k)]


def _gaps(seqs: Sequence[int]) -> int:
    """The gap marks between ``seqs`` (ascending) shown as one group: one where a seq does
    not follow the one before it."""
    return sum(1 for before, after in pairwise(seqs) if after != before + 1)


def _begins_word(text: str, stem: str) -> bool:
    """Whether the rough stem ``stem`` (``rough_stem`` of a word) stands for a word of ``text``:
    a stem of five letters any word it begins, a shorter one (a whole short word) only that
    word. ``str.find`` and a look at the characters around: a pattern with a look-behind
    scans the whole text (about 60 µs for 2,000 characters)."""
    start = text.find(stem)
    while start >= 0:
        end = start + len(stem)
        if (start == 0 or not text[start - 1].isalnum()) and (
            len(stem) >= 5 or end == len(text) or not text[end].isalnum()
        ):
            return True
        start = text.find(stem, start + 1)
    return False


def _stems_in(text: str, stems: Collection[str]) -> set[str]:
    """Which of the rough ``stems`` begin a word of ``text`` (its first ``DOCUMENT_CHARS``
    characters, lower-cased; in the normal form of the indexes, ``search_text``, when a
    stem is not ASCII: an ASCII stem is compared with the text as stored, so "cafe" does
    not find "café" here, which only weakens this score). 100 hits of 8,000 characters cost
    330 ms tokenised, a few ms so."""
    text = text[:DOCUMENT_CHARS].lower()
    if not all(stem.isascii() for stem in stems):
        text = search_text(text)
    return {stem for stem in stems if _begins_word(text, stem)}


def conversation_scores(hits: Sequence[Any], query: str) -> dict[int, float]:
    """Each conversation's score as one document, the text of its hits taken together: BM25
    (``DOCUMENT_K1``; Robertson and Zaragoza 2009) over the rough stems of the query's words
    (``rough_stem``, both sides), a stem's weight from how many of the hits' conversations hold
    it, its frequency the number of the conversation's hits holding it, without length
    normalisation (a conversation's length here would be its number of hits, which is
    itself evidence of a match: normalising by it measured worse). A conversation that
    answers holds several of the query's words across its turns; a stray match elsewhere
    holds one. Reads nothing: the hits carry their text. {conversation id: score}; empty
    when the query has no word."""
    wanted = {rough_stem(word) for word in query_words(query)}
    if not wanted:
        return {}
    frequency: dict[int, dict[str, int]] = {}
    for hit in hits:
        counts = frequency.setdefault(hit.conversation_id, {})
        for stem in _stems_in(hit.content, wanted):
            counts[stem] = counts.get(stem, 0) + 1
    n = len(frequency)
    held: dict[str, int] = {}
    for counts in frequency.values():
        for stem in counts:
            held[stem] = held.get(stem, 0) + 1
    weight = {stem: math.log(1 + (n - d + 0.5) / (d + 0.5)) for stem, d in held.items()}
    return {
        conversation: sum(
            weight[stem] * count * (DOCUMENT_K1 + 1) / (count + DOCUMENT_K1)
            for stem, count in sorted(counts.items())
        )
        for conversation, counts in frequency.items()
    }


#: words of a question that say how it asks, not what it asks about ("Do you remember what I
#: mentioned ..."): left out of the searched query when other words remain
QUESTION_WORDS = frozenset({"ago", "mention", "mentioned", "remember", "tell"})


def searched_query(query: str) -> str:
    """What ``rank_messages`` searches for: ``query`` less its ``QUESTION_WORDS`` (whole
    words, any case), unless that leaves no word but stop words to search."""
    kept = [w for w in query.split() if re.sub(r"\W", "", w).lower() not in QUESTION_WORDS]
    rest = " ".join(kept)
    return rest if any(word not in STOP_WORDS for word in query_words(rest)) else query


def said_in(hit: Any, windows: Sequence[Period], days: dict[tuple[Any, ...], date | None]) -> float:
    """1.0 when the day ``hit`` was said (``session_date`` of its metadata and
    ``created_at``; the day the block shows, ``shown_day``) falls in one of ``windows``,
    else 0.0.
    ``days`` caches the dates by the metadata's transcript date (a session's messages share
    one), so a date is parsed once per session."""
    if not windows:
        return 0.0
    metadata = hit.metadata if isinstance(hit.metadata, dict) else {}
    key = (*(metadata.get(name) for name in TRANSCRIPT_DATE_KEYS), hit.created_at)
    if key not in days:
        when = session_date(metadata, hit.created_at)
        days[key] = None if when is None else shown_day(when)
    day = days[key]
    return 1.0 if day is not None and any(window.holds(day) for window in windows) else 0.0


def _named(metadata: Any, words: set[str]) -> float:
    """1.0 when the speaker a transcript gave a message (``metadata["speaker"]``) is named
    among the query's ``words`` (one of the words of the name), else 0.0."""
    name = metadata.get("speaker") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        return 0.0
    return 1.0 if set(query_words(name)) & words else 0.0


def render(bodies: Sequence[str]) -> str:
    """The block's text around the items' texts."""
    return "\n".join([BLOCK_OPEN, BLOCK_HEADER, *bodies, BLOCK_CLOSE])


def _head(line: _Line, *, titled: bool = True) -> str:
    return f"[{line.date} · {line.title}]" if titled else f"[{line.date}]"


def _line_text(line: _Line) -> str:
    return f"{line.speaker}: {line.text}"


def _fact_text(fact: Any) -> str:
    """A fact's line: its date, and its content up to ``MAX_READ_CHARS`` characters, ending
    in " …" when cut there (as a cut message does: the model is told the fact goes on)."""
    content = neutralised(fact.content[:MAX_READ_CHARS])
    if len(fact.content) > MAX_READ_CHARS:
        content = content.rstrip() + " …"
    return f"[{date_text(fact_said_at(fact))} · saved fact] {content}"


def _items(
    lines: dict[tuple[int, int], _Line],
    chosen: set[tuple[int, int]],
    chosen_facts: list[Any],
    counts: _Counts,
) -> list[RecalledItem]:
    """The chosen messages grouped by conversation and date (one item each: a provenance line,
    then the messages in order, "…" where messages between them are left out), and the chosen
    facts, oldest first (then by id). ``counts`` counts them (and keeps the counts across calls)."""
    items: list[RecalledItem] = []
    heads: dict[int, tuple[_Line, list[str]]] = {}
    groups: dict[tuple[int, str], list[_Line]] = {}
    for key in sorted(chosen):
        line = lines[key]
        groups.setdefault((line.conversation_id, line.date), []).append(line)
    for run in groups.values():
        texts = [_head(run[0])]
        for index, line in enumerate(run):
            if index and line.seq != run[index - 1].seq + 1:
                texts.append(GAP_MARK)
            texts.append(_line_text(line))
        text, tokens = counts.item(texts)
        items.append(
            RecalledItem(
                kind="message",
                text=text,
                tokens=tokens,
                score=max(line.score for line in run),
                conversation_id=run[0].conversation_id,
                seqs=tuple(line.seq for line in run),
                fact_id=None,
                said_at=run[0].said_at,
            )
        )
        heads[len(items) - 1] = (run[0], texts)
    for fact, score in chosen_facts:
        text, tokens = counts.item([_fact_text(fact)])
        items.append(
            RecalledItem(
                kind="fact",
                text=text,
                tokens=tokens,
                score=score,
                conversation_id=None,
                seqs=(),
                fact_id=fact.pk,
                said_at=fact_said_at(fact),
                source_message_id=fact.source_message_id,
                words=words_key(fact.content),
            )
        )
    epoch = datetime.min.replace(tzinfo=UTC)
    # facts said at one moment by id, not in the order of their scores: the block's text
    # depends only on what it holds (a provider's prompt cache matches it byte for byte)
    order = sorted(
        range(len(items)),
        key=lambda i: (
            items[i].said_at or epoch,
            items[i].conversation_id or 0,
            items[i].seqs,
            items[i].fact_id or 0,
        ),
    )
    # a group of messages names its conversation unless the group of messages before it in
    # the block is of the same conversation: then it gives the date only
    previous: int | None = None
    ordered = []
    for index in order:
        item = items[index]
        if index in heads:
            head, texts = heads[index]
            if head.conversation_id == previous:
                text, tokens = counts.item([_head(head, titled=False), *texts[1:]])
                item = replace(item, text=text, tokens=tokens)
            previous = head.conversation_id
        ordered.append(item)
    return ordered
