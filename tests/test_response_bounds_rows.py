"""Answers that grow with the number of stored rows are bounded in bytes too.

Beside the lists and search (tests/test_response_bounds.py), three answers held one entry per
row whatever their number: the usage endpoints one per model used (1,000 models of 190
characters answered 250 KB, and nothing bounded their number), the answer of
cancel-pending-tool-calls every result it stored (38,400 pending calls answered 46 MB in
52 s), and a model call its whole record of how the window sent differed from storage, which
grows with the window (its stubbed results, left-out exchanges, memory block). Each now holds
what fits in ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` and says what it left out.
"""

from __future__ import annotations

import pytest

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, ModelCall

pytestmark = pytest.mark.django_db

BOUND = 100_000


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    """The user these tests act as (``api_forced`` is authenticated as it)."""
    return django_user_model.objects.create_user("bounded-rows")


def _conversation(user) -> Conversation:  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(owner=user, agent_key="bounded")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])
    return conv


def _call(conv: Conversation, **columns: object) -> ModelCall:
    values = {"kind": "chat", "model": "m", "usage_source": "provider", **columns}
    return ModelCall.objects.create(conversation=conv, owner=conv.owner, **values)


def test_usage_answers_the_models_that_fit_and_the_whole_totals(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {
        "API_MAX_RESPONSE_BYTES": BOUND,
        "MODEL_PRICES": {"priced": {"input": "1", "output": "2"}},
    }
    conv = _conversation(user)
    ModelCall.objects.bulk_create(
        [
            ModelCall(
                conversation=conv,
                owner=user,
                kind="chat",
                model=f"model-{i:04d}-" + "m" * 180,
                usage_source="provider",
                input_tokens=1,
            )
            for i in range(1_000)
        ]
    )
    _call(conv, model="priced", input_tokens=1_000_000)
    for url in ("/api/usage/", f"/api/conversations/{conv.uuid}/model-calls/usage/"):
        response = api_forced.get(url)
        assert response.status_code == 200 and len(response.content) <= BOUND, len(response.content)
        body = response.json()
        # the sums and the cost stay those of every call
        assert body["calls"] == 1_001 and body["input_tokens"] == 1_001_000 and body["cost"] is not None
        models = [entry["model"] for entry in body["by_model"]]
        assert models == sorted(models) and models[0] == "model-0000-" + "m" * 180
        unpriced = body["unpriced_models"]
        assert unpriced == sorted(unpriced) and unpriced[0] == models[0]
        assert body["left_out"] == {"by_model": 1_001 - len(models), "unpriced_models": 1_000 - len(unpriced)}
        assert body["left_out"]["by_model"] > 0 and body["left_out"]["unpriced_models"] > 0


def test_usage_that_fits_leaves_nothing_out(api_forced, user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation(user)
    _call(conv, input_tokens=5)
    body = api_forced.get("/api/usage/").json()
    assert [entry["model"] for entry in body["by_model"]] == ["m"] and body["unpriced_models"] == ["m"]
    assert body["left_out"] == {"by_model": 0, "unpriced_models": 0}


def test_cancelled_tool_calls_answer_the_results_that_fit(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = Conversation.objects.create(owner=user)
    calls = [ToolCall(id=f"call_{k:03d}", name="lookup", arguments={}) for k in range(120)]
    PersistentChatHistory(conv).add_messages(
        [ChatMessage.human("go"), ChatMessage.ai(None, tool_calls=calls)]
    )
    response = api_forced.post(
        f"/api/conversations/{conv.uuid}/cancel-pending-tool-calls/", {"reason": "r" * 1_000}, format="json"
    )
    assert response.status_code == 200 and len(response.content) <= BOUND, len(response.content)
    body = response.json()
    listed = body["messages"]
    assert [m["tool_call_id"] for m in listed] == [f"call_{k:03d}" for k in range(len(listed))]
    assert 0 < body["left_out"] == 120 - len(listed)
    # every call was answered; the results not listed are read after the last one listed
    assert Message.objects.filter(conversation=conv, role="tool").count() == 120
    rest = api_forced.get(
        f"/api/conversations/{conv.uuid}/messages/", {"after_seq": listed[-1]["seq"], "page_size": 5}
    ).json()
    assert rest["results"][0]["tool_call_id"] == f"call_{len(listed):03d}"
    none_left = api_forced.post(
        f"/api/conversations/{conv.uuid}/cancel-pending-tool-calls/", {}, format="json"
    )
    assert none_left.json() == {"messages": [], "left_out": 0}


def test_a_model_call_answers_the_record_of_its_window_that_fits(api_forced, user, settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": BOUND}
    conv = _conversation(user)
    # a window that sent 5,000 results stubbed by a tool's memory policy records each stub
    stubbed = {str(seq): "[result of lookup omitted from memory]" for seq in range(3, 5_003)}
    big = _call(conv, window_changes={"stubbed": stubbed, "left_out": [1, 2], "summary_truncated": True})
    small = _call(conv, window_changes={"left_out": [7]})
    base = f"/api/conversations/{conv.uuid}/model-calls"
    detail = api_forced.get(f"{base}/{big.uuid}/")
    assert detail.status_code == 200 and len(detail.content) <= BOUND, len(detail.content)
    body = detail.json()
    assert body["window_changes"] == {"left_out": [1, 2], "summary_truncated": True}
    assert body["window_changes_left_out"] == ["stubbed"]
    page = api_forced.get(f"{base}/")
    assert page.status_code == 200 and len(page.content) <= BOUND
    listed = {item["id"]: item for item in page.json()["results"]}
    assert listed[str(big.uuid)]["window_changes_left_out"] == ["stubbed"]
    assert listed[str(small.uuid)]["window_changes"] == {"left_out": [7]}
    assert listed[str(small.uuid)]["window_changes_left_out"] == []


def test_the_schema_states_these_bounds(settings) -> None:  # type: ignore[no-untyped-def]
    from drf_spectacular.generators import SchemaGenerator

    settings.AGENTMEMORY = {"API_MAX_RESPONSE_BYTES": 1_234_567}
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]

    def described(name: str, key: str) -> str:
        component = components[name]
        assert key in component.get("required", []), (name, key)
        return str(component["properties"][key].get("description", "")) + str(
            component.get("description", "")
        )

    for name, key in [
        ("Usage", "left_out"),
        ("CancelledToolCalls", "left_out"),
        ("ModelCall", "window_changes_left_out"),
    ]:
        assert "API_MAX_RESPONSE_BYTES" in described(name, key), name
    for name in ("ConversationDetail", "Fact"):
        assert "API_MAX_RESPONSE_BYTES" in components[name]["description"], name
    cancel = schema["paths"]["/api/conversations/{uuid}/cancel-pending-tool-calls/"]["post"]
    assert cancel["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/CancelledToolCalls"
    )
