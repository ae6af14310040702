"""What the model sees of a user's memory: ``python -m bench.memory_in_context {locomo,longmemeval,latency}``.

- ``locomo`` (``--data``, default ``../shared/data/locomo6.json``): each LoCoMo conversation
  is stored for a scratch user of its own (``bench.qa.store``: speaker A human, speaker B AI,
  session date and speaker in the metadata, the session date as ``created_at``) and compacted
  to its end with the offline summariser (``OfflineMemoryCompactor``; its memory flush keeps
  the facts it can find without a model). Each question of categories 1-4 is then asked in a
  new conversation of the same user and agent, and in the stored conversation (appended,
  measured, taken back), at each ``--limits`` budget, by three requests: the plain window; the
  window with its budget filled naively (``search_messages`` hits and the messages next to
  them, best first, as one system message); the window with the memory block
  (``agentmemory.recall.memory.recall_memory``). Like a window with ``MEMORY_RECALL_SHARE``,
  the window is built within the budget less the recall share and the recalled text gets
  what is left. Printed per row: evidence in the request (the share of a question's evidence
  turns whose first 80 characters, whitespace collapsed and lower-cased, occur in the text of
  the request's messages, averaged over questions), answer in the request (the gold answer,
  normalised the same way, occurs), median request tokens (the token counter's count of every
  message sent; no system prompt is sent).
- ``longmemeval --data DIR`` (a folder of LongMemEval-S ``<sessions>_<question_id>.json``
  files; the data is not in the repository): the questions with 20-99 sessions of the dev
  split (``bench.qa.in_split``), each haystack session stored as a conversation of one user
  (its date as ``created_at`` and in the metadata); the sessions and turns are ranked by
  ``agentmemory.recall.memory.rank_messages``, the ranking of the memory block. Printed:
  session recall_any@5 and recall_all@5 (a session ranks where its best message does), turn
  recall@10 (the share of the turns marked ``has_answer`` among the first ten messages), for
  the questions that have evidence (abstention questions have none).
- ``latency`` (PostgreSQL; ``DATABASE_URL``): ``--messages`` stored messages (100,000 by
  default: the LoCoMo turns of ``--data`` again and again, each with a running number) in
  conversations of 200 messages of one user; then the time ``recall_memory`` adds to a turn,
  p50 and p95 over ``--queries`` of LoCoMo's questions, at a 4,000-token budget.

Runs on the database of ``DATABASE_URL`` (SQLite by default) in scratch users' rows, deleted
at the end.
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


def locomo_cases(path: Path, conversations: int | None, every: int) -> Iterator[LocomoCase]:
    """The LoCoMo conversations as the transcript importer reads them, with their questions of
    categories 1-4 (every ``every``-th), each evidence turn given by its stored text's key."""
    from agentmemory.formats.transcripts import load_transcripts

    data = json.loads(path.read_text())
    transcripts = load_transcripts(path, "locomo", limit=conversations)
    for sample, transcript in zip(data, transcripts, strict=False):
        by_dia = {m.metadata.get("dia_id"): m.text for m in transcript.messages}
        questions = []
        for qa in [q for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)][::every]:
            dia_ids = [d.strip() for item in qa.get("evidence") or () for d in str(item).split(";")]
            evidence = [turn_key(by_dia[d]) for d in dia_ids if d in by_dia]
            questions.append(LocomoQuestion(qa["question"], str(qa.get("answer", "")), evidence))
        yield LocomoCase(transcript.title, transcript.messages, questions)


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
    """The messages of one request: the window of ``conversation`` (which ends with the
    question) and, for the recall rows, the recalled text in what the window leaves."""
    from agentmemory.context import ContextWindowBuilder
    from agentmemory.messages import ChatMessage
    from agentmemory.recall.memory import recall_memory

    builder = ContextWindowBuilder(conversation, token_counter=counter)
    if row == "plain window":
        return list(builder.build(max_tokens=limit).messages)
    window = builder.build(max_tokens=limit - int(limit * RECALL_SHARE))
    messages = list(window.messages)
    used = sum(counter.count_message(m) for m in messages)
    seqs = {m.seq for m in window.messages if getattr(m, "seq", None) is not None}
    if row == "naive search filling":
        extra = naive_fill(owner, question, limit - used, counter, seqs, conversation.pk)
    else:
        block = recall_memory(
            owner=owner,
            query=question,
            max_tokens=limit - used,
            token_counter=counter,
            agent_key=AGENT_KEY,
            conversation_id=conversation.pk,
            exclude_seqs=seqs,
        )
        extra = ChatMessage.system(block.text) if block else None
    if extra is not None:
        messages.insert(len(messages) - 1 if messages else 0, extra)
    return messages


