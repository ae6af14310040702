"""Storing facts: the checks, exact repeats, supersession and eviction, and deletion.

The rules a fact is written by (design invariant R3; pinned by ``tests/test_knowledge.py``):
an exact repeat of a live fact adds nothing (``content_hash``), a changed "key: value" fact
(``fact_key``) or, with an embedder, the most similar live fact about the same subject
(``same_subject``) is superseded and stays as history, and the least important live facts
leave a full scope (``max_entries``); the text rules themselves are
``agentmemory.knowledge.text``. The functions take the ``KnowledgeMemory`` whose scope they
write (``agentmemory.knowledge.memory``); callers use that facade.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.contrib.auth import get_user_model
from django.db import connections, router, transaction
from django.db.models import Q
from django.utils import timezone

from agentmemory.conf import app_settings
from agentmemory.exceptions import AgentMemoryError
from agentmemory.knowledge.text import fact_key, same_subject
from agentmemory.models import Fact, FactEmbedding, FactKind, Message
from agentmemory.recall.backends import mirror_vectors
from agentmemory.recall.embedders import EmbeddingError, cosine_scores, from_bytes, numpy, to_bytes
from agentmemory.recall.said import TRANSCRIPT_DATE_KEYS, said_instant, session_date
from agentmemory.recall.scope import MemoryScopeError, require_user
from agentmemory.recall.text import character_class, search_text
from agentmemory.recording import usage_scope
from agentmemory.validation import MAX_ID, text_problem

if TYPE_CHECKING:
    from agentmemory.knowledge.memory import KnowledgeMemory

logger = logging.getLogger("agentmemory.knowledge")

Action = Literal["created", "duplicate", "updated", "superseded"]

#: rows deleted per statement when forgetting (no cap on the total)
DELETE_BATCH = 500


class InvalidFactError(AgentMemoryError, ValueError):
    """A fact that cannot be stored: empty or over-long content, NUL bytes, a bad category,
    importance outside 0.0-1.0, a non-positive ttl, or a ``supersedes`` id outside the scope."""


@dataclass(frozen=True)
class RememberResult:
    """What ``KnowledgeMemory.store()`` did.

    ``action``: "created" (a new fact), "duplicate" (the same content was already live in the
    scope; nothing was written), "updated" (the same content was live and its persistence,
    importance or expiry changed, or the fact named by ``supersedes`` became its history:
    then ``superseded_ids`` names it), "superseded" (a new fact replaced ``superseded_ids``,
    which stay as history).
    """

    fact: Fact
    action: Action
    superseded_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class PreparedFact:
    """A fact checked and embedded by ``KnowledgeMemory.prepare()``, ready for
    ``store_prepared()``: its cleaned content and category, persistence, importance (as given,
    and the value used), expiry, source message id, content hash, vector and metadata."""

    content: str
    category: str
    persistent: bool
    importance_given: float | None
    importance: float
    expires_at: datetime | None
    source_id: int | None
    digest: str
    vector: list[float] | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class FactHit:
    """One fact found by ``KnowledgeMemory.recall()``; ``score`` orders one call's hits."""

    fact: Fact
    score: float


#: the ASCII letters and digits a key starts with: every stored fact whose key is written
#: in ASCII and folds to it starts with them too, in any case (stored content is stripped),
#: which both databases' ``LIKE`` can fold
_KEY_HEAD = re.compile(r"[A-Za-z0-9]+")
#: a stored fact with a character beyond ASCII before its first colon, which follows within
#: a key's length: its key may fold (``fact_key``) to one that its raw spelling does not show
#: ("\uff25mail", "Stra\u00dfe", "\u0130stanbul"), so no pattern of the new key can pick it;
#: ``fact_key`` decides
_NON_ASCII_KEY = "^[^:\uff1a\n]{0,80}" + character_class([(0x80, 0x10FFFF)]) + "[^:\uff1a\n]{0,80}[:\uff1a]"


