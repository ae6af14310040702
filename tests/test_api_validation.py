"""Request bodies are validated by the serializers the OpenAPI schema is generated from: a body
the schema calls valid is accepted, one it calls invalid is a 400 in the API's error shape
naming the field, and nothing of a refused request is stored."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentmemory.api.serializers import IMPORT_EXAMPLE
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message
from tests.test_api_schema import _json_schema

pytestmark = pytest.mark.django_db

MESSAGES = "/api/conversations/{conversation_uuid}/messages/"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])
    return conv


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-any-return]


def body_schema(openapi: dict[str, Any], path: str, method: str) -> Draft202012Validator:
    """A validator of the JSON request body ``openapi`` documents for the operation."""
    body = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({**_json_schema(body), "components": _json_schema(openapi["components"])})


def messages_url(conv: Conversation) -> str:
    return f"/api/conversations/{conv.uuid}/messages/"


CALL = {"id": "c1", "name": "lookup", "arguments": {"order": 7}}
VALID_MESSAGES = {
    "human text": {"role": "human", "content": "Where is order 7?"},
    "empty human text": {"role": "human", "content": ""},
    "system": {"role": "system", "content": "Be brief.", "metadata": {"source": "test"}},
    "ai calls a tool": {"role": "ai", "content": None, "tool_calls": [CALL]},
    "null arguments": {"role": "ai", "tool_calls": [{"id": "c2", "name": "now", "arguments": None}]},
    "human with parts": {
        "role": "human",
        "parts": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": PNG, "mime_type": "image/png", "detail": "low"},
            {"type": "image", "url": "https://example.com/a.png"},
            {"type": "file", "file_id": "file-1", "filename": "a.pdf"},
        ],
    },
    "image as a data URL": {
        "role": "human",
        "parts": [{"type": "image", "url": f"data:image/png;base64,{PNG}"}],
    },
    "batch": {"messages": [{"role": "human", "content": "a"}, {"role": "ai", "content": "b"}]},
}


@pytest.mark.parametrize("name", sorted(VALID_MESSAGES))
def test_a_message_the_schema_calls_valid_is_stored(api, conv, openapi, name):  # type: ignore[no-untyped-def]
    body = VALID_MESSAGES[name]
    assert not list(body_schema(openapi, MESSAGES, "post").iter_errors(body))
    response = api.post(messages_url(conv), body, format="json")
    assert response.status_code == 201, response.content


def test_a_tool_result_answering_a_pending_call_is_stored(api, conv, openapi):  # type: ignore[no-untyped-def]
    assert (
        api.post(messages_url(conv), {"role": "ai", "tool_calls": [CALL]}, format="json").status_code == 201
    )
    result = {"role": "tool", "content": "shipped", "tool_call_id": "c1", "name": "lookup"}
    assert not list(body_schema(openapi, MESSAGES, "post").iter_errors(result))
    assert api.post(messages_url(conv), result, format="json").status_code == 201


def test_an_orphan_tool_result_is_refused_without_python_advice(api, conv):  # type: ignore[no-untyped-def]
    """The 400 for a tool result that answers no call says why, and nothing an API client
    cannot act on: ``validate_tool_pairs=False`` is an argument of the Python API only, which
    ``str()`` of the Python exception still names."""
    from agentmemory.exceptions import InvalidMessageError

    result = {"role": "tool", "content": "shipped", "tool_call_id": "c9", "name": "lookup"}
    response = api.post(messages_url(conv), result, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_message"
    assert "answers no earlier unanswered tool call" in body["detail"]
    assert "validate_tool_pairs" not in response.content.decode()
    assert conv.messages.count() == 2
    with pytest.raises(InvalidMessageError, match="validate_tool_pairs=False") as info:
        PersistentChatHistory(conv).add_message(ChatMessage.tool("shipped", tool_call_id="c9", name="lookup"))
    assert "validate_tool_pairs" not in info.value.reason


TOO_LONG = "x" * 256
INVALID_MESSAGES = {
    "unknown role": ({"role": "robot", "content": "x"}, "role"),
    "OpenAI role": ({"role": "user", "content": "x"}, "role"),
    "no role": ({"content": "x"}, "role"),
    "content not text": ({"role": "human", "content": 7}, "content"),
    "content with NUL": ({"role": "human", "content": "a\x00b"}, "content"),
    "human without content": ({"role": "human"}, "content"),
    "unknown key": ({"role": "human", "content": "x", "colour": "red"}, "colour"),
    "tool calls on a human message": ({"role": "human", "content": "x", "tool_calls": [CALL]}, "tool_calls"),
    "ai with nothing": ({"role": "ai", "content": None}, "content"),
    "tool result without id": ({"role": "tool", "content": "x"}, "tool_call_id"),
    "tool_call_id too long": ({"role": "tool", "content": "x", "tool_call_id": TOO_LONG}, "tool_call_id"),
    "arguments as a JSON string": (
        {"role": "ai", "tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}]},
        "tool_calls.0.arguments",
    ),
    "tool call without a name": ({"role": "ai", "tool_calls": [{"id": "c"}]}, "tool_calls.0.name"),
    "tool call with an unknown key": (
        {"role": "ai", "tool_calls": [{**CALL, "type": "function"}]},
        "tool_calls.0.type",
    ),
    "metadata not an object": ({"role": "human", "content": "x", "metadata": [1]}, "metadata"),
    "unknown part type": (
        {"role": "human", "parts": [{"type": "video", "url": "https://e.x/v"}]},
        "parts.0.type",
    ),
    "image on an ai message": (
        {"role": "ai", "parts": [{"type": "image", "url": "https://example.com/a.png"}]},
        "parts",
    ),
    "image of a type providers refuse": (
        {"role": "human", "parts": [{"type": "image", "data": PNG, "mime_type": "image/tiff"}]},
        "parts",
    ),
    "image with two sources": (
        {
            "role": "human",
            "parts": [{"type": "image", "data": PNG, "mime_type": "image/png", "url": "https://e.x"}],
        },
        "parts",
    ),
    "data that is not base64": (
        {"role": "human", "parts": [{"type": "audio", "data": "!!!", "mime_type": "audio/wav"}]},
        "parts",
    ),
    "a batch with a bad second message": (
        {"messages": [{"role": "human", "content": "ok"}, {"role": "robot", "content": "x"}]},
        "messages.1.role",
    ),
}


@pytest.mark.parametrize("name", sorted(INVALID_MESSAGES))
def test_a_message_the_schema_calls_invalid_is_a_400_naming_the_field(api, conv, openapi, name):  # type: ignore[no-untyped-def]
    body, field = INVALID_MESSAGES[name]
    assert list(body_schema(openapi, MESSAGES, "post").iter_errors(body)), "the schema accepts it"
    before = Message.objects.count()
    response = api.post(messages_url(conv), body, format="json")
    assert response.status_code == 400, response.content
    answer = response.json()
    assert answer["error"] == "invalid_message" and answer["detail"] and answer["reason"]
    assert field in answer["fields"], answer
    assert Message.objects.count() == before


def test_a_refusal_by_stored_state_names_the_field_in_the_batch(api, conv):  # type: ignore[no-untyped-def]
    batch = {
        "messages": [
            {"role": "human", "content": "ok"},
            {"role": "tool", "content": "r", "tool_call_id": "zz"},
        ]
    }
    answer = api.post(messages_url(conv), batch, format="json").json()
    assert answer["index"] == 1 and "answers no earlier" in answer["reason"]
    assert list(answer["fields"]) == ["messages.1.tool_call_id"]


def test_the_setting_limits_are_in_the_schema_and_enforced(api, conv, settings):  # type: ignore[no-untyped-def]
    from drf_spectacular.generators import SchemaGenerator

    settings.AGENTMEMORY = {"MAX_MESSAGE_CHARS": 10, "MAX_TOOL_CALLS_PER_MESSAGE": 1}
    openapi = SchemaGenerator().get_schema(request=None, public=True)
    native = openapi["components"]["schemas"]["NativeMessageInputRequest"]["properties"]
    assert native["content"]["maxLength"] == 10 and native["tool_calls"]["maxItems"] == 1
    over = api.post(messages_url(conv), {"role": "human", "content": "x" * 11}, format="json")
    assert over.status_code == 400 and "MAX_MESSAGE_CHARS" in over.json()["fields"]["content"][0]
    calls = [{"id": f"c{i}", "name": "f", "arguments": {}} for i in range(2)]
    assert api.post(messages_url(conv), {"role": "ai", "tool_calls": calls}, format="json").status_code == 400
    assert (
        api.post(messages_url(conv), {"role": "human", "content": "x" * 10}, format="json").status_code == 201
    )


def test_the_openai_format_still_validates(api, conv):  # type: ignore[no-untyped-def]
    good = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert api.post(messages_url(conv) + "?message_format=openai", good, format="json").status_code == 201
    bad = {"role": "human", "content": "hi"}
    refused = api.post(messages_url(conv) + "?message_format=openai", bad, format="json")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_message"
    assert "role" in refused.json()["fields"]


def test_fact_bodies_follow_the_schema(api, user, openapi):  # type: ignore[no-untyped-def]
    create = body_schema(openapi, "/api/facts/", "post")
    good = {"content": "Likes tea", "category": "preferences", "importance": 0.5, "ttl": None}
    assert not list(create.iter_errors(good))
    assert api.post("/api/facts/", good, format="json").status_code == 201
    for body, field in (
        ({"content": "   "}, "content"),
        ({"content": "x", "category": 5}, "category"),
        ({"content": "x", "importance": 2}, "importance"),
        ({"content": "x", "colour": "red"}, "colour"),
    ):
        assert list(create.iter_errors(body)), body
        refused = api.post("/api/facts/", body, format="json")
        assert refused.status_code == 400 and field in refused.json()["fields"], refused.content
    fact = KnowledgeMemory(user).store("Lives in Oslo").fact
    patch = body_schema(openapi, "/api/facts/{id}/", "patch")
    assert list(patch.iter_errors({"namespace": "x"}))
    refused = api.patch(f"/api/facts/{fact.uuid}/", {"namespace": "x"}, format="json")
    assert refused.status_code == 400 and "namespace" in refused.json()["fields"]
    assert not list(patch.iter_errors({"persistent": True}))
    assert api.patch(f"/api/facts/{fact.uuid}/", {"persistent": True}, format="json").status_code == 200
    assert Fact.objects.count() == 2


def test_import_documents_follow_the_schema(api, openapi):  # type: ignore[no-untyped-def]
    schema = body_schema(openapi, "/api/conversations/import/", "post")
    assert not list(schema.iter_errors(IMPORT_EXAMPLE))
    assert api.post("/api/conversations/import/", IMPORT_EXAMPLE, format="json").status_code == 201
    for body, path in (
        ({}, "format"),
        ({**IMPORT_EXAMPLE, "version": 2}, "version"),
        ({**IMPORT_EXAMPLE, "messages": [1]}, "messages[0]"),
        ({**IMPORT_EXAMPLE, "conversation": None}, "conversation"),
    ):
        assert list(schema.iter_errors(body)), body
        refused = api.post("/api/conversations/import/", body, format="json")
        assert refused.status_code == 400, refused.content
        answer = refused.json()
        assert answer["error"] == "invalid_document" and answer["path"] == path and answer["fields"]
    # JSON columns: the schema gives the type import requires.
    message = IMPORT_EXAMPLE["messages"][0]
    for column, value in (("tool_calls", None), ("tool_calls", [1]), ("metadata", []), ("parts", [{}])):
        body = {**IMPORT_EXAMPLE, "messages": [{**message, column: value}]}
        assert list(schema.iter_errors(body)), (column, value)
        refused = api.post("/api/conversations/import/", body, format="json")
        assert refused.status_code == 400 and refused.json()["path"].startswith(f"messages[0].{column}")
    # A summary without text: the schema says so, and import refuses it by path.
    blank = {
        **IMPORT_EXAMPLE,
        "summaries": [
            {
                "first_seq": 0,
                "through_seq": 1,
                "text": " \n",
                "token_counter": "approx",
                "model": "",
                "prompt_version": "",
            }
        ],
    }
    assert [e for e in schema.iter_errors(blank) if "text" in list(e.absolute_path) or "text" in e.message]
    refused = api.post("/api/conversations/import/", blank, format="json")
    assert refused.status_code == 400 and refused.json()["path"] == "summaries[0].text", refused.content
    assert Conversation.objects.count() == 1


def test_conversation_bodies_follow_the_schema(api, conv, openapi):  # type: ignore[no-untyped-def]
    schema = body_schema(openapi, "/api/conversations/", "post")
    for body, field in (({"title": 5}, "title"), ({"metadata": None}, "metadata"), ({"x": 1}, "x")):
        assert list(schema.iter_errors(body)), body
        refused = api.post("/api/conversations/", body, format="json")
        assert refused.status_code == 400 and field in refused.json()["fields"]
    assert api.post("/api/conversations/", {"title": " spaced "}, format="json").json()["title"] == " spaced "


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ("messages/?page_size=0", 400),
        ("messages/?page_size=x", 400),
        ("messages/?page_size=", 400),
        ("messages/?page_size=" + "9" * 40, 200),
        ("messages/?after_seq=", 400),
        ("context/?max_tokens=", 400),
        ("export/?format=", 404),
    ],
)
def test_query_parameters_outside_the_schema_are_refused(api, conv, query, status):  # type: ignore[no-untyped-def]
    response = api.get(f"/api/conversations/{conv.uuid}/{query}")
    assert response.status_code == status, response.content
    if status != 200:
        assert response.json()["error"]


def test_an_empty_usage_bound_is_refused(api):  # type: ignore[no-untyped-def]
    response = api.get("/api/usage/", {"until": ""})
    assert response.status_code == 400 and "until" in response.json()["fields"]


def test_a_usage_range_that_ends_before_it_starts_is_refused(api):  # type: ignore[no-untyped-def]
    response = api.get("/api/usage/", {"since": "2026-01-01T00:00:00Z", "until": "2025-01-01T00:00:00Z"})
    assert response.status_code == 400 and "until" in response.json()["fields"]
    same = api.get("/api/usage/", {"since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"})
    assert same.status_code == 200  # an empty range, not a reversed one


@pytest.mark.parametrize(
    "value, says",
    [
        ("9223372036854775808", "At most 9,223,372,036,854,775,807"),  # past the largest seq
        ("1" * 5000, "At most 9,223,372,036,854,775,807"),  # past int()'s digit limit: still a 400
        ("\uff11\uff10", "whole number"),  # fullwidth 10: not ASCII digits
        ("٣", "whole number"),
        ("-5", "whole number of 0 or more"),  # the sign is the fault, not the number
        ("+5", "no sign"),
    ],
)
def test_a_whole_number_parameter_says_what_is_wrong_with_it(api, conv, value, says):  # type: ignore[no-untyped-def]
    response = api.get(f"/api/conversations/{conv.uuid}/messages/", {"after_seq": value})
    assert response.status_code == 400
    assert says in response.json()["fields"]["after_seq"][0]


def test_the_batch_serializer_validates_each_message_on_its_own():  # type: ignore[no-untyped-def]
    from agentmemory.api.serializers import MessageBatchInputSerializer

    good = MessageBatchInputSerializer(
        data={"messages": [{"role": "human", "content": "a"}, {"role": "ai", "tool_calls": [CALL]}]}
    )
    assert good.is_valid(), good.errors
    assert [m.role.value for m in good.validated_data["messages"]] == ["human", "ai"]
    bad = MessageBatchInputSerializer(
        data={"messages": [{"role": "human", "content": "a"}, {"role": "human"}]}
    )
    assert not bad.is_valid() and "content" in bad.errors["messages"][1]


def test_the_longest_ttl_is_in_the_schema_and_enforced(api, openapi):  # type: ignore[no-untyped-def]
    from agentmemory.knowledge import MAX_TTL_SECONDS

    schema = body_schema(openapi, "/api/facts/", "post")
    longest = {"content": "Renews yearly", "ttl": float(MAX_TTL_SECONDS)}
    assert not list(schema.iter_errors(longest))
    assert api.post("/api/facts/", longest, format="json").status_code == 201
    longer = {"content": "Renews yearly", "ttl": MAX_TTL_SECONDS + 1.0}
    assert list(schema.iter_errors(longer))
    refused = api.post("/api/facts/", longer, format="json")
    assert refused.status_code == 400 and "ttl" in refused.json()["fields"]
