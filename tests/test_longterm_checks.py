"""System checks of the long-term memory settings (agentmemory.E201 to E209)."""

from __future__ import annotations

import pytest

from agentmemory.checks import check_recall
from agentmemory.recall import FullTextBackend, get_backend


def ids(settings, **values):  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = values
    return sorted({e.id for e in check_recall()})


def test_defaults_pass(settings) -> None:  # type: ignore[no-untyped-def]
    assert ids(settings) == []
    assert isinstance(get_backend(), FullTextBackend)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"RECALL_BACKEND": ""}, ["agentmemory.E201"]),
        ({"RECALL_BACKEND": "nowhere.Backend"}, ["agentmemory.E201"]),
        ({"EMBEDDER": "nowhere.Embedder"}, ["agentmemory.E202"]),
        ({"EMBEDDER_OPTIONS": []}, ["agentmemory.E203"]),
        ({"RECALL_BACKEND": "hybrid"}, ["agentmemory.E204"]),
        ({"FACT_SUPERSEDE_SIMILARITY": 1.5}, ["agentmemory.E205"]),
        ({"FACT_SUPERSEDE_SIMILARITY": True}, ["agentmemory.E205"]),
        ({"RECALL_RECENCY_HALF_LIFE_DAYS": 0}, ["agentmemory.E206"]),
        ({"RECALL_IMPORTANCE_WEIGHT": -1}, ["agentmemory.E206"]),
        ({"RECALL_IMPORTANCE_WEIGHT": float("inf")}, ["agentmemory.E206"]),
        ({"RECALL_RECENCY_WEIGHT": float("nan")}, ["agentmemory.E206"]),
        ({"RECALL_RECENCY_HALF_LIFE_DAYS": 1e300}, ["agentmemory.E206"]),
        ({"KNOWLEDGE_CONTEXT_MAX_TOKENS": 0}, ["agentmemory.E207"]),
        ({"MAX_FACT_CHARS": "10"}, ["agentmemory.E207"]),
        ({"RECALL_DATE_WEIGHT": -0.5}, ["agentmemory.E206"]),
        ({"RECALL_NEIGHBOUR_WEIGHTS": 0.3}, ["agentmemory.E209"]),
        ({"RECALL_NEIGHBOUR_WEIGHTS": (0.3, -0.1)}, ["agentmemory.E209"]),
        ({"RECALL_NEIGHBOUR_WEIGHTS": [0.1] * 6}, ["agentmemory.E209"]),
        ({"RECALL_NEIGHBOUR_WEIGHTS": ("0.3",)}, ["agentmemory.E209"]),
    ],
)
def test_bad_settings_are_reported(settings, values, expected) -> None:  # type: ignore[no-untyped-def]
    assert ids(settings, **values) == expected


@pytest.mark.parametrize("weights", [(), [0.5], (0.3, 0.15), (1, 0.5, 0.25, 0.1, 0)])
def test_neighbour_weights_that_pass(settings, weights) -> None:  # type: ignore[no-untyped-def]
    assert ids(settings, RECALL_NEIGHBOUR_WEIGHTS=weights, RECALL_DATE_WEIGHT=0) == []


def test_valid_embedding_configuration(settings) -> None:  # type: ignore[no-untyped-def]
    assert ids(settings, RECALL_BACKEND="hybrid", EMBEDDER="tests.embedders.StubEmbedder") == []
    backend = get_backend()
    assert backend.name == "hybrid"
    settings.AGENTMEMORY = {"RECALL_BACKEND": "embedding"}
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured):
        get_backend()
