"""windlass' ``BufferMemory``, ``WindowMemory`` and ``SummaryMemory`` (seed 002), one stored
conversation per thread id.

    from agentmemory.compat.windlass import BufferMemory, FakeLLM, Message, SummaryMemory, WindowMemory

Every message stays stored; ``max_stored``, ``max_messages`` and ``window`` bound what ``get``
returns, not what is kept. ``clear`` deletes, as the seed's forgets: the thread's
conversation (all of them without ``thread_id``) with its messages and summary.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

from asgiref.sync import sync_to_async
from django.db import router

from agentmemory.compat.store import StoredConversation
from agentmemory.compat.types import Message, Role, ToolCall, from_chat_message, to_chat_message
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import AgentMemoryError, ConversationNotFound
from agentmemory.llm.base import ChatModel, ChatResponse
from agentmemory.llm.structured import without_reasoning
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.validation import text_problem, whole_number

__all__ = [
    "DEFAULT_THREAD",
    "BufferMemory",
    "ConfigurationError",
    "FakeLLM",
    "Message",
    "Role",
    "SummaryMemory",
    "ToolCall",
    "WindowMemory",
]

logger = logging.getLogger(__name__)

#: the thread of calls that name none
DEFAULT_THREAD = "default"
#: ``Conversation.metadata["compat"]`` of the conversations these classes create
KIND = "windlass"
#: the system message that replays a ``SummaryMemory`` summary (the seed's text)
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
#: what ``SummaryMemory`` asks its model for; the seed does not publish its prompt
SUMMARY_INSTRUCTIONS = (
    "You keep a running summary of a conversation. Fold the new messages into the earlier "
    "summary: keep names, facts, preferences, decisions and open questions, drop small talk. "
    "Answer with the summary only, in a few sentences."
)

#: how many times ``add`` starts a thread again when other memories of the owner keep
#: clearing it between the lookup and the append (each attempt is one lookup and one append)
ADD_ATTEMPTS = 5

#: most characters of one message quoted in a summary prompt (the rest is cut, marked "…")
SUMMARY_MESSAGE_CHARS = 4_000
#: most characters of the messages quoted in one summary prompt: the newest are kept, so a
#: fold of a long backlog (up to ``max_stored`` messages of up to ``MAX_MESSAGE_CHARS``) sends
#: a request a model accepts instead of one that fails and is retried on every ``get``
SUMMARY_PROMPT_CHARS = 60_000

T = TypeVar("T")


class ConfigurationError(AgentMemoryError, ValueError):
    """A memory built without something it needs (windlass' ``ConfigurationError``), with a
    ``hint`` saying what to pass."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class FakeLLM:
    """A ``ChatModel`` that answers with canned text, for tests and examples (windlass'
    ``FakeLLM(responses=[...])``): each call takes the next response; once they run out
    the last one is repeated.

    Attributes:
        calls: the messages of each call (a list of ``ChatMessage`` lists), in order.
    """

    model_name = "fake"

    def __init__(self, responses: Sequence[str] = ("ok",)) -> None:
        self.responses = list(responses) or ["ok"]
        self.calls: list[list[ChatMessage]] = []

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        self.calls.append(list(messages))
        text = self.responses[min(len(self.calls), len(self.responses)) - 1]
        return ChatResponse(message=ChatMessage.ai(text), model=self.model_name, finish_reason="stop")

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        return self.invoke(messages, tools=tools)


def _as_list(
    messages: Message | ChatMessage | Iterable[Message | ChatMessage],
) -> list[Message | ChatMessage]:
    if isinstance(messages, Message | ChatMessage):
        return [messages]
    if isinstance(messages, str | bytes | Mapping):
        # iterating would hand on its characters or keys, and the error would name those
        raise TypeError(f"expected a Message or a sequence of them, not {type(messages).__name__}")
    return list(messages)


def _check_thread_id(thread_id: Any) -> str:
    """``thread_id``, checked to be text a database stores (it is kept in
    ``Conversation.metadata``).

    Raises:
        TypeError: not text.
        ValueError: NUL characters or lone surrogates (``text_problem``).
    """
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id must be text, not {type(thread_id).__name__}")
    problem = text_problem(thread_id)
    if problem:
        raise ValueError(f"thread_id {problem}")
    return thread_id


def _check_limit(limit: int | None) -> None:
    """Raises TypeError: ``limit`` is neither None nor a whole number. ValueError: below 0."""
    if limit is not None:
        whole_number(limit, "limit", minimum=0)


def summary_problem(text: str) -> str | None:
    """Why a model's summary cannot be kept, or ``None``: the checks of compaction's
    ``validate`` that apply to any reply (empty, ``text_problem``: NUL characters or lone
    surrogates) and its cap, ``AGENTMEMORY["MAX_SUMMARY_TOKENS"]`` counted by the
    configured token counter (a text over ``MAX_MESSAGE_CHARS`` characters is refused
    without counting)."""
    if not text:
        return "is empty"
    problem = text_problem(text)
    if problem:
        return problem
    conf = app_settings()
    if len(text) > conf.MAX_MESSAGE_CHARS:
        return f"holds {len(text):,} characters, over MAX_MESSAGE_CHARS ({conf.MAX_MESSAGE_CHARS:,})"
    tokens = get_token_counter().count_text(text)
    if tokens > conf.MAX_SUMMARY_TOKENS:
        return f"holds {tokens:,} tokens, over MAX_SUMMARY_TOKENS ({conf.MAX_SUMMARY_TOKENS:,})"
    return None


async def _run(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await sync_to_async(function)(*args, **kwargs)


class BufferMemory:
    """The complete transcript of each thread.

    Args:
        max_messages: at most this many messages are returned by ``get`` (``None``: all).
        max_stored: ``get`` reads at most the newest ``max_stored`` messages of a thread
            (default 1,000). The seed drops older ones to bound a process' memory; here they
            stay stored (bound storage with ``retention_days`` instead), the bound is on
            what is read.
        return_system: ``False`` leaves system messages out of what ``get`` returns.
        owner: the user the threads' conversations belong to. With an owner, a thread id
            names the same conversation for every memory of that owner and agent key (the
            oldest one made for it); without, thread ids are this object's own.
        conversation: an existing conversation to use as the default thread.
        threads: existing conversations to use for the given thread ids.
        agent_key: ``Conversation.agent_key`` of the conversations created; with an owner,
            also the scope of its threads: a memory of another agent key never reads,
            appends to or clears them.
        **config: other options of the seed's base class, kept in ``self.config``.

    Raises:
        TypeError: ``max_messages`` or ``max_stored`` is not a whole number, a thread id is
            not text.
        ValueError: ``max_messages`` or ``max_stored`` below 1 (the seed does not check
            them; a bad value failed at the first ``get``, after messages were stored), a
            thread id holding NUL characters or lone surrogates (also raised by the methods
            taking ``thread_id``).
        ConversationNotFound: ``conversation`` or one of ``threads`` names none.

    Messages are this module's ``Message`` or our ``ChatMessage``; ``get`` returns
    ``Message`` objects, oldest first. Sync methods (``add``, ``get``, ``clear``,
    ``threads``) and async ones (``aadd``, ``aget``, ``aclear``, ``athreads``) do the same.
    """

    def __init__(
        self,
        *,
        max_messages: int | None = None,
        max_stored: int = 1000,
        return_system: bool = True,
        owner: Any = None,
        conversation: Conversation | int | str | UUID | None = None,
        threads: Mapping[str, Conversation | int | str | UUID] | None = None,
        agent_key: str = "",
        **config: Any,
    ) -> None:
        if max_messages is not None:
            whole_number(max_messages, "max_messages", minimum=1)
        whole_number(max_stored, "max_stored", minimum=1)
        self.max_messages = max_messages
        self.max_stored = max_stored
        self.return_system = return_system
        self.owner = owner
        self.agent_key = agent_key
        self.config = config
        self._threads: dict[str, StoredConversation] = {}
        self._lock = threading.RLock()
        if conversation is not None:
            self._threads[DEFAULT_THREAD] = StoredConversation(conversation)
        for thread_id, attached in (threads or {}).items():
            self._threads[_check_thread_id(thread_id)] = StoredConversation(attached)
        # threads given a conversation of the caller's: never replaced by a new one
        self._attached = frozenset(self._threads)

    # -- threads ------------------------------------------------------------------------

    def _owned(self, *, write: bool = False) -> Any:
        """The owner's conversations made by these classes for this memory's agent key (exact,
        as every scope: memories of one owner made for two agent keys never read, append to
        or clear each other's threads)."""
        using = router.db_for_write(Conversation) if write else router.db_for_read(Conversation)
        return Conversation.objects.using(using).filter(
            owner=self.owner, agent_key=self.agent_key, metadata__compat=KIND
        )

    def _thread(self, thread_id: str) -> StoredConversation:
        """The stored conversation of ``thread_id`` (not created until written to)."""
        _check_thread_id(thread_id)
        with self._lock:
            stored = self._threads.get(thread_id)
            if stored is None:
                found = None
                if self.owner is not None:
                    found = self._owned().filter(metadata__thread_id=thread_id).order_by("pk").first()
                stored = StoredConversation(
                    found,
                    owner=self.owner,
                    agent_key=self.agent_key,
                    metadata={"compat": KIND, "thread_id": thread_id},
                    find=None if self.owner is None else lambda: self._oldest(thread_id),
                    lock_key="\0".join(
                        (
                            "windlass",
                            str(getattr(self.owner, "pk", self.owner)),
                            str(self.agent_key),
                            thread_id,
                        )
                    ),
                )
                self._threads[thread_id] = stored
            return stored

    def _oldest(self, thread_id: str) -> Conversation | None:
        """The owner's first conversation for ``thread_id``, read on the primary."""
        return self._owned(write=True).filter(metadata__thread_id=thread_id).order_by("pk").first()

    def conversation_for(self, thread_id: str = DEFAULT_THREAD) -> Conversation:
        """The conversation of ``thread_id`` (created now if the thread holds nothing yet)."""
        return self._thread(thread_id).conversation

    def _retained(self, thread_id: str, needed: int | None = None) -> list[Message]:
        """The newest ``max_stored`` messages of the thread (fewer when only the newest
        ``needed`` can matter), oldest first."""
        limit = self.max_stored if needed is None else min(self.max_stored, needed)
        return [from_chat_message(m) for m in self._thread(thread_id).newest(limit)]

    def _filter(self, messages: list[Message], limit: int | None) -> list[Message]:
        if not self.return_system:
            messages = [m for m in messages if m.role != Role.SYSTEM]
        size = limit if limit is not None else self.max_messages
        return messages[-size:] if size else messages

    # -- the seed's methods -------------------------------------------------------------

    def add(
        self,
        messages: Message | ChatMessage | Sequence[Message | ChatMessage],
        *,
        thread_id: str = DEFAULT_THREAD,
    ) -> None:
        """Append messages to a thread, in one stored batch.

        Raises:
            InvalidMessageError: a message our storage cannot hold; nothing is stored.
            ConversationNotFound: the conversation given for the thread (``conversation=``,
                ``threads=``) was deleted; or the thread was cleared by other memories
                ``ADD_ATTEMPTS`` times in a row, each time between this memory's lookup of
                its conversation and the append. A thread this memory created that was
                cleared elsewhere meanwhile is started again.
            TypeError, ValueError: ``thread_id`` is not storable text.
        """
        _check_thread_id(thread_id)
        items = _as_list(messages)
        if not items:
            return
        batch = [to_chat_message(m) for m in items]
        for attempt in range(1, ADD_ATTEMPTS + 1):
            try:
                self._thread(thread_id).append(batch)
                return
            except ConversationNotFound:
                # Another memory (another process) cleared the thread since this one last
                # used it: the thread starts again, as after this memory's own clear().
                if thread_id in self._attached or attempt == ADD_ATTEMPTS:
                    raise
                with self._lock:
                    self._threads.pop(thread_id, None)

    def get(
        self, *, thread_id: str = DEFAULT_THREAD, query: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """The thread's messages, oldest first (the newest ``limit`` or ``max_messages``);
        ``query`` is ignored (recall is recency-based).

        Raises:
            TypeError, ValueError: ``limit`` is not a whole number of at least 0 (0: all), or
                ``thread_id`` is not storable text.
        """
        _check_limit(limit)
        size = limit if limit is not None else self.max_messages
        needed = size if size and self.return_system else None
        return self._filter(self._retained(thread_id, needed), limit)

    def clear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or all of them: their conversations are deleted with their
        messages (all of the owner's threads of these classes for this agent key when there
        is an owner)."""
        with self._lock:
            if thread_id is not None:
                self._thread(thread_id).delete()
                self._threads.pop(thread_id, None)
                return
            for stored in self._threads.values():
                stored.delete()
            self._threads.clear()
        if self.owner is not None:
            self._owned(write=True).delete()

    def threads(self) -> list[str]:
        """The known thread ids (those holding a conversation), sorted."""
        known = {thread_id for thread_id, stored in self._threads.items() if stored.exists}
        if self.owner is not None:
            known.update(
                t for t in self._owned().values_list("metadata__thread_id", flat=True) if t is not None
            )
        return sorted(known)

    async def aadd(
        self,
        messages: Message | ChatMessage | Sequence[Message | ChatMessage],
        *,
        thread_id: str = DEFAULT_THREAD,
    ) -> None:
        """Append messages to a thread."""
        await _run(self.add, messages, thread_id=thread_id)

    async def aget(
        self, *, thread_id: str = DEFAULT_THREAD, query: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """Return the thread's messages, oldest first."""
        return await _run(self.get, thread_id=thread_id, query=query, limit=limit)

    async def aclear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or all of them."""
        await _run(self.clear, thread_id=thread_id)

    async def athreads(self) -> list[str]:
        """Return the known thread ids."""
        return await _run(self.threads)


class WindowMemory(BufferMemory):
    """A sliding window of the ``window`` most recent messages, widened so it never starts
    on a tool result whose call it would leave out (some providers reject such a
    transcript).

    Args:
        window: how many messages to return, counted in messages, not turns.
        **config: as for ``BufferMemory`` (``max_messages`` is ignored).

    Raises:
        TypeError: ``window`` is not a whole number.
        ValueError: ``window`` is not positive.
    """

    def __init__(self, *, window: int = 20, **config: Any) -> None:
        if whole_number(window, "window") <= 0:
            raise ValueError("window must be positive")
        config.pop("max_messages", None)
        super().__init__(max_messages=window, **config)
        self.window = window

    def get(
        self, *, thread_id: str = DEFAULT_THREAD, query: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """The most recent messages, keeping tool pairs intact (``limit``: as for
        ``BufferMemory.get``)."""
        _check_limit(limit)
        size = limit if limit is not None else self.window
        messages = self._retained(thread_id, None if size <= 0 or not self.return_system else size + 1)
        if not self.return_system:
            messages = [m for m in messages if m.role != Role.SYSTEM]
        elif size > 0 and len(messages) > size and messages[len(messages) - size].role == Role.TOOL:
            # The walk back below may pass the rows read: read every retained message.
            messages = self._retained(thread_id)
        if size <= 0 or len(messages) <= size:
            return messages
        start = len(messages) - size
        while start > 0 and messages[start].role == Role.TOOL:
            start -= 1
        return messages[start:]


class SummaryMemory(BufferMemory):
    """Recent messages verbatim and a running summary of everything older, replayed as a
    system message first.

    Args:
        llm: the ``ChatModel`` that writes summaries (a small, cheap one).
        window: how many recent messages to return verbatim (0: the summary alone).
        summarize_every: summarise once this many messages have fallen out of the window
            and are not in the summary yet (at least 1), so the model is not called on
            every turn.
        **config: as for ``BufferMemory`` (``max_messages`` is ignored).

    Raises:
        ConfigurationError: no ``llm``.
        TypeError: ``llm`` is not a ``ChatModel`` (no ``invoke``), ``window`` or
            ``summarize_every`` is not a whole number.
        ValueError: ``window`` below 0. A ``summarize_every`` below 1 is taken as 1, as
            the seed takes it.

    The model is called inline during ``get``; a failure is logged and skipped (the memory
    works as a plain window and tries again on the next ``get``). A reply that cannot be
    kept is such a failure: refused or cut off at the output limit (the provider's finish
    reason), empty, holding NUL characters or lone surrogates, or longer than
    ``AGENTMEMORY["MAX_SUMMARY_TOKENS"]`` (``summary_problem``, the checks and the cap of
    compaction's summaries). A reasoning block opening the reply (``<think>...</think>``)
    is left out of the summary (``agentmemory.llm.structured.without_reasoning``). The
    summary and the seq it reaches are kept in the thread's ``Conversation.metadata``.
    """

    def __init__(
        self, *, llm: ChatModel | None = None, window: int = 10, summarize_every: int = 6, **config: Any
    ) -> None:
        if llm is None:
            raise ConfigurationError(
                "Summary memory needs a language model.",
                hint="Pass llm=agentmemory.llm.get_llm() or any ChatModel.",
            )
        if not callable(getattr(llm, "invoke", None)):
            raise TypeError(f"llm must be a ChatModel (with an invoke method), not {type(llm).__name__}")
        whole_number(window, "window", minimum=0)
        # the seed's own rule: ``max(1, summarize_every)``, so code written for it runs here
        whole_number(summarize_every, "summarize_every")
        config.pop("max_messages", None)
        super().__init__(max_messages=None, **config)
        self.llm = llm
        self.window = window
        self.summarize_every = max(1, summarize_every)

    def get(
        self, *, thread_id: str = DEFAULT_THREAD, query: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """A summary message (when there is a summary) followed by the recent window
        (``limit``: its size instead of ``window``)."""
        _check_limit(limit)
        stored = self._thread(thread_id)
        messages = self._retained(thread_id)
        state = stored.state()
        through = state.get("through_seq", 0)
        if not self.return_system:
            messages = [m for m in messages if m.role != Role.SYSTEM]
        size = limit if limit is not None else self.window
        overflow = [m for m in messages[: max(0, len(messages) - size)] if (m.seq or 0) > through]
        summary = state.get("summary", "")
        if len(overflow) >= self.summarize_every:
            summary = self._fold(stored, summary, overflow) or summary
        recent = messages[-size:] if size > 0 else []
        while len(recent) > 1 and recent[0].role == Role.TOOL:
            recent = recent[1:]
        if summary:
            return [Message.system(f"{SUMMARY_PREFIX}{summary}"), *recent]
        return recent

    def _fold(self, stored: StoredConversation, summary: str, overflow: list[Message]) -> str | None:
        """Ask the model for a summary of ``summary`` and ``overflow``; store and return it,
        or log the failure and return ``None``."""
        lines: list[str] = []
        room = SUMMARY_PROMPT_CHARS
        for m in reversed(overflow):
            content = (
                m.content
                if len(m.content) <= SUMMARY_MESSAGE_CHARS
                else m.content[:SUMMARY_MESSAGE_CHARS] + "…"
            )
            line = f"{m.role.value}: {content}"
            if len(line) > room:
                break
            lines.append(line)
            room -= len(line) + 1
        transcript = "\n".join(reversed(lines))
        prompt = f"Earlier summary:\n{summary or '(none)'}\n\nNew messages:\n{transcript}"
        try:
            response = self.llm.invoke([ChatMessage.system(SUMMARY_INSTRUCTIONS), ChatMessage.human(prompt)])
            text = without_reasoning(response.message.text)
        except Exception:
            logger.warning(
                "summarising %d messages failed; the window is used alone", len(overflow), exc_info=True
            )
            return None
        # as compaction's summariser: a refused or cut-off reply is known from the provider's
        # finish reason, and is no summary whatever its text says
        if response.refused:
            problem: str | None = f"was refused (finish reason {response.finish_reason!r})"
        elif response.cut_off:
            problem = f"was cut off at the model's output limit (finish reason {response.finish_reason!r})"
        else:
            problem = summary_problem(text)
        if problem:
            logger.warning(
                "the summary of %d messages %s; it is not kept and the window is used alone",
                len(overflow),
                problem,
            )
            return None
        stored.update_state(summary=text, through_seq=overflow[-1].seq)
        return text

    def summary(self, thread_id: str = DEFAULT_THREAD) -> str:
        """The current summary of a thread, or ``""``."""
        return str(self._thread(thread_id).state().get("summary", ""))
