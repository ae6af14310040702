"""agentspan's ``ConversationMemory`` (seed 003) from ``agentmemory.compat.agentspan``: the
seed's example with the import line swapped (its ``Agent`` and ``AgentRuntime`` are offline
stand-ins here; the compat ones, over a model, are run in ``test_compat_agentspan_agent.py``),
and the seed's trimming rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.compat.agentspan import ConversationMemory
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation

pytestmark = pytest.mark.django_db


# ------------------------------------------------------------------ stand-ins for agentspan's
# ``Agent`` and ``AgentRuntime``: the runtime prepends ``memory.messages`` to the prompt, as the
# seed says ("Messages are prepended to the LLM's message list at compile time").


@dataclass
class Agent:
    name: str
    model: str
    instructions: str = ""
    memory: ConversationMemory | None = None


@dataclass
class Result:
    output: dict[str, Any]

    def print_result(self) -> None:
        print(self.output["result"])


class AgentRuntime:
    def __enter__(self) -> AgentRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, agent: Agent, prompt: str) -> Result:
        messages = (agent.memory.messages if agent.memory else []) + [{"role": "user", "message": prompt}]
        name = next(
            (
                m["message"].removeprefix("My name is ").rstrip(".")
                for m in messages
                if m["message"].startswith("My name is ")
            ),
            None,
        )
        answer = f"Your name is {name}." if name and prompt.startswith("What") else "Nice to meet you."
        return Result(output={"result": answer})


def test_seed_example(capsys: Any) -> None:
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

    assert capsys.readouterr().out == "Your name is Alice.\n"
    assert memory.messages == [
        {"role": "user", "message": "My name is Alice."},
        {"role": "assistant", "message": "Nice to meet you."},
    ]
    stored = PersistentChatHistory(memory.conversation).get_messages()
    assert [(m.role.value, m.text) for m in stored] == [
        ("human", "My name is Alice."),
        ("ai", "Nice to meet you."),
    ]


def texts(memory: ConversationMemory) -> list[str]:
    return [m["message"] for m in memory.messages]


def test_trimming_keeps_system_messages_in_place_and_the_newest_others() -> None:
    memory = ConversationMemory(max_messages=4)
    memory.add_system_message("S1")
    memory.add_user_message("u1")
    memory.add_assistant_message("a1")
    memory.add_system_message("S2")
    memory.add_user_message("u2")
    memory.add_assistant_message("a2")
    # budget: 4 - 2 system messages = the 2 newest others
    assert texts(memory) == ["S1", "S2", "u2", "a2"]
    memory.add_user_message("u3")
    assert texts(memory) == ["S1", "S2", "a2", "u3"]
    assert len(memory) == 4


def test_when_system_messages_alone_reach_the_limit_only_the_newest_of_them_are_kept() -> None:
    memory = ConversationMemory(max_messages=2)
    for text in ("S1", "u1", "S2", "S3"):
        (memory.add_system_message if text.startswith("S") else memory.add_user_message)(text)
    assert texts(memory) == ["S2", "S3"]


def test_without_max_messages_nothing_is_trimmed() -> None:
    memory = ConversationMemory()
    for i in range(30):
        memory.add_user_message(str(i))
    assert len(memory.messages) == 30


def test_tool_calls_and_results_in_agentspan_shape() -> None:
    memory = ConversationMemory()
    memory.add_user_message("weather?")
    memory.add_tool_call("get_weather", {"city": "Paris"})
    memory.add_tool_result("get_weather", {"temp": 21})
    assert memory.to_chat_messages()[1:] == [
        {
            "role": "tool_call",
            "message": "",
            "tool_calls": [
                {"name": "get_weather", "taskReferenceName": "get_weather_ref", "input": {"city": "Paris"}}
            ],
        },
        {
            "role": "tool",
            "message": "{'temp': 21}",
            "toolCallId": "get_weather_ref",
            "taskReferenceName": "get_weather_ref",
        },
    ]
    stored = PersistentChatHistory(memory.conversation).get_messages()
    assert stored[2].tool_call_id == stored[1].tool_calls[0].id


def test_initial_messages_clear_and_attaching(conversation: Conversation) -> None:
    PersistentChatHistory(conversation).add_message(ChatMessage.human("already there"))
    memory = ConversationMemory([{"role": "assistant", "message": "hello"}], conversation=conversation)
    assert texts(memory) == ["already there", "hello"]
    memory.clear()
    assert memory.messages == []
    assert PersistentChatHistory(conversation).get_messages() == []


def test_nothing_is_stored_before_the_first_message() -> None:
    memory = ConversationMemory(max_messages=10)
    assert memory.messages == []
    assert Conversation.objects.count() == 0


def seed_trim(messages: list[dict[str, Any]], max_messages: int) -> list[dict[str, Any]]:
    """The seed's three trimming rules, applied after each add."""
    if len(messages) <= max_messages:
        return messages
    system = [m for m in messages if m["role"] == "system"]
    if len(system) >= max_messages:
        return system[-max_messages:]
    budget = max_messages - len(system)
    others = [i for i, m in enumerate(messages) if m["role"] != "system"][-budget:]
    return [m for i, m in enumerate(messages) if m["role"] == "system" or i in others]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    roles=st.lists(st.sampled_from(["user", "assistant", "system"]), max_size=14),
    max_messages=st.integers(1, 6),
)
def test_the_trim_is_the_seeds_after_every_add(db: Any, roles: list[str], max_messages: int) -> None:
    memory = ConversationMemory(max_messages=max_messages)
    expected: list[dict[str, Any]] = []
    add = {
        "user": memory.add_user_message,
        "assistant": memory.add_assistant_message,
        "system": memory.add_system_message,
    }
    for i, role in enumerate(roles):
        add[role](f"{role} {i}")
        expected = seed_trim([*expected, {"role": role, "message": f"{role} {i}"}], max_messages)
        assert memory.messages == expected


def test_a_negative_max_messages_is_refused() -> None:
    """It returned no message at all."""
    with pytest.raises(ValueError, match="max_messages"):
        ConversationMemory(max_messages=-2)


@pytest.mark.parametrize(
    "add",
    [
        lambda m: m.add_user_message(None),
        lambda m: m.add_user_message(5),
        lambda m: m.add_tool_call("t", {"a": float("nan")}),
    ],
    ids=["none", "int", "nan-argument"],
)
def test_a_refused_first_add_leaves_no_conversation(add: Any) -> None:
    from agentmemory.exceptions import InvalidMessageError

    memory = ConversationMemory()
    with pytest.raises(InvalidMessageError):
        add(memory)
    assert Conversation.objects.count() == 0
    assert memory.messages == []
