"""A conversation whose current summary (``Conversation.summary``) names another conversation's
summary, written by hand (raw SQL, a data migration, a restore of one table): that summary's
text is never sent, shown or folded as this conversation's.

The head statement read the summary, and the floor the history starts after, by the id in
the conversation row alone: every window of the conversation, the API's ``/context/`` with it,
sent the other conversation's summary (possibly another user's) to the model, and left out
the messages its ``through_seq`` reached over. Compaction took it as the previous summary and
folded its text into a new summary of this conversation; the API's conversation detail, the
admin and the export showed or carried it. A window that would send the stored summary is
now refused with ``ConversationStateError`` naming ``summary`` (the API's 409
``conversation_inconsistent``), as the other columns written by hand are; compaction refuses
to run over it; the other surfaces show no current summary; ``manage.py
repair_conversations`` puts one of the conversation's own summaries back.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from importlib import import_module
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.compaction.runs import run_compaction
from agentmemory.compaction.tasks import compact_conversation
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationStateError
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Summary
from agentmemory.repair import repair_conversation
from agentmemory.store import function_sql, functions
from agentmemory.store.window import read_head
from agentmemory.transfer import export_conversation, import_conversation
from tests.factories import turn

pytestmark = pytest.mark.django_db

#: the other conversation's summary: text that must appear nowhere in this one's reads
FOREIGN = "The card ends in 4242 and the home is at 12 Elm Street."
OWN = "Alice asked about her orders 0 to 1."


def _conversation(owner, turns: int) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=owner, agent_key="support")
    history = PersistentChatHistory(conv)
    history.add_message(ChatMessage.system("You are terse."))
    for i in range(turns):
        history.add_messages(turn(i, tool=i == 2))
    return conv


@pytest.fixture
def pair(user, django_user_model):  # type: ignore[no-untyped-def]
    """``(alice's conversation, bob's summary)``: Alice's current summary set by hand to Bob's.
    Bob's summary reaches far past Alice's messages (its ``through_seq`` read as the floor
    hid every one of them); Alice keeps one summary of her own (seqs 2..5, her first two turns)."""
    bob = django_user_model.objects.create_user("bob", password="bob-pw")
    alice_conv, bob_conv = _conversation(user, 4), _conversation(bob, 12)
    Summary.objects.create(
        conversation=alice_conv,
        text=OWN,
        first_seq=2,
        through_seq=5,
        human_messages_covered=2,
        token_count=12,
    )
    foreign = Summary.objects.create(
        conversation=bob_conv,
        text=FOREIGN,
        first_seq=2,
        through_seq=40,
        human_messages_covered=11,
        human_message_count=11,
        token_count=15,
    )
    Conversation.objects.filter(pk=alice_conv.pk).update(summary=foreign)
    return alice_conv, foreign


def _refused(build) -> ConversationStateError:  # type: ignore[no-untyped-def]
    with pytest.raises(ConversationStateError) as raised:
        build()
    assert raised.value.field == "summary"
    assert "repair_conversations" in str(raised.value)
    assert FOREIGN not in str(raised.value)
    return raised.value


def _windows_refused(conv: Conversation, foreign: Summary) -> None:
    """Every variant of the head statement (pinned prompt read or given, tool results capped
    or not) refuses the window; the error names the column and its value."""
    for system_prompt in (None, "Be brief."):
        for cap in (None, 30):
            builder = ContextWindowBuilder(conv, system_prompt=system_prompt, max_tool_result_tokens=cap)
            error = _refused(partial(builder.build, max_tokens=2000))
            assert error.value == foreign.pk
            assert f"id {foreign.pk}" in str(error) and "another conversation's" in str(error)


def test_a_window_never_sends_another_conversations_summary(pair) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    _refused(lambda: ContextWindowBuilder(conv).build())
    _windows_refused(conv, foreign)
    # A window that does not send the stored summary is built as before, whole.
    window = ContextWindowBuilder(conv, memory_compactor=None).build(max_tokens=2000)
    assert FOREIGN not in repr(window.messages) and window.summary_id is None
    assert [m.content for m in window.messages][:2] == [
        "You are terse.",
        "question 0: " + " ".join(f"w0x{k}" for k in range(12)),
    ]


def test_a_compactor_that_gives_another_conversations_summary_is_refused(user, pair) -> None:  # type: ignore[no-untyped-def]
    _, foreign = pair
    conv = _conversation(user, 2)

    class Giving(LLMMemoryCompactor):
        def get_summary(self) -> Summary | None:
            return foreign

    builder = ContextWindowBuilder(conv, memory_compactor=Giving(Conversation.objects, conv.pk, None))
    assert _refused(partial(builder.build, max_tokens=2000)).value == foreign.pk


@pytest.mark.postgres
def test_the_head_functions_read_no_summary_of_another_conversation(pair, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    for _ in range(2):  # the first build on a connection finds the functions, the next calls them
        _windows_refused(conv, foreign)
    assert all(functions.known(connection.connection, key) for key in functions.VARIANTS)
    with monkeypatch.context() as patch:  # and the statements sent as text
        patch.setattr(functions, "known", lambda raw, key: False)
        _windows_refused(conv, foreign)


@pytest.mark.parametrize("as_text", [False, True], ids=["default", "as text"])
def test_the_head_statement_reads_the_summary_and_its_floor_of_this_conversation_only(
    pair, monkeypatch, as_text
) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    if as_text:
        monkeypatch.setattr(functions, "known", lambda raw, key: False)
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            head = read_head(
                "default",
                conv.pk,
                with_pinned=True,
                budget=5000,
                max_messages=None,
                max_tool_result_tokens=None,
            )
        assert len(queries) == 1  # one statement, as for any conversation
        assert head is not None and head.summary is None and head.summary_first_seq is None
        assert head.conv.summary_id == foreign.pk
        # the other conversation's through_seq (40) is no floor: every message is read
        assert sorted(row[1] for row in head.page) == list(range(2, 12))


def test_the_api_answers_409_and_never_shows_the_other_summary(api_forced, pair) -> None:  # type: ignore[no-untyped-def]
    conv, _ = pair
    for query in ("", "?gap_policy=close", "?gap_policy=ignore", "?max_tokens=300"):
        response = api_forced.get(f"/api/conversations/{conv.uuid}/context/{query}")
        assert response.status_code == 409, response.content
        assert response.json()["error"] == "conversation_inconsistent"
        assert "summary" in response.json()["detail"] and FOREIGN not in response.content.decode()
    detail = api_forced.get(f"/api/conversations/{conv.uuid}/")
    assert detail.status_code == 200
    assert detail.json()["summary"] is None and FOREIGN not in detail.content.decode()
    for path in ("summaries/", "messages/"):
        response = api_forced.get(f"/api/conversations/{conv.uuid}/{path}")
        assert response.status_code == 200 and FOREIGN not in response.content.decode(), path
    export = api_forced.get(f"/api/conversations/{conv.uuid}/export/")
    document = b"".join(export.streaming_content).decode()
    assert export.status_code == 200 and FOREIGN not in document
    assert json.loads(document)["conversation"]["summary_through_seq"] is None


def test_the_admin_never_shows_the_other_summary_as_this_ones(admin_client, pair) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    change = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/change/")
    assert change.status_code == 200
    page = change.content.decode()
    assert FOREIGN not in page
    assert f"summary {foreign.pk} is another conversation" in page and "repair_conversations" in page
    context = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/context/")
    assert context.status_code == 400
    assert FOREIGN not in context.content.decode() and "repair_conversations" in context.content.decode()
    transcript = admin_client.get(f"/admin/agentmemory/conversation/{conv.pk}/transcript/", follow=True)
    assert transcript.status_code == 200 and FOREIGN not in transcript.content.decode()


def test_the_export_carries_no_span_of_another_conversation(pair, django_user_model) -> None:  # type: ignore[no-untyped-def]
    conv, _ = pair
    document = export_conversation(conv)
    assert document["conversation"]["summary_through_seq"] is None
    assert FOREIGN not in json.dumps(document, default=str)
    # the document imports (it named a span no summary in it has: refused)
    copy = import_conversation(document, owner=conv.owner, new_uuid=True)
    assert copy.summary_id is None


def _compactor(conv: Conversation, llm: ScriptedChatModel) -> LLMMemoryCompactor:
    return LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        PersistentChatHistory(conv),
        summarize_every_n_human=1,
        keep_recent_human_turns=1,
    )


def test_compaction_never_folds_the_other_summary(pair, caplog) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    llm = ScriptedChatModel(["A summary."] * 5)
    compactor = _compactor(conv, llm)
    assert compactor.needs_compaction() is False  # nothing is due: a run would refuse
    _refused(compactor.get_summary)
    _refused(compactor.run)
    _refused(compactor.compact)
    assert llm.calls == []  # no summariser call: the other text reached no prompt
    assert Summary.objects.filter(conversation=conv).count() == 1
    assert Conversation.objects.get(pk=conv.pk).summary_id == foreign.pk  # left for the repair
    # a run through the task: recorded on the conversation, not retried, nothing stored
    with caplog.at_level(logging.WARNING, logger="agentmemory.tasks"):
        assert compact_conversation.apply(args=[conv.pk]).get() is None
    assert "repair_conversations" in Conversation.objects.get(pk=conv.pk).compaction_error
    with pytest.raises(ConversationStateError):
        run_compaction(conv.pk, llm=llm)
    assert llm.calls == [] and Summary.objects.filter(conversation=conv).count() == 1


def test_a_summary_set_to_another_conversations_while_the_model_works_is_not_replaced(user, pair) -> None:  # type: ignore[no-untyped-def]
    """The check under the row lock compares the current summary's id, not only the rows of
    this conversation: a run started over the conversation's own summary stores nothing over
    a hand-set one (``SUPERSEDED``)."""
    _, foreign = pair
    conv = _conversation(user, 6)

    def meanwhile(messages):  # type: ignore[no-untyped-def]
        Conversation.objects.filter(pk=conv.pk).update(summary=foreign)
        return "Orders 0 to 3."

    llm = ScriptedChatModel([meanwhile])
    run = _compactor(conv, llm).run()
    assert run.status == "superseded" and run.summary is None
    assert Conversation.objects.get(pk=conv.pk).summary_id == foreign.pk
    assert not Summary.objects.filter(conversation=conv).exists()


def test_repair_conversations_puts_back_a_summary_of_the_conversation(api_forced, pair) -> None:  # type: ignore[no-untyped-def]
    conv, foreign = pair
    own = Summary.objects.get(conversation=conv)
    assert repair_conversation(conv, dry_run=True).changes == {"summary_id": (foreign.pk, own.pk)}
    out = StringIO()
    call_command("repair_conversations", "--conversation", str(conv.uuid), stdout=out)
    assert "1 conversations checked, 1 changed." in out.getvalue()
    window = ContextWindowBuilder(conv).build(max_tokens=2000)
    assert window.summary_id == own.pk and OWN in window.messages[1].text
    assert FOREIGN not in repr(window.messages)
    response = api_forced.get(f"/api/conversations/{conv.uuid}/context/")
    assert response.status_code == 200 and FOREIGN not in response.content.decode()
    # and compaction continues from the conversation's own summary
    llm = ScriptedChatModel(["Alice asked about orders 0 to 2."])
    assert _compactor(conv, llm).run().status == "stored"
    assert FOREIGN not in repr(llm.calls) and OWN in repr(llm.calls)


# -- PostgreSQL: the head functions and their migration --------------------------------------------

#: the migration that replaces the head functions, the one before it, and the one whose
#: statements going back restores
MIGRATION = "0043_window_head_summary_of_the_conversation"
BEFORE = "0042_fact_first_remembered_at"
RESTORED = "0037_window_head_tool_error_flag"


def _source(key: tuple) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(%s)", [functions.signature(key)]
        )
        return str(cursor.fetchone()[0])


def _head_summary(conv: Conversation) -> str | None:
    """The summary text the head statement reads for ``conv``, through the function."""
    for _ in range(2):  # the first read on a connection finds the function
        head = read_head(
            "default", conv.pk, with_pinned=True, budget=5000, max_messages=None, max_tool_result_tokens=30
        )
    assert functions.known(connection.connection, (True, True))
    assert head is not None
    return head.summary.text if head.summary is not None else None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migration_replaces_the_head_functions_forward_and_back(pair) -> None:  # type: ignore[no-untyped-def]
    conv, _ = pair
    migration = import_module(f"agentmemory.migrations.{MIGRATION}")
    restored = import_module(f"agentmemory.migrations.{RESTORED}")
    try:
        call_command("migrate", "agentmemory", BEFORE, verbosity=0)
        for key in functions.VARIANTS:
            assert _source(key) == f" BEGIN RETURN QUERY {restored.STATEMENTS[functions.code(key)]}; END "
        assert _head_summary(conv) == FOREIGN  # the function of 0037 read it by its id alone
    finally:
        call_command("migrate", "agentmemory", verbosity=0)
    for key in functions.VARIANTS:
        assert _source(key) == f" BEGIN RETURN QUERY {migration.STATEMENTS[functions.code(key)]}; END "
        assert migration.STATEMENTS[functions.code(key)] == function_sql.body("default", key)
    assert _head_summary(conv) is None


def test_a_summary_moved_to_another_conversation_while_the_model_works_is_not_extended(user, pair) -> None:  # type: ignore[no-untyped-def]
    """The summary a run extends, moved by hand to another conversation (its
    ``conversation_id`` rewritten) while the model works, is no longer this conversation's:
    the run stores nothing (``SUPERSEDED``). It stored a summary of this conversation whose
    ``previous`` was the other conversation's, which the export then named by a span that
    is in no summary of the document."""
    _, foreign = pair
    conv = _conversation(user, 6)
    assert _compactor(conv, ScriptedChatModel(["Orders 0 to 3."])).run().status == "stored"
    own = Conversation.objects.get(pk=conv.pk).summary
    PersistentChatHistory(conv).add_messages(turn(6))
    PersistentChatHistory(conv).add_messages(turn(7))

    def meanwhile(messages):  # type: ignore[no-untyped-def]
        Summary.objects.filter(pk=own.pk).update(conversation=foreign.conversation_id)
        return "Orders 0 to 6."

    run = _compactor(conv, ScriptedChatModel([meanwhile])).run()
    assert run.status == "superseded" and run.summary is None
    assert not Summary.objects.filter(conversation=conv).exists()
    assert Conversation.objects.get(pk=conv.pk).summary_id == own.pk  # left for the repair
