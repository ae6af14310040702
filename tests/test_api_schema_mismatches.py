"""What plain ``schemathesis run`` (every default check) found the schema and the server to
disagree on, each fixed where the schema could state the rule:

- ``persistent: 0`` (and 1, "yes", "off") was taken as a boolean where the schema says
  ``type: boolean``;
- ``k=`` (empty) gave the default and ``?k=5&k=50`` the last value, where the schema gives
  one integer; ``history=1`` was true;
- a fact whose content was over ``maxLength`` with white space around it was taken (the
  length was checked after trimming);
- a part's ``url`` holding U+001C-U+001F was refused while the schema's pattern (ECMAScript's
  ``\\S``) allowed it, and "http" + U+017F + "://" was taken (Python's case folding) while the pattern
  refused it;
- ``importance`` and ``ttl`` took JSON strings ("0.5") where the schema says a number;
- ``supersedes`` took a JSON number as an id (``UUID(int=...)``) and the other spellings
  Python's ``UUID`` reads, where the schema says ``format: uuid``;
- the operation ids of search and usage were ``search_retrieve`` and ``usage_retrieve``, not
  what docs/api.md names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentmemory.api.serializers import IMAGE_URL_PATTERN, URL_PATTERN
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parent.parent / "docs" / "api.md"


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("fuzzed")


@pytest.fixture
def conv(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="support")
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("where is order 7"), ChatMessage.ai("shipped")]
    )
    return conv


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-any-return]


# -- operation ids ------------------------------------------------------------------------------


def _documented_operations() -> dict[str, tuple[str, str]]:
    """``{operation id: (method, path with its parameters as {})}`` from docs/api.md's table."""
    rows = re.findall(
        r"^\| `(GET|POST|PATCH|DELETE) (/api/[^`?]*)[^`]*` \| `([a-z_]+)` \|", DOCS.read_text(), re.M
    )
    return {op: (method.lower(), re.sub(r"\{[^}]+\}", "{}", path)) for method, path, op in rows}


def test_the_operation_ids_are_the_ones_docs_api_md_names(openapi) -> None:  # type: ignore[no-untyped-def]
    schema = {
        operation["operationId"]: (method, re.sub(r"\{[^}]+\}", "{}", path))
        for path, operations in openapi["paths"].items()
        for method, operation in operations.items()
        if path.startswith("/api/") and path != "/api/schema/"
    }
    assert schema["search"] == ("get", "/api/search/") and schema["usage"] == ("get", "/api/usage/")
    assert _documented_operations() == schema


# -- booleans ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, "true", "yes", "off", None, [], {}])
def test_persistent_is_true_or_false(api_forced, value) -> None:  # type: ignore[no-untyped-def]
    response = api_forced.post("/api/facts/", {"content": "Likes tea", "persistent": value}, format="json")
    assert response.status_code == 400 and "persistent" in response.json()["fields"]
    assert not Fact.objects.exists()


def test_persistent_true_false_and_the_browsable_api_form(api_forced) -> None:  # type: ignore[no-untyped-def]
    assert (
        api_forced.post(
            "/api/facts/", {"content": "Likes tea", "persistent": True}, format="json"
        ).status_code
        == 201
    )
    assert (
        api_forced.post(
            "/api/facts/", {"content": "Likes jam", "persistent": False}, format="json"
        ).status_code
        == 201
    )
    # the browsable API's form sends text
    form = api_forced.post("/api/facts/", {"content": "Likes figs", "persistent": "true"}, format="multipart")
    assert form.status_code == 201 and form.json()["fact"]["persistent"] is True
    fact = Fact.objects.get(content="Likes tea")
    changed = api_forced.patch(f"/api/facts/{fact.uuid}/", {"persistent": 1}, format="json")
    assert changed.status_code == 400 and "persistent" in changed.json()["fields"]


@pytest.mark.parametrize("value", ["1", "0", "", "yes", "True"])
def test_history_is_true_or_false(api_forced, value) -> None:  # type: ignore[no-untyped-def]
    assert api_forced.get("/api/facts/", {"history": value}).status_code == 400
    assert api_forced.get("/api/facts/", {"history": "true"}).status_code == 200
    assert api_forced.get("/api/facts/", {"history": "false"}).status_code == 200


