"""The tools of the agentmemory MCP server, on the ``mcp`` package's low-level ``Server``.

Every call acts for one user, bound around the transport with ``bind_owner`` (the
``mcp_server`` command binds the user it is started for, ``MemoryMCPApp`` the user the HTTP
request authenticates as) and read from a context variable: there is no argument through which
a client could name another user. Facts and conversations are named by their public ids
(UUIDs); an id of another user's fact or conversation is answered exactly as an id that does
not exist, so a client cannot learn that it exists (as the API answers 404, invariant S1).

Tool results carry the answer twice, as MCP recommends for structured results: JSON text
(``content``) for clients that read text, and ``structured_content``. A tool error (bad
arguments, an unknown id, a refused fact, an unexpected failure, which is logged with its
traceback on the server) is a result with ``isError: true`` whose text says what went wrong;
the server itself never fails a call.
"""

from __future__ import annotations

import contextvars
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types as types
from asgiref.sync import sync_to_async
from django.db import connections
from mcp.server.lowlevel import Server
from pydantic import BaseModel, ConfigDict, Field, ValidationError

import agentmemory
from agentmemory.exceptions import AgentMemoryError

logger = logging.getLogger("agentmemory.contrib.mcp")

__all__ = [
    "MemoryScope",
    "ToolFailure",
    "bind_owner",
    "call_tool",
    "close_stale_connections",
    "create_server",
    "serve_stdio",
    "tool_definitions",
]

#: most hits a ``recall`` or ``search_conversations`` call returns
MAX_HITS = 50
#: most conversations a ``list_conversations`` call returns
MAX_CONVERSATIONS = 100
#: largest context window a client may ask for (tokens)
MAX_WINDOW_TOKENS = 200_000
#: bytes of an answer kept for its keys beside the hits or messages it holds
ENVELOPE_BYTES = 1_024


