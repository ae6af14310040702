"""``MemoryMCPApp``: the agentmemory MCP server on the streamable-HTTP transport, as an ASGI app
authenticated by the host's Django REST framework authentication classes.

In the project's ``asgi.py``, around the Django application::

    from django.core.asgi import get_asgi_application

    django_app = get_asgi_application()

    from agentmemory.contrib.mcp.asgi import MemoryMCPApp

    application = MemoryMCPApp(django_app, path="/mcp")

Requests to ``path`` are MCP requests; everything else goes to ``django_app``. Each request is
authenticated on its own by ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]`` (or the classes
given): header schemes such as DRF's ``TokenAuthentication`` (``Authorization: Token ...``),
``BasicAuthentication`` or a JWT package's class. Session cookies are not read (no session
middleware runs here), so a browser page on another site cannot act with a logged-in user's
cookie. A request without valid credentials gets 401 with the authenticator's
``WWW-Authenticate`` header; a ``Host`` outside ``ALLOWED_HOSTS`` gets 400 (Django's own check,
which also guards against DNS rebinding). Every tool call acts for the authenticated user.

The transport runs stateless with JSON responses (the MCP SDK's ``stateless`` and
``json_response`` modes): no session is kept between requests, so any worker process of the
host can answer any request, and every POST gets one JSON answer. Other methods get 405: there
is no stream of server-initiated messages to open (GET) and no session to end (DELETE), the
answer the protocol gives a server that offers neither.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from agentmemory.contrib.mcp.server import bind_owner, close_stale_connections, create_server

logger = logging.getLogger("agentmemory.contrib.mcp")

__all__ = ["MemoryMCPApp"]

ASGIApp = Any  # an ASGI 3 callable: (scope, receive, send) -> awaitable


class _Refused(Exception):
    def __init__(self, status: int, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = list(headers)


class MemoryMCPApp:
    """The MCP endpoint at ``path``, in front of another ASGI app.

    Args:
        app: the ASGI app that answers every other path (the Django application); None
            answers them with 404.
        path: where the endpoint is (``"/mcp"`` also answers ``"/mcp/"``).
        authentication_classes: DRF authentication classes (or dotted paths); default the
            host's ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]``.
        agent_key, namespace: the long-term memory scope of the tools (see
            ``agentmemory.contrib.mcp.server.MemoryScope``).
    """

    def __init__(
        self,
        app: ASGIApp | None = None,
        *,
        path: str = "/mcp",
        authentication_classes: Sequence[type | str] | None = None,
        agent_key: str | None = None,
        namespace: str | None = None,
    ) -> None:
        self.app = app
        self.path = "/" + path.strip("/")
        self.authentication_classes = authentication_classes
        self.agent_key = agent_key
        self.namespace = namespace
        self.server = create_server()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == self.path:
            await self._serve(scope, receive, send)
        elif self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await _respond(send, 404, {"detail": "Not found."})

    @staticmethod
    async def _lifespan(receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            # stateless: no stream of server-initiated messages (GET) and no session to end
            # (DELETE); the protocol's answer for a server that offers neither is 405
            await _respond(
                send, 405, {"detail": f'Method "{scope["method"]}" not allowed.'}, [(b"allow", b"POST")]
            )
            return
        try:
            owner_id = await sync_to_async(self._authenticate)(scope)
            receive = await _bounded_body(scope, receive)
        except _Refused as refused:
            await _respond(send, refused.status, {"detail": refused.detail}, refused.headers)
            return
        manager = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True)
        with bind_owner(owner_id, agent_key=self.agent_key, namespace=self.namespace):
            async with manager.run():
                await manager.handle_request(scope, receive, send)

    def _authenticators(self) -> list[Any]:
        from django.utils.module_loading import import_string
        from rest_framework.settings import api_settings

        classes = self.authentication_classes
        if classes is None:
            classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
        return [(import_string(c) if isinstance(c, str) else c)() for c in classes]

    def _authenticate(self, scope: dict[str, Any]) -> int:
        """The primary key of the user the request's credentials name.

        Raises:
            _Refused: 400 for a ``Host`` outside ``ALLOWED_HOSTS``, 401 without valid
                credentials (or for an inactive user).
        """
        from rest_framework.exceptions import APIException
        from rest_framework.request import Request

        close_stale_connections()
        try:
            django_request = ASGIRequest(scope, io.BytesIO())
            try:
                django_request.get_host()
            except DisallowedHost as exc:
                raise _Refused(400, "Invalid Host header.") from exc
            authenticators = self._authenticators()
            request = Request(django_request, authenticators=authenticators)
            challenge = next(
                (h for a in authenticators if (h := a.authenticate_header(request))),
                None,
            )
            headers = [(b"www-authenticate", challenge.encode("latin-1"))] if challenge else []
            try:
                user = request.user
            except APIException as exc:
                raise _Refused(401, str(exc.detail), headers) from exc
            if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
                raise _Refused(401, "Authentication credentials were not provided.", headers)
            return int(user.pk)
        finally:
            close_stale_connections()


async def _bounded_body(scope: dict[str, Any], receive: Any) -> Any:
    """The request's body read here, at most Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes
    (no bound when it is None), and a ``receive`` that hands it on whole: the MCP SDK reads a
    body of any size into memory before it looks at it.

    Raises:
        _Refused: 413 for a ``Content-Length`` over the bound, at once, or for a body that
            grows past it as it arrives (it is not read further); 400 for a
            ``Content-Length`` that is no number.
    """
    from django.conf import settings

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    too_large = _Refused(413, f"The request body is over {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE).")
    declared = dict(scope.get("headers") or ()).get(b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _Refused(400, "Content-Length is not a number of bytes.")
        if limit is not None and int(declared) > limit:
            raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: the SDK is told so
            return _replay(chunks, message, receive)
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return _replay(chunks, None, receive)


def _replay(chunks: list[bytes], last: dict[str, Any] | None, receive: Any) -> Any:
    """A ``receive`` that gives the body read in ``chunks`` as one message (then ``last``, if
    any), and after that what ``receive`` gives."""
    pending: list[dict[str, Any]] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
    if last is not None:
        pending.append(last)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _respond(
    send: Any, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
