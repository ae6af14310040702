"""The plumbing of ``python -m bench.memory_in_context`` on tiny inputs, so that it keeps
working: the LoCoMo table (every row, both places, each budget), the LongMemEval ranking
figures and the latency run. The figures of the real data are in docs/benchmarks.md."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from agentmemory.models import Conversation
from bench.memory_in_context import ROWS, parse_args, run

pytestmark = pytest.mark.django_db

TOPICS = ["kayak", "violin", "pottery", "marathon", "sourdough", "chess", "orchids", "telescope"]


def locomo_file(tmp_path: Path) -> Path:
    turns = []
    for i, topic in enumerate(TOPICS):
        turns.append(
            {"speaker": "Ann", "dia_id": f"D1:{2 * i + 1}", "text": f"Did you try the {topic} club?"}
        )
        turns.append(
            {
                "speaker": "Bob",
                "dia_id": f"D1:{2 * i + 2}",
                "text": f"Yes, the {topic} club meets on day {i}.",
            }
        )
    sample = {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": turns,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
        },
        "qa": [
            {
                "question": f"When does the {topic} club meet?",
                "answer": f"day {i}",
                "evidence": [f"D1:{2 * i + 2}"],
                "category": 4,
            }
            for i, topic in enumerate(TOPICS)
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


def test_locomo_table_has_every_row_and_recall_beats_the_plain_window(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run(
        parse_args(["locomo", "--data", str(locomo_file(tmp_path)), "--limits", "300,600"]), lines.append
    )
    rows = {(r["request"], r["asked_in"], r["budget"]): r for r in result["rows"]}
    assert set(rows) == {
        (row, where, limit) for row in ROWS for where in ("new", "same") for limit in (300, 600)
    }
    for where in ("new", "same"):
        for limit in (300, 600):
            for row in ROWS:
                assert rows[(row, where, limit)]["median_tokens"] <= limit
    # asked in a new conversation, only recall brings the evidence
    assert rows[("plain window", "new", 600)]["evidence"] == 0.0
    assert rows[("memory block", "new", 600)]["evidence"] == 1.0
    assert any("memory block" in line for line in lines)
    assert not get_user_model().objects.filter(username__startswith="bench-memory").exists()


def test_longmemeval_ranks_the_answer_session_first(tmp_path: Path) -> None:
    question_id = next(
        f"q{i}" for i in range(100) if hashlib.md5(f"q{i}".encode()).hexdigest()[0] in "01234567"
    )
    sessions = [
        [
            {"role": "user", "content": f"Let us talk about {topic} today."},
            {"role": "assistant", "content": "Sure."},
        ]
        for topic in TOPICS * 3
    ]
    sessions[5] = [
        {"role": "user", "content": "My new bike is a blue Cannondale.", "has_answer": True},
        {"role": "assistant", "content": "Nice bike!"},
    ]
    # an answer session whose only marked turn is the assistant's: LongMemEval's evaluation
    # ranks user turns, so it is not an evidence session
    sessions[7] = [
        {"role": "user", "content": "Any tips for a rainy weekend?", "has_answer": False},
        {"role": "assistant", "content": "Try a museum.", "has_answer": True},
    ]
    item = {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "What brand is my new bike?",
        "question_date": "2023/06/01 (Thu) 10:00",
        "answer": "Cannondale",
        "answer_session_ids": ["s5", "s7"],
        "haystack_dates": ["2023/05/20 (Sat) 00:31"] * len(sessions),
        "haystack_session_ids": [f"s{i}" for i in range(len(sessions))],
        "haystack_sessions": sessions,
    }
    (tmp_path / f"{len(sessions)}_{question_id}.json").write_text(json.dumps(item))
    (tmp_path / f"5_{question_id}x.json").write_text(json.dumps(item))  # too few sessions: not used
    result = run(parse_args(["longmemeval", "--data", str(tmp_path)]), lambda line: None)
    assert result["questions"] == 1
    assert result["recall_any@5"] == result["recall_all@5"] == 1.0
    assert result["turn_recall_any@10"] == result["turn_recall_all@10"] == 1.0
    assert not Conversation.objects.exists()


def test_latency_runs_and_cleans_up() -> None:
    result = run(parse_args(["latency", "--messages", "300", "--queries", "5"]), lambda line: None)
    assert result["messages"] == 300 and result["queries"] == 5
    assert 0 < result["p50_ms"] <= result["p95_ms"]
    assert not Conversation.objects.exists()


def test_latency_keep_reuses_the_stored_messages() -> None:
    """``--keep`` leaves the stored messages in place and a second run with the same
    ``--messages`` times its recalls over them instead of storing them again."""
    from agentmemory.models import Message

    lines: list[str] = []
    args = ["latency", "--messages", "300", "--queries", "5", "--keep"]
    first = run(parse_args(args), lines.append)
    ids = set(Message.objects.values_list("pk", flat=True))
    assert first["queries"] == 5 and len(ids) == 300
    second = run(parse_args(args), lines.append)
    assert second["queries"] == 5
    assert set(Message.objects.values_list("pk", flat=True)) == ids
    assert sum(line.startswith("stored 300 messages") for line in lines) == 1
    assert sum(line.startswith("reusing the 300 messages") for line in lines) == 1


def test_locomo_measures_the_request_agent_run_sends(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The plain window and memory block rows are what ``agent.run()`` of an agent with the
    compactor, knowledge memory and recall sends to its model: one model call per question,
    place, budget and row, and the memory block is in the memory-block row's requests."""
    from bench import memory_in_context

    sent: list[list] = []
    invoke = memory_in_context.RecordingModel.invoke

    def recording(self, messages, tools=None, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(list(messages))
        return invoke(self, messages, tools, **kwargs)

    monkeypatch.setattr(memory_in_context.RecordingModel, "invoke", recording)
    result = run(
        parse_args(["locomo", "--data", str(locomo_file(tmp_path)), "--limits", "600", "--every", "4"]),
        lambda line: None,
    )
    assert len(sent) == 2 * 2 * 2  # 2 questions, 2 places, the 2 agent rows
    assert sent[0][0].text.startswith("You answer the user's question.")
    assert sum("<memory>" in "\n".join(m.text for m in messages) for messages in sent) == 4
    rows = {(r["request"], r["asked_in"]): r for r in result["rows"]}
    assert rows[("memory block", "new")]["evidence"] == 1.0
    assert Conversation.objects.count() == 0


def test_locomo_start_takes_the_questions_every_leaves_out(tmp_path: Path) -> None:
    from bench.memory_in_context import locomo_cases

    path = locomo_file(tmp_path)
    taken = [[q.text for q in case.questions] for case in locomo_cases(path, None, 3)]
    rest = [[q.text for q in case.questions] for case in locomo_cases(path, None, 3, 1)]
    assert taken == [[f"When does the {t} club meet?" for t in TOPICS[0::3]]]
    assert rest == [[f"When does the {t} club meet?" for t in TOPICS[1::3]]]


def test_embedding_cache_embeds_each_text_once_across_runs(tmp_path: Path) -> None:
    from bench.recall import CachedEmbedder

    class Counting:
        model = "counting"

        def __init__(self) -> None:
            self.seen: list[str] = []

        def embed(self, texts: list[str]) -> list[list[float]]:
            self.seen.extend(texts)
            return [[float(len(t)), 1.0] for t in texts]

    path = tmp_path / "vectors.pickle"
    first = Counting()
    cache = CachedEmbedder(first, path)
    vectors = cache.embed(["a", "bb", "a"])
    assert [list(v) for v in vectors] == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    assert first.seen == ["a", "bb"]  # a text repeated in one call is embedded once
    cache.save()
    second = Counting()
    again = CachedEmbedder(second, path)  # a later run reads the file
    assert [list(v) for v in again.embed(["bb", "ccc"])] == [[2.0, 1.0], [3.0, 1.0]]
    assert second.seen == ["ccc"]
