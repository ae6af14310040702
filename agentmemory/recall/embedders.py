"""Embedders: the ``Embedder`` protocol, an adapter for OpenAI-compatible embedding endpoints,
and the vector helpers (float32 bytes, exact cosine) used on every database."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Embedder",
    "EmbeddingError",
    "OpenAICompatibleEmbedder",
    "cosine_scores",
    "from_bytes",
    "numpy",
    "to_bytes",
]


def numpy() -> Any:
    """The ``numpy`` module, which vectors need and nothing else does: full-text recall, the
    context window and compaction run without it.

    Raises:
        ImproperlyConfigured: numpy is not installed (``pip install
            'django-agentmemory[embeddings]'``).
    """
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImproperlyConfigured(
            "embeddings need numpy: pip install 'django-agentmemory[embeddings]'"
        ) from exc
    return np


class EmbeddingError(RuntimeError):
    """The embedding model could not be reached or answered something unusable."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed length.

    ``model`` names the model; it is stored beside every vector, so vectors of two models are
    never compared. ``embed`` returns one vector per text, in order.
    """

    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def to_bytes(vector: Sequence[float]) -> bytes:
    """A vector as little-endian float32 bytes (what ``FactEmbedding.vector`` stores)."""
    return bytes(numpy().asarray(vector, dtype="<f4").tobytes())


def from_bytes(data: bytes | memoryview) -> np.ndarray:
    """A stored vector (little-endian float32 bytes) as a numpy array."""
    return numpy().frombuffer(bytes(data), dtype="<f4")


def cosine_scores(query: Sequence[float], matrix: np.ndarray) -> np.ndarray:
    """Exact cosine similarity of ``query`` with each row of ``matrix`` (zero rows score 0)."""
    xp = numpy()
    q = xp.asarray(query, dtype=xp.float32)
    q_norm = float(xp.linalg.norm(q))
    if matrix.size == 0 or q_norm == 0.0:
        return xp.zeros(len(matrix), dtype=xp.float32)
    norms = xp.linalg.norm(matrix, axis=1)
    norms[norms == 0] = xp.inf
    return (matrix @ q) / (norms * q_norm)


class OpenAICompatibleEmbedder:
    """Calls ``POST {base_url}/embeddings`` the way the OpenAI embeddings API defines it
    (``{"model", "input": [...]}`` answered by ``{"data": [{"index", "embedding"}]}``), which
    OpenAI, Azure OpenAI, vLLM, Ollama and LM Studio serve.

    Args:
        model: the embedding model name sent with each request.
        base_url: the API root, such as ``https://api.openai.com/v1``; defaults to the
            ``OPENAI_BASE_URL`` environment variable, then OpenAI's.
        api_key: sent as a bearer token; defaults to ``OPENAI_API_KEY``.
        timeout: seconds per request.
        batch_size: texts per request.
        dimensions: asked of models that can shorten their vectors (OpenAI's ``dimensions``).

    Each request is recorded as a ``ModelCall`` of kind "embedding" (``usage.prompt_tokens``
    of the answer, or the texts counted by the configured counter when the server sends no
    usage), billed to the enclosing ``agentmemory.calls.usage_scope``.

    Raises:
        EmbeddingError: on a transport error, an error status or a malformed answer, and
            when httpx (the HTTP client, in the ``embeddings`` extra) is not installed.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 256,
        dimensions: int | None = None,
    ) -> None:
        import os

        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip(
            "/"
        )
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout = timeout
        self.batch_size = batch_size
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            import httpx
        except ImportError as exc:  # the embeddings extra installs it; the app alone does not
            raise EmbeddingError(
                "OpenAICompatibleEmbedder needs httpx: pip install 'django-agentmemory[embeddings]'"
            ) from exc

        out: list[list[float]] = []
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        with httpx.Client(timeout=self.timeout, headers=headers) as client:
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start : start + self.batch_size])
                body: dict[str, Any] = {"model": self.model, "input": batch}
                if self.dimensions:
                    body["dimensions"] = self.dimensions
                started = time.monotonic()
                try:
                    response = client.post(f"{self.base_url}/embeddings", json=body)
                except httpx.HTTPError as exc:
                    raise EmbeddingError(f"embedding request failed: {exc}") from exc
                if response.status_code != 200:
                    raise EmbeddingError(
                        f"embedding endpoint answered {response.status_code}: {response.text[:300]}"
                    )
                out.extend(_parse(response, len(batch)))
                _record(self.model, batch, response, time.monotonic() - started)
        return out


def _record(model: str, batch: list[str], response: Any, latency: float) -> None:
    """Record one embedding request: the server's ``usage.prompt_tokens`` (OpenAI embeddings
    API), else the texts counted by the configured counter, marked as counted."""
    from agentmemory.conf import get_token_counter
    from agentmemory.llm.base import Usage
    from agentmemory.models import ModelCallKind
    from agentmemory.recording import USAGE_COUNTED, USAGE_PROVIDER, record_call

    try:
        reported = response.json().get("usage") or {}
    except (ValueError, AttributeError):
        reported = {}
    tokens = reported.get("prompt_tokens") if isinstance(reported, dict) else None
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
        usage, source = Usage(input_tokens=tokens), USAGE_PROVIDER
    else:
        counter = get_token_counter()
        usage, source = Usage(input_tokens=sum(counter.count_text(t) for t in batch)), USAGE_COUNTED
    record_call(
        ModelCallKind.EMBEDDING, model=model, usage=usage, usage_source=source, latency=round(latency, 6)
    )


def _parse(response: Any, expected: int) -> list[list[float]]:
    try:
        data = response.json()["data"]
        ordered = sorted(data, key=lambda item: item["index"])
        vectors = [[float(x) for x in item["embedding"]] for item in ordered]
    except (ValueError, KeyError, TypeError) as exc:
        raise EmbeddingError(f"malformed embedding answer: {exc}") from exc
    if len(vectors) != expected or len({len(v) for v in vectors}) > 1:
        raise EmbeddingError(f"expected {expected} vectors of one length, got {len(vectors)}")
    return vectors
