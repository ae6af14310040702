"""Context windows: the messages to send, in the shape the request asks for, and their
accounting (tokens)."""

from __future__ import annotations

from typing import Any

from django.db import router
from rest_framework import serializers

from agentmemory.api.pagination import json_size
from agentmemory.api.schema import extend_schema_field
from agentmemory.api.serializers.common import StoredDateTimeField
from agentmemory.api.serializers.messages import (
    ANTHROPIC,
    LANGCHAIN,
    NATIVE,
    OPENAI,
    _langchain,
    message_to_native,
)
from agentmemory.context import ContextWindow
from agentmemory.context.window import MEMORY_BLOCK_KEY
from agentmemory.formats.anthropic import to_anthropic
from agentmemory.formats.openai import to_openai_messages
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Fact
from agentmemory.tokens import TokenCounter

# -- context windows ------------------------------------------------------------------------

SYSTEM_PROMPT_PART = "system_prompt"
SUMMARY_PART = "summary"
MEMORY_PART = "memory"
HISTORY_PART = "history"


def window_entries(window: ContextWindow, counter: TokenCounter) -> list[tuple[str, ChatMessage, int]]:
    """The window's messages as ``(part, message, tokens)``, oldest first.

    ``part`` is ``"system_prompt"``, ``"summary"``, ``"memory"`` (the memory block) or
    ``"history"``; ``tokens`` is what the message costs as sent (tokens): the stored count
    for the pinned system messages and history messages, the part's accounted size for a
    system prompt given to the builder, the summary and the memory block, and a fresh count
    by ``counter`` for truncated copies. The history
    entries add up to ``window.history_tokens``, the system prompt entries to
    ``window.system_tokens``.
    """
    history_ids = {id(m) for m in window.history}
    entries = []
    for message in window.messages:
        if id(message) in history_ids:
            if message.truncated or message.token_count is None:
                tokens = counter.count_message(message)
            else:
                tokens = message.token_count
            entries.append((HISTORY_PART, message, tokens))
        elif "summary_id" in (message.metadata or {}):
            entries.append((SUMMARY_PART, message, window.summary_tokens))
        elif MEMORY_BLOCK_KEY in (message.metadata or {}):
            entries.append((MEMORY_PART, message, window.memory_tokens))
        elif message.seq is not None and message.token_count is not None:
            entries.append((SYSTEM_PROMPT_PART, message, message.token_count))  # one pinned message
        else:
            entries.append((SYSTEM_PROMPT_PART, message, window.system_tokens))
    return entries


#: ``messages`` of a context window: one object per message, in the shape of ``format``. The
#: shapes cannot be told apart by a schema (an OpenAI and an Anthropic user message look the
#: same), so they are one object schema listing the properties of each.
CONTEXT_MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "The messages to send, oldest first. native: the fields below; openai: Chat "
    "Completions messages (role system/user/assistant/tool, tool_calls with JSON-string "
    "arguments); anthropic: Messages API messages (role user/assistant, content text or blocks); "
    "langchain: LangChain's messages_to_dict shape (type and data).",
    "items": {
        "type": "object",
        "properties": {
            "role": {"type": "string", "description": "native, openai, anthropic."},
            "type": {"type": "string", "description": "langchain: human, ai, system or tool."},
            "data": {
                "type": "object",
                "additionalProperties": {},
                "description": "langchain: the message's fields (content, tool_calls, ...).",
            },
            "content": {"description": "Text, a list of content parts or blocks, or null."},
            "part": {
                "type": "string",
                "enum": [SYSTEM_PROMPT_PART, SUMMARY_PART, MEMORY_PART, HISTORY_PART],
                "description": "native: which part of the window the message belongs to.",
            },
            "seq": {"type": "integer", "nullable": True, "description": "native: stored seq."},
            "tool_calls": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
            "tool_call_id": {"type": "string"},
            "name": {"type": "string"},
            "is_error": {
                "type": "boolean",
                "description": "native, on a tool result only: the call failed (its "
                "metadata.is_error); anthropic sends it on the tool_result block, langchain as "
                "status error.",
            },
            "metadata": {"type": "object", "additionalProperties": {}},
            "parts": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
            "token_count": {"type": "integer", "description": "native: tokens it costs in the window."},
            "truncated": {"type": "boolean", "description": "native: a truncated copy was sent."},
        },
    },
}


class UncoveredMessagesSerializer(serializers.Serializer):
    """Stored messages a window leaves out that the summary does not cover either (they sit
    between the summary, or the pinned system prompt, and the window's oldest message)."""

    count = serializers.IntegerField(help_text="How many messages (exact).")
    tokens = serializers.IntegerField(help_text="Their stored token counts added up (exact).")
    seqs = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Their seqs, oldest first; the newest 1,000 when there are more.",
    )


