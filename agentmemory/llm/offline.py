"""The offline extractive summary: what ``OfflineMemoryCompactor`` writes without a model.

Used when no language model is configured, so that compaction, storage and context windows
can be seen working on a machine without API keys. The text starts with ``OFFLINE_LABEL``:
it is a list of what was asked, what was answered and which tools ran, not a summary written
by a language model. It is built from the messages themselves; no prompt is parsed.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentmemory.messages import ChatMessage, Role

OFFLINE_LABEL = "[Offline extractive summary, not written by a language model]"
#: the ``Summary.model`` of offline summaries
OFFLINE_MODEL = "offline-extractive"
_ITEM_CHARS = 160

__all__ = ["OFFLINE_LABEL", "OFFLINE_MODEL", "extractive_items", "extractive_summary"]


def extractive_summary(previous: str | None, messages: Sequence[ChatMessage], *, max_tokens: int) -> str:
    """The previous summary's items followed by one item per message of ``messages``, the
    oldest items dropped until the text fits ``max_tokens`` (counted with the configured
    token counter).

    Args:
        previous: the previous summary text (an offline one keeps its items; any other text
            is carried forward as one "Earlier: ..." item), or ``None``.
        messages: the messages to fold, oldest first.
        max_tokens: the longest text returned (tokens).

    Returns:
        ``OFFLINE_LABEL`` and one ``- item`` line per kept item.
    """
    return _fit(_previous_items(previous) + extractive_items(messages), max_tokens)


def extractive_items(messages: Sequence[ChatMessage]) -> list[str]:
    """One line per user message ("User asked: ..."), assistant reply ("Assistant said:
    ...") and tool call ("Assistant used tool NAME."), each cut to 160 characters; tool
    results and system messages are left out."""
    items: list[str] = []
    for m in messages:
        if m.role is Role.HUMAN and m.text.strip():
            items.append("User asked: " + _clip(m.text))
        elif m.role is Role.AI:
            if m.text.strip():
                items.append("Assistant said: " + _clip(m.text))
            items.extend(f"Assistant used tool {call.name}." for call in m.tool_calls)
    return items


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ITEM_CHARS else text[: _ITEM_CHARS - 3] + "..."


def _previous_items(previous: str | None) -> list[str]:
    text = (previous or "").strip()
    if not text:
        return []
    if text.startswith(OFFLINE_LABEL):
        return [line[2:] for line in text.splitlines() if line.startswith("- ")]
    # A summary written by a model (or by hand) before this one: carry it forward as one
    # item instead of dropping it (the summary accumulates).
    return ["Earlier: " + " ".join(text.split())[: _ITEM_CHARS * 4]]


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
