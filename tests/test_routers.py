"""agentmemory behind a database router that sends it to a second database alias: every
write goes there (appends, compaction, deletes, export and import, the API, the admin) and
nothing touches the default database, in transactions opened on the right alias.

The second database is made for this module only: a copy of the default database's settings
under the alias ``memory`` (another SQLite file on SQLite, another database on PostgreSQL),
migrated like the first, and dropped at the end.
"""

from __future__ import annotations

import copy
import json
from unittest import mock

import pytest
from django.db import connections
from rest_framework.test import APIClient

from agentmemory.checks import check_sqlite_transaction_mode
from agentmemory.compaction import request_compaction
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary
from agentmemory.transfer import export_conversation, import_conversation

ALIAS = "memory"
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", ALIAS])


class MemoryRouter:
    """Sends agentmemory's models to the ``memory`` alias; everything else to the default."""

    def db_for_read(self, model, **hints):  # type: ignore[no-untyped-def]
        return ALIAS if model._meta.app_label == "agentmemory" else None

    def db_for_write(self, model, **hints):  # type: ignore[no-untyped-def]
        return ALIAS if model._meta.app_label == "agentmemory" else None

    def allow_relation(self, obj1, obj2, **hints):  # type: ignore[no-untyped-def]
        return True  # users live in both databases under the same ids (see the fixtures)


