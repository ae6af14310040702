"""The framework integrations are optional: without their packages agentmemory imports and
works, and importing an integration says which extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("agents", "langchain_core", "pydantic_ai"):
            raise ImportError(f"{name} is not installed")
sys.meta_path.insert(0, Block())
import django
django.setup()
import agentmemory.admin, agentmemory.api.views, agentmemory.history, agentmemory.context
import agentmemory.contrib.sessions
for module in ("openai_agents", "langchain", "pydantic_ai"):
    try:
        importlib.import_module(f"agentmemory.contrib.{module}")
    except ImportError as exc:
        print(module, exc)
frameworks = ("agents", "langchain_core", "pydantic_ai")
print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in frameworks))
"""


def test_the_app_imports_without_the_frameworks_and_names_the_extras() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "project.settings"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "openai_agents agentmemory.contrib.openai_agents needs the 'openai-agents' package" in out
    assert "pip install 'django-agentmemory[openai-agents]'" in out
    assert "pip install 'django-agentmemory[langchain]'" in out
    assert "pip install 'django-agentmemory[pydantic-ai]'" in out
    assert "loaded: []" in out


# LangGraph and MCP: the whole core imports without them, and never imports their modules
GRAPH_AND_MCP_SCRIPT = r"""
import importlib
import importlib.abc
import pkgutil
import sys

BLOCKED = ("langgraph", "mcp", "mcp_types")


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Block())

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "rest_framework",
        "agentmemory",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    ROOT_URLCONF="agentmemory.api.urls",
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
)
django.setup()

import agentmemory

core = [
    m.name
    for m in pkgutil.walk_packages(agentmemory.__path__, "agentmemory.")
    if not m.name.startswith(("agentmemory.contrib", "agentmemory.migrations"))
]
for name in core:
    importlib.import_module(name)
integrations = ("agentmemory.contrib.langgraph", "agentmemory.contrib.mcp")
assert not [m for m in sys.modules if m.startswith(integrations)], sorted(sys.modules)
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
for name, extra in (("agentmemory.contrib.langgraph", "langgraph"), ("agentmemory.contrib.mcp", "mcp")):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        assert f"pip install 'django-agentmemory[{extra}]'" in str(exc), str(exc)
    else:
        raise AssertionError(f"{name} imported without its package")
print(f"ok: {len(core)} core modules")
"""


def test_core_imports_without_the_integrations_and_contrib_names_its_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GRAPH_AND_MCP_SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok: ")
