"""Search over past conversations (``search_messages``) and the full-text indexes behind it,
on SQLite (FTS5) and PostgreSQL (tsvector with a GIN index)."""

from __future__ import annotations

import json
import time

import pytest
from django.apps import apps
from django.db import connection
from django.test import override_settings

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.conf import app_settings
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message
from agentmemory.recall import MemoryScopeError, fulltext, search_messages
from agentmemory.recall.text import query_words
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def conversation_with(owner, texts, agent_key="support"):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key=agent_key)
    history = PersistentChatHistory(conv)
    messages = []
    for i, text in enumerate(texts):
        messages.append(ChatMessage.human(text) if i % 2 == 0 else ChatMessage.ai(text))
    history.add_messages(messages)
    return conv


def test_query_words_drop_stop_words_and_operators() -> None:
    assert query_words('Where does the user "work" OR NEAR(x)?') == ["user", "work", "near", "x"]
    assert query_words("the who") == ["the", "who"]  # only stop words: keep them
    assert query_words("x_y%z") == ["x", "y", "z"]


def test_indefinite_pronouns_are_not_searched_for() -> None:
    # "something" names nothing to look for; it matched every "try something new"
    assert query_words("I cooked something for my friend, what was it?") == ["cooked", "friend"]
    assert query_words("Something") == ["something"]  # nothing else: kept


def test_a_long_query_is_read_by_its_questions_first() -> None:
    """Of more than ``MAX_QUERY_WORDS`` words, those of the query's questions come first;
    of a query longer than ``MAX_QUERY_CHARS``, the questions of its end come before its
    opening. A question after a pasted text was past both limits."""
    from agentmemory.recall.text import MAX_QUERY_CHARS, MAX_QUERY_WORDS, bounded_query

    pasted = " ".join(f"word{i}" for i in range(3000))
    words = query_words(f"{pasted}. So where is the kayak?")
    assert words[0] == "kayak" and len(words) == MAX_QUERY_WORDS
    assert query_words("Where is the kayak? " + pasted)[0] == "kayak"
    short = "Is it the paddle? Or the kayak."
    assert query_words(short) == ["paddle", "kayak"]  # under the limit: as written
    long_query = f"{pasted}. So where is the kayak?"
    assert len(long_query) > MAX_QUERY_CHARS
    bounded = bounded_query(long_query)
    assert len(bounded) <= MAX_QUERY_CHARS and bounded.startswith("So where is the kayak?\nword0 word1")
    assert bounded_query(pasted * 2) == (pasted * 2)[:MAX_QUERY_CHARS]  # nothing that fits: the opening
    assert bounded_query("Where is it?") == "Where is it?"
    # the newest first: the last sentence, then the questions from the last
    many = " ".join(f"Is clause{i} fine?" for i in range(40)) + " Also, where is the kayak"
    assert query_words(many)[:3] == ["also", "kayak", "clause39"]


def test_reading_what_a_query_asks_is_linear() -> None:
    """Sentence breaks are found in one pass: runs of spaces, line breaks or question marks
    that a backtracking pattern would read again from each position cost no more."""
    import time

    from agentmemory.recall.text import asked_in, bounded_query

    for hostile in (" " * 200_000, "\n" * 200_000, "?" * 200_000, " \n" * 100_000, "a? " * 70_000):
        started = time.perf_counter()
        asked_in(hostile, 5_000)
        query_words(hostile)
        bounded_query(hostile + " where is the kayak?")
        assert time.perf_counter() - started < 2.0, repr(hostile[:4])


def test_a_long_text_asking_nothing_is_read_in_linear_time() -> None:
    """A run of text with no sentence end (a pasted log, a script without these marks) was
    tried from each of its characters: 29,000 characters took 3 s a read, 10,000 (a query
    at ``MAX_QUERY_CHARS``) 0.4 s, on every read of the query. The bound leaves a margin
    of a hundred times the time it takes."""
    from agentmemory.recall.text import asked_in, bounded_query

    pasted = " ".join(f"w{i}" for i in range(5_000))  # about 29,000 characters
    started = time.perf_counter()
    assert asked_in(pasted, 1000) == ""  # one sentence, longer than what is read of it
    assert len(query_words(pasted)) == 32 and bounded_query(pasted) == pasted[:10_000]
    assert asked_in("a? " * 100_000, 10) == "a? a? a?"
    assert time.perf_counter() - started < 1.0