class RecalledItemSerializer(serializers.Serializer):
    """One item of a memory block."""

    kind = serializers.ChoiceField(choices=["message", "fact"])
    text = serializers.CharField(help_text="What the block shows for it, provenance included.")
    tokens = serializers.IntegerField(help_text="Its share of the block (tokens).")
    score = serializers.FloatField(help_text="Its relevance to the query; orders the packing.")
    seqs = serializers.ListField(
        child=serializers.IntegerField(), help_text="Seqs of the stored messages it shows (none for a fact)."
    )
    said_at = StoredDateTimeField(
        allow_null=True, help_text="When it was said: the date a transcript gave, else when it was stored."
    )
    conversation = serializers.UUIDField(
        allow_null=True,
        help_text="The public id of the conversation the messages were said in (null for a fact, "
        "or when that conversation was deleted meanwhile).",
    )
    fact = serializers.UUIDField(
        allow_null=True,
        help_text="The public id of the fact (null for messages, or when it was deleted meanwhile).",
    )


class MemoryBlockSerializer(serializers.Serializer):
    """The memory block sent with a window: what the owner's past conversations and facts
    hold about the turn."""

    text = serializers.CharField(help_text="The block as the model reads it (one system message).")
    tokens = serializers.IntegerField(help_text="What its message costs (tokens).")
    query = serializers.CharField(help_text="What was recalled for.")
    items = RecalledItemSerializer(many=True)


class ContextWindowSerializer(serializers.Serializer):
    """A context window: the messages to send, oldest first, and its accounting (tokens)."""

    format = serializers.SerializerMethodField(help_text="The message format of `messages`.")
    messages = serializers.SerializerMethodField()
    max_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField(
        help_text="Tokens of every message sent: system_tokens + knowledge_tokens + summary_tokens "
        "+ memory_tokens + history_tokens."
    )
    system_tokens = serializers.IntegerField(
        source="own_system_tokens",
        help_text="The system prompt's own tokens, without the knowledge block at its end "
        "(knowledge_tokens); the system prompt message's token_count is both.",
    )
    knowledge_tokens = serializers.IntegerField(
        help_text="Tokens of the knowledge block (the facts an agent with KNOWLEDGE_MEMORY_ENABLED "
        "puts at the end of its system prompt): a recorded call's; 0 in a window the context "
        "endpoint builds, which puts none there."
    )
    summary_tokens = serializers.IntegerField()
    history_tokens = serializers.IntegerField()
    memory_tokens = serializers.IntegerField(help_text="Tokens of the memory block (0 without one).")
    memory = serializers.SerializerMethodField(
        help_text="The memory block sent after the summary (memory_recall=true), or null: recall "
        "off, nothing recalled, no room, or a conversation without an owner."
    )
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    summary_through_seq = serializers.IntegerField(allow_null=True)
    skipped_orphans = serializers.ListField(child=serializers.IntegerField())
    skipped_pending = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Seqs of tool exchanges left out because a call still awaits its result.",
    )
    skipped_late = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Seqs of tool results not sent: the exchange they answer is older than the window.",
    )
    placeholders = serializers.ListField(
        child=serializers.CharField(),
        help_text="Ids of tool calls sent with a placeholder result (never stored).",
    )
    truncated = serializers.SerializerMethodField(
        help_text='What was sent as truncated copies (storage keeps it whole): "summary" first when '
        "the summary was cut (to leave the turn in progress, or the messages after it, their room), "
        "then the seqs of the messages sent cut."
    )
    uncovered = serializers.SerializerMethodField(
        help_text="Stored messages in neither the window nor the summary (count 0 when none): a "
        "compaction is due and could not run first, or the window is smaller than the summary "
        "was made for."
    )

    system = serializers.SerializerMethodField(
        help_text="message_format=anthropic: the request's `system` parameter (the system prompt, "
        "the summary and the memory block, which Anthropic takes apart from `messages`); null in "
        "other formats."
    )

    @extend_schema_field(MemoryBlockSerializer(allow_null=True))
    def get_memory(self, window: ContextWindow) -> dict[str, Any] | None:
        block = window.memory
        if block is None:
            return None
        conversations = _public_ids(
            Conversation, {i.conversation_id for i in block.items if i.conversation_id}
        )
        facts = _public_ids(Fact, {i.fact_id for i in block.items if i.fact_id})
        return {
            "text": block.text,
            "tokens": window.memory_tokens,
            "query": block.query,
            "items": [
                {
                    "kind": item.kind,
                    "text": item.text,
                    "tokens": item.tokens,
                    "score": item.score,
                    "seqs": list(item.seqs),
                    "said_at": item.said_at.isoformat() if item.said_at is not None else None,
                    "conversation": conversations.get(item.conversation_id),
                    "fact": facts.get(item.fact_id),
                }
                for item in block.items
            ],
        }

    def get_format(self, window: ContextWindow) -> str:
        return self.context.get("message_format", NATIVE)

    @extend_schema_field(
        {"type": "array", "items": {"oneOf": [{"type": "integer"}, {"type": "string", "enum": ["summary"]}]}}
    )
    def get_truncated(self, window: ContextWindow) -> list[int | str]:
        return list(window.truncated)

    @extend_schema_field(UncoveredMessagesSerializer)
    def get_uncovered(self, window: ContextWindow) -> dict[str, Any]:
        uncovered = window.uncovered
        return {"count": uncovered.count, "tokens": uncovered.tokens, "seqs": list(uncovered.seqs)}

    @extend_schema_field({"type": "string", "nullable": True})
    def get_system(self, window: ContextWindow) -> str | None:
        if self.get_format(window) != ANTHROPIC:
            return None
        return self._anthropic(window)[0]

    def _anthropic(self, window: ContextWindow) -> tuple[str | None, list[dict[str, Any]]]:
        if not hasattr(self, "_anthropic_cache"):
            system, messages = to_anthropic(window.messages)
            self._anthropic_cache = (system if isinstance(system, str) else None, messages)
        return self._anthropic_cache

    @extend_schema_field(CONTEXT_MESSAGES_SCHEMA)
    def get_messages(self, window: ContextWindow) -> list[dict[str, Any]]:
        if self.get_format(window) == OPENAI:
            return to_openai_messages(window.messages)
        if self.get_format(window) == ANTHROPIC:
            return self._anthropic(window)[1]
        if self.get_format(window) == LANGCHAIN:
            langchain, _, messages_to_dict = _langchain()
            return list(messages_to_dict(langchain.to_langchain(window.messages)))
        result = []
        for part, message, tokens in window_entries(window, self.context["token_counter"]):
            entry = native_history_entry(message, tokens)
            if part != HISTORY_PART:
                entry.update(part=part, seq=None)
            result.append(entry)
        return result


