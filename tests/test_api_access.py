"""The API follows DRF: the host's permission, authentication, throttle and renderer settings
apply, the staff-access setting, stable operation ids, error answers in the schema, API docs
served without a network, conversations paged on the owner index, drf-spectacular optional."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def openapi(client) -> dict:  # type: ignore[no-untyped-def]
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def _rest_framework(settings, **overrides):  # type: ignore[no-untyped-def]
    """The project's REST_FRAMEWORK with ``overrides``; a value of None removes the key."""
    merged = {**settings.REST_FRAMEWORK, **overrides}
    settings.REST_FRAMEWORK = {key: value for key, value in merged.items() if value is not None}


# -- schema ----------------------------------------------------------------------------------


def test_operation_ids_name_the_resource_and_action(openapi):  # type: ignore[no-untyped-def]
    ids = {
        (method, path): operation["operationId"]
        for path, operations in openapi["paths"].items()
        for method, operation in operations.items()
    }
    assert ids[("get", "/api/conversations/")] == "conversations_list"
    assert ids[("post", "/api/conversations/{conversation_uuid}/messages/")] == "messages_create"
    assert ids[("get", "/api/conversations/{uuid}/context/")] == "conversations_context"
    assert ids[("post", "/api/conversations/import/")] == "conversations_import"
    assert ids[("patch", "/api/conversations/{uuid}/")] == "conversations_partial_update"
    assert len(set(ids.values())) == len(ids)
    assert not [i for i in ids.values() if i.startswith("root") or i.startswith("api_")]


def test_every_operation_documents_its_error_answers(openapi):  # type: ignore[no-untyped-def]
    error_ref = "#/components/schemas/Error"
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            for code in ("400", "401", "403", "404", "429"):
                assert code in responses, (method, path, code)
                schema = responses[code]["content"]["application/json"]["schema"]
                assert "$ref" in schema, (method, path, code)
            if method in ("post", "patch"):
                assert responses["413"]["content"]["application/json"]["schema"]["$ref"] == error_ref
    error = openapi["components"]["schemas"]["Error"]
    assert {"error", "detail"} <= set(error["required"])
    assert "fields" in error["properties"]


def test_context_window_messages_are_an_array_in_the_schema(openapi):  # type: ignore[no-untyped-def]
    window = openapi["components"]["schemas"]["ContextWindow"]["properties"]
    assert window["messages"]["type"] == "array"
    assert window["messages"]["items"]["type"] == "object"


def test_read_only_fields_are_not_in_request_bodies(openapi):  # type: ignore[no-untyped-def]
    body = openapi["components"]["schemas"]["PatchedConversationUpdateRequest"]["properties"]
    assert set(body) == {"title", "metadata"}


