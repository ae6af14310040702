"""The memory block of a window: what the conversation owner's past conversations and facts
hold about the turn, sent as one system message after the summary (``memory_recall=True``).

``MemoryBlock`` is the part of ``ContextWindowBuilder`` that adds it: the window is built
within the budget less the block's share (``MEMORY_RECALL_SHARE``), then the block is recalled
(``agentmemory.recall.memory.recall_memory``, connected in ``agentmemory.context.hooks``: the
recall composes message search and knowledge facts, layers above the window) and put in what
the window leaves. ``turn_query`` says what is recalled, ``memory_message`` how the block is
sent (also rebuilt from a recorded call by ``agentmemory.calls``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from django.db import connections, router

from agentmemory import signals
from agentmemory.conf import app_settings
from agentmemory.context import hooks
from agentmemory.context.window import MEMORY_BLOCK_KEY, ContextWindow
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import PART_SEPARATOR, ChatMessage, PartKind, Role
from agentmemory.models import Conversation, Message
from agentmemory.recall.text import bounded_query, said_keys, said_within, word_keys

if TYPE_CHECKING:
    from agentmemory.tokens import TokenCounter

    class _Builder(Protocol):
        """What ``MemoryBlock``'s methods use of ``ContextWindowBuilder``."""

        _UNSET: Any
        _memory_owner: Any
        _summary_to_share: int

        @property
        def signal_sender(self) -> type: ...

        @property
        def _conversation(self) -> Any: ...
        @property
        def conversation_id(self) -> int: ...
        @property
        def memory_recall(self) -> bool: ...
        @property
        def memory_query(self) -> str | None: ...
        @property
        def memory_agent_key(self) -> str | None: ...
        @property
        def memory_namespace(self) -> str | None: ...
        @property
        def memory_exclude_fact_ids(self) -> tuple[int, ...]: ...
        @property
        def memory_said_in(self) -> tuple[str, ...]: ...
        @property
        def system_prompt(self) -> str | None: ...
        def _said_beside(self, window: ContextWindow) -> list[str]: ...
        @property
        def token_counter(self) -> TokenCounter: ...
        def _owner_id(self) -> Any: ...
        def add_memory_block(self, window: ContextWindow) -> ContextWindow: ...
        def _insert_memory(
            self, window: ContextWindow, block: Any, room: int | None = None
        ) -> ContextWindow: ...
        def _with_memory(
            self,
            max_tokens: int,
            max_messages: int | None,
            window_of: Callable[[int, int | None], ContextWindow],
        ) -> ContextWindow: ...
        def _with_memory_within(
            self,
            max_tokens: int,
            max_messages: int | None,
            window_of: Callable[[int, int | None], ContextWindow],
        ) -> ContextWindow: ...


__all__ = [
    "MEMORY_QUERY_MAX_CHARS",
    "MEMORY_QUERY_PART_CHARS",
    "MemoryBlock",
    "memory_message",
    "transaction_savepoint",
    "turn_query",
]

logger = logging.getLogger("agentmemory.context")


#: longest recall query made from the turn (characters): the newest human message comes
#: first and is kept whole up to this length (a longer one gives its questions, then its
#: opening: ``recall.text.bounded_query``); the turn's tool calls and results after it fill
#: the rest, each result cut to ``MEMORY_QUERY_PART_CHARS``
MEMORY_QUERY_MAX_CHARS = 2_000


MEMORY_QUERY_PART_CHARS = 300


def _words_of(message: ChatMessage) -> str:
    """What ``message`` says in words: its text, or for a message of parts the texts of its
    text parts only (not the placeholders of its images or audio, "[image]")."""
    if message.parts:
        return PART_SEPARATOR.join(
            p.text.strip() for p in message.parts if p.kind is PartKind.TEXT and p.text.strip()
        )
    return message.text.strip()


def _texts_sent(window: ContextWindow) -> list[str]:
    """The texts of the history messages ``window`` sends whole (each text part of a message
    of parts on its own; not its truncated copies, whose cut part may be what a fact says):
    a fact one of them says is not repeated in the memory block (``recall.text.said_keys``)."""
    texts: list[str] = []
    for message in window.history:
        if message.seq not in window.truncated:
            texts.extend(_texts_of(message))
    return texts