def run_locomo(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
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
    cases = list(locomo_cases(Path(args.data or DEFAULT_LOCOMO), args.conversations, args.every))
    users = get_user_model().objects
    scratch = f"bench-memory-{os.getpid()}-{time.time_ns()}"
    results: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    counter = get_token_counter()
    log(
        f"locomo: {len(cases)} conversation(s), {sum(len(c.questions) for c in cases)} questions "
        f"on {connection.vendor}"
    )
    settings = {"COMPACTION_MODE": "inline", "MEMORY_FLUSH": "always", "COMPACTOR_CLASS": OFFLINE_COMPACTOR}
    try:
        with override_settings(AGENTMEMORY=settings):
            for number, case in enumerate(cases):
                owner = users.create(username=f"{scratch}-{number}")
                [conv_id] = store(Case(case.title, [(case.title, case.messages)]), owner)
                Conversation.objects.filter(pk=conv_id).update(agent_key=AGENT_KEY)
                compact_backlog(conv_id, compactor_class=OFFLINE_COMPACTOR)
                stored = Conversation.objects.get(pk=conv_id)
                for question in case.questions:
                    fresh = Conversation.objects.create(owner=owner, agent_key=AGENT_KEY)
                    PersistentChatHistory(fresh).add_messages([ChatMessage.human(question.text)])
                    history = PersistentChatHistory(stored)
                    history.add_messages([ChatMessage.human(question.text)])
                    try:
                        for where, conversation in (("new", fresh), ("same", stored)):
                            if where not in args.asked_in.split(","):
                                continue
                            for limit in limits:
                                for row in [r for r in ROWS if ROWS.index(r) in rows_wanted]:
                                    messages = compose(
                                        row, owner, conversation, question.text, limit, counter
                                    )
                                    text = request_text(messages)
                                    cell = results.setdefault(
                                        (row, where, limit), {"e": [], "a": [], "t": []}
                                    )
                                    if question.evidence:
                                        cell["e"].append(
                                            sum(key in text for key in question.evidence)
                                            / len(question.evidence)
                                        )
                                    cell["a"].append(float(norm(question.answer) in text))
                                    cell["t"].append(sum(counter.count_message(m) for m in messages))
                    finally:
                        history.pop()
                        fresh.delete()
                log(f"  {case.title}: {len(case.questions)} questions")
    finally:
        owners = users.filter(username__startswith=scratch)
        Conversation.objects.filter(owner__in=owners).delete()
        owners.delete()
    table = []
    log(f"{'request':22} {'asked in':8} {'budget':>6} {'evidence':>9} {'answer':>7} {'tokens':>7}")
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
                }
                table.append(line)
                log(
                    f"{row:22} {where:8} {limit:>6} {line['evidence']:>9.3f} {line['answer']:>7.3f} "
                    f"{line['median_tokens']:>7}"
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
    session id}, the (conversation id, seq) of the turns marked ``has_answer``, and the
    answer sessions stored."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation, Message
    from bench.qa import session_time

    session_of: dict[int, str] = {}
    evidence: set[tuple[int, int]] = set()
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
            if turn.get("has_answer"):
                evidence.add((conv.pk, int(message.seq or 0)))
    answers = {str(s) for s in item.get("answer_session_ids") or ()} & set(session_of.values())
    return session_of, evidence, answers


