"""The REST API: scoping to the requesting user (S1), appends (W3), pagination in seq order,
context windows (C1-C5, C8), cascading deletes (S2), query counts and the OpenAPI schema."""

from __future__ import annotations

import base64
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message, Summary

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_user(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("mallory", password="mallory-pw")


def make_conversation(owner, **kwargs) -> Conversation:  # type: ignore[no-untyped-def]
    return Conversation.objects.create(owner=owner, agent_key=kwargs.pop("agent_key", "support"), **kwargs)


def conv_url(conv: Conversation, suffix: str = "") -> str:
    return f"/api/conversations/{conv.uuid}/{suffix}"


def tool_turn(n: int) -> list[ChatMessage]:
    """One human turn with a parallel tool exchange and an answer."""
    calls = (
        ToolCall(id=f"c{n}a", name="lookup", arguments={"q": f"order {n}"}),
        ToolCall(id=f"c{n}b", name="weather", arguments={"city": "Oslo"}),
    )
    return [
        ChatMessage.human(f"question {n} " + "word " * 20),
        ChatMessage.ai(None, tool_calls=calls),
        ChatMessage.tool(f"order {n} shipped", tool_call_id=f"c{n}a", name="lookup"),
        ChatMessage.tool("sunny", tool_call_id=f"c{n}b", name="weather"),
        ChatMessage.ai(f"answer {n} " + "word " * 10),
    ]


def window_from_response(data: dict) -> ContextWindow:
    """Rebuild a ``ContextWindow`` from the native JSON answer, to check it with the
    library's own invariant checker."""
    messages = [
        ChatMessage(
            role=Role(m["role"]),
            content=m["content"],
            tool_calls=tuple(ToolCall.from_dict(c) for c in m["tool_calls"]),
            tool_call_id=m["tool_call_id"],
            name=m["name"],
            seq=m["seq"],
            token_count=m["token_count"],
            truncated=m["truncated"],
        )
        for m in data["messages"]
    ]
    return ContextWindow(
        messages=messages,
        max_tokens=data["max_tokens"],
        system_tokens=data["system_tokens"],
        summary_tokens=data["summary_tokens"],
        history_tokens=data["history_tokens"],
        first_seq=data["first_seq"],
        last_seq=data["last_seq"],
        summary_through_seq=data["summary_through_seq"],
        skipped_orphans=tuple(data["skipped_orphans"]),
        skipped_pending=tuple(data["skipped_pending"]),
        skipped_late=tuple(data["skipped_late"]),
        placeholders=tuple(data["placeholders"]),
        truncated=tuple(data["truncated"]),
    )


# -- authentication and scoping (S1) --------------------------------------------------------


def test_anonymous_requests_are_refused(user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    anonymous = APIClient()
    for url in [
        "/api/conversations/",
        conv_url(conv),
        conv_url(conv, "messages/"),
        conv_url(conv, "context/"),
    ]:
        response = anonymous.get(url)
        assert response.status_code in (401, 403), url
        assert str(conv.uuid) not in response.content.decode()
    assert anonymous.post(
        conv_url(conv, "messages/"), {"role": "human", "content": "hi"}, format="json"
    ).status_code in (
        401,
        403,
    )
    assert Message.objects.count() == 0


def test_basic_authentication_works(user):  # type: ignore[no-untyped-def]
    make_conversation(user, title="mine")
    client = APIClient()
    token = base64.b64encode(b"alice:alice-pw").decode()
    response = client.get("/api/conversations/", HTTP_AUTHORIZATION=f"Basic {token}")
    assert response.status_code == 200
    assert [c["title"] for c in response.json()["results"]] == ["mine"]
    wrong = base64.b64encode(b"alice:nope").decode()
    assert client.get("/api/conversations/", HTTP_AUTHORIZATION=f"Basic {wrong}").status_code in (401, 403)


def test_list_shows_only_own_conversations(api, user, other_user):  # type: ignore[no-untyped-def]
    mine = [make_conversation(user, title=f"mine {i}") for i in range(3)]
    make_conversation(other_user, title="theirs")
    make_conversation(None, title="nobody's")
    response = api.get("/api/conversations/")
    assert response.status_code == 200
    assert {c["uuid"] for c in response.json()["results"]} == {str(c.uuid) for c in mine}


def test_another_users_conversation_is_404_everywhere(api, other_user):  # type: ignore[no-untyped-def]
    theirs = make_conversation(other_user, title="secret")
    PersistentChatHistory(theirs).add_messages([ChatMessage.human("private")])
    requests = [
        ("get", conv_url(theirs), None),
        ("patch", conv_url(theirs), {"title": "hacked"}),
        ("delete", conv_url(theirs), None),
        ("get", conv_url(theirs, "messages/"), None),
        ("post", conv_url(theirs, "messages/"), {"role": "human", "content": "injected"}),
        ("get", conv_url(theirs, "context/"), None),
        ("get", conv_url(theirs, "summaries/"), None),
    ]
    for method, url, body in requests:
        response = getattr(api, method)(url, body, format="json")
        assert response.status_code == 404, (method, url)
        assert "private" not in response.content.decode()
    theirs.refresh_from_db()
    assert theirs.title == "secret"
    assert theirs.message_count == 1
    assert list(Message.objects.filter(conversation=theirs).values_list("content", flat=True)) == ["private"]


def test_unknown_and_malformed_ids_are_404(api):  # type: ignore[no-untyped-def]
    assert api.get("/api/conversations/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert api.get("/api/conversations/1/").status_code == 404
    assert api.get("/api/conversations/not-a-uuid/messages/").status_code == 404


# -- conversations --------------------------------------------------------------------------


def test_create_conversation_is_owned_by_the_requester(api, user):  # type: ignore[no-untyped-def]
    response = api.post(
        "/api/conversations/",
        {"agent_key": "support", "title": "Refund", "metadata": {"channel": "web"}},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    conv = Conversation.objects.get(uuid=body["uuid"])
    assert conv.owner == user
    assert (conv.agent_key, conv.title, conv.metadata) == ("support", "Refund", {"channel": "web"})
    assert "id" not in body and "owner" not in body
    assert body["message_count"] == 0


def test_create_refuses_metadata_that_is_not_an_object(api):  # type: ignore[no-untyped-def]
    response = api.post("/api/conversations/", {"agent_key": "a", "metadata": [1, 2]}, format="json")
    assert response.status_code == 400
    assert "metadata" in response.json()["fields"]
    assert Conversation.objects.count() == 0


def test_partial_update_edits_title_and_metadata_only(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user, title="old")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hi"), ChatMessage.ai("hello")])
    refused = api.patch(
        conv_url(conv),
        {"title": "new", "agent_key": "other", "message_count": 0, "last_seq": 0, "colour": "red"},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid"
    assert refused.json()["fields"] == {
        "agent_key": ["This field is read-only."],
        "message_count": ["This field is read-only."],
        "last_seq": ["This field is read-only."],
        "colour": ["Unknown field."],
    }
    conv.refresh_from_db()
    assert conv.title == "old"
    response = api.patch(conv_url(conv), {"title": "new", "metadata": {"k": 1}}, format="json")
    assert response.status_code == 200
    conv.refresh_from_db()
    assert (conv.title, conv.metadata, conv.agent_key) == ("new", {"k": 1}, "support")
    assert (conv.message_count, conv.last_seq) == (2, 2)
    assert api.put(conv_url(conv), {"title": "x"}, format="json").status_code == 405


def test_patch_does_not_undo_a_concurrent_append(api, user, monkeypatch):  # type: ignore[no-untyped-def]
    from agentmemory.api.views import ConversationViewSet

    conv = make_conversation(user, title="old")
    load = ConversationViewSet.get_object

    def load_then_another_process_appends(self):  # type: ignore[no-untyped-def]
        loaded = load(self)
        PersistentChatHistory(loaded.pk).add_messages([ChatMessage.human("meanwhile")])
        return loaded

    monkeypatch.setattr(ConversationViewSet, "get_object", load_then_another_process_appends)
    assert api.patch(conv_url(conv), {"title": "new"}, format="json").status_code == 200
    conv.refresh_from_db()
    assert conv.title == "new"
    assert (conv.last_seq, conv.message_count, conv.human_message_count) == (1, 1, 1)


def test_retrieve_embeds_the_current_summary(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    assert api.get(conv_url(conv)).json()["summary"] is None
    PersistentChatHistory(conv).add_messages(
        [m for i in range(3) for m in (ChatMessage.human(f"q{i}"), ChatMessage.ai(f"a{i}"))]
    )
    first = Summary.objects.create(conversation=conv, text="first part", first_seq=1, through_seq=2)
    current = Summary.objects.create(
        conversation=conv, text="up to four", first_seq=1, through_seq=4, previous=first, token_count=3
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=current)
    body = api.get(conv_url(conv)).json()
    assert body["summary"]["through_seq"] == 4
    assert body["summary"]["text"] == "up to four"
    listed = api.get(conv_url(conv, "summaries/")).json()["results"]
    assert [s["through_seq"] for s in listed] == [4, 2]


def test_delete_cascades_to_messages_and_summaries(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    keep = make_conversation(user)
    PersistentChatHistory(conv).add_messages(tool_turn(1))
    PersistentChatHistory(keep).add_messages([ChatMessage.human("stay")])
    summary = Summary.objects.create(conversation=conv, text="s", first_seq=1, through_seq=3)
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    assert api.delete(conv_url(conv)).status_code == 204
    assert not Conversation.objects.filter(pk=conv.pk).exists()
    assert not Message.objects.filter(conversation_id=conv.pk).exists()
    assert not Summary.objects.filter(conversation_id=conv.pk).exists()
    assert Message.objects.filter(conversation=keep).count() == 1
    assert api.get(conv_url(conv, "messages/")).status_code == 404


# -- messages ---------------------------------------------------------------------------------


def test_append_one_message_and_a_batch_in_the_native_shape(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    one = api.post(
        conv_url(conv, "messages/"), {"role": "human", "content": "Where is order 7?"}, format="json"
    )
    assert one.status_code == 201
    assert one.json()["seq"] == 1
    assert one.json()["role"] == "human"
    batch = {
        "messages": [
            {
                "role": "ai",
                "content": None,
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"id": 7}}],
            },
            {"role": "tool", "content": "shipped", "tool_call_id": "c1", "name": "lookup"},
            {"role": "ai", "content": "It shipped.", "metadata": {"model": "m1"}},
        ]
    }
    response = api.post(conv_url(conv, "messages/"), batch, format="json")
    assert response.status_code == 201
    stored = response.json()["messages"]
    assert [m["seq"] for m in stored] == [2, 3, 4]
    assert stored[0]["content"] is None
    assert stored[0]["tool_calls"] == [{"id": "c1", "name": "lookup", "arguments": {"id": 7}}]
    assert stored[2]["metadata"] == {"model": "m1"}
    assert all(m["token_count"] > 0 for m in stored)
    conv.refresh_from_db()
    assert (conv.message_count, conv.human_message_count, conv.last_seq) == (4, 1, 4)


def test_append_in_the_openai_format(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ]
    response = api.post(conv_url(conv, "messages/") + "?format=openai", {"messages": messages}, format="json")
    assert response.status_code == 201, response.content
    stored = response.json()["messages"]
    assert [m["role"] for m in stored] == ["system", "human", "ai", "tool", "ai"]
    assert stored[2]["tool_calls"][0]["arguments"] == {"city": "Oslo"}
    assert stored[2]["content"] is None


@pytest.mark.parametrize(
    ("messages", "query", "index", "words"),
    [
        ([{"role": "human", "content": "ok"}, {"role": "robot", "content": "x"}], "", 1, "unknown role"),
        ([{"role": "human", "content": "ok"}, {"role": "user", "content": "x"}], "", 1, "OpenAI role"),
        (
            [{"role": "human", "content": "ok"}, {"role": "tool", "content": "r", "tool_call_id": "nope"}],
            "",
            1,
            "answers no earlier",
        ),
        (
            [
                {"role": "human", "content": "ok"},
                {"role": "ai", "tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}]},
            ],
            "",
            1,
            "JSON object",
        ),
        ([{"role": "human", "content": "nul \x00 byte"}], "", 0, "NUL"),
        ([{"role": "human", "content": "ok", "colour": "red"}], "", 0, "unknown key"),
        (
            [
                {"role": "user", "content": "ok"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
                    ],
                },
            ],
            "?format=openai",
            1,
            "JSON object",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_message_and_nothing_is_stored(
    api, user, messages, query, index, words
):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    response = api.post(conv_url(conv, "messages/") + query, {"messages": messages}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_message"
    assert body["index"] == index
    assert words in body["detail"]
    assert f"message {index}" in body["detail"]
    assert Message.objects.count() == 0
    conv.refresh_from_db()
    assert (conv.message_count, conv.last_seq) == (0, 0)


@pytest.mark.parametrize(
    ("query", "body", "keys", "words"),
    [
        # a whole Chat Completions request copied as it is
        (
            "?message_format=openai",
            {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "tools": []},
            ["model", "tools"],
            "not stored",
        ),
        # a whole Anthropic request: its system prompt would be lost
        (
            "?message_format=anthropic",
            {"system": "You are terse.", "messages": [{"role": "user", "content": "hi"}]},
            ["system"],
            "append it in the native format",
        ),
        (
            "",
            {"system": "You are terse.", "messages": [{"role": "human", "content": "hi"}]},
            ["system"],
            "pinned",
        ),
    ],
)
def test_a_batch_with_keys_beside_messages_is_refused_naming_them(api, user, query, body, keys, words):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    response = api.post(conv_url(conv, "messages/") + query, body, format="json")
    assert response.status_code == 400
    data = response.json()
    assert data["error"] == "invalid_message"
    assert data["index"] is None
    assert sorted(data["fields"]) == keys
    assert words in data["detail"]
    assert Message.objects.filter(conversation=conv).count() == 0


@pytest.mark.parametrize(
    ("query", "body", "words"),
    [
        # the messages array of a provider request, posted as the body itself
        ("", [{"role": "human", "content": "hi"}], 'send a batch as {"messages": [...]}'),
        (
            "?message_format=openai",
            [{"role": "user", "content": "hi"}],
            'send a batch as {"messages": [...]}',
        ),
        ("", "hi", "not a string"),
        ("", 7, "not a number"),
        ("", None, "not null"),
    ],
)
def test_a_body_that_is_not_an_object_is_refused_naming_its_shape(api, user, query, body, words):  # type: ignore[no-untyped-def]
    # A JSON array was answered "message 0: Invalid data. Expected a dictionary, but got
    # list.", which blamed the first message; the body is at fault, and the 400 says which
    # shape to send.
    conv = make_conversation(user)
    response = api.post(
        conv_url(conv, "messages/") + query, json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["error"] == "invalid_message"
    assert data["index"] is None
    assert words in data["detail"]
    assert not data["detail"].startswith("message 0")
    assert data["fields"] == {"non_field_errors": [data["reason"]]}
    assert Message.objects.filter(conversation=conv).count() == 0


def test_message_list_pages_in_seq_order_with_a_cursor(api, user, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    history.add_messages(
        [ChatMessage.human(f"m{i}") if i % 2 == 0 else ChatMessage.ai(f"m{i}") for i in range(25)]
    )
    seqs: list[int] = []
    url: str | None = conv_url(conv, "messages/") + "?page_size=10"
    pages = 0
    with CaptureQueriesContext(connection) as queries:
        while url:
            response = api.get(url)
            assert response.status_code == 200
            body = response.json()
            seqs += [m["seq"] for m in body["results"]]
            url = body["next"]
            pages += 1
            # A client appending meanwhile sees the new messages on a later page.
            if pages == 1:
                history.add_messages([ChatMessage.human("late")])
    assert seqs == list(range(1, 27))
    assert "count" not in body
    assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
    with django_assert_max_num_queries(4):
        response = api.get(conv_url(conv, "messages/") + "?after_seq=20")
    assert [m["seq"] for m in response.json()["results"]] == [21, 22, 23, 24, 25, 26]
    assert api.get(conv_url(conv, "messages/") + "?after_seq=x").status_code == 400


def test_query_counts_do_not_grow_with_the_data(api, user, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    for i in range(30):
        make_conversation(user, title=f"c{i}")
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    for n in range(40):
        history.add_messages(tool_turn(n))
    # session, user, then one query for the page (no COUNT: cursor pagination)
    with django_assert_max_num_queries(3):
        assert api.get("/api/conversations/").status_code == 200
    with django_assert_max_num_queries(3):
        assert api.get(conv_url(conv)).status_code == 200
    with django_assert_max_num_queries(4):
        assert api.get(conv_url(conv, "messages/")).status_code == 200
    # a batch of 50 costs what a batch of 1 costs (W2): session, user, conversation, savepoint,
    # lock, insert, counters, release, the compaction check, recording that a compaction is
    # due (25 human messages), read back
    batch = {"messages": [{"role": "human" if i % 2 == 0 else "ai", "content": f"b{i}"} for i in range(50)]}
    with django_assert_max_num_queries(11):
        assert api.post(conv_url(conv, "messages/"), batch, format="json").status_code == 201
    # The first window of this budget compacts what it would leave out (gap_policy=close);
    # after that: session, user, conversation, then the builder's constant number of reads (C7).
    closing = api.get(conv_url(conv, "context/") + "?max_tokens=2000&gap_policy=close").json()
    assert closing["uncovered"]["count"] == 0
    with django_assert_max_num_queries(7):
        assert api.get(conv_url(conv, "context/") + "?max_tokens=2000").status_code == 200


# -- context windows ------------------------------------------------------------------------


def test_context_windows_hold_the_invariants(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system("You are a support agent.")])
    for n in range(12):
        history.add_messages(tool_turn(n))
    stored = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
    for max_tokens in (200, 300, 700, 5000):
        response = api.get(conv_url(conv, "context/") + f"?max_tokens={max_tokens}")
        assert response.status_code == 200, response.content
        body = response.json()
        window = window_from_response(body)
        assert (
            window_violations(window, max_tokens=max_tokens, stored_seqs=stored, newest_seq=stored[-1]) == []
        )
        assert body["total_tokens"] <= max_tokens
        assert body["messages"][0]["part"] == "system_prompt"
        assert body["messages"][0]["content"] == "You are a support agent."
        history_parts = [m for m in body["messages"] if m["part"] == "history"]
        assert sum(m["token_count"] for m in history_parts) == body["history_tokens"]
        assert body["last_seq"] == stored[-1]
    capped = api.get(conv_url(conv, "context/") + "?max_messages=5").json()
    assert len([m for m in capped["messages"] if m["part"] == "history"]) <= 5


def test_context_window_reports_what_it_leaves_in_neither_window_nor_summary(api, user, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"CONTEXT_GAP_POLICY": "report"}
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    for n in range(6):
        history.add_messages([ChatMessage.human(f"question {n}"), ChatMessage.ai(f"answer {n}")])
    body = api.get(conv_url(conv, "context/") + "?max_tokens=40").json()
    expected = ContextWindowBuilder(conv.pk, gap_policy="report").build(max_tokens=40).uncovered
    assert expected.count > 0
    assert body["uncovered"] == {
        "count": expected.count,
        "tokens": expected.tokens,
        "seqs": list(expected.seqs),
    }
    assert body["uncovered"]["seqs"] == list(range(1, body["first_seq"]))
    whole = api.get(conv_url(conv, "context/") + "?max_tokens=5000").json()
    assert whole["uncovered"] == {"count": 0, "tokens": 0, "seqs": []}


def test_context_window_compacts_what_it_would_leave_out_as_an_agent_does(api, user):  # type: ignore[no-untyped-def]
    # With gap_policy=close (compaction inline without a broker) the window a client fetches
    # to send to its model loses no turn: the messages older than it are summarised first.
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    for n in range(6):
        history.add_messages(
            [ChatMessage.human(f"question {n} " + "about shipping " * 8), ChatMessage.ai(f"answer {n}")]
        )
    assert not Summary.objects.filter(conversation=conv).exists()
    response = api.get(conv_url(conv, "context/") + "?max_tokens=150&gap_policy=close")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["uncovered"] == {"count": 0, "tokens": 0, "seqs": []}
    summary = Summary.objects.get(conversation=conv)
    assert body["summary_through_seq"] == summary.through_seq == body["first_seq"] - 1
    assert body["messages"][0]["part"] == "summary"  # no stored system prompt: the summary first


def test_context_window_with_gap_policy_report_previews_without_writing(api, user):  # type: ignore[no-untyped-def]
    # A client that only looks (a dashboard, a tiny budget tried out) must not leave a summary
    # sized to its request behind: with the default policy that GET compacted, and every later
    # window, whatever its budget, sent the summary in place of the turns it covers.
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    for n in range(6):
        history.add_messages(
            [ChatMessage.human(f"question {n} " + "about shipping " * 8), ChatMessage.ai(f"answer {n}")]
        )
    for url in (
        conv_url(conv, "context/") + "?max_tokens=150",
        conv_url(conv, "context/") + "?max_tokens=150&gap_policy=report",
    ):
        body = api.get(url).json()  # report is the default: a GET is safe
        assert body["uncovered"]["count"] > 0 and body["summary_through_seq"] is None
        assert not Summary.objects.filter(conversation=conv).exists()
    whole = api.get(conv_url(conv, "context/") + "?max_tokens=5000").json()
    assert [m["seq"] for m in whole["messages"] if m["part"] == "history"] == list(range(1, 13))
    ignored = api.get(conv_url(conv, "context/") + "?max_tokens=150&gap_policy=ignore").json()
    assert ignored["uncovered"]["count"] == 0 and ignored["first_seq"] > 1
    assert not Summary.objects.filter(conversation=conv).exists()


@pytest.mark.parametrize("value", ["", "CLOSE", "none", "close\x00"])
def test_context_window_refuses_an_unknown_gap_policy(api, user, value):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hi")])
    response = api.get(conv_url(conv, "context/"), {"gap_policy": value})
    assert response.status_code == 400
    assert "gap_policy" in response.json()["fields"]


def test_context_window_in_the_openai_format(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.system("Be brief."), *tool_turn(1)])
    response = api.get(conv_url(conv, "context/") + "?format=openai")
    assert response.status_code == 200
    body = response.json()
    assert body["format"] == "openai"
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"q": "order 1"}'
    assert [m["tool_call_id"] for m in body["messages"][3:5]] == ["c1a", "c1b"]


def test_context_window_budget_error_is_a_422_with_the_numbers(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    PersistentChatHistory(conv).add_messages([ChatMessage.human("word " * 400)])
    response = api.get(conv_url(conv, "context/") + "?max_tokens=50")
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "context_budget_exceeded"
    assert body["seq"] == 1
    assert body["tokens"] > 50
    assert body["available"] <= 50
    assert body["max_tokens"] == 50


def test_context_window_parameters_are_validated(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    assert api.get(conv_url(conv, "context/") + "?max_tokens=0").status_code == 400
    assert api.get(conv_url(conv, "context/") + "?max_tokens=abc").status_code == 400
    assert api.get(conv_url(conv, "context/") + "?max_messages=-1").status_code == 400
    empty = api.get(conv_url(conv, "context/"))
    assert empty.status_code == 200
    assert empty.json()["messages"] == []


# -- schema and pages -----------------------------------------------------------------------


def test_openapi_schema_and_docs_are_served(client):  # type: ignore[no-untyped-def]
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/conversations/{uuid}/context/" in paths
    assert "/api/conversations/{conversation_uuid}/messages/" in paths
    assert client.get("/api/docs/").status_code == 200
    home = client.get("/")
    assert home.status_code == 200
    assert b"/admin/" in home.content and b"/api/docs/" in home.content


def test_conversations_can_be_filtered_by_agent_key(api, user):  # type: ignore[no-untyped-def]
    Conversation.objects.create(owner=user, agent_key="support", title="a")
    Conversation.objects.create(owner=user, agent_key="sales", title="b")
    response = api.get("/api/conversations/?agent_key=sales")
    assert response.status_code == 200
    assert [c["title"] for c in response.json()["results"]] == ["b"]


@pytest.mark.parametrize(
    "body",
    [
        {"role": ["human"], "content": "hi"},
        {"role": {}, "content": "hi"},
        {"role": "human", "content": "hi", "metadata": {"k": "\ud800"}},
        {"role": "human", "content": "hi", "metadata": []},
        {"role": "human", "content": "hi", "name": False},
        {"role": "ai", "content": None, "tool_calls": False},
    ],
)
def test_malformed_messages_are_a_400_and_nothing_is_stored(api, user, body):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    # json.dumps escapes a lone surrogate as \ud800, as a client would send it.
    response = api.post(conv_url(conv, "messages/"), json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert not Message.objects.filter(conversation=conv).exists()


def test_conversation_metadata_with_a_lone_surrogate_is_refused(api, user):  # type: ignore[no-untyped-def]
    body = json.dumps({"title": "t", "metadata": {"k": "\ud800"}})
    response = api.post("/api/conversations/", body, content_type="application/json")
    assert response.status_code == 400
    assert not Conversation.objects.exists()


def test_oversized_budget_parameters_are_a_400(api, user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    assert api.get(conv_url(conv, f"context/?max_tokens={2**62}")).status_code == 400


def test_cancel_pending_tool_calls_answers_calls_a_client_left_waiting(api, user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    calls = [{"id": "c1", "name": "lookup", "arguments": {}}, {"id": "c2", "name": "lookup", "arguments": {}}]
    batch = {
        "messages": [{"role": "human", "content": "go"}, {"role": "ai", "content": None, "tool_calls": calls}]
    }
    assert api.post(conv_url(conv, "messages/"), batch, format="json").status_code == 201
    # a pending call never blocks the conversation: the human message is stored after it
    later = api.post(conv_url(conv, "messages/"), {"role": "human", "content": "hello?"}, format="json")
    assert later.status_code == 201
    context = api.get(conv_url(conv, "context/")).json()
    assert context["skipped_pending"] == [2]
    assert [m["content"] for m in context["messages"]] == ["go", "hello?"]

    response = api.post(
        conv_url(conv, "cancel-pending-tool-calls/"), {"reason": "client gone"}, format="json"
    )
    assert response.status_code == 200
    assert [(m["tool_call_id"], m["content"], m["seq"]) for m in response.json()["messages"]] == [
        ("c1", "Error: client gone", 4),
        ("c2", "Error: client gone", 5),
    ]
    context = api.get(conv_url(conv, "context/")).json()
    assert context["skipped_pending"] == []
    assert [m.get("tool_call_id") or m["content"] for m in context["messages"]] == [
        "go",
        None,
        "c1",
        "c2",
        "hello?",
    ]
    again = api.post(conv_url(conv, "cancel-pending-tool-calls/"), {}, format="json")
    assert again.status_code == 200 and again.json() == {"messages": [], "left_out": 0}
    other = Conversation.objects.create()
    assert api.post(conv_url(other, "cancel-pending-tool-calls/"), {}, format="json").status_code == 404


def test_browsable_pages_describe_views_without_docstring_markup(api, user):  # type: ignore[no-untyped-def]
    conv = make_conversation(user)
    for url, code in [
        ("/api/conversations/", "uuid"),
        (conv_url(conv, "messages/"), "seq"),
        ("/api/facts/", "agentmemory.knowledge.KnowledgeMemory"),
    ]:
        page = api.get(url, HTTP_ACCEPT="text/html").content.decode()
        description = page.split('<div class="pull-left">', 1)[1].split("</div>", 1)[0]
        assert f"<code>{code}</code>" in description and "`" not in description, description
    options = api.options("/api/conversations/").json()
    assert options["description"] == "The requesting user's conversations, identified by their public `uuid`."
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    # the schema's descriptions are CommonMark, where the docstrings' double backticks are code
    assert "``uuid``" in schema["paths"]["/api/conversations/"]["get"]["description"]


def _readme_json_after(marker: str) -> dict:  # type: ignore[type-arg]
    """The JSON block of README.md that follows the first line holding ``marker``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after = text[text.index(marker) :]
    start = after.index("```json\n") + len("```json\n")
    return json.loads(after[start : after.index("\n```", start)])


def test_the_readme_shows_the_context_window_the_api_answers(api):  # type: ignore[no-untyped-def]
    # The README's "The API from a shell": the same turn, the same request, the same answer
    # (its keys and messages; the token figures depend on the configured counter).
    created = api.post("/api/conversations/", {"agent_key": "support", "title": "Order 1042"}, format="json")
    conv = created.json()
    turn = {
        "messages": [
            {"role": "human", "content": "Where is my order 1042?"},
            {
                "role": "ai",
                "content": None,
                "tool_calls": [{"id": "call_1", "name": "lookup_order", "arguments": {"order_id": "1042"}}],
            },
            {
                "role": "tool",
                "content": '{"status": "shipped", "carrier": "DHL"}',
                "tool_call_id": "call_1",
                "name": "lookup_order",
            },
            {"role": "ai", "content": "Order 1042 has shipped with DHL."},
        ]
    }
    assert api.post(f"/api/conversations/{conv['uuid']}/messages/", turn, format="json").status_code == 201
    body = api.get(f"/api/conversations/{conv['uuid']}/context/?max_tokens=2000&message_format=openai").json()
    shown = _readme_json_after("The context window comes back in OpenAI's chat shape")
    assert list(shown) == list(body)
    assert shown["messages"] == body["messages"]
