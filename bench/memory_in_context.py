"""What the model sees of a user's memory: ``python -m bench.memory_in_context {locomo,longmemeval,latency}``.

- ``locomo`` (``--data``, default ``../shared/data/locomo6.json``): each LoCoMo conversation
  is stored for a scratch user of its own (``bench.qa.store``: speaker A human, speaker B AI,
  session date and speaker in the metadata, the session date as ``created_at``) and compacted
  to its end with the offline summariser (``OfflineMemoryCompactor``; its memory flush keeps
  the facts it can find without a model). Each question of categories 1-4 (every
  ``--every``-th) is then asked in a new conversation of the same user and agent, and in the
  stored conversation (the turn taken back afterwards), at each ``--limits`` budget, by three
  requests: the plain window and the memory block are what ``agent.run()`` sends to the model
  (``bench_agent``: a ``BaseToolCallingAgent`` with ``MEMORY_COMPACTOR_ENABLED``,
  ``KNOWLEDGE_MEMORY_ENABLED`` and, for the memory block, ``MEMORY_RECALL_ENABLED``, its
  history limit the budget beside the system prompt, a model that records the request); the
  naive filling is composed by the bench (the window within the budget less
  ``RECALL_SHARE``, then ``search_messages`` hits and the messages next to them, best first,
  as one system message, no system prompt). Printed per row: evidence in the request (the
  share of a question's evidence turns whose first 80 characters, whitespace collapsed and
  lower-cased, occur in the text of the request's messages, system prompt included, averaged
  over questions), answer in the request (the gold answer, normalised the same way, occurs),
  median request tokens beside the system prompt (the token counter's count of every other
  message sent) and median system prompt tokens (the knowledge block's facts are in it).
- ``longmemeval --data DIR`` (a folder of LongMemEval-S ``<sessions>_<question_id>.json``
  files; the data is not in the repository): the questions with 20-99 sessions of the dev
  split (``bench.qa.in_split``), each haystack session stored as a conversation of one user
  (its date as ``created_at`` and in the metadata); the turns are ranked by
  ``agentmemory.recall.memory.rank_messages``, the ranking of the memory block, as asked at
  the question's ``question_date`` (``now=``: "four weeks ago" is read from it; ``as_of=False``,
  every session ranked, as LongMemEval's evaluation ranks them: some evidence sessions are
  dated after their question). Counted as
  LongMemEval's own retrieval evaluation does (``src/retrieval/run_retrieval.py`` and
  ``eval_utils.py`` of its repository): the ranked items are the user turns, the evidence
  turns the user turns marked ``has_answer``, the evidence sessions the answer sessions
  holding one; a session ranks where its first turn does. Printed: session recall_any@5 and
  recall_all@5, turn recall_any@10 and recall_all@10, over the questions with evidence
  sessions (abstention questions and those whose evidence is only the assistant's have none).
- ``latency`` (PostgreSQL; ``DATABASE_URL``): ``--messages`` stored messages (100,000 by
  default: the LoCoMo turns of ``--data`` again and again, each with a running number) in
  conversations of 200 messages of one user, the tables analysed; then the time
  ``recall_memory`` adds to a turn, p50 and p95 over ``--queries`` of LoCoMo's questions, at
  a 4,000-token budget. The rows are deleted and the tables vacuumed at the end, unless
  ``--keep``: then the messages are stored for a user named after their number
  (``bench-memory-latency-<messages>``) and kept, and a later run with ``--keep`` and the
  same ``--messages`` times the recalls over them without storing them again.

Runs on the database of ``DATABASE_URL`` (SQLite by default) in scratch users' rows, deleted
at the end, with the example project's ``AGENTMEMORY`` settings: ``AGENTMEMORY_EMBEDDER`` and
``AGENTMEMORY_RECALL_BACKEND`` in the environment measure another recall backend (with
``agentmemory.recall.local.MiniLMEmbedder`` and ``hybrid``, each stored message is embedded
as it is appended, which makes storing the data much slower).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.recall import CachedEmbedder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo6.json"
AGENT_KEY = "bench-memory"
#: the share of the budget kept for recalled text (as ``MEMORY_RECALL_SHARE``)
RECALL_SHARE = 0.25
OFFLINE_COMPACTOR = "agentmemory.compaction.OfflineMemoryCompactor"
ROWS = ("plain window", "naive search filling", "memory block")


def norm(text: str) -> str:
    """Whitespace collapsed, lower-cased: the form compared for "in the request"."""
    return " ".join(str(text).split()).lower()


def turn_key(text: str) -> str:
    """What must occur in a request for a turn to count as in it: its first 80 characters,
    whitespace collapsed, lower-cased."""
    return norm(text)[:80]


@dataclass
class LocomoQuestion:
    text: str
    answer: str
    evidence: list[str]  # turn keys


@dataclass
class LocomoCase:
    title: str
    messages: list[Any]
    questions: list[LocomoQuestion] = field(default_factory=list)


def locomo_cases(path: Path, conversations: int | None, every: int, start: int = 0) -> Iterator[LocomoCase]:
    """The LoCoMo conversations as the transcript importer reads them, with their questions of
    categories 1-4 (every ``every``-th, from the ``start``-th of each conversation's), each
    evidence turn given by its stored text's key."""
    from agentmemory.formats.transcripts import load_transcripts

    data = json.loads(path.read_text())
    transcripts = load_transcripts(path, "locomo", limit=conversations)
    for sample, transcript in zip(data, transcripts, strict=False):
        by_dia = {m.metadata.get("dia_id"): m.text for m in transcript.messages}
        questions = []
        for qa in [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)][start::every]:
            dia_ids = [d.strip() for item in qa.get("evidence") or () for d in str(item).split(";")]
            evidence = [turn_key(by_dia[d]) for d in dia_ids if d in by_dia]
            questions.append(LocomoQuestion(qa["question"], str(qa.get("answer", "")), evidence))
        yield LocomoCase(transcript.title, transcript.messages, questions)