def _texts_of(message: ChatMessage) -> list[str]:
    """The texts of ``message``: each text part of a message of parts on its own, else its
    text (none when it has none)."""
    if message.parts:
        return [p.text for p in message.parts if p.kind is PartKind.TEXT and p.text]
    return [message.text] if message.text else []


def _texts_beside(window: ContextWindow, *, prompt_given: bool, said_in: Sequence[str]) -> list[str]:
    """The texts sent before ``window``'s history that record what was said: ``said_in`` (an
    agent's knowledge block, ``ContextWindowBuilder(memory_said_in=...)``) and the summary,
    as sent (a cut summary as cut). A message one of them says word for word is not repeated
    in the memory block (``recall_memory``'s ``exclude_said_in``). The system prompt, given
    (``prompt_given``: the first message) or stored (pinned messages, which have a seq), is
    the developer's instructions: a past message it happens to quote, as an example of what
    users write, was left out of the block, and the model never learnt that the user said
    it (and reading the words of a prompt of 1 MB took 0.1-0.3 s a call)."""
    texts = [text for text in said_in if text]
    for index, message in enumerate(window.messages):
        if message.role is not Role.SYSTEM:
            break
        if (
            (index == 0 and prompt_given)
            or message.seq is not None
            or MEMORY_BLOCK_KEY in (message.metadata or {})
        ):
            continue
        texts.extend(_texts_of(message))
    return texts


def _block_repeats(block: Any, texts: Sequence[str]) -> bool:
    """Whether a message line of ``block`` (a ``MemoryBlock``) is said word for word by one
    of ``texts`` (``said_within``), as ``recall_memory``'s ``exclude_said_in`` would have
    left it out: a window built again with more room, its summary whole, may send it now."""
    said = word_keys(texts)
    if not said:
        return False
    for item in block.items:
        if item.kind != "message":
            continue
        for row in item.text.splitlines():
            if row.startswith("["):
                continue  # a heading; a gap mark has no words
            _speaker, sep, text = row.partition(": ")
            if sep and said_within(said, text):
                return True
    return False


def turn_query(history: Sequence[ChatMessage]) -> str:
    """The recall query of a window: the text of its newest human message (when longer than
    ``MEMORY_QUERY_MAX_CHARS``, what it asks first, then its opening), then what the turn
    did after it (the AI messages' text, the names and arguments of their tool calls,
    the tool results), at most ``MEMORY_QUERY_MAX_CHARS`` characters; ``""`` when the
    history holds no human message. A message of parts gives the text of its text parts only:
    an image-only question with nothing after it gives ``""`` (no recall), not "[image]".
    Pure: reads nothing.

    Args:
        history: ``ContextWindow.history`` (oldest first).
    """
    start = None
    for index in range(len(history) - 1, -1, -1):
        if history[index].role is Role.HUMAN:
            start = index
            break
    if start is None:
        return ""
    # a long message is read by what it asks first (a question after a pasted text)
    parts = [bounded_query(_words_of(history[start]), MEMORY_QUERY_MAX_CHARS)]
    for message in history[start + 1 :]:
        if message.role is Role.AI:
            if message.text.strip():
                parts.append(message.text.strip()[:MEMORY_QUERY_PART_CHARS])
            for call in message.tool_calls:
                arguments = json.dumps(dict(call.arguments), ensure_ascii=False)
                parts.append(f"{call.name} {arguments}"[:MEMORY_QUERY_PART_CHARS])
        elif message.role is Role.TOOL and message.text.strip():
            parts.append(message.text.strip()[:MEMORY_QUERY_PART_CHARS])
    return "\n".join(part for part in parts if part)[:MEMORY_QUERY_MAX_CHARS]


def transaction_savepoint(alias: str) -> Any:
    """A savepoint on ``alias`` when a transaction is open there (a failed statement then
    rolls back to it and the transaction goes on), else nothing: no statement is added."""
    from django.db import transaction

    return transaction.atomic(using=alias) if connections[alias].in_atomic_block else nullcontext()


def memory_message(text: str, items: int) -> ChatMessage:
    """The system message that carries a memory block's ``text``, marked with
    ``MEMORY_BLOCK_KEY`` (its value: the number of recalled ``items``)."""
    return ChatMessage.system(text, metadata={MEMORY_BLOCK_KEY: items})


