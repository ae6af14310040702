"""Memory compaction: incremental summaries of a conversation's earlier messages.

``BaseMemoryCompactor`` holds the protocol (when to compact, which span, how to store the
result safely); ``LLMMemoryCompactor`` writes the summary with a ``ChatModel``. The Celery
task ``agentmemory.tasks.compact_conversation`` runs ``compact()`` off the request path.
Design invariants K1-K6 (shared/design.md) and the bug corpus (BUG-09, 12, 13, 15, 16, 23)
are the contract.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agentmemory import signals
from agentmemory.conf import app_settings, get_token_counter
from agentmemory.exceptions import InvalidSummaryError
from agentmemory.history import PersistentChatHistory, last_foldable_seq
from agentmemory.llm.base import ChatModel
from agentmemory.messages import ChatMessage, Role
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import TokenCounter
from agentmemory.validation import text_problem

logger = logging.getLogger("agentmemory.compaction")

PROMPT_VERSION = "summary-v1"

SUMMARY_INSTRUCTIONS = (
    "You maintain the running summary of a conversation between a user and an AI assistant that "
    "can call tools. You are given the previous summary (possibly empty) and the messages that "
    "came after it. Write the updated summary: keep every fact, name, number, date, decision, "
    "preference, commitment and open question that later turns may need, and the outcome of tool "
    "calls that matter. Drop small talk. Write plain prose or short bullet points in the third "
    "person, at most {max_tokens} tokens. Output only the summary."
)
CONDENSE_INSTRUCTIONS = (
    "Shorten the following conversation summary to at most {max_tokens} tokens. Keep facts, "
    "names, numbers, dates, decisions and open questions; drop detail that later turns are "
    "unlikely to need. Output only the shortened summary."
)
# Openings of refusals and apologies: a model that did not summarise.
_REFUSAL = re.compile(
    r"^\W*(i'?m sorry|i am sorry|sorry\b|i apologi[sz]e|apologies|unfortunately|i cannot|i can'?t|"
    r"i am unable|i'?m unable|i'?m not able|as an ai\b|as a language model|as an ai language model)",
    re.IGNORECASE,
)
# Provider and transport errors that ended up in the text of a reply.
_ERROR_TEXT = re.compile(
    r"^\W*(error\b|exception\b|traceback\b)|traceback \(most recent call last\)|"
    r"\brate limit(ed| exceeded| reached)?\b|\bstatus code \d{3}\b|\b(bad gateway|gateway time-?out|"
    r"service unavailable|internal server error|too many requests)\b|\b(4\d\d|5\d\d) error\b",
    re.IGNORECASE,
)
# A reply made only of placeholders: "None", "null", "...", "N/A", an empty code fence.
_PLACEHOLDER = re.compile(r"^(none|null|n/?a|nil|undefined|\.+|-+|`+\w*\s*`*|\W*)$", re.IGNORECASE)
_HTML = re.compile(r"^<(!doctype|html|head|body|\?xml|[a-z][a-z0-9]*[\s>])", re.IGNORECASE)
_PROMPT_ECHO = ("Previous summary:", "New messages:", "Write the updated summary.")
_PAGE = 500


@dataclass(frozen=True, slots=True)
class SummaryDraft:
    """A validated summary text with what it cost to write (tokens, calls)."""

    text: str
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0


def _is_markup(text: str) -> bool:
    """A JSON document or an HTML/XML page (an error body) instead of a prose summary."""
    if text[0] in "{[" and text[-1] in "}]":
        try:
            json.loads(text)
        except ValueError:
            return False
        return True
    return bool(_HTML.match(text)) and "</" in text


class BaseMemoryCompactor:
    """When and what to compact, and storing the result safely.

    Args:
        conversation_repo: the queryset or manager conversations are read from
            (``Conversation.objects`` by default).
        conversation_id: primary key of the conversation.
        llm: the ``ChatModel`` that writes summaries (may be ``None`` for compactors that
            do not use one).
        chat_history: the conversation's ``PersistentChatHistory``.
        summarize_every_n_human: compact after this many human messages since the last
            summary (K1); defaults to ``SUMMARIZE_EVERY_N_HUMAN_MESSAGES`` (10).
        keep_recent_human_turns: newest human turns never folded (K6); default 1.
        keep_recent_messages: optionally also keep at least this many newest messages
            verbatim; the boundary then moves back to the start of a human turn (BUG-05).
        max_summary_tokens: longest summary stored (tokens); longer output is condensed.
        max_input_tokens: largest span of new messages per summariser call (tokens); longer
            spans are folded in chunks (K2).
        token_counter: counts the summary message; defaults to the configured counter.
    """

    prompt_version = PROMPT_VERSION

    def __init__(
        self,
        conversation_repo: Any,
        conversation_id: int,
        llm: ChatModel | None,
        chat_history: PersistentChatHistory | None = None,
        *,
        summarize_every_n_human: int | None = None,
        keep_recent_human_turns: int | None = None,
        keep_recent_messages: int | None = None,
        max_summary_tokens: int | None = None,
        max_input_tokens: int | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        conf = app_settings()
        self.conversation_repo = conversation_repo if conversation_repo is not None else Conversation.objects
        self.conversation_id = conversation_id
        self.llm = llm
        self.chat_history = chat_history
        self.every_n_human = summarize_every_n_human or conf.SUMMARIZE_EVERY_N_HUMAN_MESSAGES
        self.keep_recent_human_turns = (
            conf.KEEP_RECENT_HUMAN_TURNS if keep_recent_human_turns is None else keep_recent_human_turns
        )
        if self.keep_recent_human_turns < 1:
            raise ValueError("keep_recent_human_turns must be >= 1: the newest question stays verbatim (K6)")
        self.keep_recent_messages = keep_recent_messages
        self.max_summary_tokens = max_summary_tokens or conf.MAX_SUMMARY_TOKENS
        self.max_input_tokens = max_input_tokens or conf.SUMMARIZER_MAX_INPUT_TOKENS
        self.token_counter: TokenCounter = token_counter or (
            chat_history.token_counter if chat_history is not None else get_token_counter()
        )

    # -- reading ------------------------------------------------------------------------

    def _conversation(self) -> Conversation | None:
        conversation: Conversation | None = (
            self.conversation_repo.select_related("summary").filter(pk=self.conversation_id).first()  # type: ignore[misc]  # the repo is duck-typed
        )
        return conversation

    def get_summary(self) -> Summary | None:
        """The conversation's current summary, or ``None``."""
        conv = self._conversation()
        return conv.summary if conv is not None else None

    def needs_compaction(self, *, max_tokens: int | None = None) -> bool:
        """Whether a compaction is due (K1): ``every_n_human`` human messages since the last
        summary was made; or the messages the summary does not cover fill more than
        ``COMPACTION_TRIGGER_RATIO`` (0.8) of ``max_tokens`` (default
        ``DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT``); or the conversation opens with
        messages before its first human message, which no window can start on (C3)."""
        conv = self._conversation()
        if conv is None:
            return False
        summary = conv.summary
        baseline = summary.human_message_count if summary else 0
        if conv.human_message_count - baseline >= self.every_n_human:
            return True
        humans_after = conv.human_message_count - (summary.human_messages_covered if summary else 0)
        if humans_after < self.keep_recent_human_turns:
            return False  # nothing could be folded (K6)
        if summary is None and self._opens_without_human(conv):
            # The assistant spoke first (a greeting): those messages can never start a window
            # (C3), so fold them now rather than leave them outside window and summary.
            return True
        if humans_after == self.keep_recent_human_turns:
            return False
        conf = app_settings()
        budget = max_tokens or conf.DEFAULT_CONVERSATION_HISTORY_TOKEN_LIMIT
        uncovered = conv.stored_tokens - (summary.tokens_covered if summary else 0)
        # Compact before the window is full, so the next human message still finds room.
        return uncovered + (summary.token_count if summary else 0) > budget * conf.COMPACTION_TRIGGER_RATIO

    def _opens_without_human(self, conv: Conversation) -> bool:
        first_role = (
            Message.objects.filter(conversation_id=conv.pk, seq__gt=self._floor(conv))
            .order_by("seq")
            .values_list("role", flat=True)
            .first()
        )
        return first_role is not None and first_role != Role.HUMAN

    def compact_if_needed(self, *, max_tokens: int | None = None) -> bool:
        """Enqueue the compaction task when ``needs_compaction()``, on transaction commit.

        The task builds a compactor of this same class (its dotted path travels with the
        task id). Returns ``True`` when a task was enqueued. Never calls the LLM itself.
        """
        if not self.needs_compaction(max_tokens=max_tokens):
            return False
        from agentmemory.tasks import compact_conversation

        path = _importable_path(type(self))
        # The task checks again when it runs: turns that arrive while a worker is busy
        # enqueue duplicates, and only the first of them has anything to do.
        task = partial(
            compact_conversation.delay, self.conversation_id, path, max_tokens=max_tokens, only_if_needed=True
        )
        transaction.on_commit(task)
        return True

    # -- the span -----------------------------------------------------------------------

    def _floor(self, conv: Conversation) -> int:
        floor = conv.summary.through_seq if conv.summary else 0
        return max(floor, 1 if conv.has_system_prompt else 0)

    def target_boundary(self, conv: Conversation) -> int | None:
        """The ``through_seq`` the next summary should reach, or ``None`` if nothing can be
        folded: everything before the newest ``keep_recent_human_turns`` human turns (and
        before ``keep_recent_messages``), cut at the start of a human turn so that no tool
        exchange is split (K6, BUG-05, BUG-15)."""
        floor = self._floor(conv)
        humans = Message.objects.filter(conversation_id=conv.pk, role=Role.HUMAN, seq__gt=floor).order_by(
            "-seq"
        )
        kept = humans.values_list("seq", flat=True)[
            self.keep_recent_human_turns - 1 : self.keep_recent_human_turns
        ]
        kept_start = next(iter(kept), None)
        if kept_start is None:
            return None
        if self.keep_recent_messages:
            limit = conv.last_seq - self.keep_recent_messages + 1
            if limit < kept_start:
                kept_start = humans.filter(seq__lte=limit).values_list("seq", flat=True).first()
                if kept_start is None:
                    return None
        # Never cut a tool exchange still waiting for a result (unless abandoned) or answered late.
        target = last_foldable_seq(conv, floor=floor, target=kept_start - 1)
        return target if target > floor else None

    def _span(self, floor: int, target: int) -> Iterator[list[ChatMessage]]:
        """Messages ``floor+1..target`` in chunks of at most ``max_input_tokens`` (by stored
        counts), read a page at a time so memory stays bounded (K2)."""
        chunk: list[ChatMessage] = []
        tokens = 0
        last = floor
        while last < target:
            page = list(
                Message.objects.filter(
                    conversation_id=self.conversation_id, seq__gt=last, seq__lte=target
                ).order_by("seq")[:_PAGE]
            )
            if not page:
                break
            for row in page:
                if row.is_orphan:
                    continue
                if chunk and tokens + row.token_count > self.max_input_tokens:
                    yield chunk
                    chunk, tokens = [], 0
                chunk.append(row.to_chat_message())
                tokens += row.token_count
            last = page[-1].seq
        if chunk:
            yield chunk

    # -- writing ------------------------------------------------------------------------

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        """Fold ``messages`` into ``previous``; subclasses implement it."""
        raise NotImplementedError

    def validate(self, text: str) -> str:
        """The cleaned summary text, or ``InvalidSummaryError`` (K4): empty or a placeholder
        ("None", "..."), a refusal or apology, provider error text (rate limits, HTTP
        status pages, tracebacks), JSON or HTML instead of prose, an echo of the prompt, or
        text no database can store. Refusals and errors are looked for at the start only, so
        a summary may still say that the user could not log in."""
        cleaned = (text or "").strip()
        if not cleaned or _PLACEHOLDER.match(cleaned):
            raise InvalidSummaryError(f"the summariser returned an empty summary: {cleaned[:40]!r}")
        head = cleaned[:300]
        if _REFUSAL.search(head):
            raise InvalidSummaryError(f"the summariser refused: {cleaned[:120]!r}")
        if _ERROR_TEXT.search(head):
            raise InvalidSummaryError(f"the summariser returned error text: {cleaned[:120]!r}")
        if _is_markup(cleaned):
            raise InvalidSummaryError(f"the summariser returned markup, not prose: {cleaned[:120]!r}")
        if any(marker in cleaned for marker in _PROMPT_ECHO):
            raise InvalidSummaryError("the summariser echoed its prompt")
        problem = text_problem(cleaned)
        if problem:
            raise InvalidSummaryError(f"the summary {problem}")
        return cleaned

    def summary_message(self, text: str) -> ChatMessage:
        return ChatMessage.system(app_settings().SUMMARY_MESSAGE_PREFIX + text)

    def summary_tokens(self, text: str) -> int:
        """Tokens of the summary message as the context window sends it (prefix, framing)."""
        return self.token_counter.count_message(self.summary_message(text))

    def text_tokens(self, text: str) -> int:
        """Tokens of the summary text alone: what ``max_summary_tokens`` limits."""
        return self.token_counter.count_text(text)

    def _claim(self) -> Any:
        """Take the compaction lease; ``None`` when another worker holds it (K3)."""
        now = timezone.now()
        stale = now - timedelta(seconds=app_settings().COMPACTION_LEASE_SECONDS)
        taken = (
            Conversation.objects.filter(pk=self.conversation_id)
            .filter(Q(compaction_started_at__isnull=True) | Q(compaction_started_at__lt=stale))
            .update(compaction_started_at=now)
        )
        return now if taken else None

    def _release(self, claimed_at: Any) -> None:
        Conversation.objects.filter(pk=self.conversation_id, compaction_started_at=claimed_at).update(
            compaction_started_at=None
        )

    def compact(self) -> Summary | None:
        """Write the next summary now (normally called by the Celery task).

        Holds no database lock while the LLM is called; a lease on the conversation keeps
        concurrent tasks from doing the work twice, and the unique ``(conversation,
        through_seq)`` plus a boundary check under a row lock keep the summary from moving
        backwards (K3). Messages are never edited or deleted (K5).

        Returns:
            The new summary; the current one if it already reaches the target; ``None``
            when there is nothing to do, another worker holds the lease, or the
            conversation is gone (BUG-23).

        Raises:
            InvalidSummaryError: the summariser's output was unusable (nothing is stored).
            TransientLLMError, LLMError: from the model.
        """
        conv = self._conversation()
        if conv is None:
            return None
        target = self.target_boundary(conv)
        if target is None:
            return None
        claimed_at = self._claim()
        if claimed_at is None:
            logger.info("compaction of conversation %s already running", self.conversation_id)
            return None
        try:
            return self._compact(conv, target)
        finally:
            self._release(claimed_at)

    def _compact(self, conv: Conversation, target: int) -> Summary | None:
        previous = conv.summary
        floor = self._floor(conv)
        text = previous.text if previous else None
        model = ""
        input_tokens = output_tokens = calls = 0
        span_tokens = 0
        span_humans = 0
        folded_any = False
        for chunk in self._span(floor, target):
            draft = self.summarize(text, chunk)
            text = draft.text
            model = draft.model or model
            input_tokens += draft.input_tokens
            output_tokens += draft.output_tokens
            calls += draft.llm_calls
            span_tokens += sum(m.token_count or 0 for m in chunk)
            span_humans += sum(1 for m in chunk if m.role is Role.HUMAN)
            folded_any = True
        if not folded_any or text is None:
            return None
        text_tokens = self.text_tokens(text)
        if text_tokens > self.max_summary_tokens:
            raise InvalidSummaryError(
                f"summary has {text_tokens} tokens, over MAX_SUMMARY_TOKENS={self.max_summary_tokens}"
            )
        token_count = self.summary_tokens(text)

        with transaction.atomic():
            locked = (
                Conversation.objects.select_for_update()
                .filter(pk=self.conversation_id)
                .only("id", "summary_id", "human_message_count", "has_system_prompt")
                .first()
            )
            if locked is None:
                return None  # deleted while the LLM was working (S2, BUG-23)
            current = Summary.objects.filter(pk=locked.summary_id).first() if locked.summary_id else None
            if current is not None and current.through_seq >= target:
                return current  # someone else got there first: the boundary never moves back
            if (current.pk if current else None) != (previous.pk if previous else None):
                return None  # the summary changed under us; the next trigger will retry
            if not Message.objects.filter(conversation_id=self.conversation_id, seq=target).exists():
                return None  # history cleared while the LLM was working
            try:
                with transaction.atomic():
                    summary = Summary.objects.create(
                        conversation_id=self.conversation_id,
                        text=text,
                        first_seq=previous.first_seq if previous else floor + 1,
                        through_seq=target,
                        previous=previous,
                        human_messages_covered=(previous.human_messages_covered if previous else 0)
                        + span_humans,
                        human_message_count=locked.human_message_count,
                        tokens_covered=(previous.tokens_covered if previous else 0) + span_tokens,
                        token_count=token_count,
                        token_counter=self.token_counter.id,
                        model=model,
                        prompt_version=self.prompt_version,
                        input_tokens=input_tokens,
                        output_tokens=output_tokens,
                        llm_calls=calls,
                    )
            except IntegrityError:
                return Summary.objects.filter(
                    conversation_id=self.conversation_id, through_seq=target
                ).first()
            Conversation.objects.filter(pk=self.conversation_id).update(summary=summary)
        signals.summary_created.send(sender=Summary, conversation_id=self.conversation_id, summary=summary)
        return summary


