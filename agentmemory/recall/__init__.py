"""Recall: search over a user's facts and past conversations, with one backend protocol.

``search_messages(query, owner=..., k=10)`` finds stored messages of the owner's
conversations, also those a summary has condensed (compaction never deletes messages).
Ranking is the backend's relevance (full-text by default), then recency and, for facts,
importance (``AGENTMEMORY["RECALL_RECENCY_WEIGHT"]``, ``"RECALL_RECENCY_HALF_LIFE_DAYS"``,
``"RECALL_IMPORTANCE_WEIGHT"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from operator import itemgetter
from typing import Any
from uuid import UUID

from django.db import router, transaction
from django.db.models import Q
from django.db.models.functions import Substr
from django.utils import timezone

from agentmemory.recall import fulltext
from agentmemory.recall.backends import (
    EmbeddingBackend,
    FullTextBackend,
    FullTextRanking,
    HybridBackend,
    RecallBackend,
    get_backend,
    get_embedder,
    ranking_for,
)
from agentmemory.recall.compiled import Scope
from agentmemory.recall.dates import Period, periods_in, without_dates
from agentmemory.recall.said import TRANSCRIPT_DATE_KEYS, said_by, session_date
from agentmemory.recall.scope import MemoryScope, MemoryScopeError, owner_id_of
from agentmemory.recall.text import bounded_query, query_words
from agentmemory.validation import MAX_ID

logger = logging.getLogger("agentmemory.recall")

__all__ = [
    "EmbeddingBackend",
    "FullTextBackend",
    "HybridBackend",
    "MemoryScope",
    "MemoryScopeError",
    "MessageHit",
    "RecallBackend",
    "boost",
    "get_backend",
    "get_embedder",
    "index_new_messages",
    "search_messages",
]


def __getattr__(name: str) -> Any:
    """``PgVectorBackend`` lives in ``agentmemory.contrib.pgvector.backend``; importing it
    from here still works, loaded on first use (the core never imports the integration
    when it loads)."""
    if name == "PgVectorBackend":
        from django.utils.module_loading import import_string

        from agentmemory.recall.backends import PGVECTOR_BACKEND

        return import_string(PGVECTOR_BACKEND)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: candidates read from the backend per result wanted, before recency and importance re-rank
CANDIDATES_PER_RESULT = 5
MIN_CANDIDATES = 50
MAX_K = 100
SEARCHED_ROLES = ("human", "ai", "tool")


logger = logging.getLogger("agentmemory.recall")


@dataclass(frozen=True)
class MessageHit:
    """One stored message found by ``search_messages``.

    ``score`` orders the hits of one call (higher is better); it is not comparable across
    calls or backends (``search_messages`` says how it is made). ``relevance`` is the
    message's own match, scaled to the best candidate's (0..1): 0 for a message found only
    through the messages next to it.
    """

    message_id: int
    conversation_id: int
    conversation_uuid: UUID
    seq: int
    role: str
    content: str
    metadata: dict[str, Any]
    created_at: datetime
    score: float
    relevance: float = 0.0


def boost(
    relevance: float, best: float, created_at: datetime, importance: float | None, now: datetime
) -> float:
    """Final score: relevance scaled to the best candidate's (0..1), times
    ``1 + importance_weight * importance`` (facts) and ``1 + recency_weight * 0.5 **
    (age_days / half_life_days)`` (an item loses half its recency bonus every half-life)."""
    from agentmemory.conf import app_settings

    conf = app_settings()
    score = relevance / best if best > 0 else 0.0
    if importance is not None:
        score *= 1.0 + conf.RECALL_IMPORTANCE_WEIGHT * importance
    age_days = max(0.0, (now - created_at).total_seconds() / 86_400)
    score *= 1.0 + conf.RECALL_RECENCY_WEIGHT * 0.5 ** (age_days / conf.RECALL_RECENCY_HALF_LIFE_DAYS)
    return score


def _check_query(query: Any, k: Any) -> None:
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, not {type(query).__name__}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ValueError(f"k must be an integer from 1 to {MAX_K}, not {k!r}")


def search_messages(
    query: str,
    *,
    owner: Any,
    conversation: Any = None,
    agent_key: str | None = None,
    k: int = 10,
    backend: RecallBackend | None = None,
    using: str | None = None,
) -> list[MessageHit]:
    """Ranked stored messages (human, AI and tool; not system prompts) of the conversations
    of ``owner`` that match ``query``.

    How a hit's ``score`` comes about:

    1. The backend ranks the scope's messages and returns its best ``max(5 * k, 50)``
       candidates; each relevance is scaled to the best candidate's (0..1), ``r``.
    2. The messages within ``len(RECALL_NEIGHBOUR_WEIGHTS)`` places (``seq``) of a candidate
       in its conversation, inside the same scope, are read and scored by the same backend
       on the same scale (0 where nothing matches).
    3. Each of these messages scores ``r + sum(w[d - 1] * (r[seq - d] + r[seq + d]))`` over
       the distances ``d``: with the default ``(0.3, 0.15)``, 0.3 of each adjacent message's
       ``r`` and 0.15 of the next ones'. A message unread in step 2 counts 0. An answer whose
       own words do not match the query is found through the question before it.
    4. A query that names a date ("on 3 June, 2023", "in March 2023", "in June"; see
       ``agentmemory.recall.dates``) is ranked without the date's words, and the messages
       written in that period (``created_at``) score ``1 + RECALL_DATE_WEIGHT`` times more.
    5. The recency boost (``boost``) multiplies that; hits are sorted by score, then newest
       message first. ``MessageHit.relevance`` keeps ``r`` (0 for a message found only
       through its neighbours).

    Args:
        query: natural-language text; its words are matched (stemmed, stop words ignored).
        owner: a saved user or a user id (required; conversations without an owner are never
            searched).
        conversation: limit to one conversation (instance, id, or public uuid as a ``UUID``
            or its string); one of another user finds nothing.
        agent_key: limit to conversations of this agent key (exact match; at most 100
            characters, no NUL).
        k: hits wanted, 1 to 100.
        backend: a ``RecallBackend``; default ``AGENTMEMORY["RECALL_BACKEND"]``.

    Returns:
        At most ``k`` ``MessageHit``, best first; an empty list when nothing matches.

    Cost: the backend's queries, one query for the candidates' places (none with full-text
    on PostgreSQL, whose ranking statement gives them), one for their neighbours, the
    backend's scoring of the neighbours (none for full-text and exact cosine, which scored
    every match while ranking; one for pgvector), and one query reading the hits: a number
    independent of the history's length.

    Raises:
        MemoryScopeError: no owner. ValueError / TypeError: a bad ``k``, ``query``,
            ``agent_key`` or ``conversation``.
    """
    return _search(
        query, owner=owner, conversation=conversation, agent_key=agent_key, k=k, backend=backend, using=using
    )


def _search(
    query: str,
    *,
    owner: Any,
    conversation: Any = None,
    agent_key: str | None = None,
    k: int = 10,
    backend: RecallBackend | None = None,
    using: str | None = None,
    read: dict[tuple[int, int], tuple[Any, ...]] | None = None,
    passage_weight: float = 0.0,
    passages: dict[int, float] | None = None,
    as_of: datetime | None = None,
    read_chars: int | None = None,
) -> list[MessageHit]:
    """``search_messages``; ``as_of`` (an aware datetime): as the memory stood then, the
    messages said by then only (``recall.said.said_by`` of ``session_date``: the date a
    transcript gave, else when it was stored), recency measured from then; the statements
    read the messages stored by then or dated by a transcript, and the hits are those said
    by then. ``read_chars``: the hits' contents are read as far as that many characters
    (the memory block shows a bounded part of each: whole, a turn whose words matched 40
    stored tool results of 2 MB read 80 MB). ``passage_weight``: with full text, each
    candidate's score raised by up to that share for its passage's score
    (``FullTextRanking.passage_weight``) before the candidates and hits are chosen, those
    scores put in ``passages`` ({pk: score}; left empty where the ranking did not compute
    them); ``read``, when given, is filled with the rows the hits were read from where the
    search read them by place (PostgreSQL, full-text): ``{(conversation id, seq): (pk,
    conversation id, seq, role, content, metadata, created_at, conversation title,
    conversation uuid)}``, every searched message with content at those places."""
    from agentmemory.conf import app_settings
    from agentmemory.models import Conversation, Message

    owner_id = owner_id_of(owner)
    _check_query(query, k)
    query = bounded_query(query)  # the first MAX_QUERY_CHARS characters are read
    if agent_key is not None:
        # the rule of a memory scope's agent key: at most 100 characters, no NUL (which
        # PostgreSQL refuses in text); MemoryScopeError is a ValueError
        agent_key = MemoryScope.of(owner_id, agent_key).agent_key
    messages = searched_messages(using or None, owner_id, agent_key)
    # the scope's SQL, compiled once per database (``compiled.Scope``) while no conversation
    # is named
    scope: Scope | None = Scope("recall.searched_ids", _searched_ids, (owner_id, agent_key), messages.db)
    if as_of is not None:
        # a transcript's date is read in Python (``_hits``): such rows are read whatever
        # their storage time
        messages = messages.filter(
            Q(created_at__lte=as_of) | Q(metadata__has_any_keys=list(TRANSCRIPT_DATE_KEYS))
        )
        scope = None
    if conversation is not None:
        if isinstance(conversation, str):
            try:
                conversation = UUID(conversation)
            except ValueError:
                raise ValueError(f"conversation {conversation!r} is not a uuid") from None
        scope = None
        if isinstance(conversation, Conversation):
            messages = messages.filter(conversation_id=conversation.pk)
        elif isinstance(conversation, UUID):
            messages = messages.filter(conversation__uuid=conversation)
        elif isinstance(conversation, int) and not isinstance(conversation, bool):
            if not 0 < conversation <= MAX_ID:  # past 64 bits SQLite's driver overflowed
                raise ValueError(f"conversation id must be from 1 to {MAX_ID}, not {conversation}")
            messages = messages.filter(conversation_id=conversation)
        else:
            raise TypeError("conversation must be a Conversation, its id or its uuid")
    backend = backend or get_backend()
    from agentmemory.recording import usage_scope

    started = time.perf_counter()
    conf = app_settings()
    weights = tuple(conf.RECALL_NEIGHBOUR_WEIGHTS)
    periods = periods_in(query) if conf.RECALL_DATE_WEIGHT else []
    ranked_query = query
    if periods and query_words(without_dates(query)):
        ranked_query = without_dates(query)
    with usage_scope(owner_id=owner_id, agent_key=agent_key or ""):
        ranking = ranking_for(backend, messages, ranked_query)
        if type(ranking) is FullTextRanking:
            ranking.passage_weight = passage_weight
            ranking.scope = scope
        ranked = ranking.top(max(k * CANDIDATES_PER_RESULT, MIN_CANDIDATES))
        if passages is not None and type(ranking) is FullTextRanking:
            passages.update(ranking.passages)
        best = max((score for _pk, score in ranked), default=0.0)
        if best <= 0:
            report_recall("messages", owner_id, backend, 0, started)
            return []
        relevance = {pk: score / best for pk, score in ranked}
        # within one conversation, every statement names it (one partition when partitioned)
        within = fulltext.one_conversation(messages)
        known = getattr(ranking, "places", None) or {}
        if weights and _placed(ranking, messages.db):
            most = (1.0 + conf.RECALL_RECENCY_WEIGHT) * (1.0 + (conf.RECALL_DATE_WEIGHT if periods else 0.0))
            rows_read, scored = _pg_spread_rows(
                messages.db, ranking, relevance, best, weights, k, most, within, read_chars
            )
            hits = _hits(rows_read, scored, relevance, conf, periods, k, as_of)
            if read is not None:
                read.update({(row[1], row[2]): row for row in rows_read})
            report_recall("messages", owner_id, backend, len(hits), started)
            return hits
        if all(pk in known for pk in relevance):  # the ranking statement gave them
            places = [(pk, *known[pk]) for pk in sorted(relevance)]
        else:
            places = places_of(messages.db, list(relevance), conversation_id=within)
        if weights:
            around = neighbours(messages, places, len(weights), exclude=relevance)
            places += around
            found = ranking.scores([place[0] for place in around])
            relevance.update({pk: score / best for pk, score in found.items()})
    spread_scores = spread(places, relevance, weights)
    if not spread_scores:
        report_recall("messages", owner_id, backend, 0, started)
        return []
    # The boosts multiply by 1 to (1 + RECALL_RECENCY_WEIGHT) * (1 + RECALL_DATE_WEIGHT), so
    # only messages within that factor of the k-th best spread score can be among the hits.
    most = (1.0 + conf.RECALL_RECENCY_WEIGHT) * (1.0 + (conf.RECALL_DATE_WEIGHT if periods else 0.0))
    cutoff = sorted(spread_scores.values(), reverse=True)[:k][-1] / most
    content: Any = "content" if read_chars is None else Substr("content", 1, read_chars)
    rows = (
        Message.objects.using(messages.db)
        .filter(pk__in=[pk for pk, score in spread_scores.items() if score >= cutoff])
        .filter(**({} if within is None else {"conversation_id": within}))
        .order_by()
        .values_list(
            "pk", "conversation_id", "seq", "role", content, "metadata", "created_at", "conversation__uuid"
        )
    )
    hits = _hits(rows, spread_scores, relevance, conf, periods, k, as_of)
    report_recall("messages", owner_id, backend, len(hits), started)
    return hits


def searched_messages(using: str | None, owner_id: int, agent_key: str | None = None) -> Any:
    """The messages ``search_messages`` searches: ``owner_id``'s of ``SEARCHED_ROLES``, of
    conversations of ``agent_key`` (exact) when given, on the database ``using`` (None: the
    router's choice). A new queryset each call, cloned (``all()``) from one built once per
    scope (``_searched_scope``): building its three lookups cost about 0.2 ms a search."""
    return _searched_scope(using or None, owner_id, agent_key).all()


#: most scopes whose queryset ``searched_messages`` keeps built
SCOPES_KEPT = 256


@lru_cache(maxsize=SCOPES_KEPT)
def _searched_scope(using: str | None, owner_id: int, agent_key: str | None) -> Any:
    """The queryset ``searched_messages`` clones: never evaluated itself (a clone is), so it
    holds no rows, only the scope's lookups (values, not rows: nothing in it goes stale)."""
    from agentmemory.models import Message

    messages = Message.objects.filter(conversation__owner_id=owner_id, role__in=SEARCHED_ROLES)
    if using:
        messages = messages.using(using)
    if agent_key is not None:
        messages = messages.filter(conversation__agent_key=agent_key)
    return messages


def _searched_ids(using: str, owner_id: int, agent_key: str | None) -> Any:
    """The ids of ``searched_messages``, as ``fulltext.fenced`` compiles a scope."""
    return searched_messages(using, owner_id, agent_key).order_by().values("pk")


def _hits(
    rows: Iterable[Sequence[Any]],
    spread_scores: dict[int, float],
    relevance: dict[int, float],
    conf: Any,
    periods: Sequence[Period],
    k: int,
    as_of: datetime | None = None,
) -> list[MessageHit]:
    """The ``k`` best of ``rows`` (``(pk, conversation id, seq, role, content, metadata,
    created_at, ..., conversation uuid)``) as hits: each spread score boosted as ``boost``
    does (recency; then the date named), sorted by score, newest message first. With
    ``as_of``, only the rows said by then (``session_date``), recency measured from then."""
    now = timezone.now() if as_of is None else as_of
    if as_of is not None:
        rows = [row for row in rows if said_by(session_date(row[5], row[6]), as_of)]
    date_boost = 1.0 + conf.RECALL_DATE_WEIGHT
    # scored and sorted first: only the ``k`` kept become hits
    scored = [
        (
            -(
                _boosted(spread_scores[row[0]], row[6], now, conf)
                * (date_boost if written_in(row[6], periods) else 1.0)
            ),
            -row[0],
            row,
        )
        for row in rows
        if row[0] in spread_scores
    ]
    scored.sort(key=itemgetter(0, 1))  # best first, then the newest; ids are unique
    return [
        MessageHit(
            message_id=pk,
            conversation_id=conversation_id,
            conversation_uuid=row[-1],
            seq=seq,
            role=role,
            content=content or "",
            metadata=metadata or {},
            created_at=created_at,
            score=-score,
            relevance=relevance.get(pk, 0.0),
        )
        for score, _pk, row in scored[:k]
        for pk, conversation_id, seq, role, content, metadata, created_at in (row[:7],)
    ]


def _boosted(score: float, created_at: datetime, now: datetime, conf: Any) -> float:
    """``boost(score, 1.0, created_at, None, now)`` with the settings ``conf`` read once."""
    age_days = max(0.0, (now - created_at).total_seconds() / 86_400)
    return score * (1.0 + conf.RECALL_RECENCY_WEIGHT * 0.5 ** (age_days / conf.RECALL_RECENCY_HALF_LIFE_DAYS))


def _placed(ranking: Any, using: str) -> bool:
    """Whether the neighbours of ``ranking``'s candidates can be scored without reading them
    first: full-text on PostgreSQL, whose ranking statement scored every match it found
    (``FullTextRanking.known``) and gave the place of each (``places``); a message at
    another place matches nothing, so it scores 0 itself."""
    from django.db import connections

    known = getattr(ranking, "known", None)
    if type(ranking) is not FullTextRanking or known is None or connections[using].vendor != "postgresql":
        return False
    return all(pk in ranking.places for pk in known)


def _pg_spread_rows(
    using: str,
    ranking: Any,
    relevance: dict[int, float],
    best: float,
    weights: Sequence[float],
    k: int,
    most: float,
    within: int | None,
    read_chars: int | None = None,
) -> tuple[list[tuple[Any, ...]], dict[int, float]]:
    """PostgreSQL, full-text (``_placed``): the rows ``search_messages`` reads for its hits
    and their spread scores ({pk: score}), found as its neighbour read and ``spread`` find
    them, without reading the neighbours first; ``relevance`` ({pk: relevance} of the
    candidates) gains the ranked rows next to them, as the neighbour read adds them.

    The places within ``len(weights)`` of a candidate are either rows the ranking statement
    gave (they exist, with their relevance) or places whose relevance is 0 whatever they
    hold, whose spread score comes from the places around them alone: every place is
    scored before anything is read. Whether a place of the second kind holds a searched
    message with content is learnt when it is read, and only the places that can reach the
    cut-off are read: the ``k``-th best score of the places known to exist bounds the
    ``k``-th best of all from below, so every place at or above ``1 / most`` of it is read
    in one statement (``_pg_places``), which settles the ``k``-th best and the cut-off."""
    places: dict[int, tuple[int, int]] = ranking.places
    scores: dict[int, float] = ranking.known
    span = len(weights)
    steps = list(enumerate(weights, start=1))
    # Worked out per conversation, seqs as plain ints (a tuple per lookup cost a third of
    # this function's time): the ranked rows by seq, and the candidates' seqs
    ranked_at: dict[int, dict[int, int]] = {}
    for pk, (conversation_id, seq) in places.items():
        here = ranked_at.get(conversation_id)
        if here is None:
            here = ranked_at[conversation_id] = {}
        here[seq] = pk
    candidates: dict[int, list[int]] = {}
    for pk in relevance:
        conversation_id, seq = places[pk]
        candidates.setdefault(conversation_id, []).append(seq)
    known_scores: dict[tuple[int, int], float] = {}
    maybe: dict[tuple[int, int], float] = {}
    found_relevance: dict[int, float] = {}
    reach = range(1, 2 * span + 1)
    for conversation_id, all_seqs in candidates.items():
        ranked_here = ranked_at[conversation_id]
        # A candidate with no other ranked row within twice the span (most of them) scores
        # its relevance, and the places around it their weight of it (``0.0 + weight * r``
        # is ``weight * r``): the sums below, without them. Nothing else reaches its places.
        seqs = []
        for seq in all_seqs:
            for distance in reach:
                if seq - distance in ranked_here or seq + distance in ranked_here:
                    seqs.append(seq)
                    break
            else:
                own = relevance[ranked_here[seq]]
                if own > 0:
                    known_scores[(conversation_id, seq)] = own
                for distance, weight in steps:
                    share = weight * own
                    if share > 0:
                        maybe[(conversation_id, seq - distance)] = share
                        if seq <= MAX_ID - distance:  # no place past the column's largest value
                            maybe[(conversation_id, seq + distance)] = share
        if not seqs:
            continue
        # each place's relevance (candidates, and the ranked rows next to one), as ``spread``'s
        at = {seq: relevance[ranked_here[seq]] for seq in seqs}
        near: set[int] = set()
        for seq in seqs:
            near.update(seq_range(seq, span))
        near.difference_update(at)
        exact = list(at)
        unknown = []
        for seq in near:
            other = ranked_here.get(seq)
            if other is None:
                unknown.append(seq)
                continue
            exact.append(seq)
            score = scores.get(other)
            at[seq] = 0.0
            if score is not None:
                at[seq] = found_relevance[other] = score / best
        get = at.get
        # each place's relevance plus the weighted relevance of the places around it, added
        # in the order ``spread`` adds them (the same sums to the last bit)
        for into, where in ((known_scores, exact), (maybe, unknown)):
            for seq in where:
                score = get(seq, 0.0)
                for distance, weight in steps:
                    before = get(seq - distance)
                    if before:
                        score += weight * before
                    after = get(seq + distance)
                    if after:
                        score += weight * after
                if score > 0:
                    into[(conversation_id, seq)] = score
    relevance.update(found_relevance)
    ranked = sorted(known_scores.values(), reverse=True)
    floor = ranked[k - 1] / most if len(ranked) >= k else 0.0
    wanted = [place for place, score in known_scores.items() if score >= floor]
    wanted += [place for place, score in maybe.items() if score >= floor]
    rows = _pg_places(using, wanted, within, read_chars)
    found = {(row[1], row[2]) for row in rows}
    spread_scores = dict(known_scores)
    spread_scores.update({place: score for place, score in maybe.items() if place in found})
    if not spread_scores:
        return [], {}
    cutoff = sorted(spread_scores.values(), reverse=True)[:k][-1] / most
    kept = [row for row in rows if spread_scores.get((row[1], row[2]), -1.0) >= cutoff]
    return kept, {row[0]: spread_scores[(row[1], row[2])] for row in kept}


def _pg_places(
    using: str, places: Sequence[tuple[int, int]], within: int | None, read_chars: int | None = None
) -> list[tuple[Any, ...]]:
    """PostgreSQL: the searched messages with content at ``places`` ((conversation id, seq)),
    each found by the unique index of ``(conversation, seq)`` (a ``LATERAL`` lookup per
    place), with their conversations: ``(pk, conversation id, seq, role, content, metadata,
    created_at, conversation title, conversation uuid)``, the metadata as the model field
    gives it, the content its first ``read_chars`` characters when given. ``within``: the
    one conversation of every place, named in the statement."""
    from django.db import connections

    from agentmemory.models import Conversation, Message

    if not places:
        return []
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = Message._meta
    column = {field.name: quote(str(field.column)) for field in meta.concrete_fields}
    of_conversation = {field.name: quote(str(field.column)) for field in Conversation._meta.concrete_fields}
    same = "" if within is None else f" AND {column['conversation']} = %s"
    created_at, instant = pg_instant(connection, "created_at")
    content = "m.content" if read_chars is None else f"SUBSTRING(m.content, 1, {int(read_chars)})"
    sql = (
        f"SELECT m.id, m.conversation_id, m.seq, m.role, {content}, m.metadata, {created_at}, "
        f"c.{of_conversation['title']}, c.{of_conversation['uuid']} "
        f"FROM unnest(%s::bigint[], %s::bigint[]) AS p(c, s) CROSS JOIN LATERAL ("
        f"SELECT {column['id']} AS id, {column['conversation']} AS conversation_id, {column['seq']} AS seq, "
        f"{column['role']} AS role, {column['content']} AS content, {column['metadata']} AS metadata, "
        f"{column['created_at']} AS created_at FROM {quote(meta.db_table)} "
        f"WHERE {column['conversation']} = p.c AND {column['seq']} = p.s{same} OFFSET 0) AS m "
        f"JOIN {quote(Conversation._meta.db_table)} AS c ON c.{of_conversation['id']} = m.conversation_id "
        f"WHERE m.role = ANY(%s) AND m.content > ''"
    )
    params: list[Any] = [_pg_array(place[0] for place in places), _pg_array(place[1] for place in places)]
    if within is not None:
        params.append(int(within))
    params.append(list(SEARCHED_ROLES))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return pg_message_rows(connection, cursor.fetchall(), instant)


#: the instant ``pg_instant`` counts from
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def pg_instant(connection: Any, column: str) -> tuple[str, Any]:
    """PostgreSQL: the SQL reading the ``timestamptz`` column ``column`` (of the alias ``m``)
    and the function making each value read the datetime a queryset gives for it. Where the
    connection reads times in UTC (Django's default), the column is read as microseconds
    since 1970 (exact: ``EXTRACT`` gives a numeric since PostgreSQL 14) and made a datetime
    in UTC here; the loader Django registers parses the text in Python, 5-6 µs a value,
    about 3 ms for the rows of one memory block. Otherwise the column as it is, unchanged."""
    if connection.timezone is not UTC:
        return f"m.{column}", None
    return f"(EXTRACT(EPOCH FROM m.{column}) * 1000000)::bigint", _from_micros


def _from_micros(value: int | None) -> datetime | None:
    return None if value is None else _EPOCH + timedelta(microseconds=value)


def pg_message_rows(connection: Any, rows: Sequence[tuple[Any, ...]], instant: Any) -> list[tuple[Any, ...]]:
    """Rows ``(pk, conversation id, seq, role, content, metadata, created_at, ...)`` read by
    raw SQL, their metadata and ``created_at`` made what a queryset gives (the metadata
    field's converter, ``pg_instant``'s function)."""
    from agentmemory.models import Message

    convert = getattr(Message._meta.get_field("metadata"), "from_db_value", None)
    # most messages have no metadata: their "{}" needs no parsing
    return [
        (
            *row[:5],
            row[5] if convert is None else {} if row[5] == "{}" else convert(row[5], None, connection),
            row[6] if instant is None else instant(row[6]),
            *row[7:],
        )
        for row in rows
    ]


def written_in(created_at: datetime, periods: Sequence[Period]) -> bool:
    """Whether ``created_at`` (its date in the current time zone) falls in one of ``periods``."""
    if not periods:
        return False
    day = (timezone.localtime(created_at) if timezone.is_aware(created_at) else created_at).date()
    return any(period.holds(day) for period in periods)


def places_of(
    using: str, ids: Sequence[int], *, conversation_id: int | None = None
) -> list[tuple[int, int, int]]:
    """``(pk, conversation_id, seq)`` of the messages ``ids``: one query by primary key (with
    the scope's filters SQLite walks the whole conversation instead); ``conversation_id``:
    all of them are of that conversation, which the statement names (partition pruning)."""
    from django.db import connections

    from agentmemory.models import Message

    if not ids:
        return []
    connection = connections[using]
    quote = connection.ops.quote_name
    columns = {field.name: str(field.column) for field in Message._meta.concrete_fields}
    pk, conversation, seq = (quote(columns[name]) for name in ("id", "conversation", "seq"))
    sql = (
        f"SELECT {pk}, {conversation}, {seq} FROM {quote(Message._meta.db_table)} "
        f"WHERE {pk} IN ({', '.join(['%s'] * len(ids))})"
    )
    params = [int(pk) for pk in ids]
    if conversation_id is not None:
        sql += f" AND {conversation} = %s"
        params.append(int(conversation_id))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(int(pk), int(conversation_id), int(seq)) for pk, conversation_id, seq in cursor.fetchall()]


