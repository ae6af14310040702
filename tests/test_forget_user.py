"""Erasing one user's memory: ``forget_user``, ``manage.py forget_user`` and the admin action.

After an erasure nothing of the user is found by a query, the API, a search (full-text and
embeddings), long-term recall or an export; nothing of anybody else is touched; appends that
race the erasure fail with ``ConversationNotFound`` and never with a database error.
"""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from agentmemory.deletion import ErasureReport, forget_user
from agentmemory.exceptions import ConversationNotFound
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Fact, FactEmbedding, Message, MessageEmbedding, Summary
from agentmemory.recall import EmbeddingBackend, search_messages
from tests.embedders import StubEmbedder
from tests.factories import UserFactory


def _memory_of(user, word: str, *, conversations: int = 2) -> list[Conversation]:  # type: ignore[no-untyped-def]
    """``conversations`` conversations of ``user`` mentioning ``word`` (a tool exchange, a
    summary, message vectors) and three facts (one superseded, so with history), with vectors."""
    embedder = StubEmbedder()
    convs = []
    for c in range(conversations):
        conv = Conversation.objects.create(owner=user, agent_key="support", title=f"{word} {c}")
        call = ToolCall(id=f"call_{c}", name="lookup", arguments={"order": word})
        PersistentChatHistory(conv).add_messages(
            [
                ChatMessage.system("You are a support agent."),
                ChatMessage.human(f"where is my {word} order"),
                ChatMessage.ai(None, [call]),
                ChatMessage.tool(f"{word} order shipped", tool_call_id=f"call_{c}", name="lookup"),
                ChatMessage.ai(f"your {word} order has shipped"),
            ]
        )
        Summary.objects.create(conversation=conv, text=f"asked about {word}", first_seq=2, through_seq=4)
        EmbeddingBackend(embedder).index(list(conv.messages.all()))
        convs.append(conv)
    memory = KnowledgeMemory(user, agent_key="support", embedder=embedder)
    memory.store(f"favourite: {word} tea", "preferences", persistent=True)
    memory.store(f"favourite: {word} coffee", "preferences", persistent=True)  # supersedes the tea
    memory.store(f"lives near the {word} river", "personal", persistent=True)
    EmbeddingBackend(embedder).index(list(Fact.objects.filter(owner=user)))
    return convs


@pytest.mark.django_db
def test_forget_user_erases_everything_of_the_user_and_nothing_else(django_assert_max_num_queries) -> None:
    alice, bob = UserFactory(), UserFactory()
    alice_convs = _memory_of(alice, "zanzibar")
    bob_convs = _memory_of(bob, "zanzibar", conversations=1)
    messages_before = {c.pk: c.messages.count() for c in bob_convs}

    with django_assert_max_num_queries(60):
        report = forget_user(alice)

    assert isinstance(report, ErasureReport)
    assert (report.conversations, report.messages, report.summaries) == (2, 10, 2)
    # vectors and index entries: every message with content (8: the AI messages that only call
    # tools have none) and every fact
    assert report.message_embeddings == 8 and report.facts == 3 and report.fact_embeddings == 3
    assert report.fulltext_entries == 8 + 3
    assert report.total == 2 + 10 + 2 + 8 + 3 + 3

    assert not Conversation.objects.filter(owner=alice).exists()
    assert not Message.objects.filter(conversation_id__in=[c.pk for c in alice_convs]).exists()
    assert not Summary.objects.filter(conversation_id__in=[c.pk for c in alice_convs]).exists()
    assert not Fact.objects.filter(owner=alice).exists()
    assert not FactEmbedding.objects.filter(fact__owner=alice).exists()
    assert not MessageEmbedding.objects.filter(message__conversation__owner=alice).exists()
    assert search_messages("zanzibar", owner=alice) == []
    assert search_messages("zanzibar", owner=alice, backend=EmbeddingBackend(StubEmbedder())) == []
    assert KnowledgeMemory(alice, agent_key="support").recall("zanzibar") == []
    assert get_user_model().objects.filter(pk=alice.pk).exists()  # the account stays

    # bob keeps everything, and still finds it
    assert {c.pk: c.messages.count() for c in bob_convs} == messages_before
    assert len(search_messages("zanzibar", owner=bob)) >= 3
    assert [h.fact.content for h in KnowledgeMemory(bob, agent_key="support").recall("zanzibar river")][
        :1
    ] == ["lives near the zanzibar river"]
    assert Fact.objects.filter(owner=bob).count() == 3

    # a second erasure finds nothing
    assert forget_user(alice.pk).total == 0


