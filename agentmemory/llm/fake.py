"""Test doubles for the ``ChatModel`` protocol: ``ScriptedChatModel`` replays a fixed script."""

from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from agentmemory.exceptions import PermanentLLMError
from agentmemory.llm.base import ChatResponse
from agentmemory.messages import ChatMessage, Role

__all__ = ["ScriptItem", "ScriptedChatModel"]

ScriptItem: TypeAlias = (
    str
    | ChatMessage
    | ChatResponse
    | BaseException
    | type[BaseException]
    | Callable[[list[ChatMessage]], Any]
)

# A callable may return another callable; stop after this many hops (a script bug, not a feature).
_MAX_CALLABLE_DEPTH = 10


class ScriptedChatModel:
    """A ``ChatModel`` that answers each call with the next item of a script.

    Args:
        script: items consumed one per ``invoke``/``ainvoke`` call, in order:

            - ``str``: an ``ai`` text reply;
            - ``ChatMessage``: returned unchanged inside a ``ChatResponse`` (must be an ``ai``
              message; ``finish_reason`` is ``"tool_calls"`` when it calls tools, else ``"stop"``);
            - ``ChatResponse``: returned unchanged;
            - an exception instance (or class): raised, e.g. ``TransientLLMError("429")``;
            - a callable: called with the call's messages (a list of ``ChatMessage``); its
              result (possibly awaited in ``ainvoke``) is treated like an item.
        model_name: reported as ``model_name`` and as ``ChatResponse.model``.

    Attributes:
        calls: one ``(messages, tools)`` tuple per call, in call order: ``messages`` a list of
            ``ChatMessage``, ``tools`` a list of declarations or ``None``. Recorded even when the
            item raises.

    Raises (from ``invoke``/``ainvoke``):
        PermanentLLMError: ``"script exhausted"`` when a call arrives after the last item, naming how
            many calls were answered; whatever exception the script holds.
        TypeError: an item of an unsupported type, or a ``ChatMessage`` that is not ``ai``.

    Thread-safe: items are taken under a lock, so concurrent callers (Celery eager mode,
    threads) each get a distinct item; callables run outside the lock.
    """

    def __init__(self, script: Iterable[ScriptItem] = (), *, model_name: str = "scripted") -> None:
        self.model_name = model_name
        self._script: deque[ScriptItem] = deque(script)
        self.calls: list[tuple[list[ChatMessage], list[Mapping[str, Any]] | None]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedChatModel(model_name={self.model_name!r}, remaining={self.remaining})"

    @property
    def remaining(self) -> int:
        """How many script items are left."""
        with self._lock:
            return len(self._script)

    def add(self, *items: ScriptItem) -> None:
        """Append items to the end of the script."""
        with self._lock:
            self._script.extend(items)

    def _next(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[ScriptItem, list[ChatMessage]]:
        recorded = list(messages)
        with self._lock:
            self.calls.append((recorded, list(tools) if tools is not None else None))
            if not self._script:
                raise PermanentLLMError(
                    f"ScriptedChatModel {self.model_name!r}: script exhausted after "
                    f"{len(self.calls) - 1} call(s); add more items to the script"
                )
            return self._script.popleft(), recorded

    def _response(self, item: Any) -> ChatResponse:
        if isinstance(item, ChatResponse):
            return item
        if isinstance(item, str):
            item = ChatMessage.ai(item)
        if isinstance(item, ChatMessage):
            if item.role != Role.AI:
                raise TypeError(f"a scripted ChatMessage must have role 'ai', not {item.role!r}")
            finish_reason = "tool_calls" if item.tool_calls else "stop"
            return ChatResponse(message=item, model=self.model_name, finish_reason=finish_reason)
        raise TypeError(
            "a script item must be a str, ChatMessage, ChatResponse, exception or callable, "
            f"not {type(item).__name__}"
        )

    @staticmethod
    def _raise_if_exception(item: Any) -> None:
        if isinstance(item, BaseException) or (isinstance(item, type) and issubclass(item, BaseException)):
            raise item

    def invoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Record the call and answer with the next script item (see the class docstring)."""
        item, recorded = self._next(messages, tools)
        for _ in range(_MAX_CALLABLE_DEPTH):
            self._raise_if_exception(item)
            if not callable(item):
                return self._response(item)
            item = item(list(recorded))
            if inspect.isawaitable(item):
                closer = getattr(item, "close", None)
                if closer is not None:
                    closer()
                raise TypeError("an async script callable can only be used through ainvoke")
        raise TypeError(f"script callables nested more than {_MAX_CALLABLE_DEPTH} deep")

    async def ainvoke(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResponse:
        """Async ``invoke``; callables may be ``async`` (their result is awaited)."""
        item, recorded = self._next(messages, tools)
        for _ in range(_MAX_CALLABLE_DEPTH):
            self._raise_if_exception(item)
            if not callable(item):
                return self._response(item)
            item = item(list(recorded))
            if inspect.isawaitable(item):
                item = await item
        raise TypeError(f"script callables nested more than {_MAX_CALLABLE_DEPTH} deep")