def seq_range(seq: int, span: int) -> range:
    """The seqs at most ``span`` places from ``seq`` that a message can have: 0 to ``MAX_ID``
    (2**63 - 1, the largest value of the column). Past it, SQLite cannot take the number as a
    parameter (OverflowError) and PostgreSQL refuses it as a ``bigint`` (DataError): a message
    stored at the largest seq made every search that found it fail with a 500."""
    return range(max(seq - span, 0), min(seq, MAX_ID - span) + span + 1)


def neighbours(
    messages: Any, places: Sequence[tuple[Any, ...]], span: int, *, exclude: Any = ()
) -> list[tuple[Any, ...]]:
    """``(pk, conversation_id, seq)`` of the rows of the scoped queryset ``messages``
    at most ``span`` places (``seq``) from one of ``places`` in the same conversation, less
    ``exclude`` (pks) and rows without content (an AI message that only calls tools, blanked
    content). One query: per conversation, the exact ``seq`` values wanted, which the unique
    index on ``(conversation, seq)`` finds one by one.

    ``places`` are rows of ``messages`` (``search_messages``'s scope: conditions on the
    conversation, and the searched roles): on PostgreSQL their neighbours are read by place
    (``_pg_near``) and the scope's conversation conditions, which the places' conversations
    meet, are not tested again."""
    from django.db import connections
    from django.db.models import BooleanField
    from django.db.models.expressions import RawSQL

    if not places or span <= 0:
        return []
    wanted: dict[int, set[int]] = {}
    for _pk, conversation_id, seq, *_rest in places:
        seqs = wanted.setdefault(conversation_id, set())
        seqs.update(seq_range(seq, span))

    connection = connections[messages.db]
    quote = connection.ops.quote_name
    meta = messages.model._meta
    skip = set(exclude)
    scope = messages.filter(content__gt="")
    if connection.vendor == "postgresql":
        rows = _pg_near(connection, wanted, fulltext.one_conversation(messages))
        return [row for row in rows if row[0] not in skip]
    table = quote(meta.db_table)
    near, params = _near(
        wanted,
        f"{table}.{quote(meta.get_field('conversation').column)}",
        f"{table}.{quote(meta.get_field('seq').column)}",
    )
    condition = RawSQL(near, params, output_field=BooleanField())
    rows = scope.filter(condition).order_by().values_list("pk", "conversation_id", "seq")
    return [row for row in rows if row[0] not in skip]


