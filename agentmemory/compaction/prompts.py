"""The summariser's instructions and transcript, and the summary's token budget.

What a summary must keep (``SUMMARY_RULES``, shared with the memory flush's structured call,
``agentmemory.flush``), how the folded messages are shown to the summariser
(``render_transcript``) and how long a summary may be for the windows it is sent in
(``summary_token_budget``, a pure budget rule kept in ``agentmemory.context.packing`` so that
the context builder, which cuts a summary to it, needs nothing of compaction; re-exported
here). Imports nothing of the compaction machinery: the memory flush reads it too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentmemory.context.packing import MIN_SUMMARY_BUDGET_TOKENS, summary_token_budget  # noqa: F401  (re-exported)
from agentmemory.llm.facts import said_at, speaker
from agentmemory.messages import ChatMessage, Role
from agentmemory.tokens import TokenCounter, longest_fitting_prefix

PROMPT_VERSION = "summary-v3"

#: what a summary must keep and how it is written (``SUMMARY_INSTRUCTIONS`` and the
#: structured call of the memory flush, ``agentmemory.flush``, share it)
SUMMARY_RULES = (
    "You maintain the running summary of a conversation between a user and an AI assistant that "
    "can call tools. You are given the previous summary (possibly empty) and the messages that "
    "came after it, each headed by its number, the date it was written and who wrote it. Write the "
    "updated summary: keep every fact, name, number, date, decision, preference, commitment and "
    "open question that later turns may need, and the outcome of tool calls that matter. Say who "
    "said or did what by name where the messages give names, and when: write dates as calendar "
    "dates (turn 'yesterday' or 'last week' into the date it means, from the date of its "
    "message). Drop small talk. Write plain prose or short bullet points in the third person, at "
    "most {max_tokens} tokens, in the same language as the conversation (the language the user "
    "writes in; do not translate it, keep names and identifiers as written)."
)
SUMMARY_INSTRUCTIONS = SUMMARY_RULES + " Output only the summary."
CONDENSE_INSTRUCTIONS = (
    "Shorten the following conversation summary to at most {max_tokens} tokens. Keep facts, "
    "names, numbers, dates, decisions and open questions; drop detail that later turns are "
    "unlikely to need. Keep the summary's language. Output only the shortened summary."
)


# The section headers of the summary prompt: a reply that repeats them is the prompt sent back.
PROMPT_HEADERS = ("Previous summary:", "New messages:")


def render_transcript(
    messages: Sequence[ChatMessage],
    *,
    max_chars_per_message: int = 8_000,
    token_counter: TokenCounter | None = None,
    max_tokens_per_message: int | None = None,
) -> str:
    """Plain-text transcript for the summariser: one block per message, tool calls with
    their JSON arguments, long contents and long arguments cut (the stored messages stay
    whole): a call whose arguments carry a whole file cannot make the request overflow.

    Each message is headed by its number (seq) and, where it differs from the message before,
    the date it was said (the date a transcript gave it, else the time it was stored:
    ``agentmemory.llm.facts.said_at``), and names its writer where the message gives a name
    (``speaker``), else "User" or "Assistant": ``[#12 | 1:56 pm on 8 May, 2023] Caroline: I
    went to ...``, then ``[#13] Melanie: ...``. A summary can only keep the dates and names it
    is given.

    Args:
        messages: the span to render, oldest first.
        max_chars_per_message: cut of each content and each call's arguments (characters).
        token_counter, max_tokens_per_message: when both are given, each message's block is
            also cut to at most ``max_tokens_per_message`` tokens by ``token_counter``, its
            lines (the text, each call) sharing the budget equally. Characters are no bound
            on tokens: 8,000 rare Han ideographs are about 18,000 tokens, 8,000 cuneiform
            signs 32,000 (BUG-19), so the span's budget would not hold (BUG-12).

    Returns:
        The transcript; a cut line ends with ``[... N characters cut]``.
    """

    def cut(text: str) -> str:
        if len(text) <= max_chars_per_message:
            return text
        return text[:max_chars_per_message] + f" [... {len(text) - max_chars_per_message} characters cut]"

    lines = []
    last_said = ""
    for m in messages:
        text = cut(m.text)
        block = []
        said = said_at(m)
        # the date only where it changes, as a chat log shows it: every line need not pay for it
        head = " | ".join(
            part
            for part in (f"#{m.seq}" if m.seq is not None else "", said if said != last_said else "")
            if part
        )
        last_said = said or last_said
        name = speaker(m)
        if m.role is Role.HUMAN:
            block.append(f"{name or 'User'}: {text}")
        elif m.role is Role.AI:
            if text:
                block.append(f"{name or 'Assistant'}: {text}")
            for call in m.tool_calls:
                args = cut(json.dumps(dict(call.arguments), ensure_ascii=False))
                block.append(f"{name or 'Assistant'} called tool {call.name}({args})")
        elif m.role is Role.TOOL:
            block.append(f"Tool {m.name or m.tool_call_id} returned: {text}")
        else:
            block.append(f"System: {text}")
        if token_counter is not None and max_tokens_per_message is not None and block:
            share = max(1, max_tokens_per_message // len(block))
            block = [_cut_to_tokens(line, share, token_counter) for line in block]
        if head and block:
            block[0] = f"[{head}] {block[0]}"
        lines.extend(block)
    return "\n".join(lines)


def _cut_to_tokens(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` whole when it costs at most ``max_tokens`` tokens, else its longest prefix
    that fits with the cut marker after it (``longest_fitting_prefix``)."""
    if counter.count_text(text) <= max_tokens:
        return text

    def candidate(keep: int) -> str:
        return text[:keep] + f" [... {len(text) - keep} characters cut]"

    return candidate(
        longest_fitting_prefix(len(text), max_tokens, lambda keep: counter.count_text(candidate(keep)))
    )
