"""Recall benchmark on LoCoMo: ``python -m bench.recall [--quick] [--backend NAME ...] [--json out.json]``.

Each dialogue turn of the LoCoMo conversations is stored as a message of one user's
conversation (speaker A as the human, speaker B as the AI; ``dia_id``, speaker and session
date in the message metadata), written at its session's date (``created_at``). Each question
of categories 1-4 (multi-hop, temporal, open-domain, single-hop) is asked through
``agentmemory.recall.search_messages`` limited to its conversation, and the benchmark reports
evidence recall@5 and @10 (the share of a question's evidence turns among the first k hits,
averaged over questions) with query latency p50/p95 (milliseconds). It runs on the database
of ``DATABASE_URL`` (SQLite by default) in a scratch user's rows, deleted at the end.

Backends that rank by embeddings ("embedding", "pgvector", "hybrid") use the local model
(``agentmemory.recall.local.MiniLMEmbedder``, the ``local-embeddings`` extra) unless
``--embedder`` names another ``Embedder`` class; every stored turn is embedded first (timed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo6.json"
CATEGORIES = (1, 2, 3, 4)


def turn_text(turn: dict[str, Any]) -> str:
    """The stored content of a turn: the speaker's name, the text and, for a shared photo,
    its caption (the words a later question uses are often in either)."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def load(path: Path, conversations: int | None) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(path.read_text())
    return data[:conversations] if conversations else data


