"""``agentmemory.contrib.openai_agents.AgentMemorySession`` against the real OpenAI Agents SDK:
every item type comes back as it went in, random operation sequences give what the SDK's
own ``SQLiteSession`` gives, ``Runner.run`` works on it (tools included), and it is an
ordinary owner-scoped conversation (windows, summaries, admin, API)."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from typing import Any

import pytest
from agents import (
    Agent,
    ModelResponse,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
)
from agents.memory import Session, is_openai_responses_compaction_aware_session
from agents.models.interface import Model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary

from agentmemory.contrib.openai_agents import (
    ITEM_KEY,
    AgentMemorySession,
    item_to_message,
    message_to_items,
    session_uuid,
)
from agentmemory.exceptions import InvalidMessageError
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import Role
from agentmemory.models import Conversation, Message
from agentmemory.models import Summary as StoredSummary
from agentmemory.recall.scope import MemoryScopeError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

#: one item of every kind the SDK puts in a session (its RunItem types' ``to_input_item``
#: and the inputs a caller passes), keyed by a name for the test ids
ITEMS: dict[str, dict[str, Any]] = {
    "user_text": {"role": "user", "content": "Where is my order 1042?"},
    "user_parts": {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        ],
    },
    "user_inline_image": {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "high"}],
    },
    "user_file": {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "see the file"},
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQ=",
                "filename": "a.pdf",
            },
            {"type": "input_file", "file_id": "file-123"},
        ],
    },
    "user_unknown_image_detail": {
        "role": "user",
        "content": [{"type": "input_image", "image_url": "https://example.com/a.png", "detail": "original"}],
    },
    "system": {"role": "system", "content": "Be brief."},
    "developer": {"role": "developer", "content": "Answer in French."},
    "assistant_output": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Order 1042 has shipped.", "annotations": [], "logprobs": []}
        ],
    },
    "assistant_easy": {"role": "assistant", "content": "plain answer"},
    "assistant_refusal": {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "I cannot help with that."}],
    },
    "function_call": {
        "type": "function_call",
        "call_id": "call_a",
        "name": "lookup_order",
        "arguments": '{"order_id": "1042"}',
        "id": "fc_1",
        "status": "completed",
    },
    "function_call_output": {
        "type": "function_call_output",
        "call_id": "call_a",
        "output": '{"status": "shipped"}',
    },
    "function_call_bad_arguments": {
        "type": "function_call",
        "call_id": "call_b",
        "name": "lookup_order",
        "arguments": "not json",
    },
    "function_call_output_parts": {
        "type": "function_call_output",
        "call_id": "call_b",
        "output": [{"type": "input_text", "text": "arguments were not JSON"}],
    },
    "reasoning": {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Looking the order up."}],
        "encrypted_content": "gAAAAB-opaque",
    },
    "web_search_call": {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "DHL tracking"},
    },
    "file_search_call": {
        "type": "file_search_call",
        "id": "fs_1",
        "status": "completed",
        "queries": ["refund policy"],
        "results": None,
    },
    "computer_call": {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_c",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [],
        "status": "completed",
    },
    "computer_call_output": {
        "type": "computer_call_output",
        "call_id": "call_c",
        "output": {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"},
    },
    "code_interpreter_call": {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "code": "print(6 * 7)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "42"}],
        "status": "completed",
    },
    "image_generation_call": {
        "type": "image_generation_call",
        "id": "ig_1",
        "result": PNG,
        "status": "completed",
    },
    "local_shell_call": {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_d",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    },
    "local_shell_call_output": {"type": "local_shell_call_output", "id": "call_d", "output": "a.txt"},
    "shell_call": {
        "type": "shell_call",
        "call_id": "call_e",
        "action": {"commands": ["ls"]},
        "status": "completed",
    },
    "shell_call_output": {
        "type": "shell_call_output",
        "call_id": "call_e",
        "output": [{"stdout": "a.txt", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    },
    "apply_patch_call": {
        "type": "apply_patch_call",
        "call_id": "call_f",
        "operation": {"type": "create_file", "path": "a.py", "diff": "+print(1)"},
        "status": "completed",
    },
    "apply_patch_call_output": {
        "type": "apply_patch_call_output",
        "call_id": "call_f",
        "status": "completed",
        "output": "created a.py",
    },
    "custom_tool_call": {"type": "custom_tool_call", "call_id": "call_g", "name": "sql", "input": "select 1"},
    "custom_tool_call_output": {"type": "custom_tool_call_output", "call_id": "call_g", "output": "1"},
    "mcp_list_tools": {
        "type": "mcp_list_tools",
        "id": "ml_1",
        "server_label": "docs",
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    },
    "mcp_approval_request": {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "docs",
        "name": "delete_page",
        "arguments": '{"page": 3}',
    },
    "mcp_approval_response": {
        "type": "mcp_approval_response",
        "approval_request_id": "mcpr_1",
        "approve": True,
    },
    "mcp_call": {
        "type": "mcp_call",
        "id": "mc_1",
        "server_label": "docs",
        "name": "search",
        "arguments": '{"q": "refunds"}',
        "output": "found 3 pages",
    },
    "compaction": {"type": "compaction", "encrypted_content": "enc-summary"},
    "item_reference": {"type": "item_reference", "id": "msg_1"},
    "future_item": {"type": "some_future_item", "payload": {"nested": [1, 2.5, None, True]}},
}

# The tool exchanges among them: (the call, the output answering it).
EXCHANGES = [
    ("function_call", "function_call_output"),
    ("function_call_bad_arguments", "function_call_output_parts"),
    ("computer_call", "computer_call_output"),
    ("shell_call", "shell_call_output"),
    ("apply_patch_call", "apply_patch_call_output"),
    ("custom_tool_call", "custom_tool_call_output"),
    ("mcp_approval_request", "mcp_approval_response"),
]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


# -- conversion, no database -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ITEMS))
def test_every_item_converts_back_exactly(name: str) -> None:
    item = ITEMS[name]
    message = item_to_message(copy.deepcopy(item))
    assert message_to_items(message) == [item]


@pytest.mark.parametrize(("call", "output"), EXCHANGES)
def test_client_answered_calls_are_tool_exchanges(call: str, output: str) -> None:
    ai, tool = item_to_message(ITEMS[call]), item_to_message(ITEMS[output])
    assert ai.role is Role.AI and len(ai.tool_calls) == 1
    assert tool.role is Role.TOOL and tool.tool_call_id == ai.tool_calls[0].id


def test_plain_items_are_stored_without_a_copy() -> None:
    """What the columns give back exactly is not stored twice."""
    for name in ("user_text", "function_call_output", "assistant_easy", "system"):
        assert ITEM_KEY not in item_to_message(ITEMS[name]).metadata, name
    for name in ("assistant_output", "developer", "reasoning", "function_call"):
        assert item_to_message(ITEMS[name]).metadata[ITEM_KEY] == ITEMS[name], name


def test_items_agentmemory_has_no_columns_for_read_as_text() -> None:
    assert item_to_message(ITEMS["reasoning"]).content == "[reasoning] Looking the order up."
    assert item_to_message(ITEMS["web_search_call"]).content == "[web_search_call] DHL tracking"
    assert item_to_message(ITEMS["user_parts"]).content == "What is in this picture?\n[image]"
    call = item_to_message(ITEMS["function_call"]).tool_calls[0]
    assert (call.id, call.name, dict(call.arguments)) == ("call_a", "lookup_order", {"order_id": "1042"})


def test_an_item_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(TypeError, match="JSON object"):
        item_to_message(["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        item_to_message({"role": "user", "content": object()})


def test_the_session_is_a_session_with_the_compaction_hook() -> None:
    session = AgentMemorySession("x")
    assert isinstance(session, Session)
    assert is_openai_responses_compaction_aware_session(session)


# -- the store ------------------------------------------------------------------------------


pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_every_item_round_trips_through_the_database() -> None:
    session = AgentMemorySession(session_id())
    items = list(ITEMS.values())
    run(session.add_items(copy.deepcopy(items)))
    assert run(session.get_items()) == items
    assert run(session.get_items(limit=3)) == items[-3:]
    # a fresh session object of the same id reads the same conversation
    assert run(AgentMemorySession(session.session_id).get_items()) == items
    assert Message.objects.filter(conversation__uuid=session.conversation_uuid).count() == len(items)


@pytestmark_db
def test_tool_exchanges_are_linked_and_outputs_without_calls_are_orphans(caplog) -> None:  # type: ignore[no-untyped-def]
    session = AgentMemorySession(session_id())
    names = ["user_text", "function_call", "computer_call", "computer_call_output", "function_call_output"]
    run(session.add_items([ITEMS[name] for name in names]))
    conv = Conversation.objects.get(uuid=session.conversation_uuid)
    assert conv.pending_tool_calls == {}
    rows = list(Message.objects.filter(conversation=conv).order_by("seq").values_list("role", "exchange_seq"))
    assert rows == [("human", None), ("ai", 2), ("ai", 3), ("tool", 3), ("tool", 2)]
    # an output whose call the session never saw: stored (SQLiteSession stores it), as an
    # orphan that no window sends, and said in the log
    with caplog.at_level("WARNING", logger="agentmemory.contrib.openai_agents"):
        run(session.add_items([{"type": "function_call_output", "call_id": "call_zz", "output": "?"}]))
    assert "call_zz" in caplog.text
    orphan = Message.objects.filter(conversation=conv).order_by("-seq").first()
    assert orphan is not None and orphan.is_orphan
    assert run(session.get_items(limit=1)) == [
        {"type": "function_call_output", "call_id": "call_zz", "output": "?"}
    ]


@pytestmark_db
def test_bad_input_is_refused_and_nothing_is_stored() -> None:
    session = AgentMemorySession(session_id())
    run(session.add_items([ITEMS["user_text"]]))
    with pytest.raises(InvalidMessageError):
        run(session.add_items([ITEMS["assistant_easy"], {"role": "user", "content": "nul \x00 byte"}]))
    assert run(session.get_items()) == [ITEMS["user_text"]]


@pytestmark_db
def test_sessions_are_scoped_by_owner_and_agent_key(django_user_model) -> None:  # type: ignore[no-untyped-def]
    ann = django_user_model.objects.create_user("ann")
    bob = django_user_model.objects.create_user("bob")
    sid = session_id()
    run(AgentMemorySession(sid, owner=ann).add_items([{"role": "user", "content": "ann's"}]))
    run(AgentMemorySession(sid, owner=bob).add_items([{"role": "user", "content": "bob's"}]))
    run(
        AgentMemorySession(sid, owner=ann, agent_key="other").add_items(
            [{"role": "user", "content": "other"}]
        )
    )
    assert run(AgentMemorySession(sid, owner=ann.pk).get_items()) == [{"role": "user", "content": "ann's"}]
    assert run(AgentMemorySession(sid, owner=bob).get_items()) == [{"role": "user", "content": "bob's"}]
    assert run(AgentMemorySession(sid).get_items()) == []
    conv = Conversation.objects.get(uuid=session_uuid(sid, owner_id=ann.pk))
    assert (conv.owner, conv.agent_key, conv.title) == (ann, "", sid)
    assert Conversation.objects.filter(title=sid).count() == 3


@pytestmark_db
def test_an_owner_that_names_no_user_is_refused_at_the_first_write(django_user_model) -> None:  # type: ignore[no-untyped-def]
    # the foreign key refused it only at the commit, as a bare IntegrityError
    session = AgentMemorySession(session_id(), owner=987654)
    with pytest.raises(MemoryScopeError, match="no user with id 987654"):
        run(session.add_items([{"role": "user", "content": "hi"}]))
    assert not Conversation.objects.exists()
    ann = django_user_model.objects.create_user("ann")
    run(AgentMemorySession(session.session_id, owner=ann.pk).add_items([{"role": "user", "content": "hi"}]))
    assert Conversation.objects.get().owner == ann


def test_an_anonymous_user_owns_no_session() -> None:
    # request.user of a visitor without login has no pk: its sessions were conversations of
    # nobody, one per session id, shared by every visitor who used that id
    from django.contrib.auth.models import AnonymousUser

    with pytest.raises(MemoryScopeError, match="anonymous"):
        AgentMemorySession("support-1042", owner=AnonymousUser())


@pytestmark_db
def test_the_session_is_a_conversation_in_the_api_and_the_admin(django_user_model) -> None:  # type: ignore[no-untyped-def]
    from django.test import Client
    from rest_framework.test import APIClient

    ann = django_user_model.objects.create_superuser("ann", password="pw-for-the-test")
    bob = django_user_model.objects.create_user("bob")
    session = AgentMemorySession(session_id(), owner=ann, agent_key="support")
    run(session.add_items([ITEMS["user_text"], ITEMS["function_call"], ITEMS["function_call_output"]]))
    uid = str(session.conversation_uuid)
    api = APIClient()
    api.force_authenticate(ann)
    assert uid in [c["uuid"] for c in api.get("/api/conversations/").json()["results"]]
    messages = api.get(f"/api/conversations/{uid}/messages/").json()["results"]
    assert [m["role"] for m in messages] == ["human", "ai", "tool"]
    api.force_authenticate(bob)
    assert api.get(f"/api/conversations/{uid}/messages/").status_code == 404
    admin = Client()
    admin.force_login(ann)
    conv = Conversation.objects.get(uuid=uid)
    page = admin.get(f"/admin/agentmemory/conversation/{conv.pk}/change/")
    assert page.status_code == 200
    assert session.session_id in page.content.decode()


@pytestmark_db
def test_the_conversation_is_read_from_async_code_as_the_docs_show_it(django_user_model) -> None:  # type: ignore[no-untyped-def]
    """Beside ``Runner.run`` the caller is in a coroutine, where the sync
    ``get_conversation()`` raises Django's ``SynchronousOnlyOperation``."""
    ann = django_user_model.objects.create_user("ann")
    session = AgentMemorySession(session_id(), owner=ann, agent_key="support")

    async def read() -> tuple[Any, Any]:
        before = await session.aget_conversation()
        await session.add_items([ITEMS["user_text"]])
        return before, await session.aget_conversation()

    before, after = run(read())
    assert before is None
    assert after == Conversation.objects.get(uuid=session.conversation_uuid)
    assert (after.title, after.owner_id, after.message_count) == (session.session_id, ann.pk, 1)
    assert session.get_conversation() == after


