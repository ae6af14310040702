"""The QA benchmark's plumbing (``python -m bench.qa``), run once against a fake
OpenAI-compatible server so that it cannot rot: conversations stored, compacted with the
summary-with-facts call, each question asked through ``agent.run()`` and judged, accuracy
printed per category, the scratch data deleted. The real run needs a model (docs/benchmarks.md)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from bench.qa import AGENT_KEY, in_split, parse_args, run
from tests.fake_openai_server import FakeOpenAIServer, ScriptedReply, _completion

pytestmark = pytest.mark.django_db

ANSWER = "7 May 2023"


class QAServer(FakeOpenAIServer):
    """Answers by what is asked: the summariser gets a summary with one fact citing the first
    message it was sent, the agent always answers ``ANSWER``, the judge says CORRECT when the
    answer given is the gold answer."""

    def _next_reply(self, body: Any) -> ScriptedReply:
        messages = body["messages"]
        if "response_format" in body:
            first = int(re.findall(r"\[#(\d+) \|", messages[-1]["content"])[0])
            content = json.dumps(
                {
                    "summary": "Caroline and Melanie talked about their weeks.",
                    "facts": [
                        {
                            "content": f"Fact stated in message {first}.",
                            "category": "events",
                            "source": first,
                            "persistent": True,
                            "importance": 0.5,
                        }
                    ],
                }
            )
        elif messages[0]["content"].startswith("You grade"):
            prompt = messages[0]["content"]
            gold = re.search(r"Gold answer: (.*)\n", prompt).group(1)  # type: ignore[union-attr]
            content = "CORRECT" if gold == ANSWER else "WRONG"
        else:
            content = ANSWER
        return ScriptedReply(200, _completion({"content": content}, "stop", 40, 5, None))


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    with QAServer() as fake:
        yield fake


@pytest.mark.slow
def test_a_quick_locomo_run_stores_compacts_asks_and_judges(server, shared_data) -> None:  # type: ignore[no-untyped-def]
    args = parse_args(["--quick", "--base-url", server.base_url, "--model", "qa-test", "--api-key", "sk"])
    lines: list[str] = []

    results = run(args, log=lines.append)

    qa = json.loads((shared_data / "locomo6.json").read_text())[0]["qa"]
    asked = [
        q
        for q in qa
        if q["category"] in (1, 2, 3, 4) and all(e.split(":")[0] in ("D1", "D2") for e in q["evidence"])
    ][:5]
    assert results["all"]["questions"] == 5 and not results["errors"]
    assert results["all"]["correct"] == sum(1 for q in asked if str(q["answer"]) == ANSWER) >= 1
    assert results["categories"]["2 temporal"]["correct"] >= 1
    assert results["counts"]["summaries"] >= 1 and results["counts"]["facts"] >= 1
    summariser = [r for r in server.requests if "response_format" in r]
    agent_calls = [
        r for r in server.requests if r["messages"][0]["content"].startswith("You are the user's assistant")
    ]
    assert summariser and all(r["response_format"]["json_schema"]["strict"] for r in summariser)
    assert len(agent_calls) == 5
    # the facts the flush kept reach the agent (its knowledge block)
    assert all("Fact stated in message" in r["messages"][0]["content"] for r in agent_calls)
    assert any(line.startswith("2 temporal") for line in lines) and any(
        line.startswith("all") for line in lines
    )
    assert not get_user_model().objects.filter(username__startswith="bench-qa-").exists()


def question_id(dev: bool) -> str:
    for n in range(100):
        candidate = f"q{n}"
        if (hashlib.md5(candidate.encode()).hexdigest()[0] in "01234567") == dev:
            return candidate
    raise AssertionError


@pytest.mark.slow
def test_longmemeval_asks_only_the_dev_split_after_the_question_date(server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for dev in (True, False):
        qid = question_id(dev)
        item = {
            "question_id": qid,
            "question_type": "temporal-reasoning",
            "question": "When did I adopt my dog?",
            "answer": ANSWER,
            "question_date": "2023/05/28 (Sun) 19:47",
            "haystack_dates": ["2023/05/08 (Mon) 10:00"],
            "haystack_session_ids": ["s1"],
            "haystack_sessions": [
                [
                    {"role": "user", "content": "I adopted a dog yesterday!", "has_answer": True},
                    {"role": "assistant", "content": "Congratulations!"},
                    {"role": "user", "content": "Thanks, her name is Lea."},
                    {"role": "assistant", "content": "Lovely name."},
                ]
            ],
            "answer_session_ids": ["s1"],
        }
        (tmp_path / f"1_{qid}.json").write_text(json.dumps(item))
    args = parse_args(
        [
            "--dataset",
            "longmemeval",
            "--data",
            str(tmp_path),
            "--base-url",
            server.base_url,
            "--model",
            "qa-test",
        ]
    )

    results = run(args, log=lambda line: None)

    assert results["categories"] == {
        "temporal-reasoning": {"questions": 1, "correct": 1, "unjudged": 0, "accuracy": 1.0}
    }
    [asked] = [
        r for r in server.requests if r["messages"][0]["content"].startswith("You are the user's assistant")
    ]
    assert asked["messages"][-1]["content"] == "(Today is 2023/05/28 (Sun) 19:47.) When did I adopt my dog?"
    assert in_split(question_id(True), "dev") and in_split(question_id(False), "held-out")
    assert not in_split(question_id(False), "dev")
    assert AGENT_KEY == "bench-qa"