def _pg_near(
    connection: Any, wanted: dict[int, set[int]], within: int | None = None
) -> list[tuple[int, int, int]]:
    """PostgreSQL: ``(pk, conversation_id, seq)`` of the searched messages with content at the
    places ``wanted`` ({conversation id: seqs}), each run of consecutive places of a
    conversation read by one range scan of the unique index of ``(conversation, seq)`` (a
    ``LATERAL`` lookup per run, so the planner never hashes the whole table to join a few
    thousand places; one lookup per place cost three times as much). ``within``: the one
    conversation of every place, named in the statement (one partition when partitioned)."""
    from agentmemory.models import Message

    quote = connection.ops.quote_name
    meta = Message._meta
    conversation = quote(meta.get_field("conversation").column)
    seq = quote(meta.get_field("seq").column)
    runs: list[tuple[int, int, int]] = []  # (conversation, first seq, last seq)
    for c, seqs in wanted.items():
        for q in sorted(seqs):
            if runs and runs[-1][0] == c and runs[-1][2] == q - 1:
                runs[-1] = (c, runs[-1][1], q)
            else:
                runs.append((c, q, q))
    sql = (
        f"SELECT m.id, m.conversation_id, m.seq FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) "
        f"AS p(c, lo, hi) CROSS JOIN LATERAL (SELECT {quote('id')} AS id, {conversation} AS conversation_id, "
        f"{seq} AS seq, {quote('role')} AS role, {quote('content')} AS content FROM {quote(meta.db_table)} "
        f"WHERE {conversation} = p.c AND {seq} BETWEEN p.lo AND p.hi"
        f"{'' if within is None else f' AND {conversation} = %s'} "
        f"OFFSET 0) AS m WHERE m.role = ANY(%s) AND m.content > ''"
    )
    # the arrays as literals: psycopg's adaptation of a list cost ten times as much
    params: list[Any] = [_pg_array(r[i] for r in runs) for i in range(3)]
    if within is not None:
        params.append(int(within))
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, list(SEARCHED_ROLES)])
        rows: list[tuple[int, int, int]] = cursor.fetchall()  # bigint columns: ints already
        return rows


