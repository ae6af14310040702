"""Knowledge memory: facts a user's agents keep across conversations, on the ORM.

``KnowledgeMemory(owner)`` follows the knowledge-memory contract of the seed design
(``remember()``, categories, persistent facts, recent entries, ``build_context()``, pruning)
with the storage in the host's database instead of files:

- a *persistent* fact is the seed's ``MEMORY.md`` line: kept until forgotten;
- a *transient* fact is the seed's daily-log entry: it is hidden once it is older than
  ``max_log_days`` and deleted by ``prune_logs()``.

Rules (each pinned by tests): scope is the owner plus an optional agent key and namespace,
matched exactly; an exact repeat adds nothing; a changed fact supersedes the old one, which
stays as history out of default recall; a near-duplicate never discards new content (a peer
bug report, cyzus/suzent#34, dropped a changed fact because it embedded close to the old
one); expiry is enforced when reading and a read never extends it; forgetting deletes rows
for real, in batches with no cap, and never anything of another owner (mem0ai/mem0#3928).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal

from django.db import IntegrityError, connections, router, transaction
from django.db.models import Case, F, PositiveIntegerField, Q, When
from django.utils import timezone

from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import AgentMemoryError
from agentmemory.models import Fact, FactEmbedding, FactKind, Message
from agentmemory.recall import boost, fulltext
from agentmemory.recall.backends import (
    FullTextBackend,
    RecallBackend,
    get_backend,
    get_embedder,
    mirror_vectors,
)
from agentmemory.recall.embedders import Embedder, cosine_scores, from_bytes, numpy, to_bytes
from agentmemory.recall.scope import MemoryScope, MemoryScopeError
from agentmemory.recall.text import bounded_query
from agentmemory.validation import MAX_ID, text_problem

__all__ = [
    "FactHit",
    "InvalidFactError",
    "KnowledgeMemory",
    "MemoryScopeError",
    "PreparedFact",
    "RememberResult",
]

Action = Literal["created", "duplicate", "updated", "superseded"]

#: rows deleted per statement when forgetting (no cap on the total)
DELETE_BATCH = 500
#: a "key: value" fact: up to 80 characters without a colon, then a colon and whitespace
#: before the value. The whitespace keeps a clock time ("Pickup at 8:15 for Lea"), a URL
#: ("https://..."), a port ("localhost:8000") or a ratio ("16:9") from reading as a key.
_KEY = re.compile(r"^\s*([^:\n]{1,80}?)\s*:\s+\S")


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


def normalize(content: str) -> str:
    """Content with every run of whitespace made one space and the ends stripped: the form
    compared for exact repeats. Case and punctuation are kept (they may be the change)."""
    return " ".join(content.split())


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize(content).encode()).hexdigest()


def fact_key(content: str) -> str | None:
    """The key of a "key: value" fact ("Preferred language: Python" has the key
    "preferred language"), or None. A new fact with the key of a live fact of the same scope
    and category supersedes it. The colon must be followed by whitespace: "Pickup at 8:15
    for Lea", "See https://example.com" and "Slides in 16:9" have no key (a clock time read
    as a key made "Pickup at 8:40 for Tom" replace Lea's pickup)."""
    match = _KEY.match(content)
    if not match:
        return None
    return " ".join(match.group(1).split()).casefold()


#: words of a fact for comparing subjects: runs of letters and digits, a possessive or an
#: elision kept whole ("alice's", "o'neil")
_SUBJECT_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
#: words that lead a subject without naming it: articles, possessive and demonstrative
#: determiners ("my sister", "the dentist", "this laptop")
_DETERMINERS_TEXT = "a an the my your his her its our their this that these those"
_DETERMINERS = frozenset(_DETERMINERS_TEXT.split())
#: subjects of one word: personal pronouns, and "user" as facts about a user write it
_PRONOUNS_TEXT = "i we you he she they it user"
_PRONOUNS = frozenset(_PRONOUNS_TEXT.split())
#: verbs that a suffix does not show (auxiliaries, common irregular past forms): after a first
#: word, they make it a named subject ("Lea is 7", "Tom went to Oslo")
_VERBS_TEXT = """
    is are was were am be been has have had does do did can could will would should may might
    must shall went got made took left came saw said told gave kept bought sold began became
    ran met wrote drove flew lost won paid
"""
_VERBS = frozenset(_VERBS_TEXT.split())
#: a replaced span of at most this many words on each side is a slot of a shared template
_SLOT_WORDS = 2


def _verb_like(word: str) -> bool:
    """A word written like an English verb form: a known one, or a third-person "-s" or a
    past "-ed" of three letters or more ("likes", "joined"; not "as", "bus", "class")."""
    if word in _VERBS:
        return True
    if len(word) < 3 or not word.isalpha():
        return False
    return word.endswith("ed") or (word.endswith("s") and not word.endswith(("ss", "us", "is")))


def fact_subject(content: str) -> tuple[str, ...]:
    """The leading words that name what a fact is about, case-folded, or ``()`` when it
    names none (a fact about the user written without a subject: "Likes spicy food",
    "Works at Northwind"). Named: determiners and the word after them ("my sister", "the
    dentist"), a pronoun ("i", "user"), a possessive and the word after it ("alice's
    birthday"), or a first word followed by a verb ("alice" in "Alice works at Google").
    A rule of thumb for English word order (subject first), not a parser: both facts
    compared go through the same rule."""
    words = _SUBJECT_WORD.findall(content.casefold())
    if not words:
        return ()
    end = 0
    if words[0] in _PRONOUNS:
        end = 1
    elif words[0] in _DETERMINERS:
        while end < len(words) - 1 and words[end] in _DETERMINERS:
            end += 1
        end += 1
    elif words[0].endswith(("'s", "\u2019s")) or (len(words) > 1 and _verb_like(words[1])):
        end = 1
    while 0 < end < len(words) and words[end - 1].endswith(("'s", "\u2019s")):
        end += 1
    return tuple(words[:end])


