"""Relative times in a query read against the day it is asked (``agentmemory.recall.when``)."""

from __future__ import annotations

from datetime import date

import pytest

from agentmemory.recall.dates import Period
from agentmemory.recall.when import windows_in, without_times

TUE = date(2023, 5, 30)  # a Tuesday
SAT = date(2023, 5, 27)  # a Saturday
NEW_YEAR = date(2024, 1, 2)  # a Tuesday, in a leap year
LEAP = date(2024, 3, 1)  # a Friday, the day after 29 February


def days(first: str, last: str) -> list[tuple[date, date]]:
    return [(date.fromisoformat(first), date.fromisoformat(last))]


@pytest.mark.parametrize(
    ("query", "today", "expected"),
    [
        # N units ago, digits and words, widened by 15 % (at least 1 day, 3 days for weeks)
        ("What did I buy four weeks ago?", TUE, days("2023-04-28", "2023-05-06")),
        ("what did I buy 4 weeks ago", TUE, days("2023-04-28", "2023-05-06")),
        ("the kitchen appliance I bought 10 days ago", TUE, days("2023-05-18", "2023-05-22")),
        ("a week ago", TUE, days("2023-05-20", "2023-05-26")),
        ("what did I do a month ago", date(2023, 4, 18), days("2023-03-11", "2023-03-25")),
        ("two months ago", date(2023, 3, 31), days("2023-01-22", "2023-02-09")),  # 31 Jan
        ("a year ago", LEAP, days("2023-01-05", "2023-04-25")),
        ("a couple of weeks ago", TUE, days("2023-05-13", "2023-05-19")),
        ("a few days ago", TUE, days("2023-05-25", "2023-05-29")),
        ("twelve days ago", NEW_YEAR, days("2023-12-19", "2023-12-23")),
        ("one month ago", date(2024, 3, 31), days("2024-02-22", "2024-03-07")),  # 29 Feb
        ("one year ago", date(2024, 2, 29), days("2023-01-04", "2023-04-24")),  # 28 Feb 2023
        # yesterday, give or take a day
        ("what did we talk about yesterday", NEW_YEAR, days("2023-12-31", "2024-01-02")),
        ("the day before yesterday", LEAP, days("2024-02-27", "2024-02-29")),
        # a span up to today
        ("in the past two weeks", TUE, days("2023-05-16", "2023-05-30")),
        ("over the past month", date(2024, 3, 30), days("2024-02-29", "2024-03-30")),
        # calendar units: the previous one widened, or the current one so far
        ("which book did I finish last month", TUE, days("2023-03-25", "2023-05-07")),
        ("last month", NEW_YEAR, days("2023-11-24", "2024-01-02")),
        ("last week", TUE, days("2023-05-20", "2023-05-30")),
        ("last week", NEW_YEAR, days("2023-12-23", "2024-01-02")),
        ("this week", TUE, days("2023-05-29", "2023-05-30")),
        ("this month", NEW_YEAR, days("2024-01-01", "2024-01-02")),
        ("last year", NEW_YEAR, days("2022-12-02", "2024-01-02")),
        ("this year", TUE, days("2023-01-01", "2023-05-30")),
        ("last weekend", TUE, days("2023-05-26", "2023-05-29")),
        ("last weekend", SAT, days("2023-05-19", "2023-05-22")),
        # weekdays: the latest one before today, a week back on that weekday
        ("the restaurant I went to last Saturday", TUE, days("2023-05-26", "2023-05-28")),
        ("the restaurant I went to last Saturday", SAT, days("2023-05-19", "2023-05-21")),
        ("what did I cook on Monday", TUE, days("2023-05-28", "2023-05-30")),
        ("last Thursday", LEAP, days("2024-02-28", "2024-03-01")),
        ("last Friday", NEW_YEAR, days("2023-12-28", "2023-12-30")),
        # months: the latest that has begun, "last May" one that has ended; and a month after
        # it (what happened then is often told later), up to today
        ("what did I do in May", TUE, days("2023-05-01", "2023-05-30")),
        ("in June", TUE, days("2022-06-01", "2022-07-31")),
        ("during December", NEW_YEAR, days("2023-12-01", "2024-01-02")),
        ("last May", TUE, days("2022-05-01", "2022-07-01")),
        ("in February", LEAP, days("2024-02-01", "2024-03-01")),
        ("in January", date(2023, 12, 31), days("2023-01-01", "2023-03-03")),
        (
            "the novels I finished in January and March",
            TUE,
            days("2023-01-01", "2023-03-03") + days("2023-03-01", "2023-05-01"),
        ),
        # two expressions, in the order written
        (
            "yesterday or last Saturday",
            TUE,
            days("2023-05-28", "2023-05-30") + days("2023-05-26", "2023-05-28"),
        ),
    ],
)
def test_relative_times_become_windows(query: str, today: date, expected: list[tuple[date, date]]) -> None:
    assert [(p.first, p.last) for p in windows_in(query, today)] == expected
    assert all(isinstance(p, Period) and not p.any_year for p in windows_in(query, today))


@pytest.mark.parametrize(
    "query",
    [
        "what is my favourite restaurant",
        "How many days ago did I buy the kettle?",  # asks for the time: names none
        "I may go hiking",
        "what did I do in May 2023",  # an absolute date: dates.periods_in reads it
        "in June, 2022",
        "on 3 June",
        "weeks of rain",
        "the last day of school",
        "Saturday night live",
        "a 1000 days ago",
        "three days earlier than the concert",  # relative to something else
        "when I got back from two weeks in Peru",
        "",
    ],
)
def test_text_without_a_relative_time_gives_no_window(query: str) -> None:
    assert windows_in(query, TUE) == []
    assert without_times(query, TUE) == query


def test_the_expressions_are_taken_out_of_the_searched_words() -> None:
    assert (
        without_times("What did I buy four weeks ago at the market?", TUE) == "What did I buy at the market?"
    )
    assert without_times("the restaurant I went to last Saturday", TUE) == "the restaurant I went to"
    assert without_times("the flights I took in March yesterday", TUE) == "the flights I took in March"


def test_a_window_before_the_first_year_is_none() -> None:
    assert windows_in("two years ago", date(1, 6, 1)) == []