# -- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("importance", "0.5"), ("ttl", "100"), ("ttl", "1e3")])
def test_a_number_is_a_json_number(api_forced, field, value) -> None:  # type: ignore[no-untyped-def]
    # ``type: number``: DRF's field took the text "0.5", as ``persistent`` took 0
    response = api_forced.post("/api/facts/", {"content": "Likes tea", field: value}, format="json")
    assert response.status_code == 400 and field in response.json()["fields"]
    assert not Fact.objects.exists()
    taken = api_forced.post("/api/facts/", {"content": "Likes tea", field: float(value)}, format="json")
    assert taken.status_code == 201
    # the browsable API's form sends text
    form = api_forced.post("/api/facts/", {"content": "Likes jam", field: value}, format="multipart")
    assert form.status_code == 201, form.content


# -- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["int", "hex", "urn", "braces"])
def test_supersedes_is_an_id_as_the_schema_writes_one(api_forced, shape) -> None:  # type: ignore[no-untyped-def]
    # ``type: string, format: uuid``: DRF's field also took a JSON number (``UUID(int=...)``)
    # and the other spellings Python's ``UUID`` reads, as ``persistent`` took 0 and 1
    old = api_forced.post("/api/facts/", {"content": "Likes tea", "persistent": True}, format="json")
    uuid = old.json()["fact"]["id"]
    value = {
        "int": int(uuid.replace("-", ""), 16),
        "hex": uuid.replace("-", ""),
        "urn": f"urn:uuid:{uuid}",
        "braces": "{" + uuid + "}",
    }[shape]
    response = api_forced.post("/api/facts/", {"content": "Likes jam", "supersedes": value}, format="json")
    assert response.status_code == 400 and "supersedes" in response.json()["fields"]
    assert Fact.objects.count() == 1
    taken = api_forced.post(
        "/api/facts/", {"content": "Likes jam", "supersedes": uuid.upper()}, format="json"
    )
    assert taken.status_code == 201 and taken.json()["superseded_ids"] == [uuid]


# -- one value per query parameter ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/search/", "q=order&k=5&k=50"),
        ("/api/search/", "q=order&q=tea"),
        ("/api/search/", "q=order&k=false&k="),
        ("/api/facts/", "agent_key=a&agent_key=b"),
        ("/api/facts/", "history=true&history=false"),
        ("/api/conversations/", "page_size=1&page_size=2"),
        ("{conv}messages/", "after_seq=1&after_seq=2"),
        ("{conv}context/", "max_tokens=100&max_tokens=200"),
        ("{conv}context/", "memory_recall=true&memory_recall=false"),
        ("{conv}context/", "max_tokens=150&gap_policy=report&gap_policy=close"),
        ("/api/usage/", "since=2026-01-01T00:00:00Z&since=2026-02-01T00:00:00Z"),
    ],
)
def test_a_parameter_given_twice_is_a_400(api_forced, conv, path, query) -> None:  # type: ignore[no-untyped-def]
    url = path.format(conv=f"/api/conversations/{conv.uuid}/") + "?" + query
    response = api_forced.get(url)
    assert response.status_code == 400, (url, response.content[:200])
    name = query.split("&")[-1].split("=")[0]
    assert response.json()["fields"][name] == ["Give this parameter once."]


def test_include_may_be_repeated(api_forced, conv) -> None:  # type: ignore[no-untyped-def]
    response = api_forced.get("/api/search/?q=order&include=messages&include=facts")
    assert response.status_code == 200 and response.json()["messages"]


@pytest.mark.parametrize("query", ["q=order&k=", "q=order&conversation=", "q=order&k=x"])
def test_an_empty_or_malformed_search_parameter_is_a_400(api_forced, conv, query) -> None:  # type: ignore[no-untyped-def]
    response = api_forced.get("/api/search/?" + query)
    assert response.status_code == 400
    name = query.split("&")[-1].split("=")[0]
    assert name in response.json()["fields"]


def test_search_parameters_still_default(api_forced, conv) -> None:  # type: ignore[no-untyped-def]
    assert api_forced.get("/api/search/?q=order").status_code == 200
    assert api_forced.get("/api/search/?q=order&k=3&agent_key=&category=").status_code == 200


# -- lengths as sent -------------------------------------------------------------------------------


def test_a_length_is_checked_as_sent_not_after_trimming(api_forced, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"MAX_FACT_CHARS": 50}
    padded = " " + "x" * 50  # 51 characters sent, 50 once trimmed
    response = api_forced.post("/api/facts/", {"content": padded}, format="json")
    assert response.status_code == 400 and "content" in response.json()["fields"]
    category = api_forced.post(
        "/api/facts/", {"content": "Likes tea", "category": " " + "c" * 100}, format="json"
    )
    assert category.status_code == 400 and "category" in category.json()["fields"]
    assert api_forced.post("/api/facts/", {"content": " " + "x" * 49}, format="json").status_code == 201
    search = api_forced.get("/api/search/", {"q": " " + "w" * 1000})
    assert search.status_code == 400 and "q" in search.json()["fields"]


