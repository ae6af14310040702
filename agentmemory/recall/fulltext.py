"""Full-text indexes of facts and messages, per database, and the queries that use them.

- PostgreSQL: a stored generated column ``search_vector`` (``agentmemory_tsvector(content)``:
  ``to_tsvector('english', ...)`` of its normal form with punctuation read as spaces, as
  queries and SQLite's tokenizer read it: migration 0034; kept by the database on every insert
  and update) with a GIN index on the fact and message tables. Ranking is BM25 over the query's
  words (each word's weight from how many rows of the searched scope hold it), which
  ``ts_rank`` lacks.
- SQLite: FTS5 tables with external content (``agentmemory_fact_fts``,
  ``agentmemory_message_fts``, Porter stemming) kept in step by triggers, so an insert, an edit
  and a delete (a forget, a cascade from a deleted user or conversation) reach the index in the
  same transaction. Django's SQLite schema editor rebuilds a table to alter it, and the
  triggers go with the old table: a migration that alters ``agentmemory_fact`` or
  ``agentmemory_message`` on SQLite makes them again itself (as 0025 does, after the last
  such rebuild; ``tests/test_recall.py`` checks that ``migrate`` leaves them in place).
  ``ensure_sqlite_fulltext`` puts back triggers found missing and indexes the rows again:
  a repair of data, which ``manage.py rebuild_recall_index`` runs.
- Any other database: a word match over the content (correct, not indexed).

Every index sees the content in the normal form of ``agentmemory.recall.text.search_text``
(compatibility forms unfolded, optional marks such as diacritics and Arabic vowel marks left
out), and queries are made of words in the same form: PostgreSQL computes it in
``agentmemory_tsvector``; SQLite's triggers call the function ``agentmemory_search_text``,
registered on every connection Django opens (``register_sqlite_functions``), and its tokenizer
keeps combining marks inside words (``categories 'L* N* Co M*'``), as PostgreSQL's parser does.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from operator import add
from typing import Any

from django.db import connections
from django.db.models import F, Q, QuerySet

from agentmemory.recall.text import (
    literal_words,
    query_words,
    search_text,
    unspaced_terms,
)

PG_CONFIG = "english"

#: (FTS5 table, content table) pairs on SQLite
SQLITE_TABLES = (
    ("agentmemory_fact_fts", "agentmemory_fact"),
    ("agentmemory_message_fts", "agentmemory_message"),
)


#: the SQLite function the FTS5 triggers call: ``search_text`` of a content (NULL stays NULL)
SQLITE_SEARCH_TEXT = "agentmemory_search_text"


def _sqlite_statements(fts: str, table: str) -> list[str]:
    """The FTS5 table of ``table`` and its triggers, as migration 0025 makes them: the index
    holds ``search_text`` of the content and keeps combining marks in words. For the repair
    of ``ensure_sqlite_fulltext``; the migrations hold their own copies."""
    tokenize = "\"porter unicode61 remove_diacritics 2 categories 'L* N* Co M*'\""
    new, old = f"{SQLITE_SEARCH_TEXT}(new.content)", f"{SQLITE_SEARCH_TEXT}(old.content)"
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(content, content='{table}', "
        f"content_rowid='id', tokenize={tokenize})",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, {old}); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF content ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, {old}); "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, {new}); END",
    ]


def _sqlite_fill(execute: Any, fts: str, table: str) -> None:
    """Index every row of ``table`` anew in its normal form. FTS5's own ``'rebuild'`` reads
    the content table as stored, so it would index the rows not in that form."""
    execute(f"INSERT INTO {fts}({fts}) VALUES ('delete-all')")
    execute(f"INSERT INTO {fts}(rowid, content) SELECT id, {SQLITE_SEARCH_TEXT}(content) FROM {table}")


def _sqlite_search_text(content: str | None) -> str | None:
    return None if content is None else search_text(content)


def register_sqlite_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: give every SQLite connection Django opens the
    function ``agentmemory_search_text`` the FTS5 triggers call (deterministic, so SQLite
    may use it in indexes and triggers). A connection that Django does not open (the
    ``sqlite3`` shell) cannot write to the fact and message tables: their triggers need it."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(SQLITE_SEARCH_TEXT, 1, _sqlite_search_text, deterministic=True)


def ensure_sqlite_fulltext(using: str = "default") -> bool:
    """Put back FTS5 triggers that a table rebuild dropped and rebuild that index; True when
    something was repaired. A no-op on other databases or before the tables exist."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    repaired = False
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        names = {row[0] for row in cursor.fetchall()}
        for fts, table in SQLITE_TABLES:
            if fts not in names or table not in names:
                continue
            if {f"{fts}_ai", f"{fts}_ad", f"{fts}_au"} <= names:
                continue
            for sql in _sqlite_statements(fts, table):
                cursor.execute(sql)
            _sqlite_fill(cursor.execute, fts, table)
            repaired = True
    return repaired


