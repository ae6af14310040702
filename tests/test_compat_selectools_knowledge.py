"""selectools' knowledge memory and agent (seed 001) from ``agentmemory.compat.selectools``: the
seed's code blocks with only the import lines changed, the models answered by the fake
OpenAI server on 127.0.0.1 (``OpenAIProvider()`` reads ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` as the OpenAI SDK does) or by ``LocalProvider``, and the seed's own test
functions verbatim."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

# the seed's imports, changed:
#   from selectools import Agent, AgentConfig, OpenAIProvider, ConversationMemory, Message, Role
#   from selectools.knowledge import KnowledgeMemory
from agentmemory.compat.owners import COMPAT_USERNAME, namespace_for_dir
from agentmemory.compat.selectools import (
    Agent,
    AgentConfig,
    ConversationMemory,
    KnowledgeMemory,
    LocalProvider,
    Message,
    OpenAIProvider,
    Role,
)
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Fact
from tests.factories import UserFactory
from tests.fake_openai_server import FakeOpenAIServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def openai_env(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> FakeOpenAIServer:
    """``OpenAIProvider()`` pointed at the fake server, and the working directory a fresh
    temporary one (the seed's ``"./agent_memory"`` is relative)."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.chdir(tmp_path)
    return fake_openai


def system_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "system"]


# ----------------------------------------------------------------------------- Quick Start


