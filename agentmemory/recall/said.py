"""When a message or fact was said, and how the text the model reads shows it.

A transcript gives each message the date its session took place (LoCoMo's "1:56 pm on 8 May,
2023", LongMemEval's "2023/05/21 (Sun) 19:50", ISO 8601) in its metadata; stored rows also
carry ``created_at``. Recall dates each line it shows by the first, else the second, and a
recall as of a past time leaves out what was said after it. This module depends on nothing
else of the package, so the search, the memory block and knowledge memory share one reading.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, date, datetime, timedelta
from datetime import timezone as fixed_zone
from typing import Any

from django.utils import timezone

__all__ = [
    "AS_WRITTEN",
    "TRANSCRIPT_DATE_KEYS",
    "date_text",
    "fact_first_said_at",
    "fact_said_at",
    "said_by",
    "said_instant",
    "session_date",
    "shown_day",
    "shown_time",
]

#: message metadata keys holding the date a transcript gave a message, first found wins
TRANSCRIPT_DATE_KEYS = ("session_date_time", "session_date")
#: the zone given to a transcript date that names none ("1:56 pm on 8 May, 2023"): shown as
#: written. A zone object of its own, equal in offset to UTC but not ``UTC`` itself, so that
#: ``date_text`` tells it from a stored time (``created_at``, which the database gives back
#: in UTC): that one is shown in the current time zone. Both were tagged ``UTC`` and shown
#: as given, so in Tokyo a message stored at 07:30 on 1 March was dated 29 February (and
#: "yesterday" asked that day looked a day too early)
AS_WRITTEN = fixed_zone(timedelta(0), "as written")
#: date formats of those values (LoCoMo, LongMemEval, ISO 8601)
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y/%m/%d (%a) %H:%M", "%Y/%m/%d")


def session_date(metadata: Any, created_at: datetime | None) -> datetime | None:
    """When a message was said: the session date a transcript gave in its metadata
    (``TRANSCRIPT_DATE_KEYS``; LoCoMo's "1:56 pm on 8 May, 2023", LongMemEval's
    "2023/05/21 (Sun) 19:50" or ISO 8601; read as written, ``AS_WRITTEN``, when it names no
    zone), else
    ``created_at``. A value that does not parse, or names a date out of the range the block
    can show (``OverflowError`` in UTC or the current time zone), is passed over."""
    if isinstance(metadata, dict):
        for key in TRANSCRIPT_DATE_KEYS:
            value = metadata.get(key)
            if isinstance(value, str) and value.strip():
                text = " ".join(value.split())
                parsed = None
                for fmt in _DATE_FORMATS:
                    try:
                        parsed = datetime.strptime(text, fmt).replace(tzinfo=AS_WRITTEN)
                        break
                    except ValueError:
                        continue
                if parsed is None:
                    try:
                        parsed = datetime.fromisoformat(text)
                    except ValueError:
                        continue
                    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=AS_WRITTEN)
                try:
                    # a date that cannot be shown in UTC or the current time zone (year 9999
                    # west of UTC, year 1 east of it) is not a date the block can use
                    parsed.astimezone(UTC)
                    timezone.localtime(parsed)
                except (OverflowError, ValueError):
                    continue
                return parsed
    return created_at


def fact_said_at(fact: Any) -> datetime | None:
    """When a fact was said: the date of its source message a transcript gave, which the
    memory flush and ``KnowledgeMemory.store(source_message=...)`` keep as
    ``metadata["said_at"]`` (read as ``session_date`` reads a transcript's date), else when it
    was stored (``created_at``)."""
    metadata = fact.metadata if isinstance(fact.metadata, dict) else {}
    said = metadata.get("said_at")
    if isinstance(said, str):
        return session_date({"session_date_time": said}, fact.created_at)
    return fact.created_at


def fact_first_said_at(fact: Any) -> datetime | None:
    """When a fact was first said: ``fact_said_at``, but for a fact told again since (its
    ``created_at`` moved to the last time it was remembered) the first time it was stored
    (``first_remembered_at``). A transcript's date is the same for every telling."""
    metadata = fact.metadata if isinstance(fact.metadata, dict) else {}
    if isinstance(metadata.get("said_at"), str) or getattr(fact, "first_remembered_at", None) is None:
        return fact_said_at(fact)
    return fact.first_remembered_at  # type: ignore[no-any-return]


def said_instant(said_at: datetime) -> datetime:
    """``said_at`` (``session_date``, ``fact_said_at``) as an instant to compare with an
    aware time: a transcript date naming no zone (``AS_WRITTEN``), or a naive one, is read in
    the current time zone, the zone whose day the block shows for "today" (``shown_day``)."""
    if said_at.tzinfo is AS_WRITTEN or timezone.is_naive(said_at):
        return timezone.make_aware(said_at.replace(tzinfo=None))
    return said_at


def said_by(said_at: datetime | None, now: datetime) -> bool:
    """Whether something said at ``said_at`` (``session_date``, ``fact_said_at``) had been said
    by ``now`` (an aware datetime): what a recall as of ``now`` may show (``said_instant``;
    no date at all counts as said)."""
    return said_at is None or said_instant(said_at) <= now


def date_text(when: datetime | None) -> str:
    """``when`` as an absolute date a reader cannot misread: "Mon 8 May 2023"; "" for None.
    It depends on ``shown_day(when)`` only."""
    if when is None:
        return ""
    when = shown_time(when)
    return f"{when:%a} {when.day} {when:%B %Y}"


def shown_day(when: datetime) -> date:
    """The calendar day ``date_text`` shows for ``when``: its day in the current time zone
    when aware (a stored time, a transcript date naming its zone), as written for a
    transcript date naming none (``AS_WRITTEN``) or a naive datetime."""
    return shown_time(when).date()


def shown_time(when: datetime) -> datetime:
    """``when`` as the text the model reads shows it: in the current time zone when aware (a
    stored time, which the database gives back in UTC), as written for a transcript date
    naming no zone (``AS_WRITTEN``) or a naive datetime, and as given where the current
    zone cannot hold it (year 1 west of UTC, year 9999 east of it)."""
    if timezone.is_aware(when) and when.tzinfo is not AS_WRITTEN:
        with contextlib.suppress(OverflowError, ValueError):  # else shown as given
            return timezone.localtime(when)
    return when
