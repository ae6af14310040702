"""A host project without numpy (the app's own dependencies only): every part that does not
store vectors works, admin included, and configuring an embedder without numpy is a system
check error rather than an ImportError at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "numpy":
            raise ImportError(f"{name} is not installed")
sys.meta_path.insert(0, Block())
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from django.core import checks
from django.test import Client, override_settings
from agentmemory.context import ContextWindowBuilder
from agentmemory.history import PersistentChatHistory
from agentmemory.knowledge import KnowledgeMemory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall import search_messages

user = get_user_model().objects.create_superuser("ann", password="pw-for-the-test")
conv = Conversation.objects.create(owner=user)
history = PersistentChatHistory(conv)
history.add_messages([ChatMessage.human("my order 1042 is late"), ChatMessage.ai("sorry")])
window = ContextWindowBuilder(conv).build(max_tokens=1000)
memory = KnowledgeMemory(user)
memory.remember("Prefers aisle seats", "travel", persistent=True)
facts = [hit.fact.content for hit in memory.recall("aisle seats")]
hits = [hit.seq for hit in search_messages("order 1042", owner=user)]  # the reply is its neighbour
client = Client()
client.force_login(user)
admin = client.get(f"/admin/agentmemory/conversation/{conv.pk}/change/").status_code
with override_settings(AGENTMEMORY={"EMBEDDER": "agentmemory.recall.embedders.OpenAICompatibleEmbedder"}):
    ids = sorted({m.id for m in checks.run_checks() if m.id and m.id.startswith("agentmemory.E")})
print(len(window.messages), facts, hits, admin, ids, "numpy" in sys.modules)
"""


def test_the_app_runs_without_numpy_until_vectors_are_configured(tmp_path):  # type: ignore[no-untyped-def]
    (tmp_path / "host_settings.py").write_text(
        textwrap.dedent(
            f"""
            SECRET_KEY = "x"
            INSTALLED_APPS = ["django.contrib.admin", "django.contrib.auth",
                              "django.contrib.contenttypes", "django.contrib.sessions",
                              "django.contrib.messages", "rest_framework", "agentmemory"]
            MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
                          "django.contrib.auth.middleware.AuthenticationMiddleware",
                          "django.contrib.messages.middleware.MessageMiddleware"]
            TEMPLATES = [{{"BACKEND": "django.template.backends.django.DjangoTemplates",
                           "APP_DIRS": True,
                           "OPTIONS": {{"context_processors": [
                               "django.template.context_processors.request",
                               "django.contrib.auth.context_processors.auth",
                               "django.contrib.messages.context_processors.messages"]}}}}]
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                       "NAME": {str(tmp_path / "db.sqlite3")!r}}}}}
            ROOT_URLCONF = "host_urls"
            USE_TZ = True
            ALLOWED_HOSTS = ["testserver"]
            """
        )
    )
    (tmp_path / "host_urls.py").write_text(
        "from django.contrib import admin\n"
        "from django.urls import path\n"
        'urlpatterns = [path("admin/", admin.site.urls)]\n'
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "host_settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == (
        "2 ['Prefers aisle seats'] [1, 2] 200 ['agentmemory.E208'] False"
    )