class MemoryBlock:
    """The memory block and the end of a build (``complete``), mixed into
    ``ContextWindowBuilder``; every method runs on the builder."""

    #: the sender of ``context_built``: ``ContextWindowBuilder``, for its subclasses too
    signal_sender: ClassVar[type]
    #: the request's budget (tokens) while ``_with_memory`` builds a window the block is to
    #: join, else 0: a summary longer than a summary made for that budget may be
    #: (``summary_token_budget``) is then sent cut to that length even when no stored message
    #: is left out (``ContextWindowBuilder.fit``), the rest going to the block
    _summary_to_share: int = 0

    def complete(
        self: _Builder,
        max_tokens: int,
        max_messages: int | None,
        window_of: Callable[[int, int | None], ContextWindow],
    ) -> ContextWindow:
        """The window ``window_of(max_tokens, max_messages)`` makes (``_window``, or the
        closing step's), with the memory block when ``memory_recall``; sends
        ``context_built``."""
        if self.memory_recall:
            window = self._with_memory(max_tokens, max_messages, window_of)
        else:
            window = window_of(max_tokens, max_messages)
        signals.context_built.send(
            sender=self.signal_sender, conversation_id=self.conversation_id, window=window
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "context window of conversation %s: %s tokens (%s of memory), %s rows read, "
                "%s messages uncovered",
                self.conversation_id,
                window.total_tokens,
                window.memory_tokens,
                window.rows_read,
                window.uncovered.count,
                extra={
                    "context": {
                        "conversation_id": self.conversation_id,
                        "tokens": window.total_tokens,
                        "max_tokens": window.max_tokens,
                        "messages": len(window.messages),
                        "rows_read": window.rows_read,
                        "uncovered": window.uncovered.count,
                        "uncovered_tokens": window.uncovered.tokens,
                        "memory_tokens": window.memory_tokens,
                        "memory_items": len(window.memory.items) if window.memory is not None else 0,
                    }
                },
            )
        return window

    def _with_memory(
        self: _Builder,
        max_tokens: int,
        max_messages: int | None,
        window_of: Callable[[int, int | None], ContextWindow],
    ) -> ContextWindow:
        """The window built within ``max_tokens`` less the memory block's share
        (``MEMORY_RECALL_SHARE``), or within the whole budget when the turn in progress does
        not fit in less, then the memory block in what is left (``add_memory_block``). A summary
        longer than a summary made for ``max_tokens`` may be (``summary_token_budget``: one
        made for a larger window) is sent cut to that length, so that the block, which
        recalls what the summary folded for the turn at hand, gets the rest. When that window
        leaves messages out or cuts the summary and the block takes less than its share (or
        does not come), the window is built again within ``max_tokens`` less the block's
        tokens (the summary whole when it fits there; the block kept unless that window
        sends messages it shows): one more window read.

        Measured (docs/benchmarks.md, LoCoMo asked in the stored conversation at 2,000
        tokens): the evidence in the request rose from 0.794 to 0.813 (full text) and from
        0.836 to 0.847 (with the local embedder).

        When the turn does not fit in the budget less the share, the window is built within
        the whole budget, its summary still cut to its share, and built again the same way
        when the block takes less than its share."""
        self._summary_to_share = max_tokens
        try:
            return self._with_memory_within(max_tokens, max_messages, window_of)
        finally:
            self._summary_to_share = 0

    def _with_memory_within(
        self: _Builder,
        max_tokens: int,
        max_messages: int | None,
        window_of: Callable[[int, int | None], ContextWindow],
    ) -> ContextWindow:
        """``_with_memory``'s steps, run while ``_summary_to_share`` is set."""
        reserved = int(max_tokens * app_settings().MEMORY_RECALL_SHARE)
        window = None
        if 0 < reserved < max_tokens:
            try:
                window = window_of(max_tokens - reserved, max_messages)
            except ContextBudgetExceeded:
                window = None  # the turn needs the block's share too: the block gets what is left
        whole = window is None
        if window is None:
            window = window_of(max_tokens, max_messages)
        sent = self.add_memory_block(replace(window, max_tokens=max_tokens))
        # Within the whole budget the summary is still cut to its share for the block: when
        # the block then takes less (or fails), the summary has that room back below. What
        # such a window leaves out is not the block's doing and is not built again for.
        cut = "summary" in window.truncated or (not whole and bool(window.uncovered))
        if not cut or sent.memory_tokens >= reserved:
            return sent
        # The block took less than its share (or did not come) while the window left history
        # out or cut the summary: the window is built again within what the block took, so
        # that the share is not lost, and keeps the block unless the wider window now sends
        # what the block shows (a message it holds, or the message a fact of it was taken
        # from). The summary has that room back: whole when it fits.
        self._summary_to_share = 0
        try:
            wider = replace(window_of(max_tokens - sent.memory_tokens, max_messages), max_tokens=max_tokens)
        except ContextBudgetExceeded:
            return sent
        if sent.memory is None:
            return wider
        seqs = {m.seq for m in wider.messages if m.seq is not None}
        sent_whole = {m.id for m in wider.messages if m.id is not None and m.seq not in wider.truncated}
        facts = any(i.kind == "fact" for i in sent.memory.items)
        said = set().union(*map(said_keys, _texts_sent(wider))) if facts else set()
        if any(
            (i.conversation_id == self.conversation_id and seqs & set(i.seqs))
            or i.source_message_id in sent_whole
            or (i.kind == "fact" and i.words in said)
            for i in sent.memory.items
        ) or _block_repeats(sent.memory, self._said_beside(wider)):
            return sent
        return self._insert_memory(wider, sent.memory)

    def _said_beside(self: _Builder, window: ContextWindow) -> list[str]:
        """``_texts_beside`` of ``window`` as this builder sends it."""
        return _texts_beside(window, prompt_given=self.system_prompt is not None, said_in=self.memory_said_in)

    def _owner_id(self: _Builder) -> Any:
        """Primary key of the conversation's owner (``None``: no owner), read once per
        builder: from the ``Conversation`` given, else with one query."""
        if self._memory_owner is self._UNSET:
            conversation = self._conversation
            if isinstance(conversation, Conversation):
                self._memory_owner = conversation.owner_id
            else:
                self._memory_owner = (
                    Conversation.objects.using(router.db_for_read(Conversation))
                    .filter(pk=self.conversation_id)
                    .values_list("owner_id", flat=True)
                    .first()
                )
        return self._memory_owner

    def add_memory_block(self: _Builder, window: ContextWindow) -> ContextWindow:
        """``window`` (one this builder or other code built) with the memory block recalled in
        this builder's scope after its summary, within the tokens the window leaves of its
        ``max_tokens``; ``window`` itself when there is no room, no query, no
        owner, nothing recalled, or the recall failed (logged: the model call goes on without
        the block rather than fail the turn)."""
        room = window.max_tokens - window.total_tokens
        if room <= 0:
            return window
        query = self.memory_query if self.memory_query is not None else turn_query(window.history)
        if not query.strip():
            return window
        owner = self._owner_id()
        if owner is None:
            return window
        recall = hooks.memory_recall()  # agentmemory.recall.memory.recall_memory, connected when ready
        seqs = tuple(m.seq for m in window.messages if m.seq is not None)
        # the messages the window sends whole: a fact taken from one of them says nothing the
        # model does not read. A truncated copy (the oversized newest human message, a capped
        # tool result) may have lost the part the fact was taken from, so its facts stay.
        sent_whole = tuple(
            m.id for m in window.messages if m.id is not None and m.seq not in window.truncated
        )
        # and their texts: a fact stored without a source message (a host's own remember(),
        # an import) that one of them says is left out too
        sent_texts = _texts_sent(window)
        alias = router.db_for_read(Message)
        # Inside a transaction a failed statement would abort it: recall in a savepoint.
        guard = transaction_savepoint(alias)
        try:
            with guard:
                block = recall(
                    owner=owner,
                    query=query,
                    max_tokens=room,
                    token_counter=self.token_counter,
                    agent_key=self.memory_agent_key,
                    fact_agent_key=self.memory_agent_key,
                    namespace=self.memory_namespace,
                    conversation_id=self.conversation_id,
                    exclude_seqs=seqs,
                    exclude_fact_ids=self.memory_exclude_fact_ids,
                    exclude_message_ids=sent_whole,
                    exclude_texts=sent_texts,
                    exclude_said_in=self._said_beside(window),
                    using=alias,
                )
        except Exception:
            logger.warning(
                "memory recall failed for conversation %s; the window is sent without a memory block",
                self.conversation_id,
                exc_info=True,
            )
            return window
        if block is None or not block.text:
            return window
        return self._insert_memory(window, block, room)
