"""The agent's system prompt reaches every model call, whatever builds the window: the
agent's own builder, a ``build_window`` written as docs/agents.md shows it (the seed's
window code), a ``SYSTEM_PROMPT`` function with or without the injector; and a prompt that
cannot be made stops the turn before the human message is stored."""

from __future__ import annotations

import asyncio

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy

from agentmemory.agents import BaseToolCallingAgent, tool
from agentmemory.agents.checks import check_agents
from agentmemory.context import ContextWindowBuilder
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.semantic import SemanticMemory
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PROMPT = "You are the articles agent. Answer in one sentence."


@tool
def lookup(topic: str) -> str:
    """Look a topic up.

    Args:
        topic: what to look up.
    """
    return f"{topic}: found"


class SeedWindowAgent(BaseToolCallingAgent, register=False):
    """``build_window`` as docs/agents.md writes it after the seed's window code."""

    SYSTEM_PROMPT = PROMPT
    TOOLS = [lookup]
    MEMORY_COMPACTOR_ENABLED = True

    def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
        return ContextWindowBuilder(
            chat_history=self._injector.chat_history,
            memory_compactor=self._injector.memory_compactor,
        ).build(max_tokens=self._conversation_history_token_limit)


class SeedWindowNoCompactorAgent(SeedWindowAgent, register=False):
    MEMORY_COMPACTOR_ENABLED = False


def _script() -> ScriptedChatModel:
    return ScriptedChatModel(
        [ChatMessage.ai(None, tool_calls=[ToolCall("call_1", "lookup", {"topic": "tides"})]), "Tides: found."]
    )


def _first(messages: list[ChatMessage]) -> ChatMessage:
    return messages[0]


@pytest.mark.parametrize("agent_cls", [SeedWindowAgent, SeedWindowNoCompactorAgent])
def test_an_overridden_build_window_as_the_docs_show_still_sends_the_system_prompt(agent_cls) -> None:  # type: ignore[no-untyped-def]
    model = _script()
    agent = agent_cls(llm=model)
    result = agent.run(agent.start_conversation(owner=UserFactory()), "What about the tides?")
    assert result.answer == "Tides: found."
    assert len(model.calls) == 2
    for sent, _tools in model.calls:
        assert (sent[0].role, sent[0].content) == (Role.SYSTEM, PROMPT)
        assert [m.content for m in sent if m.role is Role.SYSTEM] == [PROMPT]
    for window in result.windows:
        assert window.system_tokens > 0
    # the recorded call rebuilds the window as it was sent, prompt first
    assert result.calls[0].record.window()[0].content == PROMPT


