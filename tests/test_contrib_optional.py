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
