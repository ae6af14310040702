"""Times a query places what it asks about relative to when it is asked ("four weeks ago",
"yesterday", "last Saturday", "last month", "in May"), for favouring the messages said then.

``windows_in(query, today)`` reads English expressions against ``today``, the day the
question is asked (the newest human message's date; in LongMemEval its ``question_date``),
and gives each a ``Period`` of days (``agentmemory.recall.dates``), widened because people
round ("four weeks ago" is said of 25 to 32 days ago):

- "N days / weeks / months / years ago", N in digits or words ("a", "one" ... "twenty",
  "thirty"; "a couple of" 2, "a few" 2 to 4, "several" 3 to 6): ``today`` less N units, less
  and more ``TOLERANCE_SHARE`` of the span (at least ``MIN_TOLERANCE_DAYS`` of the unit);
  "the day before yesterday" is 2 days ago, "yesterday" 1 (give or take a day);
- "in the last / past N units", "over the past week": from ``today`` less N units to ``today``;
- "last / this week" (weeks begin on Monday), "last / this month", "last / this year": the
  previous calendar week, month or year widened by ``CALENDAR_SLACK_DAYS`` of the unit on
  each side, or the current one up to ``today``; "last weekend": the previous Saturday and
  Sunday, Friday to Monday;
- "last Saturday", "on Saturday": the latest Saturday before ``today`` (a week back when
  ``today`` is a Saturday), give or take a day;
- "in May", "last May", "during May", "in January and March" (no year after it: with a year
  it is an absolute date, ``dates.periods_in``): the latest May that has begun by ``today``
  ("last May" one that has ended) and ``MONTH_REACH_DAYS`` after it, up to ``today``.

Nothing else is read: text without these expressions gives no window. Pure: no database, no
clock.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

from agentmemory.recall.dates import MONTHS, Period

__all__ = [
    "CALENDAR_SLACK_DAYS",
    "MIN_TOLERANCE_DAYS",
    "MONTH_REACH_DAYS",
    "TOLERANCE_SHARE",
    "windows_in",
    "without_times",
]

#: a span "ago" is widened by this share of its length on each side
TOLERANCE_SHARE = 0.15
#: ... and by at least this many days, by unit
MIN_TOLERANCE_DAYS = {"day": 1, "week": 3, "month": 7, "year": 30}
#: a previous calendar week / month / year is widened by this many days on each side
CALENDAR_SLACK_DAYS = {"week": 2, "month": 7, "year": 30}
#: a named month reaches this many days past its end: what happened in it is often told
#: after it ("the BBQ I went to in June", asked on 1 July)
MONTH_REACH_DAYS = 31
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
}
#: vague counts: the least and the most they stand for
_VAGUE = {"couple": (2, 2), "few": (2, 4), "several": (3, 6)}
_WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_COUNT = (
    r"(?P<count>\d{1,3}|"
    + "|".join(sorted(_NUMBERS, key=len, reverse=True))
    + r"|(?:a\s+)?(?:couple|few)(?:\s+of)?|several)"
)
_UNIT = r"(?P<unit>day|week|month|year)s?"
_WEEKDAY = r"(?P<weekday>" + "|".join(_WEEKDAYS) + r")"
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")"
_NO_YEAR = r"(?![\s,]*(?:of\s+)?(?:19|20)\d\d\b)(?!\s*\d)"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("day_before", re.compile(r"\bthe\s+day\s+before\s+yesterday\b", re.I)),
    ("ago", re.compile(r"\b" + _COUNT + r"\s+" + _UNIT + r"\s+(?:ago|back)\b", re.I)),
    (
        "past",
        re.compile(
            r"\b(?:in|over|during|within)\s+the\s+(?:last|past)\s+(?:" + _COUNT + r"\s+)?" + _UNIT + r"\b",
            re.I,
        ),
    ),
    ("yesterday", re.compile(r"\byesterday\b", re.I)),
    ("weekend", re.compile(r"\blast\s+weekend\b", re.I)),
    ("calendar", re.compile(r"\b(?P<which>last|this|previous)\s+(?P<unit>week|month|year)\b", re.I)),
    ("weekday", re.compile(r"\b(?:last|on|this\s+past)\s+" + _WEEKDAY + r"(?!\w)", re.I)),
    (
        "month",
        re.compile(
            r"\b(?P<which>in|during|last)\s+(?P<months>"
            + _MONTH
            + r"\b(?:(?:\s*,\s*|\s*,?\s+(?:and|or|to)\s+)"
            + _MONTH.replace("?P<month>", "?:")
            + r"\b)*)"
            + _NO_YEAR,
            re.I,
        ),
    ),
]


def _months_back(day: date, months: int) -> date:
    """``day`` less ``months`` calendar months (the last day of a shorter month)."""
    index = day.year * 12 + day.month - 1 - months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _back(today: date, count: int, unit: str) -> date:
    if unit == "month":
        return _months_back(today, count)
    if unit == "year":
        return _months_back(today, 12 * count)
    return today - timedelta(days=count * _UNIT_DAYS[unit])


def _count(text: str | None) -> tuple[int, int]:
    if text is None:
        return (1, 1)
    words = text.lower().split()
    for word, span in _VAGUE.items():
        if word in words:
            return span
    if words[0].isdigit():
        return (int(words[0]), int(words[0]))
    return (_NUMBERS[words[0]], _NUMBERS[words[0]])


def _unit(text: str) -> str:
    return text.lower().rstrip("s")


def _period(kind: str, match: re.Match[str], today: date) -> list[Period]:
    parts = match.groupdict()
    if kind == "day_before":
        return [Period(today - timedelta(days=3), today - timedelta(days=1))]
    if kind == "yesterday":
        return [Period(today - timedelta(days=2), today)]
    if kind == "ago":
        least, most = _count(parts["count"])
        unit = _unit(parts["unit"])
        if most == 0 or most > 100:
            return []
        tolerance = timedelta(
            days=max(MIN_TOLERANCE_DAYS[unit], round(TOLERANCE_SHARE * most * _UNIT_DAYS[unit]))
        )
        return [
            Period(_back(today, most, unit) - tolerance, min(today, _back(today, least, unit) + tolerance))
        ]
    if kind == "past":
        _least, most = _count(parts["count"])
        if most == 0 or most > 100:
            return []
        return [Period(_back(today, most, _unit(parts["unit"])), today)]
    if kind == "weekend":
        # the latest Saturday before today whose weekend has begun
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        return [Period(saturday - timedelta(days=1), min(today, saturday + timedelta(days=2)))]
    if kind == "calendar":
        unit = _unit(parts["unit"])
        this = parts["which"].lower() == "this"
        if unit == "week":
            start = today - timedelta(days=today.weekday())
            first, last = (start, today) if this else (start - timedelta(days=7), start - timedelta(days=1))
        elif unit == "month":
            start = today.replace(day=1)
            first, last = (start, today) if this else (_months_back(start, 1), start - timedelta(days=1))
        else:
            start = today.replace(month=1, day=1)
            first, last = (
                (start, today) if this else (start.replace(year=start.year - 1), start - timedelta(days=1))
            )
        if this:
            return [Period(first, last)]
        slack = timedelta(days=CALENDAR_SLACK_DAYS[unit])
        return [Period(first - slack, min(today, last + slack))]
    if kind == "weekday":
        wanted = _WEEKDAYS[parts["weekday"].lower()]
        day = today - timedelta(days=(today.weekday() - wanted) % 7 or 7)
        return [Period(day - timedelta(days=1), min(today, day + timedelta(days=1)))]
    if kind == "month":
        periods = []
        for name in re.findall(_MONTH.replace("?P<month>", ""), parts["months"], re.I):
            month = MONTHS[name.lower()]
            year = today.year if month <= today.month else today.year - 1
            if parts["which"].lower() == "last" and month == today.month:
                year -= 1  # "last May" said in May: the May before
            first = date(year, month, 1)
            last = date(year, month, calendar.monthrange(year, month)[1]) + timedelta(days=MONTH_REACH_DAYS)
            periods.append(Period(first, min(today, last)))
        return periods
    return []  # pragma: no cover - every kind is handled above


#: words one of which each kind of expression holds: a pattern runs only on a query holding
#: one (most queries hold none; the patterns' scans cost 40-90 µs a query)
_KEYS = {
    "day_before": ("yesterday",),
    "ago": ("ago", "back"),
    "past": ("last", "past"),
    "yesterday": ("yesterday",),
    "weekend": ("weekend",),
    "calendar": ("last", "this", "previous"),
    "weekday": tuple(_WEEKDAYS),
    "month": tuple(MONTHS),
}


def _spans(query: str, today: date) -> list[tuple[int, int, Period, bool]]:
    """(start, end, period, whether a named month) of each expression, in the query's order."""
    found: list[tuple[int, int, Period, bool]] = []
    taken: list[tuple[int, int]] = []
    lowered = query.lower()
    for kind, pattern in _PATTERNS:
        if not any(key in lowered for key in _KEYS[kind]):
            continue
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < stop and begin < end for begin, stop in taken):
                continue  # part of a longer expression already read
            try:
                periods = _period(kind, match, today)
            except (ValueError, OverflowError):
                periods = []  # before year 1 or after 9999
            if not periods:
                continue
            taken.append((start, end))
            found += [(start, end, period, kind == "month") for period in periods]
    return sorted(found, key=lambda item: item[0])


def windows_in(query: str, today: date) -> list[Period]:
    """The periods of days the relative time expressions of ``query`` name, read as said on
    ``today``, in the order they appear; [] when there is none (see the module's docstring
    for what is read and how wide each period is)."""
    return [span[2] for span in _spans(query, today)]


def without_times(query: str, today: date) -> str:
    """``query`` with the expressions ``windows_in`` reads taken out: their words ("weeks",
    "Saturday") would otherwise be searched as words of the message. A named month ("in
    May") is kept: ``dates.periods_in`` reads it in the searched query (any year)."""
    # a named month stays: ``dates.periods_in`` reads "in May" in the searched query
    spans = [span for span in _spans(query, today) if not span[3]]
    if not spans:
        return query
    kept, position = [], 0
    for start, end, _period, _month in spans:
        kept.append(query[position:start])
        position = end
    kept.append(query[position:])
    return " ".join(" ".join(kept).split())