def drop_removed_words(using: str = "default") -> None:
    """SQLite: merge each FTS5 index into one segment (FTS5's ``'optimize'``), so that the
    words of rows deleted or blanked leave the index's shadow tables (``*_fts_data``). An
    FTS5 delete writes a tombstone that repeats the row's words beside the entry it cancels;
    both stay in the table's blocks, readable with any SQLite client, until the segments
    they are in are merged into the oldest one. The cost is a rewrite of the index (about
    its size); the retention and erasure commands call it once, after their batches. A
    no-op on other databases (PostgreSQL's ``search_vector`` is the row's own column)."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        names = {row[0] for row in cursor.fetchall()}
        for fts, _table in SQLITE_TABLES:
            if fts in names:
                cursor.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")


#: characters of a text indexed when the whole text would make a ``tsvector`` over
#: PostgreSQL's 1 MB limit (migration 0017's ``agentmemory_tsvector``)
PG_LONG_TEXT_CHARS = 100_000
#: the function of the stored ``search_vector`` columns (migrations 0017 and 0025 hold it)
PG_TSVECTOR_FUNCTION = "agentmemory_tsvector"


def rebuild(using: str = "default") -> None:
    """Rebuild the full-text indexes from the stored rows (``rebuild_recall_index`` command):
    on SQLite every row is indexed anew in its normal form, on PostgreSQL the GIN indexes
    are rebuilt (the stored ``search_vector`` columns are computed by the database on every
    write)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            ensure_sqlite_fulltext(using)
            for fts, table in SQLITE_TABLES:
                _sqlite_fill(cursor.execute, fts, table)
        elif connection.vendor == "postgresql":
            cursor.execute("REINDEX INDEX agentmemory_fact_fts_idx")
            cursor.execute("REINDEX INDEX agentmemory_msg_fts_idx")


