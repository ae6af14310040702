"""Dates named in a search query ("on 3 June, 2023", "in May 2023", "in June", "in 2023"), for
favouring the messages written then.

English month names (and their three-letter abbreviations) with a day and a year in either
order, a month with a year, a month alone after "in", "during" or "of", and a four-digit year
after "in" or "during". Relative dates ("last week") need the time the question refers to and
are not read. Each date found becomes a period of days; a day named with its year also
reaches back ``DAY_REACH_BACK_DAYS`` days, since "what did she do last weekend, on 10 April"
is told on the 10th about the days before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

__all__ = ["DAY_REACH_BACK_DAYS", "Period", "periods_in", "without_dates"]

MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
#: days before a named day (with its year) that count as that day's period
DAY_REACH_BACK_DAYS = 7

_MONTH = r"(?P<{name}>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{name}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{name}>(?:19|20)\d\d)"
_PATTERNS = [
    # 3 June, 2023 / 3rd of June 2023
    re.compile(
        r"\b"
        + _DAY.format(name="day")
        + r"\s+(?:of\s+)?"
        + _MONTH.format(name="month")
        + r",?\s+"
        + _YEAR.format(name="year")
        + r"\b",
        re.IGNORECASE,
    ),
    # June 3, 2023
    re.compile(
        r"\b"
        + _MONTH.format(name="month")
        + r"\s+"
        + _DAY.format(name="day")
        + r",?\s+"
        + _YEAR.format(name="year")
        + r"\b",
        re.IGNORECASE,
    ),
    # June 2023
    re.compile(
        r"\b" + _MONTH.format(name="month") + r",?\s+" + _YEAR.format(name="year") + r"\b", re.IGNORECASE
    ),
    # in June (a bare "may" is far more often the verb)
    re.compile(r"\b(?:in|during|of)\s+" + _MONTH.format(name="month") + r"\b", re.IGNORECASE),
    # in 2023
    re.compile(r"\b(?:in|during)\s+" + _YEAR.format(name="year") + r"\b", re.IGNORECASE),
]


@dataclass(frozen=True)
class Period:
    """Days from ``first`` to ``last`` (inclusive); with ``year`` None, the same days of every
    year (``first`` and ``last`` then carry the year 2000, a leap year)."""

    first: date
    last: date
    any_year: bool = False

    def holds(self, day: date) -> bool:
        """Whether ``day`` falls in the period."""
        if not self.any_year:
            return self.first <= day <= self.last
        try:
            moved = day.replace(year=2000)
        except ValueError:  # pragma: no cover - 29 February exists in 2000
            return False
        return self.first <= moved <= self.last


def _month_end(year: int, month: int) -> date:
    following = date(year + (month == 12), month % 12 + 1, 1)
    return following - timedelta(days=1)


def _spans(query: str) -> list[tuple[int, int, Period]]:
    found: list[tuple[int, int, Period]] = []
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < stop and begin < end for begin, stop in taken):
                continue  # part of a longer date already read
            parts = match.groupdict()
            month = MONTHS[parts["month"].lower()] if parts.get("month") else None
            year = int(parts["year"]) if parts.get("year") else None
            try:
                if parts.get("day"):
                    assert month is not None and year is not None
                    day = date(year, month, int(parts["day"]))
                    period = Period(day - timedelta(days=DAY_REACH_BACK_DAYS), day)
                elif month is not None and year is not None:
                    period = Period(date(year, month, 1), _month_end(year, month))
                elif month is not None:
                    period = Period(date(2000, month, 1), _month_end(2000, month), any_year=True)
                else:
                    assert year is not None
                    period = Period(date(year, 1, 1), date(year, 12, 31))
            except ValueError:
                continue  # 31 February: not a date
            taken.append((start, end))
            found.append((start, end, period))
    return sorted(found, key=lambda item: item[0])


def periods_in(query: str) -> list[Period]:
    """The periods of the dates ``query`` names, in the order they appear; [] when none."""
    return [period for _start, _end, period in _spans(query)]


def without_dates(query: str) -> str:
    """``query`` with the dates ``periods_in`` reads taken out (their words would otherwise be
    matched as words: "2023" or "3" in a message's text)."""
    spans = _spans(query)
    if not spans:
        return query
    kept, position = [], 0
    for start, end, _period in spans:
        kept.append(query[position:start])
        position = end
    kept.append(query[position:])
    return " ".join(" ".join(kept).split())