def render_transcript(messages: Sequence[ChatMessage], *, max_chars_per_message: int = 8_000) -> str:
    """Plain-text transcript for the summariser: one block per message, tool calls with
    their JSON arguments, long contents cut (the stored messages stay whole)."""

    lines = []
    for m in messages:
        text = m.text
        if len(text) > max_chars_per_message:
            text = text[:max_chars_per_message] + f" [... {len(text) - max_chars_per_message} characters cut]"
        if m.role is Role.HUMAN:
            lines.append(f"User: {text}")
        elif m.role is Role.AI:
            if text:
                lines.append(f"Assistant: {text}")
            for call in m.tool_calls:
                args = json.dumps(dict(call.arguments), ensure_ascii=False)
                lines.append(f"Assistant called tool {call.name}({args})")
        elif m.role is Role.TOOL:
            lines.append(f"Tool {m.name or m.tool_call_id} returned: {text}")
        else:
            lines.append(f"System: {text}")
    return "\n".join(lines)


class LLMMemoryCompactor(BaseMemoryCompactor):
    """Writes summaries with a ``ChatModel``: previous summary plus the new messages only
    (incremental, K2), validated, condensed when over ``max_summary_tokens`` (BUG-13)."""

    max_condense_attempts = 2

    def _call(self, instructions: str, prompt: str) -> tuple[str, Any]:
        if self.llm is None:
            raise InvalidSummaryError("LLMMemoryCompactor needs an llm")
        response = self.llm.invoke([ChatMessage.system(instructions), ChatMessage.human(prompt)])
        return response.message.text, response

    def summarize(self, previous: str | None, messages: Sequence[ChatMessage]) -> SummaryDraft:
        prompt = (
            f"Previous summary:\n{previous or '(none yet)'}\n\n"
            f"New messages:\n{render_transcript(messages)}\n\n"
            "Write the updated summary."
        )
        text, response = self._call(SUMMARY_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), prompt)
        usage_in, usage_out, calls = response.usage.input_tokens, response.usage.output_tokens, 1
        text = self.validate(text)
        attempts = 0
        while self.text_tokens(text) > self.max_summary_tokens and attempts < self.max_condense_attempts:
            attempts += 1
            text, response = self._call(
                CONDENSE_INSTRUCTIONS.format(max_tokens=self.max_summary_tokens), text
            )
            usage_in += response.usage.input_tokens
            usage_out += response.usage.output_tokens
            calls += 1
            text = self.validate(text)
        if self.text_tokens(text) > self.max_summary_tokens:
            raise InvalidSummaryError(
                f"summary still over {self.max_summary_tokens} tokens after {attempts} condensing attempts"
            )
        return SummaryDraft(
            text=text,
            model=response.model or getattr(self.llm, "model_name", ""),
            input_tokens=usage_in,
            output_tokens=usage_out,
            llm_calls=calls,
        )


