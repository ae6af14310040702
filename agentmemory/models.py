"""Models: conversations, their messages (tool calls and results included) and summaries."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models, router
from django.db.models import Q
from django.utils import timezone
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from agentmemory.exceptions import WindowUnavailable
from agentmemory.fields import StoredJSONField, stored_window_changes
from agentmemory.managers import ConversationQuerySet, FactQuerySet, MessageQuerySet, ModelCallQuerySet
from agentmemory.messages import (
    ChatMessage,
    ContentPart,
    PendingToolCall,
    Role,
    ToolCall,
    pending_calls,
    stored_object,
    stored_parts,
    stored_tool_calls,
)


class MessageRole(models.TextChoices):
    """Stored roles; the values are those of ``agentmemory.messages.Role``."""

    SYSTEM = Role.SYSTEM.value, _("system")
    HUMAN = Role.HUMAN.value, _("human")
    AI = Role.AI.value, _("AI")
    TOOL = Role.TOOL.value, _("tool")


def pinned_end(pinned_seq: int | None, pinned_last_seq: int | None) -> int:
    """The seq through which a conversation's stored messages are pinned: the end of its
    leading run of system messages, ``pinned_last_seq`` (``pinned_seq`` for a row written
    before that column existed); 0 when nothing is pinned (``pinned_seq`` empty)."""
    if pinned_seq is None:
        return 0
    return pinned_last_seq if pinned_last_seq is not None else pinned_seq


class Conversation(models.Model):
    """One thread of messages for one agent, owned by a user or by nobody.

    The counters (``last_seq``, ``message_count``, ``human_message_count``,
    ``stored_tokens``), ``pending_tool_calls`` and the pinned system prompt
    (``pinned_seq`` through ``pinned_last_seq``, and ``has_system_prompt``, true exactly when
    ``pinned_seq`` is set) are maintained by ``PersistentChatHistory`` under a row lock on
    this record; never edit them by hand.
    """

    uuid = models.UUIDField(_("public id"), default=uuid.uuid4, unique=True, editable=False)
    # DO_NOTHING: deleting a user deletes their conversations in bulk, under row locks
    # (``agentmemory.deletion.delete_owned_conversations``, a ``pre_delete`` receiver), not
    # through Django's collector, which would load every message of every conversation first.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        related_name="agentmemory_conversations",
    )
    agent_key = models.CharField(_("agent key"), max_length=100, blank=True, db_index=True)
    title = models.CharField(_("title"), max_length=200, blank=True)
    metadata = StoredJSONField(_("metadata"), default=dict, blank=True, reader=stored_object)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    last_seq = models.BigIntegerField(_("last seq"), default=0, editable=False)
    message_count = models.BigIntegerField(_("messages"), default=0, editable=False)
    human_message_count = models.BigIntegerField(_("human messages"), default=0, editable=False)
    stored_tokens = models.BigIntegerField(_("stored tokens"), default=0, editable=False)
    has_system_prompt = models.BooleanField(
        _("pinned system prompt"),
        default=False,
        editable=False,
        help_text=_(
            "The conversation opens with system messages (pinned seq to pinned last seq), "
            "pinned in every context window."
        ),
    )
    pinned_seq = models.BigIntegerField(
        _("pinned seq"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "Seq of the pinned system prompt: the first message stored while the conversation "
            "held none (new, or just cleared), when it is a system message; empty: none."
        ),
    )
    pinned_last_seq = models.BigIntegerField(
        _("pinned last seq"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "Seq of the last pinned system message: every system message stored while the "
            "conversation held only system messages is pinned, from pinned seq to this one; "
            "empty: none."
        ),
    )
    pending_tool_calls = StoredJSONField(
        _("pending tool calls"),
        default=dict,
        blank=True,
        editable=False,
        help_text=_(
            "Tool calls still awaiting their result: "
            "{tool call id: seq of the AI message that made the call}."
        ),
    )
    summary = models.ForeignKey(
        "Summary",
        verbose_name=_("current summary"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )
    compaction_started_at = models.DateTimeField(
        _("compaction started at"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("When the running compaction took its lease; empty when none runs."),
    )
    compaction_lease = models.UUIDField(
        _("compaction lease"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("Token of the compaction run holding this conversation; only it may store."),
    )
    compaction_lease_expires_at = models.DateTimeField(
        _("compaction lease expires at"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("Renewed while the run works; a lease past this time is taken over."),
    )
    compaction_requested_at = models.DateTimeField(
        _("compaction requested at"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("A compaction was requested and has not completed since; the sweep picks it up."),
    )
    compaction_error = models.TextField(
        _("last compaction error"),
        blank=True,
        default="",
        editable=False,
        help_text=_("Why the last compaction could not be enqueued or failed; empty after a success."),
    )
    compaction_failed_at = models.DateTimeField(
        _("compaction failed at"), null=True, blank=True, editable=False
    )
    compaction_failures = models.PositiveIntegerField(
        _("failed compaction runs"),
        default=0,
        editable=False,
        help_text=_(
            "Compaction runs that failed in a row since the last success; the sweep waits "
            "longer before each retry."
        ),
    )
    summary_window_tokens = models.PositiveIntegerField(
        _("summary window (tokens)"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The window budget the last compaction request named (an agent's limit, a window "
            "that closed a gap); a request naming none makes summaries fit it. Empty: "
            "DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT."
        ),
    )
    summary_system_tokens = models.PositiveIntegerField(
        _("system prompt beside the summary (tokens)"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The system prompt sent in that window when it is not stored (an agent's); empty: the stored one."
        ),
    )
    retention_days = models.PositiveIntegerField(
        _("retention (days)"),
        null=True,
        blank=True,
        help_text=_(
            "Purge this conversation after this many days without activity; empty: the agent's "
            "or the global retention setting."
        ),
    )
    content_purged_at = models.DateTimeField(
        _("content purged at"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("When retention blanked the content of its messages (rows and counters kept)."),
    )

    objects = ConversationQuerySet.as_manager()

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-updated_at", "-id"]
        indexes = [
            # No index holds ``updated_at``: every append moves it, and on PostgreSQL an
            # update that changes an indexed column cannot be a heap-only (HOT) update, so
            # each append would also write a new entry into every index of this table
            # (about twice the work of the append itself). A user's conversations are found
            # by the ``owner`` index and sorted.
            # The compaction sweep looks for pending requests every minute: only the few
            # conversations with one are in this index.
            models.Index(
                fields=["compaction_requested_at"],
                name="agentmemory_conv_compact_req",
                condition=Q(compaction_requested_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(retention_days__isnull=True) | Q(retention_days__gte=1),
                name="agentmemory_conv_retention_positive",
            ),
            models.CheckConstraint(
                condition=Q(last_seq__gte=0)
                & Q(message_count__gte=0)
                & Q(human_message_count__gte=0)
                & Q(stored_tokens__gte=0),
                name="agentmemory_conv_counts_nonneg",
            ),
        ]

    def __str__(self) -> str:
        return self.label()

    @property
    def pinned_through(self) -> int:
        """The seq through which stored messages are pinned: the end of the leading run of
        system messages (``pinned_last_seq``; ``pinned_seq`` for a row written before that
        column existed); 0 when nothing is pinned. No summary folds them."""
        return pinned_end(self.pinned_seq, self.pinned_last_seq)

    @property
    def own_summary(self) -> Summary | None:
        """The current summary (``summary``) where it is one of this conversation's own;
        ``None`` without one, and where ``summary_id`` names another conversation's summary
        (a row written by hand: raw SQL, a data migration, a restore of one table), whose
        text is never this conversation's (``manage.py repair_conversations`` puts one of
        its own back). Reads the relation: a query unless it was selected with
        ``select_related("summary")``."""
        summary = self.summary
        return summary if summary is not None and summary.conversation_id == self.pk else None

    @property
    def pinned_count(self) -> int:
        """How many seqs the pinned run spans (``pinned_seq`` through ``pinned_through``;
        0: none). Appends hand out consecutive seqs, so it is the number of pinned messages
        unless an imported document left holes."""
        return 0 if self.pinned_seq is None else self.pinned_through - self.pinned_seq + 1

    def label(self, title_chars: int | None = None) -> str:
        """A name that tells conversations apart: the title (cut to ``title_chars`` characters
        when given, for narrow list columns) followed by the first 8 hex digits of the uuid
        (``"Refund (1a2b3c4d)"``), or ``"Conversation 1a2b3c4d"`` when untitled. Two
        conversations with one title differ in the digits; the whole uuid is on the
        conversation's page."""
        short = self.uuid.hex[:8]
        if not self.title:
            return f"Conversation {short}"
        title = self.title if title_chars is None else Truncator(self.title).chars(title_chars)
        return f"{title} ({short})"

    def pending_calls(
        self, *, now: datetime | None = None, using: str | None = None
    ) -> list[PendingToolCall]:
        """The tool calls still awaiting their result, oldest call first (in the order of
        each AI message's ``tool_calls``), read from ``pending_tool_calls`` as stored on this
        instance plus one query for the AI messages that made them.

        Args:
            now: the time ages are measured at (defaults to now).
            using: the database alias to read the AI messages from (defaults to the one the
                routers choose for reading ``Message``).
        """
        pending = pending_calls(self.pending_tool_calls)
        if not pending:
            return []
        from agentmemory.conf import app_settings

        now = now or timezone.now()
        timeout = app_settings().PENDING_TOOL_CALL_TIMEOUT
        using = using or router.db_for_read(Message, instance=self)
        calls: list[PendingToolCall] = []
        rows = (
            Message.objects.using(using)
            .filter(conversation_id=self.pk, seq__in=set(pending.values()))
            .order_by("seq")
            .values_list("seq", "tool_calls", "created_at")
        )
        for seq, tool_calls, created_at in rows:
            for call in tool_calls or ():
                if pending.get(call.get("id")) == seq:
                    age = (now - created_at).total_seconds()
                    calls.append(
                        PendingToolCall(
                            tool_call_id=call["id"],
                            name=call.get("name", ""),
                            arguments=call.get("arguments") or {},
                            ai_seq=seq,
                            requested_at=created_at,
                            age_seconds=age,
                            abandoned=timeout is not None and age >= timeout,
                        )
                    )
        return calls

    def delete(self, using: str | None = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete with messages and summaries, after the row lock (see
        ``agentmemory.managers.ConversationQuerySet.delete``)."""
        using = using or router.db_for_write(Conversation, instance=self)
        result = Conversation.objects.using(using).filter(pk=self.pk).delete()
        self.pk = None  # as Model.delete() leaves a deleted instance
        return result


class Message(models.Model):
    """One stored message. Order is ``seq`` (unique per conversation), never a timestamp."""

    # No index of its own: the unique (conversation, seq) index serves every lookup by
    # conversation, and one index less is one write less on every append.
    conversation = models.ForeignKey(
        Conversation,
        verbose_name=_("conversation"),
        on_delete=models.CASCADE,
        related_name="messages",
        db_index=False,
    )
    seq = models.BigIntegerField(_("seq"))
    role = models.CharField(_("role"), max_length=10, choices=MessageRole.choices)
    # NULL is kept apart from "": an AI message that only calls tools has content null in the
    # OpenAI format, and it must round-trip exactly (bug-cases BUG-20).
    content = models.TextField(_("content"), null=True, blank=True)  # noqa: DJ001
    # The parts of a multi-part message (texts, images, audio, files) as
    # ``ContentPart.to_dict()`` dicts; NULL for plain text. ``content`` holds their text.
    parts = StoredJSONField(_("content parts"), null=True, blank=True, default=None, reader=stored_parts)
    tool_calls = StoredJSONField(_("tool calls"), default=list, blank=True, reader=stored_tool_calls)
    tool_call_id = models.CharField(_("tool call id"), max_length=255, blank=True)
    name = models.CharField(_("name"), max_length=255, blank=True)
    token_count = models.PositiveIntegerField(_("token count"))
    token_counter = models.CharField(_("token counter"), max_length=100)
    exchange_seq = models.BigIntegerField(
        _("tool exchange seq"),
        null=True,
        blank=True,
        help_text=_(
            "For an AI message with tool calls, its own seq; for a tool result, the seq of the AI "
            "message whose call it answers, even when stored after later messages; empty for "
            "other messages and for orphaned tool results."
        ),
    )
    metadata = StoredJSONField(_("metadata"), default=dict, blank=True, reader=stored_object)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="agentmemory_msg_conv_seq_uniq"),
            models.CheckConstraint(
                condition=Q(role__in=[r.value for r in Role]), name="agentmemory_msg_role_valid"
            ),
            models.CheckConstraint(
                condition=~Q(role=Role.TOOL.value) | ~Q(tool_call_id=""),
                name="agentmemory_msg_tool_has_call_id",
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="agentmemory_msg_seq_positive"),
        ]
        indexes = [
            # Only tool results that answer no call (stored by relaxed imports): context
            # windows find those inside a gap without reading the messages around them.
            # Other rows never enter it, so appends pay nothing for it.
            models.Index(
                fields=["conversation", "seq"],
                name="agentmemory_msg_orphan_idx",
                condition=Q(role=Role.TOOL.value, exchange_seq__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.role}"

    @property
    def is_orphan(self) -> bool:
        """A tool result that answers no stored tool call (only possible via relaxed import)."""
        return self.role == Role.TOOL and self.exchange_seq is None

    def to_chat_message(self) -> ChatMessage:
        return ChatMessage(
            role=Role(self.role),
            content=self.content,
            tool_calls=tuple(ToolCall.from_stored(c) for c in self.tool_calls or ()),
            tool_call_id=self.tool_call_id,
            name=self.name,
            metadata=self.metadata or {},
            seq=self.seq,
            id=self.pk,
            token_count=self.token_count,
            parts=tuple(ContentPart.from_dict(p) for p in self.parts or ()),
        )


class Summary(models.Model):
    """An LLM-written account of a conversation's messages ``first_seq..through_seq``.

    Each summary is built from ``previous`` plus the messages after ``previous.through_seq``
    (incremental compaction). ``UniqueConstraint(conversation, through_seq)`` makes
    compaction idempotent.
    """

    conversation = models.ForeignKey(
        Conversation, verbose_name=_("conversation"), on_delete=models.CASCADE, related_name="summaries"
    )
    text = models.TextField(_("text"))
    first_seq = models.BigIntegerField(_("first seq"))
    through_seq = models.BigIntegerField(_("through seq"))
    previous = models.ForeignKey(
        "self",
        verbose_name=_("previous summary"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="next_summaries",
    )
    human_messages_covered = models.BigIntegerField(_("human messages covered"), default=0)
    human_message_count = models.BigIntegerField(
        _("human messages when made"),
        default=0,
        help_text=_("The conversation's human message count when this compaction ran (trigger baseline)."),
    )
    tokens_covered = models.BigIntegerField(
        _("stored tokens covered"),
        default=0,
        help_text=_("Sum of stored token counts of the messages first seq..through seq."),
    )
    token_count = models.PositiveIntegerField(_("token count"), default=0)
    token_counter = models.CharField(_("token counter"), max_length=100, blank=True)
    model = models.CharField(_("model"), max_length=200, blank=True)
    prompt_version = models.CharField(_("prompt version"), max_length=50, blank=True)
    input_tokens = models.PositiveIntegerField(_("input tokens"), default=0)
    output_tokens = models.PositiveIntegerField(_("output tokens"), default=0)
    llm_calls = models.PositiveIntegerField(_("LLM calls"), default=0)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("summary")
        verbose_name_plural = _("summaries")
        ordering = ["conversation", "-through_seq"]
        get_latest_by = "through_seq"
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "through_seq"], name="agentmemory_summary_conv_through_uniq"
            ),
            models.CheckConstraint(
                condition=Q(through_seq__gte=models.F("first_seq")), name="agentmemory_summary_span_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"summary through #{self.through_seq}"


# ---------------------------------------------------------------------------------------------
# Long-term memory: facts that outlive a conversation (knowledge and semantic memory), and the
# embeddings beside facts and messages. Full-text indexes are created by migration (a GIN index
# on PostgreSQL, FTS5 tables on SQLite); see ``agentmemory.recall``.
# ---------------------------------------------------------------------------------------------


class FactKind(models.TextChoices):
    """Which memory a fact belongs to. The two share the table, scopes and rules, never rows:
    one's reads, repeats, supersessions and deletes never reach the other's facts."""

    KNOWLEDGE = "knowledge", _("knowledge memory")
    SEMANTIC = "semantic", _("semantic memory")


class Fact(models.Model):
    """One remembered fact of one user, scoped by agent key and namespace (both exact).

    The API names a fact by its public ``uuid``, never by its primary key (which the Python API,
    ``KnowledgeMemory``, takes). A changed fact supersedes the old one: the old row points at its
    successor through ``superseded_by`` (since ``superseded_at``) and stays as history, out of
    default recall; deleting the successor deletes its history with it. ``expires_at`` is
    enforced when reading; nothing that reads a fact moves it."""

    uuid = models.UUIDField(_("public id"), default=uuid.uuid4, unique=True, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        on_delete=models.CASCADE,
        related_name="agentmemory_facts",
    )
    agent_key = models.CharField(_("agent key"), max_length=100, blank=True, default="")
    namespace = models.CharField(_("namespace"), max_length=200, blank=True, default="")
    kind = models.CharField(
        _("memory"),
        max_length=16,
        choices=FactKind.choices,
        default=FactKind.KNOWLEDGE,
        help_text=_(
            "Knowledge memory (KnowledgeMemory, the agents' remember tool) or semantic memory "
            "(SemanticMemory's default store); neither reads nor deletes the other's facts."
        ),
    )
    content = models.TextField(_("content"))
    content_hash = models.CharField(
        _("content hash"),
        max_length=64,
        editable=False,
        help_text=_("SHA-256 of the content in one normal form (NFKC, spaces collapsed): repeats."),
    )
    category = models.CharField(_("category"), max_length=100, default="general")
    importance = models.FloatField(_("importance"), default=0.5)
    persistent = models.BooleanField(
        _("persistent"),
        default=False,
        help_text=_("Persistent facts are kept until forgotten; others are recent entries that age out."),
    )
    in_daily_log = models.BooleanField(
        _("in the daily log"),
        default=True,
        help_text=_(
            "Listed among the recent entries (the knowledge seed's daily log) until the log is "
            "cleared or pruned; a persistent fact stays a fact either way."
        ),
    )
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    source_message = models.ForeignKey(
        Message,
        verbose_name=_("source message"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="facts",
    )
    superseded_by = models.ForeignKey(
        "self",
        verbose_name=_("superseded by"),
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="supersedes",
    )
    superseded_at = models.DateTimeField(_("superseded at"), null=True, blank=True)
    metadata = StoredJSONField(_("metadata"), default=dict, blank=True, reader=stored_object)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    first_remembered_at = models.DateTimeField(
        _("first remembered at"),
        null=True,
        blank=True,
        help_text=_(
            "When a fact told again was first remembered (a repeat moves created at, the daily "
            "log's date, to the last time); empty: created at."
        ),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    last_recalled_at = models.DateTimeField(_("last recalled at"), null=True, blank=True)
    recall_count = models.PositiveIntegerField(_("recall count"), default=0)

    objects = FactQuerySet.as_manager()

    class Meta:
        verbose_name = _("fact")
        verbose_name_plural = _("facts")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["owner", "agent_key", "namespace", "-created_at"], name="agentmemory_fact_scope_idx"
            ),
            models.Index(fields=["superseded_by"], name="agentmemory_fact_sup_idx"),
            # the knowledge block's persistent facts, most important first (a LIMIT scan, not a
            # sort of every fact of the scope: 100 ms at 100,000 facts)
            models.Index(
                "owner",
                "agent_key",
                "namespace",
                "kind",
                models.F("importance").desc(),
                models.F("created_at").desc(),
                models.F("id").desc(),
                condition=Q(superseded_by__isnull=True, persistent=True),
                name="agentmemory_fact_block_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(importance__gte=0.0) & Q(importance__lte=1.0),
                name="agentmemory_fact_importance_range",
            ),
            models.UniqueConstraint(
                fields=["owner", "agent_key", "namespace", "kind", "content_hash"],
                condition=Q(superseded_by__isnull=True),
                name="agentmemory_fact_live_content_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"fact {self.pk} ({self.category})"

    def delete(self, using: str | None = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Delete with its history and embeddings (see ``agentmemory.managers.FactQuerySet.delete``)."""
        using = using or router.db_for_write(Fact, instance=self)
        result, self.pk = Fact.objects.using(using).filter(pk=self.pk).delete(), None  # as Model.delete()
        return result


class EmbeddingBase(models.Model):
    """Columns shared by stored vectors: the embedding model's name, the vector's length and
    the vector itself (float32, little-endian bytes)."""

    model = models.CharField(_("embedding model"), max_length=200)
    dimensions = models.PositiveIntegerField(_("dimensions"))
    vector = models.BinaryField(_("vector"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        abstract = True


class FactEmbedding(EmbeddingBase):
    """The vector of one fact by one embedding model."""

    fact = models.ForeignKey(
        Fact, verbose_name=_("fact"), on_delete=models.CASCADE, related_name="embeddings"
    )

    class Meta:
        verbose_name = _("fact embedding")
        verbose_name_plural = _("fact embeddings")
        ordering = ["fact", "model"]
        constraints = [
            models.UniqueConstraint(fields=["fact", "model"], name="agentmemory_factemb_fact_model_uniq"),
        ]

    def __str__(self) -> str:
        return f"embedding of fact {self.fact_id} ({self.model})"


class MessageEmbedding(EmbeddingBase):
    """The vector of one stored message by one embedding model."""

    message = models.ForeignKey(
        Message, verbose_name=_("message"), on_delete=models.CASCADE, related_name="embeddings"
    )

    class Meta:
        verbose_name = _("message embedding")
        verbose_name_plural = _("message embeddings")
        ordering = ["message", "model"]
        constraints = [
            models.UniqueConstraint(fields=["message", "model"], name="agentmemory_msgemb_msg_model_uniq"),
        ]

    def __str__(self) -> str:
        return f"embedding of message {self.message_id} ({self.model})"


# ---------------------------------------------------------------------------------------------
# Model calls: what each call to a language or embedding model was sent and what it cost.


class ModelCallKind(models.TextChoices):
    """What a recorded model call was for."""

    CHAT = "chat", _("chat (agent turn)")
    COMPACTION = "compaction", _("compaction (summariser)")
    EMBEDDING = "embedding", _("embedding")


class UsageSource(models.TextChoices):
    """Where a recorded call's token figures come from."""

    PROVIDER = "provider", _("reported by the provider")
    COUNTED = "counted", _("counted by agentmemory")


class ModelCall(models.Model):
    """One call to a model: an agent's chat call, a summariser call or an embedding request.

    A chat call records the context window it sent without copying stored messages:
    ``first_seq..last_seq`` of the history, the summary, the texts that are not stored
    messages (system prompt with its knowledge block, the summary message as sent, the tool
    declarations: ``PromptText`` rows named by their SHA-256 digest), and in
    ``window_changes`` the few ways the copy sent differed from storage (left-out exchanges,
    truncated and stubbed copies, placeholder results, and under ``"provider_changes"`` what
    the provider adapter changed to meet the provider's limits). ``window()`` rebuilds the
    messages exactly as sent (``agentmemory.calls.recorded_window``).

    Token figures: ``input_tokens`` counts every input token (cached ones included),
    ``output_tokens`` the reply's; ``usage_source`` says whether the provider reported them
    or agentmemory counted them with its token counter. The ``*_part_tokens`` fields split
    the window by the counter: system prompt, knowledge block, summary, history, tool
    declarations.
    """

    uuid = models.UUIDField(_("public id"), default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(_("kind"), max_length=16, choices=ModelCallKind.choices)
    conversation = models.ForeignKey(
        Conversation,
        verbose_name=_("conversation"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="model_calls",
        db_index=False,
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="agentmemory_model_calls",
        db_index=False,
    )
    agent_key = models.CharField(_("agent key"), max_length=100, blank=True)
    message = models.ForeignKey(
        Message,
        verbose_name=_("AI message"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="model_calls",
        help_text=_("The AI message this call produced (chat calls)."),
    )
    round = models.PositiveSmallIntegerField(_("tool round"), default=0)
    model = models.CharField(_("model"), max_length=200, blank=True)
    finish_reason = models.CharField(_("finish reason"), max_length=50, blank=True)
    latency = models.FloatField(_("latency (seconds)"), default=0.0)
    # the window sent (chat calls)
    max_tokens = models.PositiveIntegerField(_("window budget (tokens)"), null=True, blank=True)
    first_seq = models.BigIntegerField(_("first seq"), null=True, blank=True)
    last_seq = models.BigIntegerField(_("last seq"), null=True, blank=True)
    summary = models.ForeignKey(
        Summary,
        verbose_name=_("summary used"),
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    system_prompt_digest = models.CharField(_("system prompt digest"), max_length=64, blank=True)
    summary_digest = models.CharField(_("summary message digest"), max_length=64, blank=True)
    tools_digest = models.CharField(_("tool declarations digest"), max_length=64, blank=True)
    window_changes = StoredJSONField(
        _("window changes"),
        default=dict,
        blank=True,
        reader=stored_window_changes,
        help_text=_(
            "How the copy sent differed from storage: left-out seqs, truncated copies "
            "(characters kept), stubbed results, placeholder results."
        ),
    )
    system_tokens = models.PositiveIntegerField(_("system prompt tokens"), default=0)
    knowledge_tokens = models.PositiveIntegerField(_("knowledge tokens"), default=0)
    summary_tokens = models.PositiveIntegerField(_("summary tokens"), default=0)
    history_tokens = models.PositiveIntegerField(_("history tokens"), default=0)
    tools_tokens = models.PositiveIntegerField(_("tool declaration tokens"), default=0)
    # usage
    input_tokens = models.PositiveIntegerField(_("input tokens"), default=0)
    output_tokens = models.PositiveIntegerField(_("output tokens"), default=0)
    cached_input_tokens = models.PositiveIntegerField(_("cached input tokens"), default=0)
    cache_creation_input_tokens = models.PositiveIntegerField(_("cache write input tokens"), default=0)
    usage_source = models.CharField(_("usage source"), max_length=10, choices=UsageSource.choices)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    objects = ModelCallQuerySet.as_manager()

    class Meta:
        verbose_name = _("model call")
        verbose_name_plural = _("model calls")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["conversation", "created_at"], name="agentmemory_call_conv_idx"),
            models.Index(fields=["owner", "created_at"], name="agentmemory_call_owner_idx"),
            models.Index(fields=["agent_key", "created_at"], name="agentmemory_call_agent_idx"),
            models.Index(fields=["created_at"], name="agentmemory_call_created_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ModelCallKind.values), name="agentmemory_call_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(usage_source__in=UsageSource.values), name="agentmemory_call_source_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} call {self.pk} ({self.model})"

    #: what rebuilds the messages a chat call sent (``agentmemory.calls.recorded_window``),
    #: connected by ``AgentMemoryConfig.ready()``: the rebuild reads with the window code,
    #: which sits above the models (docs/architecture.md)
    window_reader: ClassVar[Callable[[ModelCall], list[ChatMessage]] | None] = None

    def window(self) -> list[ChatMessage]:
        """The messages this chat call sent, rebuilt from storage, exactly as sent.

        Raises:
            agentmemory.calls.WindowUnavailable: not a chat call, its conversation was
                deleted, or a message or text it sent is no longer stored.
        """
        if ModelCall.window_reader is None:
            raise ImproperlyConfigured(
                "ModelCall.window() needs the agentmemory app to be ready (INSTALLED_APPS)"
            )
        return ModelCall.window_reader(self)

    def tools(self) -> list[dict[str, Any]]:
        """The tool declarations this chat call sent (``[]`` when none).

        Raises:
            agentmemory.calls.WindowUnavailable: the declarations are no longer stored.
        """
        if not self.tools_digest:
            return []
        if self.conversation_id is None:
            raise WindowUnavailable(f"model call {self.pk}: its conversation was deleted")
        return list(json.loads(self.sent_texts([self.tools_digest])[self.tools_digest]))

    def sent_texts(self, digests: Sequence[str]) -> dict[str, str]:
        """The ``PromptText``s this call sent, by digest (``""`` digests skipped; ``{}`` when
        none is wanted or the conversation was deleted). One query.

        Raises:
            agentmemory.calls.WindowUnavailable: a text it sent is no longer stored.
        """
        wanted = [d for d in digests if d]
        if not wanted or self.conversation_id is None:
            return {}
        found = dict(
            PromptText.objects.using(router.db_for_read(PromptText))
            .filter(conversation_id=self.conversation_id, digest__in=wanted)
            .values_list("digest", "text")
        )
        missing = [d for d in wanted if d not in found]
        if missing:
            raise WindowUnavailable(f"model call {self.pk}: the texts {missing} it sent are no longer stored")
        return found


class PromptText(models.Model):
    """A text sent to a model that is not a stored message (a system prompt with its
    knowledge block, a summary message as sent, tool declarations as JSON), stored once per
    conversation and named by its SHA-256 digest (``ModelCall.*_digest``)."""

    conversation = models.ForeignKey(
        Conversation,
        verbose_name=_("conversation"),
        on_delete=models.CASCADE,
        related_name="prompt_texts",
        db_index=False,
    )
    digest = models.CharField(_("SHA-256 digest"), max_length=64)
    text = models.TextField(_("text"))
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("prompt text")
        verbose_name_plural = _("prompt texts")
        ordering = ["conversation", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "digest"], name="agentmemory_prompttext_uniq"),
        ]

    def __str__(self) -> str:
        return f"prompt text {self.digest[:12]}"
