"""selectools' summarize-on-trim (seed 000, "Summarize-on-Trim"): the seed's configuration block
with only the import line changed, run against the fake OpenAI server on 127.0.0.1. Messages
the memory's window pushes out are summarised by the summarize provider and model, the summary
is sent as ``[Conversation Summary]`` on the following calls and survives ``to_dict`` /
``from_dict``; a summariser that fails never fails the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# the seed's import, changed: from selectools import Agent, AgentConfig, ConversationMemory
from agentmemory.compat.selectools import (
    Agent,
    AgentConfig,
    ConversationMemory,
    LocalProvider,
    Message,
    OpenAIProvider,
    Role,
)
from agentmemory.conf import get_token_counter
from agentmemory.exceptions import PermanentLLMError
from agentmemory.llm.fake import ScriptedChatModel
from tests.fake_openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> OpenAIProvider:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return OpenAIProvider()


def lookup_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order's number.
    """
    return f"Order {order_id} has shipped."


def system_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "system"]


def test_the_seeds_configuration_summarises_what_the_window_trims(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    server = fake_openai
    # the seed's block, with a window of four messages so that the third run trims
    memory = ConversationMemory(max_messages=4)
    agent = Agent(
        tools=[lookup_order],
        provider=provider,
        memory=memory,
        config=AgentConfig(
            summarize_on_trim=True,
            summarize_provider=provider,  # Provider for summarization
            summarize_model="gpt-4o-mini",  # Use a cheap/fast model
            summarize_max_tokens=150,  # Max tokens for the summary
        ),
    )
    server.enqueue_text("Hello Alice.")
    server.enqueue_text("Noted: order 1042.")
    server.enqueue_text("Alice introduced herself.")  # the summary of the first trim
    server.enqueue_text("Order 1042 is on its way.")
    server.enqueue_text("Alice asked about order 1042.")  # the summary of the second trim

    agent.run([Message(role=Role.USER, content="My name is Alice.")])
    agent.run([Message(role=Role.USER, content="I ordered 1042.")])
    assert memory.summary is None and memory._last_trimmed == []
    result = agent.run([Message(role=Role.USER, content="Where is it?")])

    assert result.content == "Order 1042 is on its way."
    first_summary, answer, second_summary = server.requests[2:]
    # asked of the summarize model, with the trimmed message and a bound on its length
    assert first_summary["model"] == "gpt-4o-mini" and "tools" not in first_summary
    prompt = first_summary["messages"][-1]["content"]
    assert "USER: My name is Alice." in prompt and "150 tokens" in prompt
    assert "I ordered 1042." not in prompt  # still in the window
    # the run's own call goes to the agent's model and carries the summary
    assert answer["model"] == "gpt-5-mini"
    assert "[Conversation Summary] Alice introduced herself." in system_texts(answer)
    # the answer pushed "Hello Alice." out: summarised after the run, added to the summary
    assert "ASSISTANT: Hello Alice." in second_summary["messages"][-1]["content"]
    assert memory.summary == "Alice introduced herself. Alice asked about order 1042."

    # "Summary Persistence": to_dict / from_dict keep it
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(memory.to_dict()))
    restored = ConversationMemory.from_dict(json.loads(path.read_text()))
    assert restored.summary == memory.summary


def test_without_summarize_on_trim_nothing_is_summarised(
    provider: OpenAIProvider, fake_openai: FakeOpenAIServer
) -> None:
    memory = ConversationMemory(max_messages=2)
    agent = Agent(tools=[], provider=provider, memory=memory)
    for text in ("one", "two"):
        fake_openai.enqueue_text(f"answer {text}")
        agent.run(text)
    assert len(fake_openai.requests) == 2 and memory.summary is None


def test_a_failing_summariser_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    memory = ConversationMemory(max_messages=1)
    summariser = ScriptedChatModel([PermanentLLMError("the summary model is down"), "The user said one."])
    agent = Agent(
        provider=LocalProvider(),
        memory=memory,
        config=AgentConfig(summarize_on_trim=True, summarize_provider=summariser),
    )

    result = agent.run("one")  # the answer pushes "one" out; its summary fails

    assert result.content.endswith("one") and memory.summary is None
    assert "summarize-on-trim" in caplog.text and "the summary model is down" in caplog.text
    agent.run("two")  # pushes the first answer out, then "two"
    assert memory.summary == "The user said one."
    assert len(memory.conversation.messages.all()) == 4  # every message stays stored


def test_a_summary_longer_than_summarize_max_tokens_is_cut_to_it() -> None:
    memory = ConversationMemory(max_messages=1)
    long_reply = " ".join(f"word{i}" for i in range(400))
    agent = Agent(
        provider=LocalProvider(),
        memory=memory,
        config=AgentConfig(
            summarize_on_trim=True,
            summarize_provider=ScriptedChatModel([long_reply]),
            summarize_max_tokens=20,
        ),
    )
    agent.run("one")
    assert memory.summary is not None and long_reply.startswith(memory.summary)
    assert 0 < get_token_counter().count_text(memory.summary) <= 20


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (1.5, TypeError), ("150", TypeError)])
def test_a_summarize_max_tokens_that_is_not_a_positive_whole_number_is_refused(
    value: Any, error: type
) -> None:
    with pytest.raises(error, match="summarize_max_tokens"):
        Agent(
            provider=LocalProvider(),
            memory=ConversationMemory(),
            config=AgentConfig(summarize_on_trim=True, summarize_max_tokens=value),
        )
