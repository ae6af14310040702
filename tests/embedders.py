"""Deterministic test embedders: fixed vectors for named texts, a stable hash for the rest."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np


def hashed_vector(text: str, dimensions: int = 16) -> list[float]:
    """A unit vector that depends only on ``text`` (bag of hashed words; texts sharing no
    word are orthogonal unless two words hash alike)."""
    vector = np.zeros(dimensions)
    for word in text.lower().split():
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % dimensions] += 1.0
    norm = float(np.linalg.norm(vector)) or 1.0
    return [float(x) / norm for x in vector]


def vectors_with_similarities(
    a_b: float, q_a: float, q_b: float
) -> tuple[list[float], list[float], list[float]]:
    """Three unit vectors a, b, q in 3 dimensions with cos(a, b), cos(q, a), cos(q, b) as given."""
    a = [1.0, 0.0, 0.0]
    b = [a_b, math.sqrt(1 - a_b**2), 0.0]
    q1 = q_a
    q2 = (q_b - a_b * q_a) / b[1]
    q = [q1, q2, math.sqrt(max(0.0, 1 - q1**2 - q2**2))]
    return a, b, q


class StubEmbedder:
    """``Embedder`` with fixed vectors for the texts in ``table`` (padded to ``dimensions``)
    and a hashed vector for any other text. Records every batch it was asked to embed."""

    def __init__(self, table: Mapping[str, Sequence[float]] | None = None, dimensions: int = 16) -> None:
        self.model = "stub-embedder"
        self.dimensions = dimensions
        self.table = {k: list(v) + [0.0] * (dimensions - len(v)) for k, v in (table or {}).items()}
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.table.get(t) or hashed_vector(t, self.dimensions) for t in texts]