@pytestmark_db
def test_pop_and_clear_keep_the_conversation_consistent() -> None:
    session = AgentMemorySession(session_id())
    assert run(session.pop_item()) is None
    run(session.add_items([ITEMS["user_text"], ITEMS["function_call"], ITEMS["function_call_output"]]))
    assert run(session.pop_item()) == ITEMS["function_call_output"]
    conv = Conversation.objects.get(uuid=session.conversation_uuid)
    assert conv.pending_tool_calls == {"call_a": 2}  # the call awaits its output again
    assert run(session.pop_item()) == ITEMS["function_call"]
    conv.refresh_from_db()
    assert conv.pending_tool_calls == {}
    run(session.clear_session())
    assert run(session.get_items()) == []
    conv.refresh_from_db()
    assert conv.message_count == 0
    run(session.add_items([ITEMS["user_text"]]))
    assert run(session.get_items()) == [ITEMS["user_text"]]


@pytestmark_db
def test_a_conversation_deleted_under_the_session_is_made_again() -> None:
    session = AgentMemorySession(session_id())
    run(session.add_items([ITEMS["user_text"]]))
    Conversation.objects.filter(uuid=session.conversation_uuid).delete()
    assert run(session.get_items()) == []
    run(session.add_items([ITEMS["assistant_easy"]]))
    assert run(session.get_items()) == [ITEMS["assistant_easy"]]


