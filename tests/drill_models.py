"""Summarisers for the failure drills, run inside a real Celery worker (``AGENTMEMORY_COMPACTION_LLM``).

They are configured through the environment the test gives the worker:

- ``DRILL_CALLS``: a file; each call appends one line (the time, in seconds since the epoch).
- ``DRILL_DELAY``: seconds each call takes (a slow model, to kill a worker mid-call).
- ``DRILL_FAIL_FLAG``: a file; while it exists every call fails with a timeout
  (``TransientLLMError``, as the adapters report one).
- ``DRILL_PIDS``: a file; each call appends the id of the process making it.
- ``DRILL_MAX_RETRIES``: the compaction task's ``max_retries`` in the worker (the task's own is
  5, whose backoff takes about half a minute; a drill of the same rule with fewer tries ends
  sooner).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmemory.exceptions import TransientLLMError
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.messages import ChatMessage

DRILL_SUMMARY = "Drill summary: the user asked numbered questions and got answers."


if os.environ.get("DRILL_MAX_RETRIES"):  # read when the worker first loads the summariser
    from agentmemory.compaction.tasks import compact_conversation

    compact_conversation.max_retries = int(os.environ["DRILL_MAX_RETRIES"])


class DrillModel:
    model_name = "drill-model"

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        calls = os.environ.get("DRILL_CALLS")
        if calls:
            with open(calls, "a") as f:
                f.write(f"{time.time()}\n")
        pids = os.environ.get("DRILL_PIDS")
        if pids:
            with open(pids, "a") as f:
                f.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("DRILL_DELAY", "0")))
        flag = os.environ.get("DRILL_FAIL_FLAG")
        if flag and Path(flag).exists():
            raise TransientLLMError("the summariser timed out (drill)")
        return ChatResponse(message=ChatMessage.ai(DRILL_SUMMARY), usage=Usage(40, 12), model=self.model_name)

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        return self.invoke(messages, tools=tools)
