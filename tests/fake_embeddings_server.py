"""A local fake OpenAI-compatible embeddings server (``POST /v1/embeddings``) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.fake_http import FakeHTTPServer, ScriptedReply
from tests.fake_openai_server import error_body

__all__ = ["FakeEmbeddingsServer"]


class FakeEmbeddingsServer(FakeHTTPServer):
    """Validates requests like the OpenAI embeddings API (``model`` a non-empty string,
    ``input`` a non-empty string or list of non-empty strings) and answers from a queue."""

    provider = "OpenAI"
    endpoint = "/v1/embeddings"
    url_suffix = "/v1"
    empty_queue_error_type = "fake"

    def error_body(self, message: str, *, type: str) -> dict[str, Any]:
        return error_body(message, type=type)

    def not_found_body(self, method: str, path: str) -> dict[str, Any]:
        return error_body(f"Invalid URL ({method} {path})", code="unknown_url")

    def refusal(self, body: Any, headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
        if not isinstance(body, dict) or not isinstance(body.get("model"), str) or not body["model"]:
            return 400, error_body("you must provide a model parameter")
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            return 400, error_body("'input' must be a non-empty string or array of non-empty strings")
        return None

    def stamp(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, str]]:
        return body, {"x-request-id": f"req_fake_{next(self.ids)}"}

    def enqueue_vectors(
        self, vectors: Sequence[Sequence[float]], *, reverse: bool = False, prompt_tokens: int | None = None
    ) -> None:
        """Answer the next request with these vectors (listed in reverse when ``reverse``,
        with their ``index`` fields telling the order, as the API allows) and, when
        ``prompt_tokens`` is given, the API's ``usage`` object (some compatible servers send
        none)."""
        data = [{"object": "embedding", "index": i, "embedding": list(v)} for i, v in enumerate(vectors)]
        if reverse:
            data.reverse()
        body: dict[str, Any] = {"object": "list", "data": data, "model": "fake-embed"}
        if prompt_tokens is not None:
            body["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
        self.enqueue(ScriptedReply(200, body))
