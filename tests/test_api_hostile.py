"""Hostile requests: each answers 4xx with the API's JSON error shape (``{"error": code,
"detail": text, ...}``) and stores nothing; the admin refuses the same input without a 500.
The requests are those that answered 500 or an HTML page before (issue 7, point 10)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db

NOT_A_UUID = "0000000000000000000000000000000000"  # 34 characters: matches the URL pattern


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support", title="mine")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])
    return conv


def url(conv: Conversation | str, suffix: str = "") -> str:
    key = conv.uuid if isinstance(conv, Conversation) else conv
    return f"/api/conversations/{key}/{suffix}"


def assert_error(response, status: int | tuple[int, ...], error: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert (
        isinstance(body, dict) and isinstance(body.get("error"), str) and isinstance(body.get("detail"), str)
    )
    if error is not None:
        assert body["error"] == error, body
    return body


def snapshot() -> tuple[int, int, list]:
    return (
        Conversation.objects.count(),
        Message.objects.count(),
        list(Conversation.objects.order_by("pk").values_list("title", "metadata", "last_seq")),
    )


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("get", "", None),
        ("patch", "", {"title": "x"}),
        ("delete", "", None),
        ("get", "context/", None),
        ("get", "messages/", None),
        ("post", "messages/", {"role": "human", "content": "x"}),
        ("get", "summaries/", None),
        ("post", "cancel-pending-tool-calls/", {}),
        ("get", "export/", None),
    ],
)
@pytest.mark.parametrize("bad_id", [NOT_A_UUID, "not-a-uuid", "x", "%00", "a.b"])
def test_segment_that_is_not_a_uuid_is_a_json_404(api, conv, method, suffix, body, bad_id):  # type: ignore[no-untyped-def]
    before = snapshot()
    response = getattr(api, method)(url(bad_id, suffix), body, format="json")
    assert_error(response, 404, "not_found")
    assert snapshot() == before


def _cursor(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize(
    "query",
    ["p=abc", "p=1e400", "o=-1", "o=x", "p=" + "9" * 40, "p=%00", "r=1&p=nan", "r=x&p=1"],
)
def test_crafted_message_cursor_is_4xx(api, conv, query):  # type: ignore[no-untyped-def]
    response = api.get(url(conv, "messages/"), {"cursor": _cursor(query)})
    assert_error(response, (400, 404))


@pytest.mark.parametrize(
    "query",
    [
        "p=not-a-date",
        "p=9999-99-99",
        "p=%00",
        "o=-5",
        # dates without a UTC offset (a digit string parses as one) would be compared as
        # local time, which Django warns about
        "p=2026-01-01T00:00:00",
        "p=111111111111111111",
        "p=2026-01-01T00:00:00.1234567891234",
    ],
)
def test_crafted_conversation_cursor_is_4xx(api, conv, query):  # type: ignore[no-untyped-def]
    response = api.get("/api/conversations/", {"cursor": _cursor(query)})
    assert_error(response, (400, 404))


@pytest.mark.parametrize("position", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
@pytest.mark.parametrize("path", ["/api/conversations/", "/api/facts/"])
def test_cursor_time_that_has_no_utc_time_is_404(api, conv, path, position):  # type: ignore[no-untyped-def]
    # a time the database would compare in UTC, where it falls outside years 1-9999
    # (OverflowError: a 500 before)
    response = api.get(path, {"cursor": _cursor(urlencode({"p": position}))})
    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("offset", ["-20:21", "+16:00", "+23:59"])
@pytest.mark.parametrize("path", ["/api/conversations/", "/api/facts/"])
def test_cursor_time_at_any_utc_offset_python_reads_is_its_instant(api, conv, path, offset):  # type: ignore[no-untyped-def]
    # Python reads UTC offsets up to 23:59, PostgreSQL takes 15:59 at most ("time zone
    # displacement out of range", a 500): the position is compared as its instant in UTC
    KnowledgeMemory(conv.owner).store("a fact to page past", "notes", persistent=True)
    moment = datetime(2999, 1, 1, tzinfo=UTC)
    local = moment.astimezone(datetime.strptime(offset, "%z").tzinfo).isoformat()
    answers = [
        api.get(path, {"cursor": _cursor(urlencode({"p": position}))})
        for position in (local, moment.isoformat())
    ]
    assert [a.status_code for a in answers] == [200, 200], answers[0].content[:300]
    assert answers[0].json()["results"] == answers[1].json()["results"] != []


def test_undecodable_cursor_is_404_json(api, conv):  # type: ignore[no-untyped-def]
    not_ascii = base64.b64encode(b"\xff\xfe=").decode()
    assert_error(api.get(url(conv, "summaries/"), {"cursor": not_ascii}), 404)


def test_huge_cursor_offset_is_clamped_not_an_error(api, conv):  # type: ignore[no-untyped-def]
    response = api.get(url(conv, "messages/"), {"cursor": _cursor("o=99999999999999999999999")})
    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_400_and_stores_nothing(api, conv, depth):  # type: ignore[no-untyped-def]
    before = snapshot()
    nested = "[" * depth + "]" * depth
    bodies = [
        (url(conv, "messages/"), nested),
        (url(conv, "messages/"), '{"role": "human", "content": "x", "metadata": {"a": ' + nested + "}}"),
        ("/api/conversations/", '{"agent_key": "a", "metadata": {"a": ' + nested + "}}"),
        (url(conv, "cancel-pending-tool-calls/"), nested),
    ]
    for target, body in bodies:
        assert_error(api.post(target, body, content_type="application/json"), 400)
    assert_error(
        api.patch(url(conv), '{"metadata": {"a": ' + nested + "}}", content_type="application/json"), 400
    )
    assert snapshot() == before


@pytest.mark.parametrize("body", ["[1, 2]", '"stop"', "3", "null", "true"])
def test_cancel_pending_tool_calls_refuses_a_body_that_is_not_an_object(api, conv, body):  # type: ignore[no-untyped-def]
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("weather?"), ChatMessage.ai(None, [ToolCall(id="c1", name="w", arguments={})])]
    )
    before = snapshot()
    response = api.post(url(conv, "cancel-pending-tool-calls/"), body, content_type="application/json")
    assert_error(response, 400)
    assert snapshot() == before


@pytest.mark.parametrize("value", ["\x00", "support\x00"])
def test_nul_byte_in_agent_key_filter_is_400(api, conv, value):  # type: ignore[no-untyped-def]
    assert_error(api.get("/api/conversations/", {"agent_key": value}), 400)


def test_undecodable_bytes_in_agent_key_filter_match_nothing(api, conv):  # type: ignore[no-untyped-def]
    # An encoded lone surrogate is not UTF-8: Django decodes it to U+FFFD, which matches nothing.
    response = api.get("/api/conversations/?agent_key=%ED%A0%80")
    assert response.status_code == 200 and response.json()["results"] == []


@pytest.mark.parametrize(
    "metadata_json",
    ['{"a": "\\u0000"}', '{"\\u0000": 1}', '{"a": "\\ud800"}', '{"a": NaN}', '{"a": Infinity}', "null"],
)
def test_api_metadata_refuses_nul_surrogates_non_finite_and_null(api, conv, metadata_json):  # type: ignore[no-untyped-def]
    before = snapshot()
    create = '{"agent_key": "a", "metadata": ' + metadata_json + "}"
    assert_error(api.post("/api/conversations/", create, content_type="application/json"), 400)
    patch = '{"metadata": ' + metadata_json + "}"
    assert_error(api.patch(url(conv), patch, content_type="application/json"), 400)
    message = '{"role": "human", "content": "x", "metadata": ' + metadata_json + "}"
    if metadata_json != "null":
        assert_error(api.post(url(conv, "messages/"), message, content_type="application/json"), 400)
    assert snapshot() == before


def test_body_over_the_upload_limit_is_413_json(api, conv, settings):  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    before = snapshot()
    body = json.dumps({"role": "human", "content": "x" * 20_000})
    assert_error(api.post(url(conv, "messages/"), body, content_type="application/json"), 413, "too_large")
    form = {"agent_key": "a", "title": "t" * 20_000}
    assert_error(api.post("/api/conversations/", form), 413, "too_large")
    assert snapshot() == before


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e3", "1.5", "10" + "0" * 30, "0x10", "\x00"])
def test_max_tokens_that_is_not_a_whole_number_is_400(api, conv, value):  # type: ignore[no-untyped-def]
    body = assert_error(api.get(url(conv, "context/"), {"max_tokens": value}), 400, "invalid")
    assert "max_tokens" in body["fields"]


def test_max_tokens_above_the_ceiling_is_400(api, conv, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_CONTEXT_TOKENS": 50_000}
    assert api.get(url(conv, "context/"), {"max_tokens": 50_000}).status_code == 200
    body = assert_error(api.get(url(conv, "context/"), {"max_tokens": 50_001}), 400, "invalid")
    assert "50,000" in body["fields"]["max_tokens"][0]
    assert_error(api.get(url(conv, "context/"), {"max_tokens": 10**9}), 400, "invalid")


def test_a_default_budget_over_the_ceiling_is_400_not_500(api, conv, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_CONTEXT_TOKENS": 5_000, "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT": 8_000}
    body = assert_error(api.get(url(conv, "context/")), 400, "invalid")
    assert "MAX_CONTEXT_TOKENS" in body["fields"]["max_tokens"][0]
    assert api.get(url(conv, "context/"), {"max_tokens": 4_000}).status_code == 200


def test_validation_errors_keep_field_messages(api):  # type: ignore[no-untyped-def]
    body = assert_error(
        api.post("/api/conversations/", {"agent_key": "a", "metadata": [1]}, format="json"), 400
    )
    assert body["error"] == "invalid" and "metadata" in body["fields"]


def test_unauthenticated_and_unknown_method_use_the_json_shape(conv):  # type: ignore[no-untyped-def]
    anonymous = APIClient()
    assert_error(anonymous.get("/api/conversations/"), (401, 403))


# -- the admin -------------------------------------------------------------------------------


@pytest.fixture
def admin_client_(django_user_model, client):  # type: ignore[no-untyped-def]
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "root-pw")
    client.raise_request_exception = False
    client.force_login(admin)
    return client


@pytest.mark.parametrize(
    "query",
    [
        {"agent_key": "\x00"},
        {"agent_key__exact": "a\x00b"},
        {"q": "\x00"},
        {"owner__id__exact": "\x00"},
        {"created_at__gte": "\x00"},
    ],
)
def test_admin_conversation_filters_with_nul_bytes_are_4xx(admin_client_, conv, query):  # type: ignore[no-untyped-def]
    response = admin_client_.get("/admin/agentmemory/conversation/", query)
    assert 400 <= response.status_code < 500 or response.status_code == 302, response.status_code


@pytest.mark.parametrize("model", ["conversation", "message", "summary", "fact", "modelcall"])
@pytest.mark.parametrize(
    "query",
    [
        "pk__in=9223372036854775808",
        "created_at__year=0",
        "created_at__year=10000",
        "created_at__year=9223372036854775808",
        "created_at__gte=0001-01-01T00:00:00%2B14:00",
        "created_at__lt=9999-12-31T23:59:59-14:00",
    ],
)
def test_admin_filter_values_past_the_database_are_400(admin_client_, conv, model, query):  # type: ignore[no-untyped-def]
    # the admin passes any lookup on a model's own fields to the database; these raised
    # OverflowError or ValueError in the list's count: a 500 (PostgreSQL compares the
    # numbers and times that SQLite's driver refuses: a list there)
    response = admin_client_.get(f"/admin/agentmemory/{model}/?{query}")
    assert response.status_code in (200, 400), (response.status_code, response.content[:200])
    if response.status_code == 400 or "year" in query or connection.vendor == "sqlite":
        assert response.status_code == 400 and "cannot be compared" in response.content.decode()
    assert admin_client_.get(f"/admin/agentmemory/{model}/").status_code == 200


@pytest.mark.parametrize(("model", "search"), [("conversation", "x" * 100_000), ("summary", "a " * 5_000)])
def test_admin_search_longer_than_a_title_is_400(admin_client_, conv, model, search):  # type: ignore[no-untyped-def]
    # SQLite: "LIKE or GLOB pattern too complex" (over 50,000 bytes), "Expression tree is too
    # large" (a term per word): a 500
    response = admin_client_.get(f"/admin/agentmemory/{model}/", {"q": search})
    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert admin_client_.get(f"/admin/agentmemory/{model}/", {"q": "x" * 1_000}).status_code == 200


def test_admin_recall_with_an_agent_key_no_fact_can_have_is_400(admin_client_, conv):  # type: ignore[no-untyped-def]
    owner = conv.owner_id
    response = admin_client_.get(
        "/admin/agentmemory/fact/recall/", {"owner": owner, "q": "hello", "agent_key": "x" * 101}
    )
    assert response.status_code == 400, response.status_code
    assert "agent_key must be at most 100 characters" in response.content.decode()


def test_admin_filter_with_undecodable_bytes_is_answered(admin_client_, conv):  # type: ignore[no-untyped-def]
    # An encoded lone surrogate is not UTF-8: Django decodes it to U+FFFD, which matches nothing.
    response = admin_client_.get("/admin/agentmemory/conversation/?q=%ED%A0%80")
    assert response.status_code == 200 and not response.context["cl"].result_count


@pytest.mark.parametrize(
    "query",
    [{"conversation__id__exact": "\x00"}, {"role": "\x00"}, {"role__exact": "ai\x00"}, {"q": "\x00"}],
)
def test_admin_message_and_summary_filters_with_nul_bytes_are_4xx(admin_client_, conv, query):  # type: ignore[no-untyped-def]
    for model in ("message", "summary"):
        response = admin_client_.get(f"/admin/agentmemory/{model}/", query)
        assert 400 <= response.status_code < 500 or response.status_code == 302, (model, response.status_code)


@pytest.mark.parametrize(
    "metadata",
    [
        '{"a": "\\u0000"}',
        '{"\\u0000": 1}',
        '{"a": "\\ud800"}',
        "null",
        '{"a": NaN}',
        "[1, 2]",
        '{"a": ' + "[" * 1000 + "]" * 1000 + "}",
        '{"a": ' + "[" * 100 + "]" * 100 + "}",
    ],
)
def test_admin_metadata_refuses_nul_surrogates_and_null(admin_client_, conv, metadata):  # type: ignore[no-untyped-def]
    before = snapshot()
    response = admin_client_.post(
        f"/admin/agentmemory/conversation/{conv.pk}/change/",
        {"title": "changed", "agent_key": "support", "owner": "", "metadata": metadata},
    )
    # The form is shown again with the error: nothing saved, no 500.
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["metadata"]
    assert snapshot() == before


@pytest.mark.parametrize("value", ["nan", "inf", str(10**30), "-1", "\x00"])
def test_admin_context_page_refuses_bad_and_huge_max_tokens(admin_client_, conv, value, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_CONTEXT_TOKENS": 100_000}
    response = admin_client_.get(f"/admin/agentmemory/conversation/{conv.pk}/context/", {"max_tokens": value})
    assert response.status_code == 400
    assert len(response.content) < 200_000
    assert response.context["errors"]


@pytest.mark.parametrize("value", [str(10**30), "0" * 30 + "100001", "9" * 5_000])
def test_admin_context_page_says_a_huge_max_tokens_is_over_the_bound(admin_client_, conv, value, settings):  # type: ignore[no-untyped-def]
    # as the API says it: a number of 31 digits is a whole number, over the maximum
    settings.AGENTMEMORY = {"MAX_CONTEXT_TOKENS": 100_000}
    response = admin_client_.get(f"/admin/agentmemory/conversation/{conv.pk}/context/", {"max_tokens": value})
    assert response.status_code == 400
    assert [str(e) for e in response.context["errors"]] == [
        "max_tokens must be at most 100,000 (AGENTMEMORY['MAX_CONTEXT_TOKENS'] for max_tokens)."
    ]


@pytest.mark.parametrize(
    "param", ["agent_key", "format", "page_size", "cursor", "after_seq", "max_tokens", "max_messages"]
)
def test_no_query_parameter_value_makes_a_server_error(api, conv, param):  # type: ignore[no-untyped-def]
    values = ["\x00", "-1", "9" * 40, "nan", "1e9", " ", "%", "[]", "{}", "a" * 5000]
    paths = [
        "/api/conversations/",
        url(conv),
        url(conv, "context/"),
        url(conv, "messages/"),
        url(conv, "summaries/"),
    ]
    for path in paths:
        for value in values:
            response = api.get(path, {param: value})
            assert response.status_code < 500, (path, param, value)
        raw = api.get(f"{path}?{param}=%ED%A0%80%00")
        assert raw.status_code < 500, (path, param)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text", "text": 1},
        {"type": "text", "text": ["a"]},
        {"type": "image", "data": 5, "mime_type": "image/png"},
        {"type": "image", "url": {"u": 1}},
        {"type": "image", "url": "https://example.com/a.png", "width": "10", "height": 10},
        {"type": "file", "filename": 7, "file_id": "f"},
        {"type": "audio", "data": "AAAA", "mime_type": ["audio/wav"]},
    ],
)
def test_content_parts_with_fields_of_the_wrong_type_are_400(api, conv, part):  # type: ignore[no-untyped-def]
    before = snapshot()
    body = {"role": "human", "parts": [{"type": "text", "text": "look"}, part]}
    response = api.post(url(conv, "messages/"), body, format="json")
    assert_error(response, 400, "invalid_message")
    assert response.json()["index"] == 0
    assert snapshot() == before


def test_content_beside_parts_is_refused_unless_it_is_their_text(api, conv):  # type: ignore[no-untyped-def]
    parts = [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]
    before = snapshot()
    both = {"role": "human", "content": "x", "parts": parts}
    response = api.post(url(conv, "messages/"), both, format="json")
    body = assert_error(response, 400, "invalid_message")
    assert "give content or parts, not both" in body["detail"]
    assert snapshot() == before  # "x" is neither stored nor dropped silently

    for content in (None, "", "part one\npart two"):  # what reading the message gives back
        created = api.post(
            url(conv, "messages/"), {"role": "human", "content": content, "parts": parts}, format="json"
        )
        assert created.status_code == 201, created.content
        stored = created.json()  # a single message is answered with the stored message
        assert stored["content"] == "part one\npart two" and len(stored["parts"]) == 2
        api.post(url(conv, "messages/"), {"role": "ai", "content": "ok"}, format="json")


def test_the_browsable_api_form_creates_a_conversation_with_its_metadata(api, user) -> None:  # type: ignore[no-untyped-def]
    # The HTML form of /api/conversations/ offers "{}" as the metadata, not "null" (refused).
    page = api.get("/api/conversations/", HTTP_ACCEPT="text/html").content.decode()
    assert '<textarea name="metadata"' in page
    assert "null</textarea>" not in page and "{}</textarea>" in page
    # What the form posts: each field's text, the metadata as JSON text.
    created = api.post(
        "/api/conversations/",
        urlencode({"agent_key": "support", "title": "from the form", "metadata": '{"channel": "web"}'}),
        content_type="application/x-www-form-urlencoded",
    )
    assert created.status_code == 201, created.content
    assert Conversation.objects.get(uuid=created.json()["uuid"]).metadata == {"channel": "web"}
    assert (
        api.post(
            "/api/conversations/", {"title": "multipart", "metadata": "{}"}, format="multipart"
        ).status_code
        == 201
    )
    before = Conversation.objects.count()
    for text, words in [
        ("null", "not null"),
        ("[1]", "not an array"),
        ("{oops", "not JSON"),
        ("[" * 5000, "not JSON"),
    ]:
        body = assert_error(
            api.post(
                "/api/conversations/",
                urlencode({"metadata": text}),
                content_type="application/x-www-form-urlencoded",
            ),
            400,
        )
        assert words in body["fields"]["metadata"][0]
    assert Conversation.objects.count() == before


def test_a_message_with_more_tool_calls_than_the_cap_is_a_400(api, conv, settings):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_TOOL_CALLS_PER_MESSAGE": 128}
    before = snapshot()
    calls = [{"id": f"c{i}", "name": "lookup", "arguments": {}} for i in range(129)]
    response = api.post(url(conv, "messages/"), {"role": "ai", "tool_calls": calls}, format="json")
    body = assert_error(response, 400)
    assert "MAX_TOOL_CALLS_PER_MESSAGE" in json.dumps(body)
    assert snapshot() == before


def test_a_form_post_of_a_message_is_stored_or_refused_by_field(api, conv) -> None:  # type: ignore[no-untyped-def]
    # An HTML form or ``curl -d role=human -d content=hi`` sends a form, not JSON: each
    # field is one value, not a list of them (it was refused as "unknown role ['human']").
    response = api.post(
        url(conv, "messages/"),
        urlencode({"role": "human", "content": "from a form"}),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 201, response.content
    assert response.json()["content"] == "from a form"
    assert Message.objects.filter(conversation=conv, content="from a form", role="human").count() == 1
    multipart = api.post(url(conv, "messages/"), {"role": "ai", "content": "multipart"}, format="multipart")
    assert multipart.status_code == 201, multipart.content
    # A field the form cannot carry as JSON is refused by name, nothing stored.
    before = Message.objects.filter(conversation=conv).count()
    body = assert_error(
        api.post(url(conv, "messages/"), {"role": "ai", "content": "x", "tool_calls": "not json"}),
        400,
        "invalid_message",
    )
    assert "tool_calls" in json.dumps(body)
    assert Message.objects.filter(conversation=conv).count() == before


def _raw_example(page: str) -> dict:  # type: ignore[type-arg]
    """The JSON the browsable API's raw data tab offers to post (its first textarea)."""
    import html

    text = page.split('id="id__content"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    return json.loads(html.unescape(text))  # type: ignore[no-any-return]


def test_the_browsable_api_forms_append_a_message(api, conv) -> None:  # type: ignore[no-untyped-def]
    page = api.get(url(conv, "messages/"), HTTP_ACCEPT="text/html").content.decode()
    form = page.split('id="post-object-form"', 1)[1].split("</form>", 1)[0]
    assert '<select class="form-control" name="role">' in form and '<textarea name="content"' in form
    assert 'name="tool_call_id"' in form and 'name="name"' in form
    # what the HTML form posts: every field, unused ones blank
    fields = {"role": "human", "content": "from the form", "tool_call_id": "", "name": ""}
    posted = api.post(url(conv, "messages/"), fields, format="multipart")
    assert posted.status_code == 201, posted.content
    example = _raw_example(page)
    assert example["role"] == "human"
    answered = api.post(url(conv, "messages/"), {**example, "content": "as raw JSON"}, format="json")
    assert answered.status_code == 201, answered.content
    assert list(conv.messages.order_by("seq").values_list("content", flat=True))[-2:] == [
        "from the form",
        "as raw JSON",
    ]


def test_the_browsable_api_forms_remember_and_change_a_fact(api) -> None:  # type: ignore[no-untyped-def]
    page = api.get("/api/facts/", HTTP_ACCEPT="text/html").content.decode()
    form = page.split('id="post-object-form"', 1)[1].split("</form>", 1)[0]
    assert all(
        f'name="{name}"' in form for name in ("content", "category", "persistent", "importance", "ttl")
    )
    fields = {
        "content": "Likes green tea",
        "category": "preferences",
        "importance": "",
        "ttl": "",
        "supersedes": "",
    }
    created = api.post("/api/facts/", urlencode(fields), content_type="application/x-www-form-urlencoded")
    assert created.status_code == 201, created.content
    example = _raw_example(page)  # the raw data tab: post it with the content filled in
    assert example["category"] == "general"
    remembered = api.post("/api/facts/", {**example, "content": "Lives in Oslo"}, format="json")
    assert remembered.status_code == 201, remembered.content
    fact_url = f"/api/facts/{created.json()['fact']['id']}/"
    detail = api.get(fact_url, HTTP_ACCEPT="text/html").content.decode()
    example = _raw_example(detail.split('id="put-generic-content-form"', 1)[1])
    assert example == {
        "content": "Likes green tea",
        "category": "preferences",
        "persistent": False,
        "importance": 0.5,
        "ttl": None,
    }
    changed = api.patch(fact_url, {**example, "importance": 0.9}, format="json")
    assert changed.status_code == 200 and changed.json()["fact"]["importance"] == 0.9, changed.content


def test_json_sent_as_a_form_is_a_400_that_names_the_content_type(api, conv) -> None:  # type: ignore[no-untyped-def]
    # ``curl -d '{...}'`` without ``-H 'Content-Type: application/json'``: curl sends it as
    # application/x-www-form-urlencoded, and the JSON became a field named ``{"role": ...``.
    before = snapshot()
    for body in (
        '{"role": "human", "content": "x"}',
        '{"content": "a=b&c", "role": "human"}',
        '[{"role": "human"}]',
    ):
        reply = assert_error(
            api.post(url(conv, "messages/"), body, content_type="application/x-www-form-urlencoded"), 400
        )
        assert "Content-Type: application/json" in reply["detail"]
    assert snapshot() == before
    # The same body with its content type is stored.
    stored = api.post(
        url(conv, "messages/"), '{"role": "human", "content": "x"}', content_type="application/json"
    )
    assert stored.status_code == 201, stored.content


@pytest.mark.parametrize(
    ("suffix", "body"),
    [
        ("messages/", '{"messages": [{"\\ud800": 1}]}'),
        ("messages/", '{"role": "human", "content": "x", "\\udfff": 1}'),
        ("cancel-pending-tool-calls/", '{"\\ud800": 1}'),
        ("import", '{"format": "\\ud800", "version": 1, "conversation": {}, "messages": []}'),
    ],
)
def test_a_lone_surrogate_quoted_by_an_error_is_a_400_not_a_500(api, conv, suffix, body):  # type: ignore[no-untyped-def]
    # the error names the unknown key or quotes the value, and UTF-8 cannot write a lone
    # surrogate: the JSON renderer failed with a 500
    before = snapshot()
    path = "/api/conversations/import/" if suffix == "import" else url(conv, suffix)
    response = api.post(path, data=body, content_type="application/json")
    body = assert_error(response, 400)
    assert "\\ud800" in response.content.decode() or "\\udfff" in response.content.decode()
    assert snapshot() == before


def test_an_error_quoting_a_huge_value_is_bounded(api, conv):  # type: ignore[no-untyped-def]
    before = snapshot()
    role = list(range(100_000))
    response = api.post(url(conv, "messages/"), {"role": role, "content": "x"}, format="json")
    body = assert_error(response, 400, "invalid_message")
    assert len(response.content) < 20_000  # it quoted all 100,000 numbers: 700 kB
    assert "more characters" in body["reason"]
    assert snapshot() == before


def test_100000_wrong_tool_calls_are_refused_by_their_count(api, conv):  # type: ignore[no-untyped-def]
    # each was validated and named in the answer before the count was checked: 7 MB, 5 s
    before = snapshot()
    response = api.post(
        url(conv, "messages/"), {"role": "ai", "content": "x", "tool_calls": [0] * 100_000}, format="json"
    )
    body = assert_error(response, 400, "invalid_message")
    assert list(body["fields"]) == ["tool_calls"]
    assert "MAX_TOOL_CALLS_PER_MESSAGE" in body["fields"]["tool_calls"][0]
    assert snapshot() == before


def test_an_import_document_with_100000_wrong_messages_names_at_most_100(api, conv):  # type: ignore[no-untyped-def]
    before = snapshot()
    document = {
        "format": "agentmemory.conversation",
        "version": 1,
        "conversation": {},
        "messages": [0] * 100_000,
    }
    response = api.post("/api/conversations/import/", document, format="json")
    body = assert_error(response, 400, "invalid_document")
    assert len(body["fields"]) <= 100
    assert len(response.content) < 50_000  # 5.8 MB before
    assert snapshot() == before
