"""What a provider adapter changed in the request it sent, message by message and part by
part, so that a recorded call can show what the model actually received.

The converters (``agentmemory.formats.anthropic``, ``agentmemory.formats.openai``) keep a
request within the provider's per-request limits by changing the copy they send: an image
the API would refuse goes as its placeholder text, a media type is corrected from the data,
text over the longest content is cut, surplus cache breakpoints are left out (docs/agents.md,
"What a stored history sends"). Storage never changes; each such change is noted here while
an adapter collects (``collecting()``), as a ``SentChange`` naming the position of the message
in the list the adapter was given and of the part in that message. Outside ``collecting()``
noting costs one context-variable read and keeps nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CACHE_CONTROL_DROPPED",
    "CACHE_TTL_SHORTENED",
    "CHANGE_KINDS",
    "CONTENT_CUT",
    "EMPTY_TEXT_ADDED",
    "ERROR_TEXT_ADDED",
    "MEDIA_TYPE_CORRECTED",
    "TRAILING_WHITESPACE_STRIPPED",
    "SentChange",
    "collecting",
    "located",
    "note",
    "origin",
    "placeholder_change",
    "tag",
]

#: the part went as its placeholder text (``ContentPart.placeholder``: ``[image]``, ``[audio]``,
#: ``[file: name]``); the kind is named after the part's kind
IMAGE_PLACEHOLDER = "image_placeholder"
AUDIO_PLACEHOLDER = "audio_placeholder"
FILE_PLACEHOLDER = "file_placeholder"
#: an inline image went with another media type than the stored one (``sent`` holds it)
MEDIA_TYPE_CORRECTED = "media_type_corrected"
#: text went cut, ending in the provider's cut marker (``kept`` characters kept)
CONTENT_CUT = "content_cut"
#: a part's ``cache_control`` was left out of the request
CACHE_CONTROL_DROPPED = "cache_control_dropped"
#: a part's one-hour ``cache_control`` went with the default lifetime
CACHE_TTL_SHORTENED = "cache_ttl_shortened"
#: an error tool result without text went with a stock text (``sent`` holds it)
ERROR_TEXT_ADDED = "error_text_added"
#: a blank human message went with a stock text (``sent`` holds it)
EMPTY_TEXT_ADDED = "empty_text_added"
#: the final assistant turn's text went without its trailing whitespace
TRAILING_WHITESPACE_STRIPPED = "trailing_whitespace_stripped"

#: every kind of change a converter notes
CHANGE_KINDS = (
    IMAGE_PLACEHOLDER,
    AUDIO_PLACEHOLDER,
    FILE_PLACEHOLDER,
    MEDIA_TYPE_CORRECTED,
    CONTENT_CUT,
    CACHE_CONTROL_DROPPED,
    CACHE_TTL_SHORTENED,
    ERROR_TEXT_ADDED,
    EMPTY_TEXT_ADDED,
    TRAILING_WHITESPACE_STRIPPED,
)


def placeholder_change(kind: Any) -> str:
    """The change kind of a part of ``kind`` (a ``PartKind`` or its value) sent as its
    placeholder text: ``"image_placeholder"``, ``"audio_placeholder"`` or ``"file_placeholder"``."""
    return f"{getattr(kind, 'value', kind)}_placeholder"


@dataclass(frozen=True, slots=True)
class SentChange:
    """One change of the copy sent.

    Attributes:
        message: position of the message in the list the adapter was given (0-based);
            ``None`` for what is not a message (a tool declaration's cache breakpoint).
        part: position of the part in that message's ``parts``; ``None`` for the message as
            a whole (its plain content).
        change: one of ``CHANGE_KINDS``.
        reason: why, in a short sentence naming the provider's limit.
        sent: what went instead, where short (a media type, a stock text); ``""`` otherwise.
        kept: for ``content_cut``, characters of the text kept before the cut marker.
    """

    message: int | None
    part: int | None
    change: str
    reason: str
    sent: str = ""
    kept: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"message", "part", "change", "reason"}``, plus ``"sent"`` and ``"kept"`` when set."""
        out: dict[str, Any] = {
            "message": self.message,
            "part": self.part,
            "change": self.change,
            "reason": self.reason,
        }
        if self.sent:
            out["sent"] = self.sent
        if self.kept is not None:
            out["kept"] = self.kept
        return out


@dataclass
class _Collector:
    changes: list[SentChange] = field(default_factory=list)
    message: int | None = None
    part: int | None = None
    #: id of a request block -> (message, part) it was made from
    origins: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    #: the tagged blocks, held so that their ids are not reused by new blocks
    held: list[Any] = field(default_factory=list)


_collector: ContextVar[_Collector | None] = ContextVar("agentmemory_sent_changes", default=None)
#: "the current position" for ``located`` and ``tag``
_KEEP: Any = object()


@contextmanager
def collecting() -> Iterator[list[SentChange]]:
    """Collect the changes the converters note inside the block, in the order noted; the
    list is filled as they run. Nested blocks share the outer list (an adapter's structured
    request is built by its plain one, then limited again)."""
    current = _collector.get()
    if current is not None:
        yield current.changes
        return
    collector = _Collector()
    token = _collector.set(collector)
    try:
        yield collector.changes
    finally:
        _collector.reset(token)


@contextmanager
def located(*, message: int | None = _KEEP, part: int | None = _KEEP) -> Iterator[None]:
    """Inside the block, changes noted without a position are at ``message`` and ``part``
    (either left as it is when not given)."""
    collector = _collector.get()
    if collector is None:
        yield
        return
    before = collector.message, collector.part
    if message is not _KEEP:
        collector.message = message
    if part is not _KEEP:
        collector.part = part
    try:
        yield
    finally:
        collector.message, collector.part = before


def note(
    change: str,
    reason: str,
    *,
    at: tuple[int | None, int | None] | None = None,
    sent: str = "",
    kept: int | None = None,
) -> None:
    """Note one change at ``at`` (``(message, part)``), else at the current position
    (``located``); nothing when no adapter collects."""
    collector = _collector.get()
    if collector is None:
        return
    message, part = at if at is not None else (collector.message, collector.part)
    collector.changes.append(SentChange(message, part, change, reason, sent, kept))


def tag(block: Any, *, message: int | None = _KEEP, part: int | None = _KEEP) -> Any:
    """Remember that request block ``block`` was made from ``message`` and ``part`` (the
    current position when not given), so that a later change of the block
    (``limit_request_size``, ``limit_cache_breakpoints``) is noted there. A block already
    tagged keeps its first position. Returns ``block``."""
    collector = _collector.get()
    if collector is None or block is None or id(block) in collector.origins:
        return block
    collector.origins[id(block)] = (
        collector.message if message is _KEEP else message,
        collector.part if part is _KEEP else part,
    )
    collector.held.append(block)
    return block


def origin(block: Any) -> tuple[int | None, int | None]:
    """The ``(message, part)`` ``block`` was tagged with; ``(None, None)`` when untagged."""
    collector = _collector.get()
    if collector is None:
        return None, None
    return collector.origins.get(id(block), (None, None))
