"""The rule that pins a conversation's leading system messages has one definition in Python
(``pin_after_append``, the history's locked path) and one in SQL (``pin_expressions``, the
append statements): both give the same pin for every state of the row and every batch."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection

from agentmemory.store.append import pin_after_append, pin_expressions

#: (message_count, last_seq, pinned_seq, pinned_last_seq): a new conversation, one cleared
#: (no message, seqs go on), one holding only its pin (a row of the previous release with
#: ``pinned_last_seq`` empty too), one whose pin is followed by other messages, and one
#: with no pin at all.
ROWS = [
    (0, 0, None, None),
    (0, 7, None, None),
    (0, 7, 2, 3),
    (2, 2, 1, 2),
    (1, 1, 1, None),
    (3, 3, 1, 2),
    (4, 9, 6, None),
    (5, 5, None, None),
]
LEADS = [0, 1, 3]


def sql_pin(
    row: tuple[int, int, int | None, int | None], lead: int, *, literal: bool
) -> tuple[bool, int | None, int | None]:
    """What the SQL expressions give over ``row`` (as a one-row derived table)."""
    expressions = pin_expressions(lead=str(lead) if literal else "%(lead)s")
    message_count, last_seq, pinned_seq, pinned_last_seq = row
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {expressions['has_system_prompt']}, {expressions['pinned_seq']}, "
            f"{expressions['pinned_last_seq']} FROM (SELECT CAST(%(count)s AS integer) AS message_count, "
            "CAST(%(last)s AS bigint) AS last_seq, CAST(%(first)s AS bigint) AS pinned_seq, "
            "CAST(%(through)s AS bigint) AS pinned_last_seq, "
            "CAST(%(has)s AS boolean) AS has_system_prompt) AS conversation",
            {
                "count": message_count,
                "last": last_seq,
                "first": pinned_seq,
                "through": pinned_last_seq,
                "has": pinned_seq is not None,
                "lead": lead,
            },
        )
        has, first, through = cursor.fetchone()
    return bool(has), first, through


@pytest.mark.django_db
@pytest.mark.parametrize("literal", [False, True], ids=["parameter", "literal"])
def test_the_sql_and_the_python_rule_pin_the_same_messages(literal: bool) -> None:
    for row, lead in itertools.product(ROWS, LEADS):
        message_count, last_seq, pinned_seq, pinned_last_seq = row
        expected = pin_after_append(
            message_count=message_count,
            last_seq=last_seq,
            pinned_seq=pinned_seq,
            pinned_last_seq=pinned_last_seq,
            lead=lead,
        )
        has, first, through = sql_pin(row, lead, literal=literal)
        assert (first, through) == expected, (row, lead)
        assert has == (expected[0] is not None), (row, lead)


def test_a_batch_opening_with_system_messages_pins_them_only_where_nothing_else_is_stored() -> None:
    # a new conversation: the two leading system messages are the pin
    assert pin_after_append(message_count=0, last_seq=0, pinned_seq=None, pinned_last_seq=None, lead=2) == (
        1,
        2,
    )
    # only pinned messages so far: the pin grows
    assert pin_after_append(message_count=2, last_seq=2, pinned_seq=1, pinned_last_seq=2, lead=1) == (1, 3)
    # other messages after the pin: a system message is ordinary history
    assert pin_after_append(message_count=3, last_seq=3, pinned_seq=1, pinned_last_seq=2, lead=1) == (1, 2)
    # no leading system message: nothing changes
    assert pin_after_append(message_count=0, last_seq=4, pinned_seq=None, pinned_last_seq=None, lead=0) == (
        None,
        None,
    )