def _key_rows(rows: Any, key: str) -> Any:
    """The ``rows`` (a queryset of facts) that may have the key ``key`` (as ``fact_key``
    gives it, folded): those whose opening before the colon is ``key``'s words in any case
    with any run of whitespace between them (a regular expression, ``iregex``), and those
    with a character beyond ASCII before their first colon, whatever it is. It only narrows
    the rows read; ``fact_key`` decides. A pattern of the key as written missed the same key
    in another spelling ("Email:" after "\uff25mail:", "STRASSE:" after "Stra\u00dfe:"), and
    on SQLite, whose ``LIKE`` folds only ASCII, one with another case of a non-ASCII letter
    ("\u00c4rger:" and "\u00e4rger:"). The escapes of ``re.escape`` (a backslash before a
    non-alphanumeric character) mean the character itself in PostgreSQL's regular
    expressions too."""
    pattern = r"^\s*" + r"\s+".join(re.escape(word) for word in key.split()) + "\\s*[:\uff1a]"
    plain = Q(content__iregex=pattern)
    if head := _KEY_HEAD.match(key):
        # a cheap condition first: SQLite runs REGEXP in Python, row by row
        plain = Q(content__istartswith=head.group(0)) & plain
    return rows.filter(plain | Q(content__regex=_NON_ASCII_KEY))


#: the longest ``ttl`` (100 years, in seconds); longer is an error, not "never" (use None)
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600


