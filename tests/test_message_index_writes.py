"""What an append writes into the full-text index of messages on PostgreSQL: each of a
message's words into the GIN index's tree (``fastupdate = off``: migration 0032, which undid
0031's 64 kB pending list because recall over a long history was slower with it), a search
finds the message at once, and going back to 0031 restores the list, whose appends write far
less. Counted in WAL records of the append's statement (``EXPLAIN (ANALYZE, WAL)``: this
backend's only), not timed."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Message
from agentmemory.recall import fulltext
from tests.factories import ConversationFactory

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

BEFORE = "0031_message_fulltext_short_pending_list"

#: sixty distinct words: written one by one into the tree, each is a WAL record of its own
WORDS = " ".join(f"lexeme{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60))


def _leaf_indexes() -> list[str]:
    """The message text index, or each partition's on the partitioned layout."""
    with connection.cursor() as cursor:
        # pg_partition_tree answers nothing for an index that is not partitioned
        cursor.execute(
            "SELECT c.relname FROM pg_partition_tree('agentmemory_msg_fts_idx'::regclass) t "
            "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf ORDER BY 1"
        )
        return [name for (name,) in cursor.fetchall()] or ["agentmemory_msg_fts_idx"]


def _options() -> set[tuple[str, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = ANY(%s)",
            [_leaf_indexes()],
        )
        return {tuple(sorted(options or ())) for (options,) in cursor.fetchall()}


def _wal_records_of_one_append(conversation_id: int, content: str) -> int:
    """WAL records written by one call of the human message's append function, after the
    pending lists are merged (so that this append does not merge them)."""
    with connection.cursor() as cursor:
        for name in _leaf_indexes():
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [name])
        cursor.execute(
            "EXPLAIN (ANALYZE, WAL, FORMAT JSON) SELECT * FROM agentmemory_append_one_human("
            "%s, 70, %s, %s, '', 'test', '{}', NULL)",
            [conversation_id, timezone.now().isoformat(), content],
        )
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["WAL Records"])


def test_the_message_text_index_keeps_no_pending_list() -> None:
    """Every partition's index when the layout is partitioned (PostgreSQL sets no storage
    parameter on the partitioned index itself)."""
    assert _options() == {("fastupdate=off",)}


def test_an_append_writes_its_words_into_the_tree() -> None:
    conversation = ConversationFactory()
    assert _wal_records_of_one_append(conversation.pk, WORDS) >= 60


def test_a_message_just_stored_is_found_by_search() -> None:
    conversation = ConversationFactory()
    with connection.cursor() as cursor:
        for name in _leaf_indexes():
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [name])
    PersistentChatHistory(conversation).add_message(ChatMessage.human(f"the zanzibar ferry {WORDS}"))
    hits = fulltext.search(Message.objects.filter(conversation=conversation), "zanzibar", 10)
    assert [Message.objects.get(pk=pk).seq for pk, _score in hits] == [1]


@pytest.mark.django_db(transaction=True)
def test_going_back_restores_the_pending_list_and_forward_removes_it() -> None:
    conversation = ConversationFactory()
    try:
        call_command("migrate", "agentmemory", BEFORE, verbosity=0)
        assert _options() == {("fastupdate=on", "gin_pending_list_limit=64")}
        # the heap row, its two btree entries, the conversation's update, the pending list
        assert _wal_records_of_one_append(conversation.pk, WORDS) <= 10
    finally:
        call_command("migrate", "agentmemory", verbosity=0)
    assert _options() == {("fastupdate=off",)}
    assert _wal_records_of_one_append(conversation.pk, WORDS + " more") >= 60
