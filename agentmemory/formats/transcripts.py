"""Transcript importers: tau-bench runs, LoCoMo conversations and OpenAI message lists.

``load_transcripts(path)`` reads a JSON file and returns ``Transcript`` objects (title, agent
key, ``ChatMessage`` list, metadata) ready to be appended with ``PersistentChatHistory`` or
replayed with ``agentmemory.replay``. Nothing here touches the database.

Formats (``format=`` or detected from the first item):

- ``tau-bench``: a list of runs ``{task_id, reward, trial, info, traj}`` where ``traj`` is an
  OpenAI chat-completions message list (sierra-research/tau-bench, ``historical_trajectories``).
  One transcript per run.
- ``locomo``: a list of ``{sample_id, conversation, ...}`` where ``conversation`` holds
  ``speaker_a``, ``speaker_b``, ``session_N`` (lists of turns ``{speaker, dia_id, text}``) and
  ``session_N_date_time`` (snap-research/LoCoMo, ``data/locomo10.json``). The first speaker is
  the human, the second the AI.
- ``openai``: a list of conversations, each a list of OpenAI messages or an object
  ``{"messages": [...], "title"?, "agent_key"?, "metadata"?}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmemory.exceptions import AgentMemoryError, InvalidMessageError
from agentmemory.formats.openai import from_openai_messages
from agentmemory.messages import ChatMessage, Role

__all__ = [
    "FORMATS",
    "Transcript",
    "TranscriptError",
    "detect_format",
    "load_transcripts",
    "parse_transcripts",
    "validate_transcript",
]

FORMATS = ("tau-bench", "openai", "locomo")
TAU_BENCH_AGENT_KEY = "tau-bench-airline"
LOCOMO_AGENT_KEY = "locomo"
OPENAI_AGENT_KEY = "imported"
_SESSION = re.compile(r"session_(\d+)")


class TranscriptError(AgentMemoryError, ValueError):
    """A transcript file cannot be read; the message names the file, the item and the field."""


@dataclass
class Transcript:
    """One conversation to import.

    Attributes:
        title: a readable title (stored as the conversation's title, at most 200 characters).
        agent_key: the agent the conversation belongs to (``Conversation.agent_key``).
        messages: the messages, oldest first; the system messages that open it are the pinned
            prompt.
        metadata: stored as the conversation's metadata (JSON).
    """

    title: str
    agent_key: str
    messages: list[ChatMessage]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def human_messages(self) -> int:
        return sum(1 for m in self.messages if m.role is Role.HUMAN)


def load_transcripts(
    path: str | Path, format: str | None = None, *, limit: int | None = None, validate: bool = True
) -> list[Transcript]:
    """Read the transcripts in a JSON file.

    Args:
        path: the file.
        format: ``"tau-bench"``, ``"locomo"`` or ``"openai"``; ``None`` detects it.
        limit: keep only the first ``limit`` conversations (``None``: all).
        validate: check every message as storage would (``validate_transcript``), so that a
            bad file is refused before anything is written.

    Raises:
        TranscriptError: the file is missing or not JSON, the format is unknown or cannot be
            detected, or an item is malformed (the error names the item and message).
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TranscriptError(
            f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:
        raise TranscriptError(f"{path}: the JSON is nested too deeply to parse") from exc
    return parse_transcripts(data, format, source=path.name, limit=limit, validate=validate)


def parse_transcripts(
    data: Any,
    format: str | None = None,
    *,
    source: str = "transcripts",
    limit: int | None = None,
    validate: bool = True,
) -> list[Transcript]:
    """``load_transcripts`` for already-decoded JSON; ``source`` names it in errors."""
    if format is None:
        format = detect_format(data, source=source)
    if format not in FORMATS:
        raise TranscriptError(f"{source}: unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(data, list):
        raise TranscriptError(f"{source}: expected a JSON list of conversations, got {_kind(data)}")
    if limit is not None:
        if limit < 0:
            raise TranscriptError("limit must be >= 0")
        data = data[:limit]
    parse = {"tau-bench": _parse_tau_bench, "locomo": _parse_locomo, "openai": _parse_openai}[format]
    transcripts = [parse(item, i, source) for i, item in enumerate(data)]
    if validate:
        for i, transcript in enumerate(transcripts):
            validate_transcript(transcript, where=f"{source}: item {i} ({transcript.title})")
    return transcripts


def detect_format(data: Any, *, source: str = "transcripts") -> str:
    """The format of decoded JSON, from its first item.

    A list of objects with ``traj`` is tau-bench; objects whose ``conversation`` holds
    ``speaker_a`` are LoCoMo; message lists or objects with ``messages`` are OpenAI.

    Raises:
        TranscriptError: nothing matches (the error says what was found).
    """
    if not isinstance(data, list):
        raise TranscriptError(f"{source}: expected a JSON list of conversations, got {_kind(data)}")
    if not data:
        raise TranscriptError(f"{source}: the list is empty; nothing to import")
    first = data[0]
    if isinstance(first, list):
        return "openai"
    if isinstance(first, Mapping):
        if "traj" in first:
            return "tau-bench"
        conversation = first.get("conversation")
        if isinstance(conversation, Mapping) and "speaker_a" in conversation:
            return "locomo"
        if "messages" in first:
            return "openai"
        if "role" in first:
            raise TranscriptError(
                f"{source}: item 0 is a single message, not a conversation; wrap the message list in "
                "another list ([[...messages...]]) to import it as one OpenAI conversation"
            )
        keys = ", ".join(sorted(map(str, first))[:8])
        raise TranscriptError(
            f"{source}: cannot detect the format: item 0 has keys {keys}; expected 'traj' (tau-bench), "
            "'conversation' with 'speaker_a' (locomo) or 'messages' (openai); pass the format explicitly"
        )
    raise TranscriptError(f"{source}: cannot detect the format: item 0 is {_kind(first)}")


def validate_transcript(transcript: Transcript, *, where: str = "transcript") -> None:
    """Check a transcript as ``PersistentChatHistory.add_messages`` would in strict mode: each
    message on its own, every tool result answering a call still awaiting its result, and no
    new call reusing the id of a pending one. Messages may follow a pending call.

    Raises:
        TranscriptError: naming ``where`` and the 0-based message index.
    """
    from agentmemory.conf import app_settings
    from agentmemory.validation import link_tool_message, validate_message

    max_chars = app_settings().MAX_MESSAGE_CHARS
    pending: dict[str, int] = {}
    for index, message in enumerate(transcript.messages):
        try:
            validate_message(message, index, max_chars=max_chars)
            link_tool_message(message, index + 1, index, pending, strict=True)
        except InvalidMessageError as exc:
            raise TranscriptError(f"{where}: message {index}: {exc.reason}") from exc


# --------------------------------------------------------------------------- formats


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _convert(messages: Any, where: str) -> list[ChatMessage]:
    if not isinstance(messages, list):
        raise TranscriptError(f"{where}: expected a list of OpenAI messages, got {_kind(messages)}")
    try:
        return from_openai_messages(messages)
    except InvalidMessageError as exc:
        raise TranscriptError(f"{where}: message {exc.index}: {exc.reason}") from exc


def _parse_tau_bench(item: Any, index: int, source: str) -> Transcript:
    where = f"{source}: item {index}"
    if not isinstance(item, Mapping):
        raise TranscriptError(f"{where}: expected a tau-bench run object, got {_kind(item)}")
    missing = [key for key in ("task_id", "traj") if key not in item]
    if missing:
        raise TranscriptError(f"{where}: tau-bench run lacks {', '.join(missing)}")
    task_id, trial = item["task_id"], item.get("trial", 0)
    messages = _convert(item["traj"], f"{where} (task {task_id} trial {trial}): traj")
    return Transcript(
        title=f"tau-bench airline task {task_id} trial {trial}",
        agent_key=TAU_BENCH_AGENT_KEY,
        messages=messages,
        metadata={"source": "tau-bench", "task_id": task_id, "trial": trial, "reward": item.get("reward")},
    )


def _parse_openai(item: Any, index: int, source: str) -> Transcript:
    where = f"{source}: item {index}"
    title = f"{Path(source).stem} #{index + 1}"
    agent_key = OPENAI_AGENT_KEY
    metadata: dict[str, Any] = {}
    if isinstance(item, Mapping):
        if "messages" not in item:
            raise TranscriptError(f"{where}: conversation object has no 'messages' list")
        title = item.get("title") or title
        agent_key = item.get("agent_key") or agent_key
        metadata = item.get("metadata") or {}
        for key, value, kind in (
            ("title", title, str),
            ("agent_key", agent_key, str),
            ("metadata", metadata, dict),
        ):
            if not isinstance(value, kind):
                raise TranscriptError(f"{where}: '{key}' must be {kind.__name__}, not {type(value).__name__}")
        raw = item["messages"]
    elif isinstance(item, list):
        raw = item
    else:
        raise TranscriptError(
            f"{where}: expected a message list or an object with 'messages', got {_kind(item)}"
        )
    return Transcript(
        title=title[:200],
        agent_key=agent_key[:100],
        messages=_convert(raw, f"{where} ({title})"),
        metadata=dict(metadata),
    )


def _session_number(key: str) -> int | None:
    match = _SESSION.fullmatch(key)
    return int(match.group(1)) if match else None


def _parse_locomo(item: Any, index: int, source: str) -> Transcript:
    """One LoCoMo sample as one conversation.

    Decisions (documented in the module and README): ``speaker_a``'s turns are ``human``,
    ``speaker_b``'s are ``ai``. Each dialogue turn stays one message, also when a speaker
    talks twice in a row, so that ``dia_id`` (the id QA ``evidence`` cites) maps to exactly one
    message; storage accepts two human messages in a row. Each message's metadata holds
    ``dia_id``, ``session`` (its number), ``session_date_time`` and ``speaker``. A turn that
    shared a photo is rendered as LoCoMo's own evaluation does, its ``blip_caption`` appended
    to the text ("[shared an image: ...]"), with ``img_url``/``blip_caption`` kept in metadata.
    No message is invented: session dates live in metadata, not in extra system messages.
    """
    where = f"{source}: item {index}"
    if not isinstance(item, Mapping):
        raise TranscriptError(f"{where}: expected a LoCoMo sample object, got {_kind(item)}")
    sample_id = item.get("sample_id", f"sample-{index}")
    where = f"{where} ({sample_id})"
    conversation = item.get("conversation")
    if not isinstance(conversation, Mapping):
        raise TranscriptError(f"{where}: no 'conversation' object")
    speakers: dict[str, Role] = {}
    for key, role in (("speaker_a", Role.HUMAN), ("speaker_b", Role.AI)):
        name = conversation.get(key)
        if not isinstance(name, str) or not name:
            raise TranscriptError(f"{where}: conversation has no '{key}'")
        speakers[name] = role
    if len(speakers) != 2:
        raise TranscriptError(f"{where}: speaker_a and speaker_b are both {conversation['speaker_a']!r}")
    sessions = sorted((number, key) for key in conversation if (number := _session_number(key)) is not None)
    if not sessions:
        raise TranscriptError(f"{where}: conversation has no session_N lists")

    messages: list[ChatMessage] = []
    dates: dict[str, str] = {}
    for number, key in sessions:
        turns = conversation[key]
        if not isinstance(turns, list):
            raise TranscriptError(f"{where}: {key} is {_kind(turns)}, not a list of turns")
        date = conversation.get(f"{key}_date_time")
        if date is not None and not isinstance(date, str):
            raise TranscriptError(f"{where}: {key}_date_time must be a string")
        if date:
            dates[str(number)] = date
        for position, turn in enumerate(turns):
            at = f"{where}: {key} turn {position}"
            if not isinstance(turn, Mapping):
                raise TranscriptError(f"{at}: expected a turn object, got {_kind(turn)}")
            speaker = turn.get("speaker")
            if speaker not in speakers:
                raise TranscriptError(
                    f"{at}: speaker {speaker!r} is neither speaker_a nor speaker_b ({', '.join(speakers)})"
                )
            text = turn.get("text")
            if not isinstance(text, str):
                raise TranscriptError(f"{at}: turn has no 'text' string")
            metadata: dict[str, Any] = {"speaker": speaker, "session": number}
            if turn.get("dia_id"):
                metadata["dia_id"] = turn["dia_id"]
            if date:
                metadata["session_date_time"] = date
            caption = turn.get("blip_caption")
            if isinstance(caption, str) and caption:
                text = f"{text}\n[shared an image: {caption}]" if text else f"[shared an image: {caption}]"
                metadata["blip_caption"] = caption
                if turn.get("img_url"):
                    metadata["img_url"] = turn["img_url"]
            messages.append(ChatMessage(role=speakers[speaker], content=text, metadata=metadata))
    speaker_a, speaker_b = conversation["speaker_a"], conversation["speaker_b"]
    return Transcript(
        title=f"LoCoMo {sample_id}: {speaker_a} and {speaker_b}"[:200],
        agent_key=LOCOMO_AGENT_KEY,
        messages=messages,
        metadata={
            "source": "locomo",
            "sample_id": sample_id,
            "speaker_a": speaker_a,
            "speaker_b": speaker_b,
            "human_speaker": speaker_a,
            "session_date_times": dates,
        },
    )