# -- the same answers as SQLiteSession ---------------------------------------------------------


def _item_strategy() -> st.SearchStrategy[dict[str, Any]]:
    """Items of every kind, with call ids drawn from a small set so that outputs answer
    earlier calls, come before them, answer nothing or repeat."""
    names = sorted(ITEMS)

    def vary(name: str, call_id: str) -> dict[str, Any]:
        item = copy.deepcopy(ITEMS[name])
        for key in ("call_id", "approval_request_id"):
            if key in item:
                item[key] = call_id
        if item.get("type") == "mcp_approval_request":
            item["id"] = call_id
        return item

    return st.builds(vary, st.sampled_from(names), st.sampled_from(["call_1", "call_2", "call_3"]))


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(_item_strategy(), min_size=0, max_size=4)),
        st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-2, 6))),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    min_size=1,
    max_size=14,
)


async def _apply(session: Any, operations: list[tuple[str, Any]]) -> list[Any]:
    results: list[Any] = []
    for op, arg in operations:
        if op == "add":
            results.append(await session.add_items(copy.deepcopy(arg)))
        elif op == "get":
            results.append(await session.get_items(arg))
        elif op == "pop":
            results.append(await session.pop_item())
        else:
            results.append(await session.clear_session())
    results.append(await session.get_items())
    return results