@pytest.fixture(scope="module")
def memory_database(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    default = connections.settings["default"]
    settings = copy.deepcopy(default)
    if default["ENGINE"].endswith("sqlite3"):
        settings["TEST"] = {**settings.get("TEST", {}), "NAME": None}
    else:
        original = default["TEST"].get("NAME") or f"test_{default['NAME']}"
        settings["TEST"] = {**settings.get("TEST", {}), "NAME": f"{original}_{ALIAS}"}
    connections.settings[ALIAS] = settings
    with django_db_blocker.unblock():
        creation = connections[ALIAS].creation
        creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    yield ALIAS
    with django_db_blocker.unblock():
        connections[ALIAS].creation.destroy_test_db(connections[ALIAS].settings_dict["NAME"], verbosity=0)
        connections[ALIAS].close()
    del connections.settings[ALIAS]
    del connections[ALIAS]


@pytest.fixture
def routed(memory_database, settings):  # type: ignore[no-untyped-def]
    settings.DATABASE_ROUTERS = [f"{__name__}.MemoryRouter"]
    settings.AGENTMEMORY = {
        "COMPACTION_MODE": "inline",
        "COMPACTOR_CLASS": "agentmemory.compaction.OfflineMemoryCompactor",
        "SUMMARIZE_EVERY_N_HUMAN_MESSAGES": 3,
    }
    yield
    for model in (Conversation, Message, Summary):
        assert not model.objects.using("default").exists(), f"{model.__name__} rows on the default database"


@pytest.fixture
def routed_user(routed, django_user_model):  # type: ignore[no-untyped-def]
    """A user on the default database, mirrored on the routed one (the owner foreign key of a
    conversation points into the database the conversation lives in)."""
    user = django_user_model.objects.create_user("alice", password="pw", is_staff=True, is_superuser=True)
    django_user_model.objects.using(ALIAS).create(pk=user.pk, username="alice", password=user.password)
    return user


def turn(n: int) -> list[ChatMessage]:
    return [ChatMessage.human(f"question {n} " + "word " * 30), ChatMessage.ai(f"answer {n}")]


def turn_json(n: int) -> dict:
    return {
        "messages": [
            {"role": "human", "content": f"question {n} " + "word " * 30},
            {"role": "ai", "content": f"answer {n}"},
        ]
    }


def test_appends_compaction_windows_and_deletes_use_the_routed_database(routed):
    conv = Conversation.objects.create(title="routed")
    history = PersistentChatHistory(conv)
    for n in range(4):
        history.add_messages(turn(n))
    history.add_messages(
        [ChatMessage.human("weather?"), ChatMessage.ai(None, (ToolCall(id="c1", name="w", arguments={}),))]
    )
    assert history.cancel_pending_tool_calls("gone")
    request = request_compaction(conv.pk, force=True, reason="router test")
    assert request.error is None, request
    assert Summary.objects.using(ALIAS).filter(conversation_id=conv.pk).exists()
    window = ContextWindowBuilder(conv).build(2000)
    assert window.summary_id is not None and window.messages

    conv.refresh_from_db()
    copy_ = import_conversation(export_conversation(conv), new_uuid=True)
    assert Message.objects.using(ALIAS).filter(conversation=copy_).count() == conv.last_seq

    Conversation.objects.get(pk=conv.pk).delete()
    Conversation.objects.filter(pk=copy_.pk).delete()
    assert not Message.objects.using(ALIAS).exists() and not Summary.objects.using(ALIAS).exists()


def test_user_delete_removes_their_conversations_on_the_routed_database(routed_user, django_user_model):
    conv = Conversation.objects.create(owner_id=routed_user.pk)
    PersistentChatHistory(conv).add_messages(turn(0))
    routed_user.delete()
    assert not Conversation.objects.using(ALIAS).exists() and not Message.objects.using(ALIAS).exists()


def test_api_writes_use_the_routed_database(routed_user):
    api = APIClient()
    api.force_login(routed_user)
    created = api.post("/api/conversations/", {"agent_key": "a", "title": "t"}, format="json")
    assert created.status_code == 201, created.content
    base = f"/api/conversations/{created.json()['uuid']}/"
    for n in range(4):
        assert api.post(base + "messages/", turn_json(n), format="json").status_code == 201
    assert api.patch(base, {"title": "renamed"}, format="json").status_code == 200
    assert api.get(base + "context/").status_code == 200
    assert api.post(base + "cancel-pending-tool-calls/", {}, format="json").status_code == 200
    exported = json.loads(api.get(base + "export/").getvalue())  # streamed
    imported = api.post("/api/conversations/import/", exported, format="json")
    assert imported.status_code == 201, imported.content
    assert api.delete(base).status_code == 204
    assert api.delete(f"/api/conversations/{imported.json()['uuid']}/").status_code == 204
    assert not Conversation.objects.using(ALIAS).exists()


def test_admin_writes_use_the_routed_database(routed_user, client):
    client.force_login(routed_user)
    conv = Conversation.objects.create(title="admin")
    PersistentChatHistory(conv).add_messages(
        [
            *turn(0),
            ChatMessage.human("pay?"),
            ChatMessage.ai(None, (ToolCall(id="c1", name="pay", arguments={}),)),
        ]
    )
    change = f"/admin/agentmemory/conversation/{conv.pk}/change/"
    assert client.get(change).status_code == 200
    response = client.post(change, {"title": "edited", "agent_key": "", "owner": "", "metadata": "{}"})
    assert response.status_code == 302, response.content[:500]
    assert client.get(f"/admin/agentmemory/conversation/{conv.pk}/context/").status_code == 200
    assert (
        client.post(f"/admin/agentmemory/conversation/{conv.pk}/cancel-pending-tool-calls/").status_code
        == 302
    )
    changelist = "/admin/agentmemory/conversation/"
    assert (
        client.post(changelist, {"action": "compact_now", "_selected_action": [conv.pk]}).status_code == 302
    )
    assert client.get(f"/admin/agentmemory/conversation/{conv.pk}/delete/").status_code == 200
    assert (
        client.post(f"/admin/agentmemory/conversation/{conv.pk}/delete/", {"post": "yes"}).status_code == 302
    )
    assert not Conversation.objects.using(ALIAS).exists()


def test_sqlite_transaction_mode_check_looks_at_the_routed_database(routed, settings):
    deferred = {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3", "OPTIONS": {}}
    # Patched in place: the check reads settings.DATABASES, and replacing the setting would
    # reset the test's connections.
    with mock.patch.dict(settings.DATABASES, {ALIAS: deferred, "reports": deferred}):
        warnings = [w for w in check_sqlite_transaction_mode() if w.id == "agentmemory.W003"]
    assert [w.msg.split("'")[1] for w in warnings] == [ALIAS]