def session_time(text: str) -> datetime | None:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023") as an aware datetime (UTC), or None."""
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def store(samples: list[dict[str, Any]], owner: Any) -> dict[str, int]:
    """Store every turn, written at its session's date and time (``created_at``), as a
    conversation's messages are; returns sample id -> conversation id."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ChatMessage
    from agentmemory.models import Conversation, Message

    out: dict[str, int] = {}
    for sample in samples:
        conv_data = sample["conversation"]
        conv = Conversation.objects.create(owner=owner, agent_key="locomo", title=sample["sample_id"])
        history = PersistentChatHistory(conv)
        n = 1
        messages = []
        sessions: list[tuple[int, datetime | None]] = []
        while f"session_{n}" in conv_data:
            date = conv_data.get(f"session_{n}_date_time", "")
            sessions.append((len(conv_data[f"session_{n}"]), session_time(date)))
            for turn in conv_data[f"session_{n}"]:
                meta = {"dia_id": turn["dia_id"], "speaker": turn["speaker"], "session_date": date}
                make = ChatMessage.human if turn["speaker"] == conv_data["speaker_a"] else ChatMessage.ai
                messages.append(make(turn_text(turn), metadata=meta))
            n += 1
        history.add_messages(messages)
        first = 1
        for count, when in sessions:
            if when is not None:
                Message.objects.filter(conversation=conv, seq__gte=first, seq__lt=first + count).update(
                    created_at=when
                )
            first += count
        out[sample["sample_id"]] = conv.pk
    return out


def evaluate(
    samples: list[dict[str, Any]], conversations: dict[str, int], owner: Any, backend: Any, limit: int | None
) -> dict[str, Any]:
    from agentmemory.recall import search_messages

    recalls: dict[int, list[float]] = {5: [], 10: []}
    latencies: list[float] = []
    asked = 0
    for sample in samples:
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES or not qa.get("evidence"):
                continue
            if limit is not None and asked >= limit:
                break
            asked += 1
            evidence = set(qa["evidence"])
            start = time.perf_counter()
            hits = search_messages(
                qa["question"],
                owner=owner,
                conversation=conversations[sample["sample_id"]],
                k=10,
                backend=backend,
            )
            latencies.append((time.perf_counter() - start) * 1000)
            ids = [h.metadata.get("dia_id") for h in hits]
            for k in recalls:
                recalls[k].append(len(evidence & set(ids[:k])) / len(evidence))
    latencies.sort()
    return {
        "questions": asked,
        "recall@5": round(statistics.fmean(recalls[5]), 3) if asked else 0.0,
        "recall@10": round(statistics.fmean(recalls[10]), 3) if asked else 0.0,
        "p50_ms": round(latencies[len(latencies) // 2], 2) if latencies else 0.0,
        "p95_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))], 2)
        if latencies
        else 0.0,
    }


EMBEDDING_BACKENDS = ("embedding", "pgvector", "hybrid")
DEFAULT_EMBEDDER = "agentmemory.recall.local.MiniLMEmbedder"


class CachedEmbedder:
    """Wraps an embedder with a file of vectors already computed (``--embedding-cache`` of
    this bench and of ``bench.memory_in_context``), so repeated runs embed each text once:
    float32 arrays keyed by the text's SHA-1 (LongMemEval's dev haystacks hold about 125,000
    messages, which the local model embeds at about 40 a second on two cores), the file
    written beside and renamed over the last, so a run stopped mid-write keeps it."""

    def __init__(self, inner: Any, path: Path) -> None:
        self.inner = inner
        self.model = inner.model
        self.path = path
        self.vectors: dict[bytes, Any] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.added = 0

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()

    def embed(self, texts: Any) -> list[Any]:
        import numpy as np

        keys = [self.key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self.vectors}
        if missing:
            for k, vector in zip(missing, self.inner.embed(list(missing.values())), strict=True):
                self.vectors[k] = np.asarray(vector, dtype=np.float32)
            self.added += len(missing)
        return [self.vectors[k] for k in keys]

    def save(self) -> None:
        if self.added:
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_bytes(pickle.dumps(self.vectors))
            os.replace(partial, self.path)
            self.added = 0


def embed_all(conversations: dict[str, int], embedder: Any, batch_size: int = 256) -> int:
    """Store a vector for every stored turn (what the append's Celery task does in production)."""
    from agentmemory.models import Message
    from agentmemory.recall.backends import EmbeddingBackend

    backend = EmbeddingBackend(embedder)
    rows = Message.objects.filter(conversation_id__in=conversations.values()).order_by("pk")
    stored = 0
    last = 0
    while batch := list(rows.filter(pk__gt=last)[:batch_size]):
        last = batch[-1].pk
        stored += backend.index(batch)
    return stored


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils.module_loading import import_string

    from agentmemory.recall import get_backend

    samples = load(Path(args.locomo), 1 if args.quick else None)
    user = get_user_model().objects.create(username=f"bench-recall-{os.getpid()}-{time.time_ns()}")
    embedder = None
    if any(name in EMBEDDING_BACKENDS for name in args.backend):
        path = getattr(args, "embedder", None) or DEFAULT_EMBEDDER
        embedder = import_string(path)()
        if getattr(args, "embedding_cache", None):
            embedder = CachedEmbedder(embedder, Path(args.embedding_cache))
    try:
        started = time.perf_counter()
        conversations = store(samples, user)
        elapsed = time.perf_counter() - started
        log(f"stored {len(samples)} conversation(s) in {elapsed:.1f}s on {connection.vendor}")
        results: dict[str, Any] = {"database": connection.vendor, "backends": {}}
        if embedder is not None:
            started = time.perf_counter()
            count = embed_all(conversations, embedder)
            elapsed = time.perf_counter() - started
            log(f"embedded {count} turns with {embedder.model} in {elapsed:.1f}s")
            results["embedding_seconds"] = round(elapsed, 1)
        for name in args.backend:
            backend = get_backend(name, embedder=embedder)
            row = evaluate(samples, conversations, user, backend, 50 if args.quick else None)
            results["backends"][name] = row
            log(
                f"{connection.vendor:10} {name:9} questions={row['questions']} "
                f"recall@5={row['recall@5']:.3f} recall@10={row['recall@10']:.3f} "
                f"p50={row['p50_ms']:.1f}ms p95={row['p95_ms']:.1f}ms"
            )
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        return results
    finally:
        from agentmemory.models import Conversation

        Conversation.objects.filter(owner=user).delete()
        user.delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one conversation, 50 questions (CI)")
    parser.add_argument("--backend", action="append", help="recall backend(s); default: fulltext")
    parser.add_argument("--locomo", default=str(DEFAULT_LOCOMO), help="path of locomo6.json")
    parser.add_argument(
        "--embedder", help="dotted path of the Embedder of embedding backends (default: the local model)"
    )
    parser.add_argument("--embedding-cache", help="a file keeping computed vectors between runs")
    parser.add_argument("--json", dest="json_path", help="write the results to this file")
    args = parser.parse_args(argv)
    args.backend = args.backend or ["fulltext"]
    if not Path(args.locomo).exists():
        print(f"LoCoMo data not found at {args.locomo}", file=sys.stderr)
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
