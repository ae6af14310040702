"""``manage.py rebuild_recall_index``: rebuild the full-text indexes of facts and messages and,
with an embedder configured, store the missing embeddings."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.db import connections

from agentmemory import signals
from agentmemory.management.base import TextArgumentsCommand, check_batch_size
from agentmemory.models import Fact, Message
from agentmemory.recall import SEARCHED_ROLES, fulltext
from agentmemory.recall.backends import EmbeddingBackend, get_embedder
from agentmemory.recall.embedders import EmbeddingError


class Command(TextArgumentsCommand):
    help = (
        "Rebuild the full-text indexes of long-term facts and stored messages (PostgreSQL GIN "
        "indexes, SQLite FTS5 tables and their triggers). With AGENTMEMORY['EMBEDDER'] set, "
        "also embed the facts and messages that have no vector of that model yet and, with "
        "agentmemory.contrib.pgvector installed on PostgreSQL, copy the vectors into its "
        "tables and name the HNSW indexes missing (`pgvector_index_migration` makes them)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--database", default="default", help="database alias (default 'default')")
        parser.add_argument(
            "--batch-size", type=int, default=256, help="rows embedded per call (default 256)"
        )
        parser.add_argument(
            "--skip-embeddings", action="store_true", help="only rebuild the full-text indexes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"]
        batch_size = check_batch_size(options["batch_size"])
        if using not in connections:
            raise CommandError(f"no database {using!r} in DATABASES")
        fulltext.rebuild(using)
        self.stdout.write("full-text indexes rebuilt")
        embedder = None if options["skip_embeddings"] else get_embedder()
        if embedder is None:
            return
        # Stores the embeddings, and the pgvector app mirrors them where it is installed.
        backend = EmbeddingBackend(embedder)
        sources: list[tuple[str, Any]] = [
            ("Fact", Fact.objects.using(using).exclude(content="")),
            (
                "Message",
                Message.objects.using(using).filter(role__in=SEARCHED_ROLES).exclude(content__isnull=True),
            ),
        ]
        for label, rows in sources:
            stored = 0
            last_pk = 0
            while batch := list(rows.filter(pk__gt=last_pk).order_by("pk")[:batch_size]):
                last_pk = batch[-1].pk
                try:
                    stored += backend.index(batch)
                except EmbeddingError as exc:
                    raise CommandError(f"embedding failed after {stored} {label} rows: {exc}") from exc
            self.stdout.write(f"{label}: {stored} embeddings stored ({embedder.model})")
        # An integration that keeps its own copy of the vectors (agentmemory.contrib.pgvector)
        # copies those stored before it was installed, and says so through ``write``.
        signals.recall_index_rebuilt.send(
            sender=type(self),
            using=using,
            embedding_model=embedder.model,
            batch_size=batch_size,
            write=self.stdout.write,
        )