def test_quick_start_remembers_through_the_tool_and_a_new_agent_knows_after_a_restart(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    server = openai_env
    server.enqueue_tool_calls(
        [
            (
                "remember",
                {"content": "Preferred language: Python", "category": "preferences", "persistent": True},
            ),
            ("remember", {"content": "Works at Acme Corp", "category": "personal", "persistent": True}),
        ]
    )
    server.enqueue_text("Saved: you prefer Python and work at Acme Corp.")
    server.enqueue_text("You prefer Python.")

    knowledge = KnowledgeMemory(storage_dir="./agent_memory")

    agent = Agent(
        tools=[],
        provider=OpenAIProvider(),
        memory=ConversationMemory(max_messages=50),
        config=AgentConfig(knowledge_memory=knowledge),
    )

    # The agent can now use the auto-registered "remember" tool
    result = agent.run(
        [
            Message(
                role=Role.USER,
                content="Remember that my preferred language is Python and I work at Acme Corp.",
            )
        ]
    )

    # Later (even after restart):
    knowledge2 = KnowledgeMemory(storage_dir="./agent_memory")
    agent2 = Agent(
        tools=[],
        provider=OpenAIProvider(),
        memory=ConversationMemory(),
        config=AgentConfig(knowledge_memory=knowledge2),
    )

    result = agent2.run([Message(role=Role.USER, content="What programming language do I prefer?")])
    # Agent knows: Python (loaded from persistent memory)

    assert result.content == "You prefer Python."
    assert (result.role, result.iterations, result.tool_calls) == (Role.ASSISTANT, 1, [])
    first, answer, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["remember"]
    assert [m["role"] for m in answer["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert (
        answer["messages"][3]["content"] == "Remembered (preferences, persistent): Preferred language: Python"
    )
    # the second agent's model is sent what the first one's tool stored
    [_, block] = system_texts(second)
    assert block == (
        "[Long-term Memory]\n## preferences\n- Preferred language: Python\n\n"
        "## personal\n- Works at Acme Corp"
    )
    assert knowledge2.get_persistent_facts() == {
        "preferences": ["Preferred language: Python"],
        "personal": ["Works at Acme Corp"],
    }
    # in the database, under the directory's namespace, and no file is written
    assert set(Fact.objects.values_list("namespace", flat=True)) == {
        "selectools:" + str(tmp_path.resolve() / "agent_memory")
    }
    assert list(tmp_path.iterdir()) == []
    # the first agent's conversation memory holds the whole run, tool exchange included
    stored = PersistentChatHistory(agent.memory.conversation).get_messages()
    assert [m.role.value for m in stored] == ["human", "ai", "tool", "tool", "ai"]


def test_the_knowledge_block_and_the_summary_go_first_as_system_messages(
    openai_env: FakeOpenAIServer,
) -> None:
    openai_env.enqueue_text("ok")
    knowledge = KnowledgeMemory(storage_dir="./kb")
    knowledge.remember("Meeting at 3pm", category="context")
    memory = ConversationMemory(max_messages=2)
    memory.add(Message(role=Role.USER, content="earlier question"))
    memory.add(Message(role=Role.ASSISTANT, content="earlier answer"))
    memory.summary = "We talked before."
    agent = Agent(
        tools=[],
        provider=OpenAIProvider(),
        memory=memory,
        config=AgentConfig(knowledge_memory=knowledge, system_prompt="Be brief.", model="gpt-test"),
    )
    agent.run("next question")  # a text is one user message
    [body] = openai_env.requests
    assert body["model"] == "gpt-test"
    roles = [m["role"] for m in body["messages"]]
    texts = [m["content"] for m in body["messages"]]
    assert roles == ["system", "system", "system", "user", "assistant", "user"]
    assert texts[0] == "Be brief."
    assert texts[1].startswith("[Recent Memory]\n- [") and texts[1].endswith("(context) Meeting at 3pm")
    assert texts[2:] == [
        "[Conversation Summary] We talked before.",
        "earlier question",
        "earlier answer",
        "next question",
    ]
    # the window then holds the newest two of the four stored messages
    assert [m.content for m in memory.get_history()] == ["next question", "ok"]


def test_a_tool_of_yours_beside_remember_and_its_result_in_the_agent_result(
    openai_env: FakeOpenAIServer,
) -> None:
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return f"Sunny in {city}"

    openai_env.enqueue_tool_call("get_weather", {"city": "Paris"}, call_id="call_w")
    openai_env.enqueue_tool_call("nope", {}, call_id="call_x")
    openai_env.enqueue_text("It is sunny in Paris.")
    agent = Agent(
        tools=[get_weather],
        provider=OpenAIProvider(),
        config=AgentConfig(knowledge_memory=KnowledgeMemory(storage_dir="./kb")),
    )
    assert [t.name for t in agent.tools] == ["get_weather", "remember"]
    result = agent.run([Message(role=Role.USER, content="Weather in Paris?")])
    assert result.content == "It is sunny in Paris."
    assert (result.tool_name, result.tool_args, result.iterations) == ("nope", {}, 3)
    assert [(c.tool_name, c.parameters, c.id) for c in result.tool_calls] == [
        ("get_weather", {"city": "Paris"}, "call_w"),
        ("nope", {}, "call_x"),
    ]
    tool_results = [m for m in openai_env.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_results[0]["content"] == "Sunny in Paris"
    assert tool_results[1]["content"].startswith("Error: unknown tool 'nope'")
    schema = openai_env.requests[0]["tools"][0]["function"]
    assert schema["parameters"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,  # our Tool's declaration: other arguments are refused
    }


def test_max_iterations_stops_a_model_that_keeps_calling_tools(openai_env: FakeOpenAIServer) -> None:
    for _ in range(2):
        openai_env.enqueue_tool_call("remember", {"content": "x"})
    agent = Agent(
        provider=OpenAIProvider(),
        config=AgentConfig(knowledge_memory=KnowledgeMemory(storage_dir="./kb"), max_iterations=2),
    )
    result = agent.run("loop")
    assert result.iterations == 2
    assert result.content == "Stopped after 2 iterations without a final answer."
    assert len(openai_env.requests) == 2


# ---------------------------------------------------------------- the remember() method and after


def test_remember_categories_context_and_inspection_blocks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    knowledge = KnowledgeMemory(storage_dir="./agent_memory")

    # Transient memory (daily log only)
    knowledge.remember(
        content="Currently debugging a timeout issue in the API",
        category="context",
        persistent=False,
    )

    # Persistent memory (daily log + MEMORY.md)
    knowledge.remember(
        content="Preferred editor: VS Code",
        category="preferences",
        persistent=True,
    )

    knowledge.remember("Name: Alice", category="personal", persistent=True)
    knowledge.remember("Prefers Python", category="preferences", persistent=True)
    knowledge.remember("Uses VS Code", category="preferences", persistent=True)

    context = knowledge.build_context()

    # View persistent facts
    facts = knowledge.get_persistent_facts()
    for category, entries in facts.items():
        print(f"\n{category}:")
        for entry in entries:
            print(f"  - {entry}")

    # View recent entries
    recent = knowledge.get_recent_entries(days=3, limit=20)
    for entry in recent:
        print(f"[{entry['timestamp']}] ({entry['category']}) {entry['content']}")

    assert context.startswith(
        "[Long-term Memory]\n## preferences\n- Preferred editor: VS Code\n- Prefers Python\n"
        "- Uses VS Code\n\n"
        "## personal\n- Name: Alice\n\n[Recent Memory]\n- ["
    )
    assert context.endswith("(context) Currently debugging a timeout issue in the API")
    out = capsys.readouterr().out
    assert "\npreferences:\n  - Preferred editor: VS Code\n  - Prefers Python\n  - Uses VS Code\n" in out
    assert "\npersonal:\n  - Name: Alice\n" in out
    # every entry is in the daily log, newest first, as the seed writes each one there
    assert [line.split(") ", 1)[1] for line in out.splitlines() if line.startswith("[")] == [
        "Uses VS Code",
        "Prefers Python",
        "Name: Alice",
        "Preferred editor: VS Code",
        "Currently debugging a timeout issue in the API",
    ]


def test_log_pruning_block(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    knowledge = KnowledgeMemory(
        storage_dir="./agent_memory",
        max_log_days=30,  # auto-prune logs older than 30 days
    )
    knowledge.remember("Kept", category="technical", persistent=True)
    old = knowledge.remember("Old note", category="context")
    assert old.startswith("Remembered")
    Fact.objects.filter(content="Old note").update(
        created_at=Fact.objects.get(content="Old note").created_at.replace(year=2000)
    )

    # Manual pruning
    deleted = knowledge.prune_logs()
    print(f"Pruned {deleted} old log files")

    # Override max_days for a one-time cleanup
    deleted = knowledge.prune_logs(max_days=7)

    assert capsys.readouterr().out == "Pruned 1 old log files\n"
    assert deleted == 0
    assert knowledge.get_persistent_facts() == {"technical": ["Kept"]}


def test_best_practices_blocks(openai_env: FakeOpenAIServer) -> None:
    # 1. Choose Appropriate Retention
    # Short-lived assistant (customer support)
    knowledge = KnowledgeMemory(max_log_days=7)
    # Long-running personal assistant
    knowledge = KnowledgeMemory(max_log_days=90)
    assert (knowledge.storage_dir, knowledge.max_log_days) == ("./agent_memory", 90)

    # 2./3. Categories and persistence
    knowledge.remember("Working on bug #1234 today", category="context")
    knowledge.remember("API key rotation policy: every 90 days", category="technical", persistent=True)
    assert knowledge.get_persistent_facts() == {"technical": ["API key rotation policy: every 90 days"]}

    # 5. Separate Storage Per User (``tools=[...]`` is the seed's placeholder: none here)
    def create_agent_for_user(user_id: str) -> Agent:
        return Agent(
            tools=[],
            provider=OpenAIProvider(),
            memory=ConversationMemory(),
            config=AgentConfig(
                knowledge_memory=KnowledgeMemory(
                    storage_dir=f"./memory/{user_id}",
                ),
            ),
        )

    alice, bob = create_agent_for_user("alice"), create_agent_for_user("bob")
    alice.config.knowledge_memory.remember("Name: Alice", category="personal", persistent=True)
    assert bob.config.knowledge_memory.get_persistent_facts() == {}
    assert create_agent_for_user("alice").config.knowledge_memory.get_persistent_facts() == {
        "personal": ["Name: Alice"]
    }


# ------------------------------------------------------------------ the mapping of storage_dir


def test_storage_dir_names_one_namespace_however_it_is_spelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    KnowledgeMemory(storage_dir="./mem").remember("Fact A", persistent=True)
    for spelling in ("mem", str(tmp_path / "mem"), "./x/../mem", tmp_path / "mem"):
        assert KnowledgeMemory(storage_dir=spelling).get_persistent_facts() == {"general": ["Fact A"]}
    assert KnowledgeMemory(storage_dir="./other").get_persistent_facts() == {}
    long_dir = "d" * 250
    assert namespace_for_dir(long_dir).startswith("selectools:sha256:")
    assert len(namespace_for_dir(long_dir)) <= 200
    # a file name that is not UTF-8, as os.fsdecode gives it (a lone surrogate)
    undecodable = os.fsdecode(b"./caf\xe9")
    KnowledgeMemory(storage_dir=undecodable).remember("Fact B", persistent=True)
    assert KnowledgeMemory(storage_dir=undecodable).get_persistent_facts() == {"general": ["Fact B"]}
    assert namespace_for_dir(undecodable).startswith("selectools:sha256:")


def test_without_owner_the_shared_compat_user_owns_the_facts_and_an_owner_keeps_them_apart(
    tmp_path: Path,
) -> None:
    shared = KnowledgeMemory(storage_dir=tmp_path)
    shared.remember("Shared fact", persistent=True)
    user = UserFactory()
    mine = KnowledgeMemory(storage_dir=tmp_path, owner=user)
    assert mine.get_persistent_facts() == {}
    mine.remember("My fact", persistent=True)
    assert shared.get_persistent_facts() == {"general": ["Shared fact"]}
    compat_user = get_user_model().objects.get(username=COMPAT_USERNAME)
    assert not compat_user.is_active and not compat_user.has_usable_password()
    assert sorted(Fact.objects.values_list("owner_id", "content")) == sorted(
        [(compat_user.pk, "Shared fact"), (user.pk, "My fact")]
    )
    KnowledgeMemory(storage_dir=tmp_path)  # the user is made once
    assert get_user_model().objects.filter(username=COMPAT_USERNAME).count() == 1
    shared.clear()
    assert mine.get_persistent_facts() == {"general": ["My fact"]}


def test_a_real_account_named_like_the_shared_owner_is_never_given_the_shared_memories(
    tmp_path: Path,
) -> None:
    # on a site with open sign-up anyone may register the name first: the shared facts must
    # not become readable by logging in as it
    squatter = get_user_model().objects.create_user(username=COMPAT_USERNAME, password="guess-me-not")
    with pytest.raises(PermissionError, match="can log in"):
        KnowledgeMemory(storage_dir=tmp_path).remember("Shared fact", persistent=True)
    squatter.is_active = False
    squatter.save()
    with pytest.raises(PermissionError):
        KnowledgeMemory(storage_dir=tmp_path)
    assert not Fact.objects.exists()
    squatter.set_unusable_password()
    squatter.save()
    KnowledgeMemory(storage_dir=tmp_path).remember("Shared fact", persistent=True)
    assert list(Fact.objects.values_list("owner_id", flat=True)) == [squatter.pk]


def test_local_provider_echoes_the_newest_user_message() -> None:
    agent = Agent(provider=LocalProvider(), memory=ConversationMemory())
    assert agent.run("hello").content == "[local provider: gpt-5-mini] hello"
    assert (
        agent.run([Message(role=Role.USER, content="again")]).content == "[local provider: gpt-5-mini] again"
    )
    assert [m.content for m in agent.memory.get_history()] == [
        "hello",
        "[local provider: gpt-5-mini] hello",
        "again",
        "[local provider: gpt-5-mini] again",
    ]


# ------------------------------------------------------------- the seed's test functions, verbatim


def test_remember_and_recall():
    with tempfile.TemporaryDirectory() as tmpdir:
        km = KnowledgeMemory(storage_dir=tmpdir)

        km.remember("Prefers Python", category="preferences", persistent=True)
        km.remember("Meeting at 3pm", category="context", persistent=False)

        context = km.build_context()
        assert "[Long-term Memory]" in context
        assert "Prefers Python" in context
        assert "[Recent Memory]" in context
        assert "Meeting at 3pm" in context


def test_persistent_facts_survive_clear_logs():
    with tempfile.TemporaryDirectory() as tmpdir:
        km = KnowledgeMemory(storage_dir=tmpdir)

        km.remember("Important fact", category="general", persistent=True)
        km.remember("Transient note", category="context", persistent=False)

        km.clear_logs()

        facts = km.get_persistent_facts()
        assert "Important fact" in facts.get("general", [])

        recent = km.get_recent_entries()
        assert len(recent) == 0


def test_memory_md_categories():
    with tempfile.TemporaryDirectory() as tmpdir:
        km = KnowledgeMemory(storage_dir=tmpdir)

        km.remember("Name: Alice", category="personal", persistent=True)
        km.remember("Likes Python", category="preferences", persistent=True)
        km.remember("Uses VS Code", category="preferences", persistent=True)

        facts = km.get_persistent_facts()
        assert len(facts["personal"]) == 1
        assert len(facts["preferences"]) == 2


def test_log_pruning():
    with tempfile.TemporaryDirectory() as tmpdir:
        km = KnowledgeMemory(storage_dir=tmpdir, max_log_days=0)

        km.remember("Old note", category="context")

        deleted = km.prune_logs()
        assert deleted >= 0  # may be 0 if same-day


def test_remember_tool_registration():
    with tempfile.TemporaryDirectory() as tmpdir:
        km = KnowledgeMemory(storage_dir=tmpdir)

        agent = Agent(
            tools=[],
            provider=LocalProvider(),
            memory=ConversationMemory(),
            config=AgentConfig(knowledge_memory=km),
        )

        tool_names = [t.name for t in agent.tools]
        assert "remember" in tool_names


def test_the_seed_tests_leave_no_file_behind(tmp_path: Path) -> None:
    km = KnowledgeMemory(storage_dir=tmp_path / "store")
    km.remember("Prefers Python", category="preferences", persistent=True)
    assert not os.path.exists(tmp_path / "store")


def test_a_run_stores_whatever_the_model_and_the_tools_send() -> None:
    """A NUL character or a lone surrogate in a tool's text or the model's reply, and tool
    call ids a server left empty or repeated, used to fail the run (``InvalidMessageError``)
    after the user's message was stored; they are made storable, as our agents make them:
    arguments that cannot be stored as they are kept as text and answered with an error."""
    from agentmemory.agents.tools import RAW_ARGUMENTS_KEY
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import ChatMessage

    def read_file(path: str) -> str:
        """Read a file."""
        return "PK\x00\x03 \ud800 header"

    calls = [
        {"id": "", "name": "read_file", "arguments": {"path": "a\x00.zip"}},
        {"id": "", "name": "read_file", "arguments": {"path": "b.zip"}},
    ]
    model = ScriptedChatModel([ChatMessage.ai(None, tool_calls=calls), ChatMessage.ai("done \x00")])
    memory = ConversationMemory()
    result = Agent(tools=[read_file], provider=model, memory=memory).run("Open the archives")

    assert result.content == "done \ufffd"
    stored = memory.get_history()
    assert [m.role for m in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.ASSISTANT]
    ids = [c.id for c in stored[1].tool_calls or ()]
    assert len(set(ids)) == 2 and all(ids) and [m.tool_call_id for m in stored[2:4]] == ids
    assert set(stored[1].tool_calls[0].parameters) == {RAW_ARGUMENTS_KEY}
    assert stored[2].content.startswith("Error")
    assert stored[3].content == "PK\ufffd\x03 \ufffd header"


def test_a_reply_with_more_tool_calls_than_allowed_runs_only_the_first(settings: Any) -> None:
    # as our agents do (MAX_TOOL_CALLS_PER_MESSAGE): a model must not make a run execute
    # an unbounded number of tools from one reply
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import ChatMessage

    settings.AGENTMEMORY = {**getattr(settings, "AGENTMEMORY", {}), "MAX_TOOL_CALLS_PER_MESSAGE": 2}
    ran: list[int] = []

    def step(n: int) -> str:
        """Take a step."""
        ran.append(n)
        return "ok"

    calls = [{"id": f"c{n}", "name": "step", "arguments": {"n": n}} for n in range(5)]
    model = ScriptedChatModel([ChatMessage.ai(None, tool_calls=calls), ChatMessage.ai("done")])
    memory = ConversationMemory()
    Agent(tools=[step], provider=model, memory=memory).run("Go")
    assert ran == [0, 1]
    assert [c.id for c in memory.get_history()[1].tool_calls or ()] == ["c0", "c1"]


def test_one_of_our_chat_models_and_our_tool_declarations_are_accepted() -> None:
    from agentmemory.agents import tool as our_tool
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import ChatMessage

    @our_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = ScriptedChatModel(
        [ChatMessage.ai(None, tool_calls=[{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]), "5"]
    )
    agent = Agent(tools=[add], provider=model)
    result = agent.run("2 + 3?")
    assert (result.content, result.tool_name, result.tool_args) == ("5", "add", {"a": 2, "b": 3})
    second_call_messages = model.calls[1][0]
    assert second_call_messages[-1].content == "5" and second_call_messages[-1].tool_call_id == "c1"
    assert model.calls[0][1] == [
        {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        }
    ]


def test_tools_are_ours_and_an_argument_of_the_wrong_type_is_an_error_result_the_model_reads() -> None:
    """The agent's tools are our ``Tool`` (a ``@tool`` and a plain function alike): the model's
    arguments are checked against the signature's types before the function runs, as in our
    agents, and a bad one is answered with an error text, so the model can call again."""
    from agentmemory.agents import Tool
    from agentmemory.compat.selectools import tool
    from agentmemory.llm.fake import ScriptedChatModel
    from agentmemory.messages import ChatMessage

    ran = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append((a, b))
        return a + b

    def shout(text: str) -> str:
        """Say it loud."""
        return text.upper()

    wrong = [{"id": "c1", "name": "add", "arguments": {"a": "2", "b": 3}}]  # a string for an int
    again = [{"id": "c2", "name": "add", "arguments": {"a": 2, "b": 3}}]
    model = ScriptedChatModel(
        [ChatMessage.ai(None, tool_calls=wrong), ChatMessage.ai(None, tool_calls=again), "5"]
    )
    memory = ConversationMemory()
    agent = Agent(tools=[add, shout], provider=model, memory=memory)
    assert [(type(t), t.name) for t in agent.tools] == [(Tool, "add"), (Tool, "shout")]

    result = agent.run("2 + 3?")

    assert (result.content, result.iterations) == ("5", 3)
    assert ran == [(2, 3)]  # the function never ran with the bad argument
    refused, answered = [m for m in memory.get_history() if m.role is Role.TOOL]
    assert refused.content == 'Error: invalid arguments for add: a must be an integer, not "2"'
    assert (refused.tool_call_id, refused.metadata) == ("c1", {})
    assert answered.content == "5"
    assert model.calls[1][0][-1].content == refused.content  # the model is sent the error


RESTART_SCRIPT = """
import django, json
django.setup()
from agentmemory.compat.selectools import (
    Agent, AgentConfig, OpenAIProvider, ConversationMemory, Message, Role,
)
from agentmemory.compat.selectools import KnowledgeMemory

# Later (even after restart):
knowledge2 = KnowledgeMemory(storage_dir="./agent_memory")
agent2 = Agent(
    tools=[],
    provider=OpenAIProvider(),
    memory=ConversationMemory(),
    config=AgentConfig(knowledge_memory=knowledge2),
)

result = agent2.run([
    Message(role=Role.USER, content="What programming language do I prefer?")
])
print(json.dumps({"content": result.content, "facts": knowledge2.get_persistent_facts()}))
"""


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_quick_start_second_half_in_a_new_process_reads_what_the_first_stored(
    openai_env: FakeOpenAIServer, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys
    from urllib.parse import quote

    from django.db import connection

    KnowledgeMemory(storage_dir="./agent_memory").remember(
        "Preferred language: Python", category="preferences", persistent=True
    )
    openai_env.enqueue_text("You prefer Python.")
    db = connection.settings_dict
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": (
            f"postgres://{db['USER']}:{db.get('PASSWORD') or ''}@{quote(db['HOST'] or '127.0.0.1', safe='')}"
            f"{':' + str(db['PORT']) if db['PORT'] else ''}/{db['NAME']}"
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", RESTART_SCRIPT],
        env=env,
        cwd=tmp_path,  # "./agent_memory" is the same directory in both processes
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"content": "You prefer Python.", "facts": {"preferences": ["Preferred language: Python"]}}
    [body] = openai_env.requests
    assert body["messages"][1] == {
        "role": "system",
        "content": "[Long-term Memory]\n## preferences\n- Preferred language: Python",
    }


def test_statements_of_a_run_with_conversation_and_knowledge_memory(tmp_path: Path) -> None:
    """One run of a warm agent: the window read (1), the user message's add (a read of the
    window before and after, for ``_last_trimmed``, around the append), the knowledge block
    (2: long-term facts, recent entries) and the answer's add (read, append, read). An append
    is one statement on PostgreSQL, five on SQLite (savepoint, row lock read, insert, counter
    update, release)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    km = KnowledgeMemory(storage_dir=tmp_path)
    km.remember("Prefers Python", category="preferences", persistent=True)
    agent = Agent(
        provider=LocalProvider(), memory=ConversationMemory(), config=AgentConfig(knowledge_memory=km)
    )
    agent.run("warm")
    with CaptureQueriesContext(connection) as queries:
        agent.run("hello")
    append = 1 if connection.vendor == "postgresql" else 5
    assert len(queries) == 1 + (2 + append) + 2 + (2 + append)
    with CaptureQueriesContext(connection) as queries:
        KnowledgeMemory(storage_dir=tmp_path)
    assert len(queries) == 1  # the shared owner, read


def test_selectools_options_not_provided_are_refused_and_tool_names_are_unique(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="session_store"):
        AgentConfig(session_store=object())  # type: ignore[call-arg]

    def remember(content: str) -> str:
        return content

    with pytest.raises(ValueError, match="two tools share a name"):
        Agent(
            tools=[remember],
            provider=LocalProvider(),
            config=AgentConfig(knowledge_memory=KnowledgeMemory(storage_dir=tmp_path)),
        )
