"""The HTTP scaffolding of the fake provider servers (stdlib only): a JSON endpoint on 127.0.0.1.

``FakeHTTPServer`` runs a ``ThreadingHTTPServer`` on a free 127.0.0.1 port in a daemon thread,
records every request body and headers, refuses invalid requests through a hook, and answers
valid ones from a queue of ``ScriptedReply``. Subclasses (``tests/fake_openai_server.py``,
``tests/fake_anthropic_server.py``) supply the endpoint, the provider's error body, request ids
and the validation.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

__all__ = ["FakeHTTPServer", "ScriptedReply"]


@dataclass
class ScriptedReply:
    """One queued answer: ``status`` 200 with ``body``, or an error status with headers.

    ``delay`` (seconds) is waited before answering, to script client timeouts.
    """

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keep-alive like the real APIs, so clients that leak pooled connections show up as
    # ResourceWarnings (errors under the project's pytest settings).
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def _send_json(self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] = {}) -> None:
        body, id_headers = self.server.fake.stamp(body)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (*id_headers.items(), *headers.items()):
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self._read_body()
        if not fake.is_endpoint(self.path):
            self._send_json(404, fake.not_found_body("POST", self.path))
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake._record(body, headers)
        refusal = fake.refusal(body, headers)
        if refusal is not None:
            self._send_json(*refusal)
            return
        reply = fake._next_reply(body)
        if reply.delay:
            time.sleep(reply.delay)
        self._send_json(reply.status, reply.body, reply.headers)

    def do_GET(self) -> None:
        self._read_body()
        self._send_json(404, self.server.fake.not_found_body("GET", self.path))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeHTTPServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is expected (timeout tests); anything else is shown.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHTTPServer:
    """A fake JSON API: start with ``with Server() as server`` (or ``start``/``stop``).

    Subclasses set ``provider`` (``"OpenAI"``: used in messages and the thread name),
    ``endpoint`` (the one path answered to POST) and ``url_suffix`` (appended to ``base_url``),
    and implement ``error_body``, ``not_found_body``, ``refusal`` and ``stamp``.

    Attributes:
        requests: every body POSTed to ``endpoint``, in arrival order (parsed JSON, or the raw
            text when the body is not JSON), including refused ones.
        request_headers: the matching request headers (dicts, lower-case names).
        ids: a counter for request and tool-call ids.

    Replies are consumed in order by valid requests only (a refused request consumes nothing).
    With the queue empty, a valid request gets a 500 with ``x-should-retry: false`` whose
    message says so.
    """

    provider: ClassVar[str]
    endpoint: ClassVar[str]
    url_suffix: ClassVar[str] = ""
    empty_queue_error_type: ClassVar[str]

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.request_headers: list[dict[str, str]] = []
        self.ids = itertools.count(1)
        self._replies: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- provider specifics ----------------------------------------------------------------

    def error_body(self, message: str, *, type: str) -> dict[str, Any]:
        """The provider's error body for ``message`` of kind ``type``."""
        raise NotImplementedError

    def not_found_body(self, method: str, path: str) -> dict[str, Any]:
        """The error body answering a request to an unknown path (with HTTP 404)."""
        raise NotImplementedError

    def refusal(self, body: Any, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        """``(status, error body)`` when the provider would refuse this request, else ``None``."""
        raise NotImplementedError

    def stamp(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
        """Give a reply its request id: return the body to send and the id header(s)."""
        raise NotImplementedError

    def is_endpoint(self, path: str) -> bool:
        """Whether ``path`` (the request target) is the endpoint."""
        return path.rstrip("/") == self.endpoint

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        # A short poll interval keeps ``stop`` (``shutdown``) from adding 0.5 s to every test.
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-{self.provider.lower()}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, f"the fake {self.provider} server is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.url_suffix}"

    @property
    def pending(self) -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._replies)

    # -- scripting -------------------------------------------------------------------------

    def enqueue(self, reply: ScriptedReply) -> None:
        """Queue any reply (status, body, headers)."""
        with self._lock:
            self._replies.append(reply)

    # -- used by the handler ---------------------------------------------------------------

    def _record(self, body: Any, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)

    def _next_reply(self, body: Mapping[str, Any]) -> ScriptedReply:
        with self._lock:
            reply = self._replies.popleft() if self._replies else None
        if reply is None:
            return ScriptedReply(
                500,
                self.error_body(
                    f"fake {self.provider} server: no scripted reply queued for this request",
                    type=self.empty_queue_error_type,
                ),
                {"x-should-retry": "false"},
            )
        if reply.status == 200 and not reply.body.get("model"):
            reply.body["model"] = body["model"]
        return reply
