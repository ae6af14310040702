"""The OpenAPI schema describes what the endpoints really return: real responses of the main
endpoints, errors included, are validated against the schema the project serves."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

from agentmemory.models import Conversation, Summary

pytestmark = pytest.mark.django_db


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema objects as JSON Schema: ``nullable: true`` becomes ``null`` allowed."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@pytest.fixture
def openapi(client) -> dict:  # type: ignore[no-untyped-def]
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def check(openapi):  # type: ignore[no-untyped-def]
    components = _json_schema(openapi["components"])
    checked: list[tuple[str, str, str]] = []

    def check(response, path: str, method: str) -> None:  # type: ignore[no-untyped-def]
        code = str(response.status_code)
        operation = openapi["paths"][path][method]
        assert code in operation["responses"], f"{method.upper()} {path} answers {code}, undocumented"
        documented = operation["responses"][code]
        if response.status_code == 204:
            assert "content" not in documented and not response.content
            return
        schema = documented["content"]["application/json"]["schema"]
        validator = Draft202012Validator({**_json_schema(schema), "components": components})
        # a streamed answer (the export) is read whole once, and kept for the caller
        if response.streaming and not hasattr(response, "_json"):
            response._json = json.loads(response.getvalue())
        errors = sorted(validator.iter_errors(response.json()), key=lambda e: list(e.path))
        assert not errors, f"{method.upper()} {path} {code}: " + "; ".join(
            f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]
        )
        checked.append((method, path, code))

    check.checked = checked  # type: ignore[attr-defined]
    return check


def test_real_responses_match_the_schema(check, django_user_model, settings):  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 50_000
    user = django_user_model.objects.create_user("alice", password="pw")
    api = APIClient()
    api.force_login(user)
    conv_path = "/api/conversations/{uuid}/"
    messages_path = "/api/conversations/{conversation_uuid}/messages/"

    created = api.post(
        "/api/conversations/", {"agent_key": "a", "title": "t", "metadata": {"k": 1}}, format="json"
    )
    check(created, "/api/conversations/", "post")
    uuid = created.json()["uuid"]
    base = f"/api/conversations/{uuid}/"
    conv = Conversation.objects.get(uuid=uuid)

    single = api.post(base + "messages/", {"role": "system", "content": "You help."}, format="json")
    check(single, messages_path, "post")
    calls = [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]
    batch = {
        "messages": [
            {"role": "human", "content": "hi " * 40},
            {"role": "ai", "content": None, "tool_calls": calls, "metadata": {"usage": {"input_tokens": 3}}},
            {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "found"},
            {"role": "ai", "content": "done"},
            {"role": "human", "content": "and then?"},
            {"role": "ai", "content": None, "tool_calls": [{"id": "c2", "name": "wait", "arguments": {}}]},
        ]
    }
    check(api.post(base + "messages/", batch, format="json"), messages_path, "post")
    refused = api.post(
        base + "messages/", {"role": "tool", "tool_call_id": "zzz", "content": "x"}, format="json"
    )
    assert refused.status_code == 400
    check(refused, messages_path, "post")
    check(api.post(base + "messages/", "x" * 60_000, content_type="application/json"), messages_path, "post")

    Summary.objects.create(conversation=conv, text="Earlier: greetings.", first_seq=2, through_seq=5)
    Conversation.objects.filter(pk=conv.pk).update(summary=Summary.objects.get(conversation=conv))

    check(api.get("/api/conversations/"), "/api/conversations/", "get")
    check(api.get(base), conv_path, "get")
    check(api.patch(base, {"title": "renamed"}, format="json"), conv_path, "patch")
    check(api.patch(base, {"metadata": None}, format="json"), conv_path, "patch")
    check(api.get(base + "messages/"), messages_path, "get")
    check(api.get(base + "messages/", {"after_seq": "x"}), messages_path, "get")
    check(api.get(base + "summaries/"), "/api/conversations/{conversation_uuid}/summaries/", "get")
    context_path = "/api/conversations/{uuid}/context/"
    native = api.get(base + "context/", {"max_tokens": 3000})
    assert isinstance(native.json()["messages"], list) and len(native.json()["messages"]) >= 3
    check(native, context_path, "get")
    check(api.get(base + "context/", {"max_tokens": 3000, "format": "openai"}), context_path, "get")
    check(
        api.get(base + "context/", {"max_tokens": 6}), context_path, "get"
    )  # 422: the prompt and newest question alone are over
    check(api.get(base + "context/", {"max_tokens": "nan"}), context_path, "get")  # 400
    cancel_path = "/api/conversations/{uuid}/cancel-pending-tool-calls/"
    check(
        api.post(base + "cancel-pending-tool-calls/", {"reason": "gone"}, format="json"), cancel_path, "post"
    )
    check(api.post(base + "cancel-pending-tool-calls/", [1], format="json"), cancel_path, "post")
    exported = api.get(base + "export/")
    check(exported, "/api/conversations/{uuid}/export/", "get")
    check(
        api.post("/api/conversations/import/", exported.json(), format="json"),
        "/api/conversations/import/",
        "post",
    )
    check(
        api.post("/api/conversations/import/", {"version": 9}, format="json"),
        "/api/conversations/import/",
        "post",
    )
    check(api.get("/api/conversations/00000000-0000-0000-0000-000000000000/"), conv_path, "get")
    check(APIClient().get("/api/conversations/"), "/api/conversations/", "get")
    check(api.delete(base), conv_path, "delete")

    codes = {(path, code) for _method, path, code in check.checked}
    assert {"200", "201", "400", "404", "413", "422"} <= {code for _path, code in codes}


@pytest.mark.parametrize(
    "value",
    [
        "ok",
        " ok ",
        "\nok\n",
        "a\nb",
        "a\x1cb",
        "a\x1fb",
        "\x1f",
        "\x85",
        "\ufeff",
        "\ufeff\nok",
        "ok\u2028",
        "a\u2028b",
        "\u3000",
        "a b",
        "\x0b",
        "a\x0bb",
        "",
    ],
)
def test_text_patterns_say_what_the_fields_accept(value: str) -> None:
    # The schema's patterns are JSON Schema (ECMAScript) regexes, whose \s is not Python's
    # white space; the fields trim with str.strip and split lines with str.splitlines.
    import re

    from agentmemory.api.serializers import NonBlankTextField, SingleLineTextField

    for field in (NonBlankTextField(), SingleLineTextField()):
        pattern = field.schema_extra["pattern"]
        try:
            field.run_validation(value)
            accepted = True
        except Exception:
            accepted = False
        assert (re.fullmatch(pattern[1:-1], value) is not None) == accepted, (type(field).__name__, value)


@pytest.fixture
def without_langchain_core(monkeypatch):  # type: ignore[no-untyped-def]
    """As if langchain-core (the ``langchain`` extra) were not installed on the server."""
    import sys

    monkeypatch.delitem(sys.modules, "agentmemory.formats.langchain", raising=False)
    for name in [m for m in sys.modules if m == "langchain_core" or m.startswith("langchain_core.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "langchain_core", None)


def test_a_format_the_server_cannot_serve_is_a_documented_501(
    check, django_user_model, without_langchain_core
):  # type: ignore[no-untyped-def]
    """The langchain message format needs langchain-core on the server: without it the
    request is not the client's fault (a 400 said so), but what the server does not do."""
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.models import ModelCall

    class Agent(BaseToolCallingAgent, register=False):
        AGENT_KEY = "format-test"

    user = django_user_model.objects.create_user("alice", password="pw")
    agent = Agent(llm=ScriptedChatModel(["Hello."]))
    conv = agent.start_conversation(owner=user)
    agent.run(conv, "hi")
    call = ModelCall.objects.get(conversation=conv)
    api = APIClient()
    api.force_login(user)
    base = f"/api/conversations/{conv.uuid}"
    message = {"type": "human", "data": {"content": "hello", "type": "human"}}

    answers = [
        (
            api.post(f"{base}/messages/?message_format=langchain", message, format="json"),
            "{conversation_uuid}/messages/",
            "post",
        ),
        (api.get(f"{base}/context/?message_format=langchain"), "{uuid}/context/", "get"),
        (
            api.get(f"{base}/model-calls/{call.uuid}/window/?message_format=langchain"),
            "{conversation_uuid}/model-calls/{uuid}/window/",
            "get",
        ),
    ]
    for response, suffix, method in answers:
        assert response.status_code == 501, response.content
        body = response.json()
        assert body["error"] == "format_unavailable"
        assert "langchain-core" in body["detail"] and "not installed on this server" in body["detail"]
        path = "/api/conversations/" + suffix
        check(response, path, method)
    assert conv.messages.count() == 2  # the turn's, nothing more