def _fts5_query(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def _pg_query(words: Sequence[str]) -> str:
    return " | ".join(words)


def search(
    queryset: QuerySet[Any],
    query: str,
    limit: int,
    *,
    places: dict[int, tuple[int, int]] | None = None,
    passages: dict[int, float] | None = None,
    scope: Any = None,
) -> list[tuple[int, float]]:
    """Ids of rows of ``queryset`` (facts or messages, already scoped) whose content matches
    any word of ``query``, best first, with a relevance score (higher is better; comparable
    only within one call). At most ``limit`` rows. ``places``: a dict that a message search
    on PostgreSQL or SQLite fills with ``{pk: (conversation_id, seq)}`` of the rows it
    ranked (at least those returned; not those only a substring match found).
    ``passages``: a dict that such a search (with ``places``) fills with ``{pk: score}``,
    the ``passage_scores`` of the rows it ranked, worked out from the same statement (on
    SQLite, that statement then also matches each query word on its own).
    ``scope``: a ``compiled.Scope`` of ``queryset.order_by().values("pk")`` (the same
    statement, its text compiled once), which a PostgreSQL message search uses for it."""
    words = query_words(query)
    if not words or limit <= 0:
        return []
    # the substring match reads the stored text, which is not in the normal form
    terms = unspaced_terms(literal_words(query))
    found = _indexed(queryset, words, limit, places, passages, scope)
    if terms:
        found = _with_unspaced(found, _unspaced(queryset, terms), limit)
    return found


def _indexed(
    queryset: QuerySet[Any],
    words: Sequence[str],
    limit: int,
    places: dict[int, tuple[int, int]] | None = None,
    passages: dict[int, float] | None = None,
    scope: Any = None,
) -> list[tuple[int, float]]:
    vendor = connections[queryset.db].vendor
    if vendor == "postgresql":
        if _is_fact(queryset):
            return _pg_fact_ids(queryset, words, limit)
        return _pg_bm25(queryset, words, limit, places, passages, scope)
    if vendor == "sqlite":
        model = queryset.model
        if places is not None and _located(model):
            return _sqlite_located(queryset, words, limit, places, passages)
        table = model._meta.db_table
        fts = f"{table}_fts"
        scope_sql, scope_params = queryset.order_by().values("pk").query.sql_with_params()
        # The match is materialised first: SQLite would otherwise run the scope subquery
        # once per matching row (300 ms instead of a few on a 3,000-message conversation).
        sql = (
            f"WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25({fts}) AS score FROM {fts} "
            f"WHERE {fts} MATCH %s) "
            f"SELECT hits.id, hits.score FROM hits WHERE hits.id IN ({scope_sql}) "
            f"ORDER BY hits.score, hits.id DESC LIMIT %s"
        )
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(sql, [_fts5_query(words), *scope_params, limit])
            # bm25() is lower for better matches; negate so that higher is better everywhere
            return [(pk, -float(score)) for pk, score in cursor.fetchall()]
    return _fallback(queryset, words, limit)


def _located(model: Any) -> bool:
    """Whether rows of ``model`` have a place (``conversation_id`` and ``seq``): messages."""
    return {"conversation_id", "seq"} <= {f.attname for f in model._meta.concrete_fields}


def _sqlite_located(
    queryset: QuerySet[Any],
    words: Sequence[str],
    limit: int,
    places: dict[int, tuple[int, int]],
    passages: dict[int, float] | None,
) -> list[tuple[int, float]]:
    """SQLite, messages: the FTS5 search of ``_indexed``, in the same one statement with each
    row's place (``places`` gets ``{pk: (conversation_id, seq)}``; no query of its own for
    them) and, when ``passages`` is given, per query word whether the row holds it (one
    FTS5 match per word, each materialised once), from which ``passages`` gets every
    returned row's ``passage_scores``."""
    model = queryset.model
    quote = connections[queryset.db].ops.quote_name
    table = quote(model._meta.db_table)
    fts = f"{model._meta.db_table}_fts"
    scope_sql, scope_params = queryset.order_by().values("pk").query.sql_with_params()
    flagged = range(len(words)) if passages is not None else range(0)
    each = "".join(
        f", w{i} AS MATERIALIZED (SELECT rowid AS id FROM {fts} WHERE {fts} MATCH %s)" for i in flagged
    )
    flags = "".join(f", hits.id IN w{i}" for i in flagged)
    sql = (
        f"WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25({fts}) AS score FROM {fts} "
        f"WHERE {fts} MATCH %s){each} "
        f"SELECT hits.id, hits.score, m.conversation_id, m.seq{flags} FROM hits "
        f"JOIN {table} AS m ON m.id = hits.id WHERE hits.id IN ({scope_sql}) "
        f"ORDER BY hits.score, hits.id DESC LIMIT %s"
    )
    params = [_fts5_query(words), *(_fts5_query([words[i]]) for i in flagged), *scope_params, limit]
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    places.update({row[0]: (row[2], row[3]) for row in rows})
    if passages is not None:
        passages.update(passage_scores([(row[0], row[2], row[3], row[4:]) for row in rows]))
    # bm25() is lower for better matches; negate so that higher is better everywhere
    return [(row[0], -float(row[1])) for row in rows]


#: a passage: this many consecutive places (``seq``) of a conversation, ``seq // PASSAGE_SEQS``.
#: Measured on LongMemEval-S (sessions of about 10-12 messages) and LoCoMo (one conversation
#: of 19-32 sessions): 8 raised both, 12 and 16 lowered LongMemEval's recall_all@5, whole
#: conversations left LoCoMo as it was (docs/benchmarks.md)
PASSAGE_SEQS = 8
#: BM25's term-frequency saturation for a passage taken as one document (``passage_scores``)
PASSAGE_K1 = 1.2


def passage_scores(rows: Sequence[tuple[int, int, int, Sequence[Any]]]) -> dict[int, float]:
    """Each candidate's passage score: BM25 (``PASSAGE_K1``; Robertson and Zaragoza 2009) of
    its passage (``PASSAGE_SEQS`` places of its conversation, as fixed windows: Callan,
    "Passage-level evidence in document retrieval", SIGIR 1994) taken as one document made
    of the passage's candidates, over the query's words: a word's frequency is the number
    of the passage's candidates holding it, its weight comes from how many of the passages
    hold it; no length normalisation (a passage's length here would be its number of
    matches, itself evidence). A passage that answers holds several of the query's words
    across its turns; a stray match elsewhere holds one.

    ``rows``: ``(pk, conversation id, seq, per-word flags)`` of every candidate of one
    search. Returns ``{pk: score}`` (0.0 and up)."""
    width = PASSAGE_SEQS
    # per passage, per word, the number of its candidates holding the word (flags add as 1)
    counts: dict[tuple[int, int], tuple[int, ...]] = {}
    get = counts.get
    for _pk, conversation_id, seq, flags in rows:
        key = (conversation_id, seq // width)
        held = get(key)
        counts[key] = tuple(flags) if held is None else tuple(map(add, held, flags))
    if not counts:
        return {}
    n = len(counts)
    held_by = (len(column) - column.count(0) for column in zip(*counts.values(), strict=True))
    idf = [math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in held_by]
    k1 = PASSAGE_K1
    # each passage's terms summed in word order (the same float in every process); passages
    # alike (most hold one word once) are scored once
    scored: dict[tuple[int, ...], float] = {}
    score: dict[tuple[int, int], float] = {}
    for key, held in counts.items():
        value = scored.get(held)
        if value is None:
            value = scored[held] = sum(idf[i] * c * (k1 + 1) / (c + k1) for i, c in enumerate(held) if c)
        score[key] = value
    return {pk: score[(conversation_id, seq // width)] for pk, conversation_id, seq, _flags in rows}


#: most rows read by the substring match of a query in an unspaced script (newest first)
MAX_UNSPACED_MATCHES = 2_000


def _unspaced(queryset: QuerySet[Any], terms: Sequence[str]) -> dict[int, float]:
    """Rows of ``queryset`` holding the character bigrams ``terms`` of a query in a script
    written without spaces (see ``text.unspaced_terms``), with the share of the terms each
    holds (0..1]. The index cannot find a word inside such a run, so this reads the scope's
    rows that contain one (``LIKE``, not indexed: a scan of the scope, at most
    ``MAX_UNSPACED_MATCHES`` rows, newest first)."""
    match = Q()
    for term in terms:
        match |= Q(content__contains=term)
    rows = queryset.filter(match).order_by("-pk").values_list("pk", "content")[:MAX_UNSPACED_MATCHES]
    return {pk: sum(1 for t in terms if t in (content or "")) / len(terms) for pk, content in rows}


def _with_unspaced(
    found: list[tuple[int, float]], unspaced: dict[int, float], limit: int
) -> list[tuple[int, float]]:
    """The index's hits plus the substring matches: a row holding every bigram of the query
    gains as much as the index's best hit (1.0 when the index found nothing)."""
    if not unspaced:
        return found
    scale = max((score for _pk, score in found), default=0.0) or 1.0
    scores = dict(found)
    for pk, share in unspaced.items():
        scores[pk] = scores.get(pk, 0.0) + share * scale
    ranked = sorted(scores.items(), key=lambda item: (-item[1], -item[0]))
    return ranked[:limit]


def _fallback(queryset: QuerySet[Any], words: Sequence[str], limit: int) -> list[tuple[int, float]]:
    scored: list[tuple[int, float]] = []
    for pk, content in queryset.order_by("-pk").values_list("pk", F("content")).iterator():
        found = set(query_words(content or ""))
        hits = sum(1 for w in words if w in found)
        if hits:
            scored.append((pk, hits / len(words)))
    scored.sort(key=lambda item: (-item[1], -item[0]))
    return scored[:limit]


#: BM25 parameters (Robertson and Zaragoza, "The Probabilistic Relevance Framework", 2009)
BM25_K1 = 1.2
BM25_B = 0.75
#: most rows one query word brings to the candidates of a PostgreSQL message search; with more
#: words than ``PG_MAX_MATCHES // PG_WORD_CAP`` each brings ``PG_MAX_MATCHES`` divided by their
#: number (at least ``PG_MIN_WORD_CAP``)
PG_WORD_CAP = 250
PG_MIN_WORD_CAP = 100
#: most candidates of a PostgreSQL message search, all words together
PG_MAX_MATCHES = 1_000


def fenced(
    queryset: QuerySet[Any],
    condition: str,
    params: Sequence[Any],
    columns: Sequence[str] = ("id",),
    *,
    source: str | None = None,
    scope: Any = None,
) -> tuple[str, list[Any]]:
    """PostgreSQL: SQL and parameters of the ``columns`` (of the table, unqualified) of the
    rows of ``queryset``'s table that match the SQL ``condition`` and are in the scope
    ``queryset``, read from the rows matching ``condition`` first.

    The matching rows come from ``(SELECT * FROM table WHERE condition OFFSET 0)``
    (``OFFSET 0`` keeps PostgreSQL from merging it into the scope's joins), so they are found
    through the index ``condition`` can use (the GIN index of ``search_vector``, the unique
    index of ``(conversation, seq)``). Left to itself, a planner that expected few rows per
    conversation (statistics older than the history) walked the scope's conversations
    instead and read the owner's whole history, 100,000 rows, for each search. A ``LIMIT``
    after this stops reading at the rows it wants.

    That subquery takes the table's name in the scope's own statement, so the scope's
    conditions on the row itself (a message's role) are tested on the row the index found
    and its joins (the conversation's owner and agent key) start from the row's foreign
    keys: no row is read twice. Testing the scope in a ``LATERAL`` subquery by primary key
    read every candidate again (6-8 ms of a 17 ms ranking statement at 100,000 messages);
    that form is kept for a ``source`` (rows read from another table expression, alias
    ``m``) and for a scope whose statement has a shape this does not know.

    ``scope``: a ``compiled.Scope`` of ``queryset.order_by().values("pk")``, whose SQL is
    then not compiled again (``search``).

    Raises:
        ValueError: the database is not PostgreSQL.
    """
    from django.db.models.expressions import RawSQL

    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        raise ValueError("fenced scopes are PostgreSQL's")
    table = connection.ops.quote_name(queryset.model._meta.db_table)
    quote = connection.ops.quote_name
    if source is None:
        if scope is not None:
            scope_sql, scope_params = scope.sql_with_params()
        else:
            scope_sql, scope_params = queryset.order_by().values("pk").query.sql_with_params()
        head = f" FROM {table}"
        at = scope_sql.find(head)
        rest = scope_sql[at + len(head) :] if at >= 0 else None
        # the scope's FROM clause names the table, then its joins or its WHERE clause
        known = (" INNER JOIN ", " LEFT OUTER JOIN ", " WHERE ")
        if rest is not None and (not rest or rest.startswith(known)):
            wanted = ", ".join(f"{table}.{quote(c)}" for c in columns)
            sql = f"SELECT {wanted} FROM (SELECT * FROM {table} WHERE {condition} OFFSET 0) AS {table}{rest}"
            return sql, [*params, *scope_params]
    # Each row's foreign keys (those never NULL) are given too: the scope's joins then start
    # from the primary keys they name, whatever the statistics say of the scope's size.
    foreign_keys = [
        f for f in queryset.model._meta.concrete_fields if f.is_relation and f.many_to_one and not f.null
    ]
    keys = {"pk": RawSQL("h.id", [])}
    for field in foreign_keys:
        keys[field.attname] = RawSQL(f"h.{connection.ops.quote_name(field.column)}", [])
    scope = queryset.order_by().filter(**keys).values("pk")
    scope_sql, scope_params = scope.query.sql_with_params()
    wanted = ", ".join(f"h.{quote(c)}" for c in columns)
    foreign = [f.column for f in foreign_keys]
    read = ", ".join(quote(c) for c in dict.fromkeys(["id", *columns, *foreign]))
    if source is not None:
        read = ", ".join(f"m.{quote(c)}" for c in dict.fromkeys(["id", *columns, *foreign]))
    sql = (
        f"SELECT {wanted} FROM (SELECT {read} FROM {source or table} WHERE {condition} OFFSET 0) AS h "
        f"CROSS JOIN LATERAL ({scope_sql} OFFSET 0) AS s"
    )
    return sql, [*params, *scope_params]


def _pg_bm25(
    queryset: QuerySet[Any],
    words: Sequence[str],
    limit: int,
    places: dict[int, tuple[int, int]] | None = None,
    passages: dict[int, float] | None = None,
    scope: Any = None,
) -> list[tuple[int, float]]:
    """BM25 over a bounded candidate set, in one statement.

    The candidates are, per query word, at most ``PG_WORD_CAP`` rows of the scope holding it,
    found through the GIN index (``fenced``): every match of a selective word, and a sample
    of the matches of a common one. A word held by a large share of the scope weighs little
    in BM25 (its inverse document frequency is near 0), so a row that holds only common words
    ranks below every row holding a selective word; ranking all its matches cost 0.5-1.2 s
    at 100,000 messages of one user. The statement returns the candidates with, per query
    word, whether the row holds it and the row's length in lexemes, computed on the row the
    GIN index found (reading each candidate again by primary key cost a third of the
    statement); the words' weights (IDF over the candidates) and the BM25 sum (each word
    counted once per row) are computed here. A scope of fewer matches than the caps is
    ranked exactly.

    ``places``: when given and the rows are messages, filled with ``{pk: (conversation_id,
    seq)}`` of every candidate (``search_messages`` then needs no query for them), and
    ``passages``, when given too, with ``{pk: score}`` of every candidate
    (``passage_scores``, from the same flags)."""
    model = queryset.model
    located = places is not None and _located(model)
    columns = ("id", "conversation_id", "seq", "search_vector") if located else ("id", "search_vector")
    cap = max(PG_MIN_WORD_CAP, min(PG_WORD_CAP, PG_MAX_MATCHES // len(words)))
    tsq = f"to_tsquery('{PG_CONFIG}'::regconfig, %s)"
    # A search within one conversation says so on the searched table too: PostgreSQL then
    # reads that conversation's partition only (agentmemory.contrib.partitioning).
    conversation_id = one_conversation(queryset)
    within = "" if conversation_id is None else " AND conversation_id = %s"
    within_params = [] if conversation_id is None else [conversation_id]
    flags = ", ".join(f"(x.search_vector @@ {tsq})" for _ in words)
    kept = ", ".join(f"x.{column}" for column in columns[:-1])
    # the same statement for every word, its first parameter the word: compiled once
    part, part_params = fenced(
        queryset, f"search_vector @@ {tsq}{within}", ["", *within_params], columns, scope=scope
    )
    # a row found through several words is the same row: UNION keeps it once
    one = f"SELECT {kept}, length(x.search_vector), {flags} FROM ({part} LIMIT {cap}) AS x"
    sql = " UNION ".join([one] * len(words))
    params = []
    for word in words:
        params += [*words, word, *part_params[1:]]  # the flags come first in the text
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return []
    first = len(columns) - 1  # the row's length; its flags follow
    if located and places is not None:
        places.update({row[0]: (row[1], row[2]) for row in rows})
        if passages is not None:
            passages.update(passage_scores([(row[0], row[1], row[2], row[first + 1 :]) for row in rows]))
    n_words = len(words)
    # Word weights come from the candidates: counting the whole scope on every query cost
    # 70 ms at 100,000 facts, and among the candidates a word's rarity orders them the same way.
    total = len(rows)
    # each row's length and flags as one tuple: rows alike score alike, computed once
    shapes = [row[first:] for row in rows]
    by_column = list(zip(*shapes, strict=True))
    df = [sum(1 for held in by_column[1 + i] if held) for i in range(n_words)]
    idf = [math.log(1 + (total - d + 0.5) / (d + 0.5)) for d in df]
    avg_len = (sum(by_column[0]) / len(rows)) or 1.0
    # each term as ``idf * (k1 + 1) / (1 + norm)``, evaluated in that order, summed in word order
    weights = [weight * (BM25_K1 + 1) for weight in idf]
    scores: dict[tuple[Any, ...], float] = {}
    scored: list[tuple[float, int]] = []
    for row, shape in zip(rows, shapes, strict=True):
        score = scores.get(shape)
        if score is None:
            norm = BM25_K1 * (1 - BM25_B + BM25_B * shape[0] / avg_len)
            score = scores[shape] = sum(weights[i] / (1 + norm) for i in range(n_words) if shape[1 + i])
        scored.append((-score, -row[0]))
    scored.sort()  # best first, then the newest (highest id)
    return [(-pk, -score) for score, pk in scored[:limit]]


def one_conversation(queryset: QuerySet[Any]) -> int | None:
    """The conversation id a message queryset is limited to by an exact filter
    (``filter(conversation_id=...)`` among filters joined by AND), or ``None``."""
    from django.db.models.lookups import Exact
    from django.db.models.sql.where import AND

    from agentmemory.models import Message

    where = queryset.query.where
    if not issubclass(queryset.model, Message) or where.connector != AND or where.negated:
        return None
    for child in where.children:
        target = getattr(getattr(child, "lhs", None), "target", None)
        if (
            isinstance(child, Exact)
            and target is not None
            and target.model is Message
            and target.name == "conversation"
            and isinstance(child.rhs, int)
        ):
            return child.rhs
    return None


def _is_fact(queryset: QuerySet[Any]) -> bool:
    from agentmemory.models import Fact

    return issubclass(queryset.model, Fact)


#: facts of the scope read newest first by every PostgreSQL fact search (their matches are
#: all candidates)
FACT_WINDOW = 500
#: a query word found in at most this many facts of a full window is rare enough to be looked
#: up in the GIN index over the whole scope; more frequent words keep to the window
FACT_RARE_IN_WINDOW = 5
#: most facts one rare word adds to the candidates
FACT_RARE_CAP = 300
#: most facts all the rare words of one query add together: with more rare words than
#: ``FACT_RARE_BUDGET // FACT_RARE_CAP`` (5), each adds ``FACT_RARE_BUDGET`` divided by their
#: number, so that a long question costs at most what one with five rare words costs
FACT_RARE_BUDGET = 1_500


def _pg_fact_ranking(queryset: QuerySet[Any], words: Sequence[str], limit: int) -> tuple[str, list[Any]]:
    """The common table expressions of a PostgreSQL fact search, ending in ``top(id,
    relevance, created_at, importance)``: the ``limit`` best candidates by BM25, with their
    parameters.

    The candidates are the facts matching any query word among the scope's newest
    ``FACT_WINDOW`` facts (read on the scope index; of facts stored at one moment, the
    highest ids: cut by time alone, which of them the window held was the database's choice,
    and two identical requests could send different memory blocks), plus, when the scope holds more than
    that, the facts of the scope (at most ``FACT_RARE_CAP`` per word, from the GIN index)
    holding a word that is rare in that window (``FACT_RARE_IN_WINDOW``). A common word
    matches a large share of a big scope, and ranking all its matches cost 150-450 ms at
    100,000 facts; its newest matches stand for it, while the rare words that decide a
    question reach all of the scope. A scope of at most ``FACT_WINDOW`` facts is ranked
    exactly. Word weights (IDF) and the mean length are taken over the candidates, each word
    counted once per fact, as in ``_pg_bm25``.

    Each window row is tested once against all the words (one ``tsquery``); the per-word
    tests run on its matches only. The statement is kept short (the fact table is ``t``):
    psycopg reuses its parsing of a statement of at most 4,096 characters, here one of up to
    five words.
    """
    model = queryset.model
    quote = connections[queryset.db].ops.quote_name
    name = quote(model._meta.db_table)
    # the fact table is "t" in the statement, which stays short (see the docstring)
    table, source, vector = "t", f"{name} AS t", "t.search_vector"
    tsq = f"to_tsquery('{PG_CONFIG}', %s)"
    query = queryset.order_by().query
    if sum(1 for alias in query.alias_map if query.alias_refcount[alias]) > 1:
        # a scope through a join: keep it in a subquery
        scope_sql, scope_params = queryset.order_by().values("pk").query.sql_with_params()
        where, where_params = f"t.id IN ({scope_sql})", list(scope_params)
    else:  # the scope's conditions inline, so that the scope index is used
        where_sql, compiled_params = query.get_compiler(queryset.db).compile(query.where)
        # the conditions name the table's columns, never a value (those are parameters)
        where, where_params = (where_sql or "TRUE").replace(f"{name}.", "t."), list(compiled_params)
    n_words = len(words)
    created, importance = quote("created_at"), quote("importance")
    # the window: one test against every word per row, in a subquery that LIMIT keeps apart
    # (its output columns are computed once a row)
    window_flags = ", ".join(f"s.m AND s.v @@ {tsq} AS f{i}" for i in range(n_words))
    window_sql = (
        f"SELECT s.id, s.ca, s.imp, s.m, length(s.v) AS len, {window_flags} "
        f"FROM (SELECT {table}.id, {table}.{created} AS ca, {table}.{importance} AS imp, {vector} AS v, "
        f"{vector} @@ {tsq} AS m FROM {source} WHERE {where} "
        f"ORDER BY {table}.{created} DESC, {table}.id DESC LIMIT {FACT_WINDOW + 1}) AS s"
    )
    flags = ", ".join([f"{vector} @@ {tsq}"] * n_words)
    counts = ", ".join(f"count(*) FILTER (WHERE f{i}) c{i}" for i in range(n_words))
    rare = ", ".join(f"CASE WHEN c{i} <= {FACT_RARE_IN_WINDOW} THEN %s END" for i in range(n_words))
    columns = ", ".join(f"f{i}" for i in range(n_words))
    dfs = ", ".join(f"count(*) FILTER (WHERE f{i}) d{i}" for i in range(n_words))
    idfs = ", ".join(f"ln(1 + (n - d{i} + 0.5) / (d{i} + 0.5)) i{i}" for i in range(n_words))
    idf = " + ".join(f"m.f{i}::int * i{i}" for i in range(n_words))
    sql = (
        f"WITH w AS MATERIALIZED ({window_sql}), "
        f"wc AS MATERIALIZED (SELECT count(*) AS n, {counts} FROM w), "
        # one tsquery per word rare in the window, when the window did not hold the whole
        # scope (a word PostgreSQL drops, such as its stop words, has none)
        f"rare AS MATERIALIZED (SELECT x.q, least({FACT_RARE_CAP}, greatest(1, {FACT_RARE_BUDGET} / "
        f"count(*) OVER ())) AS cap FROM wc CROSS JOIN unnest(ARRAY[{rare}]::text[]) AS y(word) "
        f"CROSS JOIN LATERAL (SELECT to_tsquery('{PG_CONFIG}', y.word) AS q) AS x "
        f"WHERE wc.n > {FACT_WINDOW} AND y.word IS NOT NULL AND numnode(x.q) > 0), "
        f"c AS MATERIALIZED (SELECT id, ca, imp, len, {columns} FROM w WHERE m UNION "
        f"SELECT hit.* FROM rare CROSS JOIN LATERAL (SELECT {table}.id, {table}.{created}, "
        f"{table}.{importance}, length({vector}), {flags} "
        f"FROM {source} WHERE {where} AND {vector} @@ rare.q LIMIT rare.cap) AS hit), "
        f"df AS (SELECT count(*)::float AS n, greatest(avg(len), 1)::float AS al, {dfs} FROM c), "
        f"st AS MATERIALIZED (SELECT df.al, {idfs} FROM df), "
        f"top AS MATERIALIZED (SELECT m.id, ({idf}) * {BM25_K1 + 1} "
        f"/ (1 + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * m.len::float / st.al)) AS relevance, "
        f"m.ca AS created_at, m.imp AS importance "
        f"FROM c AS m CROSS JOIN st ORDER BY relevance DESC, m.id DESC LIMIT %s)"
    )
    params: list[Any] = [*words, _pg_query(words), *where_params, *words, *words, *where_params, limit]
    return sql, params


def _pg_fact_ids(queryset: QuerySet[Any], words: Sequence[str], limit: int) -> list[tuple[int, float]]:
    ranking, params = _pg_fact_ranking(queryset, words, limit)
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"{ranking} SELECT id, relevance FROM top ORDER BY relevance DESC, id DESC", params)
        return [(pk, float(score)) for pk, score in cursor.fetchall()]


def boost_bounds(conf: Any) -> tuple[float, float, float, float, float]:
    """``(importance weight, importance floor, recency weight, recency span, half-life)``:
    the settings of ``agentmemory.recall.boost`` with the bounds that keep its arithmetic in
    SQL where a double holds it, whatever the stored values.

    PostgreSQL raises "value out of range: underflow" where a product or a power of doubles
    comes to 0 from non-zero operands, where Python gives 0: a fact of importance 5e-324 (a
    valid value of the column, 0.0-1.0) times a weight, or ``power(0.5, age / half-life)``
    for a fact a few centuries old at a 30-day half-life (a reported ``GET /api/search/``
    500). So an importance below the floor counts 0 and a recency decay is 0 past the span
    (days): there ``weight * importance`` and ``weight * 0.5 ** (age / half-life)`` are below
    the smallest normal double (2.2e-308), so ``1 + ...`` is 1 either way and the score is
    Python's to the last bit.
    """
    tiny = sys.float_info.min
    importance_weight = float(conf.RECALL_IMPORTANCE_WEIGHT)
    recency_weight = float(conf.RECALL_RECENCY_WEIGHT)
    half_life = float(conf.RECALL_RECENCY_HALF_LIFE_DAYS)
    floor = tiny / importance_weight if importance_weight > 0 else math.inf
    # 0.5 ** (age / half_life) >= tiny / weight  <=>  age <= half_life * log2(weight / tiny)
    span = half_life * (math.log2(recency_weight) - math.log2(tiny)) if recency_weight > 0 else -1.0
    return importance_weight, floor, recency_weight, span, half_life


def recall_facts(
    queryset: QuerySet[Any], query: str, *, candidates: int, k: int, now: Any, record: bool = False
) -> list[tuple[Any, float, float]] | None:
    """PostgreSQL: the ``k`` facts of ``queryset`` that ``KnowledgeMemory.recall`` returns, in
    one statement: the ``candidates`` best by BM25 (see ``_pg_fact_ranking``), re-ranked by
    ``agentmemory.recall.boost`` (importance, recency); only the ``k`` chosen are read with
    every column.

    With ``record``, the same statement marks them as recalled (``last_recalled_at = now``,
    ``recall_count + 1``) and its transaction commits without waiting for the write-ahead log
    to reach the disk (``synchronous_commit`` off for that transaction only): for autocommit
    mode, where the statement is a transaction of its own. The rows returned show the values
    before that update.

    Returns ``(fact, relevance, best relevance)`` triples, best first, or None on another
    database (the caller ranks, reads and boosts in Python there).
    """
    if connections[queryset.db].vendor != "postgresql" or not _is_fact(queryset):
        return None
    words = query_words(query)
    if not words or candidates <= 0:
        return []
    if unspaced_terms(literal_words(query)):
        return None  # the substring match of ``search`` is not in the one statement
    from agentmemory.conf import app_settings

    conf = app_settings()
    ranking, params = _pg_fact_ranking(queryset, words, candidates)
    model = queryset.model
    connection = connections[queryset.db]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    fields = model._meta.concrete_fields
    columns = ", ".join(f"f.{quote(f.column)}" for f in fields)
    # the same arithmetic as agentmemory.recall.boost, which scores the returned rows
    # (date_part gives a double, as Python's float; extract would give a numeric), with each
    # product kept where a double holds it (see ``boost_bounds``)
    importance_weight, floor, recency_weight, span, half_life = boost_bounds(conf)
    age = "greatest(0, date_part('epoch', %s - top.created_at) / 86400)"
    boosted = (
        "(CASE WHEN b.best > 0 THEN top.relevance / b.best ELSE 0 END) "
        "* (1 + %s * CASE WHEN top.importance >= %s THEN top.importance ELSE 0 END) "
        f"* (1 + %s * CASE WHEN {age} <= %s THEN power(0.5, {age} / %s) ELSE 0 END)"
    )
    params += [importance_weight, floor, recency_weight, now, span, now, half_life, k]
    sql = (
        f"{ranking}, b AS (SELECT max(relevance) AS best FROM top), "
        f"chosen AS MATERIALIZED (SELECT top.id, top.relevance, b.best, "
        f"row_number() OVER (ORDER BY {boosted} DESC, top.id DESC) AS position "
        f"FROM top CROSS JOIN b ORDER BY position LIMIT %s), "
        f"hits AS MATERIALIZED (SELECT {columns}, chosen.relevance, chosen.best, chosen.position "
        f"FROM chosen JOIN {table} AS f ON f.id = chosen.id)"
    )
    if record:
        sql += (
            # the chosen rows locked in ascending id first (docs/architecture.md, "Lock
            # order"): the UPDATE alone locks them in join order
            f", locked AS MATERIALIZED (SELECT l.id FROM {table} AS l WHERE l.id IN "
            "(SELECT id FROM chosen) ORDER BY l.id FOR NO KEY UPDATE OF l)"
            f", recorded AS (UPDATE {table} AS f SET last_recalled_at = %s, recall_count = "
            "CASE WHEN f.recall_count < %s THEN f.recall_count + 1 ELSE f.recall_count END "
            "FROM locked WHERE f.id = locked.id AND set_config('synchronous_commit', 'off', true) = 'off')"
        )
        params += [now, column_max(queryset.model, "recall_count", queryset.db)]
    sql += " SELECT * FROM hits ORDER BY position"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: Iterable[Any] = cursor.fetchall()
    # the rows become facts as a queryset makes them (the fields' converters, then from_db)
    compiler = queryset.query.get_compiler(queryset.db)
    converters = compiler.get_converters([f.get_col(model._meta.db_table) for f in fields])
    if converters:
        rows = compiler.apply_converters(rows, converters)
    names = [f.attname for f in fields]
    n = len(names)
    db = queryset.db
    return [(model.from_db(db, names, row[:n]), float(row[n]), float(row[n + 1])) for row in rows]


def column_max(model: Any, field_name: str, using: str) -> int:
    """The largest value the integer column ``field_name`` of ``model`` holds on the database
    ``using`` (2,147,483,647 for a ``PositiveIntegerField`` on PostgreSQL): a counter stops
    there (``agentmemory.knowledge.max_recall_count``)."""
    field = model._meta.get_field(field_name)
    return int(connections[using].ops.integer_field_range(field.get_internal_type())[1])
