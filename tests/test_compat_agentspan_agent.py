"""agentspan's ``Agent``, ``AgentRuntime``, ``tool`` and ``SemanticMemory`` (seed 003) from
``agentmemory.compat.agentspan``: the seed's code blocks with only the import lines changed,
``"openai/gpt-4o"`` answered by the fake OpenAI server on 127.0.0.1 (reached through
``OPENAI_BASE_URL``, as the OpenAI SDK reads it)."""

from __future__ import annotations

from typing import Any

import pytest

# the seed's imports, changed:
#   from agentspan.agents import Agent, AgentRuntime, ConversationMemory, tool
#   from agentspan.agents.semantic_memory import SemanticMemory, MemoryStore, MemoryEntry
from agentmemory.compat.agentspan import (
    Agent,
    AgentRuntime,
    ConversationMemory,
    MemoryEntry,
    MemoryStore,
    SemanticMemory,
    tool,
)
from agentmemory.models import Fact
from tests.factories import UserFactory
from tests.fake_openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def openai_env(fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAIServer:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return fake_openai


def test_conversation_memory_block(openai_env: FakeOpenAIServer, capsys: Any) -> None:
    openai_env.enqueue_text("Nice to meet you, Alice.", prompt_tokens=10, completion_tokens=6)
    openai_env.enqueue_text("Your name is Alice.")

    memory = ConversationMemory(max_messages=100)

    agent = Agent(
        name="assistant",
        model="openai/gpt-4o",
        instructions="You are a helpful assistant.",
        memory=memory,
    )

    with AgentRuntime() as runtime:
        result = runtime.run(agent, "My name is Alice.")
        memory.add_user_message("My name is Alice.")
        memory.add_assistant_message(result.output["result"])

        result2 = runtime.run(agent, "What's my name?")
        result2.print_result()  # "Your name is Alice."

    out = capsys.readouterr().out
    assert "\nYour name is Alice.\n" in out
    assert "Finish reason: stop" in out and f"Execution ID: {result2.execution_id}" in out
    assert result.output == {"result": "Nice to meet you, Alice."}
    assert (result.status, result.is_success, result.finish_reason) == ("COMPLETED", True, "stop")
    assert (result.token_usage.prompt_tokens, result.token_usage.total_tokens) == (10, 16)
    first, second = openai_env.requests
    assert first["model"] == "gpt-4o"
    assert first["messages"] == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "My name is Alice."},
    ]
    # the memory's messages are prepended to the second call, as agentspan does
    assert second["messages"][1:] == [
        {"role": "user", "content": "My name is Alice."},
        {"role": "assistant", "content": "Nice to meet you, Alice."},
        {"role": "user", "content": "What's my name?"},
    ]
    assert result2.messages[-1] == {"role": "assistant", "message": "Your name is Alice."}
    assert len(memory.messages) == 2  # the runtime does not add to the memory: the example does


def test_semantic_memory_block() -> None:
    memory = SemanticMemory(max_results=3)

    memory.add("Customer prefers email communication.")
    memory.add("Account is on the Enterprise plan since March 2021.")
    memory.add("Last issue: billing discrepancy on invoice #1042.")

    context = memory.get_context("What plan am I on?")
    # "Relevant context from memory:\n  1. Account is on the Enterprise plan..."

    assert context.startswith("Relevant context from memory:\n  1. Account is on the Enterprise plan")
    assert Fact.objects.filter(namespace="agentspan", kind="semantic").count() == 3
    # the entries outlive the object: another SemanticMemory of the same namespace sees them
    assert len(SemanticMemory().list_all()) == 3
    assert SemanticMemory(namespace="other").list_all() == []


def test_expose_as_a_tool_block(openai_env: FakeOpenAIServer, capsys: Any) -> None:
    openai_env.enqueue_tool_call("get_context", {"query": "Python JavaScript"}, call_id="call_ctx")
    openai_env.enqueue_text("Use Python.")

    memory = SemanticMemory(max_results=3)
    memory.add("User prefers Python over JavaScript")
    memory.add("User is a senior engineer with 10 years experience")

    @tool
    def get_context(query: str) -> str:
        """Retrieve relevant context from memory."""
        return memory.get_context(query)

    agent = Agent(
        name="assistant",
        model="openai/gpt-4o",
        tools=[get_context],
    )

    with AgentRuntime() as runtime:
        result = runtime.run(agent, "What language should I use?")
        result.print_result()

    assert "\nUse Python.\n" in capsys.readouterr().out
    declared = openai_env.requests[0]["tools"][0]["function"]
    assert declared == {
        "name": "get_context",
        "description": "Retrieve relevant context from memory.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,  # our Tool's declaration: other arguments are refused
        },
    }
    [call] = result.tool_calls
    assert call["name"] == "get_context" and call["input"] == {"query": "Python JavaScript"}
    assert call["output"].startswith(
        "Relevant context from memory:\n  1. User prefers Python over JavaScript"
    )
    assert [m["role"] for m in result.messages] == ["user", "tool_call", "tool", "assistant"]
    # without instructions no system message is sent
    assert openai_env.requests[0]["messages"] == [{"role": "user", "content": "What language should I use?"}]


