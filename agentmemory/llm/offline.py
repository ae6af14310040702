"""``OfflineSummarizer``: a clearly labelled, extractive stand-in for an LLM summariser.

Used by the embedded default when no language model is configured, so that compaction,
storage and context windows can be seen working on a machine without API keys. Its output
starts with ``OFFLINE_LABEL``: it is a list of what was asked and which tools ran, not an
LLM summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.messages import ChatMessage

OFFLINE_LABEL = "[Offline extractive summary, not written by a language model]"
_LIMIT = re.compile(r"at most (\d+) tokens")
_ITEM_CHARS = 160


class OfflineSummarizer:
    """Answers the compactor's prompts without a model.

    For a summary prompt it keeps the previous summary's items and adds one per user
    message ("User asked: ..."), per assistant reply ("Assistant said: ...") and per tool
    used; items are dropped oldest first so that
    the text stays within the token limit stated in the instructions, counted with the
    configured token counter. A condense prompt is answered the same way.
    """

    model_name = "offline-extractive"

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        instructions = messages[0].text if messages else ""
        prompt = messages[-1].text if messages else ""
        match = _LIMIT.search(instructions)
        max_tokens = int(match.group(1)) if match else 500
        items = _previous_items(prompt)
        for line in prompt.splitlines():
            if line.startswith("User: "):
                items.append("User asked: " + _clip(line[len("User: ") :]))
            elif line.startswith("Assistant: "):
                items.append("Assistant said: " + _clip(line[len("Assistant: ") :]))
            elif line.startswith("Assistant called tool "):
                name = line[len("Assistant called tool ") :].split("(", 1)[0]
                items.append(f"Assistant used tool {name}.")
        text = _fit(items, max_tokens)
        return ChatResponse(
            message=ChatMessage.ai(text),
            usage=Usage(input_tokens=len(prompt) // 4, output_tokens=len(text) // 4),
            model=self.model_name,
            finish_reason="stop",
        )

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        return self.invoke(messages, tools=tools)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ITEM_CHARS else text[: _ITEM_CHARS - 3] + "..."


def _previous_items(prompt: str) -> list[str]:
    """Items of a previous offline summary found in the prompt (summary or condense)."""
    if "Previous summary:" in prompt:
        block = prompt.split("Previous summary:", 1)[1].split("New messages:", 1)[0]
    else:
        block = prompt
    items = [line[2:] for line in block.splitlines() if line.startswith("- ")]
    prose = block.strip()
    if not items and prose and prose != "(none yet)":
        # A summary written by an LLM (or by hand) before this one: carry it forward as
        # one item instead of dropping it (K2: the summary accumulates).
        items = ["Earlier: " + " ".join(prose.split())[: _ITEM_CHARS * 4]]
    return items


def _fit(items: list[str], max_tokens: int) -> str:
    """The label and the newest items whose text stays within ``max_tokens`` by the
    configured token counter (dense scripts cost more tokens per character)."""
    from agentmemory.conf import get_token_counter

    counter = get_token_counter()
    total = counter.count_text(OFFLINE_LABEL) + 1
    kept: list[str] = []
    for item in reversed(items):
        cost = counter.count_text(f"- {item}") + 1  # +1: the line break
        if total + cost > max_tokens:
            break
        kept.insert(0, item)
        total += cost
    # Counts are nearly additive across lines; check the whole and trim if they were not.
    while kept and counter.count_text(_render(kept)) > max_tokens:
        kept.pop(0)
    return _render(kept)


def _render(items: list[str]) -> str:
    return OFFLINE_LABEL + "\n" + "\n".join(f"- {item}" for item in items)