@pytest.mark.django_db
def test_the_memory_block_reads_a_pasted_text_as_search_does() -> None:
    """``recall_memory`` and ``rank_messages`` read ``bounded_query`` of their query, as
    ``search_messages`` does: a 10 MB text with a question at its end (a whole document given
    as ``memory_query``) took 10-30 s of CPU before any statement ran."""
    from agentmemory.recall.memory import rank_messages, recall_memory
    from agentmemory.recall.text import MAX_QUERY_CHARS

    user = UserFactory()
    conversation_with(user, ["The kayak is in the boathouse.", "Noted."])
    pasted = "Report of the quarter, line after line " * 250_000 + ". So where is the kayak?"
    started = time.perf_counter()
    hits = rank_messages(owner=user, query=pasted, k=5)
    block = recall_memory(owner=user, query=pasted, max_tokens=2000)
    assert time.perf_counter() - started < 5.0
    assert [hit.content for hit in hits][:1] == ["The kayak is in the boathouse."]
    assert block is not None and "boathouse" in block.text
    assert block.query.startswith("So where is the kayak?\n") and len(block.query) <= MAX_QUERY_CHARS


def test_finds_messages_of_the_owner_with_seq_conversation_and_metadata() -> None:
    alice = UserFactory(username="alice")
    conv = conversation_with(
        alice,
        [
            "My flight to Lisbon leaves on Friday",
            "Noted, your flight leaves Friday.",
            "I also need a hotel near the river",
            "I will look for hotels.",
        ],
    )
    hits = search_messages("hotels by the river", owner=alice, k=5)
    assert hits[0].seq == 3
    top = hits[0]
    assert (top.conversation_id, top.conversation_uuid, top.role) == (conv.pk, conv.uuid, "human")
    assert top.content == "I also need a hotel near the river" and isinstance(top.metadata, dict)
    assert {h.seq for h in hits if h.relevance > 0} == {3, 4}  # stemming: "hotels" finds "hotel"
    assert {h.seq for h in hits[:2]} == {3, 4}  # the messages before them follow, found as neighbours
    assert search_messages("Lisbon flights", owner=alice.pk, k=1)[0].seq == 1


def test_other_users_and_ownerless_conversations_are_never_searched() -> None:
    alice, bob = UserFactory(username="john_doe"), UserFactory(username="john-doe")
    conversation_with(bob, ["The vault code is 7781"])
    Conversation.objects.create(agent_key="support")  # ownerless
    conversation_with(None, ["The vault code is 1234"])
    assert search_messages("vault code", owner=alice) == []
    assert [h.content for h in search_messages("vault code", owner=bob)] == ["The vault code is 7781"]
    with pytest.raises(MemoryScopeError):
        search_messages("vault code", owner=None)


def test_conversation_and_agent_key_filters_are_exact() -> None:
    alice = UserFactory()
    first = conversation_with(alice, ["Invoice 1042 was wrong"], agent_key="billing")
    second = conversation_with(alice, ["Invoice 2000 looks fine"], agent_key="billing_")
    assert [h.conversation_id for h in search_messages("invoice", owner=alice, agent_key="billing")] == [
        first.pk
    ]
    assert [h.conversation_id for h in search_messages("invoice", owner=alice, conversation=second.uuid)] == [
        second.pk
    ]
    other = conversation_with(UserFactory(), ["Invoice 3000"])
    assert search_messages("invoice", owner=alice, conversation=other) == []


def test_what_compaction_condensed_stays_findable() -> None:
    alice = UserFactory()
    texts = []
    for i in range(12):
        texts += [f"turn {i}: question about topic{i}", f"answer about topic{i}"]
    texts[2] = "My passport number ends in 9921"
    conv = conversation_with(alice, texts)
    history = PersistentChatHistory(conv)
    compactor = LLMMemoryCompactor(
        Conversation.objects, conv.pk, ScriptedChatModel(["The user talked about topics."]), history
    )
    compactor.compact()
    conv.refresh_from_db()
    assert conv.summary is not None and conv.summary.through_seq >= 3
    hits = search_messages("passport number", owner=alice)
    assert [h.seq for h in hits if h.relevance > 0] == [3]
    assert hits[0].seq == 3


