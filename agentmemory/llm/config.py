"""LLM configuration: ``get_llm(name)`` from ``AGENTMEMORY["LLMS"]`` or, failing that, the environment.

Settings (Django style, like ``CACHES``)::

    AGENTMEMORY = {
        "LLMS": {
            "default": {
                "BACKEND": "agentmemory.llm.openai.OpenAIChatModel",
                "OPTIONS": {"model": "llama3.1", "base_url": "http://127.0.0.1:11434/v1"},
            },
            "summarizer": {
                "BACKEND": "agentmemory.llm.anthropic.AnthropicChatModel",
                "OPTIONS": {"model": "claude-haiku-4-5", "max_tokens": 2048},
            },
        },
    }

Without an ``LLMS`` setting the ``"default"`` model comes from the environment:
``AGENTMEMORY_LLM_PROVIDER`` (``openai``, ``anthropic`` or ``none``; when unset, OpenAI if
``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set, else Anthropic if ``ANTHROPIC_API_KEY`` or
``ANTHROPIC_BASE_URL`` is set), ``AGENTMEMORY_LLM_MODEL`` and each provider's key and base-URL
variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from agentmemory.llm.base import ChatModel

__all__ = [
    "DEFAULT_LLM",
    "ENV_MODEL",
    "ENV_PROVIDER",
    "PROVIDERS",
    "configuration_errors",
    "get_llm",
    "llm_from_env",
]

DEFAULT_LLM = "default"
ENV_PROVIDER = "AGENTMEMORY_LLM_PROVIDER"
ENV_MODEL = "AGENTMEMORY_LLM_MODEL"
#: provider name -> (dotted path of the model class, the variables that configure it)
PROVIDERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "openai": ("agentmemory.llm.openai.OpenAIChatModel", ("OPENAI_API_KEY", "OPENAI_BASE_URL")),
    "anthropic": (
        "agentmemory.llm.anthropic.AnthropicChatModel",
        ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    ),
}
_ENTRY_KEYS = frozenset({"BACKEND", "OPTIONS"})
_NO_PROVIDER = frozenset({"none", "off", "offline"})


def _llms_setting() -> Mapping[str, Any]:
    from agentmemory.conf import app_settings

    llms = app_settings().LLMS
    if llms is None:
        return {}
    if not isinstance(llms, Mapping):
        raise ImproperlyConfigured(
            f"AGENTMEMORY['LLMS'] must be a dict of named LLM configurations, not {type(llms).__name__}"
        )
    return llms


def get_llm(name: str = DEFAULT_LLM) -> ChatModel | None:
    """The configured chat model called ``name``, or ``None`` when no model is configured.

    Args:
        name: a key of ``AGENTMEMORY["LLMS"]``; ``"default"`` also falls back to the environment
            (``llm_from_env``) when there is no ``LLMS`` setting.

    Returns:
        A new ``ChatModel`` built as ``BACKEND(**OPTIONS)`` (a LangChain chat model is wrapped in
        ``LangChainChatModel``); ``None`` when the entry is ``None``, or when ``name`` is
        ``"default"``, ``LLMS`` is empty and the environment configures no provider. Callers
        decide what ``None`` means: the compactor falls back to the offline summariser, ``chat``
        explains how to configure a model. Models create their HTTP clients lazily, so building
        one is cheap; keep the instance to reuse its connections.

    Raises:
        ImproperlyConfigured: ``LLMS`` is not a dict; ``name`` is not one of its keys (or, with
            no ``LLMS`` setting, is not ``"default"``); an entry without ``BACKEND``, with
            unknown keys or non-dict ``OPTIONS``; a ``BACKEND`` that cannot be imported, rejects
            the options, or does not build a ``ChatModel``; a bad environment configuration
            (see ``llm_from_env``).
    """
    llms = _llms_setting()
    if not llms:
        if name != DEFAULT_LLM:
            raise ImproperlyConfigured(
                f"no LLM named {name!r}: AGENTMEMORY['LLMS'] is not set (the environment configures "
                f"only {DEFAULT_LLM!r}); add AGENTMEMORY['LLMS'][{name!r}] = "
                "{'BACKEND': '<dotted path>', 'OPTIONS': {...}}"
            )
        return llm_from_env()
    if name not in llms:
        raise ImproperlyConfigured(
            f"no LLM named {name!r} in AGENTMEMORY['LLMS']; configured: {', '.join(sorted(map(str, llms)))}"
        )
    entry = llms[name]
    if entry is None:
        return None
    where = f"AGENTMEMORY['LLMS'][{name!r}]"
    if not isinstance(entry, Mapping):
        raise ImproperlyConfigured(
            f"{where} must be a dict with 'BACKEND' and 'OPTIONS', not {type(entry).__name__}"
        )
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ImproperlyConfigured(f"{where} has unknown key(s) {unknown}; allowed: BACKEND, OPTIONS")
    backend = entry.get("BACKEND")
    if not isinstance(backend, str) or not backend:
        raise ImproperlyConfigured(
            f"{where} has no 'BACKEND' (a dotted path such as 'agentmemory.llm.openai.OpenAIChatModel')"
        )
    options = entry.get("OPTIONS") or {}
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured(f"{where}['OPTIONS'] must be a dict, not {type(options).__name__}")
    return _build(backend, dict(options), where)


def configuration_errors() -> list[str]:
    """Every problem ``get_llm`` would raise for the configured names (for system checks).

    Builds each entry of ``AGENTMEMORY["LLMS"]`` (or the environment's ``"default"``) once:
    models create their HTTP clients on first use, so nothing is sent. Returns the
    ``ImproperlyConfigured`` messages, an empty list when all is well.
    """
    try:
        names = list(_llms_setting()) or [DEFAULT_LLM]
    except ImproperlyConfigured as exc:
        return [str(exc)]
    errors = []
    for name in names:
        try:
            get_llm(name)
        except ImproperlyConfigured as exc:
            errors.append(str(exc))
    return errors


def _build(backend: str, options: dict[str, Any], where: str) -> ChatModel:
    try:
        factory = import_string(backend)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"{where}: cannot import BACKEND {backend!r}: {exc} (is its package installed? e.g. "
            "pip install 'django-agentmemory[openai]', 'django-agentmemory[anthropic]' or "
            "'django-agentmemory[langchain]')"
        ) from exc
    if not callable(factory):
        raise ImproperlyConfigured(f"{where}: BACKEND {backend!r} is not a class or factory function")
    try:
        model = factory(**options)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(
            f"{where}: BACKEND {backend!r} rejected OPTIONS {sorted(options)}: {exc}"
        ) from exc
    model = _wrap_langchain(model)
    if not isinstance(model, ChatModel):
        raise ImproperlyConfigured(
            f"{where}: BACKEND {backend!r} built {type(model).__name__}, which is not a ChatModel "
            "(it needs model_name, invoke and ainvoke; see agentmemory.llm.base.ChatModel)"
        )
    return model


def _wrap_langchain(model: Any) -> Any:
    """A LangChain ``BaseChatModel`` becomes a ``LangChainChatModel``; anything else is kept."""
    try:
        from langchain_core.language_models import BaseChatModel
    except ImportError:
        return model
    if isinstance(model, BaseChatModel):
        from agentmemory.llm.langchain import LangChainChatModel

        return LangChainChatModel(model)
    return model


def llm_from_env(environ: Mapping[str, str] | None = None) -> ChatModel | None:
    """The ``"default"`` model as configured by environment variables, or ``None``.

    Reads ``AGENTMEMORY_LLM_PROVIDER`` (``openai``, ``anthropic``; ``none`` disables the
    lookup), ``AGENTMEMORY_LLM_MODEL`` and the provider's variables (``OPENAI_API_KEY``,
    ``OPENAI_BASE_URL``; ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``). Without a provider
    variable, OpenAI is used when one of its variables is set, else Anthropic.

    Args:
        environ: the mapping to read (default ``os.environ``).

    Raises:
        ImproperlyConfigured: an unknown provider; a provider named explicitly whose key and
            base URL are both missing; its SDK is not installed.
    """
    env = os.environ if environ is None else environ
    provider = (env.get(ENV_PROVIDER) or "").strip().lower()
    if provider in _NO_PROVIDER:
        return None
    if provider and provider not in PROVIDERS:
        raise ImproperlyConfigured(
            f"{ENV_PROVIDER}={env.get(ENV_PROVIDER)!r} is not a known provider; "
            f"use one of {', '.join(sorted(PROVIDERS))} or none"
        )
    candidates = [provider] if provider else list(PROVIDERS)
    for candidate in candidates:
        path, variables = PROVIDERS[candidate]
        if not any(env.get(variable) for variable in variables):
            if provider:
                raise ImproperlyConfigured(
                    f"{ENV_PROVIDER}={candidate} but none of {', '.join(variables)} is set; "
                    f"set the API key (or the base URL of a compatible server)"
                )
            continue
        try:
            model_class = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"the {candidate} provider is configured by the environment but its SDK is missing: {exc}; "
                f"install it with: pip install 'django-agentmemory[{candidate}]'"
            ) from exc
        return model_class.from_env(env)
    return None