def is_prompt(messages: list[Any], index: int) -> bool:
    """Whether ``messages[index]`` is the agent's system prompt: the first message, a system
    message that is neither the summary nor the memory block."""
    from agentmemory.conf import app_settings
    from agentmemory.context.window import MEMORY_BLOCK_KEY

    message = messages[index]
    return (
        index == 0
        and message.role.value == "system"
        and MEMORY_BLOCK_KEY not in (message.metadata or {})
        and not message.text.startswith(app_settings().SUMMARY_MESSAGE_PREFIX)
    )


def request_text(messages: list[Any]) -> str:
    return norm("\n".join(m.text for m in messages))


def naive_fill(owner: Any, query: str, budget: int, counter: Any, window_seqs: set[int], conv_id: Any) -> Any:
    """The naive baseline: ``search_messages`` hits, best first, each with the messages next
    to it, as "speaker: text" lines of one system message while they fit ``budget``."""
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Message
    from agentmemory.recall import search_messages

    if budget <= 0:
        return None
    hits = search_messages(query, owner=owner, k=100)
    wanted: dict[int, set[int]] = {}
    for hit in hits:
        wanted.setdefault(hit.conversation_id, set()).update((hit.seq - 1, hit.seq, hit.seq + 1))
    rows: dict[tuple[int, int], str] = {}
    for conversation_id, seqs in wanted.items():
        for seq, role, content, metadata in Message.objects.filter(
            conversation_id=conversation_id, seq__in=seqs, role__in=("human", "ai")
        ).values_list("seq", "role", "content", "metadata"):
            speaker = (metadata or {}).get("speaker") or role
            rows[(conversation_id, seq)] = f"{speaker}: {content}"
    lines: list[str] = []
    taken: set[tuple[int, int]] = set()
    for hit in hits:
        for seq in (hit.seq - 1, hit.seq, hit.seq + 1):
            key = (hit.conversation_id, seq)
            if key in taken or key not in rows or (hit.conversation_id == conv_id and seq in window_seqs):
                continue
            candidate = ChatMessage.system("\n".join([*lines, rows[key]]))
            if counter.count_message(candidate) > budget:
                continue
            lines.append(rows[key])
            taken.add(key)
    return ChatMessage.system("\n".join(lines)) if lines else None


