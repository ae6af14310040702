"""The memory block through the API under hostile input: a huge or odd newest message
(100,000 characters, 5,000 words, stop words only, emoji, right-to-left text, combining
marks, full-text and SQL syntax), titles holding ``]`` and newlines, session dates that do
not parse. The context endpoint answers (200, or 422 for a turn over the budget), the window
stays within ``max_tokens`` and no other user's words come back."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HOSTILE = [
    "x" * 100_000,
    " ".join(f"word{i}" for i in range(5000)),
    "the a an of to and is it was what when did do I me",
    "🙂🙃🔥 " * 50 + " safe code?",
    "ما هو رمز الخزنة؟ שלום עולם",
    "e\u0301\u0301\u0301 a\u0308\u0308 safe\u0301 code\u0308",
    '"*:&|!() safe & code | ! ( ) : * "',
    "safe:* & !code | (painting)",
    "' OR 1=1 --; DROP TABLE agentmemory_message; \\ %_ safe",
    "safe\u200bcode \ufeff painting",
    "<-> <1> <2> NEAR(safe code) safe NEAR code",
    '-safe +code ~painting "unclosed',
    "remember what did I tell you ago",
    "SAFE CODE PAINTING " * 200,
    "a",
    " ",
]
TOKEN_FIELDS = ("system_tokens", "summary_tokens", "memory_tokens", "history_tokens")


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("max_tokens", [300, 4000])
def test_a_hostile_turn_gets_a_bounded_block_of_its_owners_memory(query: str, max_tokens: int) -> None:
    me, stranger = UserFactory(), UserFactory()
    secrets = {me: "The safe code is 1111 behind the painting.", stranger: "The safe code is 9999 STRANGER."}
    for owner, secret in secrets.items():
        for title in ("Trip ] to\nParis", "]]]", "x" * 200, ""):
            conv = Conversation.objects.create(owner=owner, agent_key="a", title=title)
            PersistentChatHistory(conv).add_messages(
                [
                    ChatMessage.human(secret, metadata={"session_date": "not a date"}),
                    ChatMessage.ai("Noted ] \n [x]", metadata={"session_date_time": "2023/13/45 99:99"}),
                    ChatMessage.human("safe code painting " + query[:500], metadata={"session_date": 12345}),
                    ChatMessage.ai("ok", metadata={"session_date": {"x": 1}, "speaker": "]\n"}),
                ]
            )
    conv = Conversation.objects.create(owner=me, agent_key="a", title="now")
    PersistentChatHistory(conv).add_messages([ChatMessage.human(query)])
    api = APIClient()
    api.force_login(me)
    response = api.get(f"/api/conversations/{conv.uuid}/context/?memory_recall=true&max_tokens={max_tokens}")
    assert response.status_code in (200, 422), response.content[:500]
    body = response.content.decode()
    assert "STRANGER" not in body and "code is 9999" not in body
    if response.status_code == 200:
        data = json.loads(body)
        assert sum(data.get(field) or 0 for field in TOKEN_FIELDS) <= max_tokens
        if max_tokens == 4000 and "safe" in query.lower():
            assert "1111" in body  # the owner's own memory is recalled