def test_a_tool_argument_of_the_wrong_type_is_answered_with_an_error_and_the_tool_not_run(
    openai_env: FakeOpenAIServer,
) -> None:
    openai_env.enqueue_tool_call("lookup_order", {"order_id": 1001}, call_id="call_1")
    openai_env.enqueue_text("Which order number?")
    ran = []

    def lookup_order(order_id: str) -> str:
        """Look up an order by its number."""
        ran.append(order_id)
        return "shipped"

    with AgentRuntime() as runtime:
        result = runtime.run(Agent(name="a", model="openai/gpt-4o", tools=[lookup_order]), "Where is it?")

    assert ran == []
    [call] = result.tool_calls
    assert call["output"] == "Error: invalid arguments for lookup_order: order_id must be a string, not 1001"
    assert openai_env.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": call["output"],
    }
    assert result.output == {"result": "Which order number?"}


def test_a_tool_our_tool_cannot_describe_or_run_is_refused_when_the_agent_is_made() -> None:
    def scale(factor: complex) -> str:
        """Scale."""
        return str(factor)

    def recall(context, query: str) -> str:  # type: ignore[no-untyped-def]
        """Recall."""
        return query

    def search(query: str) -> str:
        """Search."""
        return query

    with pytest.raises(TypeError, match="no JSON Schema"):
        Agent(name="a", model="openai/gpt-4o", tools=[scale])
    with pytest.raises(TypeError, match="ToolContext"):
        Agent(name="a", model="openai/gpt-4o", tools=[recall])
    with pytest.raises(TypeError, match="not int"):
        Agent(name="a", model="openai/gpt-4o", tools=[3])
    with pytest.raises(ValueError, match="share a name"):
        Agent(name="a", model="openai/gpt-4o", tools=[search, tool(search)])


def test_inject_into_system_prompt_block(openai_env: FakeOpenAIServer) -> None:
    openai_env.enqueue_text("You are on the Enterprise plan.")
    memory = SemanticMemory(max_results=3)
    memory.add("Account is on the Enterprise plan since March 2021.")

    def build_instructions() -> str:
        context = memory.get_context("Enterprise plan")
        return f"You are a support agent.\n\n{context}"

    agent = Agent(
        name="support",
        model="openai/gpt-4o",
        instructions=build_instructions,  # callable
    )

    with AgentRuntime() as runtime:
        result = runtime.run(agent, "Which plan?")
    assert result.output["result"] == "You are on the Enterprise plan."
    system = openai_env.requests[0]["messages"][0]
    assert system == {
        "role": "system",
        "content": "You are a support agent.\n\nRelevant context from memory:\n"
        "  1. Account is on the Enterprise plan since March 2021.",
    }


def test_storage_backends_block_with_a_store_of_yours() -> None:
    # the seed's PineconeStore needs a Pinecone index; a store of the same shape over a dict
    class DictStore(MemoryStore):
        def __init__(self) -> None:
            self.entries: dict[str, MemoryEntry] = {}

        def add(self, entry: MemoryEntry) -> str:
            self.entries[entry.id] = entry
            return entry.id

        def search(self, query: str, top_k: int = 5) -> list[MemoryEntry]:
            words = set(query.lower().split())
            hits = [e for e in self.entries.values() if words & set(e.content.lower().split())]
            return hits[:top_k]

        def delete(self, memory_id: str) -> bool:
            return self.entries.pop(memory_id, None) is not None

        def clear(self) -> None:
            self.entries.clear()

        def list_all(self) -> list[MemoryEntry]:
            return list(self.entries.values())

    memory = SemanticMemory(store=DictStore())
    memory.add("likes tea")
    assert memory.get_context("tea") == "Relevant context from memory:\n  1. likes tea"
    assert Fact.objects.count() == 0


def test_owner_keeps_semantic_entries_apart() -> None:
    user = UserFactory()
    SemanticMemory(owner=user).add("Mine only")
    assert SemanticMemory().list_all() == []
    assert [e.content for e in SemanticMemory(owner=user).list_all()] == ["Mine only"]


def test_a_failed_model_call_is_a_failed_result(openai_env: FakeOpenAIServer, capsys: Any) -> None:
    openai_env.enqueue_error(400, "bad request", type="invalid_request_error")
    with AgentRuntime() as runtime:
        result = runtime.run(Agent(name="a", model="openai/gpt-4o"), "hi")
    assert (result.status, result.is_failed, result.finish_reason) == ("FAILED", True, "error")
    assert "bad request" in result.error
    result.print_result()
    assert "ERROR: " in capsys.readouterr().out


def test_model_strings_and_memory_types() -> None:
    # refused when the agent is made, as agentspan's own Agent does, not at its first run
    with pytest.raises(ValueError, match="provider"):
        Agent(name="a", model="gpt-4o")
    with pytest.raises(ValueError, match="not supported"):
        Agent(name="a", model="gemini/flash")
    for model in (None, 42):
        with pytest.raises(TypeError, match="model must be a 'provider/name' string or a ChatModel"):
            Agent(name="a", model=model)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SemanticMemory"):
        Agent(name="a", model="openai/gpt-4o", memory=SemanticMemory())


def test_conversation_memory_arguments_of_the_wrong_type_say_so() -> None:
    with pytest.raises(TypeError, match="max_messages must be a whole number, not str"):
        ConversationMemory(max_messages="3")  # type: ignore[arg-type]
    memory = ConversationMemory()
    with pytest.raises(TypeError, match="arguments must be a mapping"):
        memory.add_tool_call("lookup", "notadict")  # type: ignore[arg-type]
    assert memory.messages == []


def test_agentspan_arguments_not_provided_are_refused() -> None:
    with pytest.raises(TypeError, match="output_type"):
        Agent(name="a", model="openai/gpt-4o", output_type=dict)  # type: ignore[call-arg]