def compose(row: str, owner: Any, conversation: Any, question: str, limit: int, counter: Any) -> list[Any]:
    """The messages of one request of the naive row: the window of ``conversation`` (which
    ends with the question) built within the budget less the recall share, and the naive
    filling in what it leaves."""
    from agentmemory.context import ContextWindowBuilder

    builder = ContextWindowBuilder(conversation, token_counter=counter)
    window = builder.build(max_tokens=limit - int(limit * RECALL_SHARE))
    messages = list(window.messages)
    used = sum(counter.count_message(m) for m in messages)
    seqs = {m.seq for m in window.messages if getattr(m, "seq", None) is not None}
    extra = naive_fill(owner, question, limit - used, counter, seqs, conversation.pk)
    if extra is not None:
        messages.insert(len(messages) - 1 if messages else 0, extra)
    return messages


class RecordingModel:
    """A ``ChatModel`` that answers every call with one short text and keeps the messages
    of the last call (``last``): the request as the agent sent it."""

    model_name = "recording"

    def __init__(self) -> None:
        self.last: list[Any] = []

    def invoke(self, messages: Any, tools: Any = None, **kwargs: Any) -> Any:
        from agentmemory.llm.base import ChatResponse
        from agentmemory.messages import ChatMessage

        self.last = list(messages)
        return ChatResponse(message=ChatMessage.ai("Noted."), model=self.model_name)

    async def ainvoke(self, messages: Any, tools: Any = None, **kwargs: Any) -> Any:
        return self.invoke(messages, tools, **kwargs)


def bench_agent(limit: int, recall: bool) -> Any:
    """An agent as a user writes one: ``BaseToolCallingAgent`` with the compactor, knowledge
    memory (its facts in the system prompt) and (``recall``) the memory block. Its history
    limit is ``limit`` tokens beside the system prompt: the prompt's own count is added to
    it. Compaction after the measured turn is skipped, so that every question meets the
    stored state the bench set up (the window's own compaction, before the model call,
    still runs)."""
    from agentmemory.agents import BaseToolCallingAgent
    from agentmemory.messages import ChatMessage

    class MemoryBenchAgent(BaseToolCallingAgent, register=False):
        SYSTEM_PROMPT = "You answer the user's question."
        MEMORY_COMPACTOR_ENABLED = True
        KNOWLEDGE_MEMORY_ENABLED = True
        MEMORY_RECALL_ENABLED = recall
        CONVERSATION_HISTORY_TOKEN_LIMIT = limit
        AGENT_KEY = globals()["AGENT_KEY"]
        system_tokens = 0

        @property
        def token_limit(self) -> int:
            return limit + self.system_tokens

        def get_system_prompt(self, injector: Any) -> str:
            prompt = str(super().get_system_prompt(injector))
            self.system_tokens = int(self.token_counter.count_message(ChatMessage.system(prompt)))
            return prompt

        def compact_if_needed(self, injector: Any) -> bool:
            return False

    return MemoryBenchAgent