# -- part urls -----------------------------------------------------------------------------------


URLS = {
    "https://example.com/a.png": True,
    "HttPS://example.com/a.png": True,
    "http://example.com/a b.png": False,
    "https://example.com/\x1ea.png": False,  # white space to Python, not to ECMAScript's \S
    "https://example.com/\x85a.png": False,
    "https://example.com/\ufeffa.png": True,  # white space to ECMAScript, not to Python
    "http\u017f://example.com/a.png": False,  # U+017F (long s) folds to "s" in Python's IGNORECASE
    "ftp://example.com/a.png": False,
}


@pytest.mark.parametrize(("url", "valid"), list(URLS.items()))
def test_a_part_url_is_refused_exactly_when_the_schema_refuses_it(api_forced, conv, url, valid) -> None:  # type: ignore[no-untyped-def]
    # The patterns use no class shorthand (\s, \S, \w, \d), whose meaning differs between
    # ECMAScript (JSON Schema) and Python, so Python's re reads them as a validator would.
    for pattern in (URL_PATTERN, IMAGE_URL_PATTERN):
        assert not re.search(r"(?<!\\)\\[sSwWdD]", pattern)
        assert bool(re.fullmatch(pattern, url)) is valid
    body = {"role": "human", "parts": [{"type": "image", "url": url}]}
    response = api_forced.post(f"/api/conversations/{conv.uuid}/messages/", body, format="json")
    assert response.status_code == (201 if valid else 400), response.content[:300]


# -- import documents -----------------------------------------------------------------------------


def _document(**conversation: Any) -> dict[str, Any]:
    return {
        "format": "agentmemory.conversation",
        "version": 1,
        "conversation": {"agent_key": "support", "title": "imported", "metadata": {}, **conversation},
        "messages": [
            {
                "seq": 1,
                "role": "human",
                "content": "hi",
                "tool_call_id": "",
                "name": "",
                "token_count": 1,
                "token_counter": "approx",
            },
        ],
        "summaries": [],
    }


@pytest.mark.parametrize("pending", [{"c1": "one"}, {"c1": [1]}, {"c1": 0}, {"c1": True}])
def test_pending_tool_calls_of_an_import_are_seqs_in_the_schema_too(api_forced, pending) -> None:  # type: ignore[no-untyped-def]
    from jsonschema import Draft202012Validator

    from agentmemory.transfer import row_schema

    row = {"agent_key": "support", "title": "imported", "metadata": {}, "pending_tool_calls": pending}
    assert list(Draft202012Validator(row_schema("conversation")).iter_errors(row))
    response = api_forced.post(
        "/api/conversations/import/", _document(pending_tool_calls=pending), format="json"
    )
    assert response.status_code == 400 and "pending_tool_calls" in response.json()["path"]


@pytest.mark.parametrize(
    ("text", "valid"), [("\x1e", False), ("\x85 ", False), ("\ufeff", True), (" a ", True)]
)
def test_a_summary_without_text_is_refused_by_the_schema_too(text, valid) -> None:
    from jsonschema import Draft202012Validator

    from agentmemory.transfer import row_schema

    schema = row_schema("summary")
    pattern = schema["properties"]["text"]["allOf"][0]["pattern"]
    assert not re.search(r"(?<!\\)\\[sSwWdD]", pattern)  # no shorthand: Python reads it as ECMAScript does
    row = {"text": text, "first_seq": 1, "through_seq": 1}
    errors = [e for e in Draft202012Validator(schema).iter_errors(row) if "text" in list(e.absolute_path)]
    assert (not errors) is valid
    assert bool(text.strip()) is valid  # what import keeps (a summary of white space is refused)


def test_every_query_parameter_of_the_schema_is_refused_twice(client) -> None:  # type: ignore[no-untyped-def]
    # one list for the whole API: a parameter added to an operation but not to it (gap_policy
    # was) took the last of two values, ?gap_policy=report&gap_policy=close wrote a summary
    from agentmemory.api.views import SINGLE_VALUE_PARAMETERS

    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    single = {
        parameter["name"]
        for operations in schema["paths"].values()
        for operation in operations.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", ())
        if parameter["in"] == "query" and parameter.get("schema", {}).get("type") != "array"
    }
    assert single - SINGLE_VALUE_PARAMETERS == set()


