"""Child process of the PostgreSQL restart drill: appends to one conversation until told to stop.

``python -m tests.drill_appender STOP_FILE`` with ``DATABASE_URL`` set: migrates, creates a
conversation, then appends one human message at a time. Each acknowledged append (the call
returned) is printed as a JSON line ``{"ok": seq, "content": ...}``, each failure as
``{"error": "<exception class>: <message>"}``; the connection is closed after a failure so the
next append reconnects, as a web request would. Stops when STOP_FILE exists.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(stop_file: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation

    call_command("migrate", verbosity=0)
    conv = Conversation.objects.create(title="restart drill")
    print(json.dumps({"conversation": conv.pk}), flush=True)
    i = 0
    while not Path(stop_file).exists():
        i += 1
        content = f"message {i}"
        try:
            (stored,) = PersistentChatHistory(conv.pk).add_messages([ChatMessage.human(content)])
        except Exception as exc:
            print(
                json.dumps({"error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}"[:300]}), flush=True
            )
            connection.close()
            time.sleep(0.05)
            continue
        print(json.dumps({"ok": stored.seq, "content": content}), flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    main(sys.argv[1])