class ContextBudgetErrorSerializer(serializers.Serializer):
    """Body of a 422 answer: the newest human message cannot fit in ``max_tokens``."""

    error = serializers.CharField(default="context_budget_exceeded")
    detail = serializers.CharField()
    seq = serializers.IntegerField(allow_null=True, help_text="Seq of the message that does not fit.")
    tokens = serializers.IntegerField(help_text="Its size (tokens).")
    available = serializers.IntegerField(help_text="Tokens left for it after system prompt and summary.")
    max_tokens = serializers.IntegerField()


def _public_ids(model: Any, pks: set[Any]) -> dict[Any, str]:
    """``{primary key: uuid as text}`` of the rows of ``model`` among ``pks``: one query, none
    when ``pks`` is empty (the API names conversations and facts by their uuid only)."""
    if not pks:
        return {}
    rows = model.objects.using(router.db_for_read(model)).filter(pk__in=pks).values_list("pk", "uuid")
    return {pk: str(public) for pk, public in rows}


def history_sizes(window: ContextWindow | Any, shape: str) -> list[int]:
    """Bytes (compact JSON, UTF-8, with its comma) that each history message of ``window``,
    oldest first, takes in the ``messages`` of an answer in ``shape``, each sent alone (an
    Anthropic message merged with its neighbour takes less: an upper bound there)."""
    sizes = []
    for message in window.history:
        if shape == OPENAI:
            items: Any = to_openai_messages([message])
        elif shape == ANTHROPIC:
            try:
                items = to_anthropic([message])[1]
            except ValueError:
                # alone it is no valid Anthropic list (an AI message first): its OpenAI size
                items = to_openai_messages([message])
        elif shape == LANGCHAIN:
            langchain, _, messages_to_dict = _langchain()
            items = messages_to_dict(langchain.to_langchain([message]))
        else:
            items = [native_history_entry(message, message.token_count or 0)]
        sizes.append(json_size(items) - 1)  # the list's brackets, less its comma
    return sizes


def native_history_entry(message: ChatMessage, tokens: int) -> dict[str, Any]:
    """A history message as the native ``messages`` of an answer hold it."""
    return {
        "part": HISTORY_PART,
        "seq": message.seq,
        **message_to_native(message),
        "token_count": tokens,
        "truncated": message.truncated,
    }


#: fewest bytes a history message takes in an answer in a shape other than native (an
#: Anthropic text block merged into its neighbour, ``{"type":"text","text":""}``, with a comma)
MIN_ENTRY_BYTES = 25
