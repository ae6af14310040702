"""Requests at the edges of Django's own request handling, each answered in the API's JSON
error shape (``{"error": code, "detail": text}``), never with Django's HTML page:

- more query parameters or form fields than ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (1,000 by
  default), or more files than ``DATA_UPLOAD_MAX_NUMBER_FILES``: Django's ``TooManyFieldsSent``
  and ``TooManyFilesSent`` answered its HTML "Bad Request (400)" page on every endpoint;
- a URL under the API's own prefixes that is no URL of the API, ending in a slash
  (``/api/conversations/a/b/c/``), answered Django's HTML 404 where the same URL without the
  slash answers the JSON 404;
- the redirect of a URL without its trailing slash named a different URL when the path held
  an escaped ``?`` or ``%`` (``/api/facts/%3Fx=1`` was sent to ``/api/facts/?x=1/``, the fact
  list with a query), and a path holding an escaped line break was left to Django's
  ``APPEND_SLASH``, an HTML 301 that turns a POST into a GET.
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support", title="mine")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])
    return conv


def _json_error(response, status: int, error: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    body = response.json()
    assert body["error"] == error and isinstance(body["detail"], str), body
    return body


def _paths(conv: Conversation) -> list[str]:
    base = f"/api/conversations/{conv.uuid}"
    return [
        "/api/conversations/",
        f"{base}/",
        f"{base}/messages/",
        f"{base}/summaries/",
        f"{base}/context/",
        f"{base}/export/",
        f"{base}/model-calls/",
        f"{base}/model-calls/usage/",
        "/api/facts/",
        "/api/search/?q=hello",
        "/api/usage/",
    ]


# -- Django's limits on the number of fields and files ---------------------------------------


def test_a_query_string_over_the_field_limit_is_a_json_400_on_every_endpoint(api, conv, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 20
    many = "&".join(f"p{i}=1" for i in range(21))
    for path in _paths(conv):
        joined = f"{path}&{many}" if "?" in path else f"{path}?{many}"
        body = _json_error(api.get(joined), 400, "too_many_fields")
        assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in body["detail"] and "20" in body["detail"]


@pytest.mark.parametrize("debug", [False, True])
def test_a_form_over_the_field_limit_is_a_json_400_and_stores_nothing(api, conv, settings, debug) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = debug
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 20
    form = "&".join(["role=human", "content=hi", *(f"x{i}=1" for i in range(30))])
    before = (Message.objects.count(), Fact.objects.count(), Conversation.objects.count())
    for path in (f"/api/conversations/{conv.uuid}/messages/", "/api/facts/", "/api/conversations/"):
        response = api.post(path, form, content_type="application/x-www-form-urlencoded")
        _json_error(response, 400, "too_many_fields")
    assert (Message.objects.count(), Fact.objects.count(), Conversation.objects.count()) == before


def test_a_multipart_body_over_the_file_limit_is_a_json_400(api, conv, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 3
    parts = "".join(
        f'--b\r\nContent-Disposition: form-data; name="f{i}"; filename="f{i}.txt"\r\n\r\nx\r\n'
        for i in range(5)
    )
    response = api.post("/api/facts/", f"{parts}--b--\r\n", content_type="multipart/form-data; boundary=b")
    body = _json_error(response, 400, "too_many_files")
    assert "DATA_UPLOAD_MAX_NUMBER_FILES" in body["detail"]


def test_a_refused_request_is_still_logged_as_django_logs_it(api, conv, settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 2
    with caplog.at_level("ERROR", logger="django.security"):
        api.get("/api/conversations/?a=1&b=2&c=3")
    assert any(record.name == "django.security.TooManyFieldsSent" for record in caplog.records)


# -- URLs under the API's prefixes ------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/conversations/a/b/c/",
        "/api/facts/a/b/",
        "/api/search/more/",
        "/api/usage/x/",
        "/api/conversations/00000000-0000-0000-0000-000000000000/messages/1/2/",
        "/api/facts/a\nb/c/",
    ],
)
@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_a_path_with_its_slash_that_is_no_url_of_the_api_is_a_json_404(api, path, method, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    _json_error(getattr(api, method)(path, {}, format="json"), 404, "not_found")


def test_paths_beside_the_api_prefixes_are_left_to_the_host(api, settings) -> None:  # type: ignore[no-untyped-def]
    """Only the API's own first segments are taken: the host may route others under api/."""
    settings.DEBUG = False
    response = api.get("/api/not-an-api-prefix/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    ("sent", "location"),
    [
        ("/api/facts/%3Fx=1", "/api/facts/%3Fx%3D1/"),  # was /api/facts/?x=1/: the fact list
        ("/api/facts/%252F", "/api/facts/%252F/"),  # was /api/facts/%2F/: one decoding lost
        ("/api/facts/%23top", "/api/facts/%23top/"),  # was /api/facts/#top/: a fragment
        ("/api/facts/%C3%BC", "/api/facts/%C3%BC/"),
    ],
)
def test_the_slash_redirect_names_the_same_url_with_the_slash(api, sent, location) -> None:  # type: ignore[no-untyped-def]
    response = api.post(sent, {"content": "x"}, format="json")
    _json_error(response, 308, "trailing_slash")
    assert response["Location"] == location


def test_the_slash_redirect_keeps_the_query_string(api, conv) -> None:  # type: ignore[no-untyped-def]
    response = api.get(f"/api/conversations/{conv.uuid}/messages?page_size=1&cursor=a%2Bb")
    assert response.status_code == 308
    assert response["Location"] == f"/api/conversations/{conv.uuid}/messages/?page_size=1&cursor=a%2Bb"


@pytest.mark.parametrize("debug", [False, True])
def test_a_path_with_an_escaped_line_break_is_answered_by_the_api(user, settings, debug) -> None:  # type: ignore[no-untyped-def]
    """It was left to Django's ``APPEND_SLASH``: an HTML 301 (or, under ``DEBUG``, a 500 for a
    POST), which clients follow with a GET."""
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)
    client.force_login(user)
    response = client.post("/api/facts/a%0Ab", {"content": "x"}, content_type="application/json")
    assert response.status_code in (308, 404), response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    if response.status_code == 308:
        assert response["Location"] == "/api/facts/a%0Ab/"


def test_the_slash_redirect_is_followed_to_the_resource(user, conv) -> None:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    followed = client.post(
        f"/api/conversations/{conv.uuid}/messages",
        {"role": "human", "content": "again"},
        format="json",
        follow=True,
    )
    assert followed.status_code == 201 and followed.json()["content"] == "again"