def test_bad_arguments_are_typed_errors() -> None:
    alice = UserFactory()
    with pytest.raises(ValueError):
        search_messages("x", owner=alice, k=0)
    with pytest.raises(ValueError):
        search_messages("x", owner=alice, k=1000)
    with pytest.raises(TypeError):
        search_messages(None, owner=alice)  # type: ignore[arg-type]
    assert search_messages("", owner=alice) == []
    assert search_messages("?!", owner=alice) == []
    # a NUL in an agent key is refused before PostgreSQL would raise DataError
    with pytest.raises(ValueError, match="agent_key"):
        search_messages("x", owner=alice, agent_key="\x00")
    with pytest.raises(ValueError, match="not a uuid"):
        search_messages("x", owner=alice, conversation="not-a-uuid")


def test_a_conversation_is_named_by_its_uuid_string_too() -> None:
    alice = UserFactory()
    conv = conversation_with(alice, ["zebra crossing ahead"])
    conversation_with(alice, ["zebra stripes elsewhere"])
    hits = search_messages("zebra", owner=alice, conversation=str(conv.uuid))
    assert [h.conversation_id for h in hits] == [conv.pk]
    # another user's conversation, named by its uuid, finds nothing
    assert search_messages("zebra", owner=UserFactory(), conversation=str(conv.uuid)) == []


def test_full_text_index_follows_edits_and_deletes() -> None:
    alice = UserFactory()
    conv = conversation_with(alice, ["zebra crossing ahead"])
    assert len(search_messages("zebra", owner=alice)) == 1
    Message.objects.filter(conversation=conv).update(content="giraffe crossing ahead")
    assert search_messages("zebra", owner=alice) == []
    assert len(search_messages("giraffe", owner=alice)) == 1
    conv.delete()
    assert search_messages("giraffe", owner=alice) == []
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM agentmemory_message_fts_docsize")
            assert cursor.fetchone()[0] == 0


@pytest.mark.sqlite
def test_migrate_leaves_every_sqlite_full_text_index_with_its_triggers() -> None:
    """Django's SQLite schema editor rebuilds a table to alter it and the triggers go with the
    old table: the migration that does so must make them again (nothing repairs them after
    ``migrate``)."""
    indexes = ["agentmemory_fact_fts", "agentmemory_message_fts"]
    if apps.is_installed("agentmemory.contrib.langgraph"):
        indexes.append("agentmemory_langgraph_storeitem_fts")
    expected = {name for fts in indexes for name in (fts, f"{fts}_ai", f"{fts}_ad", f"{fts}_au")}
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")
        names = {row[0] for row in cursor.fetchall()}
    assert expected <= names
    assert fulltext.ensure_sqlite_fulltext() is False  # nothing to repair


@pytest.mark.sqlite
def test_sqlite_triggers_come_back_after_a_table_rebuild() -> None:
    alice = UserFactory()
    with connection.cursor() as cursor:
        for suffix in ("ai", "ad", "au"):
            cursor.execute(f"DROP TRIGGER agentmemory_message_fts_{suffix}")
    conversation_with(alice, ["a message stored while the triggers were gone: pelican"])
    assert search_messages("pelican", owner=alice) == []
    assert fulltext.ensure_sqlite_fulltext() is True
    assert len(search_messages("pelican", owner=alice)) == 1
    assert fulltext.ensure_sqlite_fulltext() is False