@pytest.mark.django_db
def test_query_count_does_not_grow_with_the_history(django_assert_max_num_queries) -> None:
    alice = UserFactory()
    for c in range(3):
        conv = Conversation.objects.create(owner=alice)
        PersistentChatHistory(conv).add_messages(
            [m for i in range(300) for m in (ChatMessage.human(f"q {c} {i}"), ChatMessage.ai(f"a {i}"))]
        )
    # (three of them on SQLite: the merge of the full-text indexes, which drops the words)
    with django_assert_max_num_queries(35):
        report = forget_user(alice)
    assert report.messages == 1800 and report.conversations == 3


@pytest.mark.django_db
def test_nothing_is_found_through_the_api_or_an_export_afterwards() -> None:
    alice = UserFactory()
    (conv,) = _memory_of(alice, "kilimanjaro", conversations=1)
    api = APIClient()
    api.force_authenticate(alice)
    base = f"/api/conversations/{conv.uuid}"
    assert api.get(f"{base}/export/").status_code == 200
    forget_user(alice)
    assert api.get("/api/conversations/").json()["results"] == []
    for url in (f"{base}/", f"{base}/export/", f"{base}/messages/", f"{base}/summaries/", f"{base}/context/"):
        response = api.get(url)
        assert response.status_code == 404, url
        assert response.json()["error"]
    late = api.post(f"{base}/messages/", {"role": "human", "content": "hello?"}, format="json")
    assert late.status_code == 404
    with pytest.raises(ConversationNotFound, match="does not exist"):
        PersistentChatHistory(conv.pk).add_message(ChatMessage.human("hello?"))


