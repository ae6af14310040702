"""Recorded copies of deleted memory: deletes that follow an earlier delete, deletes that
take a quoting conversation with the quoted one, and the paths that still leave a copy
(marked as known faults)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from agentmemory.knowledge import KnowledgeMemory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.models import Conversation, Message, ModelCall
from agentmemory.retention import purge_conversations
from tests.factories import UserFactory
from tests.test_recorded_copies_deleted import FILLER, SECRET, Knowing, Recalling, asked, shown, stored

pytestmark = pytest.mark.django_db


@pytest.fixture
def user():  # type: ignore[no-untyped-def]
    return UserFactory()


def test_deleting_a_quoted_conversation_after_one_that_quoted_it_was_deleted(user) -> None:
    # The first deletion leaves the first call with no conversation (SET_NULL); the second
    # must still redact the call that is left, not fail (it was a 500 through the API).
    source = stored(user, [*FILLER, SECRET, "Noted."])
    first, _call = asked(user)
    _second, kept = asked(user)
    api = APIClient()
    api.force_login(user)
    assert api.delete(f"/api/conversations/{first.uuid}/").status_code == 204
    assert api.delete(f"/api/conversations/{source.uuid}/").status_code == 204
    assert "4471" not in shown(kept, user)


def test_deleting_the_quoted_and_a_quoting_conversation_together(user) -> None:
    # as ``forget_user`` does in batches of conversations
    source = stored(user, [*FILLER, SECRET, "Noted."])
    first, _call = asked(user)
    _second, kept = asked(user)
    Conversation.objects.filter(pk__in=[source.pk, first.pk]).delete()
    assert "4471" not in shown(kept, user)


def test_forgetting_a_fact_after_a_conversation_that_showed_it_was_deleted(user) -> None:
    memory = KnowledgeMemory(user)
    memory.remember(SECRET, "home", True)
    first, _call = asked(user, Knowing)
    _second, kept = asked(user, Knowing)
    first.delete()
    assert memory.forget(memory.live_facts().get().pk) == 1
    assert "4471" not in shown(kept, user)


def test_blanking_a_quoted_conversation_removes_the_copies(user) -> None:
    source = stored(user, [*FILLER, SECRET, "Noted."])
    _conv, call = asked(user)
    Conversation.objects.filter(pk=source.pk).update(updated_at="2000-01-01T00:00:00Z")
    purge_conversations(older_than=timedelta(days=30), blank_content=True)
    assert not Message.objects.filter(conversation=source, content__contains="4471").exists()
    assert "4471" not in shown(call, user)


def test_a_conversation_deleted_while_the_model_works_leaves_no_copy(user) -> None:
    source = stored(user, [*FILLER, SECRET, "Noted."])

    class Deleting(ScriptedChatModel):
        def _next(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            Conversation.objects.filter(pk=source.pk).delete()
            return super()._next(*args, **kwargs)

    conv = Conversation.objects.create(owner=user, agent_key="copies-test")
    Recalling(Deleting(["4471."])).run(conv, "What is the safe code behind the painting?")
    call = ModelCall.objects.get(conversation=conv)
    assert not Conversation.objects.filter(pk=source.pk).exists()
    assert "4471" not in shown(call, user)
