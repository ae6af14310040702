"""Tests of ``get_llm``: LLM configuration from ``AGENTMEMORY['LLMS']`` and from the environment."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentmemory.llm.anthropic import AnthropicChatModel
from agentmemory.llm.base import ChatModel
from agentmemory.llm.config import configuration_errors, get_llm, llm_from_env
from agentmemory.llm.langchain import LangChainChatModel
from agentmemory.llm.openai import OpenAIChatModel
from agentmemory.messages import ChatMessage

ENV_VARIABLES = (
    "AGENTMEMORY_LLM_PROVIDER",
    "AGENTMEMORY_LLM_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def llms(settings, value):
    settings.AGENTMEMORY = {**getattr(settings, "AGENTMEMORY", {}), "LLMS": value}


# -- environment --------------------------------------------------------------------------------


def test_nothing_configured_gives_none():
    assert get_llm() is None


def test_openai_key_configures_openai(clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-test")

    model = get_llm()

    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "gpt-4o-mini"


def test_anthropic_key_configures_anthropic_with_the_model_variable(clean_env):
    clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    clean_env.setenv("AGENTMEMORY_LLM_MODEL", "claude-sonnet-4-6")

    model = get_llm()

    assert isinstance(model, AnthropicChatModel)
    assert model.model_name == "claude-sonnet-4-6"


def test_openai_wins_when_both_are_configured_unless_the_provider_says_otherwise(clean_env):
    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert isinstance(get_llm(), OpenAIChatModel)

    clean_env.setenv("AGENTMEMORY_LLM_PROVIDER", "Anthropic")
    assert isinstance(get_llm(), AnthropicChatModel)

    clean_env.setenv("AGENTMEMORY_LLM_PROVIDER", "none")
    assert get_llm() is None


def test_an_explicit_provider_without_its_key_is_a_configuration_error(clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-test")
    clean_env.setenv("AGENTMEMORY_LLM_PROVIDER", "anthropic")

    with pytest.raises(ImproperlyConfigured, match="ANTHROPIC_API_KEY"):
        get_llm()


def test_an_unknown_provider_is_a_configuration_error(clean_env):
    clean_env.setenv("AGENTMEMORY_LLM_PROVIDER", "gemini")

    with pytest.raises(ImproperlyConfigured, match="'gemini' is not a known provider"):
        get_llm()


def test_llm_from_env_reads_a_given_mapping():
    model = llm_from_env(
        {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "AGENTMEMORY_LLM_MODEL": "claude-local"}
    )

    assert isinstance(model, AnthropicChatModel)
    assert model.base_url == "http://127.0.0.1:9"
    assert llm_from_env({}) is None


def test_the_environment_configures_only_the_default_name(clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-test")

    with pytest.raises(ImproperlyConfigured, match="no LLM named 'summarizer'"):
        get_llm("summarizer")


# -- settings -----------------------------------------------------------------------------------


def test_settings_entry_is_built_with_its_options_and_used(settings, fake_anthropic):
    llms(
        settings,
        {
            "default": {
                "BACKEND": "agentmemory.llm.anthropic.AnthropicChatModel",
                "OPTIONS": {
                    "model": "claude-test",
                    "base_url": fake_anthropic.base_url,
                    "api_key": "k",
                    "max_tokens": 77,
                },
            }
        },
    )
    fake_anthropic.enqueue_text("configured")

    model = get_llm()
    response = model.invoke([ChatMessage.human("hi")])
    model.close()

    assert response.message.content == "configured"
    assert fake_anthropic.requests[0]["max_tokens"] == 77


def test_settings_take_precedence_over_the_environment(settings, clean_env):
    clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    llms(
        settings,
        {
            "default": {
                "BACKEND": "agentmemory.llm.openai.OpenAIChatModel",
                "OPTIONS": {"model": "llama3.1", "base_url": "http://127.0.0.1:9/v1"},
            }
        },
    )

    model = get_llm()

    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "llama3.1"


def test_named_entries_and_disabled_entries(settings, clean_env):
    clean_env.setenv("OPENAI_API_KEY", "sk-test")
    llms(
        settings,
        {
            "default": None,
            "summarizer": {
                "BACKEND": "agentmemory.llm.anthropic.AnthropicChatModel",
                "OPTIONS": {"model": "claude-haiku-4-5", "api_key": "k"},
            },
        },
    )

    assert get_llm() is None  # explicitly none: the environment is not consulted
    assert isinstance(get_llm("summarizer"), AnthropicChatModel)
    with pytest.raises(ImproperlyConfigured, match=r"no LLM named 'fast'.*configured: default, summarizer"):
        get_llm("fast")


def test_a_langchain_chat_model_backend_is_wrapped(settings):
    llms(
        settings,
        {
            "default": {
                "BACKEND": "langchain_core.language_models.fake_chat_models.FakeListChatModel",
                "OPTIONS": {"responses": ["from langchain"]},
            }
        },
    )

    model = get_llm()

    assert isinstance(model, LangChainChatModel)
    assert model.invoke([ChatMessage.human("hi")]).message.content == "from langchain"


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("agentmemory.llm.openai.OpenAIChatModel", "must be a dict of named LLM configurations"),
        (
            {"default": "agentmemory.llm.openai.OpenAIChatModel"},
            r"\['default'\] must be a dict with 'BACKEND'",
        ),
        ({"default": {"OPTIONS": {"model": "m"}}}, "has no 'BACKEND'"),
        (
            {"default": {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTION": {}}},
            r"unknown key\(s\) \['OPTION'\]",
        ),
        (
            {"default": {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTIONS": ["m"]}},
            "OPTIONS'\\] must be a dict",
        ),
        (
            {"default": {"BACKEND": "agentmemory.llm.nope.Model"}},
            "cannot import BACKEND 'agentmemory.llm.nope.Model'",
        ),
        (
            {"default": {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTIONS": {"modle": "m"}}},
            "rejected OPTIONS \\['modle'\\]",
        ),
        (
            {"default": {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTIONS": {"model": ""}}},
            "needs a model name",
        ),
        ({"default": {"BACKEND": "collections.OrderedDict"}}, "built OrderedDict, which is not a ChatModel"),
        (
            {"default": {"BACKEND": "agentmemory.llm.config.DEFAULT_LLM"}},
            "is not a class or factory function",
        ),
    ],
)
def test_bad_settings_are_clear_configuration_errors(settings, value, match):
    llms(settings, value)

    with pytest.raises(ImproperlyConfigured, match=match):
        get_llm()


def test_every_built_model_satisfies_the_protocol(settings):
    llms(
        settings,
        {"default": {"BACKEND": "agentmemory.llm.fake.ScriptedChatModel", "OPTIONS": {"script": ["ok"]}}},
    )

    model = get_llm()

    assert isinstance(model, ChatModel)
    assert model.invoke([ChatMessage.human("hi")]).message.content == "ok"


def test_configuration_errors_lists_each_bad_entry(settings, clean_env):
    assert configuration_errors() == []
    clean_env.setenv("AGENTMEMORY_LLM_PROVIDER", "gemini")
    assert configuration_errors() == [
        "AGENTMEMORY_LLM_PROVIDER='gemini' is not a known provider; use one of anthropic, openai or none"
    ]

    llms(
        settings,
        {
            "default": {"BACKEND": "agentmemory.llm.fake.ScriptedChatModel"},
            "broken": {"BACKEND": "agentmemory.llm.nope.Model"},
            "typo": {"BACKEND": "agentmemory.llm.fake.ScriptedChatModel", "OPTIONS": {"scrip": []}},
        },
    )

    errors = configuration_errors()

    assert len(errors) == 2
    assert "AGENTMEMORY['LLMS']['broken']: cannot import BACKEND" in errors[0]
    assert "AGENTMEMORY['LLMS']['typo']: BACKEND" in errors[1]


def test_check_warns_when_the_environment_configures_a_provider_whose_sdk_is_missing(monkeypatch):  # type: ignore[no-untyped-def]
    import importlib.util

    from agentmemory.checks import check_llm_sdks

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real_find_spec(name, *a)
    )
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("AGENTMEMORY_LLM_PROVIDER", raising=False)
    assert check_llm_sdks() == []  # nothing configured
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (warning,) = check_llm_sdks()
    assert warning.id == "agentmemory.W006" and "'openai' package is not installed" in warning.msg
    assert warning.msg.startswith("OPENAI_API_KEY is set for the openai provider")
    assert "django-agentmemory[openai]" in warning.hint
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    (warning,) = check_llm_sdks()
    assert warning.msg.startswith("OPENAI_API_KEY and OPENAI_BASE_URL are set for the openai provider")
    monkeypatch.setenv("AGENTMEMORY_LLM_PROVIDER", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    assert check_llm_sdks() == []  # anthropic is installed, and it is the one named