def answer_budget() -> int:
    """Bytes the hits or messages of one tool's answer may take: half of
    ``AGENTMEMORY["API_MAX_RESPONSE_BYTES"]`` (an answer is sent twice, as text and as
    structured content) less ``ENVELOPE_BYTES``, so that a tool's response is within the
    bound every API answer keeps to. ``search_conversations`` with 50 hits of 2 MB messages
    answered 200 MB."""
    from agentmemory.conf import app_settings

    return max(app_settings().API_MAX_RESPONSE_BYTES // 2 - ENVELOPE_BYTES, 1)


def _bounded(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """``{kind: the items that fit in answer_budget(), best first}``, with ``"left_out"``
    (how many did not) when any did not; at least one."""
    from agentmemory.api.pagination import bounded_hits

    kept, left_out = bounded_hits({kind: items}, answer_budget())
    answer: dict[str, Any] = {kind: kept[kind]}
    if left_out[kind]:
        answer["left_out"] = left_out[kind]
    return answer


@dataclass(frozen=True)
class MemoryScope:
    """Whose memory the calls of one transport act on.

    Attributes:
        owner_id: primary key of the user.
        agent_key, namespace: the long-term memory scope of ``remember``, ``recall`` and
            ``forget`` (``KnowledgeMemory``; None: the user's default scope), and for
            ``agent_key`` the conversations listed, searched and read by id (None: all of
            the user's); a conversation of another agent is answered as one that does not
            exist.
    """

    owner_id: int
    agent_key: str | None = None
    namespace: str | None = None


_scope: contextvars.ContextVar[MemoryScope | None] = contextvars.ContextVar(
    "agentmemory_mcp_scope", default=None
)


@contextmanager
def bind_owner(
    owner_id: int, *, agent_key: str | None = None, namespace: str | None = None
) -> Iterator[None]:
    """Make the tool calls run inside the block act for the user ``owner_id``."""
    token = _scope.set(MemoryScope(owner_id, agent_key, namespace))
    try:
        yield
    finally:
        _scope.reset(token)


class ToolFailure(Exception):
    """A tool error whose message is shown to the client (an ``isError`` result)."""


# -- arguments ---------------------------------------------------------------------------


class _Arguments(BaseModel):
    """Arguments read as their JSON Schema says (``strict``): a boolean is ``true`` or
    ``false``, a number or an integer a JSON number (an integer not ``5.0``, neither of them
    ``true``), text a string; the lax reading took 1 and ``"yes"`` as true and ``"0.5"`` as a
    number, as the API's fields once did. Ids are strings the schema names ``format: uuid``
    (``strict=False`` on those fields: a UUID comes as text in JSON)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class RememberArguments(_Arguments):
    content: str = Field(description="The fact to remember, in one or a few sentences.", min_length=1)
    category: str = Field("general", description='A label such as "preferences" or "projects".')
    persistent: bool = Field(
        False, description="Keep it until forgotten (true), or as a recent note that ages out (false)."
    )
    importance: float | None = Field(None, ge=0.0, le=1.0, description="0.0 to 1.0 (default 0.5).")


class RecallArguments(_Arguments):
    query: str = Field(description="What to look for, in plain words.", min_length=1)
    k: int = Field(5, ge=1, le=MAX_HITS, description="How many facts at most.")
    category: str | None = Field(None, description="Only facts of this category.")


class SearchArguments(_Arguments):
    query: str = Field(description="What to look for in past conversations, in plain words.", min_length=1)
    k: int = Field(5, ge=1, le=MAX_HITS, description="How many messages at most.")
    conversation: uuid.UUID | None = Field(None, strict=False, description="Only this conversation (its id).")


class ListConversationsArguments(_Arguments):
    limit: int = Field(20, ge=1, le=MAX_CONVERSATIONS, description="How many conversations at most.")


class ContextWindowArguments(_Arguments):
    conversation: uuid.UUID = Field(strict=False, description="The conversation's id.")
    max_tokens: int = Field(4000, ge=1, le=MAX_WINDOW_TOKENS, description="Token budget of the window.")
    message_format: Literal["native", "openai"] = Field(
        "native", description="Messages in agentmemory's shape or in OpenAI's chat shape."
    )


class ForgetArguments(_Arguments):
    fact: uuid.UUID = Field(
        strict=False, description="The id of the fact to forget (from remember or recall)."
    )


# -- the tools (synchronous, run in a worker thread) -------------------------------------


def _memory(scope: MemoryScope) -> Any:
    from agentmemory.knowledge import KnowledgeMemory

    return KnowledgeMemory(scope.owner_id, agent_key=scope.agent_key, namespace=scope.namespace)


def _fact(fact: Any, score: float | None = None) -> dict[str, Any]:
    out = {
        "id": str(fact.uuid),
        "content": fact.content,
        "category": fact.category,
        "persistent": fact.persistent,
        "importance": fact.importance,
        "created_at": fact.created_at.isoformat(),
        "expires_at": fact.expires_at.isoformat() if fact.expires_at else None,
    }
    if score is not None:
        out["score"] = round(score, 6)
    return out


def remember(scope: MemoryScope, args: RememberArguments) -> dict[str, Any]:
    from agentmemory.knowledge import InvalidFactError

    try:
        result = _memory(scope).store(
            args.content, args.category, args.persistent, importance=args.importance
        )
    except InvalidFactError as exc:
        raise ToolFailure(str(exc)) from exc
    superseded = []
    if result.superseded_ids:
        from agentmemory.models import Fact

        superseded = [
            str(u) for u in Fact.objects.filter(pk__in=result.superseded_ids).values_list("uuid", flat=True)
        ]
    return {"action": result.action, "fact": _fact(result.fact), "superseded": superseded}


def recall(scope: MemoryScope, args: RecallArguments) -> dict[str, Any]:
    from agentmemory.knowledge import InvalidFactError

    try:
        hits = _memory(scope).recall(args.query, k=args.k, category=args.category)
    except (InvalidFactError, ValueError) as exc:
        raise ToolFailure(str(exc)) from exc
    return _bounded("facts", [_fact(hit.fact, hit.score) for hit in hits])


def _conversation(scope: MemoryScope, conversation_id: uuid.UUID) -> Any:
    from agentmemory.models import Conversation

    rows = Conversation.objects.filter(owner_id=scope.owner_id, uuid=conversation_id)
    if scope.agent_key is not None:
        # as listed and searched: a conversation of another agent is not in this scope
        rows = rows.filter(agent_key=scope.agent_key)
    conversation = rows.first()
    if conversation is None:
        raise ToolFailure(f"no conversation {conversation_id} in your memory")
    return conversation


def search_conversations(scope: MemoryScope, args: SearchArguments) -> dict[str, Any]:
    from agentmemory.recall import search_messages

    if args.conversation is not None:
        _conversation(scope, args.conversation)
    hits = search_messages(
        args.query, owner=scope.owner_id, conversation=args.conversation, agent_key=scope.agent_key, k=args.k
    )
    return _bounded(
        "messages",
        [
            {
                "conversation": str(hit.conversation_uuid),
                "seq": hit.seq,
                "role": hit.role,
                "content": hit.content,
                "created_at": hit.created_at.isoformat(),
                "score": round(hit.score, 6),
            }
            for hit in hits
        ],
    )


def list_conversations(scope: MemoryScope, args: ListConversationsArguments) -> dict[str, Any]:
    from agentmemory.models import Conversation

    rows = Conversation.objects.filter(owner_id=scope.owner_id)
    if scope.agent_key is not None:
        rows = rows.filter(agent_key=scope.agent_key)
    fields = ("uuid", "title", "agent_key", "message_count", "created_at", "updated_at")
    return {
        "conversations": [
            {
                "id": str(row["uuid"]),
                "title": row["title"],
                "agent_key": row["agent_key"],
                "messages": row["message_count"],
                "created_at": row["created_at"].isoformat(),
                "updated_at": row["updated_at"].isoformat(),
            }
            for row in rows.order_by("-updated_at", "-pk").values(*fields)[: args.limit]
        ]
    }


def _message(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.seq is not None:
        out["seq"] = message.seq
    if message.tool_calls:
        out["tool_calls"] = [call.to_dict() for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def get_context_window(scope: MemoryScope, args: ContextWindowArguments) -> dict[str, Any]:
    from agentmemory.api.windows import bounded_window
    from agentmemory.context import ContextWindowBuilder
    from agentmemory.formats.openai import to_openai_messages

    conversation = _conversation(scope, args.conversation)

    def build(max_messages: int | None) -> Any:
        return ContextWindowBuilder(conversation).build(max_tokens=args.max_tokens, max_messages=max_messages)

    def serialize(window: Any) -> dict[str, Any]:
        messages = (
            to_openai_messages(window.messages)
            if args.message_format == "openai"
            else [_message(m) for m in window.messages]
        )
        return {
            "conversation": str(conversation.uuid),
            "format": args.message_format,
            "messages": messages,
            "max_tokens": window.max_tokens,
            "total_tokens": window.system_tokens + window.summary_tokens + window.history_tokens,
            "summary_through_seq": window.summary_through_seq,
            "first_seq": window.first_seq,
            "last_seq": window.last_seq,
        }

    # over the answer's bound, built again with the newest history messages that fit (as the
    # API's /context/ is): ``first_seq`` says where the history sent starts
    return bounded_window(
        build, serialize, budget=answer_budget(), shape=args.message_format, max_messages=None
    )


def forget(scope: MemoryScope, args: ForgetArguments) -> dict[str, Any]:
    deleted = _memory(scope).forget(args.fact)
    if not deleted:
        raise ToolFailure(f"no fact {args.fact} in your memory")
    return {"forgotten": str(args.fact), "facts_deleted": deleted}


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    arguments: type[_Arguments]
    run: Callable[[MemoryScope, Any], dict[str, Any]]
    read_only: bool


TOOLS: dict[str, _Tool] = {
    tool.name: tool
    for tool in (
        _Tool(
            "remember",
            "Store a fact about the user in long-term memory. An exact repeat is not stored twice; "
            'a changed "key: value" fact replaces the older one, which stays as history.',
            RememberArguments,
            remember,
            read_only=False,
        ),
        _Tool(
            "recall",
            "Find facts in the user's long-term memory that match a query, best first.",
            RecallArguments,
            recall,
            read_only=True,
        ),
        _Tool(
            "search_conversations",
            "Search the messages of the user's past conversations (summarised parts included), best first.",
            SearchArguments,
            search_conversations,
            read_only=True,
        ),
        _Tool(
            "list_conversations",
            "List the user's conversations, most recently updated first, with their ids.",
            ListConversationsArguments,
            list_conversations,
            read_only=True,
        ),
        _Tool(
            "get_context_window",
            "The context window of a conversation: its summary and newest messages within a token "
            "budget, tool calls kept with their results.",
            ContextWindowArguments,
            get_context_window,
            read_only=True,
        ),
        _Tool(
            "forget",
            "Delete a fact from long-term memory for good, with the older facts it replaced.",
            ForgetArguments,
            forget,
            read_only=False,
        ),
    )
}


def tool_definitions() -> list[types.Tool]:
    """The MCP definitions of the tools (name, description, JSON Schema of the arguments)."""
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.arguments.model_json_schema(),
            annotations=types.ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=tool.name == "forget",
                open_world_hint=False,
            ),
        )
        for tool in TOOLS.values()
    ]


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def close_stale_connections() -> None:
    """Close the database connections that broke or outlived ``CONN_MAX_AGE``, as Django
    does around each request (``close_old_connections``), except one inside a transaction
    (a caller's, or a test's)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _run(tool: _Tool, scope: MemoryScope, arguments: Any) -> dict[str, Any]:
    # a long-running server: each call is treated like a request
    close_stale_connections()
    try:
        return tool.run(scope, arguments)
    finally:
        close_stale_connections()


async def call_tool(name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
    """Run the tool ``name`` for the bound user (``bind_owner``); every failure is a tool
    error result, never an exception."""
    scope = _scope.get()
    if scope is None:
        return _error("not authenticated: this server has no user bound to it")
    tool = TOOLS.get(name)
    if tool is None:
        return _error(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS)}")
    try:
        parsed = tool.arguments.model_validate(arguments or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
            for error in exc.errors()
        )
        return _error(f"invalid arguments for {name}: {problems}")
    try:
        result = await sync_to_async(_run)(tool, scope, parsed)
    except ToolFailure as exc:
        return _error(str(exc))
    except AgentMemoryError as exc:
        return _error(f"{name} failed: {exc}")
    except Exception:
        logger.exception("MCP tool %s failed for user %s", name, scope.owner_id)
        return _error(f"{name} failed on the server (logged there); try again or report it")
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
    )


def create_server(name: str = "agentmemory") -> Server[Any]:
    """The low-level MCP ``Server`` answering ``tools/list`` and ``tools/call``. It serves
    whichever user the transport binds with ``bind_owner``."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_definitions())

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call_tool(params.name, params.arguments)

    schemas = {tool.name: tool.arguments.model_json_schema() for tool in TOOLS.values()}
    handler: Callable[[Any, types.CallToolRequestParams], Awaitable[types.CallToolResult]] = on_call_tool
    return Server(
        name,
        version=agentmemory.__version__,
        instructions=(
            "Long-term memory of one user: remember and recall facts, search past conversations, "
            "read a conversation's context window, forget facts. Ids are the ones these tools return."
        ),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=handler,
    )


async def serve_stdio(server: Server[Any] | None = None) -> None:
    """Serve on the process's stdin and stdout until the client closes stdin (the ``mcp``
    package's stdio transport, which points file descriptor 1 at stderr while it serves, so
    that nothing but the protocol reaches the client)."""
    from mcp.server.stdio import stdio_server

    server = server or create_server()
    async with stdio_server() as (read_stream, write_stream):
        scope = _scope.get()
        logger.info("MCP server on stdio for user %s", scope.owner_id if scope else None)
        await server.run(read_stream, write_stream, server.create_initialization_options())