def ask(agent_cls: Any, conversation: Any, question: str) -> list[Any]:
    """The request ``agent_cls().run(conversation, question)`` sends to the model; the
    turn's messages are taken back afterwards."""
    from agentmemory.models import Message

    model = RecordingModel()
    last = (
        Message.objects.filter(conversation=conversation)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    try:
        agent_cls(model).run(conversation, question)
    finally:
        turn = Message.objects.filter(conversation=conversation)
        if last is not None:
            turn = turn.filter(seq__gt=last)
        turn.delete()
    return model.last


def run_locomo(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    from django.conf import settings as django_settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import override_settings

    from agentmemory.compaction import compact_backlog
    from agentmemory.conf import get_token_counter
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation
    from bench.qa import Case, store

    limits = [int(x) for x in args.limits.split(",")]
    rows_wanted = {int(x) for x in args.rows.split(",")}
    cases = list(locomo_cases(Path(args.data or DEFAULT_LOCOMO), args.conversations, args.every, args.start))
    users = get_user_model().objects
    scratch = f"bench-memory-{os.getpid()}-{time.time_ns()}"
    results: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    counter = get_token_counter()
    log(
        f"locomo: {len(cases)} conversation(s), {sum(len(c.questions) for c in cases)} questions "
        f"on {connection.vendor}"
    )
    # the project's own settings (an ``EMBEDDER`` and ``RECALL_BACKEND`` say) kept, with these
    settings = {
        **dict(getattr(django_settings, "AGENTMEMORY", {}) or {}),
        "COMPACTION_MODE": "inline",
        "MEMORY_FLUSH": "always",
        "COMPACTOR_CLASS": OFFLINE_COMPACTOR,
    }
    try:
        with override_settings(AGENTMEMORY=settings):
            for number, case in enumerate(cases):
                owner = users.create(username=f"{scratch}-{number}")
                [conv_id] = store(Case(case.title, [(case.title, case.messages)]), owner)
                Conversation.objects.filter(pk=conv_id).update(agent_key=AGENT_KEY)
                compact_backlog(conv_id, compactor_class=OFFLINE_COMPACTOR)
                stored = Conversation.objects.get(pk=conv_id)
                agents = {
                    (limit, recall): bench_agent(limit, recall)
                    for limit in limits
                    for recall in (False, True)
                }
                for question in case.questions:
                    for where in [w for w in ("new", "same") if w in args.asked_in.split(",")]:
                        for limit in limits:
                            for row in [r for r in ROWS if ROWS.index(r) in rows_wanted]:
                                fresh = None
                                conversation = stored
                                if where == "new":
                                    conversation = fresh = Conversation.objects.create(
                                        owner=owner, agent_key=AGENT_KEY
                                    )
                                try:
                                    if row == "naive search filling":
                                        history = PersistentChatHistory(conversation)
                                        history.add_messages([ChatMessage.human(question.text)])
                                        try:
                                            messages = compose(
                                                row, owner, conversation, question.text, limit, counter
                                            )
                                        finally:
                                            history.pop()
                                    else:
                                        agent = agents[(limit, row == "memory block")]
                                        messages = ask(agent, conversation, question.text)
                                finally:
                                    if fresh is not None:
                                        fresh.delete()
                                text = request_text(messages)
                                agent_row = row != "naive search filling"
                                cell = results.setdefault(
                                    (row, where, limit), {"e": [], "a": [], "t": [], "s": []}
                                )
                                if question.evidence:
                                    cell["e"].append(
                                        sum(key in text for key in question.evidence) / len(question.evidence)
                                    )
                                cell["a"].append(float(norm(question.answer) in text))
                                cell["t"].append(
                                    sum(
                                        counter.count_message(m)
                                        for i, m in enumerate(messages)
                                        if not (agent_row and is_prompt(messages, i))
                                    )
                                )
                                cell["s"].append(
                                    sum(
                                        counter.count_message(m)
                                        for i, m in enumerate(messages)
                                        if agent_row and is_prompt(messages, i)
                                    )
                                )
                log(f"  {case.title}: {len(case.questions)} questions")
    finally:
        owners = users.filter(username__startswith=scratch)
        Conversation.objects.filter(owner__in=owners).delete()
        owners.delete()
    table = []
    log(
        f"{'request':22} {'asked in':8} {'budget':>6} {'evidence':>9} {'answer':>7} {'tokens':>7} "
        f"{'prompt':>7}"
    )
    for where in ("new", "same"):
        for limit in limits:
            for row in ROWS:
                cell = results.get((row, where, limit))
                if not cell:
                    continue
                line = {
                    "request": row,
                    "asked_in": where,
                    "budget": limit,
                    "evidence": round(statistics.fmean(cell["e"]), 3) if cell["e"] else 0.0,
                    "answer": round(statistics.fmean(cell["a"]), 3),
                    "median_tokens": int(statistics.median(cell["t"])),
                    "median_prompt_tokens": int(statistics.median(cell["s"])),
                }
                table.append(line)
                log(
                    f"{row:22} {where:8} {limit:>6} {line['evidence']:>9.3f} {line['answer']:>7.3f} "
                    f"{line['median_tokens']:>7} {line['median_prompt_tokens']:>7}"
                )
    return {"dataset": "locomo", "database": connection.vendor, "rows": table}


def longmemeval_files(folder: Path, limit: int | None) -> list[Path]:
    """The dev-split files with 20 to 99 sessions, in name order (the first ``limit``)."""
    from bench.qa import in_split

    found = []
    for path in sorted(folder.glob("*.json")):
        sessions, _sep, question_id = path.stem.partition("_")
        if not sessions.isdigit() or not 20 <= int(sessions) <= 99:
            continue
        if not in_split(question_id, "dev"):
            continue
        found.append(path)
    return found[:limit] if limit else found


def store_longmemeval(
    item: dict[str, Any], owner: Any
) -> tuple[dict[int, str], set[tuple[int, int]], set[str]]:
    """Store a question's haystack sessions as conversations of ``owner`` (each message dated
    its session's date, in the metadata and as ``created_at``). Returns {conversation id:
    session id}, the (conversation id, seq) of the evidence turns and the evidence sessions,
    as LongMemEval's own retrieval evaluation (``src/retrieval/run_retrieval.py``) counts
    them: its corpus is the user turns, an evidence turn is a user turn marked
    ``has_answer``, an evidence session an answer session holding one."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation, Message
    from bench.qa import session_time

    session_of: dict[int, str] = {}
    evidence: set[tuple[int, int]] = set()
    answers: set[str] = set()
    answer_ids = {str(s) for s in item.get("answer_session_ids") or ()}
    for index, (session, date, session_id) in enumerate(
        zip(item["haystack_sessions"], item["haystack_dates"], item["haystack_session_ids"], strict=False)
    ):
        turns = [t for t in session if t.get("content")]
        if not turns:
            continue
        conv = Conversation.objects.create(owner=owner, agent_key=AGENT_KEY, title=f"session {index + 1}")
        messages = [
            (ChatMessage.human if t["role"] == "user" else ChatMessage.ai)(
                t["content"], metadata={"session_date_time": date}
            )
            for t in turns
        ]
        stored = PersistentChatHistory(conv).add_messages(messages)
        when = session_time(date)
        if when is not None:
            Message.objects.filter(conversation=conv).update(created_at=when)
        session_of[conv.pk] = str(session_id)
        for turn, message in zip(turns, stored, strict=True):
            if turn.get("has_answer") and turn["role"] == "user" and str(session_id) in answer_ids:
                evidence.add((conv.pk, int(message.seq or 0)))
                answers.add(str(session_id))
    return session_of, evidence, answers


def rank_longmemeval(
    item: dict[str, Any],
    owner: Any,
    session_of: dict[int, str],
    evidence: set[tuple[int, int]],
    answers: set[str],
) -> tuple[float, float, float, float, float]:
    """recall_any@5 and recall_all@5 of the evidence sessions, recall_any@10 and
    recall_all@10 of the evidence turns, and the seconds the ranking took, for one stored
    question. As in LongMemEval's evaluation the ranked items are the user turns (the
    ranking of the memory block, ``rank_messages``, less the assistant's messages), and a
    session ranks where its first turn in that ranking does (``evaluate_retrieval_turn2session``:
    the first five distinct sessions)."""
    from agentmemory.recall.memory import rank_messages
    from bench.qa import session_time

    # the question is asked at its question_date ("2023/05/30 (Tue) 23:40")
    asked = session_time(str(item.get("question_date") or ""))
    started = time.perf_counter()
    # ``as_of=False``: the question_date only places "four weeks ago"; LongMemEval dates an
    # evidence session after the question in 25 of the 236 dev questions with evidence (9 have
    # all their evidence so), which recall as the memory stood then would rightly leave out
    hits = rank_messages(
        owner=owner, query=str(item["question"]), k=100, agent_key=AGENT_KEY, now=asked, as_of=False
    )
    elapsed = time.perf_counter() - started
    turns = [(h.conversation_id, h.seq) for h in hits if h.role == "human"]
    sessions: list[str] = []
    for conversation_id, _seq in turns:
        if session_of[conversation_id] not in sessions:
            sessions.append(session_of[conversation_id])
    top = set(sessions[:5])
    first = set(turns[:10])
    return (
        float(bool(top & answers)),
        float(answers <= top),
        float(bool(first & evidence)),
        float(evidence <= first),
        elapsed,
    )


def run_longmemeval(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from agentmemory.models import Conversation

    if not args.data:
        raise SystemExit("longmemeval needs --data DIR (a folder of <sessions>_<question_id>.json files)")
    files = longmemeval_files(Path(args.data), args.questions)
    users = get_user_model().objects
    scratch = f"bench-memory-{os.getpid()}-{time.time_ns()}"
    any5, all5, any10, all10, durations = [], [], [], [], []
    log(f"longmemeval: {len(files)} question(s) (20-99 sessions, dev split) on {connection.vendor}")
    try:
        for number, path in enumerate(files):
            item = json.loads(path.read_text())
            owner = users.create(username=f"{scratch}-{number}")
            session_of, evidence, answers = store_longmemeval(item, owner)
            if answers:
                hit_any, hit_all, turn_any, turn_all, elapsed = rank_longmemeval(
                    item, owner, session_of, evidence, answers
                )
                any5.append(hit_any)
                all5.append(hit_all)
                any10.append(turn_any)
                all10.append(turn_all)
                durations.append(elapsed)
            Conversation.objects.filter(owner=owner).delete()
            if (number + 1) % 25 == 0 and any5:
                save_embedding_cache()
                log(
                    f"  {number + 1} questions: any@5 {statistics.fmean(any5):.3f} "
                    f"all@5 {statistics.fmean(all5):.3f} turn all@10 {statistics.fmean(all10):.3f}"
                )
    finally:
        owners = users.filter(username__startswith=scratch)
        Conversation.objects.filter(owner__in=owners).delete()
        owners.delete()

    def mean(values: list[float]) -> float:
        return round(statistics.fmean(values), 3) if values else 0.0

    row = {
        "questions": len(any5),
        "recall_any@5": mean(any5),
        "recall_all@5": mean(all5),
        "turn_recall_any@10": mean(any10),
        "turn_recall_all@10": mean(all10),
        "p50_ms": round(statistics.median(durations) * 1000, 1) if durations else 0.0,
    }
    log(f"{'questions':>9} {'any@5':>7} {'all@5':>7} {'turn any@10':>11} {'turn all@10':>11} {'p50 ms':>7}")
    log(
        f"{row['questions']:>9} {row['recall_any@5']:>7.3f} {row['recall_all@5']:>7.3f} "
        f"{row['turn_recall_any@10']:>11.3f} {row['turn_recall_all@10']:>11.3f} {row['p50_ms']:>7.1f}"
    )
    return {"dataset": "longmemeval", "database": connection.vendor, **row}


WORDS = [
    "garden",
    "kayak",
    "violin",
    "recipe",
    "marathon",
    "camera",
    "hiking",
    "painting",
    "lisbon",
    "tokyo",
    "sister",
    "brother",
    "dog",
    "cat",
    "birthday",
    "concert",
    "novel",
    "chess",
    "pottery",
    "yoga",
    "salary",
    "interview",
    "vacation",
    "guitar",
    "museum",
    "coffee",
    "tea",
    "bakery",
    "soccer",
    "doctor",
    "dentist",
    "apartment",
    "neighbour",
    "wedding",
    "graduation",
    "puppy",
    "bicycle",
    "train",
    "flight",
]


def latency_texts(path: Path, rng: random.Random) -> tuple[Iterator[str], list[str]]:
    """Message texts without end (the LoCoMo turns, each with a running number so that none
    is a repeat) and the questions timed (LoCoMo's); without the data, sentences of
    ``WORDS`` and questions about them."""
    if path.exists():
        data = json.loads(path.read_text())
        turns = [
            turn["text"]
            for sample in data
            for key, value in sample["conversation"].items()
            if key.startswith("session_") and isinstance(value, list)
            for turn in value
        ]
        questions = [qa["question"] for sample in data for qa in sample["qa"]]
    else:
        turns = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40))) for _ in range(5000)]
        questions = [
            f"what did I say about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}?" for _ in range(50)
        ]

    def endless() -> Iterator[str]:
        number = 0
        while True:
            for text in turns:
                number += 1
                yield f"{text} ({number})"

    return endless(), questions


def run_latency(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from agentmemory.models import Conversation, Message
    from agentmemory.recall.memory import recall_memory

    rng = random.Random(7)
    users = get_user_model().objects
    per_conversation = 200
    source = Path(args.data or DEFAULT_LOCOMO)
    if args.data and not source.exists():
        raise SystemExit(f"latency: --data {source} does not exist")
    # the figures are only comparable between runs that timed the same questions: say which
    log(
        f"latency: questions from {source}"
        if source.exists()
        else f"latency: {source} not found, timing questions made up from WORDS (pass --data)"
    )
    texts, questions = latency_texts(source, rng)
    kept = None
    if args.keep:
        # a kept history is reused only when it is whole (a run stopped while storing is not)
        kept = users.filter(username=f"bench-memory-latency-{args.messages}").first()
        if kept is not None and Message.objects.filter(conversation__owner=kept).count() != args.messages:
            Conversation.objects.filter(owner=kept).delete()
            kept.delete()
            kept = None
    if kept is not None:
        owner = kept
        log(f"reusing the {args.messages} messages kept by an earlier run with --keep")
    elif args.keep:
        owner = users.create(username=f"bench-memory-latency-{args.messages}")
    else:
        owner = users.create(username=f"bench-memory-latency-{os.getpid()}-{time.time_ns()}")
    try:
        started = time.perf_counter()
        remaining = 0 if kept is not None else args.messages
        while remaining > 0:
            n = min(per_conversation, remaining)
            conv = Conversation.objects.create(owner=owner, agent_key=AGENT_KEY)
            Message.objects.bulk_create(
                Message(
                    conversation=conv,
                    seq=seq,
                    role="human" if seq % 2 == 0 else "ai",
                    content=next(texts),
                    token_count=30,
                )
                for seq in range(1, n + 1)
            )
            remaining -= n
        if kept is None:
            took = time.perf_counter() - started
            log(f"stored {args.messages} messages in {took:.1f}s on {connection.vendor}")
        if connection.vendor == "postgresql" and kept is None:  # what autovacuum does after a bulk load
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE agentmemory_conversation, agentmemory_message")
        durations = []
        for i in range(args.queries + 5):
            query = rng.choice(questions)
            started = time.perf_counter()
            recall_memory(owner=owner, query=query, max_tokens=4000, agent_key=AGENT_KEY)
            if i >= 5:  # warm-up
                durations.append(time.perf_counter() - started)
    finally:
        if not args.keep:
            Conversation.objects.filter(owner=owner).delete()
            owner.delete()
        # what autovacuum does after a bulk delete: without it a second run in the same
        # database reads this run's dead rows (VACUUM runs outside a transaction only)
        if connection.vendor == "postgresql" and not args.keep and not connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE agentmemory_conversation, agentmemory_message")
    durations.sort()
    row = {
        "messages": args.messages,
        "queries": len(durations),
        "p50_ms": round(statistics.median(durations) * 1000, 1),
        "p95_ms": round(durations[int(len(durations) * 0.95) - 1] * 1000, 1),
    }
    log(f"{'database':10} {'messages':>9} {'queries':>7} {'p50 ms':>7} {'p95 ms':>7}")
    log(
        f"{connection.vendor:10} {row['messages']:>9} {row['queries']:>7} "
        f"{row['p50_ms']:>7.1f} {row['p95_ms']:>7.1f}"
    )
    return {"dataset": "latency", "database": connection.vendor, **row}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_in_context", description=__doc__.splitlines()[0]
    )
    parser.add_argument("what", choices=("locomo", "longmemeval", "latency"))
    parser.add_argument("--data", help="LoCoMo's JSON file, or LongMemEval's folder (required there)")
    parser.add_argument("--limits", default="2000,4000", help="request budgets (tokens), comma-separated")
    parser.add_argument(
        "--rows", default="0,1,2", help="LoCoMo: the rows measured (0 plain, 1 naive, 2 memory)"
    )
    parser.add_argument("--asked-in", default="new,same", help="LoCoMo: where questions are asked")
    parser.add_argument("--conversations", type=int, help="LoCoMo: the first N conversations")
    parser.add_argument("--every", type=int, default=1, help="LoCoMo: every N-th question")
    parser.add_argument(
        "--start",
        type=int,
        default=0,
        help="LoCoMo: the first question taken with --every (0 by default; 1 to --every - 1 "
        "give the questions --every leaves out)",
    )
    parser.add_argument("--questions", type=int, help="LongMemEval: the first N questions")
    parser.add_argument("--messages", type=int, default=100_000, help="latency: stored messages")
    parser.add_argument("--queries", type=int, default=200, help="latency: recalls timed")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="latency: keep the stored messages, and reuse those an earlier --keep run kept",
    )
    parser.add_argument(
        "--embedding-cache",
        help="with AGENTMEMORY_EMBEDDER set: a file keeping the vectors computed (by text) between "
        "runs, so a second run embeds nothing it embedded before",
    )
    parser.add_argument("--json", dest="json_path", help="write the figures to this file")
    return parser.parse_args(argv)


#: the one ``CachedEmbedder`` of a run (``--embedding-cache``), and what it wraps
_cached: dict[str, Any] = {}


def cached_embedder(**options: Any) -> CachedEmbedder:
    """The ``AGENTMEMORY["EMBEDDER"]`` factory of a run with ``--embedding-cache``."""
    if "embedder" not in _cached:
        from django.utils.module_loading import import_string

        inner = import_string(_cached["inner"])(**options)
        _cached["embedder"] = CachedEmbedder(inner, Path(_cached["path"]))
    embedder: CachedEmbedder = _cached["embedder"]
    return embedder


def use_embedding_cache(path: str) -> None:
    """Point ``AGENTMEMORY["EMBEDDER"]`` at ``cached_embedder`` around the configured one."""
    from django.conf import settings

    conf = dict(getattr(settings, "AGENTMEMORY", {}) or {})
    if not conf.get("EMBEDDER"):
        raise SystemExit("--embedding-cache needs an embedder (AGENTMEMORY_EMBEDDER)")
    _cached.update(inner=conf["EMBEDDER"], path=path)
    settings.AGENTMEMORY = {**conf, "EMBEDDER": f"{__name__}.cached_embedder"}
    from agentmemory.conf import app_settings

    app_settings.cache_clear()


def save_embedding_cache() -> None:
    if "embedder" in _cached:
        _cached["embedder"].save()


def run(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    return {"locomo": run_locomo, "longmemeval": run_longmemeval, "latency": run_latency}[args.what](
        args, log
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.embedding_cache:
        use_embedding_cache(args.embedding_cache)
    try:
        results = run(args)
    finally:
        save_embedding_cache()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