def rank_longmemeval(
    item: dict[str, Any],
    owner: Any,
    session_of: dict[int, str],
    evidence: set[tuple[int, int]],
    answers: set[str],
) -> tuple[float, float, float | None, float]:
    """recall_any@5, recall_all@5, turn recall@10 (None without evidence turns) and the
    seconds the ranking took, for one stored question."""
    from agentmemory.recall.memory import rank_messages

    started = time.perf_counter()
    hits = rank_messages(owner=owner, query=str(item["question"]), k=100, agent_key=AGENT_KEY)
    elapsed = time.perf_counter() - started
    sessions: list[str] = []
    for hit in hits:
        if session_of[hit.conversation_id] not in sessions:
            sessions.append(session_of[hit.conversation_id])
    top = set(sessions[:5])
    turns = None
    if evidence:
        first = {(h.conversation_id, h.seq) for h in hits[:10]}
        turns = len(first & evidence) / len(evidence)
    return float(bool(top & answers)), float(answers <= top), turns, elapsed


def run_longmemeval(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from agentmemory.models import Conversation

    if not args.data:
        raise SystemExit("longmemeval needs --data DIR (a folder of <sessions>_<question_id>.json files)")
    files = longmemeval_files(Path(args.data), args.questions)
    users = get_user_model().objects
    scratch = f"bench-memory-{os.getpid()}-{time.time_ns()}"
    any5, all5, turns10, durations = [], [], [], []
    log(f"longmemeval: {len(files)} question(s) (20-99 sessions, dev split) on {connection.vendor}")
    try:
        for number, path in enumerate(files):
            item = json.loads(path.read_text())
            owner = users.create(username=f"{scratch}-{number}")
            session_of, evidence, answers = store_longmemeval(item, owner)
            if answers:
                hit_any, hit_all, turns, elapsed = rank_longmemeval(
                    item, owner, session_of, evidence, answers
                )
                any5.append(hit_any)
                all5.append(hit_all)
                durations.append(elapsed)
                if turns is not None:
                    turns10.append(turns)
            Conversation.objects.filter(owner=owner).delete()
            if (number + 1) % 25 == 0 and any5:
                log(
                    f"  {number + 1} questions: any@5 {statistics.fmean(any5):.3f} "
                    f"all@5 {statistics.fmean(all5):.3f}"
                )
    finally:
        owners = users.filter(username__startswith=scratch)
        Conversation.objects.filter(owner__in=owners).delete()
        owners.delete()
    row = {
        "questions": len(any5),
        "recall_any@5": round(statistics.fmean(any5), 3) if any5 else 0.0,
        "recall_all@5": round(statistics.fmean(all5), 3) if all5 else 0.0,
        "turn_recall@10": round(statistics.fmean(turns10), 3) if turns10 else 0.0,
        "p50_ms": round(statistics.median(durations) * 1000, 1) if durations else 0.0,
    }
    log(f"{'questions':>9} {'any@5':>7} {'all@5':>7} {'turn@10':>8} {'p50 ms':>7}")
    log(
        f"{row['questions']:>9} {row['recall_any@5']:>7.3f} {row['recall_all@5']:>7.3f} "
        f"{row['turn_recall@10']:>8.3f} {row['p50_ms']:>7.1f}"
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
    owner = users.create(username=f"bench-memory-latency-{os.getpid()}-{time.time_ns()}")
    per_conversation = 200
    texts, questions = latency_texts(Path(args.data or DEFAULT_LOCOMO), rng)
    try:
        started = time.perf_counter()
        remaining = args.messages
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
        log(f"stored {args.messages} messages in {time.perf_counter() - started:.1f}s on {connection.vendor}")
        if connection.vendor == "postgresql":  # what autovacuum does after a bulk load
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
        Conversation.objects.filter(owner=owner).delete()
        owner.delete()
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
    parser.add_argument("--questions", type=int, help="LongMemEval: the first N questions")
    parser.add_argument("--messages", type=int, default=100_000, help="latency: stored messages")
    parser.add_argument("--queries", type=int, default=200, help="latency: recalls timed")
    parser.add_argument("--json", dest="json_path", help="write the figures to this file")
    return parser.parse_args(argv)


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
    results = run(args)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
