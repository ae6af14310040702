"""No word of a blanked or erased conversation is left in any table of the database.

``purge_conversations --blank-content`` and ``forget_user`` emptied or deleted every row that
held the words, and the API and the admin read nothing back; but on SQLite the full-text
index's shadow table (``agentmemory_message_fts_data``) kept them: an FTS5 delete writes a
tombstone that repeats the words, and both stay in the index's blocks until its segments
are merged, readable with any SQLite client from the database file. Every table is read
here, raw, as a copy of the database file or a dump would show it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from agentmemory.deletion import forget_user
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.retention import purge_conversations
from tests import test_blank_content_copies

pytestmark = pytest.mark.django_db

#: the conversation of tests/test_blank_content_copies.py: messages, a summary, a tool exchange,
#: thinking blocks and recorded model calls
said = test_blank_content_copies.said

#: said in the conversation only (the owner's fact "Allergic to walnuts" stays: docs/operations.md)
SAID = ("zeppelin", "reykjavik", "pondering", "hangar")


def tables_holding(word: str) -> dict[str, int]:
    """Rows of each table of the database (shadow tables included) that hold ``word`` in
    any column, in any case: as text, JSON, ``tsvector`` or raw bytes."""
    found: dict[str, int] = {}
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            for (table,) in cursor.fetchall():
                cursor.execute(
                    f'SELECT count(*) FROM "{table}" t WHERE lower(t::text) LIKE %s', [f"%{word}%"]
                )
                if count := cursor.fetchone()[0]:
                    found[table] = count
            return found
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        for (table,) in cursor.fetchall():
            cursor.execute(f'SELECT * FROM "{table}"')
            for row in cursor.fetchall():
                data = b" ".join(
                    bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode() for v in row
                )
                if word.encode() in data.lower():
                    found[table] = found.get(table, 0) + 1
    return found


def test_the_words_are_in_the_tables_before(said) -> None:  # type: ignore[no-untyped-def]
    assert all(tables_holding(word) for word in SAID)


@pytest.mark.parametrize("how", ["command", "function"])
def test_blanking_leaves_no_word_in_any_table(said, how) -> None:  # type: ignore[no-untyped-def]
    if how == "command":
        call_command("purge_conversations", "--older-than", "30d", "--blank-content", "--no-progress")
    else:
        purge_conversations(older_than=timedelta(days=30), blank_content=True)
    assert {word: tables_holding(word) for word in SAID} == {word: {} for word in SAID}
    # long-term facts stay, and are still found (docs/operations.md, "Retention")
    user = said[0]
    assert [hit.fact.content for hit in KnowledgeMemory(user).recall("walnuts")] == ["Allergic to walnuts"]


def test_deleting_expired_conversations_leaves_no_word_in_any_table(said) -> None:  # type: ignore[no-untyped-def]
    purge_conversations(older_than=timedelta(days=30))
    assert {word: tables_holding(word) for word in SAID} == {word: {} for word in SAID}


def test_forgetting_the_user_leaves_no_word_in_any_table(said) -> None:  # type: ignore[no-untyped-def]
    forget_user(said[0])
    words = (*SAID, "walnuts")
    assert {word: tables_holding(word) for word in words} == {word: {} for word in words}