def _pg_array(values: Iterable[int]) -> str:
    """A PostgreSQL array literal of integers (``'{1,2,3}'``, cast in the statement)."""
    return "{" + ",".join(str(int(value)) for value in values) + "}"


def _near(wanted: dict[int, set[int]], conversation_column: str, seq_column: str) -> tuple[str, list[int]]:
    """SQL and parameters of "a row at one of the places ``wanted`` (conversation id: seqs)".
    Written out rather than as ``Q(seq__in=...)``: the ORM's per-value work on a few hundred
    values cost more than the query itself."""
    terms, params = [], []
    for conversation_id, seqs in wanted.items():
        terms.append(f"({conversation_column} = %s AND {seq_column} IN ({', '.join(['%s'] * len(seqs))}))")
        params += [int(conversation_id), *sorted(int(seq) for seq in seqs)]
    return " OR ".join(terms), params


def spread(
    places: Sequence[tuple[Any, ...]], relevance: dict[int, float], weights: Sequence[float]
) -> dict[int, float]:
    """Each place's (``(pk, conversation_id, seq, ...)``) relevance plus ``weights[d - 1]``
    times the relevance of the places ``d`` before and after it in its conversation (a place
    without relevance counts 0); places that end with 0 are left out."""
    # Each place's relevance by its place, looked up once: the sums below add the same terms
    # in the same order as reading each neighbour's key and then its relevance did (a term
    # of 0 changes no sum), in a third of the time over about 2,500 places.
    at: dict[tuple[int, int], float] = {}
    for place in places:
        at[(place[1], place[2])] = relevance.get(place[0], 0.0)
    steps = [(distance, weight) for distance, weight in enumerate(weights, start=1)]
    scored: dict[int, float] = {}
    get = at.get
    for pk, conversation_id, seq, *_rest in places:
        score = relevance.get(pk, 0.0)
        for distance, weight in steps:
            before = get((conversation_id, seq - distance))
            if before:
                score += weight * before
            after = get((conversation_id, seq + distance))
            if after:
                score += weight * after
        if score > 0:
            scored[pk] = score
    return scored


