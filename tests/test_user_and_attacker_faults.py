"""Smaller faults a new user or an attacker ran into, each of its kind:

- a cursor of characters outside base64 (or of base64 that no cursor of the API decodes to)
  answered the first page instead of the 404 other bad cursors get;
- a POST without the trailing slash answered Django's HTML 500 (``APPEND_SLASH`` cannot
  redirect a POST with its body; in production it redirected it with a 301, which clients
  follow with a GET);
- ``purge_conversations --older-than 800000d`` ended in an ``OverflowError`` traceback, and a
  retention period longer than the calendar (a legal hold of a million days) stopped every
  purge the same way;
- ``PersistentChatHistory(True)`` opened conversation 1: a bool is no conversation id;
- a system prompt of 10 million characters was counted (seconds of CPU, hundreds of MB)
  before it was refused, and a search query of that size was read whole.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message
from agentmemory.recall import FullTextBackend, search_messages
from agentmemory.recall.text import MAX_QUERY_CHARS
from agentmemory.retention import purge_conversations
from agentmemory.tokens import ApproximateTokenCounter

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("newcomer", password="pw")


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human(f"question {i}") if i % 2 == 0 else ChatMessage.ai(f"answer {i}")
            for i in range(6)
        ]
    )
    return conv


# -- cursors ---------------------------------------------------------------------------------


def _lists(conv: Conversation) -> list[str]:
    base = f"/api/conversations/{conv.uuid}"
    return ["/api/conversations/", f"{base}/messages/", f"{base}/summaries/", "/api/facts/"]


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!!",  # nothing of base64: decoded to nothing, it was the first page
        "cD0z!",  # base64 with a stray character
        "cD0z\u00e9",  # not ASCII
        "AAAA",  # base64 of three NUL bytes: no cursor the API makes
        base64.b64encode(b"x=1").decode(),  # a query string the API never writes
        base64.b64encode(b"p=1&p=2").decode(),  # a key twice
        "cD0",  # missing padding
    ],
)
def test_a_cursor_the_api_did_not_make_is_a_404(api_forced, conv, cursor) -> None:  # type: ignore[no-untyped-def]
    for path in _lists(conv):
        response = api_forced.get(path, {"cursor": cursor})
        assert response.status_code == 404, (path, cursor, response.content[:200])
        assert response.json()["error"] == "not_found"


def test_the_cursors_the_api_makes_still_page(api_forced, conv) -> None:  # type: ignore[no-untyped-def]
    path = f"/api/conversations/{conv.uuid}/messages/"
    first = api_forced.get(path, {"page_size": 4}).json()
    second = api_forced.get(first["next"]).json()
    back = api_forced.get(second["previous"]).json()
    assert [m["seq"] for m in first["results"]] == [1, 2, 3, 4]
    assert [m["seq"] for m in second["results"]] == [5, 6]
    assert [m["seq"] for m in back["results"]] == [1, 2, 3, 4]


# -- the trailing slash ---------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_a_post_without_the_trailing_slash_is_redirected_with_its_body(user, conv, settings, debug) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)
    client.force_login(user)
    path = f"/api/conversations/{conv.uuid}/messages"
    response = client.post(path, {"role": "human", "content": "no slash"}, content_type="application/json")
    assert response.status_code == 308, response.content[:300]
    assert response["Location"] == path + "/"
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"] == "trailing_slash"
    followed = client.post(
        path, {"role": "human", "content": "no slash"}, content_type="application/json", follow=True
    )
    assert followed.status_code == 201 and followed.json()["content"] == "no slash"


def test_every_method_and_the_query_string_survive_the_redirect(api_forced, conv) -> None:  # type: ignore[no-untyped-def]
    response = api_forced.get(f"/api/conversations/{conv.uuid}/messages", {"page_size": "2"})
    assert response.status_code == 308
    assert response["Location"] == f"/api/conversations/{conv.uuid}/messages/?page_size=2"
    for method in ("patch", "delete", "put"):
        assert (
            getattr(api_forced, method)(f"/api/conversations/{conv.uuid}", {}, format="json").status_code
            == 308
        )
    assert api_forced.post("/api/facts", {"content": "x"}, format="json")["Location"] == "/api/facts/"


@pytest.mark.parametrize("path", ["/api/conversations/x/y/z", "/api/facts/a/b", "/api/search/more"])
def test_a_path_that_is_no_url_of_the_api_is_a_json_404(api_forced, path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    response = api_forced.post(path, {}, format="json")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# -- retention periods ------------------------------------------------------------------------


def test_an_older_than_past_the_calendar_is_a_command_error(conv) -> None:  # type: ignore[no-untyped-def]
    for period in ("800000d", "999999999999w", "9" * 40):
        with pytest.raises(CommandError, match="year 1"):
            call_command("purge_conversations", "--older-than", period, "--no-progress")
    assert Conversation.objects.filter(pk=conv.pk).exists()


def test_retention_periods_longer_than_the_calendar_keep_their_conversations(conv, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"RETENTION_DAYS": 10**9, "RETENTION_DAYS_BY_AGENT": {"sales": 800_000}}
    Conversation.objects.create(agent_key="sales")
    held = Conversation.objects.create(agent_key="legal", retention_days=2_147_483_647)
    Conversation.objects.filter(pk=held.pk).update(updated_at=conv.updated_at - timedelta(days=3650))
    report = purge_conversations()
    assert report.conversations == 0 and Conversation.objects.count() == 3
    out = StringIO()
    call_command("purge_conversations", "--dry-run", stdout=out)
    assert out.getvalue().startswith("would delete 0 conversations")
    # an expired one is still purged beside them
    expired = Conversation.objects.create(agent_key="legal", retention_days=1)
    Conversation.objects.filter(pk=expired.pk).update(updated_at=conv.updated_at - timedelta(days=2))
    assert purge_conversations().conversations == 1


# -- conversation ids --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, False, 1.0, None, [1], b"1"])
def test_what_is_no_conversation_id_is_a_type_error(conv, value) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.agents.injector import load_conversation

    for make in (
        PersistentChatHistory,
        lambda v: ContextWindowBuilder(v),
        load_conversation,
    ):
        with pytest.raises(TypeError, match="conversation"):
            make(value)


@pytest.mark.parametrize("value", [0, -1, 2**63, 10**30])
def test_an_id_no_conversation_can_have_is_not_found(conv, value) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConversationNotFound):
        PersistentChatHistory(value).add_messages([ChatMessage.human("hi")])


# -- huge inputs --------------------------------------------------------------------------------


class CountingCounter(ApproximateTokenCounter):
    """The approximate counter, counting the characters it was given to count."""

    counted = 0

    def count_text(self, text: str) -> int:
        type(self).counted += len(text)
        return super().count_text(text)


def test_a_huge_system_prompt_is_refused_before_it_is_counted(conv, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_MESSAGE_CHARS": 1_000}
    CountingCounter.counted = 0
    prompt = "lorem ipsum " * 1_000
    with pytest.raises(InvalidMessageError, match="MAX_MESSAGE_CHARS"):
        ContextWindowBuilder(conv, system_prompt=prompt, token_counter=CountingCounter()).build(10_000)
    assert CountingCounter.counted == 0
    # at the bound it is counted and sent
    window = ContextWindowBuilder(conv, system_prompt="x" * 1_000, token_counter=CountingCounter()).build(
        10_000
    )
    assert window.messages[0].content == "x" * 1_000


def test_an_agent_with_a_huge_system_prompt_is_refused_before_counting(conv, user, settings) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel

    settings.AGENTMEMORY = {
        "MAX_MESSAGE_CHARS": 1_000,
        "TOKEN_COUNTER": "tests.test_user_and_attacker_faults.CountingCounter",
    }
    CountingCounter.counted = 0

    class Huge(BaseToolCallingAgent, register=False):
        AGENT_KEY = "huge"
        SYSTEM_PROMPT = "lorem ipsum " * 1_000

    llm = ScriptedChatModel(["never sent"])
    agent = Huge(llm=llm)
    with pytest.raises(InvalidMessageError, match="system prompt"):
        agent.run(agent.start_conversation(owner=user), "hello")
    assert llm.calls == [] and CountingCounter.counted < 100  # the human message, not the prompt


@pytest.mark.parametrize("prompt", ["be brief\x00", "be brief \ud800"])
def test_a_system_prompt_no_database_stores_is_refused_before_the_turn(conv, user, prompt) -> None:  # type: ignore[no-untyped-def]
    # it was sent, and the model call's record, which keeps the prompt's text, could not store it
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel

    with pytest.raises(InvalidMessageError, match="system prompt contains a"):
        ContextWindowBuilder(conv, system_prompt=prompt).build(10_000)

    class Unstorable(BaseToolCallingAgent, register=False):
        AGENT_KEY = "unstorable"
        SYSTEM_PROMPT = prompt

    llm = ScriptedChatModel(["never sent"])
    agent = Unstorable(llm=llm)
    conversation = agent.start_conversation(owner=user)
    with pytest.raises(InvalidMessageError, match="system prompt"):
        agent.run(conversation, "hello")
    assert llm.calls == [] and not Message.objects.filter(conversation_id=conversation.pk).exists()


@pytest.mark.parametrize("prompt", [5, b"be brief", ["be brief"]])
def test_a_system_prompt_that_is_not_text_is_a_clear_type_error(conv, prompt) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match="system prompt must be a string or None, not"):
        ContextWindowBuilder(conv, system_prompt=prompt)


class SpyBackend(FullTextBackend):
    """Full-text ranking that records the queries it is given."""

    queries: list[str] = []

    def rank(self, queryset: Any, query: str, limit: int) -> list[tuple[int, float]]:
        type(self).queries.append(query)
        return super().rank(queryset, query, limit)

    def ranking(self, queryset: Any, query: str) -> Any:
        type(self).queries.append(query)
        return super().ranking(queryset, query)


def test_a_huge_search_query_is_read_up_to_its_bound(conv, user) -> None:  # type: ignore[no-untyped-def]
    SpyBackend.queries = []
    KnowledgeMemory(user, backend=SpyBackend()).store("The answer is 42", "facts", persistent=True)
    query = "answer " + "filler " * 2_000_000
    hits = search_messages(query, owner=user, backend=SpyBackend())
    matched = [h.content for h in hits if h.relevance > 0]  # beside their neighbours
    assert sorted(matched) == ["answer 1", "answer 3", "answer 5"]
    facts = KnowledgeMemory(user, backend=SpyBackend()).recall(query)
    assert [h.fact.content for h in facts] == ["The answer is 42"]
    assert SpyBackend.queries and all(len(q) <= MAX_QUERY_CHARS for q in SpyBackend.queries)
    assert Fact.objects.count() == 1