def _openapi_30(schema: Any) -> Any:
    """``schema`` with OpenAPI 3.0's ``nullable`` written as JSON Schema's ``"null"`` type."""
    if isinstance(schema, list):
        return [_openapi_30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _openapi_30(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


_CALL = {"id": "c1", "name": "lookup", "arguments": {}}


@pytest.mark.parametrize(
    ("row", "valid"),
    [
        ({"role": "human", "content": ""}, True),
        ({"role": "ai", "content": "Sure."}, True),
        ({"role": "ai", "content": None, "tool_calls": [_CALL]}, True),
        ({"role": "human", "content": None}, False),
        ({"role": "system", "content": None}, False),
        ({"role": "tool", "content": None, "tool_call_id": "c1"}, False),
        ({"role": "tool", "content": "done", "tool_call_id": ""}, False),
        ({"role": "ai", "content": None}, False),
        ({"role": "ai", "content": None, "tool_calls": []}, False),
        ({"role": "human", "content": "hi", "tool_call_id": "c1"}, False),
        ({"role": "human", "content": "hi", "tool_calls": [_CALL]}, False),
        ({"role": "ai", "content": "x", "parts": [{"type": "image", "url": "https://a.b/c.png"}]}, False),
        ({"role": "human", "content": "hi", "metadata": {"is_error": True}}, False),
        ({"role": "ai", "content": "x", "metadata": {"is_error": "yes"}}, False),
        ({"role": "ai", "content": None, "tool_calls": [{**_CALL, "id": ""}]}, False),
        ({"role": "ai", "content": None, "tool_calls": [{**_CALL, "name": "n" * 256}]}, False),
        ({"role": "human", "content": "hi", "exchange_seq": 1}, False),
        ({"role": "system", "content": "Be brief.", "exchange_seq": 1}, False),
        ({"role": "human", "content": "hi", "exchange_seq": None}, True),
    ],
)
def test_an_imported_message_follows_its_roles_rules_in_the_schema_too(api_forced, row, valid) -> None:  # type: ignore[no-untyped-def]
    # schemathesis found imports the schema called valid refused ("only tool messages carry a
    # tool_call_id", "an ai message needs content or tool calls"): the row schema now states
    # what validate_message asks of each role, and the server agrees with it
    from jsonschema import Draft202012Validator

    from agentmemory.transfer import row_schema

    message = {"seq": 1, "tool_call_id": "", "name": "", "token_count": 1, "token_counter": "approx", **row}
    schema_says = not list(Draft202012Validator(_openapi_30(row_schema("message"))).iter_errors(message))
    assert schema_says is valid
    document = _document(
        last_seq=1,
        message_count=1,
        human_message_count=int(row["role"] == "human"),
        stored_tokens=1,
        pending_tool_calls={"c1": 1} if row.get("tool_calls") and valid else {},
    )
    document["messages"] = [message]
    response = api_forced.post("/api/conversations/import/", document, format="json")
    assert response.status_code == (201 if valid else 400), response.content[:300]
    if not valid:
        assert response.json()["path"].startswith("messages[0]")


@pytest.mark.parametrize(
    ("kind", "column", "value"),
    [
        ("conversation", "summary_through_seq", -2078),
        ("conversation", "summary_through_seq", 2**53),
        ("conversation", "message_count", -1),
        ("conversation", "human_message_count", -1),
        ("conversation", "stored_tokens", -1),
        ("conversation", "last_seq", -1),
        ("summary", "first_seq", -1),
        ("summary", "through_seq", -1),
        ("summary", "human_messages_covered", -1),
        ("summary", "previous_through_seq", -1),
    ],
)
def test_a_number_import_always_refuses_is_out_of_its_schema_too(api_forced, kind, column, value) -> None:  # type: ignore[no-untyped-def]
    # schemathesis: a conversation row with "summary_through_seq": -2078 was valid by the
    # schema (an integer) and refused by import ("must be between 0 and 9007199254740991")
    from jsonschema import Draft202012Validator

    from agentmemory.transfer import row_schema

    column_schema = _openapi_30(row_schema(kind)["properties"][column])
    assert list(Draft202012Validator(column_schema).iter_errors(value))
    document = _document(last_seq=1, message_count=1, human_message_count=1, stored_tokens=1)
    summary = {"text": "hi", "first_seq": 1, "through_seq": 1, "human_messages_covered": 1}
    if kind == "summary":
        document["summaries"] = [{**summary, column: value}]
    else:
        document["conversation"][column] = value
    response = api_forced.post("/api/conversations/import/", document, format="json")
    assert response.status_code == 400, response.content[:300]
