"""``ContextWindowBuilder``: the token-limited context for one model call, read from the database.

A window is the pinned system prompt, the current summary (a second system message), then
the newest contiguous run of history that fits, starting on a human message, with every tool
exchange whole. The reads go through ``Message.objects.window_head()`` and
``window_tail()`` (hand-written SQL in ``agentmemory.context.sql``): a constant number of
queries, whatever the length of the conversation.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.context.packing import _replace, pack_history, pending_placeholder, truncate_message
from agentmemory.context.sql import MAX_READ
from agentmemory.context.window import ContextWindow
from agentmemory.exceptions import ContextBudgetExceeded, ConversationNotFound
from agentmemory.history import resolve_conversation_id
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message
from agentmemory.tokens import TokenCounter


class ContextWindowBuilder:
    """Builds ``ContextWindow``s for one conversation.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid.
        token_counter: counts what is not stored (summary message, truncated copies, an
            explicit system prompt); defaults to ``AGENTMEMORY['TOKEN_COUNTER']``. Stored
            messages are budgeted with their stored counts.
        system_prompt: the agent's system prompt. When given it replaces a stored leading
            system message; otherwise a stored system message at seq 1 is pinned.
        max_tool_result_tokens: cap on one tool result in the copy sent (tokens);
            defaults to ``AGENTMEMORY['MAX_TOOL_RESULT_TOKENS']``; ``None`` disables.
        oversized_message_policy: ``"error"`` (raise ``ContextBudgetExceeded``) or
            ``"truncate"`` (send a marked, truncated copy) when the newest human message
            cannot fit; defaults to ``AGENTMEMORY['OVERSIZED_MESSAGE_POLICY']``.
        pending_tool_calls: what to do with a tool exchange whose calls are not all
            answered: ``"omit"`` leaves it out (``ContextWindow.skipped_pending``),
            ``"placeholder"`` sends it with a placeholder result for each unanswered call
            (``pending_placeholder``; in the copy sent only). Defaults to
            ``AGENTMEMORY['PENDING_TOOL_CALLS']``.

    Tool results are sent right after the AI message that made the call, in the order of its
    ``tool_calls``, wherever they are stored (a result may be stored after later messages).
    """

    _UNSET: Any = object()

    def __init__(
        self,
        conversation: Conversation | int | str | UUID,
        *,
        token_counter: TokenCounter | None = None,
        system_prompt: str | None = None,
        max_tool_result_tokens: int | None = _UNSET,
        oversized_message_policy: str | None = None,
        pending_tool_calls: str | None = None,
    ) -> None:
        conf = app_settings()
        self.conversation_id = resolve_conversation_id(conversation)
        self.token_counter: TokenCounter = token_counter or get_token_counter()
        self.system_prompt = system_prompt
        self.max_tool_result_tokens = (
            conf.MAX_TOOL_RESULT_TOKENS if max_tool_result_tokens is self._UNSET else max_tool_result_tokens
        )
        self.oversized_message_policy = oversized_message_policy or conf.OVERSIZED_MESSAGE_POLICY
        if self.oversized_message_policy not in ("error", "truncate"):
            raise ValueError("oversized_message_policy must be 'error' or 'truncate'")
        self.pending_tool_calls = pending_tool_calls or conf.PENDING_TOOL_CALLS
        if self.pending_tool_calls not in ("omit", "placeholder"):
            raise ValueError("pending_tool_calls must be 'omit' or 'placeholder'")

    def build(self, max_tokens: int | None = None, *, max_messages: int | None = None) -> ContextWindow:
        """Assemble the context window.

        Args:
            max_tokens: budget for everything returned (tokens); defaults to
                ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT`` (10,000).
            max_messages: optional cap on the number of history messages.

        Raises:
            ConversationNotFound: the conversation does not exist (any more).
            ContextBudgetExceeded: the newest human message cannot fit (policy "error").
        """
        if max_tokens is None:
            max_tokens = app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        if max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        if max_messages is not None and max_messages < 0:
            raise ValueError("max_messages must be >= 0")
        counter = self.token_counter
        messages: list[ChatMessage] = []
        system_tokens = 0
        if self.system_prompt is not None:
            pinned_message = ChatMessage.system(self.system_prompt)
            system_tokens = counter.count_message(pinned_message)
            messages.append(pinned_message)
        messages_qs = Message.objects.all()
        # The first page is sized, and its content read, for the budget before the summary
        # and a stored system prompt are taken off: never less than the history can use.
        head = messages_qs.window_head(
            self.conversation_id,
            with_pinned=self.system_prompt is None,
            # Clamped: no window holds 2**31 tokens, and the page-size arithmetic in SQL
            # must stay within 64-bit integers.
            budget=min(max_tokens - system_tokens, MAX_READ),
            max_messages=None if max_messages is None else min(max_messages, MAX_READ),
            max_tool_result_tokens=self.max_tool_result_tokens,
        )
        if head is None:
            raise ConversationNotFound(f"conversation {self.conversation_id} does not exist")
        conv, summary = head.conv, head.summary
        if head.pinned is not None:
            messages.append(head.pinned)
            system_tokens = head.pinned.token_count or 0

        summary_tokens = 0
        if summary is not None:
            summary_message = ChatMessage.system(
                app_settings().SUMMARY_MESSAGE_PREFIX + summary.text, metadata={"summary_id": summary.pk}
            )
            summary_tokens = (
                summary.token_count
                if summary.token_counter == counter.id
                else counter.count_message(summary_message)
            )
            messages.append(summary_message)

        floor_seq = max(summary.through_seq if summary else 0, 1 if conv.has_system_prompt else 0)
        humans_after_floor = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        available = max_tokens - system_tokens - summary_tokens
        if available < 0:
            # The fixed part alone breaks the budget (C1): nothing can be sent.
            raise ContextBudgetExceeded(
                seq=1 if head.pinned is not None else None,
                tokens=system_tokens + summary_tokens,
                available=max_tokens,
                what="the system prompt and summary",
            )
        reader = messages_qs.window_tail(
            conv.pk,
            floor_seq,
            head.page_size,
            first_rows=head.page,
            content_budget=available,
            max_tool_result_tokens=self.max_tool_result_tokens,
        )
        packed = pack_history(
            reader,
            budget=available,
            max_messages=max_messages,
            max_tool_result_tokens=self.max_tool_result_tokens,
            truncate_oversized_human=self.oversized_message_policy == "truncate",
            placeholder_tokens=(
                (lambda call: counter.count_message(pending_placeholder(call["id"], call.get("name", ""))))
                if self.pending_tool_calls == "placeholder"
                else None
            ),
        )

        has_human = any(unit[0].role == Role.HUMAN for unit in packed.units)
        if not has_human and humans_after_floor > 0 and (max_messages is None or max_messages > 0):
            blocked_seq, blocked_tokens = packed.blocked or (None, 0)
            if packed.blocked_by_count:
                raise ContextBudgetExceeded(
                    seq=blocked_seq,
                    tokens=blocked_tokens,
                    available=packed.available_at_block,
                    message=f"the newest turn needs more than max_messages={max_messages} messages "
                    f"(its unit from seq={blocked_seq} does not fit); raise max_messages",
                )
            raise ContextBudgetExceeded(
                seq=blocked_seq, tokens=blocked_tokens, available=packed.available_at_block
            )
        truncate_newest = packed.truncate

        rows = packed.rows
        contents = reader.contents
        missing = [r.seq for r in rows if r.seq not in contents and not r.placeholder]
        if missing:
            # Rows past the running budget (skipped orphans before them, or the oversized
            # newest human message taken truncated) were read without their content.
            contents.update(messages_qs.window_contents(conv.pk, missing))

        history: list[ChatMessage] = []
        history_tokens = 0
        truncated: list[int] = []
        cap = self.max_tool_result_tokens
        for row in rows:
            if row.placeholder:
                placeholder = pending_placeholder(row.tool_call_id, row.name)
                history.append(_replace(placeholder, token_count=row.token_count))
                history_tokens += row.token_count
                continue
            chat = contents.get(row.seq)
            if chat is None:  # deleted between the reads (conversation cleared)
                continue
            tokens = chat.token_count or 0
            if truncate_newest and row.seq == truncate_newest[0]:
                chat = truncate_message(chat, truncate_newest[1], counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            elif cap is not None and row.role == Role.TOOL and tokens > cap:
                chat = truncate_message(chat, cap, counter)
                tokens = counter.count_message(chat)
                truncated.append(row.seq)
            history.append(chat)
            history_tokens += tokens
        messages.extend(history)
        seqs = [m.seq for m in history if m.seq is not None]

        window = ContextWindow(
            messages=messages,
            max_tokens=max_tokens,
            system_tokens=system_tokens,
            summary_tokens=summary_tokens,
            history_tokens=history_tokens,
            # Parallel results are sent in call order, not seq order: take min and max.
            first_seq=min(seqs) if seqs else None,
            last_seq=max(seqs) if seqs else None,
            summary_id=summary.pk if summary else None,
            summary_through_seq=summary.through_seq if summary else None,
            skipped_orphans=tuple(sorted(packed.skipped_orphans)),
            skipped_pending=tuple(sorted(packed.skipped_pending)),
            skipped_late=tuple(packed.skipped_late),
            placeholders=tuple(packed.placeholders),
            truncated=tuple(truncated),
            rows_read=reader.rows_read,
        )
        signals.context_built.send(sender=ContextWindowBuilder, conversation_id=conv.pk, window=window)
        return window

    async def abuild(
        self, max_tokens: int | None = None, *, max_messages: int | None = None
    ) -> ContextWindow:
        """``build`` for async code: the ORM work runs in a worker thread, never on the event
        loop (bug report langchain-ai/langchain#23716)."""
        return await sync_to_async(self.build)(max_tokens, max_messages=max_messages)
