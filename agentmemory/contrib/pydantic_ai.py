"""pydantic-ai messages on agentmemory conversations (``pip install "django-agentmemory[pydantic-ai]"``).

Converters between pydantic-ai's ``ModelMessage`` lists (``pydantic_ai.messages``:
``ModelRequest`` and ``ModelResponse`` with their parts) and agentmemory's ``ChatMessage``,
and a history processor that hands a pydantic-ai ``Agent`` the context window that
``ContextWindowBuilder`` builds from a stored conversation::

    from pydantic_ai import Agent
    from agentmemory.contrib.pydantic_ai import ContextWindowProcessor, from_pydantic_ai
    from agentmemory.history import PersistentChatHistory

    agent = Agent(
        model,
        instructions="You answer questions about orders.",
        capabilities=[ContextWindowProcessor(max_tokens=8_000).capability()],
    )
    result = await agent.run("Where is my order?", deps=conversation)
    await PersistentChatHistory(conversation).aadd_messages(from_pydantic_ai(result.new_messages()))

Mapping, request side (a ``ModelRequest``'s parts, each one message, in order):
``SystemPromptPart`` -> system message; ``UserPromptPart`` -> human message (text, and
``ImageUrl``, ``DocumentUrl``, ``BinaryContent`` images, audio and documents as content
parts; ``AudioUrl`` and ``VideoUrl``, which agentmemory stores no part for, as their URL in
brackets); ``ToolReturnPart`` -> tool result (content that is not text as JSON; an outcome
other than ``success`` in ``metadata["pydantic_ai_outcome"]``, ``failed`` and ``retried``
also as ``metadata["is_error"]``); ``RetryPromptPart`` with a tool -> an error tool result
(outcome ``retried``); ``RetryPromptPart`` without a tool and ``RetryFeedbackPart`` -> a
human message with the retry text (``metadata["pydantic_ai_part"]``). Response side: one
``ModelResponse`` -> one ai message: its ``TextPart``s joined, its ``ToolCallPart``s as tool
calls, its ``ThinkingPart``s in ``metadata["pydantic_ai_thinking"]``, the model name in
``metadata["model"]``; parts of built-in tools run by the provider
(``NativeToolCallPart``, ``NativeToolReturnPart``) and files are kept in
``metadata["pydantic_ai_parts"]`` (storage has no columns for them), never sent back.

``to_pydantic_ai`` groups consecutive system, human and tool messages into one
``ModelRequest`` and makes each ai message a ``ModelResponse``; every message it makes
carries ``metadata["agentmemory_seqs"]`` (the stored seqs it came from), so that
``from_pydantic_ai`` leaves out what is already stored, and the processor replaces, never
repeats, the window it added on an earlier model request of the same run.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Iterable
from typing import Any, Literal
from uuid import UUID

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import (
        AudioUrl,
        BinaryContent,
        DocumentUrl,
        ImageUrl,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
        VideoUrl,
    )
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "agentmemory.contrib.pydantic_ai needs the 'pydantic-ai-slim' package; install it with: "
        "pip install 'django-agentmemory[pydantic-ai]'"
    ) from exc

from asgiref.sync import sync_to_async
from pydantic_core import to_jsonable_python

from agentmemory.conf import get_token_counter
from agentmemory.context import ContextWindow, ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded
from agentmemory.messages import RAW_ARGUMENTS_KEY, ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation

__all__ = ["SEQS_KEY", "ContextWindowProcessor", "from_pydantic_ai", "to_pydantic_ai"]

logger = logging.getLogger("agentmemory.contrib.pydantic_ai")

#: metadata key, on messages ``to_pydantic_ai`` makes, of the stored seqs they came from
SEQS_KEY = "agentmemory_seqs"
_ERROR_OUTCOMES = frozenset({"failed", "retried"})
_OUTCOMES: dict[str, Literal["success", "failed", "denied", "interrupted", "retried"]] = {
    "success": "success",
    "failed": "failed",
    "denied": "denied",
    "interrupted": "interrupted",
    "retried": "retried",
}


# -- pydantic-ai -> agentmemory -------------------------------------------------------------


def _user_part(item: Any) -> ContentPart:
    if isinstance(item, str):
        return ContentPart(PartKind.TEXT, text=item)
    if isinstance(item, BinaryContent):
        data = base64.b64encode(item.data).decode()
        if item.is_image:
            kind = PartKind.IMAGE
        elif item.is_audio:
            kind = PartKind.AUDIO
        else:
            kind = PartKind.FILE
        return ContentPart(kind, data=data, mime_type=item.media_type, filename=item.identifier or "")
    if isinstance(item, ImageUrl):
        return ContentPart(PartKind.IMAGE, url=item.url)
    if isinstance(item, DocumentUrl):
        return ContentPart(PartKind.FILE, url=item.url, mime_type=item.media_type or "")
    if isinstance(item, AudioUrl | VideoUrl):
        return ContentPart(PartKind.TEXT, text=f"[{item.kind}: {item.url}]")
    return ContentPart(PartKind.TEXT, text=f"[{type(item).__name__}]")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(to_jsonable_python(content), ensure_ascii=False)


def _request_messages(message: ModelRequest, include_system_prompts: bool) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            if include_system_prompts:
                out.append(ChatMessage.system(part.content))
        elif isinstance(part, UserPromptPart):
            if isinstance(part.content, str):
                out.append(ChatMessage.human(part.content))
            else:
                out.append(ChatMessage.from_parts(Role.HUMAN, [_user_part(item) for item in part.content]))
        elif isinstance(part, ToolReturnPart):
            metadata: dict[str, Any] = {}
            if part.outcome != "success":
                metadata["pydantic_ai_outcome"] = part.outcome
                if part.outcome in _ERROR_OUTCOMES:
                    metadata["is_error"] = True
            out.append(
                ChatMessage.tool(
                    _text(part.content),
                    tool_call_id=part.tool_call_id,
                    name=part.tool_name,
                    metadata=metadata,
                )
            )
        elif isinstance(part, RetryPromptPart) and part.tool_name:
            out.append(
                ChatMessage.tool(
                    part.model_response(),
                    tool_call_id=part.tool_call_id,
                    name=part.tool_name,
                    metadata={"pydantic_ai_outcome": "retried", "is_error": True},
                )
            )
        elif isinstance(part, RetryPromptPart | RetryFeedbackPart):
            retry = {"pydantic_ai_part": part.part_kind}
            out.append(ChatMessage.human(part.model_response(), metadata=retry))
        # Other request parts (instructions and capability parts) are the agent's own
        # configuration, made again by every run: not conversation.
    return out


def _response_message(message: ModelResponse) -> ChatMessage:
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    kept: list[Any] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            try:
                arguments = part.args_as_dict()
            except ValueError:
                arguments = {RAW_ARGUMENTS_KEY: part.args if isinstance(part.args, str) else ""}
            calls.append(ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=arguments))
        elif isinstance(part, ThinkingPart):
            thinking.append(to_jsonable_python(part))
        else:
            kept.append(to_jsonable_python(part, fallback=str))
    metadata: dict[str, Any] = {}
    if message.model_name:
        metadata["model"] = message.model_name
    if thinking:
        metadata["pydantic_ai_thinking"] = thinking
    if kept:
        metadata["pydantic_ai_parts"] = kept
    content: str | None = "".join(texts)
    if not content and calls:
        content = None
    return ChatMessage.ai(content, calls, metadata=metadata)


def from_pydantic_ai(
    messages: Iterable[ModelMessage], *, include_system_prompts: bool = True, include_stored: bool = False
) -> list[ChatMessage]:
    """pydantic-ai messages as ``ChatMessage``s to store (see the module's mapping), oldest first.

    Args:
        messages: ``ModelRequest`` and ``ModelResponse`` objects (``result.new_messages()``,
            ``result.all_messages()``).
        include_system_prompts: keep ``SystemPromptPart``s as system messages. An agent's
            ``system_prompt`` is sent with the first request of every run without a message
            history; pass ``False`` to store it once (or give the agent ``instructions``,
            which are never in the messages).
        include_stored: also convert messages ``to_pydantic_ai`` made from stored messages
            (``metadata["agentmemory_seqs"]``); left out by default, so storing a run's
            messages never stores the window twice.

    Returns:
        One message per request part (system, human and tool), one ai message per response;
        a response with neither text nor tool calls gives an ai message with ``""``.
    """
    out: list[ChatMessage] = []
    for message in messages:
        if not include_stored and (message.metadata or {}).get(SEQS_KEY):
            continue
        if isinstance(message, ModelRequest):
            out += _request_messages(message, include_system_prompts)
        elif isinstance(message, ModelResponse):
            out.append(_response_message(message))
        else:
            raise TypeError(f"{type(message).__name__} is not a pydantic-ai ModelRequest or ModelResponse")
    return out


# -- agentmemory -> pydantic-ai -------------------------------------------------------------


def _media(part: ContentPart) -> Any:
    if part.data:
        try:
            data = base64.b64decode(part.data, validate=True)
        except (binascii.Error, ValueError):
            return f"[{part.kind.value}]"
        return BinaryContent(data=data, media_type=part.mime_type, identifier=part.filename or None)
    if part.url and part.kind is PartKind.IMAGE:
        return ImageUrl(url=part.url)
    if part.url:
        return DocumentUrl(url=part.url, media_type=part.mime_type or None)
    return part.placeholder


def _request_part(message: ChatMessage) -> Any:
    if message.role is Role.SYSTEM:
        return SystemPromptPart(message.text)
    if message.role is Role.HUMAN:
        if message.parts and not message.truncated:
            items = [part.text if part.kind is PartKind.TEXT else _media(part) for part in message.parts]
            return UserPromptPart(items)
        return UserPromptPart(message.text)
    stored = message.metadata.get("pydantic_ai_outcome") if message.metadata else None
    outcome = _OUTCOMES.get(stored) if isinstance(stored, str) else None
    if outcome is None:
        outcome = "failed" if message.metadata and message.metadata.get("is_error") else "success"
    return ToolReturnPart(
        tool_name=message.name or "tool",
        content=message.text,
        tool_call_id=message.tool_call_id,
        outcome=outcome,
    )


def _response(message: ChatMessage) -> ModelResponse:
    parts: list[Any] = [
        ThinkingPart(**{k: v for k, v in block.items() if k != "part_kind"})
        for block in (message.metadata.get("pydantic_ai_thinking") or () if message.metadata else ())
        if isinstance(block, dict)
    ]
    if message.content:
        parts.append(TextPart(message.content))
    for call in message.tool_calls:
        arguments = dict(call.arguments)
        raw = arguments.get(RAW_ARGUMENTS_KEY) if set(arguments) == {RAW_ARGUMENTS_KEY} else None
        args = raw if isinstance(raw, str) else arguments
        parts.append(ToolCallPart(call.name, args, tool_call_id=call.id))
    model = message.metadata.get("model") if message.metadata else None
    return ModelResponse(parts=parts, model_name=model if isinstance(model, str) else None)


def to_pydantic_ai(messages: Iterable[ChatMessage]) -> list[ModelMessage]:
    """``ChatMessage``s as pydantic-ai messages: consecutive system, human and tool messages
    as one ``ModelRequest`` (a ``SystemPromptPart``, ``UserPromptPart`` or ``ToolReturnPart``
    each), each ai message as a ``ModelResponse`` (thinking, text, tool calls). Stored
    messages (with a ``seq``) mark the message made of them with their seqs in
    ``metadata["agentmemory_seqs"]``."""
    out: list[ModelMessage] = []
    request: list[Any] = []
    seqs: list[int] = []

    def marked() -> dict[str, Any] | None:
        return {SEQS_KEY: list(seqs)} if seqs else None

    for message in messages:
        if message.role is Role.AI:
            if request:
                out.append(ModelRequest(parts=request, metadata=marked()))
                request, seqs = [], []
            response = _response(message)
            if message.seq is not None:
                response.metadata = {SEQS_KEY: [message.seq]}
            out.append(response)
            continue
        request.append(_request_part(message))
        if message.seq is not None:
            seqs.append(message.seq)
    if request:
        out.append(ModelRequest(parts=request, metadata=marked()))
    return out


# -- the history processor ------------------------------------------------------------------


class ContextWindowProcessor:
    """A pydantic-ai history processor that puts the context window of a stored conversation
    before the run's own messages. pydantic-ai 2 takes history processors as a capability:
    ``Agent(capabilities=[processor.capability()])`` or ``agent.run(...,
    capabilities=[processor.capability()])`` (``ProcessHistory(processor)``; pydantic-ai 1
    called the option ``history_processors=[processor]``).

    Before every model request of a run it builds the window ``ContextWindowBuilder``
    makes for the conversation (pinned system prompt, summary, the newest history that
    fits, tool calls whole with their results) within what ``max_tokens`` leaves beside
    the run's messages, and returns ``to_pydantic_ai(window) + the run's messages``. The
    window's messages are marked (``metadata["agentmemory_seqs"]``): the next request of the
    same run replaces them with a fresh window, and ``from_pydantic_ai`` does not store
    them again. A ``SystemPromptPart`` at the head of the run (an agent's
    ``system_prompt``) is moved in front of the window, where a system prompt belongs.

    Args:
        conversation: a ``Conversation``, its primary key or its public uuid; ``None``
            (default): the run's ``deps`` names it, as one of those or as an object with a
            ``conversation`` attribute (``agent.run(question, deps=conversation)``), so one
            agent serves every conversation.
        max_tokens: budget for the window and the run's messages together (tokens, by the
            configured counter); defaults to ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``.
        builder_options: more keyword arguments for ``ContextWindowBuilder`` (for example
            ``gap_policy="close"`` to compact before leaving messages out, as agents do).

    Attributes:
        last_window: the ``ContextWindow`` of the last call (its accounting: tokens, what it
            left out; under concurrent runs, of whichever finished last).

    Raises (from a call):
        ContextBudgetExceeded: the run's own messages take the whole budget, or the
            builder's own error (the newest stored human message cannot fit).
        ConversationNotFound: the conversation does not exist.
        TypeError: no conversation given and the run's ``deps`` name none.
    """

    def __init__(
        self,
        conversation: Conversation | int | str | UUID | None = None,
        *,
        max_tokens: int | None = None,
        **builder_options: Any,
    ) -> None:
        self.conversation = conversation
        self.max_tokens = max_tokens
        self.builder_options = {"pending_tool_calls": "omit", **builder_options}
        self.last_window: ContextWindow | None = None

    def capability(self) -> ProcessHistory[Any]:
        """This processor as the pydantic-ai capability that runs it before every model
        request (``pydantic_ai.capabilities.ProcessHistory``)."""
        return ProcessHistory(self)

    def _conversation_of(self, ctx: RunContext[Any]) -> Conversation | int | str | UUID:
        if self.conversation is not None:
            return self.conversation
        deps = getattr(ctx.deps, "conversation", ctx.deps)
        if isinstance(deps, Conversation | int | str | UUID) and not isinstance(deps, bool):
            return deps
        raise TypeError(
            "ContextWindowProcessor needs a conversation: give it one, or run the agent with "
            f"deps naming one (a Conversation, its pk or uuid), not {type(ctx.deps).__name__}"
        )

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        conversation = self._conversation_of(ctx)
        run = [m for m in messages if not (m.metadata or {}).get(SEQS_KEY)]
        head: list[Any] = []
        if run and isinstance(run[0], ModelRequest):
            first = run[0]
            head = [p for p in first.parts if isinstance(p, SystemPromptPart)]
            if head:
                rest = [p for p in first.parts if not isinstance(p, SystemPromptPart)]
                remainder: list[ModelMessage] = [ModelRequest(parts=rest, instructions=first.instructions)]
                run = (remainder if rest else []) + run[1:]
        window = await sync_to_async(self._window)(
            conversation, from_pydantic_ai(run, include_system_prompts=False), head
        )
        out = to_pydantic_ai(window.messages)
        if head:
            out.insert(0, ModelRequest(parts=head))
        return out + run

    def _window(
        self, conversation: Conversation | int | str | UUID, run: list[ChatMessage], head: list[Any]
    ) -> ContextWindow:
        from agentmemory.conf import app_settings

        counter = get_token_counter()
        budget = self.max_tokens or app_settings().DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        used = sum(counter.count_message(m) for m in run)
        used += sum(counter.count_message(ChatMessage.system(p.content)) for p in head)
        if used >= budget:
            raise ContextBudgetExceeded(
                seq=None,
                tokens=used,
                available=budget,
                message=(
                    f"the run's own messages (its system prompt and the messages of this run) need "
                    f"{used:,} tokens, the whole budget of {budget:,} or more: nothing is left for the "
                    "stored history; raise the budget (max_tokens) or shorten the run's messages"
                ),
            )
        builder = ContextWindowBuilder(conversation, token_counter=counter, **self.builder_options)
        self.last_window = builder.build(budget - used)
        return self.last_window