def report_recall(kind: str, owner_id: int, backend: Any, hits: int, started: float) -> None:
    """The structured log record (DEBUG, ``extra={"recall": {...}}``) and the
    ``recall_searched`` signal of one recall query that started at ``started``
    (``time.perf_counter()``)."""
    from agentmemory import signals

    fields = {
        "kind": kind,
        "owner_id": owner_id,
        "backend": str(getattr(backend, "name", type(backend).__name__)),
        "hits": hits,
        "duration_s": round(time.perf_counter() - started, 6),
    }
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "recall of %s for owner %s: %s hits in %.3f s",
            kind,
            owner_id,
            hits,
            fields["duration_s"],
            extra={"recall": fields},
        )
    signals.recall_searched.send(sender=kind, **fields)


def embeddings_wanted() -> bool:
    """Whether the configured backend ranks with stored vectors (an embedder is set and the
    backend is not plain full-text)."""
    from agentmemory.conf import app_settings

    conf = app_settings()
    return bool(conf.EMBEDDER) and conf.RECALL_BACKEND != "fulltext"


def index_new_messages(messages: Sequence[Any], *, using: str) -> bool:
    """Called by ``PersistentChatHistory.add_messages`` with the messages it stored on the
    database ``using``: with an embedding or hybrid backend, their embedding is scheduled
    for after that database's transaction commits (``enqueue_message_embedding``), so no
    model call runs inside the append. Full-text needs nothing: the database indexes rows
    as they are written. Returns whether anything was scheduled. A broker that cannot take
    the task never fails the append (logged; ``rebuild_recall_index`` embeds what was
    missed)."""
    if not embeddings_wanted():
        return False
    ids = [m.id for m in messages if m.id is not None and str(m.role) in SEARCHED_ROLES and m.content]
    if not ids:
        return False
    transaction.on_commit(partial(enqueue_message_embedding, ids), using=using)
    return True