def same_subject(old: str, new: str) -> bool:
    """Whether ``new`` says something new about what ``old`` is about, the condition for a
    fact found similar by its embedding to supersede another. Both must name the same
    subject (``fact_subject``; none named counts as the same: the user), and the rest must
    not be the same sentence with two or more of its slots filled differently ("Pickup at
    8:40 for Tom" after "Pickup at 8:15 for Lea" is another pickup, "Favourite food is sushi"
    after "Favourite colour is blue" another favourite). "My sister now lives in Porto"
    after "My sister lives in Lisbon", "Dislikes spicy food" after "Likes spicy food" and
    "Started a new job at Contoso" after "Works at Northwind" are changes; "My brother
    lives in Lisbon" is a fact about someone else. Embedding similarity alone replaced such
    facts: sentences that differ in one name embed above a cosine of 0.85."""
    subject = fact_subject(old)
    if subject != fact_subject(new):
        return False
    old_rest = _SUBJECT_WORD.findall(old.casefold())[len(subject) :]
    new_rest = _SUBJECT_WORD.findall(new.casefold())[len(subject) :]
    matcher = difflib.SequenceMatcher(None, old_rest, new_rest, autojunk=False)
    replaced = [(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op == "replace"]
    slots = len(replaced) >= 2 and all(a <= _SLOT_WORDS and b <= _SLOT_WORDS for a, b in replaced)
    return not slots


#: the ASCII letters and digits a fact starts with: every fact with its key starts with them
#: too, in any case (stored content is stripped), which both databases' ``LIKE`` can fold
_KEY_HEAD = re.compile(r"[A-Za-z0-9]+")


def _key_pattern(content: str) -> str:
    """A case-insensitive regular expression (``iregex``) that every stored fact with the key
    of ``content`` matches: its key's words with any run of whitespace between them, then the
    colon. It only narrows the rows read; ``fact_key`` decides. A plain ``istartswith`` of the
    key missed the same key with other spacing ("Preferred  language:"), and on SQLite, whose
    ``LIKE`` folds only ASCII, one with another case of a non-ASCII letter ("Ärger:" and
    "ärger:"), so both facts stayed in force there and not on PostgreSQL. The escapes of
    ``re.escape`` (a backslash before a non-alphanumeric character) mean the character itself
    in PostgreSQL's regular expressions too."""
    words = content.split(":", 1)[0].split()
    return r"^\s*" + r"\s+".join(re.escape(word) for word in words) + r"\s*:"


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


class KnowledgeMemory:
    """Long-term facts of one owner, for one agent key and namespace.

    Args:
        owner: a saved user or a user id (required).
        agent_key: an agent's key; facts of other agent keys are not seen (exact match).
            None means the facts stored without an agent key.
        namespace: a further exact partition (a project, a tenant); None means none.
        max_log_days: transient entries older than this are hidden and pruned (days).
        max_context_entries: most recent entries in ``build_context()``.
        max_entries: most live facts kept in the scope; the least important (then transient,
            then oldest) are deleted when a new fact goes over it. None: no limit.
        max_context_tokens: token bound of ``build_context()``; default
            ``AGENTMEMORY["KNOWLEDGE_CONTEXT_MAX_TOKENS"]``.
        embedder: an ``Embedder`` used to find near-duplicates that a new fact supersedes
            (default ``AGENTMEMORY["EMBEDDER"]``; none: only exact repeats and "key: value"
            facts are recognised).
        backend: the ``RecallBackend`` of ``recall()``; default ``AGENTMEMORY["RECALL_BACKEND"]``.
        kind: which memory's facts this object reads and writes (``Fact.kind``):
            ``"knowledge"`` (the default) or ``"semantic"`` (``SemanticMemory``'s store). The
            two never see each other's facts: no repeat, supersession, recall or delete
            crosses them.

    Raises:
        MemoryScopeError: no owner, or a scope value that is not a string.
        ValueError: a negative ``max_log_days``, a non-positive ``max_context_entries``,
            ``max_entries`` or ``max_context_tokens``, a ``supersede_similarity`` that is
            not a cosine (-1.0 to 1.0), or an unknown ``kind``.
    """

    def __init__(
        self,
        owner: Any,
        *,
        agent_key: str | None = None,
        namespace: str | None = None,
        max_log_days: int = 30,
        max_context_entries: int = 50,
        max_entries: int | None = None,
        max_context_tokens: int | None = None,
        embedder: Embedder | None = None,
        backend: RecallBackend | None = None,
        supersede_similarity: float | Literal["default"] | None = "default",
        using: str | None = None,
        kind: str = FactKind.KNOWLEDGE,
    ) -> None:
        self.scope = MemoryScope.of(owner, agent_key, namespace)
        if kind not in FactKind.values:
            raise ValueError(f"kind must be one of {', '.join(FactKind.values)}, not {kind!r}")
        self.kind = str(kind)
        for name, value, low in (
            ("max_log_days", max_log_days, 0),
            ("max_context_entries", max_context_entries, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
        for name, bound in (("max_entries", max_entries), ("max_context_tokens", max_context_tokens)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
                # 0 used to mean the default and a string failed only in build_context()
                raise ValueError(f"{name} must be a positive integer or None, not {bound!r}")
        if supersede_similarity not in (None, "default") and (
            isinstance(supersede_similarity, bool)
            or not isinstance(supersede_similarity, int | float)
            or not -1.0 <= supersede_similarity <= 1.0  # also refuses NaN
        ):
            raise ValueError(
                f"supersede_similarity must be a cosine from -1.0 to 1.0, None or 'default', "
                f"not {supersede_similarity!r}"
            )
        conf = app_settings()
        self.max_log_days = max_log_days
        self.max_context_entries = max_context_entries
        self.max_entries = max_entries
        self.max_context_tokens = (
            conf.KNOWLEDGE_CONTEXT_MAX_TOKENS if max_context_tokens is None else max_context_tokens
        )
        self.embedder = embedder if embedder is not None else get_embedder()
        self._backend = backend
        self.supersede_similarity = (
            conf.FACT_SUPERSEDE_SIMILARITY if supersede_similarity == "default" else supersede_similarity
        )
        self.using = using or router.db_for_write(Fact)
        self._owner_checked = False

    def __repr__(self) -> str:
        s = self.scope
        kind = "" if self.kind == FactKind.KNOWLEDGE else f", kind={self.kind!r}"
        return (
            f"KnowledgeMemory(owner={s.owner_id}, agent_key={s.agent_key!r}, namespace={s.namespace!r}{kind})"
        )

    # -- querysets -------------------------------------------------------------------------

    @property
    def backend(self) -> RecallBackend:
        if self._backend is None:
            self._backend = get_backend(embedder=self.embedder)
        return self._backend

    def all_facts(self) -> Any:
        """Every stored fact of the scope: live, superseded and expired (the history)."""
        return Fact.objects.using(self.using).filter(**self.scope.filter(), kind=self.kind)

    def live_facts(self, now: datetime | None = None) -> Any:
        """Facts in default recall at ``now`` (an aware datetime; default the current time):
        not superseded, not expired, and, for transient entries, not older than
        ``max_log_days``."""
        now = _clock(now)
        cutoff = days_before(now, self.max_log_days)
        return self.all_facts().live(now).filter(Q(persistent=True) | Q(created_at__gte=cutoff))

    # -- writing ---------------------------------------------------------------------------

    def remember(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        supersedes: int | uuid.UUID | None = None,
    ) -> str:
        """Store a fact and return a one-line confirmation for the model or the user, such as
        ``"Remembered (preferences, persistent): Prefers dark mode"``. See ``store()`` for
        the arguments and errors."""
        result = self.store(
            content,
            category,
            persistent,
            importance=importance,
            ttl=ttl,
            source_message=source_message,
            supersedes=supersedes,
        )
        fact = result.fact
        kind = "persistent" if fact.persistent else "recent"
        if result.action == "duplicate":
            return f"Already remembered ({fact.category}): {fact.content}"
        if result.action == "updated":
            return f"Updated memory ({fact.category}, {kind}): {fact.content}"
        if result.action == "superseded":
            return f"Remembered ({fact.category}, {kind}), replacing an older fact: {fact.content}"
        return f"Remembered ({fact.category}, {kind}): {fact.content}"

    def store(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        supersedes: int | uuid.UUID | None = None,
        now: datetime | None = None,
    ) -> RememberResult:
        """Store a fact and say what happened (see ``RememberResult``).

        Args:
            content: the fact, 1 to ``AGENTMEMORY["MAX_FACT_CHARS"]`` characters, no NUL.
            category: a label such as "preferences" (1-100 characters).
            persistent: kept until forgotten (True) or a recent entry that ages out after
                ``max_log_days`` (False).
            importance: 0.0-1.0 (default 0.5); ranks recall and decides eviction.
            ttl: seconds (or a timedelta) until the fact expires, at most ``MAX_TTL_SECONDS``
                (100 years); None: no expiry.
            source_message: the stored message the fact came from (a message of one of the
                owner's conversations).
            supersedes: a live fact of this scope that the new one replaces: its id (primary
                key) or its public ``uuid``. Checked even when the content is a repeat: then
                the named fact becomes history of the fact already in force ("updated"). A
                fact naming itself is changed in place (its persistence is set either way),
                or, with another category, replaced by a new fact in that category.
            now: the clock (tests and imports); default the current time.

        Returns:
            ``RememberResult``. A live fact of the same scope with the same content (up to
            whitespace) is a repeat: nothing new is stored. Otherwise a new fact is stored and
            supersedes ``supersedes``, a live fact of the same category with the same
            "key:" prefix, or the most similar live fact of the same category at or above
            ``AGENTMEMORY["FACT_SUPERSEDE_SIMILARITY"]`` when an embedder is configured.
            The new content is always stored.

        Raises:
            InvalidFactError: bad content, category, importance, ttl, ``source_message`` or
                ``supersedes``.
            MemoryScopeError: the owner id names no user.
            ValueError: ``now`` is a naive datetime.
        """
        now = _clock(now)
        content, category, importance_value, ttl_seconds = self._validate(content, category, importance, ttl)
        if not isinstance(persistent, bool):
            raise InvalidFactError(f"persistent must be a bool, not {persistent!r}")
        digest = content_hash(content)
        expires_at = now + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None
        self._check_owner()
        source_id = self._source_id(source_message)
        vector = self._embed(content)
        for _attempt in range(3):
            try:
                with transaction.atomic(using=self.using):
                    self._lock_scope()
                    return self._store(
                        content,
                        category,
                        persistent,
                        importance,
                        importance_value,
                        expires_at,
                        source_id,
                        supersedes,
                        digest,
                        vector,
                        now,
                    )
            except IntegrityError:
                # Two writers stored the same content at once: the unique constraint on live
                # content kept one; the retry reports it as the repeat it now is.
                continue
        raise InvalidFactError("could not store the fact: concurrent writers kept conflicting")

    def prepare(
        self,
        content: str,
        category: str = "general",
        persistent: bool = False,
        *,
        importance: float | None = None,
        ttl: float | timedelta | None = None,
        source_message: Message | int | None = None,
        metadata: dict[str, Any] | None = None,
        embed: bool = True,
        now: datetime | None = None,
    ) -> PreparedFact:
        """The part of ``store()`` that takes no lock: check the fact (same arguments and
        errors as ``store()``) and embed it (a model call when an embedder is configured).
        ``store_prepared()`` then writes it, inside the caller's transaction. A service that
        writes facts together with rows of its own (compaction stores the facts of the turns
        it folds in the transaction that stores the summary) prepares them first, so that no
        model is called while it holds its locks.

        ``metadata`` is kept on a fact this creates (``Fact.metadata``); a repeat of a live
        fact keeps the live fact's metadata. ``embed=False`` leaves the vector out (an
        embedder that failed: ``manage.py rebuild_recall_index`` adds the missing vectors
        later; until then only the "key:" rule and exact repeats find what it supersedes).
        """
        now = _clock(now)
        content, category, importance_value, ttl_seconds = self._validate(content, category, importance, ttl)
        if not isinstance(persistent, bool):
            raise InvalidFactError(f"persistent must be a bool, not {persistent!r}")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidFactError(f"metadata must be a dict, not {type(metadata).__name__}")
        self._check_owner()
        return PreparedFact(
            content=content,
            category=category,
            persistent=persistent,
            importance_given=importance,
            importance=importance_value,
            expires_at=now + timedelta(seconds=ttl_seconds) if ttl_seconds is not None else None,
            source_id=self._source_id(source_message),
            digest=content_hash(content),
            vector=self._embed(content) if embed else None,
            metadata=dict(metadata or {}),
        )

    def store_prepared(self, prepared: PreparedFact, *, now: datetime | None = None) -> RememberResult:
        """Write a fact made by ``prepare()`` by the rules of ``store()`` (repeat, supersede),
        in a savepoint of the caller's transaction (or a transaction of its own outside one),
        after taking the scope's write lock (``lock_scope()``). Queries only: no model call.

        Returns:
            ``RememberResult``, as ``store()``.

        Raises:
            InvalidFactError: concurrent writers kept conflicting (three tries).
        """
        now = _clock(now)
        for _attempt in range(3):
            try:
                with transaction.atomic(using=self.using):
                    self._lock_scope()
                    result = self._store(
                        prepared.content,
                        prepared.category,
                        prepared.persistent,
                        prepared.importance_given,
                        prepared.importance,
                        prepared.expires_at,
                        prepared.source_id,
                        None,
                        prepared.digest,
                        prepared.vector,
                        now,
                    )
                    if prepared.metadata and result.action in ("created", "superseded"):
                        Fact.objects.using(self.using).filter(pk=result.fact.pk).update(
                            metadata=prepared.metadata
                        )
                        result.fact.metadata = dict(prepared.metadata)
                    return result
            except IntegrityError:
                continue
        raise InvalidFactError("could not store the fact: concurrent writers kept conflicting")

    def lock_scope(self) -> None:
        """Take the scope's write lock for the rest of the caller's transaction (PostgreSQL;
        see ``_lock_scope``). A service that also locks rows of its own takes this lock first,
        so that it and ``store()`` called inside a request's transaction always lock in the
        same order."""
        self._lock_scope()

    def _check_owner(self) -> None:
        """Refuse an owner id that names no user, once per instance. The foreign key would
        refuse the fact anyway, but late: at the commit, or, in autocommit mode, as an
        ``IntegrityError`` that ``store()`` took for a race of writers of the same content
        (three retries, then "concurrent writers kept conflicting").

        Raises:
            MemoryScopeError: no user has the owner id.
        """
        if self._owner_checked:
            return
        from django.contrib.auth import get_user_model

        users = get_user_model()._default_manager.using(self.using)
        if not users.filter(pk=self.scope.owner_id).exists():
            raise MemoryScopeError(f"no user with id {self.scope.owner_id}")
        self._owner_checked = True

    def _source_id(self, source_message: Any) -> int | None:
        """The id of ``source_message`` (a ``Message`` or its id), checked to be a stored
        message of one of the owner's conversations: a fact shows its source conversation, so
        another user's message (or none at all: a foreign key error taken for a write race)
        is refused.

        Raises:
            InvalidFactError: not a message of the owner's conversations.
        """
        if source_message is None:
            return None
        pk = source_message.pk if isinstance(source_message, Message) else source_message
        if isinstance(pk, bool) or not isinstance(pk, int) or not 0 < pk <= MAX_ID:
            raise InvalidFactError(f"source_message must be a stored message or its id, not {pk!r}")
        owned = Message.objects.using(self.using).filter(pk=pk, conversation__owner_id=self.scope.owner_id)
        if not owned.exists():
            raise InvalidFactError(f"source_message {pk} is not a message of this owner's conversations")
        return pk

    def _lock_scope(self) -> None:
        """Serialise the writers of one scope until the transaction ends.

        Storing reads the scope's live facts (repeats, the "key:" fact or the similar fact to
        supersede, eviction) and then writes. Two writers reading at once would each supersede
        the same old fact and both new facts would stay live (two "Hometown:" facts in force).
        PostgreSQL: a transaction-level advisory lock on a 64-bit hash of the scope
        (``pg_advisory_xact_lock``), so writers of other scopes never wait. SQLite writes one
        transaction at a time; with ``"transaction_mode": "IMMEDIATE"`` (check
        ``agentmemory.W003``) the second writer waits at the start of its transaction and
        reads the first one's fact.
        """
        connection = connections[self.using]
        if connection.vendor != "postgresql":
            return
        scope = f"agentmemory.fact\0{self.scope.owner_id}\0{self.scope.agent_key}\0{self.scope.namespace}"
        key = int.from_bytes(hashlib.blake2b(scope.encode(), digest_size=8).digest(), "big", signed=True)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])

    def _validate(
        self, content: Any, category: Any, importance: Any, ttl: Any
    ) -> tuple[str, str, float, float | None]:
        limit = app_settings().MAX_FACT_CHARS
        if not isinstance(content, str) or not content.strip():
            raise InvalidFactError("content must be a non-empty string")
        if len(content) > limit:
            raise InvalidFactError(f"content must be at most {limit} characters")
        if problem := text_problem(content):
            raise InvalidFactError(f"content {problem}")
        if (
            not isinstance(category, str)
            or not category.strip()
            or len(category) > 100
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
        return content.strip(), category.strip(), value, _seconds(ttl)

    def _embed(self, content: str) -> list[float] | None:
        if self.embedder is None:
            return None
        from agentmemory.calls import usage_scope

        with usage_scope(owner_id=self.scope.owner_id, agent_key=self.scope.agent_key):
            (vector,) = self.embedder.embed([content])
        return vector

    def _store(
        self,
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
    ) -> RememberResult:
        live = self.live_facts(now)
        # ``supersedes`` is checked first: a repeat does not make a bad id acceptable
        target = self._target(live, supersedes) if supersedes is not None else None
        same = self.all_facts().filter(superseded_by__isnull=True, content_hash=digest).first()
        replaced: list[int] = []
        old_ids: list[int] | None = None
        if same is not None and not live.filter(pk=same.pk).exists():
            # An expired or aged-out copy is out of recall: the new fact replaces it, and it
            # stays, with the history behind it, as history of the new fact. Until the new
            # fact exists it points at itself, which takes it out of the live-content
            # uniqueness (one transaction: nobody sees that).
            Fact.objects.using(self.using).filter(pk=same.pk).update(superseded_by=same.pk)
            replaced = [same.pk]
            same = None
        if same is not None and target == same.pk and category != same.category:
            # The fact itself, moved to another category: a change like new content, stored as
            # a new fact that supersedes it (out of the live-content uniqueness first, as above).
            Fact.objects.using(self.using).filter(pk=same.pk).update(superseded_by=same.pk)
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
                self._chain(target, head=same)
                changed.append("superseded")
            if not changed:
                return RememberResult(same, "duplicate")
            if fields := [name for name in changed if name != "superseded"]:
                same.save(update_fields=[*fields, "updated_at"])
            superseded = (target,) if target is not None and target != same.pk else ()
            return RememberResult(same, "updated", superseded)

        if old_ids is None and target is not None:
            old_ids = [target]
        elif old_ids is None:
            old_ids = self._superseded_candidates(live, content, category, vector)
        fact = Fact.objects.using(self.using).create(
            owner_id=self.scope.owner_id,
            agent_key=self.scope.agent_key,
            namespace=self.scope.namespace,
            kind=self.kind,
            content=content,
            content_hash=digest,
            category=category,
            importance=importance,
            persistent=persistent,
            expires_at=expires_at,
            source_message_id=source_id,
            created_at=now,
        )
        if vector is not None and self.embedder is not None:
            FactEmbedding.objects.using(self.using).create(
                fact=fact, model=self.embedder.model, dimensions=len(vector), vector=to_bytes(vector)
            )
            mirror_vectors(self.using, [fact], self.embedder.model, [vector])
        self._chain(*old_ids, *replaced, head=fact)
        self._evict(now, keep=fact.pk)
        return RememberResult(fact, "superseded" if old_ids else "created", tuple(old_ids))

    def _chain(self, *ids: int, head: Fact) -> None:
        """Make the facts ``ids`` and their history history of ``head``: deleting the head
        deletes the whole chain."""
        if ids:
            Fact.objects.using(self.using).filter(superseded_by_id__in=ids).update(superseded_by=head)
            Fact.objects.using(self.using).filter(pk__in=ids).update(superseded_by=head)

    @staticmethod
    def _target(live: Any, supersedes: Any) -> int:
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

    def _superseded_candidates(
        self, live: Any, content: str, category: str, vector: list[float] | None
    ) -> list[int]:
        same_category = live.filter(category=category)
        key = fact_key(content)
        if key is not None:
            rows = same_category
            if head := _KEY_HEAD.match(content):
                # a cheap condition first: SQLite runs REGEXP in Python, row by row
                rows = rows.filter(content__istartswith=head.group(0))
            rows = rows.filter(content__iregex=_key_pattern(content))
            ids = [pk for pk, text in rows.values_list("pk", "content") if fact_key(text) == key]
            if ids:
                return ids
        threshold = self.supersede_similarity
        if vector is None or threshold is None or self.embedder is None:
            return []
        rows = list(
            FactEmbedding.objects.using(self.using)
            # vectors of another length (the model's dimensions changed) do not compare
            .filter(model=self.embedder.model, dimensions=len(vector), fact__in=same_category.values("pk"))
            .values_list("fact_id", "vector", "fact__content")
        )
        if not rows:
            return []
        xp = numpy()
        scores = cosine_scores(vector, xp.vstack([from_bytes(v) for _, v, _text in rows]))
        # the most similar fact about the same subject: similar words alone (another person,
        # another appointment) do not make a fact out of date
        for index in (int(i) for i in xp.argsort(-scores, kind="stable")):
            if scores[index] < threshold:
                break
            if same_subject(rows[index][2], content):
                return [rows[index][0]]
        return []

    def _evict(self, now: datetime, keep: int) -> int:
        if self.max_entries is None:
            return 0
        live = self.live_facts(now)
        excess = live.count() - self.max_entries
        if excess <= 0:
            return 0
        victims = list(
            live.exclude(pk=keep)
            .order_by("importance", "persistent", "created_at", "pk")
            .values_list("pk", flat=True)[:excess]
        )
        return self._delete_ids(victims)

    # -- reading ---------------------------------------------------------------------------

    def recall(
        self, query: str, *, k: int = 5, category: str | None = None, now: datetime | None = None
    ) -> list[FactHit]:
        """Live facts of the scope that match ``query``, best first: the backend's relevance
        times importance and recency boosts (see ``agentmemory.recall.boost``). Never changes
        an expiry.

        The returned facts are marked as recalled (``last_recalled_at`` set to ``now``,
        ``recall_count`` raised by one) when the caller's transaction commits, or at once
        outside a transaction; a transaction rolled back records nothing. On PostgreSQL that
        small update commits without waiting for the write-ahead log to reach the disk
        (``synchronous_commit = off`` for that transaction alone): a crash of the database
        server may lose the counters of the last recalls, never a fact. The ``FactHit`` facts
        show the values read, before this recall.

        Queries: with the full-text backend on PostgreSQL, one statement ranks, reads and (in
        autocommit mode) records the facts (``agentmemory.recall.fulltext.recall_facts``);
        inside a transaction the update is one more statement after the commit. Elsewhere:
        the backend's ranking, a read of the hits and the update.

        Raises:
            ValueError: ``k`` not from 1 to 100, a naive ``now``, or a ``category`` that is
                not text the database can compare (``InvalidFactError``). TypeError: ``query`` not a string.
        """
        from agentmemory.recall import MAX_K, MIN_CANDIDATES, report_recall

        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ValueError(f"k must be an integer from 1 to {MAX_K}, not {k!r}")
        query = bounded_query(query)  # the first MAX_QUERY_CHARS characters are read
        now = _clock(now)
        facts = self.live_facts(now)
        if category is not None:
            facts = facts.filter(category=_category_filter(category))
        from agentmemory.calls import usage_scope

        started = time.perf_counter()
        backend = self.backend
        limit = max(k * 5, MIN_CANDIDATES)
        found: list[tuple[Fact, float, float]] | None = None
        recorded = False
        with usage_scope(owner_id=self.scope.owner_id, agent_key=self.scope.agent_key):
            connection = connections[self.using]
            # outside a transaction the ranking statement records the recall itself
            record_now = connection.get_autocommit() and not connection.in_atomic_block
            if type(backend) is FullTextBackend:  # a subclass may rank its own way
                found = fulltext.recall_facts(facts, query, candidates=limit, k=k, now=now, record=record_now)
                recorded = record_now and found is not None
            if found is None:
                ranked = backend.rank(facts, query, limit)
                rows = Fact.objects.using(self.using).in_bulk([pk for pk, _score in ranked]) if ranked else {}
                top = max((score for _pk, score in ranked), default=0.0)
                found = [(rows[pk], score, top) for pk, score in ranked if pk in rows]
        if not found:
            report_recall("facts", self.scope.owner_id, backend, 0, started)
            return []
        hits = [FactHit(f, boost(score, best, f.created_at, f.importance, now)) for f, score, best in found]
        hits.sort(key=lambda h: (-h.score, -h.fact.pk))
        hits = hits[:k]
        if not recorded:
            _record_recall(self.using, [h.fact.pk for h in hits], now)
        report_recall("facts", self.scope.owner_id, backend, len(hits), started)
        return hits

    def get_persistent_facts(self) -> dict[str, list[str]]:
        """Live persistent facts by category (categories and facts in the order stored)."""
        out: dict[str, list[str]] = {}
        for category, content in (
            self.live_facts()
            .filter(persistent=True)
            .order_by("created_at", "pk")
            .values_list("category", "content")
        ):
            out.setdefault(category, []).append(content)
        return out

    def get_recent_entries(self, days: int = 7, limit: int = 50) -> list[dict[str, Any]]:
        """The daily log: live entries of the last ``days`` days, persistent and transient,
        newest first, at most ``limit``: dicts with ``id``, ``timestamp`` (ISO 8601, UTC,
        "Z"), ``category``, ``content``, ``persistent``, ``importance`` and ``expires_at``
        (ISO 8601 or None).

        The knowledge seed writes every entry to its daily log, a persistent one as well as
        MEMORY.md, so a persistent fact stored in the last ``days`` days is listed here too
        (``persistent`` True); ``build_context()`` names it once, under [Long-term Memory].
        A fact replaced since (a changed "key: value" fact) is not listed."""
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise ValueError(f"days must be a non-negative integer, not {days!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, not {limit!r}")
        now = timezone.now()
        rows = (
            self.live_facts(now)
            .filter(in_daily_log=True, created_at__gte=days_before(now, days))
            .order_by("-created_at", "-pk")[:limit]
        )
        return [_entry(f) for f in rows]

    def build_context(self) -> str:
        """``build_context_with_ids()``'s text."""
        return self.build_context_with_ids()[0]

    def build_context_with_ids(self) -> tuple[str, tuple[int, ...]]:
        """The block put into the system prompt, and the ids of the facts it shows (so that
        a memory block recalled beside it does not repeat them)::

            [Long-term Memory]
            ## preferences
            - Preferred language: Python

            [Recent Memory]
            - [2026-03-13 10:16] (context) Working on Project Atlas this week

        Long-term memory holds the live persistent facts grouped by category (most important
        first when they do not all fit); recent memory the newest ``max_context_entries``
        transient entries, oldest first. The whole block stays within ``max_context_tokens``
        by the configured token counter: an entry too long for the tokens left is skipped and
        the next ones still fill the rest (one long fact never empties the block). A section
        with nothing in it is left out, and an empty memory gives "". Reading never changes a
        fact.
        """
        counter = get_token_counter()
        budget = self.max_context_tokens
        now = timezone.now()
        live = self.live_facts(now)
        persistent = list(
            live.filter(persistent=True)
            .order_by("-importance", "-created_at", "-pk")
            .values_list("pk", "category", "content", "created_at")[: self.max_context_entries * 4]
        )
        kept: list[tuple[int, str, str, datetime]] = []
        used = counter.count_text("[Long-term Memory]\n")
        for row in persistent:
            cost = counter.count_text(f"## {row[1]}\n- {_indented(row[2])}\n")
            if used + cost > budget:
                # one fact too long for what is left must not keep out the smaller ones after it
                continue
            kept.append(row)
            used += cost
        sections: list[str] = []
        if kept:
            kept.sort(key=lambda r: (r[3], r[0]))
            groups: dict[str, list[str]] = {}
            for _pk, category, content, _created in kept:
                groups.setdefault(category, []).append(content)
            body = "\n\n".join(
                f"## {category}\n" + "\n".join(f"- {_indented(c)}" for c in items)
                for category, items in groups.items()
            )
            sections.append(f"[Long-term Memory]\n{body}")
        recent_rows = list(
            live.filter(persistent=False)
            .order_by("-created_at", "-pk")
            .values_list("category", "content", "created_at", "pk")[: self.max_context_entries]
        )
        lines: list[str] = []
        used += counter.count_text("[Recent Memory]\n")
        shown = [row[0] for row in kept]
        for category, content, created, pk in recent_rows:
            line = (
                f"- [{created.astimezone(UTC).strftime('%Y-%m-%d %H:%M')}] ({category}) {_indented(content)}"
            )
            cost = counter.count_text(line + "\n")
            if used + cost > budget:
                continue
            lines.append(line)
            shown.append(pk)
            used += cost
        if lines:
            sections.append("[Recent Memory]\n" + "\n".join(reversed(lines)))
        return "\n\n".join(sections), tuple(shown)

    # -- deleting --------------------------------------------------------------------------

    def forget(self, fact_id: int | uuid.UUID) -> int:
        """Delete one fact of this scope with its history (the facts it superseded) and its
        embeddings and index entries; returns the number of facts deleted (0 when the id is
        not a fact of this scope). ``fact_id`` is its id (primary key) or its public ``uuid``.

        Raises:
            TypeError: ``fact_id`` is neither an int nor a ``uuid.UUID``.
        """
        if isinstance(fact_id, uuid.UUID):
            head = self.all_facts().filter(uuid=fact_id).first()
        elif isinstance(fact_id, bool) or not isinstance(fact_id, int):
            raise TypeError(f"fact_id must be an int or a uuid.UUID, not {type(fact_id).__name__}")
        else:
            head = self.all_facts().filter(pk=fact_id).first()
        if head is None:
            return 0
        while head.superseded_by_id is not None:  # forgetting history forgets the fact it led to
            head = Fact.objects.using(self.using).get(pk=head.superseded_by_id)
        return self._delete_ids([head.pk])

    def forget_all(self, *, category: str | None = None) -> int:
        """Delete every fact of this scope (or of one category), history included; returns how
        many facts were deleted. Deletes in batches of ``DELETE_BATCH`` until none is left,
        so no page size limits it; other owners' rows are never touched.

        Raises:
            InvalidFactError: ``category`` is not text the database can compare.
        """
        facts = self.all_facts()
        if category is not None:
            facts = facts.filter(category=_category_filter(category))
        return self._delete_ids(facts.values_list("pk", flat=True), count_all=True)

    def clear(self) -> None:
        """Forget every fact of this scope (the seed's "remove all knowledge")."""
        self.forget_all()

    def clear_logs(self) -> None:
        """Empty the daily log of this scope: forget the transient entries, and take the
        persistent facts out of ``get_recent_entries()`` while keeping them (the seed's
        MEMORY.md is kept)."""
        self._delete_ids(
            self.all_facts().filter(persistent=False).values_list("pk", flat=True), count_all=True
        )
        self.all_facts().filter(persistent=True, in_daily_log=True).update(in_daily_log=False)

    def prune_logs(self, max_days: int | None = None) -> int:
        """Delete transient entries older than ``max_days`` (default ``max_log_days``) and
        expired facts of this scope; returns how many facts were deleted. With the default,
        only facts that reads already hide are deleted. Persistent facts older than that
        are kept and leave the daily log (``get_recent_entries()``)."""
        days = self.max_log_days if max_days is None else max_days
        if isinstance(days, bool) or not isinstance(days, int) or days < 0:
            raise ValueError(f"max_days must be a non-negative integer, not {max_days!r}")
        now = timezone.now()
        cutoff = days_before(now, days)
        stale = self.all_facts().filter(Q(persistent=False, created_at__lt=cutoff) | Q(expires_at__lte=now))
        deleted = self._delete_ids(stale.values_list("pk", flat=True), count_all=True)
        # the log entries of older persistent facts go too; the facts stay (MEMORY.md)
        self.all_facts().filter(persistent=True, in_daily_log=True, created_at__lt=cutoff).update(
            in_daily_log=False
        )
        return deleted

    def _delete_ids(self, ids: Any, count_all: bool = False) -> int:
        """Delete facts by id in batches (their history and embeddings cascade; the full-text
        index follows in the same transaction); returns the facts deleted."""
        deleted = 0
        if not count_all:
            ids = list(ids)
            for start in range(0, len(ids), DELETE_BATCH):
                deleted += self._delete_batch(ids[start : start + DELETE_BATCH])
            return deleted
        while True:
            batch = list(ids[:DELETE_BATCH])
            if not batch:
                return deleted
            removed = self._delete_batch(batch)
            if not removed:
                return deleted
            deleted += removed

    def _delete_batch(self, ids: Sequence[int]) -> int:
        with transaction.atomic(using=self.using):
            _total, per_model = (
                Fact.objects.using(self.using).filter(owner_id=self.scope.owner_id, pk__in=ids).delete()
            )
        return per_model.get(Fact._meta.label, 0)


def days_before(now: datetime, days: int) -> datetime:
    """``now`` minus ``days`` days, or the earliest time a ``datetime`` holds when that is
    further back: a bound such as ``max_log_days=10**6`` (meaning "keep everything") made
    every read fail with OverflowError."""
    try:
        return now - timedelta(days=days)
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def _clock(now: Any) -> datetime:
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


def _category_filter(category: Any) -> str:
    """``category`` as a filter value; a value the database cannot compare (not a string, a
    NUL, a lone surrogate) is refused here instead of failing in the database driver.

    Raises:
        InvalidFactError: (a ``ValueError``) ``category`` is not storable text.
    """
    if not isinstance(category, str) or text_problem(category):
        raise InvalidFactError(f"category must be text without NUL or lone surrogates, not {category!r}")
    return category


def _record_recall(using: str, ids: list[int], now: datetime) -> None:
    """Mark the facts ``ids`` as recalled at ``now`` when the current transaction commits (at
    once in autocommit mode; in a transaction managed by hand, inside it)."""
    connection = connections[using]
    if connection.in_atomic_block or connection.get_autocommit():
        transaction.on_commit(partial(_mark_recalled, using, ids, now), using=using, robust=True)
    else:
        _mark_recalled(using, ids, now, durable=True)


def _mark_recalled(using: str, ids: list[int], now: datetime, durable: bool = False) -> None:
    """``last_recalled_at = now``, ``recall_count + 1`` for the facts ``ids``: one statement.

    On PostgreSQL, unless ``durable``, its transaction commits without waiting for the
    write-ahead log to reach the disk (``synchronous_commit`` off for that transaction only,
    set by ``set_config(..., true)`` inside the statement): a counter is not worth a wait for
    the disk, which took 8-18 ms a recall on a loaded machine (docs/benchmarks.md, "Facts at
    scale"). It runs after the caller's commit or in autocommit mode, so no other write
    shares that transaction.
    """
    connection = connections[using]
    most = max_recall_count(using)
    if connection.vendor != "postgresql" or durable:
        Fact.objects.using(using).filter(pk__in=ids).update(
            last_recalled_at=now,
            recall_count=Case(
                When(recall_count__lt=most, then=F("recall_count") + 1),
                default=F("recall_count"),
                output_field=PositiveIntegerField(),
            ),
        )
        return
    table = connection.ops.quote_name(Fact._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)) "
            f"UPDATE {table} SET last_recalled_at = %s, recall_count = "
            "CASE WHEN recall_count < %s THEN recall_count + 1 ELSE recall_count END "
            "WHERE id = ANY(%s) AND EXISTS (SELECT 1 FROM async)",
            [now, most, list(ids)],
        )


def max_recall_count(using: str) -> int:
    """The largest ``Fact.recall_count`` the database ``using`` holds (2,147,483,647 on
    PostgreSQL): the counter stops there. Counting past it raised "integer out of range" on
    PostgreSQL, failing the recall that counted, and turned the column into a float on
    SQLite."""
    field = Fact._meta.get_field("recall_count")
    return int(connections[using].ops.integer_field_range(field.get_internal_type())[1])


def _indented(content: str) -> str:
    """A fact's later lines indented under its bullet: unindented, a line of a fact could
    read as a heading or a bullet of its own ("## instructions", "- ...") in the context."""
    return content.replace("\n", "\n  ")


def _entry(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.pk,
        "timestamp": _iso(fact.created_at),
        "category": fact.category,
        "content": fact.content,
        "persistent": fact.persistent,
        "importance": fact.importance,
        "expires_at": _iso(fact.expires_at) if fact.expires_at else None,
    }


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- MEMORY.md ---------------------------------------------------------------------------------

MEMORY_MD_TITLE = "# Agent Memory"


@dataclass(frozen=True)
class ImportReport:
    """What ``import_memory_md`` did: facts created, already present (duplicates), updated
    or superseding an older fact, and lines that were not facts (skipped)."""

    created: int = 0
    duplicate: int = 0
    updated: int = 0
    superseded: int = 0
    skipped: int = 0


def export_memory_md(memory: KnowledgeMemory) -> str:
    """The scope's live persistent facts in the seed's ``MEMORY.md`` layout::

        # Agent Memory

        ## preferences
        - Preferred language: Python

    Categories and facts in the order stored; a fact spanning lines keeps its later lines
    indented under its bullet."""
    parts = [MEMORY_MD_TITLE]
    for category, facts in memory.get_persistent_facts().items():
        lines = "\n".join("- " + _indented(fact) for fact in facts)
        parts.append(f"## {category}\n{lines}")
    return "\n\n".join(parts) + "\n"


def import_memory_md(memory: KnowledgeMemory, text: str) -> ImportReport:
    """Store the facts of a ``MEMORY.md`` text as persistent facts of ``memory``'s scope:
    each ``- fact`` bullet under a ``## category`` heading (bullets before any heading go to
    "general"; indented lines continue the bullet above). Facts already stored, in force or
    as history (a fact since replaced), are repeats and add nothing, so importing twice
    changes nothing the second time, also for a file that lists a "key: value" fact and, below
    it, its new value.

    Raises:
        InvalidFactError: a fact that cannot be stored (nothing of the file is stored then).
    """
    counts = {"created": 0, "duplicate": 0, "updated": 0, "superseded": 0, "skipped": 0}
    facts: list[tuple[str, str]] = []
    category = "general"
    # a byte order mark is not text of the first line (it hid a "## category" heading there)
    for raw in text.removeprefix("\ufeff").splitlines():
        line = raw.rstrip()
        if line.startswith("## "):
            category = line[3:].strip() or "general"
        elif line.startswith(("- ", "* ")):
            facts.append((category, line[2:].strip()))
        elif line.startswith("  ") and line.strip() and facts:
            cat, content = facts[-1]
            facts[-1] = (cat, f"{content}\n{line.strip()}")
        elif line.strip() and not line.startswith("# "):
            counts["skipped"] += 1
    with transaction.atomic(using=memory.using):
        for cat, content in facts:
            if not content:
                counts["skipped"] += 1
                continue
            history = memory.all_facts().filter(superseded_by__isnull=False)
            if history.filter(content_hash=content_hash(content)).exists():
                # Already stored and since replaced: the seed's MEMORY.md appends a changed
                # "key: value" line below the old one, and storing the old line again made
                # it supersede the newer fact, which the next line then superseded back, two
                # new rows on every import of the same file.
                counts["duplicate"] += 1
                continue
            counts[memory.store(content, cat, persistent=True).action] += 1
    return ImportReport(**counts)