@pytest.mark.django_db(transaction=True)
def test_the_async_path_sends_it_too() -> None:
    model = _script()
    agent = SeedWindowAgent(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    asyncio.run(agent.arun(conversation, "What about the tides?"))
    assert [sent[0].content for sent, _ in model.calls] == [PROMPT, PROMPT]


def test_a_stored_system_prompt_gives_way_to_the_agents_as_in_the_agents_own_windows() -> None:
    model = ScriptedChatModel(["Hello."])
    agent = SeedWindowAgent(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    agent.get_injector(conversation).chat_history.add_messages([ChatMessage.system("Stored prompt")])
    agent.run(conversation, "Hi")
    sent = model.calls[0][0]
    assert [(m.role, m.content) for m in sent] == [(Role.SYSTEM, PROMPT), (Role.HUMAN, "Hi")]


def test_an_override_that_passes_its_own_system_prompt_keeps_it() -> None:
    class OwnPrompt(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = PROMPT

        def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
            return ContextWindowBuilder(injector.conversation, system_prompt="Chosen by the override").build(
                max_tokens=self.token_limit
            )

    model = ScriptedChatModel(["Hello."])
    agent = OwnPrompt(llm=model)
    agent.run(agent.start_conversation(owner=UserFactory()), "Hi")
    assert [m.content for m in model.calls[0][0] if m.role is Role.SYSTEM] == ["Chosen by the override"]


memory = None


def build_instructions() -> str:
    """Seed 003's instructions function: no argument, the memory's context in the prompt."""
    assert memory is not None
    context = memory.get_context("What plan am I on?")
    return f"You are a support agent.\n\n{context}"


def test_a_system_prompt_function_without_argument_as_seed_003_writes_it() -> None:
    global memory
    user = UserFactory()
    memory = SemanticMemory(owner=user, max_results=3)
    memory.add("Account is on the Enterprise plan since March 2021.")

    class Support(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = build_instructions

    model = ScriptedChatModel(["You are on the Enterprise plan."])
    agent = Support(llm=model)
    result = agent.run(agent.start_conversation(owner=user), "What plan am I on?")
    assert result.answer == "You are on the Enterprise plan."
    assert model.calls[0][0][0].content == (
        "You are a support agent.\n\nRelevant context from memory:\n"
        "  1. Account is on the Enterprise plan since March 2021."
    )
    assert check_agents_for(Support) == []


@pytest.mark.parametrize(
    "prompt",
    [
        staticmethod(lambda: "Static, no argument"),
        staticmethod(lambda injector: f"Static for {injector.conversation.agent_key or 'none'}"),
        lambda injector: f"Plain for {injector.conversation.agent_key or 'none'}",
        lambda *args: "Any arguments",
    ],
)
def test_system_prompt_callables_with_and_without_the_injector(prompt) -> None:  # type: ignore[no-untyped-def]
    agent_cls = type("PromptAgent", (BaseToolCallingAgent,), {"SYSTEM_PROMPT": prompt}, register=False)
    model = ScriptedChatModel(["ok"])
    agent = agent_cls(llm=model)
    agent.run(agent.start_conversation(owner=UserFactory()), "Hi")
    text = model.calls[0][0][0].content
    assert text in ("Static, no argument", "Static for none", "Plain for none", "Any arguments")


def two_arguments(injector, extra):  # type: ignore[no-untyped-def]
    return "never"


def failing_prompt() -> str:
    raise RuntimeError("the prompt's data source is down")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("prompt", "error"),
    [(two_arguments, ImproperlyConfigured), (failing_prompt, RuntimeError)],
)
def test_a_prompt_that_cannot_be_made_stops_the_turn_before_the_human_message_is_stored(
    prompt, error
) -> None:  # type: ignore[no-untyped-def]
    agent_cls = type("BadPrompt", (BaseToolCallingAgent,), {"SYSTEM_PROMPT": prompt}, register=False)
    model = ScriptedChatModel(["never sent"])
    agent = agent_cls(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    with pytest.raises(error):
        agent.run(conversation, "Hello?")
    with pytest.raises(error):
        asyncio.run(agent.arun(conversation, "Hello?"))
    assert not Message.objects.filter(conversation=conversation).exists()
    assert Conversation.objects.get(pk=conversation.pk).human_message_count == 0
    assert model.calls == []


def check_agents_for(agent_cls: type[BaseToolCallingAgent]) -> list[str]:
    from agentmemory.agents import registry

    agent_cls.AGENT_KEY = "system-prompt-check"
    registry.register(agent_cls)
    try:
        return [e.id for e in check_agents() if e.obj is agent_cls]
    finally:
        registry.unregister("system-prompt-check")


@pytest.mark.parametrize("prompt", [two_arguments, 42, None])
def test_a_system_prompt_that_is_neither_text_nor_a_usable_function_is_a_system_check_error(prompt) -> None:  # type: ignore[no-untyped-def]
    agent_cls = type("BadPrompt", (BaseToolCallingAgent,), {"SYSTEM_PROMPT": prompt}, register=False)
    assert check_agents_for(agent_cls) == ["agentmemory.E105"]


class LazyTextAgent(BaseToolCallingAgent, register=False):
    SYSTEM_PROMPT = gettext_lazy("A prompt marked for translation")


class PropertyAgent(BaseToolCallingAgent, register=False):
    @property
    def SYSTEM_PROMPT(self) -> str:  # type: ignore[override]
        return f"A property of {type(self).__name__}"


class MethodAgent(BaseToolCallingAgent, register=False):
    GREETING = "A method of the agent"

    def SYSTEM_PROMPT(self) -> str:  # type: ignore[override]
        return self.GREETING


class MethodWithInjectorAgent(BaseToolCallingAgent, register=False):
    GREETING = "A method given the injector"

    def SYSTEM_PROMPT(self, injector) -> str:  # type: ignore[no-untyped-def, override]
        return f"{self.GREETING} of conversation {injector.conversation_id > 0}"


class ClassMethodAgent(BaseToolCallingAgent, register=False):
    GREETING = "A classmethod"

    @classmethod
    def SYSTEM_PROMPT(cls) -> str:  # type: ignore[override]
        return cls.GREETING


class LazyReturningAgent(BaseToolCallingAgent, register=False):
    SYSTEM_PROMPT = staticmethod(lambda: gettext_lazy("A lazy text returned"))


PROMPT_FORMS = [
    (LazyTextAgent, "A prompt marked for translation"),
    (PropertyAgent, "A property of PropertyAgent"),
    (MethodAgent, "A method of the agent"),
    (MethodWithInjectorAgent, "A method given the injector of conversation True"),
    (ClassMethodAgent, "A classmethod"),
    (LazyReturningAgent, "A lazy text returned"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("agent_cls", "expected"), PROMPT_FORMS)
def test_every_python_form_of_a_system_prompt_is_sent(agent_cls, expected) -> None:  # type: ignore[no-untyped-def]
    """A lazy translation (``gettext_lazy``, the usual way to write text of a Django class)
    and a property were refused as "neither text nor a function", and a method written with
    ``self`` was called with the injector as ``self``: each failed every turn."""
    model = ScriptedChatModel(["ok", "ok again"])
    agent = agent_cls(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    agent.run(conversation, "Hi")
    asyncio.run(agent.arun(conversation, "Hi again"))
    assert [call[0][0].content for call in model.calls] == [expected, expected]
    assert check_agents_for(agent_cls) == []


class BrokenPropertyAgent(BaseToolCallingAgent, register=False):
    @property
    def SYSTEM_PROMPT(self) -> str:  # type: ignore[override]
        raise RuntimeError("the prompt's data source is down")


class PropertyOfNoTextAgent(BaseToolCallingAgent, register=False):
    @property
    def SYSTEM_PROMPT(self) -> int:  # type: ignore[override]
        return 42


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("agent_cls", "error"),
    [(BrokenPropertyAgent, RuntimeError), (PropertyOfNoTextAgent, ImproperlyConfigured)],
)
def test_a_property_that_gives_no_prompt_stops_the_turn_before_anything_is_stored(agent_cls, error) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedChatModel(["never sent"])
    agent = agent_cls(llm=model)
    conversation = agent.start_conversation(owner=UserFactory())
    with pytest.raises(error):
        agent.run(conversation, "Hello?")
    with pytest.raises(error):
        asyncio.run(agent.arun(conversation, "Hello?"))
    assert not Message.objects.filter(conversation=conversation).exists()
    assert model.calls == []


class WholeWindowPromptAgent(BaseToolCallingAgent, register=False):
    """A prompt that leaves no room for the human message in its window."""

    AGENT_KEY = "whole-window-prompt"
    SYSTEM_PROMPT = "Follow every rule of the handbook. " * 200
    CONVERSATION_HISTORY_TOKEN_LIMIT = 500


def test_a_prompt_filling_the_window_is_refused_before_the_human_message_is_stored() -> None:
    from agentmemory.exceptions import ContextBudgetExceeded

    model = ScriptedChatModel(["never sent"])
    agent = WholeWindowPromptAgent(llm=model)
    conversation = agent.start_conversation()
    for attempt in (
        lambda: agent.run(conversation, "hello"),
        lambda: asyncio.run(agent.arun(conversation, "hello")),
    ):
        with pytest.raises(ContextBudgetExceeded, match="nothing was stored") as raised:
            attempt()
        assert raised.value.available == 500 and raised.value.tokens >= 500
    # retries leave no unanswered human messages behind, and the model was never called
    assert not Message.objects.filter(conversation=conversation).exists()
    assert model.calls == []


class ListWindowAgent(SeedWindowAgent, register=False):
    """``build_window`` returning the builder's messages as a list (the seed calls the
    builder's result ``context_messages``)."""

    def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
        return list(super().build_window(builder, injector))


def test_an_override_returning_the_messages_as_a_list_is_sent_with_the_prompt() -> None:
    model = _script()
    agent = ListWindowAgent(llm=model)
    result = agent.run(agent.start_conversation(owner=UserFactory()), "What about the tides?")
    assert result.answer == "Tides: found."
    first, second = (sent for sent, _tools in model.calls)
    assert [(m.role, m.content) for m in first] == [
        (Role.SYSTEM, PROMPT),
        (Role.HUMAN, "What about the tides?"),
    ]
    assert [m.role for m in second] == [Role.SYSTEM, Role.HUMAN, Role.AI, Role.TOOL]
    assert all(window.history_tokens > 0 for window in result.windows)


def test_an_override_returning_something_else_is_a_type_error_naming_the_contract() -> None:
    class NoneWindow(SeedWindowAgent, register=False):
        def build_window(self, builder, injector):  # type: ignore[no-untyped-def]
            return None

    agent = NoneWindow(llm=_script())
    with pytest.raises(TypeError, match=r"NoneWindow.build_window\(\) must return a ContextWindow"):
        agent.run(agent.start_conversation(owner=UserFactory()), "Hi")
