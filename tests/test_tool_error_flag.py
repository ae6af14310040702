"""A failed tool result reaches the provider as a failure from stored history.

``metadata["is_error"]`` on a ``tool`` message is what the converters send (Anthropic's
``tool_result`` ``"is_error": true``, LangChain's ``ToolMessage(status="error")``). The window
read from the database carried only the thinking blocks of ``ai`` rows, so every window built
from storage (the tail read, the head statement and its PostgreSQL functions, the rows read
without content, a recorded model call's rebuild, the API's ``/context/``) sent a failed call
as a success; and an agent stored a tool that raised without the flag at all. Anthropic's
tool-use guide: report a failed tool with ``is_error: true`` and the error as the content.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection, router

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.calls import recorded_context_window
from agentmemory.context import ContextWindowBuilder
from agentmemory.formats.anthropic import to_anthropic
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, ModelCall
from agentmemory.store import function_sql, functions
from agentmemory.store.window import read_contents
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FAILED = {"is_error": True}
_LATENCY = {"latency_s": 0.01}


def _exchange(call_id: str, result: str, metadata: dict) -> list[ChatMessage]:
    return [
        ChatMessage.ai(None, [ToolCall(call_id, "lookup", {"id": call_id})]),
        ChatMessage.tool(result, tool_call_id=call_id, name="lookup", metadata=metadata),
    ]


def _conversation() -> Conversation:
    """Seqs: 1 human, 2-3 a failed lookup, 4-5 a lookup that worked, 6-7 one whose flag is
    false, 8 ai, 9 a human message carrying the key (not a tool result), 10 ai."""
    conv = Conversation.objects.create(agent_key="errors")
    PersistentChatHistory(conv).add_messages(
        [
            ChatMessage.human("Find orders 1, 2 and 3."),
            *_exchange("c1", "Error: ValueError: no order 1", {**_LATENCY, "error": True, **FAILED}),
            *_exchange("c2", "order 2: shipped", {**_LATENCY, "error": False}),
            *_exchange("c3", "order 3: paid", {"is_error": False}),
            ChatMessage.ai("Order 1 could not be found; 2 shipped; 3 is paid."),
            ChatMessage.human("Thanks"),
            ChatMessage.ai("You're welcome."),
        ]
    )
    # a row written around validation (which refuses the key on a human message): the window
    # still carries the flag of tool results only
    Message.objects.filter(conversation=conv, seq=9).update(metadata={"is_error": True})
    return conv


def _metadata(messages: list[ChatMessage]) -> dict[int, dict]:
    return {m.seq: dict(m.metadata) for m in messages if m.seq is not None}


EXPECTED = {1: {}, 2: {}, 3: FAILED, 4: {}, 5: {}, 6: {}, 7: {}, 8: {}, 9: {}, 10: {}}


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
@pytest.mark.parametrize("cap", [None, 30])
def test_the_window_carries_the_error_flag_of_a_failed_tool_result_and_nothing_else(
    system_prompt, cap
) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation()
    builder = ContextWindowBuilder(conv, system_prompt=system_prompt, max_tool_result_tokens=cap)
    for _ in range(2):  # on PostgreSQL the second build goes through the head function
        messages = builder.build(max_tokens=5000).messages
        assert _metadata(messages) == EXPECTED
    _system, sent = to_anthropic(messages)
    results = [
        b for m in sent if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"
    ]
    assert [(b["tool_use_id"], b.get("is_error")) for b in results] == [
        ("c1", True),
        ("c2", None),
        ("c3", None),
    ]
    assert results[0]["content"] == "Error: ValueError: no order 1"


def test_rows_read_without_content_carry_the_flag_alike() -> None:
    conv = _conversation()
    contents = read_contents(router.db_for_read(Message), conv.pk, list(range(1, 11)))
    assert _metadata(list(contents.values())) == EXPECTED


def test_a_failed_result_read_on_a_later_page_of_the_tail_keeps_its_flag() -> None:
    """Large old messages make the first page small (sized from the average message); the
    failed exchange is among many small newer messages, read by the next pages."""
    conv = Conversation.objects.create(agent_key="errors")
    history = PersistentChatHistory(conv)
    big = "word " * 3000
    history.add_messages([ChatMessage.human(big), ChatMessage.ai(big)] * 2)
    history.add_messages([ChatMessage.human("Find order 1."), *_exchange("c1", "Error: gone", FAILED)])
    for i in range(40):
        history.add_messages([ChatMessage.human(f"q{i}"), ChatMessage.ai(f"a{i}")])
    window = ContextWindowBuilder(conv).build(max_tokens=2000)
    [failed] = [m for m in window.messages if m.tool_call_id == "c1"]
    assert failed.metadata == FAILED
    assert window.rows_read > 40  # more than the first page


def test_the_flag_costs_no_tokens_of_its_own() -> None:
    """The stored count of a tool result is that of its text, id and name: the flag is a
    boolean attribute of the block, not text the model reads."""
    conv = _conversation()
    counts = dict(Message.objects.filter(conversation=conv, seq__in=[3, 5]).values_list("seq", "token_count"))
    history = PersistentChatHistory(Conversation.objects.create(agent_key="errors"))
    stored = history.add_messages(
        [
            ChatMessage.human("Find orders 1, 2 and 3."),
            *_exchange("c1", "Error: ValueError: no order 1", {}),
        ]
    )
    assert stored[2].token_count == counts[3]


# -- agents ---------------------------------------------------------------------------------


@tool
def lookup(order_id: int) -> str:
    """Look an order up."""
    if order_id == 1:
        raise ValueError("no order 1")
    return f"order {order_id}: shipped"


class Agent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "errors-agent"
    SYSTEM_PROMPT = "You look orders up."
    TOOLS = [lookup]


def _calls(*items: tuple[str, str, dict]) -> ChatMessage:
    return ChatMessage.ai(
        None,
        [ToolCall(i, n, a) for i, n, a in items],
        metadata={"thinking": [{"type": "thinking", "thinking": "look both up", "signature": "sig"}]},
    )


def test_an_agent_stores_a_failed_call_as_an_error_result_and_sends_it_as_one() -> None:
    llm = ScriptedChatModel(
        [
            _calls(("t1", "lookup", {"order_id": 1}), ("t2", "lookup", {"order_id": 2}), ("t3", "nope", {})),
            "Order 1 does not exist; order 2 shipped.",
            "As I said.",
        ]
    )
    agent = Agent(llm=llm)
    conv = agent.start_conversation()
    agent.run(conv, "Orders 1 and 2?")
    agent.run(conv, "Sure?")

    stored = {m.tool_call_id: m for m in Message.objects.filter(conversation=conv, role="tool")}
    assert stored["t1"].metadata["is_error"] is True
    assert stored["t1"].content == "Error: ValueError: no order 1"
    assert stored["t3"].metadata["is_error"] is True  # an unknown tool
    assert "is_error" not in stored["t2"].metadata
    # the next call of the loop and the next turn send it as a failure
    for sent, _tools in llm.calls[1:]:
        flags = {m.tool_call_id: m.metadata.get("is_error") for m in sent if m.role == "tool"}
        assert flags == {"t1": True, "t2": None, "t3": True}
    # a recorded call rebuilds to what the model received: flags and thinking blocks alike
    records = list(ModelCall.objects.filter(conversation=conv, kind="chat").order_by("id"))
    assert len(records) == len(llm.calls) == 3
    for record, (sent, _tools) in zip(records, llm.calls, strict=True):
        assert record.window() == sent
        assert recorded_context_window(record).messages == sent
    assert any(m.metadata.get("thinking") for m in llm.calls[1][0])


def test_cancelled_calls_are_answered_with_error_results() -> None:
    conv = Conversation.objects.create(agent_key="errors")
    history = PersistentChatHistory(conv)
    history.add_messages([ChatMessage.human("Book it."), _calls(("w1", "approve", {}))])
    [result] = history.cancel_pending_tool_calls("the approval was refused")
    assert result.metadata == FAILED
    window = ContextWindowBuilder(conv).build(max_tokens=2000)
    assert [m.metadata for m in window.messages if m.role == "tool"] == [FAILED]


def test_an_agent_turn_whose_tool_raised_is_sent_to_anthropic_as_an_error_in_the_next_turn(
    fake_anthropic, request
) -> None:  # type: ignore[no-untyped-def]
    model = AnthropicChatModel(
        model="claude-test", base_url=fake_anthropic.base_url, api_key="k", max_retries=0
    )
    request.addfinalizer(model.close)
    agent = Agent(llm=model)
    conv = agent.start_conversation(owner=UserFactory())
    fake_anthropic.enqueue_tool_use("lookup", {"order_id": 1}, tool_use_id="toolu_1")
    fake_anthropic.enqueue_text("Order 1 does not exist.")
    assert agent.run(conv, "Where is order 1?").answer == "Order 1 does not exist."
    fake_anthropic.enqueue_text("It was never placed.")
    assert agent.run(conv, "Why?").answer == "It was never placed."

    assert len(fake_anthropic.requests) == 3
    for body in fake_anthropic.requests[1:]:  # the loop's next call, and the next turn
        [result] = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
        assert result["tool_use_id"] == "toolu_1"
        assert result["is_error"] is True
        assert result["content"] == "Error: ValueError: no order 1"


# -- the API ----------------------------------------------------------------------------------


def test_the_apis_context_sends_the_flag_in_the_anthropic_and_langchain_shapes(api, user) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation()
    Conversation.objects.filter(pk=conv.pk).update(owner=user)
    url = f"/api/conversations/{conv.uuid}/context/?max_tokens=5000&message_format="
    sent = api.get(url + "anthropic").json()["messages"]
    results = [
        b for m in sent if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"
    ]
    assert [b.get("is_error") for b in results] == [True, None, None]
    pytest.importorskip("langchain_core")
    tools = [m["data"] for m in api.get(url + "langchain").json()["messages"] if m["type"] == "tool"]
    assert [t["status"] for t in tools] == ["error", "success", "success"]


def test_the_apis_native_context_says_which_tool_results_failed(api, user, client) -> None:  # type: ignore[no-untyped-def]
    """The native shape carried neither the flag nor the metadata holding it: a client that
    sends the window on itself (its own provider code, an analytics view) saw every failed
    call as a success, while the provider shapes said otherwise."""
    conv = _conversation()
    Conversation.objects.filter(pk=conv.pk).update(owner=user)
    sent = api.get(f"/api/conversations/{conv.uuid}/context/?max_tokens=5000").json()["messages"]
    assert [(m["tool_call_id"], m["is_error"]) for m in sent if m["role"] == "tool"] == [
        ("c1", True),
        ("c2", False),
        ("c3", False),
    ]
    # a tool result's flag only (seq 9 is a human row that carries the key in storage)
    assert all("is_error" not in m for m in sent if m["role"] != "tool")
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    context = schema["paths"]["/api/conversations/{uuid}/context/"]["get"]["responses"]["200"]
    ref = context["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    items = schema["components"]["schemas"][ref]["properties"]["messages"]["items"]
    assert items["properties"]["is_error"]["type"] == "boolean"


def test_a_recorded_calls_native_window_says_which_tool_results_failed(api, user) -> None:  # type: ignore[no-untyped-def]
    llm = ScriptedChatModel(
        [_calls(("t1", "lookup", {"order_id": 1}), ("t2", "lookup", {"order_id": 2})), "ok"]
    )
    agent = Agent(llm=llm)
    conv = agent.start_conversation(owner=user)
    agent.run(conv, "Orders 1 and 2?")
    second = ModelCall.objects.filter(conversation=conv, kind="chat").order_by("id").last()
    window = api.get(f"/api/conversations/{conv.uuid}/model-calls/{second.uuid}/window/").json()
    assert [(m["tool_call_id"], m["is_error"]) for m in window["messages"] if m["role"] == "tool"] == [
        ("t1", True),
        ("t2", False),
    ]


# -- PostgreSQL: the head functions and their migration --------------------------------------------

#: the migration that replaces the head functions, and the one before it
MIGRATION = "0037_window_head_tool_error_flag"
BEFORE = "0036_window_head_page_size_in_numeric"


def _source(key: tuple) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(%s)", [functions.signature(key)]
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres
def test_the_head_function_and_the_statement_as_text_carry_the_flag(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    conv = _conversation()
    for system_prompt in (None, "Be brief."):
        for cap in (None, 30):
            builder = ContextWindowBuilder(conv, system_prompt=system_prompt, max_tool_result_tokens=cap)
            builder.build(max_tokens=5000)  # the connection finds the function
            assert functions.known(connection.connection, (system_prompt is None, cap is not None))
            assert _metadata(builder.build(max_tokens=5000).messages) == EXPECTED
    monkeypatch.setattr(functions, "known", lambda raw, key: False)
    assert _metadata(ContextWindowBuilder(conv).build(max_tokens=5000).messages) == EXPECTED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_migration_replaces_the_head_functions_forward_and_back() -> None:
    migration = __import__(f"agentmemory.migrations.{MIGRATION}", fromlist=["STATEMENTS"])
    before = __import__(f"agentmemory.migrations.{BEFORE}", fromlist=["STATEMENTS"])
    try:
        call_command("migrate", "agentmemory", BEFORE, verbosity=0)
        for key in functions.VARIANTS:
            assert _source(key) == f" BEGIN RETURN QUERY {before.STATEMENTS[functions.code(key)]}; END "
        conv = _conversation()
        builder = ContextWindowBuilder(conv)
        builder.build(max_tokens=5000)
        # the function of 0036 reads the thinking blocks alone: the flag is lost there
        assert _metadata(builder.build(max_tokens=5000).messages)[3] == {}
        # (a later migration replaces the functions again: the text here is 0037's own)
        call_command("migrate", "agentmemory", MIGRATION, verbosity=0)
        for key in functions.VARIANTS:
            assert _source(key) == f" BEGIN RETURN QUERY {migration.STATEMENTS[functions.code(key)]}; END "
        conv = _conversation()
        builder = ContextWindowBuilder(conv)
        builder.build(max_tokens=5000)
        assert _metadata(builder.build(max_tokens=5000).messages) == EXPECTED
    finally:
        call_command("migrate", "agentmemory", verbosity=0)
    for key in functions.VARIANTS:
        assert _source(key) == f" BEGIN RETURN QUERY {function_sql.body('default', key)}; END "
    conv = _conversation()
    builder = ContextWindowBuilder(conv)
    builder.build(max_tokens=5000)
    assert _metadata(builder.build(max_tokens=5000).messages) == EXPECTED


def test_the_admin_context_and_window_pages_mark_a_result_sent_as_failed(admin_client) -> None:  # type: ignore[no-untyped-def]
    # The transcript showed an "error" badge, but the two pages that say what the model was
    # (or would be) sent showed the failed result like any other.
    from django.urls import reverse

    llm = ScriptedChatModel(
        [_calls(("t1", "lookup", {"order_id": 1}), ("t2", "lookup", {"order_id": 2})), "Done."]
    )
    agent = Agent(llm=llm)
    conv = agent.start_conversation()
    agent.run(conv, "Orders 1 and 2?")
    badge = '<span class="am-badge am-badge-error"'
    record = ModelCall.objects.filter(conversation=conv, kind="chat").order_by("id").last()
    window_page = admin_client.get(
        reverse("admin:agentmemory_modelcall_window", args=[record.pk])
    ).content.decode()
    context_page = admin_client.get(
        reverse("admin:agentmemory_conversation_context", args=[conv.pk])
    ).content.decode()
    for page in (window_page, context_page):
        assert page.count(badge) == 1  # t1 failed; t2 worked
        marked = page[: page.index(badge)]
        assert marked.rindex("<code>t1</code>") > marked.rfind("<code>t2</code>")
