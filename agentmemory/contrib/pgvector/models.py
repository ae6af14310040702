"""The stored vectors of facts and messages as pgvector ``vector`` columns.

One row per (fact or message, embedding model), beside the float32 bytes of
``FactEmbedding`` / ``MessageEmbedding`` (kept on every database, so exact cosine still
works and nothing is lost when the extension goes). The column has no fixed length, since
the embedding model is the host's choice; each model gets a partial HNSW index on
``vector::vector(<dimensions>)`` for its rows (``agentmemory.contrib.pgvector.indexes``), the
layout pgvector's documentation gives for vectors of several lengths in one column.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from agentmemory.models import Fact, Message


class FactVector(models.Model):
    """The vector of one fact by one embedding model, searched through an HNSW index."""

    fact = models.ForeignKey(Fact, verbose_name=_("fact"), on_delete=models.CASCADE, related_name="pgvectors")
    model = models.CharField(_("embedding model"), max_length=200)
    vector = VectorField(_("vector"))

    class Meta:
        verbose_name = _("fact vector")
        verbose_name_plural = _("fact vectors")
        ordering = ["fact", "model"]
        constraints = [
            models.UniqueConstraint(fields=["fact", "model"], name="agentmemory_pgv_fact_model_uniq"),
        ]

    def __str__(self) -> str:
        return f"fact vector {self.pk} ({self.model})"


class MessageVector(models.Model):
    """The vector of one stored message by one embedding model, searched through an HNSW index."""

    message = models.ForeignKey(
        Message, verbose_name=_("message"), on_delete=models.CASCADE, related_name="pgvectors"
    )
    model = models.CharField(_("embedding model"), max_length=200)
    vector = VectorField(_("vector"))

    class Meta:
        verbose_name = _("message vector")
        verbose_name_plural = _("message vectors")
        ordering = ["message", "model"]
        constraints = [
            models.UniqueConstraint(fields=["message", "model"], name="agentmemory_pgv_msg_model_uniq"),
        ]

    def __str__(self) -> str:
        return f"message vector {self.pk} ({self.model})"
