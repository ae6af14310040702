"""Agent configuration failures: ``ImproperlyConfigured`` at construction and the system
checks ``agentmemory.E101``-``E104`` at startup."""

from __future__ import annotations

import io

import pytest
from django.core.checks import Error, run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from agentmemory.agents import AgentConfig, BaseToolCallingAgent, MemoryConfig, registry, tool
from agentmemory.agents.checks import check_agents
from agentmemory.llm.fake import ScriptedChatModel


class NoCompactorAgent(BaseToolCallingAgent, register=False):
    """Enables the compactor but configures none: the misconfiguration of the issue."""

    AGENT_KEY = "no-compactor-test"
    MEMORY_COMPACTOR_ENABLED = True

    @classmethod
    def get_config(cls) -> AgentConfig:
        return AgentConfig(memory=MemoryConfig(compactor_class=None))


@pytest.fixture
def registered():  # type: ignore[no-untyped-def]
    """Register agent classes for one test only, so other tests' checks stay clean."""
    keys: list[str] = []

    def add(cls):  # type: ignore[no-untyped-def]
        registry.register(cls)
        keys.append(cls.AGENT_KEY)
        return cls

    yield add
    for key in keys:
        registry.unregister(key)


def agent_errors() -> list[Error]:
    return [e for e in run_checks() if e.id.startswith("agentmemory.E1")]


def test_compactor_enabled_without_class_fails_at_construction():
    with pytest.raises(ImproperlyConfigured) as info:
        NoCompactorAgent(llm=ScriptedChatModel())
    message = str(info.value)
    assert "NoCompactorAgent has MEMORY_COMPACTOR_ENABLED = True" in message
    assert "names no compactor class" in message
    assert "MemoryConfig(compactor_class='agentmemory.compaction.LLMMemoryCompactor')" in message


def test_same_config_without_compactor_enabled_is_fine():
    class Quiet(NoCompactorAgent, register=False):
        MEMORY_COMPACTOR_ENABLED = False

    assert Quiet(llm=ScriptedChatModel()).config.memory.compactor_class is None


def test_unimportable_compactor_class_fails_at_construction():
    class Typo(BaseToolCallingAgent, register=False):
        MEMORY_COMPACTOR_ENABLED = True

        @classmethod
        def get_config(cls) -> AgentConfig:
            return AgentConfig(memory=MemoryConfig(compactor_class="agentmemory.compaction.NoSuchCompactor"))

    with pytest.raises(ImproperlyConfigured, match="cannot be imported"):
        Typo(llm=ScriptedChatModel())


def test_default_config_comes_from_settings(settings):
    class Plain(BaseToolCallingAgent, register=False):
        MEMORY_COMPACTOR_ENABLED = True

    config = Plain.get_config()
    assert config.memory.compactor_class == "agentmemory.compaction.LLMMemoryCompactor"
    assert config.llm == "default"
    settings.AGENTMEMORY = {"COMPACTOR_CLASS": "tests.test_agents.ShortSummaryCompactor"}
    assert Plain.get_config().memory.get_compactor_class().__name__ == "ShortSummaryCompactor"


def test_no_llm_configured_fails_with_instructions(monkeypatch, settings):
    monkeypatch.setenv("AGENTMEMORY_LLM_PROVIDER", "none")
    settings.AGENTMEMORY = {}

    class Plain(BaseToolCallingAgent, register=False):
        pass

    with pytest.raises(ImproperlyConfigured, match="No LLM is configured") as info:
        Plain()
    assert "OPENAI_BASE_URL" in str(info.value)


def test_system_check_reports_e101_for_registered_agent(registered):
    assert agent_errors() == []
    registered(NoCompactorAgent)

    [error] = agent_errors()
    assert error.id == "agentmemory.E101"
    assert error.obj is NoCompactorAgent
    assert "MEMORY_COMPACTOR_ENABLED = True" in error.msg
    assert "get_config()" in error.hint and "MEMORY_COMPACTOR_ENABLED = False" in error.hint
    with pytest.raises(SystemCheckError, match=r"agentmemory\.E101"):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())

    registry.unregister(NoCompactorAgent.AGENT_KEY)
    assert agent_errors() == []
    call_command("check", stdout=io.StringIO())


def test_system_check_reports_broken_get_config_and_tools(registered):
    class Broken(BaseToolCallingAgent, register=False):
        AGENT_KEY = "broken-config-test"

        @classmethod
        def get_config(cls) -> AgentConfig:
            raise RuntimeError("settings not ready")

    @tool
    def twice() -> str:
        """One."""
        return "1"

    class DoubleTools(BaseToolCallingAgent, register=False):
        AGENT_KEY = "double-tools-test"
        TOOLS = [twice, twice]

    registered(Broken)
    registered(DoubleTools)
    errors = {e.id: e for e in check_agents()}
    assert set(errors) == {"agentmemory.E102", "agentmemory.E103"}
    assert "settings not ready" in errors["agentmemory.E102"].msg
    assert "two tools named 'twice'" in errors["agentmemory.E103"].msg
    with pytest.raises(ImproperlyConfigured, match="two tools named"):
        DoubleTools(llm=ScriptedChatModel())


def test_system_check_reports_agents_module_import_error(monkeypatch):
    def fail() -> dict:
        raise ImportError("No module named 'shop.missing'")

    monkeypatch.setattr(registry, "all", fail)
    [error] = check_agents()
    assert error.id == "agentmemory.E104" and "shop.missing" in error.msg


def test_the_api_without_rest_framework_installed_warns(settings) -> None:  # type: ignore[no-untyped-def]
    # JSON requests work without it, but a browser's request to the API answered 500
    # (TemplateDoesNotExist: rest_framework/api.html) and nothing said why at startup
    from agentmemory.checks import check_api_needs_rest_framework

    assert check_api_needs_rest_framework() == []
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "rest_framework"]
    (warning,) = check_api_needs_rest_framework()
    assert warning.id == "agentmemory.W007" and "rest_framework" in warning.hint
    settings.ROOT_URLCONF = "rest_framework.urls"  # a URLconf without the API
    assert check_api_needs_rest_framework() == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"SUMMARY_MESSAGE_PREFIX": None}, "agentmemory.E012"),
        ({"SUMMARY_MESSAGE_PREFIX": 5}, "agentmemory.E012"),
        ({"RECORD_MODEL_CALLS": "yes"}, "agentmemory.E012"),
        ({"TOKEN_COUNTER": "os.getcwd"}, "agentmemory.E013"),
        ({"TOKEN_COUNTER": "tests.test_agent_checks.failing_counter"}, "agentmemory.E013"),
    ],
)
def test_settings_of_the_wrong_kind_are_refused_at_startup(settings, value, expected) -> None:  # type: ignore[no-untyped-def]
    # each passed the checks, then failed every compaction or append at run time
    from agentmemory.checks import check_settings

    settings.AGENTMEMORY = value
    assert expected in {problem.id for problem in check_settings()}


def failing_counter() -> None:
    raise RuntimeError("no tokenizer here")


@pytest.mark.parametrize("value", [[1, 2], "abc", 5])
def test_settings_that_are_not_a_dict_are_one_clear_error(settings, value) -> None:  # type: ignore[no-untyped-def]
    # every other check read them too and failed with a TypeError traceback
    from django.core.checks import run_checks

    settings.AGENTMEMORY = value
    ids = {problem.id for problem in run_checks() if problem.id and problem.id.startswith("agentmemory.E")}
    assert ids == {"agentmemory.E001"}
