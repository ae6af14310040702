"""Tests of the transcript importers in ``agentmemory.formats.transcripts`` (no database)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentmemory.formats.transcripts import (
    TranscriptError,
    detect_format,
    load_transcripts,
    parse_transcripts,
)
from agentmemory.messages import Role

SAMPLE = Path(__file__).resolve().parents[1] / "agentmemory" / "samples" / "support_demo.json"


def tool_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


TAU_RUN = {
    "task_id": 7,
    "trial": 2,
    "reward": 1.0,
    "info": {"task": {"user_id": "mia_li_3668"}},
    "traj": [
        {"role": "system", "content": "# Airline Agent Policy"},
        {"role": "user", "content": "Cancel reservation ABC123 please."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("call_1", "get_reservation_details", '{"reservation_id": "ABC123"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_reservation_details", "content": '{"id": 1}'},
        {"role": "assistant", "content": "It is cancelled."},
        {"role": "user", "content": "###STOP###"},
    ],
}


def locomo_sample(**conversation_overrides) -> dict:  # type: ignore[no-untyped-def]
    conversation = {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        # session_10 before session_2 in the file: sessions are ordered by number, not by key.
        "session_10_date_time": "3:00 pm on 1 July, 2023",
        "session_10": [{"speaker": "Caroline", "dia_id": "D10:1", "text": "Back from the trip!"}],
        "session_2_date_time": "1:56 pm on 8 May, 2023",
        "session_2": [
            {"speaker": "Melanie", "dia_id": "D2:1", "text": "Hey Caroline!"},
            {"speaker": "Caroline", "dia_id": "D2:2", "text": "Hi Mel."},
            {
                "speaker": "Caroline",
                "dia_id": "D2:3",
                "text": "Look at this.",
                "img_url": ["https://example.com/mural.jpg"],
                "blip_caption": "a photo of a mural",
            },
            {"speaker": "Melanie", "dia_id": "D2:4", "text": "Lovely."},
        ],
    }
    conversation.update(conversation_overrides)
    return {"sample_id": "conv-1", "conversation": conversation, "qa": []}


def test_tau_bench_run_becomes_one_conversation_with_tool_exchange() -> None:
    [transcript] = parse_transcripts([TAU_RUN], "tau-bench")

    assert transcript.title == "tau-bench airline task 7 trial 2"
    assert transcript.agent_key == "tau-bench-airline"
    assert transcript.metadata == {"source": "tau-bench", "task_id": 7, "trial": 2, "reward": 1.0}
    assert [m.role for m in transcript.messages] == [
        Role.SYSTEM,
        Role.HUMAN,
        Role.AI,
        Role.TOOL,
        Role.AI,
        Role.HUMAN,
    ]
    call_message = transcript.messages[2]
    assert call_message.content is None
    assert call_message.tool_calls[0].arguments == {"reservation_id": "ABC123"}
    assert transcript.messages[3].tool_call_id == "call_1"
    assert transcript.human_messages == 2


def test_locomo_speaker_a_is_human_sessions_in_order_with_dates_and_dia_ids() -> None:
    [transcript] = parse_transcripts([locomo_sample()], "locomo")

    assert transcript.agent_key == "locomo"
    assert transcript.title == "LoCoMo conv-1: Caroline and Melanie"
    assert [m.metadata["dia_id"] for m in transcript.messages] == ["D2:1", "D2:2", "D2:3", "D2:4", "D10:1"]
    # Consecutive turns of one speaker stay separate messages: one message per dia_id.
    assert [m.role for m in transcript.messages] == [Role.AI, Role.HUMAN, Role.HUMAN, Role.AI, Role.HUMAN]
    first, last = transcript.messages[0], transcript.messages[-1]
    assert first.metadata["session"] == 2
    assert first.metadata["session_date_time"] == "1:56 pm on 8 May, 2023"
    assert first.metadata["speaker"] == "Melanie"
    assert last.metadata["session_date_time"] == "3:00 pm on 1 July, 2023"
    assert transcript.metadata["session_date_times"] == {
        "2": "1:56 pm on 8 May, 2023",
        "10": "3:00 pm on 1 July, 2023",
    }
    assert transcript.metadata["human_speaker"] == "Caroline"


def test_locomo_shared_photo_is_rendered_as_its_caption() -> None:
    [transcript] = parse_transcripts([locomo_sample()], "locomo")

    photo = transcript.messages[2]
    assert photo.content == "Look at this.\n[shared an image: a photo of a mural]"
    assert photo.metadata["img_url"] == ["https://example.com/mural.jpg"]
    assert photo.metadata["blip_caption"] == "a photo of a mural"


def test_openai_conversations_as_lists_or_objects() -> None:
    data = [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        {
            "title": "Refund",
            "agent_key": "shop",
            "metadata": {"channel": "mail"},
            "messages": [{"role": "user", "content": "refund please"}],
        },
    ]

    first, second = parse_transcripts(data, "openai", source="chats.json")

    assert first.title == "chats #1"
    assert first.agent_key == "imported"
    assert [m.role for m in first.messages] == [Role.HUMAN, Role.AI]
    assert (second.title, second.agent_key, second.metadata) == ("Refund", "shop", {"channel": "mail"})


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([TAU_RUN], "tau-bench"),
        ([locomo_sample()], "locomo"),
        ([[{"role": "user", "content": "hi"}]], "openai"),
        ([{"messages": []}], "openai"),
    ],
)
def test_format_is_detected_from_the_first_item(data: list, expected: str) -> None:
    assert detect_format(data) == expected


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"traj": []}, "expected a JSON list of conversations, got an object"),
        ([], "the list is empty"),
        ([{"role": "user", "content": "hi"}], "single message, not a conversation"),
        ([{"dialogue": []}], "item 0 has keys dialogue"),
    ],
)
def test_undetectable_input_says_what_was_found(data: object, match: str) -> None:
    with pytest.raises(TranscriptError, match=match):
        parse_transcripts(data, source="x.json")


def test_bad_tool_arguments_name_the_item_and_message() -> None:
    run = json.loads(json.dumps(TAU_RUN))
    run["traj"][2]["tool_calls"][0]["function"]["arguments"] = "{not json"

    with pytest.raises(TranscriptError) as info:
        parse_transcripts([TAU_RUN, run], "tau-bench", source="runs.json")

    message = str(info.value)
    assert message.startswith("runs.json: item 1 (task 7 trial 2): traj: message 2:")
    assert "call_1" in message
    assert "not valid JSON" in message


def test_tool_result_without_its_call_is_refused_before_anything_is_stored() -> None:
    data = [
        {
            "title": "broken",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "x", "content": "1"},
            ],
        }
    ]

    with pytest.raises(
        TranscriptError, match=r"item 0 \(broken\): message 1: tool result for 'x' answers no"
    ):
        parse_transcripts(data, "openai")


def test_an_unanswered_tool_call_is_kept_as_a_pending_call_and_a_reused_id_is_refused() -> None:
    run = json.loads(json.dumps(TAU_RUN))
    del run["traj"][3]  # the tool result: the call stays pending, as storage keeps it
    (transcript,) = parse_transcripts([run], "tau-bench")
    calls = [c.id for m in transcript.messages for c in m.tool_calls]
    assert "call_1" in calls and not any(m.tool_call_id == "call_1" for m in transcript.messages)

    run["traj"].insert(4, dict(run["traj"][2]))  # the same call made again while pending
    with pytest.raises(TranscriptError, match=r"\['call_1'\] are already awaiting results"):
        parse_transcripts([run], "tau-bench")


def test_locomo_unknown_speaker_names_session_and_turn() -> None:
    sample = locomo_sample(session_1=[{"speaker": "Bob", "dia_id": "D1:1", "text": "hi"}])

    with pytest.raises(
        TranscriptError, match=r"item 0 \(conv-1\): session_1 turn 0: speaker 'Bob' is neither"
    ):
        parse_transcripts([sample], "locomo")


def test_locomo_without_speakers_is_refused() -> None:
    sample = locomo_sample()
    del sample["conversation"]["speaker_b"]

    with pytest.raises(TranscriptError, match="conversation has no 'speaker_b'"):
        parse_transcripts([sample], "locomo")


def test_wrong_explicit_format_is_a_clear_error() -> None:
    with pytest.raises(TranscriptError, match=r"item 0: tau-bench run lacks task_id, traj"):
        parse_transcripts([{"messages": []}], "tau-bench")
    with pytest.raises(TranscriptError, match="unknown format 'csv'"):
        parse_transcripts([], "csv")


def test_missing_file_and_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="cannot read the file"):
        load_transcripts(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(TranscriptError, match=r"bad.json: not valid JSON: .* line 1 column 3"):
        load_transcripts(bad)


def test_limit_keeps_the_first_conversations() -> None:
    runs = [dict(TAU_RUN, task_id=i) for i in range(5)]

    transcripts = parse_transcripts(runs, limit=2)

    assert [t.metadata["task_id"] for t in transcripts] == [0, 1]


def test_bundled_sample_has_a_long_conversation_and_parallel_tool_calls() -> None:
    transcripts = load_transcripts(SAMPLE)

    assert 2 <= len(transcripts) <= 3
    assert max(t.human_messages for t in transcripts) >= 12
    calls_per_ai = [len(m.tool_calls) for t in transcripts for m in t.messages if m.role is Role.AI]
    assert 1 in calls_per_ai
    assert max(calls_per_ai) >= 2
    assert {t.agent_key for t in transcripts} == {"bookstore-support"}


def test_real_tau_bench_file_imports_every_run(shared_data: Path) -> None:
    transcripts = load_transcripts(shared_data / "tau-bench-airline-gpt-4o.json")

    assert len(transcripts) == 200
    assert sum(len(t.messages) for t in transcripts) == 5308
    assert sum(1 for t in transcripts for m in t.messages if m.role is Role.TOOL) == 1164
    assert all(t.messages[0].role is Role.SYSTEM for t in transcripts)


def test_real_locomo_file_keeps_every_turn_and_the_qa_evidence_traceable(shared_data: Path) -> None:
    path = shared_data / "locomo6.json"
    raw = json.loads(path.read_text())

    transcripts = load_transcripts(path, "locomo")

    assert len(transcripts) == 6
    for sample, transcript in zip(raw, transcripts, strict=True):
        turns = [
            t for key, v in sample["conversation"].items() if re.fullmatch(r"session_\d+", key) for t in v
        ]
        assert len(transcript.messages) == len(turns)
        assert all(m.metadata.get("session_date_time") for m in transcript.messages)
        dia_ids = {m.metadata["dia_id"] for m in transcript.messages}
        evidence = [e for qa in sample["qa"] for e in qa.get("evidence", [])]
        # The data itself holds a few malformed ids ("D8:6; D9:17", "D:11:26"): all but those
        # must point at a stored message.
        missing = [e for e in evidence if e not in dia_ids]
        assert len(missing) <= 2, missing
