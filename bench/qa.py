"""QA evaluation with a real model: ``python -m bench.qa --base-url URL --model NAME [options]``.

For people who have a model (any OpenAI-compatible endpoint: OpenAI, Azure, vLLM, Ollama, LM
Studio); it is not part of CI, which only runs its plumbing against a fake server. It measures
what an agent built on agentmemory answers about a user's past conversations:

1. The conversations are stored for a scratch user of their own, through
   ``PersistentChatHistory`` as an application stores them. LoCoMo (``--dataset locomo``, the
   file of ``--data``, by default ``../shared/data/locomo6.json``): each conversation as the
   transcript importer reads it (speaker A's turns human, speaker B's AI, the session date and
   speaker in each message's metadata, the session date as its ``created_at``). LongMemEval-S
   (``--dataset longmemeval --data DIR``, a folder of ``<sessions>_<question_id>.json`` files):
   each question's haystack sessions as conversations of one user, dated the same way. Only
   the questions whose ``question_id`` has an MD5 hex digest starting with 0-7 are used unless
   ``--split`` says otherwise: the others are held out.
2. Each stored conversation is compacted to its end by the endpoint's model
   (``LLMMemoryCompactor``, ``--fold-tokens`` of messages per call): summaries, and the memory
   flush storing the facts of the folded turns in the agent's knowledge memory.
3. Each question is asked with ``agent.run()`` by an agent with ``MEMORY_COMPACTOR_ENABLED``,
   ``KNOWLEDGE_MEMORY_ENABLED`` and ``MEMORY_RECALL_ENABLED`` (``--token-limit`` tokens of
   history), in a new conversation of the same user and agent (``--ask-in same``: appended to
   the stored conversation). A LongMemEval question is preceded by its question date.
4. An LLM judge (the same endpoint, or ``--judge-base-url``/``--judge-model``) grades each
   answer against the gold answer: CORRECT or WRONG.

It prints the accuracy per category (LoCoMo: 1 multi-hop, 2 temporal, 3 open-domain, 4
single-hop, 5 adversarial; LongMemEval: the question type) and in all, with the facts the
flush stored and the median request tokens. Options also come from the environment:
``QA_BASE_URL`` (else ``OPENAI_BASE_URL``), ``QA_MODEL`` (else ``AGENTMEMORY_LLM_MODEL``),
``QA_API_KEY`` (else ``OPENAI_API_KEY``), ``QA_JUDGE_BASE_URL``, ``QA_JUDGE_MODEL``,
``QA_JUDGE_API_KEY`` (else the answerer's). It runs on the database of ``DATABASE_URL``
(SQLite by default); the scratch users and their data are deleted at the end (``--keep``
keeps them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo6.json"
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
AGENT_KEY = "bench-qa"
#: LongMemEval question ids whose MD5 hex digest starts with one of these are the dev split
DEV_DIGITS = "01234567"

QA_SYSTEM_PROMPT = (
    "You are the user's assistant and you remember their past conversations: a summary, facts "
    "and earlier messages are given to you with the dates they were said. Answer the user's "
    "question from them, briefly: a few words, a name, a number or a date (a calendar date, "
    "worked out from the date a message was said when it says 'yesterday' or 'last week'). "
    "When what you remember does not answer it, say that you do not know."
)
JUDGE_PROMPT = (
    "You grade the answers of a memory benchmark.\n\nQuestion: {question}\nGold answer: {gold}\n"
    "Answer given: {answer}\n\nThe answer is CORRECT when it says what the gold answer says: other "
    "words, a shorter or longer form, more detail, or the same date written another way are fine. "
    "It is WRONG when it says something else, leaves out what the gold answer asks for, or says "
    "it does not know.{note} Reply with one word: CORRECT or WRONG."
)
ABSTENTION_NOTE = (
    " This question cannot be answered from the conversations: the answer is CORRECT when it "
    "says it does not know or that the conversations do not say, and WRONG when it answers."
)
_VERDICT = re.compile(r"\b(CORRECT|WRONG)\b", re.IGNORECASE)


@dataclass
class Question:
    """One question: its text as asked, the gold answer, its category, and whether the right
    answer is "I do not know" (abstention)."""

    text: str
    gold: str
    category: str
    abstention: bool = False


@dataclass
class Case:
    """The conversations one scratch user holds, and the questions asked about them."""

    name: str
    conversations: list[tuple[str, list[Any]]]  # (title, ChatMessages)
    questions: list[Question] = field(default_factory=list)


# -- datasets --------------------------------------------------------------------------------


def locomo_cases(path: Path, args: argparse.Namespace) -> Iterator[Case]:
    """One case per LoCoMo conversation: its sessions (the first ``--sessions``) and its
    questions of ``--categories``."""
    from agentmemory.formats.transcripts import load_transcripts

    data = json.loads(path.read_text())
    transcripts = load_transcripts(path, "locomo", limit=args.conversations)
    categories = {int(c) for c in args.categories.split(",")} if args.categories else {1, 2, 3, 4}
    for sample, transcript in zip(data, transcripts, strict=False):
        messages = transcript.messages
        if args.sessions:
            messages = [m for m in messages if m.metadata.get("session", 0) <= args.sessions]
        sessions = {m.metadata.get("session") for m in messages}
        kept_dia = {m.metadata.get("dia_id") for m in messages}
        questions = []
        for qa in sample["qa"]:
            category = qa.get("category")
            if category not in categories:
                continue
            if args.sessions and not set(qa.get("evidence") or ()) <= kept_dia:
                continue  # its evidence is in a session left out
            adversarial = category == 5
            gold = "not mentioned in the conversations" if adversarial else str(qa.get("answer", ""))
            questions.append(
                Question(qa["question"], gold, f"{category} {LOCOMO_CATEGORIES[category]}", adversarial)
            )
        yield Case(
            f"locomo {sample['sample_id']} ({len(sessions)} sessions)",
            [(transcript.title, messages)],
            questions,
        )


def in_split(question_id: str, split: str) -> bool:
    """Whether a LongMemEval question belongs to ``split``: "dev" (MD5 of its id starts with
    0-7), "held-out" (8-f) or "all"."""
    dev = hashlib.md5(question_id.encode()).hexdigest()[0] in DEV_DIGITS
    return split == "all" or (dev if split == "dev" else not dev)


def longmemeval_cases(folder: Path, args: argparse.Namespace) -> Iterator[Case]:
    """One case per LongMemEval question of ``--split``: its haystack sessions as conversations
    (user turns human, assistant turns AI, the session's date in metadata), the question
    asked after its question date."""
    from agentmemory.messages import ChatMessage

    for path in sorted(folder.glob("*.json")):
        item = json.loads(path.read_text())
        question_id = str(item["question_id"])
        if not in_split(question_id, args.split):
            continue
        conversations = []
        for index, (session, date) in enumerate(
            zip(item["haystack_sessions"], item["haystack_dates"], strict=False)
        ):
            messages = [
                (ChatMessage.human if turn["role"] == "user" else ChatMessage.ai)(
                    turn["content"], metadata={"session": index + 1, "session_date_time": date}
                )
                for turn in session
                if turn.get("content")
            ]
            if messages:
                conversations.append((f"LongMemEval {question_id} session {index + 1}", messages))
        question = Question(
            f"(Today is {item['question_date']}.) {item['question']}",
            str(item["answer"]),
            str(item.get("question_type", "")),
            question_id.endswith("_abs"),
        )
        yield Case(f"longmemeval {question_id}", conversations, [question])


# -- running ---------------------------------------------------------------------------------


def session_time(text: str) -> datetime | None:
    """A transcript's session date as an aware datetime (UTC): LoCoMo's "1:56 pm on 8 May,
    2023", LongMemEval's "2023/05/21 (Sun) 19:50"; None for another format."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def store(case: Case, owner: Any) -> list[int]:
    """Store the case's conversations for ``owner``, each message written at its session's
    date (``created_at``); returns the conversation ids."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.models import Conversation, Message

    ids = []
    for title, messages in case.conversations:
        conv = Conversation.objects.create(owner=owner, agent_key=AGENT_KEY, title=title[:200])
        stored = PersistentChatHistory(conv).add_messages(messages)
        by_date: dict[str, list[int]] = {}
        for message in stored:
            by_date.setdefault(message.metadata.get("session_date_time", ""), []).append(message.seq or 0)
        for date, seqs in by_date.items():
            when = session_time(date)
            if when is not None:
                Message.objects.filter(conversation=conv, seq__in=seqs).update(created_at=when)
        ids.append(conv.pk)
    return ids


def compact(conversation_ids: list[int]) -> dict[str, int]:
    """Fold every stored conversation to its end (all but its newest human turn)."""
    from agentmemory.compaction import compact_backlog

    outcomes: dict[str, int] = {}
    for pk in conversation_ids:
        outcome = compact_backlog(pk)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def judge(model: Any, question: Question, answer: str) -> bool | None:
    """The judge's verdict on ``answer``: True (CORRECT), False (WRONG), None (no verdict)."""
    from agentmemory.messages import ChatMessage

    prompt = JUDGE_PROMPT.format(
        question=question.text,
        gold=question.gold,
        answer=answer or "(no answer)",
        note=ABSTENTION_NOTE if question.abstention else "",
    )
    reply = model.invoke([ChatMessage.human(prompt)]).message.text
    match = _VERDICT.search(reply or "")
    return None if match is None else match.group(1).upper() == "CORRECT"


def make_agent_class(token_limit: int) -> type:
    from agentmemory.agents import BaseToolCallingAgent

    class QAAgent(BaseToolCallingAgent, register=False):
        NAME = "QA benchmark"
        AGENT_KEY = "bench-qa"
        SYSTEM_PROMPT = QA_SYSTEM_PROMPT
        MEMORY_COMPACTOR_ENABLED = True
        KNOWLEDGE_MEMORY_ENABLED = True
        # recall into every request; harmless where the installed version has no such setting
        MEMORY_RECALL_ENABLED = True
        CONVERSATION_HISTORY_TOKEN_LIMIT = token_limit

    return QAAgent


def model_options(
    base_url: str | None, model: str, api_key: str | None, structured_output: str
) -> dict[str, Any]:
    return {
        "model": model,
        "base_url": base_url,
        "api_key": api_key,
        "timeout": 180.0,
        "max_retries": 4,
        "structured_output": structured_output,
    }


def run(args: argparse.Namespace, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the evaluation (Django set up, the database migrated); returns the figures."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import override_settings

    from agentmemory.agents import registry
    from agentmemory.llm.openai import OpenAIChatModel
    from agentmemory.models import Conversation, Fact, Summary

    answerer = model_options(args.base_url, args.model, args.api_key, args.structured_output)
    judge_model = OpenAIChatModel(
        **model_options(
            args.judge_base_url or args.base_url,
            args.judge_model or args.model,
            args.judge_api_key or args.api_key,
            args.structured_output,
        )
    )
    memory_settings = {
        **dict(getattr(settings, "AGENTMEMORY", {}) or {}),
        "LLMS": {"default": {"BACKEND": "agentmemory.llm.openai.OpenAIChatModel", "OPTIONS": answerer}},
        "COMPACTION_MODE": "inline",
        "SUMMARIZER_MAX_INPUT_TOKENS": args.fold_tokens,
    }
    if args.dataset == "locomo":
        cases = list(locomo_cases(Path(args.data or DEFAULT_LOCOMO), args))
    else:
        cases = list(longmemeval_cases(Path(args.data), args))
    agent_class = make_agent_class(args.token_limit)
    users = get_user_model().objects
    scratch = f"bench-qa-{os.getpid()}-{time.time_ns()}"
    verdicts: dict[str, list[bool | None]] = {}
    request_tokens: list[int] = []
    errors: list[str] = []
    counts = {"cases": 0, "conversations": 0, "messages": 0, "summaries": 0, "facts": 0, "questions": 0}
    timings = {"store_s": 0.0, "compact_s": 0.0, "ask_s": 0.0}
    registry.register(agent_class)
    log(
        f"{args.dataset}: {len(cases)} case(s) on {connection.vendor}; answerer {args.model} at "
        f"{args.base_url or 'the default endpoint'}; judge {args.judge_model or args.model}"
    )
    try:
        with override_settings(AGENTMEMORY=memory_settings):
            agent = agent_class(llm=OpenAIChatModel(**answerer))
            for number, case in enumerate(cases):
                if args.questions is not None and counts["questions"] >= args.questions:
                    break
                owner = users.create(username=f"{scratch}-{number}")
                started = time.perf_counter()
                conversation_ids = store(case, owner)
                timings["store_s"] += time.perf_counter() - started
                started = time.perf_counter()
                outcomes = compact(conversation_ids)
                timings["compact_s"] += time.perf_counter() - started
                if outcomes.get("failed"):
                    errors.append(f"{case.name}: {outcomes['failed']} compaction(s) failed")
                counts["cases"] += 1
                counts["conversations"] += len(conversation_ids)
                counts["messages"] += sum(len(messages) for _title, messages in case.conversations)
                counts["summaries"] += Summary.objects.filter(conversation__owner=owner).count()
                counts["facts"] += Fact.objects.filter(owner=owner).count()
                started = time.perf_counter()
                for question in case.questions:
                    if args.questions is not None and counts["questions"] >= args.questions:
                        break
                    counts["questions"] += 1
                    where = (
                        conversation_ids[-1]
                        if args.ask_in == "same"
                        else agent.start_conversation(owner=owner)
                    )
                    try:
                        result = agent.run(where, question.text)
                    except Exception as exc:  # a failed call is a wrong answer, and reported
                        errors.append(f"{case.name}: {question.text[:60]!r}: {type(exc).__name__}: {exc}")
                        verdicts.setdefault(question.category, []).append(False)
                        continue
                    request_tokens.extend(call.window.total_tokens for call in result.calls)
                    try:
                        verdict = judge(judge_model, question, result.answer)
                    except Exception as exc:  # no verdict: reported as unjudged
                        errors.append(f"{case.name}: judge: {type(exc).__name__}: {exc}")
                        verdict = None
                    verdicts.setdefault(question.category, []).append(verdict)
                timings["ask_s"] += time.perf_counter() - started
                log(
                    f"  {case.name}: {len(conversation_ids)} conversation(s), "
                    f"{counts['facts']} facts so far, {counts['questions']} questions asked"
                )
    finally:
        registry.unregister(AGENT_KEY)
        judge_model.close()
        if not args.keep:
            owners = users.filter(username__startswith=scratch)
            Conversation.objects.filter(owner__in=owners).delete()
            owners.delete()
    return report(args, verdicts, request_tokens, counts, timings, errors, log)


def report(
    args: argparse.Namespace,
    verdicts: dict[str, list[bool | None]],
    request_tokens: list[int],
    counts: dict[str, int],
    timings: dict[str, float],
    errors: list[str],
    log: Callable[[str], Any],
) -> dict[str, Any]:
    """Print the accuracy per category and in all; return the figures."""
    rows: dict[str, dict[str, Any]] = {}
    for category in sorted(verdicts):
        marks = verdicts[category]
        correct = sum(1 for mark in marks if mark)
        rows[category] = {
            "questions": len(marks),
            "correct": correct,
            "unjudged": sum(1 for mark in marks if mark is None),
            "accuracy": round(correct / len(marks), 3) if marks else 0.0,
        }
    every = [mark for marks in verdicts.values() for mark in marks]
    overall = {
        "questions": len(every),
        "correct": sum(1 for mark in every if mark),
        "unjudged": sum(1 for mark in every if mark is None),
        "accuracy": round(sum(1 for mark in every if mark) / len(every), 3) if every else 0.0,
    }
    log(
        f"stored {counts['messages']} messages in {counts['conversations']} conversation(s) "
        f"({timings['store_s']:.1f} s); compacted in {timings['compact_s']:.1f} s: "
        f"{counts['summaries']} summaries, {counts['facts']} facts kept by the memory flush"
    )
    log(f"{'category':24} {'questions':>9} {'correct':>8} {'accuracy':>8}")
    for category, row in {**rows, "all": overall}.items():
        log(f"{category:24} {row['questions']:>9} {row['correct']:>8} {row['accuracy']:>8.3f}")
    median = int(statistics.median(request_tokens)) if request_tokens else 0
    log(
        f"median request tokens {median} (history limit {args.token_limit}); "
        f"asked in {timings['ask_s']:.1f} s; unjudged {overall['unjudged']}; errors {len(errors)}"
    )
    for error in errors[:20]:
        log(f"  error: {error}")
    return {
        "dataset": args.dataset,
        "model": args.model,
        "judge_model": args.judge_model or args.model,
        "token_limit": args.token_limit,
        "ask_in": args.ask_in,
        "categories": rows,
        "all": overall,
        "median_request_tokens": median,
        "counts": counts,
        "seconds": {name: round(value, 1) for name, value in timings.items()},
        "errors": errors,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m bench.qa", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("locomo", "longmemeval"), default="locomo")
    parser.add_argument(
        "--data", help="LoCoMo: the JSON file (default ../shared/data/locomo6.json); LongMemEval: the folder"
    )
    parser.add_argument("--base-url", default=env("QA_BASE_URL") or env("OPENAI_BASE_URL"))
    parser.add_argument("--model", default=env("QA_MODEL") or env("AGENTMEMORY_LLM_MODEL"))
    parser.add_argument("--api-key", default=env("QA_API_KEY") or env("OPENAI_API_KEY"))
    parser.add_argument("--judge-base-url", default=env("QA_JUDGE_BASE_URL"))
    parser.add_argument("--judge-model", default=env("QA_JUDGE_MODEL"))
    parser.add_argument("--judge-api-key", default=env("QA_JUDGE_API_KEY"))
    parser.add_argument(
        "--structured-output",
        choices=("json_schema", "prompt"),
        default="json_schema",
        help="how the summariser asks for its JSON (prompt: for servers without response_format)",
    )
    parser.add_argument("--token-limit", type=int, default=4000, help="the agent's history limit (tokens)")
    parser.add_argument("--fold-tokens", type=int, default=2000, help="messages per summariser call (tokens)")
    parser.add_argument(
        "--ask-in", choices=("new", "same"), default="new", help="where each question is asked"
    )
    parser.add_argument("--conversations", type=int, help="LoCoMo: the first N conversations")
    parser.add_argument(
        "--sessions", type=int, help="LoCoMo: the first N sessions of each (and their questions)"
    )
    parser.add_argument("--questions", type=int, help="ask at most N questions in all")
    parser.add_argument("--categories", help="LoCoMo: categories to ask, e.g. 1,2,3,4 (the default)")
    parser.add_argument(
        "--split",
        choices=("dev", "held-out", "all"),
        default="dev",
        help="LongMemEval: MD5 of the id 0-7, 8-f, or all",
    )
    parser.add_argument("--quick", action="store_true", help="1 conversation, 2 sessions, 5 questions")
    parser.add_argument("--keep", action="store_true", help="keep the scratch users and their data")
    parser.add_argument("--json", dest="json_path", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations = args.conversations or 1
        args.sessions = args.sessions or 2
        args.questions = args.questions or 5
    if not args.model:
        parser.error("give --model (or QA_MODEL / AGENTMEMORY_LLM_MODEL)")
    if args.dataset == "longmemeval" and not args.data:
        parser.error("LongMemEval needs --data: the folder of its question files")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data or DEFAULT_LOCOMO)
    if not data.exists():
        print(f"{args.dataset} data not found at {data}", file=sys.stderr)
        return 2
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