@pytest.mark.postgres
def test_neighbours_scored_before_they_are_read_give_the_same_hits(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On PostgreSQL the neighbours are scored from the ranking statement and read with the
    hits; the hits (scores, relevance, content, metadata, created_at) are those of reading
    the neighbours first: around matches, blank and tool messages, gaps in ``seq``, more
    places than ``k``, within one conversation and across them."""
    from datetime import timedelta

    from django.utils import timezone

    import agentmemory.recall as recall

    alice = UserFactory()
    conversations = []
    for i in range(12):
        texts = [f"the kiln fired at {i} hundred degrees", "noted", "the glaze cracked", "why?", "kiln note"]
        conv = conversation_with(alice, texts * 3)
        conversations.append(conv)
    for conv in conversations[::2]:  # older: the recency boost reorders the spread scores
        Message.objects.filter(conversation=conv).update(created_at=timezone.now() - timedelta(days=400))
    Message.objects.filter(conversation=conversations[0], seq=3).update(content="")
    Message.objects.filter(conversation=conversations[1], seq=4).update(
        role="tool", tool_call_id="call-1", metadata={"speaker": "x"}
    )
    Message.objects.filter(conversation=conversations[2], seq=6).delete()
    cases = [
        ("kiln glaze", {"k": 10}),
        ("kiln glaze", {"k": 100}),
        ("why did the glaze crack", {"k": 7}),
        ("kiln", {"k": 20, "conversation": conversations[3].pk}),
    ]
    now = timezone.now()  # the recency boost's "now", the same for both reads
    monkeypatch.setattr(timezone, "now", lambda: now)
    recent = override_settings(AGENTMEMORY={"RECALL_RECENCY_WEIGHT": 3.0})  # newer rows overtake

    def search_all() -> list[list[recall.MessageHit]]:
        found = [search_messages(query, owner=alice, **kwargs) for query, kwargs in cases]
        with recent:
            found += [search_messages(query, owner=alice, **kwargs) for query, kwargs in cases[:3]]
        return found

    by_place = search_all()
    monkeypatch.setattr(recall, "_placed", lambda ranking, using: False)
    read_first = search_all()
    assert by_place == read_first and all(by_place)
    assert [len(hits) for hits in by_place] == [10, 100, 7, 15, 10, 100, 7]
    assert by_place[4] != by_place[0]
    assert any(h.relevance == 0 for hits in by_place for h in hits)  # found through a neighbour


def test_search_cost_is_a_constant_number_of_queries(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    """Rank (which scores every match, so the neighbours' scores need no query), the
    candidates' places (given by the ranking statement on PostgreSQL), their neighbours,
    the hits: the same count for a short and a long history. The ranking statement gives
    the places of every match. On PostgreSQL it gives their scores too, so the neighbours
    are scored before they are read and read with the hits: two statements, with or
    without them."""
    expected = 2 if connection.vendor == "postgresql" else 3
    without_neighbours = 2
    alice = UserFactory()
    for i in range(5):
        conversation_with(alice, [f"orchid care note {i}", f"water the orchid {i}", "ok", "thanks"])
    with django_assert_num_queries(expected):
        hits = search_messages("orchid", owner=alice, k=20)
    assert len(hits) == 20 and {h.content for h in hits if h.relevance == 0} == {"ok", "thanks"}
    for i in range(60):
        conversation_with(alice, [f"orchid repotting {i}", "noted", "more about soil", "fine"] * 5)
    with django_assert_num_queries(expected):
        assert len(search_messages("orchid", owner=alice, k=10)) == 10
    with (
        django_assert_num_queries(without_neighbours),
        override_settings(AGENTMEMORY={"RECALL_NEIGHBOUR_WEIGHTS": ()}),
    ):
        assert len(search_messages("orchid", owner=alice, k=10)) == 10


def test_the_answer_after_the_question_is_found_through_it() -> None:
    """The words of a question are often in the turn before the answer: that answer is found,
    right after the turn that matched, above a message that only mentions a word in passing."""
    alice = UserFactory()
    conversation_with(
        alice,
        [
            "I finally went out last Saturday",
            "How was it? What did you make at the pottery workshop?",
            "A small blue bowl with a wave pattern, my first one!",
            "Lovely. By the way, my cousin bought a pottery book",
            "Nice",
        ],
    )
    hits = search_messages("What did she make at the pottery workshop?", owner=alice, k=3)
    assert [h.seq for h in hits[:2]] == [2, 3]
    assert hits[1].relevance == 0 and hits[1].score > hits[2].score
    with override_settings(AGENTMEMORY={"RECALL_NEIGHBOUR_WEIGHTS": ()}):
        assert 3 not in [
            h.seq for h in search_messages("What did she make at the pottery workshop?", owner=alice)
        ]


def test_neighbours_stay_inside_the_scope() -> None:
    """Propagation reads neighbours by (conversation, seq) within the search's scope: never a
    message of another owner, of another conversation, of another agent key, or a system
    prompt, even when their ids or seqs sit right next to a hit."""
    alice, bob = UserFactory(), UserFactory()
    mine = conversation_with(alice, ["the lighthouse keeper's key is under the mat"], agent_key="a")
    conversation_with(bob, ["bob's secret one", "bob's secret two"], agent_key="a")
    other = conversation_with(alice, ["alice other conversation, first", "second"], agent_key="a")
    third = conversation_with(alice, ["alice under another agent key"], agent_key="b")
    PersistentChatHistory(mine).add_messages([ChatMessage.system("system prompt: be kind")])
    ids = set(Message.objects.values_list("pk", flat=True))
    for scope in ({}, {"conversation": mine}, {"agent_key": "a"}):
        hits = search_messages("lighthouse keeper", owner=alice, **scope)
        assert [h.content for h in hits] == ["the lighthouse keeper's key is under the mat"]
    hits = search_messages("alice other conversation", owner=alice, conversation=other)
    assert {h.conversation_id for h in hits} == {other.pk} and [h.seq for h in hits] == [1, 2]
    hits = search_messages("alice other conversation", owner=alice, agent_key="b")
    assert [h.conversation_id for h in hits] == [third.pk]
    assert search_messages("bob secret", owner=alice) == []
    assert ids == set(Message.objects.values_list("pk", flat=True))  # searching wrote nothing


@pytest.mark.postgres
def test_postgres_uses_the_gin_index_for_message_search() -> None:
    alice = UserFactory()
    conversation_with(alice, ["unique walrus text"])
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(
                "EXPLAIN SELECT id FROM agentmemory_message "
                "WHERE search_vector @@ to_tsquery('english'::regconfig, 'walrus')"
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET enable_seqscan = on")
        # the stored vector follows an edit of the content
        cursor.execute(
            "SELECT search_vector::text FROM agentmemory_message WHERE content = 'unique walrus text'"
        )
        assert cursor.fetchone()[0] == "'text':3 'uniqu':1 'walrus':2"
    assert "agentmemory_msg_fts_idx" in plan
    assert [h.content for h in search_messages("walrus", owner=alice)] == ["unique walrus text"]


@pytest.mark.postgres
def test_postgres_ranking_reads_each_candidate_once_and_keeps_the_scope() -> None:
    """The ranking statement tests the scope (owner, agent key, searched roles) on the row
    the GIN index found: the message table is read once per query word, never again by
    primary key for each candidate (that second read cost 6-8 ms of a 17 ms statement at
    100,000 messages), and rows out of the scope still never rank."""
    from django.test.utils import CaptureQueriesContext

    alice, bob = UserFactory(), UserFactory()
    mine = conversation_with(alice, ["heron nest by the lake", "a heron and a kingfisher"])
    conversation_with(alice, ["heron seen by another agent, kingfisher too"], agent_key="other")
    conversation_with(bob, ["bob's heron and kingfisher"])
    PersistentChatHistory(mine).add_message(ChatMessage.system("system heron kingfisher"))
    with CaptureQueriesContext(connection) as queries:
        hits = search_messages("heron kingfisher", owner=alice, agent_key="support", k=10)
    assert {(h.conversation_id, h.seq) for h in hits if h.relevance > 0} == {(mine.pk, 1), (mine.pk, 2)}
    ranking = next(q["sql"] for q in queries.captured_queries if "search_vector @@" in q["sql"])
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + ranking)
        (plan,) = cursor.fetchone()

    def tables(node):  # type: ignore[no-untyped-def]
        yield node.get("Relation Name")
        for child in node.get("Plans", []):
            yield from tables(child)

    read = list(tables((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]))
    # once for each of the two words (of the table, or of its partitions in the partitioned layout)
    messages = [
        name for name in read if name and name.startswith("agentmemory_message") and "embedding" not in name
    ]
    assert len(messages) == 2 or (
        len(messages) > 2 and all(name.startswith("agentmemory_message_p") for name in messages)
    )


@pytest.mark.postgres
def test_postgres_stores_and_finds_a_message_too_long_for_one_tsvector() -> None:
    """A message within MAX_MESSAGE_CHARS whose words make a tsvector over PostgreSQL's 1 MB
    could not be stored at all ("string is too long for tsvector"); its first
    PG_LONG_TEXT_CHARS characters are indexed instead."""
    import hashlib

    alice = UserFactory()
    words = " ".join(hashlib.md5(str(i).encode()).hexdigest()[:10] for i in range(170_000))
    text = f"quokka {words} wombat"
    assert len(text) < app_settings().MAX_MESSAGE_CHARS
    conversation_with(alice, [text])
    conversation_with(alice, ["a short marsupial note about a wombat"])
    assert Message.objects.filter(content=text).exists()
    assert [h.content for h in search_messages("quokka", owner=alice)] == [text]
    # words past the indexed part are not found in it; short texts are indexed whole
    assert [h.content for h in search_messages("wombat", owner=alice)] == [
        "a short marsupial note about a wombat"
    ]
    km = KnowledgeMemory(alice)
    km.remember("Pet: a quokka named Rex", persistent=True)
    assert [h.fact.content for h in km.recall("quokka")] == ["Pet: a quokka named Rex"]


def test_rarer_words_weigh_more() -> None:
    alice = UserFactory()
    texts = [f"Caroline talked about her day {i}" for i in range(10)]
    texts.append("Melanie enjoyed the pottery class")
    conversation_with(alice, texts)
    hits = search_messages("Caroline pottery", owner=alice, k=3)
    # one rare word outweighs one word that nearly every message holds
    assert hits[0].content == "Melanie enjoyed the pottery class"
    assert len(hits) == 3


@pytest.mark.django_db
def test_an_agent_key_that_is_not_storable_text_is_a_scope_error(django_user_model) -> None:
    # a lone surrogate used to fail in the database driver (UnicodeEncodeError)
    user = django_user_model.objects.create_user("surrogate")
    with pytest.raises(MemoryScopeError):
        search_messages("tea", owner=user, agent_key="x\ud800")


@pytest.mark.django_db
@pytest.mark.parametrize("conversation", [0, -1, 2**63, 10**30])
def test_a_conversation_id_out_of_range_is_a_value_error(django_user_model, conversation) -> None:  # type: ignore[no-untyped-def]
    # 10**30 overflowed SQLite's driver (OverflowError) instead of being refused
    user = django_user_model.objects.create_user("range")
    with pytest.raises(ValueError, match="conversation"):
        search_messages("tea", owner=user, conversation=conversation)


@pytest.mark.postgres
def test_a_common_word_brings_a_bounded_sample_and_the_rare_word_decides(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL reads at most ``PG_WORD_CAP`` matches per query word: a word held by most of
    the history does not make a search read all of it, and the message holding the selective
    word is still the best hit, however many messages hold the common one."""
    monkeypatch.setattr(fulltext, "PG_WORD_CAP", 8)
    monkeypatch.setattr(fulltext, "PG_MIN_WORD_CAP", 4)
    monkeypatch.setattr(fulltext, "PG_MAX_MATCHES", 40)
    alice, bob = UserFactory(), UserFactory()
    lisbon = conversation_with(alice, ["the weather in Lisbon was lovely", "glad to hear"])
    for i in range(6):
        conversation_with(alice, [f"weather report {i}", "ok", f"more weather {i}", "fine"])
    conversation_with(bob, ["weather in Lisbon for bob"] * 4)
    scope = Message.objects.filter(conversation__owner=alice)
    common = fulltext.search(scope, "weather", 1_000)
    assert 0 < len(common) <= 8  # 13 of alice's messages hold it
    hits = search_messages("what was the weather in Lisbon", owner=alice, k=5)
    assert hits[0].conversation_id == lisbon.pk and hits[0].seq == 1
    assert {h.conversation_id for h in hits} <= set(
        Conversation.objects.filter(owner=alice).values_list("pk", flat=True)
    )
