"""``manage.py pgvector_index_migration <app_label>``: write a migration into one of the
host's apps that creates the HNSW indexes of one embedding model's vectors
(``agentmemory.contrib.pgvector.indexes.index_migration``); ``migrate`` then runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader

from agentmemory.contrib.pgvector.indexes import TABLES, hnsw_index_name, index_migration
from agentmemory.recall.backends import get_embedder
from agentmemory.recall.embedders import EmbeddingError


class Command(BaseCommand):
    help = (
        "Write a migration into APP_LABEL that creates the HNSW indexes of one embedding "
        "model's vectors on agentmemory's pgvector tables (default: the model of "
        "AGENTMEMORY['EMBEDDER'] and the length of the vectors it returns). Run `migrate` "
        "after it. One migration per model and length; a model that changes length needs "
        "another."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("app_label", help="one of your apps with a migrations package")
        parser.add_argument("--embedding-model", help="the model name stored with the vectors")
        parser.add_argument("--dimensions", type=int, help="the length of its vectors")
        parser.add_argument("--dry-run", action="store_true", help="print the migration, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        app_label = options["app_label"]
        try:
            config = apps.get_app_config(app_label)
        except LookupError as exc:
            raise CommandError(f"no installed app with the label {app_label!r}") from exc
        model, dimensions = self._model(options)
        loader = MigrationLoader(None, ignore_no_migrations=True)
        if app_label not in loader.migrated_apps:
            raise CommandError(f"{app_label!r} has no migrations: run `makemigrations {app_label}` first")
        leaves = loader.graph.leaf_nodes(app_label)
        number = max((MigrationAutodetector.parse_number(name) or 0 for _, name in leaves), default=0) + 1
        try:
            text = index_migration(model, dimensions, dependencies=leaves)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        digest = hnsw_index_name("msg", model, dimensions).rsplit("_", 1)[1]
        name = f"{number:04d}_agentmemory_hnsw_{dimensions}_{digest}"
        if options["dry_run"]:
            self.stdout.write(text)
            return
        module = loader.migrations_module(app_label)[0]
        if module is None:
            raise CommandError(f"{app_label!r} has no migrations package")
        directory = Path(config.path) / "migrations"
        if module != f"{config.name}.migrations" or not directory.is_dir():
            raise CommandError(f"write it yourself into {module}: run with --dry-run to print it")
        path = directory / f"{name}.py"
        path.write_text(text)
        tables = ", ".join(TABLES.values())
        self.stdout.write(f"{path}: HNSW indexes of {model!r} ({dimensions} dimensions) on {tables}")

    def _model(self, options: dict[str, Any]) -> tuple[str, int]:
        """The embedding model and its vectors' length: as given, or from the configured
        embedder (its ``model``, and the length of one vector it returns)."""
        model, dimensions = options["embedding_model"], options["dimensions"]
        if model is None or dimensions is None:
            embedder = get_embedder()
            if embedder is None:
                raise CommandError("give --embedding-model and --dimensions, or set AGENTMEMORY['EMBEDDER']")
            model = model or embedder.model
            if dimensions is None:
                try:
                    (vector,) = embedder.embed(["dimensions"])
                except EmbeddingError as exc:
                    raise CommandError(f"the embedder failed ({exc}): give --dimensions") from exc
                dimensions = len(vector)
        return str(model), int(dimensions)
