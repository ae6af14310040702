"""App configuration of ``agentmemory.contrib.pgvector``."""

from django.apps import AppConfig


class PgVectorConfig(AppConfig):
    name = "agentmemory.contrib.pgvector"
    label = "agentmemory_pgvector"
    verbose_name = "Agent memory: pgvector"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentmemory import signals
        from agentmemory.contrib.pgvector.backend import (
            copy_vectors_after_rebuild,
            delete_blanked_vectors,
            store_mirrored_vectors,
        )

        # Vectors stored by the core's embedding backends and long-term memory are mirrored
        # into this app's tables (``agentmemory.contrib.pgvector.backend.store_mirrored_vectors``).
        signals.vectors_stored.connect(store_mirrored_vectors, dispatch_uid="agentmemory_pgvector_mirror")
        # blanking a conversation's words (its rows stay) takes their vectors here too
        signals.memory_deleted.connect(delete_blanked_vectors, dispatch_uid="agentmemory_pgvector_blanked")
        # ``manage.py rebuild_recall_index`` copies vectors stored before this app was installed.
        signals.recall_index_rebuilt.connect(
            copy_vectors_after_rebuild, dispatch_uid="agentmemory_pgvector_rebuild"
        )