@pytestmark_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
def test_random_operations_return_what_sqlite_session_returns(operations: list[tuple[str, Any]]) -> None:
    sid = session_id()
    reference = SQLiteSession(sid)
    try:
        expected = run(_apply(reference, operations))
    finally:
        reference.close()
    assert run(_apply(AgentMemorySession(sid), operations)) == expected


@pytestmark_db
def test_the_settings_limit_is_the_default_limit() -> None:
    session = AgentMemorySession(session_id(), session_settings={"limit": 2})
    items = [ITEMS["user_text"], ITEMS["assistant_easy"], ITEMS["system"]]
    run(session.add_items(items))
    assert run(session.get_items()) == items[-2:]
    assert run(session.get_items(limit=3)) == items


# -- Runner.run --------------------------------------------------------------------------------


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its number."""
    return json.dumps({"order_id": order_id, "status": "shipped", "carrier": "DHL"})


def _agent(fake_openai: Any, client: AsyncOpenAI) -> Agent:
    return Agent(
        name="support",
        instructions="You answer questions about orders.",
        tools=[lookup_order],
        model=OpenAIChatCompletionsModel(model="gpt-test", openai_client=client),
    )


def _script_two_turns(fake_openai: Any) -> None:
    fake_openai.enqueue_tool_call("lookup_order", {"order_id": "1042"}, call_id="call_order")
    fake_openai.enqueue_text("Order 1042 has shipped with DHL.")
    fake_openai.enqueue_text("You asked about order 1042.")


async def _two_turns(agent: Agent, session: Any) -> list[str]:
    config = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "Where is my order 1042?", session=session, run_config=config)
    second = await Runner.run(agent, "Which order did I ask about?", session=session, run_config=config)
    return [first.final_output, second.final_output]


@pytestmark_db
def test_runner_runs_multi_turn_with_tools_on_the_session(fake_openai) -> None:  # type: ignore[no-untyped-def]
    session = AgentMemorySession(session_id(), agent_key="support")
    reference = SQLiteSession("reference")

    async def scenario() -> tuple[list[str], list[Any], list[Any]]:
        async with AsyncOpenAI(base_url=fake_openai.base_url, api_key="test-key", max_retries=0) as client:
            agent = _agent(fake_openai, client)
            _script_two_turns(fake_openai)
            outputs = await _two_turns(agent, session)
            # the SDK's own store, for the same run
            _script_two_turns(fake_openai)
            await _two_turns(agent, reference)
        return outputs, await session.get_items(), await reference.get_items()

    try:
        outputs, items, expected = run(scenario())
    finally:
        reference.close()
    assert outputs == ["Order 1042 has shipped with DHL.", "You asked about order 1042."]
    # equal but for the completion ids the fake server makes from the clock
    assert _without_response_ids(items) == _without_response_ids(expected)
    assert len(items) == 6

    # the model's third call saw the whole first turn from the session, tool exchange included
    third_request = fake_openai.requests[2]["messages"]
    assert [m["role"] for m in third_request] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert third_request[3]["tool_call_id"] == "call_order"

    # stored as a conversation with a linked tool exchange
    stored = PersistentChatHistory(Conversation.objects.get(uuid=session.conversation_uuid)).get_messages()
    assert [m.role.value for m in stored] == ["human", "ai", "tool", "ai", "human", "ai"]
    assert stored[1].tool_calls[0].name == "lookup_order"


def _without_response_ids(items: list[Any]) -> list[Any]:
    items = copy.deepcopy(items)
    for item in items:
        item.get("provider_data", {}).pop("response_id", None)
    return items


class ReasoningModel(Model):
    """A model that thinks (a reasoning item), calls a tool, then answers, with response ids
    (which make the SDK call the session's compaction hook)."""

    def __init__(self) -> None:
        self.calls = 0
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
    ):  # type: ignore[no-untyped-def]
        self.calls += 1
        self.inputs.append(copy.deepcopy(input))
        reasoning = ResponseReasoningItem(
            id=f"rs_{self.calls}", type="reasoning", summary=[Summary(text="thinking", type="summary_text")]
        )
        if self.calls % 2:
            output: list[Any] = [
                reasoning,
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{self.calls}",
                    name="lookup_order",
                    arguments='{"order_id": "7"}',
                    id=f"fc_{self.calls}",
                    status="completed",
                ),
            ]
        else:
            text = ResponseOutputText(type="output_text", text=f"answer {self.calls}", annotations=[])
            output = [
                reasoning,
                ResponseOutputMessage(
                    id=f"msg_{self.calls}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=f"resp_{self.calls}")

    def stream_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise NotImplementedError


@pytestmark_db
def test_reasoning_runs_and_the_compaction_hook(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model = ReasoningModel()
    agent = Agent(name="thinker", tools=[lookup_order], model=model, model_settings=ModelSettings())
    session = AgentMemorySession(session_id())
    compactions: list[Any] = []
    original = AgentMemorySession.run_compaction

    async def spy(self, args=None):  # type: ignore[no-untyped-def]
        compactions.append(args)
        await original(self, args)

    monkeypatch.setattr(AgentMemorySession, "run_compaction", spy)
    config = RunConfig(tracing_disabled=True)
    for question in ("first?", "second?"):
        run(Runner.run(agent, question, session=session, run_config=config))
    items = run(session.get_items())
    assert [i.get("type", i.get("role")) for i in items] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
    ] * 2
    # the second turn's first model call got the first turn back from the session, reasoning included
    assert [i.get("id") for i in model.inputs[2] if i.get("type") == "reasoning"] == ["rs_1", "rs_2"]
    assert compactions and all(a["response_id"].startswith("resp_") for a in compactions)


@pytestmark_db
def test_run_compaction_makes_a_summary_and_leaves_the_items() -> None:
    session = AgentMemorySession(session_id())
    items = []
    for i in range(4):
        items += [
            {"role": "user", "content": f"question {i} about order {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    run(session.add_items(items))
    run(session.run_compaction({"force": True}))
    conv = Conversation.objects.get(uuid=session.conversation_uuid)
    assert StoredSummary.objects.filter(conversation=conv).exists()
    assert run(session.get_items()) == items  # nothing replaced or deleted

    windowed = AgentMemorySession(session.session_id, window_tokens=2_000)
    window = run(windowed.get_items())
    assert window[0]["role"] == "system" and conv.summary is not None
    assert window[1:] == items[-2:]  # the newest turn, never folded


@pytestmark_db
def test_the_window_option_fits_the_budget_and_keeps_tool_exchanges_whole() -> None:
    sid = session_id()
    session = AgentMemorySession(sid)
    items: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(30):
        items += [
            {"role": "user", "content": f"question {i} " + "words " * 20},
            {**ITEMS["function_call"], "call_id": f"call_{i}", "id": f"fc_{i}"},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": f"result {i}"},
            {**ITEMS["assistant_output"], "id": f"msg_{i}"},
        ]
    run(session.add_items(items))
    windowed = AgentMemorySession(sid, window_tokens=300)
    window = run(windowed.get_items())
    assert window[0] == items[0]  # the pinned system prompt
    assert window[-4:] == items[-4:]  # the newest turn, exactly as stored
    assert len(window) < len(items)
    history = window[1:]
    assert history[0]["role"] == "user"
    calls = [i["call_id"] for i in history if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in history if i.get("type") == "function_call_output"]
    assert calls == outputs
    # the default session still returns everything
    assert run(session.get_items()) == items


def _reasoning(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": "thinking"}]}


@pytestmark_db
def test_the_window_never_sends_a_reasoning_item_without_the_item_it_preceded() -> None:
    """The Responses API refuses a reasoning item whose following item is missing (400 "of
    type 'reasoning' was provided without its required following item";
    openai/openai-agents-js#1280, continuedev/continue#8933): a call still awaiting its output
    is left out of the window, and so is the reasoning (one or several items) before it."""
    sid = session_id()
    call = {
        "type": "function_call",
        "call_id": "call_p",
        "name": "lookup_order",
        "arguments": "{}",
        "id": "fc_p",
    }
    answered = {
        "type": "function_call",
        "call_id": "call_a",
        "name": "lookup_order",
        "arguments": "{}",
        "id": "fc_a",
    }
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is order 1042?"},
        _reasoning(1),
        answered,
        {"type": "function_call_output", "call_id": "call_a", "output": "shipped"},
        _reasoning(2),
        {**ITEMS["assistant_output"], "id": "msg_1"},
        {"role": "user", "content": "And order 7?"},
        _reasoning(3),
        _reasoning(4),
        call,  # never answered: the run was interrupted
        {"role": "user", "content": "Never mind. Thanks!"},
    ]
    run(AgentMemorySession(sid).add_items(items))
    window = run(AgentMemorySession(sid, window_tokens=4_000).get_items())
    assert window == items[:7] + items[-1:]
    # the whole history is still returned without a window
    assert run(AgentMemorySession(sid).get_items()) == items