@pytest.mark.sqlite
@pytest.mark.django_db
def test_sqlite_fulltext_tables_keep_no_entry_of_the_user() -> None:
    alice, bob = UserFactory(), UserFactory()
    _memory_of(alice, "quetzalcoatl")
    _memory_of(bob, "popocatepetl", conversations=1)

    def matches(table: str, word: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE {table} MATCH %s", [word])
            return cursor.fetchone()[0]

    assert matches("agentmemory_message_fts", "quetzalcoatl") == 6  # question, tool result, answer
    assert matches("agentmemory_fact_fts", "quetzalcoatl") == 3
    forget_user(alice)
    assert matches("agentmemory_message_fts", "quetzalcoatl") == 0
    assert matches("agentmemory_fact_fts", "quetzalcoatl") == 0
    assert matches("agentmemory_message_fts", "popocatepetl") == 3
    with connection.cursor() as cursor:  # the index agrees with its content tables
        cursor.execute(
            "INSERT INTO agentmemory_message_fts(agentmemory_message_fts) VALUES ('integrity-check')"
        )
        cursor.execute("INSERT INTO agentmemory_fact_fts(agentmemory_fact_fts) VALUES ('integrity-check')")


@pytest.mark.django_db
def test_deleting_a_user_does_not_load_their_messages(django_assert_max_num_queries) -> None:
    alice, bob = UserFactory(), UserFactory()
    for c in range(3):
        conv = Conversation.objects.create(owner=alice)
        PersistentChatHistory(conv).add_messages(
            [m for i in range(500) for m in (ChatMessage.human(f"q {c} {i}"), ChatMessage.ai(f"a {i}"))]
        )
    _memory_of(bob, "elsewhere", conversations=1)
    # 27 on SQLite, 31 on PostgreSQL (the conversations, then the facts, locked in ascending id
    # first: docs/architecture.md, "Lock order"); loading the messages took 93
    with django_assert_max_num_queries(31):
        alice.delete()
    assert not Message.objects.filter(conversation__owner_id=alice.pk).exists()
    assert not Conversation.objects.filter(owner_id=alice.pk).exists()
    assert Message.objects.filter(conversation__owner=bob).count() == 5


# -- the management command --------------------------------------------------------------------


@pytest.mark.django_db
def test_command_erases_by_username_or_pk_and_prints_the_counts() -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    _memory_of(alice, "lisbon", conversations=1)
    _memory_of(bob, "porto", conversations=1)

    out = StringIO()
    call_command("forget_user", "alice", "--dry-run", stdout=out)
    assert "would erase the memory of alice" in out.getvalue() and "5 messages" in out.getvalue()
    assert Conversation.objects.filter(owner=alice).exists()

    out = StringIO()
    call_command("forget_user", "alice", "--noinput", stdout=out)
    text = out.getvalue()
    assert "conversations: 1" in text and "messages: 5" in text and "facts: 3" in text
    assert not Message.objects.filter(conversation__owner=alice).exists()

    out = StringIO()
    call_command("forget_user", str(bob.pk), "--noinput", stdout=out)
    assert f"bob (id {bob.pk})" in out.getvalue() and "messages: 5" in out.getvalue()
    assert not Conversation.objects.exists() and not Fact.objects.exists()


@pytest.mark.django_db
def test_command_refuses_an_unknown_or_ambiguous_user() -> None:
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("forget_user", "nobody", "--noinput")
    for not_an_id in ("²", "99999999999999999999999"):  # str.isdigit() but no primary key
        with pytest.raises(CommandError, match="no user"):
            call_command("forget_user", not_an_id, "--noinput")
        with pytest.raises(CommandError, match="not a primary key"):
            call_command("forget_user", not_an_id, "--by", "pk", "--noinput")
    first = UserFactory(username="first")
    numeric = UserFactory(username=str(first.pk + 1000))
    other = get_user_model().objects.create(pk=first.pk + 1000, username="other")
    with pytest.raises(CommandError, match="--by"):
        call_command("forget_user", numeric.username, "--noinput")
    Conversation.objects.create(owner=other)
    call_command("forget_user", numeric.username, "--by", "pk", "--noinput", stdout=StringIO())
    assert not Conversation.objects.filter(owner=other).exists()


@pytest.mark.django_db
def test_command_asks_before_erasing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    alice = UserFactory(username="alice")
    Conversation.objects.create(owner=alice)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    with pytest.raises(CommandError, match="cancelled"):
        call_command("forget_user", "alice", stdout=StringIO())
    assert Conversation.objects.filter(owner=alice).exists()


# -- the admin action --------------------------------------------------------------------------


@pytest.mark.django_db
def test_admin_action_confirms_then_erases_the_owners(admin_client) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    (a_conv,) = _memory_of(alice, "oslo", conversations=1)
    (b_conv,) = _memory_of(bob, "bergen", conversations=1)
    (c_conv,) = _memory_of(carol, "tromso", conversations=1)
    ownerless = Conversation.objects.create(title="nobody's")
    selected = [a_conv.pk, b_conv.pk, ownerless.pk]
    data = {"action": "forget_owners", "_selected_action": selected}

    page = admin_client.post("/admin/agentmemory/conversation/", data)
    assert page.status_code == 200
    body = page.content.decode()
    assert alice.username in body and bob.username in body and carol.username not in body
    assert "5 messages" in body and "3 facts" in body
    assert Conversation.objects.filter(owner=alice).exists()  # nothing erased before confirming

    done = admin_client.post("/admin/agentmemory/conversation/", {**data, "post": "yes"}, follow=True)
    assert done.status_code == 200
    shown = [str(m) for m in done.context["messages"]]
    assert any(f"Erased the memory of {alice.username}: 1 conversations, 5 messages" in m for m in shown)
    assert not Conversation.objects.filter(owner__in=[alice, bob]).exists()
    assert not Fact.objects.filter(owner__in=[alice, bob]).exists()
    assert Conversation.objects.filter(pk__in=[c_conv.pk, ownerless.pk]).count() == 2
    assert Fact.objects.filter(owner=carol).count() == 3


@pytest.mark.django_db
def test_admin_action_needs_the_permission_to_delete_facts(client) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import Permission

    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="agentmemory", codename__in=["view_conversation", "delete_conversation"]
        )
    )
    client.force_login(staff)
    alice = UserFactory()
    (conv,) = _memory_of(alice, "lima", conversations=1)
    response = client.post(
        "/admin/agentmemory/conversation/",
        {"action": "forget_owners", "_selected_action": [conv.pk], "post": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    assert any("permission to delete facts" in str(m) for m in response.context["messages"])
    assert Conversation.objects.filter(owner=alice).exists()


# -- while appends run (PostgreSQL) ------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_forget_user_while_their_conversations_receive_appends() -> None:
    for attempt in range(3):
        owner = get_user_model().objects.create_user(f"busy{attempt}")
        convs = [Conversation.objects.create(owner=owner) for _ in range(3)]
        KnowledgeMemory(owner).store("prefers email", "preferences", persistent=True)
        stop = threading.Event()
        errors: list[str] = []
        gone: list[int] = []
        appended: list[int] = []

        def append(
            conv_pk: int,
            stop: threading.Event = stop,
            errors: list[str] = errors,
            gone: list[int] = gone,
            appended: list[int] = appended,
        ) -> None:
            from django.db import connection as thread_connection

            try:
                while not stop.is_set():
                    PersistentChatHistory(conv_pk).add_messages(
                        [ChatMessage.human("still here"), ChatMessage.ai("yes")]
                    )
                    appended.append(conv_pk)
            except ConversationNotFound as exc:
                assert "does not exist" in str(exc)
                gone.append(conv_pk)
            except Exception as exc:  # any other error is the failure under test
                errors.append(repr(exc))
            finally:
                thread_connection.close()

        threads = [threading.Thread(target=append, args=(c.pk,)) for c in convs for _ in range(2)]
        for thread in threads:
            thread.start()
        while len(appended) < 9:
            time.sleep(0.005)
        report = forget_user(owner)
        for thread in threads:
            thread.join(timeout=30)
        stop.set()
        assert errors == []
        assert len(gone) == len(threads)  # every appender was told the conversation is gone
        assert report.conversations == 3 and report.facts == 1 and report.messages >= 18
        ids = [c.pk for c in convs]
        with connection.cursor() as cursor:
            for model, column in (
                (Message, "conversation_id"),
                (Summary, "conversation_id"),
                (Conversation, "id"),
            ):
                cursor.execute(f"SELECT COUNT(*) FROM {model._meta.db_table} WHERE {column} = ANY(%s)", [ids])
                assert cursor.fetchone()[0] == 0, model


def test_the_admin_log_keeps_no_title_of_erased_conversations_or_facts(admin_user) -> None:  # type: ignore[no-untyped-def]
    from django.contrib.admin.models import CHANGE, LogEntry

    alice, bob = UserFactory(), UserFactory()
    private = Conversation.objects.create(owner=alice, title="Questions for my divorce lawyer")
    fact = KnowledgeMemory(alice).store("Sees a therapist on Tuesdays", category="therapy").fact
    kept = Conversation.objects.create(owner=bob, title="Bob's garden plans")
    # what the admin writes when staff edit them: str(obj) as the entry's object_repr
    LogEntry.objects.log_actions(admin_user.pk, [private, kept], CHANGE, change_message="edited")
    LogEntry.objects.log_actions(admin_user.pk, [fact], CHANGE, change_message="edited")
    forget_user(alice)
    reprs = list(LogEntry.objects.values_list("object_repr", flat=True))
    assert len(reprs) == 3  # the audit trail of who did what stays
    assert not any("divorce" in r or "therapy" in r for r in reprs), reprs
    assert "Bob's garden plans" in " ".join(reprs)
    # deleting the user goes the same way
    secret = Conversation.objects.create(owner=bob, title="Bob's secret")
    LogEntry.objects.log_actions(admin_user.pk, [secret], CHANGE, change_message="edited")
    bob.delete()
    assert not LogEntry.objects.filter(object_repr__contains="Bob's").exists()