def enqueue_message_embedding(message_ids: list[int]) -> None:
    """Embed ``message_ids`` where compaction's ``"auto"`` mode would run: with a Celery
    broker configured (and tasks not run eagerly), the ``embed_messages`` task is sent to
    it; otherwise it runs here, in process (an embedding error is logged as a warning and
    left for ``rebuild_recall_index``; a hung or failing embedder is bounded and paused, see
    ``agentmemory.recall.inprocess``). A host without Celery settings has no broker: sending
    the task there tried Celery's default one (``amqp://guest@localhost//``), logged an
    ERROR and held every append for about 0.8 s, and nothing was embedded. A broker error is
    logged, never raised; a broker that does not answer costs at most
    ``ENQUEUE_TIMEOUT_SECONDS`` (``agentmemory.broker``)."""
    from agentmemory.broker import celery_broker, publish  # the mode rule compaction follows
    from agentmemory.recall.tasks import embed_messages

    broker, eager = celery_broker()
    if not broker or eager:
        from agentmemory.recall.inprocess import embed_appended

        embed_appended(message_ids)
        return
    try:
        publish(embed_messages, (message_ids,))
    except Exception:  # a broker that is down must not break the caller (logged, caught up later)
        logger.exception("could not enqueue embedding of %d message(s)", len(message_ids))


def embed_stored_messages(
    message_ids: list[int], *, using: str | None = None, bound: Callable[[Any], Any] | None = None
) -> int:
    """Embed the messages of ``message_ids`` that search can return (searched roles, with
    content, in a conversation that has an owner) and have no vector of the configured
    embedder's model yet; returns how many vectors were stored. Reads and writes the
    database the routers choose for writing ``Message`` unless ``using`` is given. Calls the
    embedding model (through ``bound(embedder)`` when given: the in-process append path
    shortens its timeout).

    Raises:
        EmbeddingError: the model could not be reached or answered badly.
    """
    from agentmemory.models import Message

    embedder = get_embedder()
    if embedder is None or not message_ids:
        return 0
    if bound is not None:
        embedder = bound(embedder)
    using = using or router.db_for_write(Message)
    rows = list(
        Message.objects.using(using)
        .filter(pk__in=message_ids, role__in=SEARCHED_ROLES, conversation__owner__isnull=False)
        .exclude(content__isnull=True)
        .exclude(content="")
    )
    return get_backend(embedder=embedder).index(rows)