def _seconds(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise InvalidFactError(f"ttl must be seconds or a timedelta, not {ttl!r}")
    if not seconds > 0:
        raise InvalidFactError(f"ttl must be positive, not {ttl!r}")
    if not seconds <= MAX_TTL_SECONDS:  # also refuses inf and NaN
        raise InvalidFactError(f"ttl must be at most {MAX_TTL_SECONDS} seconds (100 years), not {ttl!r}")
    return seconds


def days_before(now: datetime, days: int) -> datetime:
    """``now`` minus ``days`` days, or the earliest time a ``datetime`` holds when that is
    further back: a bound such as ``max_log_days=10**6`` (meaning "keep everything") made
    every read fail with OverflowError."""
    try:
        return now - timedelta(days=days)
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def clock(now: Any) -> datetime:
    """``now``, or the current time when None. A naive datetime is refused: it cannot be
    compared with the stored, aware times (recall failed with a TypeError, storing read it in
    the current time zone with only a warning).

    Raises:
        ValueError: ``now`` is not an aware ``datetime``.
    """
    if now is None:
        return timezone.now()
    if not isinstance(now, datetime) or timezone.is_naive(now):
        raise ValueError(f"now must be an aware datetime, not {now!r}")
    return now


def category_value(category: str) -> str:
    """``category`` by the one rule every write and read of a category follows: stripped of
    white space at both ends and composed (NFC: "perso\u0308nlich" typed on macOS is
    "persönlich"), so that a category typed with a trailing space or decomposed names the
    category stored from it (``validate_fact``), in a filter as in a write."""
    return unicodedata.normalize("NFC", category.strip())


def category_filter(category: Any) -> str:
    """``category`` as a filter value, in the form categories are stored in
    (``category_value``: stripped and composed, as ``validate_fact`` stores them; a filter
    compared the value as typed, so a fact stored with category " travel " was out of reach
    of " travel"); a value the database cannot compare (not a string, a NUL, a lone
    surrogate) is refused here instead of failing in the database driver.

    Raises:
        InvalidFactError: (a ``ValueError``) ``category`` is not storable text.
    """
    if not isinstance(category, str) or text_problem(category):
        raise InvalidFactError(f"category must be text without NUL or lone surrogates, not {category!r}")
    return category_value(category)


def check_owner(memory: KnowledgeMemory) -> None:
    """Refuse an owner id that names no user, once per instance. The foreign key would
    refuse the fact anyway, but late: at the commit, or, in autocommit mode, as an
    ``IntegrityError`` that ``store()`` took for a race of writers of the same content
    (three retries, then "concurrent writers kept conflicting").

    Raises:
        MemoryScopeError: no user has the owner id.
    """
    if memory._owner_checked:
        return
    require_user(memory.scope.owner_id, memory.using)
    memory._owner_checked = True


def source_message_id(memory: KnowledgeMemory, source_message: Any) -> int | None:
    """The id of ``source_message`` (a ``Message`` or its id), checked to be a stored
    message of one of the owner's conversations: a fact shows its source conversation, so
    another user's message (or none at all: a foreign key error taken for a write race)
    is refused.

    Raises:
        InvalidFactError: not a message of the owner's conversations.
    """
    return source_of(memory, source_message)[0]


def source_of(memory: KnowledgeMemory, source_message: Any) -> tuple[int | None, str]:
    """``source_message_id``'s id, and the date a transcript gave the message
    (``recall.said.TRANSCRIPT_DATE_KEYS`` in its metadata, as written there: "1:56 pm on 8
    May, 2023") or "": a fact taken from it is dated when it was said (its
    ``metadata["said_at"]``, as the memory flush writes it), not when it was stored (design
    R3: dates a transcript gives win over storage times). One query, as the check alone.

    Raises:
        InvalidFactError: not a message of the owner's conversations.
    """
    if source_message is None:
        return None, ""
    pk = source_message.pk if isinstance(source_message, Message) else source_message
    if isinstance(pk, bool) or not isinstance(pk, int) or not 0 < pk <= MAX_ID:
        raise InvalidFactError(f"source_message must be a stored message or its id, not {pk!r}")
    owned = Message.objects.using(memory.using).filter(pk=pk, conversation__owner_id=memory.scope.owner_id)
    found = owned.values_list("pk", "metadata").first()
    if found is None:
        raise InvalidFactError(f"source_message {pk} is not a message of this owner's conversations")
    metadata = found[1] if isinstance(found[1], dict) else {}
    for key in TRANSCRIPT_DATE_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return pk, " ".join(value.split())
    return pk, ""


def take_scope_lock(memory: KnowledgeMemory) -> None:
    """Serialise the writers of one scope until the transaction ends, after taking the
    owner's user row (docs/architecture.md, "Lock order").

    Storing reads the scope's live facts (repeats, the "key:" fact or the similar fact to
    supersede, eviction) and then writes. Two writers reading at once would each supersede
    the same old fact and both new facts would stay live (two "Hometown:" facts in force).
    PostgreSQL: a transaction-level advisory lock on a 64-bit hash of the scope
    (``pg_advisory_xact_lock``), so writers of other scopes never wait. SQLite writes one
    transaction at a time; with ``"transaction_mode": "IMMEDIATE"`` (check
    ``agentmemory.W003``) the second writer waits at the start of its transaction and
    reads the first one's fact.

    Before the scope's lock, in the same statement, the owner's user row is share-locked
    (``FOR KEY SHARE``, the lock the facts' foreign key takes; on PostgreSQL, when the user
    table is on the same database). Django checks foreign keys at the commit, so a write
    took that row last, while deleting the user takes it first and the user's facts after
    it: a write that superseded a fact held it while it waited for the row, the delete held
    the row while it waited for the fact, and PostgreSQL killed one ("deadlock detected").
    Taken first, a write waits for a delete in progress, or the delete for the write.

    Raises:
        MemoryScopeError: the owner's user is gone (deleted since ``check_owner``).
    """
    connection = connections[memory.using]
    if connection.vendor != "postgresql":
        return
    scope = f"agentmemory.fact\0{memory.scope.owner_id}\0{memory.scope.agent_key}\0{memory.scope.namespace}"
    key = int.from_bytes(hashlib.blake2b(scope.encode(), digest_size=8).digest(), "big", signed=True)
    user_model = get_user_model()
    with connection.cursor() as cursor:
        if router.db_for_write(user_model) != memory.using:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
            return
        table = connection.ops.quote_name(user_model._meta.db_table)
        column = connection.ops.quote_name(str(user_model._meta.pk.column))
        cursor.execute(
            f"WITH owner AS MATERIALIZED (SELECT {column} FROM {table} WHERE {column} = %s FOR KEY SHARE) "
            "SELECT pg_advisory_xact_lock(%s) FROM owner",
            [memory.scope.owner_id, key],
        )
        if cursor.fetchone() is None:
            raise MemoryScopeError(f"no user with id {memory.scope.owner_id}")


def lock_touched(
    memory: KnowledgeMemory,
    facts: Sequence[PreparedFact],
    now: datetime,
    *,
    supersedes: int | uuid.UUID | None = None,
) -> None:
    """Lock, in ascending id, every stored fact that writing ``facts`` in this order at
    ``now`` or later (a later clock only takes facts out of the live set) may change or
    delete (``FOR UPDATE``; PostgreSQL, a no-op where the database has no row locks). The
    caller holds the scope's lock (``take_scope_lock``) and writes the facts next, in the
    same transaction, by ``store_fact``.

    One write changes or deletes, in its own order: the live copy of its content (a repeat
    updated, an expired copy made history), the live fact ``supersedes`` names, the facts it
    supersedes ("key:" or similar, ``superseded_candidates``), their history (moved under
    the new fact) and the facts ``evict`` deletes with their history. Several writes (the
    facts of one summariser reply, in the order the model listed them) each lock them as
    they come: a fact of a higher id was held while a lower one was waited for, which a
    forget or the recall counters held while they waited for the higher one ("deadlock
    detected"; docs/architecture.md, "Lock order"). So all are locked first, in one
    statement: the candidates of every fact, and, with ``max_entries``, the first
    ``live + len(facts) - max_entries`` live facts in eviction order that are not
    candidates (no more can be evicted: facts of the scope leave the live set only by these
    writes, and only these writes add to it). Rows created by the writes are not locked
    here: nobody else sees them before the commit.
    """
    connection = connections[memory.using]
    if not facts or not connection.features.has_select_for_update:
        return
    live = memory.live_facts(now)
    ids: set[int] = set()
    if isinstance(supersedes, uuid.UUID):
        ids.update(live.filter(uuid=supersedes).values_list("pk", flat=True))
    elif isinstance(supersedes, int) and not isinstance(supersedes, bool) and 0 < supersedes <= MAX_ID:
        ids.update(live.filter(pk=supersedes).values_list("pk", flat=True))
    digests = sorted({f.digest for f in facts})
    ids.update(
        memory.all_facts()
        .filter(superseded_by__isnull=True, content_hash__in=digests)
        .values_list("pk", flat=True)
    )
    for f in facts:
        ids.update(superseded_candidates(memory, live, f.content, f.category, f.vector, every=True))
    if memory.max_entries is not None:
        room = live.count() + len(facts) - memory.max_entries
        if room > 0:
            ids.update(live.exclude(pk__in=ids).order_by(*EVICTION_ORDER).values_list("pk", flat=True)[:room])
    step = set(ids)
    while step:  # the history of each: moved under a new fact, or deleted with an evicted one
        step = set(
            Fact.objects.using(memory.using).filter(superseded_by_id__in=step).values_list("pk", flat=True)
        )
        step -= ids
        ids |= step
    if ids:
        list(
            Fact.objects.using(memory.using)
            .filter(pk__in=sorted(ids))
            .order_by("pk")
            .select_for_update()
            .values_list("pk", flat=True)
        )


def _visible(text: str) -> bool:
    """Whether ``text`` shows something: a character that is neither white space nor
    invisible (``recall.text.INVISIBLE_RANGES``: a zero-width space, a soft hyphen, a byte
    order mark, a joiner) nor a mark the indexes leave out. A fact of invisible characters
    only was shown as nothing, and every other one was its repeat."""
    return bool(search_text(text).strip())


def validate_fact(
    content: Any, category: Any, importance: Any, ttl: Any
) -> tuple[str, str, float, float | None]:
    """``(content, category, importance, ttl seconds or None)`` cleaned for storing: content
    of 1 to ``MAX_FACT_CHARS`` characters (stripped, in Unicode's composed form NFC), a
    one-line category of at most 100 (stripped, composed too), importance 0.0-1.0 (default
    0.5), ttl as ``_seconds`` reads it. Content and category must show something
    (``_visible``): invisible characters alone are blank.

    Raises:
        InvalidFactError: any of them out of bounds, or text a database refuses.
    """
    limit = app_settings().MAX_FACT_CHARS
    if not isinstance(content, str) or not content.strip():
        raise InvalidFactError("content must be a non-empty string")
    if len(content) > limit:
        raise InvalidFactError(f"content must be at most {limit} characters")
    if not _visible(content):  # read once its length is known to be bounded
        raise InvalidFactError("content must be a non-empty string (invisible characters alone are blank)")
    if problem := text_problem(content):
        raise InvalidFactError(f"content {problem}")
    if isinstance(category, str):
        # one category for its "key:" facts, its heading and its filter (``category_value``)
        category = category_value(category)
    if (
        not isinstance(category, str)
        or len(category) > 100
        or not _visible(category)
        or text_problem(category)
        or len(category.splitlines()) > 1
    ):
        # one line: a category is a "## category" heading in the context and in MEMORY.md
        raise InvalidFactError("category must be a non-empty line of at most 100 characters")
    if importance is None:
        value = 0.5
    elif isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidFactError(f"importance must be a number from 0.0 to 1.0, not {importance!r}")
    else:
        value = float(importance)
        if not 0.0 <= value <= 1.0:
            raise InvalidFactError(f"importance must be from 0.0 to 1.0, not {importance!r}")
    # stored composed (NFC), the form text is typed in on most systems: a key typed
    # decomposed ("Cafe\u0301:", as macOS writes it) then finds the stored one
    content = unicodedata.normalize("NFC", content.strip())
    return content, category, value, _seconds(ttl)


def embed_content(memory: KnowledgeMemory, content: str) -> list[float] | None:
    """The vector of ``content`` by ``memory``'s embedder (one model call, its usage counted
    for the scope's owner and agent key), or ``None`` without an embedder or when the
    embedder fails (``EmbeddingError``, logged as a warning): the fact is then stored
    without its vector, found by full text, superseded only by the "key:" rule and exact
    repeats, and ``manage.py rebuild_recall_index`` adds the vector later. An embedding
    service that is down must never lose a fact nor fail the write that stores it."""
    if memory.embedder is None:
        return None
    try:
        with usage_scope(owner_id=memory.scope.owner_id, agent_key=memory.scope.agent_key):
            (vector,) = memory.embedder.embed([content])
    except EmbeddingError as exc:
        logger.warning(
            "embedding a fact failed (%s); it is stored without a vector (manage.py "
            "rebuild_recall_index adds it)",
            exc,
        )
        return None
    return vector


# Long on purpose: one decision read top to bottom (repeat, moved category,
# update in place, or a new fact and what it supersedes) under the scope's lock.
def store_fact(
    memory: KnowledgeMemory,
    content: str,
    category: str,
    persistent: bool,
    importance_given: float | None,
    importance: float,
    expires_at: datetime | None,
    source_id: int | None,
    supersedes: int | uuid.UUID | None,
    digest: str,
    vector: list[float] | None,
    now: datetime,
    said_at: str = "",
) -> RememberResult:
    """Write a checked fact by the knowledge rules, under the scope's lock (the caller holds
    it, ``take_scope_lock``): a live repeat is reported or updated, an expired copy and
    ``supersedes`` become history, else a new fact is created and supersedes what
    ``superseded_candidates`` names; then ``evict``. Returns the ``RememberResult``.

    A fact that becomes history gets ``superseded_at``: when what replaced it was said, the
    date a transcript gave its source (``said_at``, as ``source_of`` returns it) or else
    ``now``; recall as of an earlier time still finds it (``KnowledgeMemory.recall(now=...)``).

    Raises:
        InvalidFactError: ``supersedes`` names no live fact of the scope.
    """
    live = memory.live_facts(now)
    at = superseded_time(said_at, now)
    # ``supersedes`` is checked first: a repeat does not make a bad id acceptable
    target = supersede_target(live, supersedes) if supersedes is not None else None
    same = memory.all_facts().filter(superseded_by__isnull=True, content_hash=digest).first()
    replaced: list[int] = []
    old_ids: list[int] | None = None
    if same is not None and not live.filter(pk=same.pk).exists():
        # An expired or aged-out copy is out of recall: the new fact replaces it, and it
        # stays, with the history behind it, as history of the new fact. Until the new
        # fact exists it points at itself, which takes it out of the live-content
        # uniqueness (one transaction: nobody sees that).
        Fact.objects.using(memory.using).filter(pk=same.pk).update(superseded_by=same.pk, superseded_at=at)
        replaced = [same.pk]
        same = None
    if same is not None and target == same.pk and category != same.category:
        # The fact itself, moved to another category: a change like new content, stored as
        # a new fact that supersedes it (out of the live-content uniqueness first, as above).
        Fact.objects.using(memory.using).filter(pk=same.pk).update(superseded_by=same.pk, superseded_at=at)
        old_ids, same = [same.pk], None
    if same is not None:
        changed: list[str] = []
        # a repeat only makes a fact persistent; a change of the fact itself (it names the
        # fact it supersedes) sets its persistence either way
        if persistent != same.persistent and (persistent or target == same.pk):
            same.persistent = persistent
            changed.append("persistent")
        if importance_given is not None and importance != same.importance:
            same.importance = importance
            changed.append("importance")
        if expires_at is not None and expires_at != same.expires_at:
            same.expires_at = expires_at
            changed.append("expires_at")
        if target is not None and target != same.pk:
            # Another fact replaced by content already in force: that fact becomes history
            # of the one in force (ignoring it left both in force).
            chain(memory, target, head=same, at=at)
            changed.append("superseded")
        # Told again (a plain repeat, not a change naming the fact): the knowledge seed writes
        # every remember() to its daily log, so the entry is logged again, dated now. The
        # semantic memory keeps no log: its entries stay in the order first added.
        logged = log_again(same, now) if target is None and memory.kind == FactKind.KNOWLEDGE else []
        if not changed:
            if logged:
                same.save(update_fields=[*logged, "updated_at"])
            return RememberResult(same, "duplicate")
        if fields := [name for name in changed if name != "superseded"] + logged:
            same.save(update_fields=[*fields, "updated_at"])
        superseded = (target,) if target is not None and target != same.pk else ()
        return RememberResult(same, "updated", superseded)

    if old_ids is None and target is not None:
        old_ids = [target]
    elif old_ids is None:
        old_ids = superseded_candidates(memory, live, content, category, vector)
        if not persistent and old_ids and live.filter(pk__in=old_ids, persistent=True).exists():
            # A change found by its key or its likeness (no fact named): ``remember()`` and
            # the agent's tool default to a recent entry, and the persistent fact it replaces
            # (the seed's MEMORY.md, never pruned) must not age out as one. A repeat likewise
            # only ever makes a fact persistent; naming the fact sets the flag either way.
            persistent = True
    fact = Fact.objects.using(memory.using).create(
        owner_id=memory.scope.owner_id,
        agent_key=memory.scope.agent_key,
        namespace=memory.scope.namespace,
        kind=memory.kind,
        content=content,
        content_hash=digest,
        category=category,
        importance=importance,
        persistent=persistent,
        expires_at=expires_at,
        source_message_id=source_id,
        created_at=now,
    )
    if vector is not None and memory.embedder is not None:
        FactEmbedding.objects.using(memory.using).create(
            fact=fact, model=memory.embedder.model, dimensions=len(vector), vector=to_bytes(vector)
        )
        mirror_vectors(memory.using, [fact], memory.embedder.model, [vector])
    chain(memory, *old_ids, *replaced, head=fact, at=at)
    evict(memory, now, keep=fact.pk)
    return RememberResult(fact, "superseded" if old_ids else "created", tuple(old_ids))


def log_again(fact: Fact, now: datetime) -> list[str]:
    """Write ``fact``, remembered again at ``now``, to the daily log again: back in it after
    ``clear_logs()`` or ``prune_logs()`` took it out, and dated ``now`` when that is later
    than its date (never earlier: a repeat dated in the past, an import, moves nothing back).
    The knowledge seed appends every ``remember()`` to the day's log, persistent or not, so
    the entry is listed by ``get_recent_entries()`` of the days after, and a transient entry
    ages out ``max_log_days`` after the last time it was remembered, not the first. The first
    time is kept in ``first_remembered_at`` (set by the first repeat that moves the date, or
    moved back by a repeat told before every stored telling), so a recall as of a time between
    the two still finds the fact (``recall(now=...)``). Changes
    ``fact`` in memory; returns the names of the fields changed (to save)."""
    fields = []
    if not fact.in_daily_log:
        fact.in_daily_log = True
        fields.append("in_daily_log")
    if now < (fact.first_remembered_at or fact.created_at):
        # told before any telling stored (transcripts replayed out of order, an import of
        # older notes): the fact was known from then
        fact.first_remembered_at = now
        fields.append("first_remembered_at")
    if now > fact.created_at:
        if fact.first_remembered_at is None:
            fact.first_remembered_at = fact.created_at
            fields.append("first_remembered_at")
        fact.created_at = now
        fields.append("created_at")
    return fields


def chain(memory: KnowledgeMemory, *ids: int, head: Fact, at: datetime) -> None:
    """Make the facts ``ids`` and their history history of ``head``: deleting the head
    deletes the whole chain. The facts ``ids`` were superseded ``at`` (``superseded_at``);
    their history keeps the time it was superseded."""
    if ids:
        Fact.objects.using(memory.using).filter(superseded_by_id__in=ids).update(superseded_by=head)
        Fact.objects.using(memory.using).filter(pk__in=ids).update(superseded_by=head, superseded_at=at)


def superseded_time(said_at: str, now: datetime) -> datetime:
    """When a fact stored at ``now`` replaces another: the date a transcript gave its source
    (``said_at``, as written: "1:56 pm on 8 May, 2023"; read as ``session_date`` reads it,
    in the current time zone when it names none: ``said_instant``), else ``now``."""
    if said_at:
        return said_instant(session_date({TRANSCRIPT_DATE_KEYS[0]: said_at}, now) or now)
    return now


def supersede_target(live: Any, supersedes: Any) -> int:
    """The primary key of the live fact ``supersedes`` names (id or uuid).

    Raises:
        InvalidFactError: not an id or uuid, or not a live fact of the scope.
    """
    if isinstance(supersedes, uuid.UUID):
        found = live.filter(uuid=supersedes).values_list("pk", flat=True).first()
    elif isinstance(supersedes, bool) or not isinstance(supersedes, int):
        raise InvalidFactError(f"supersedes must be a fact id or uuid, not {supersedes!r}")
    else:
        found = supersedes if live.filter(pk=supersedes).exists() else None
    if found is None:
        raise InvalidFactError(f"fact {supersedes} is not a live fact of this scope")
    return int(found)


def superseded_candidates(
    memory: KnowledgeMemory,
    live: Any,
    content: str,
    category: str,
    vector: list[float] | None,
    *,
    every: bool = False,
) -> list[int]:
    """Ids of the live facts (``live``) a new fact supersedes: those of its category with its
    "key:" (``fact_key``), else the most similar one about the same subject at or above
    ``memory.supersede_similarity`` (with an embedder and ``vector``), else none. With
    ``every``, all that either rule could name (the "key:" facts and every similar fact
    about the same subject), for ``lock_touched``."""
    same_category = live.filter(category=category)
    key = fact_key(content)
    found: list[int] = []
    if key is not None:
        rows = _key_rows(same_category, key)
        found = [pk for pk, text in rows.values_list("pk", "content") if fact_key(text) == key]
        if found and not every:
            return found
    threshold = memory.supersede_similarity
    if vector is None or threshold is None or memory.embedder is None:
        return found
    rows = list(
        FactEmbedding.objects.using(memory.using)
        # vectors of another length (the model's dimensions changed) do not compare
        .filter(model=memory.embedder.model, dimensions=len(vector), fact__in=same_category.values("pk"))
        .values_list("fact_id", "vector", "fact__content")
    )
    if not rows:
        return found
    xp = numpy()
    scores = cosine_scores(vector, xp.vstack([from_bytes(v) for _, v, _text in rows]))
    # the most similar fact about the same subject: similar words alone (another person,
    # another appointment) do not make a fact out of date
    for index in (int(i) for i in xp.argsort(-scores, kind="stable")):
        if scores[index] < threshold:
            break
        if same_subject(rows[index][2], content):
            if not every:
                return [rows[index][0]]
            found.append(rows[index][0])
    return found


#: the order ``evict`` deletes live facts in: least important, then transient, then oldest
EVICTION_ORDER = ("importance", "persistent", "created_at", "pk")


def evict(memory: KnowledgeMemory, now: datetime, keep: int) -> int:
    """Delete the live facts over ``memory.max_entries`` (least important, then transient,
    then oldest first), never ``keep``; returns how many facts were deleted."""
    if memory.max_entries is None:
        return 0
    live = memory.live_facts(now)
    excess = live.count() - memory.max_entries
    if excess <= 0:
        return 0
    victims = list(live.exclude(pk=keep).order_by(*EVICTION_ORDER).values_list("pk", flat=True)[:excess])
    return delete_ids(memory, victims)


def delete_ids(memory: KnowledgeMemory, ids: Any, count_all: bool = False) -> int:
    """Delete facts by id in batches (their history and embeddings cascade; the full-text
    index follows in the same transaction); returns the facts deleted."""
    deleted = 0
    if not count_all:
        ids = list(ids)
        for start in range(0, len(ids), DELETE_BATCH):
            deleted += delete_batch(memory, ids[start : start + DELETE_BATCH])
        return deleted
    while True:
        batch = list(ids[:DELETE_BATCH])
        if not batch:
            return deleted
        removed = delete_batch(memory, batch)
        if not removed:
            return deleted
        deleted += removed


def delete_batch(memory: KnowledgeMemory, ids: Sequence[int]) -> int:
    """Delete the facts ``ids`` of the scope's owner in one transaction, under the scope's
    lock (``take_scope_lock``: a store of the same scope must not update or supersede a
    fact deleted under it); returns how many."""
    with transaction.atomic(using=memory.using):
        take_scope_lock(memory)
        _total, per_model = (
            Fact.objects.using(memory.using).filter(owner_id=memory.scope.owner_id, pk__in=ids).delete()
        )
    return per_model.get(Fact._meta.label, 0)