def test_api_docs_pages_load_their_assets_from_static_files(client):  # type: ignore[no-untyped-def]
    for page, asset in [
        ("/api/docs/", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"),
        ("/api/redoc/", "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"),
    ]:
        html = client.get(page).content.decode()
        assert f"/static/{asset}" in html, page
        for host in ("cdn.jsdelivr.net", "unpkg.com", "fonts.googleapis.com", "fonts.gstatic.com"):
            assert host not in html, (page, host)
        assert finders.find(asset), asset
    home = client.get("/").content.decode()
    for link in ("/api/docs/", "/api/redoc/", "/api/schema/", "/admin/"):
        assert f'href="{link}"' in home
        assert client.get(link).status_code in (200, 302), link


def test_the_api_runs_without_drf_spectacular(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "host_settings.py").write_text(
        textwrap.dedent(
            f"""
            SECRET_KEY = "x"
            INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes",
                              "rest_framework", "agentmemory"]
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                       "NAME": {str(tmp_path / "db.sqlite3")!r}}}}}
            ROOT_URLCONF = "host_urls"
            USE_TZ = True
            ALLOWED_HOSTS = ["testserver"]
            """
        )
    )
    (tmp_path / "host_urls.py").write_text(
        "from django.urls import include, path\n"
        'urlpatterns = [path("api/", include("agentmemory.api.urls"))]\n'
    )
    script = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("drf_spectacular", "drf_spectacular_sidecar"):
                    raise ImportError(f"{name} is not installed")
        sys.meta_path.insert(0, Block())
        import django
        django.setup()
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        from django.contrib.auth import get_user_model
        from rest_framework.test import APIClient
        from agentmemory.api import schema
        api_forced = APIClient()
        api_forced.force_authenticate(get_user_model().objects.create_user("bob"))
        created = api_forced.post("/api/conversations/", {"title": "t"}, format="json")
        listed = api_forced.get("/api/conversations/")
        print(schema.SPECTACULAR, created.status_code, listed.json()["results"][0]["title"],
              any(m.startswith("drf_spectacular") for m in sys.modules))
        """
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "host_settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False", "201", "t", "False"]


# -- permissions, authentication, staff ------------------------------------------------------


def test_permissions_come_from_the_host_with_is_authenticated_as_fallback(user, settings):  # type: ignore[no-untyped-def]
    Conversation.objects.create(owner=user, title="mine")
    anonymous = APIClient()
    _rest_framework(settings, DEFAULT_PERMISSION_CLASSES=None)
    assert anonymous.get("/api/conversations/").status_code in (401, 403)

    # The host allows anonymous requests: they pass the permission check but own nothing.
    _rest_framework(settings, DEFAULT_PERMISSION_CLASSES=["rest_framework.permissions.AllowAny"])
    listed = anonymous.get("/api/conversations/")
    assert listed.status_code == 200 and listed.json()["results"] == []
    refused = anonymous.post("/api/conversations/", {"title": "x"}, format="json")
    assert refused.status_code in (401, 403) and refused.json()["error"] == "not_authenticated"
    assert Conversation.objects.count() == 1

    # The host's own rule applies to the API's views too.
    _rest_framework(settings, DEFAULT_PERMISSION_CLASSES=["rest_framework.permissions.IsAdminUser"])
    api_forced = APIClient()
    api_forced.force_authenticate(user)
    denied = api_forced.get("/api/conversations/")
    assert denied.status_code == 403 and denied.json()["error"] == "permission_denied"


def test_token_authentication(user):  # type: ignore[no-untyped-def]
    Conversation.objects.create(owner=user, title="mine")
    token = Token.objects.create(user=user)
    client = APIClient()
    response = client.get("/api/conversations/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    assert [c["title"] for c in response.json()["results"]] == ["mine"]
    assert client.get("/api/conversations/", HTTP_AUTHORIZATION="Token wrong").status_code == 401


def test_staff_see_every_conversation_only_when_the_setting_says_so(user, django_user_model, settings):  # type: ignore[no-untyped-def]
    staff = django_user_model.objects.create_user("root", is_staff=True)
    theirs = Conversation.objects.create(owner=user, title="alice's")
    ownerless = Conversation.objects.create(title="demo")
    client = APIClient()
    client.force_authenticate(staff)
    assert client.get("/api/conversations/").json()["results"] == []
    assert client.get(f"/api/conversations/{theirs.uuid}/").status_code == 404

    settings.AGENTMEMORY = {"API_STAFF_SEES_ALL_CONVERSATIONS": True}
    titles = {c["title"] for c in client.get("/api/conversations/").json()["results"]}
    assert titles == {"alice's", "demo"}
    assert client.get(f"/api/conversations/{ownerless.uuid}/messages/").status_code == 200
    # Other users stay confined to their own conversations.
    other = django_user_model.objects.create_user("mallory")
    client.force_authenticate(other)
    assert client.get("/api/conversations/").json()["results"] == []
    assert client.get(f"/api/conversations/{theirs.uuid}/context/").status_code == 404
    # An inactive staff account reaches nothing beyond its own.
    staff.is_active = False
    staff.save()
    client.force_authenticate(staff)
    assert client.get("/api/conversations/").json()["results"] == []


def test_a_host_overrides_permissions_throttles_renderers_and_pagination_by_subclassing(user, settings):  # type: ignore[no-untyped-def]
    from rest_framework.permissions import IsAdminUser
    from rest_framework.renderers import JSONRenderer
    from rest_framework.test import APIRequestFactory, force_authenticate

    from agentmemory.api.pagination import ConversationCursorPagination
    from agentmemory.api.views import ConversationViewSet, SearchView

    class OneAPage(ConversationCursorPagination):
        page_size = 1
        max_page_size = 1

    class StaffOnlySearch(SearchView):
        permission_classes = [IsAdminUser]

    class SmallPages(ConversationViewSet):
        pagination_class = OneAPage
        renderer_classes = [JSONRenderer]
        throttle_classes = []

    cache.clear()
    Conversation.objects.create(owner=user, title="one")
    Conversation.objects.create(owner=user, title="two")
    # Throttles from the settings on the app's view: two requests a minute on the family.
    _rest_framework(settings, DEFAULT_THROTTLE_RATES={"agentmemory.conversations": "2/min"})
    factory = APIRequestFactory()

    def call(view, path):  # type: ignore[no-untyped-def]
        request = factory.get(path)
        force_authenticate(request, user=user)
        return view(request)

    try:
        search = call(StaffOnlySearch.as_view(), "/api/search/?q=one")
        assert search.status_code == 403 and search.data["error"] == "permission_denied"
        assert call(SearchView.as_view(), "/api/search/?q=one").status_code == 200

        listed = SmallPages.as_view({"get": "list"})
        pages = [call(listed, "/api/conversations/") for _ in range(3)]
        assert [p.status_code for p in pages] == [200, 200, 200]  # no throttle on the subclass
        assert len(pages[0].data["results"]) == 1 and pages[0].data["next"]
        assert call(listed, "/api/conversations/?format=api").status_code == 404  # JSON only
        app_view = ConversationViewSet.as_view({"get": "list"})
        assert [call(app_view, "/api/conversations/").status_code for _ in range(3)] == [200, 200, 429]
    finally:
        cache.clear()


# -- throttles -------------------------------------------------------------------------------


def test_throttle_scopes_apply_only_where_the_host_sets_a_rate(api_forced, user, settings):  # type: ignore[no-untyped-def]
    cache.clear()
    conv = Conversation.objects.create(owner=user)
    _rest_framework(settings, DEFAULT_THROTTLE_RATES={"agentmemory.context": "2/min"})
    try:
        for _ in range(5):
            assert api_forced.get("/api/conversations/").status_code == 200
        assert api_forced.get(f"/api/conversations/{conv.uuid}/context/").status_code == 200
        assert api_forced.get(f"/api/conversations/{conv.uuid}/context/").status_code == 200
        throttled = api_forced.get(f"/api/conversations/{conv.uuid}/context/")
        assert throttled.status_code == 429
        assert throttled.json()["error"] == "throttled" and throttled["Retry-After"]
        assert api_forced.get(f"/api/conversations/{conv.uuid}/messages/").status_code == 200
        # DRF's ScopedRateThrottle listed by the host with no rate for a scope lets it through.
        _rest_framework(
            settings,
            DEFAULT_THROTTLE_CLASSES=["rest_framework.throttling.ScopedRateThrottle"],
            DEFAULT_THROTTLE_RATES={"agentmemory.messages": "1/min"},
        )
        assert api_forced.get("/api/conversations/").status_code == 200
        assert api_forced.get(f"/api/conversations/{conv.uuid}/messages/").status_code == 200
        assert api_forced.get(f"/api/conversations/{conv.uuid}/messages/").status_code == 429
    finally:
        cache.clear()


# -- formats ---------------------------------------------------------------------------------


def _tool_conversation(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.system("Be brief."),
            ChatMessage.human("Weather in Oslo?"),
            ChatMessage.ai(None, tool_calls=[ToolCall(id="c1", name="weather", arguments={"city": "Oslo"})]),
            ChatMessage.tool("sunny", tool_call_id="c1", name="weather"),
            ChatMessage.ai("Sunny."),
        ]
    )
    return conv


def test_format_is_left_to_renderers_and_message_format_picks_the_shape(api_forced, user):  # type: ignore[no-untyped-def]
    conv = _tool_conversation(user)
    url = f"/api/conversations/{conv.uuid}/context/"
    native = api_forced.get(url, {"format": "json"})
    assert native.status_code == 200 and native["Content-Type"].startswith("application/json")
    assert native.json()["format"] == "native" and native.json()["messages"][0]["part"] == "system_prompt"
    browsable = api_forced.get(url, {"format": "api"})
    assert browsable.status_code == 200 and browsable["Content-Type"].startswith("text/html")

    openai = api_forced.get(url, {"message_format": "openai"}).json()
    assert [m["role"] for m in openai["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert api_forced.get(url, {"format": "openai"}).json() == openai  # the earlier parameter still works

    anthropic = api_forced.get(url, {"message_format": "anthropic"}).json()
    assert anthropic["format"] == "anthropic" and anthropic["system"] == "Be brief."
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user", "assistant"]
    assert anthropic["messages"][1]["content"][0]["type"] == "tool_use"
    assert native.json()["system"] is None

    bad = api_forced.get(url, {"message_format": "yaml"})
    assert bad.status_code == 400 and "message_format" in bad.json()["fields"]
    unknown_renderer = api_forced.get(url, {"format": "yaml"})
    assert unknown_renderer.status_code == 404


def test_format_openai_is_offered_only_where_messages_have_a_shape(api_forced, user, client):  # type: ignore[no-untyped-def]
    conv = _tool_conversation(user)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    with_format = {
        (method, path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if any(p["name"] == "format" for p in operation.get("parameters", ()))
        and not path.startswith("/api/schema")
    }
    assert with_format == {
        ("get", "/api/conversations/{uuid}/context/"),
        ("post", "/api/conversations/{conversation_uuid}/messages/"),
        ("get", "/api/conversations/{conversation_uuid}/model-calls/{uuid}/window/"),
    }
    context = schema["paths"]["/api/conversations/{uuid}/context/"]["get"]["parameters"]
    assert next(p for p in context if p["name"] == "format")["description"]
    for url in ("/api/conversations/", f"/api/conversations/{conv.uuid}/messages/", "/api/facts/"):
        assert api_forced.get(url, {"format": "openai"}).status_code == 404
        assert api_forced.get(url, {"format": "json"}).status_code == 200
    context_url = f"/api/conversations/{conv.uuid}/context/"
    assert api_forced.get(context_url, {"format": "openai"}).json()["format"] == "openai"


def test_messages_can_be_appended_in_the_anthropic_format(api_forced, user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
    ]
    response = api_forced.post(
        f"/api/conversations/{conv.uuid}/messages/?message_format=anthropic",
        {"messages": messages},
        format="json",
    )
    assert response.status_code == 201, response.content
    stored = response.json()["messages"]
    assert [m["role"] for m in stored] == ["human", "ai", "tool"]
    assert stored[1]["tool_calls"] == [{"id": "t1", "name": "weather", "arguments": {"city": "Oslo"}}]
    assert stored[2]["tool_call_id"] == "t1"


def test_an_anthropic_message_with_empty_content_is_a_400_and_stores_nothing(api_forced, user):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user)
    url = f"/api/conversations/{conv.uuid}/messages/?message_format=anthropic"
    for body in ({"role": "user", "content": []}, {"messages": [{"role": "user", "content": []}]}):
        response = api_forced.post(url, body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"] == "invalid_message" and "no content" in response.json()["detail"]
    assert not Message.objects.filter(conversation=conv).exists()


def test_every_not_found_answer_has_the_same_wording(api_forced, user):  # type: ignore[no-untyped-def]
    missing = "00000000-0000-0000-0000-000000000009"
    for method, path, body in [
        ("get", f"/api/conversations/{missing}/", None),
        ("get", f"/api/conversations/{missing}/context/", None),
        ("post", f"/api/conversations/{missing}/messages/", {"role": "human", "content": "x"}),
    ]:
        response = getattr(api_forced, method)(path, body, format="json")
        assert response.status_code == 404
        assert response.json() == {"error": "not_found", "detail": "No such conversation."}, path
    fact = api_forced.get(f"/api/facts/{missing}/")
    assert fact.status_code == 404 and fact.json() == {"error": "not_found", "detail": "No such fact."}


# -- paging ----------------------------------------------------------------------------------


def test_conversations_are_listed_most_recently_active_first(api_forced, user):  # type: ignore[no-untyped-def]
    old = Conversation.objects.create(owner=user, title="old")
    Conversation.objects.create(owner=user, title="new")
    assert [c["title"] for c in api_forced.get("/api/conversations/").json()["results"]] == ["new", "old"]
    PersistentChatHistory(old).add_messages([ChatMessage.human("back again")])
    assert [c["title"] for c in api_forced.get("/api/conversations/").json()["results"]] == ["old", "new"]


@pytest.mark.parametrize(("count", "page_size"), [(300, 50), (120, 7), (1100, 200)])
def test_conversations_with_the_same_activity_time_are_each_listed_once(api_forced, user, count, page_size):  # type: ignore[no-untyped-def]
    # Many conversations can share ``updated_at`` (an import, a bulk update, one
    # transaction's now()). Sorted without a unique last key, PostgreSQL returns tied rows
    # in an order that changes with each page's LIMIT: pages repeated one and left one out.
    Conversation.objects.bulk_create([Conversation(owner=user, title=f"c{i}") for i in range(count)])
    Conversation.objects.filter(owner=user).update(updated_at=datetime(2026, 1, 1, tzinfo=UTC))
    forward: list[str] = []
    url = f"/api/conversations/?page_size={page_size}"
    while url:
        body = api_forced.get(url).json()
        forward += [c["uuid"] for c in body["results"]]
        url, back = body["next"], body["previous"]
    assert len(forward) == count and len(set(forward)) == count
    backward: list[str] = []
    while back:  # from the last page to the first
        body = api_forced.get(back).json()
        backward = [c["uuid"] for c in body["results"]] + backward
        back = body["previous"]
    last_page = forward[len(backward) :]
    assert backward + last_page == forward


@pytest.mark.postgres
def test_conversation_pages_read_only_the_owners_conversations(api_forced, user, django_user_model):  # type: ignore[no-untyped-def]
    others = [django_user_model.objects.create_user(f"u{i}") for i in range(20)]
    Conversation.objects.bulk_create(
        [Conversation(owner=others[i % 20], title=f"c{i}") for i in range(4000)]
        + [Conversation(owner=user, title=f"mine{i}") for i in range(300)]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agentmemory_conversation")
    with CaptureQueriesContext(connection) as queries:
        page = api_forced.get("/api/conversations/", {"page_size": 20})
    assert page.status_code == 200 and len(page.json()["results"]) == 20
    (sql,) = [q["sql"] for q in queries.captured_queries if "agentmemory_conversation" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # The owner's rows come from the owner index and only they are sorted (no index holds
    # updated_at, so that appends stay heap-only updates).
    assert "agentmemory_conversation_owner_id" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_context_and_appends_in_the_langchain_format(api_forced, user):  # type: ignore[no-untyped-def]
    conv = _tool_conversation(user)
    window = api_forced.get(
        f"/api/conversations/{conv.uuid}/context/", {"message_format": "langchain"}
    ).json()
    assert window["format"] == "langchain"
    assert [m["type"] for m in window["messages"]] == ["system", "human", "ai", "tool", "ai"]
    assert window["messages"][2]["data"]["tool_calls"][0]["args"] == {"city": "Oslo"}

    # What the context endpoint returns can be appended to another conversation as it is.
    copy = Conversation.objects.create(owner=user)
    response = api_forced.post(
        f"/api/conversations/{copy.uuid}/messages/?message_format=langchain",
        {"messages": window["messages"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    stored = response.json()["messages"]
    assert [m["role"] for m in stored] == ["system", "human", "ai", "tool", "ai"]
    assert stored[2]["tool_calls"] == [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}]
    refused = api_forced.post(
        f"/api/conversations/{copy.uuid}/messages/?message_format=langchain",
        {"messages": [{"type": "robot", "data": {}}]},
        format="json",
    )
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_message"


def test_the_api_root_answers_in_the_error_shape_and_lists_the_resources(user):  # type: ignore[no-untyped-def]
    anonymous = APIClient().get("/api/")
    assert anonymous.status_code in (401, 403)
    assert anonymous.json()["error"] == "not_authenticated"
    api_forced = APIClient()
    api_forced.force_authenticate(user)
    root = api_forced.get("/api/", HTTP_ACCEPT="application/json")
    assert root.status_code == 200 and {"conversations", "facts"} <= set(root.json())


def _documented_error_codes() -> set[str]:
    """The codes of the ``error`` column of docs/api.md's "Errors" table."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    codes: set[str] = set()
    for line in table.splitlines():
        cells = line.split("|")
        if line.startswith("| ") and len(cells) > 3:
            codes.update(re.findall(r"`([a-z_]+)`", cells[2]))
    return codes


def test_every_error_code_the_api_answers_is_in_the_docs_table(django_user_model) -> None:  # type: ignore[no-untyped-def]
    """A client branches on ``error``: a code it meets must be in the table. The codes the
    API writes itself (``"error": "..."`` in agentmemory/api) and those DRF answers for a
    wrong token or password (``authentication_failed``, not ``not_authenticated``)."""
    written = {
        code
        for path in (ROOT / "agentmemory" / "api").glob("*.py")
        for code in re.findall(r"\"error\": \"([a-z_]+)\"", path.read_text(encoding="utf-8"))
    }
    django_user_model.objects.create_user("ann", password="pw-for-the-test")
    met = set()
    for header in ("Token 0123456789abcdef0123456789abcdef01234567", "Basic YW5uOndyb25n"):
        answer = APIClient().get("/api/conversations/", HTTP_AUTHORIZATION=header)
        assert answer.status_code in (401, 403)
        met.add(answer.json()["error"])
    assert met == {"authentication_failed"}
    assert written and (written | met) - _documented_error_codes() == set()