def get_compaction_llm() -> ChatModel:
    """The summariser model: ``AGENTMEMORY['COMPACTION_LLM']`` (dotted path to a
    ``ChatModel`` class or factory), else ``AGENTMEMORY['LLMS']['compaction']`` or
    ``['default']``, else a model configured by the environment (``OPENAI_API_KEY`` /
    ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``), else the offline summariser."""
    from django.utils.module_loading import import_string

    path = app_settings().COMPACTION_LLM
    if path:
        return import_string(path)()
    from agentmemory.llm.config import get_llm

    model = get_llm("compaction" if "compaction" in app_settings().LLMS else "default")
    if model is not None:
        return model
    from agentmemory.llm.offline import OfflineSummarizer

    return OfflineSummarizer()


def build_compactor(
    conversation_id: int, *, compactor_class: str | None = None, llm: ChatModel | None = None
):  # type: ignore[no-untyped-def]
    """The configured compactor for a conversation, as the Celery task builds it."""
    from django.utils.module_loading import import_string

    cls = import_string(compactor_class) if compactor_class else app_settings().import_compactor_class()
    history = PersistentChatHistory(conversation_id)
    return cls(Conversation.objects, conversation_id, llm or get_compaction_llm(), history)


def _importable_path(cls: type) -> str | None:
    """The dotted path a worker can import ``cls`` by, or ``None`` (with a warning) for a
    class it could not find (defined in a function or in an interactive shell); the
    worker then uses ``COMPACTOR_CLASS``."""
    from django.utils.module_loading import import_string

    path = f"{cls.__module__}.{cls.__qualname__}"
    try:
        if "<locals>" not in path and import_string(path) is cls:
            return path
    except ImportError:
        pass
    logger.warning(
        "compactor class %s cannot be imported by a Celery worker; the task will use "
        "AGENTMEMORY['COMPACTOR_CLASS'] instead. Define compactor classes at module level.",
        path,
    )
    return None


def compact_if_needed(
    conversation_id: int, *, max_tokens: int | None = None, compactor_class: str | None = None
) -> bool:
    """Enqueue a compaction of the conversation if one is due (K1), on transaction commit.

    For callers that append messages outside an agent (the API, imports). The check reads
    the conversation row (one or two queries) and never builds an LLM client.

    Returns:
        ``True`` when the Celery task was enqueued.
    """
    from django.utils.module_loading import import_string

    cls = import_string(compactor_class) if compactor_class else app_settings().import_compactor_class()
    return cls(Conversation.objects, conversation_id, None).compact_if_needed(max_tokens=max_tokens)
