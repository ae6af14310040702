"""The admin for debugging agents: the transcript on a conversation's page, the message list's
full-text search, filters and order, and query counts that stay the same from 10 to 100,000
messages."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from agentmemory.admin import transcript
from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.models import Conversation, Message, Summary

pytestmark = pytest.mark.django_db

LONG_PROMPT = "# Policy\n" + "Always check the booking rules before you change anything. " * 20


def url(name: str, *args) -> str:  # type: ignore[no-untyped-def]
    return reverse(f"admin:agentmemory_{name}", args=args)


@pytest.fixture
def booking(admin_user) -> Conversation:  # type: ignore[no-untyped-def]
    """A long system prompt, a parallel tool exchange (one JSON result), a summary of 2..3,
    and a call still pending."""
    conv = Conversation.objects.create(owner=admin_user, agent_key="airline", title="Booking")
    history = PersistentChatHistory(conv)
    history.add_messages(
        [
            ChatMessage.system(LONG_PROMPT),
            ChatMessage.human("I booked flight HAT069 yesterday."),
            ChatMessage.ai("Let me look."),
            ChatMessage.human("Is my reservation confirmed, and what is the weather in Seattle?"),
            ChatMessage.ai(
                None,
                tool_calls=[
                    ToolCall(id="call_res", name="get_reservation", arguments={"reservation_id": "ZFA04Y"}),
                    ToolCall(id="call_wx", name="weather", arguments={"city": "Seattle"}),
                ],
            ),
            ChatMessage.tool(
                '{"status": "confirmed", "flights": [{"number": "HAT069", "seat": "12A"}]}',
                tool_call_id="call_res",
                name="get_reservation",
            ),
            ChatMessage.tool("rain, 11 C", tool_call_id="call_wx", name="weather"),
            ChatMessage.ai("Confirmed, seat 12A; it rains in Seattle."),
            ChatMessage.human("Cancel it please."),
            ChatMessage.ai(
                None, tool_calls=[ToolCall(id="call_cancel", name="cancel_reservation", arguments={"id": 1})]
            ),
        ]
    )
    summary = Summary.objects.create(
        conversation=conv, text="The user booked HAT069.", first_seq=2, through_seq=3, token_count=5
    )
    Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    conv.refresh_from_db()
    return conv


def _block(body: str, marker: str, end: str) -> str:
    start = body.index(marker)
    return body[start : body.index(end, start)]


def test_transcript_shows_the_conversation_with_roles_calls_results_and_summary_end(admin_client, booking):  # type: ignore[no-untyped-def]
    response = admin_client.get(url("conversation_change", booking.pk))
    assert response.status_code == 200
    page = response.context["transcript"]
    assert (page.number, page.count, page.first_seq, page.last_seq) == (1, 1, 1, 10)
    body = response.content.decode()
    # every role has its own style
    for seq, role in [(1, "system"), (2, "human"), (3, "ai"), (6, "tool")]:
        assert f'class="am-msg am-msg-{role}" id="msg-{seq}"' in body
    # the long system prompt is folded, its start visible
    system = _block(body, 'id="msg-1"', "</li>")
    assert '<details class="am-fold">' in system and "<summary># Policy Always check" in system
    # each call is a folded block with its arguments pretty-printed and a link to its result
    res = _block(body, '<details class="am-call" id="call-5-call_res"', "</details>")
    assert '"reservation_id": "ZFA04Y"' in res.replace("&quot;", '"')
    assert 'href="#msg-6"' in res
    assert 'href="#msg-7"' in _block(body, 'id="call-5-call_wx"', "</details>")
    # each result links back to its call; JSON results are pretty-printed
    result = _block(body, 'id="msg-6"', "</li>")
    assert 'href="#call-5-call_res"' in result
    assert '"status": "confirmed",\n  "flights": [' in result.replace("&quot;", '"')
    # where the summary ends
    marker = _block(body, 'class="am-summary-end"', "</li>")
    assert body.index('id="msg-3"') < body.index('class="am-summary-end"') < body.index('id="msg-4"')
    assert "covers seq 2&ndash;3" in marker and "current" in marker
    # the pending call is marked
    cancel = _block(body, 'id="call-10-call_cancel"', "</details>")
    assert "pending: no result yet" in cancel and "am-to-result" not in cancel
    assert "1 pending tool call" in body


def test_transcript_marks_tool_results_that_report_an_error(admin_client, booking):  # type: ignore[no-untyped-def]
    PersistentChatHistory(booking).cancel_pending_tool_calls("the client disconnected")  # seq 11
    history = PersistentChatHistory(booking)
    history.add_messages(
        [
            ChatMessage.human("Try once more."),
            ChatMessage.ai(None, tool_calls=[ToolCall(id="call_2", name="cancel_reservation", arguments={})]),
            # an agent's failed run: marked in the metadata whatever the text says
            ChatMessage.tool("Reservation locked", tool_call_id="call_2", metadata={"error": True}),
        ]
    )
    body = admin_client.get(url("conversation_change", booking.pk)).content.decode()
    assert "am-badge-error" in _block(body, 'id="msg-11"', "</li>")
    assert "am-badge-error" in _block(body, 'id="msg-14"', "</li>")
    for ok in ("msg-6", "msg-7"):
        assert "am-badge-error" not in _block(body, f'id="{ok}"', "</li>")


def test_transcript_escapes_stored_text(admin_client, booking):  # type: ignore[no-untyped-def]
    PersistentChatHistory(booking).add_messages(
        [ChatMessage.tool("<script>alert(1)</script>", tool_call_id="call_cancel", name="cancel_reservation")]
    )
    body = admin_client.get(url("conversation_change", booking.pk)).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def _conversation_of(n_turns: int, owner=None, pending: bool = False) -> Conversation:  # type: ignore[no-untyped-def]
    """``n_turns`` turns of four messages (human, AI calling a tool, its result, AI answer):
    seqs 1..4n, written by four ``INSERT ... SELECT`` statements over a counter (100,000
    model instances would take most of a minute here). ``pending``: the last call has no
    result yet (its answer takes the result's seq), and a summary covers the first turn."""
    conv = Conversation.objects.create(owner=owner, agent_key="bulk", title=f"bulk {n_turns}")
    last = 4 * n_turns - (1 if pending else 0)
    json_type = "jsonb" if connection.vendor == "postgresql" else "TEXT"
    i = "CAST(i AS TEXT)"
    call = (
        f'\'[{{"id": "call_\' || {i} || \'", "name": "lookup", "arguments": {{"turn": \' || {i} || \'}}}}]\''
    )
    kinds = [
        # (seq, role, content, tool_calls, tool_call_id, name, exchange_seq, rows)
        (
            "4 * i + 1",
            "'human'",
            f"'question ' || {i} || ' about parcels'",
            "'[]'",
            "''",
            "''",
            "NULL",
            n_turns,
        ),
        ("4 * i + 2", "'ai'", "NULL", call, "''", "''", "4 * i + 2", n_turns),
        (
            "4 * i + 3",
            "'tool'",
            f'\'{{"turn": \' || {i} || \', "status": "delivered"}}\'',
            "'[]'",
            f"'call_' || {i}",
            "'lookup'",
            "4 * i + 2",
            n_turns - 1 if pending else n_turns,
        ),
        (
            "4 * i + 4" if not pending else f"CASE WHEN i = {n_turns - 1} THEN {last} ELSE 4 * i + 4 END",
            "'ai'",
            f"'answer ' || {i} || ': delivered'",
            "'[]'",
            "''",
            "''",
            "NULL",
            n_turns,
        ),
    ]
    now = timezone.now()
    with connection.cursor() as cursor:
        for seq, role, content, tool_calls, call_id, name, exchange, rows in kinds:
            cursor.execute(
                "INSERT INTO agentmemory_message (conversation_id, seq, role, content, tool_calls, "
                "tool_call_id, name, token_count, token_counter, exchange_seq, metadata, created_at) "
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %s) "
                f"SELECT %s, {seq}, {role}, {content}, CAST(({tool_calls}) AS {json_type}), "
                f"{call_id}, {name}, 6, 'test', {exchange}, CAST('{{}}' AS {json_type}), %s "
                "FROM n",
                [rows, conv.pk, now],
            )
    Conversation.objects.filter(pk=conv.pk).update(
        last_seq=last,
        message_count=last,
        human_message_count=n_turns,
        stored_tokens=6 * last,
        pending_tool_calls={f"call_{n_turns - 1}": last - 1} if pending else {},
    )
    if pending:
        summary = Summary.objects.create(
            conversation=conv, text="t", first_seq=1, through_seq=4, token_count=1
        )
        Conversation.objects.filter(pk=conv.pk).update(summary=summary)
    conv.refresh_from_db()
    return conv


def test_transcript_pages_by_seq_and_links_across_pages(admin_client, db):  # type: ignore[no-untyped-def]
    conv = _conversation_of(30)  # 120 messages: 3 pages of 50
    change = url("conversation_change", conv.pk)
    last = admin_client.get(change).context["transcript"]
    assert (last.number, last.count, last.first_seq, last.last_seq) == (3, 3, 101, 120)
    assert [e.seq for e in last.entries] == list(range(101, 121))
    first = admin_client.get(change, {"page": "1"})
    body = first.content.decode()
    assert [e.seq for e in first.context["transcript"].entries] == list(range(1, 51))
    # call 12 is made at seq 50; its result (51) is on page 2: linked through the finder view
    call = _block(body, 'id="call-50-call_12"', "</details>")
    finder = re.search(r'class="am-to-result" href="([^"]+)"', call).group(1).replace("&amp;", "&")
    assert finder == url("conversation_tool_result", conv.pk) + "?call=call_12&after=50"
    response = admin_client.get(finder)
    assert response.status_code == 302 and response["Location"] == f"{change}?page=2#msg-51"
    # and the result links back to its call on page 1
    second = admin_client.get(change, {"page": "2"}).content.decode()
    assert f'href="{change}?page=1#call-50-call_12"' in _block(second, 'id="msg-51"', "</li>")
    # page numbers out of range or not numbers never fail
    assert admin_client.get(change, {"page": "99"}).context["transcript"].number == 3
    assert admin_client.get(change, {"page": "-1"}).context["transcript"].number == 3
    assert admin_client.get(change, {"page": "0"}).context["transcript"].number == 1


def test_tool_result_finder_refuses_bad_input_and_reports_missing_results(admin_client, booking):  # type: ignore[no-untyped-def]
    finder = url("conversation_tool_result", booking.pk)
    assert admin_client.get(finder).status_code == 400
    assert admin_client.get(finder, {"call": "call_res", "after": "x"}).status_code == 400
    assert admin_client.get(finder, {"call": "a\x00b", "after": "1"}).status_code == 400
    response = admin_client.get(finder, {"call": "call_cancel", "after": "10"}, follow=True)
    assert response.redirect_chain[-1][0].endswith("?page=1#call-10-call_cancel")
    assert "No result is stored for tool call call_cancel." in response.content.decode()
    assert (
        admin_client.get(url("conversation_tool_result", 98765), {"call": "c", "after": "1"}).status_code
        == 404
    )


def test_pretty_text_only_reindents_json_objects_and_arrays() -> None:
    assert transcript.pretty_text('{"a": [1, 2]}') == ('{\n  "a": [\n    1,\n    2\n  ]\n}', True)
    assert transcript.pretty_text("[not json") == ("[not json", False)
    assert transcript.pretty_text("42") == ("42", False)
    assert transcript.pretty_text(None) == (None, False)


# -- the message list ------------------------------------------------------------------------


def test_message_search_is_full_text_on_every_word(admin_client, booking):  # type: ignore[no-untyped-def]
    other = Conversation.objects.create(agent_key="shop", title="Other")
    PersistentChatHistory(other).add_messages([ChatMessage.human("Booking a table for two")])

    def found(term: str) -> list[tuple[str, int]]:
        response = admin_client.get(url("message_changelist"), {"q": term})
        assert response.status_code == 200
        return [(m.conversation.title, m.seq) for m in response.context["cl"].result_list]

    # stemmed on both databases: "booking" finds "booked"; newest first
    assert found("booking") == [("Other", 1), ("Booking", 2), ("Booking", 1)]
    assert found("reservation confirmed") == [("Booking", 4)]  # every word
    assert found("reservation Seattle weather") == [("Booking", 4)]
    assert found("confirmed seat") == [("Booking", 8), ("Booking", 6)]
    assert found("nowhere-to-be-found") == []
    assert found("the") == []  # stop words are not indexed (PostgreSQL drops them)
    assert found("!!!") == []  # a term with no word matches nothing
    # full-text operators are words, not syntax
    assert found('booking" OR "x') == []
    assert found("booking & !flight") == [("Booking", 2)]


def test_message_filters_by_agent_role_tool_calls_and_conversation(admin_client, booking):  # type: ignore[no-untyped-def]
    other = Conversation.objects.create(agent_key="shop", title="Other")
    PersistentChatHistory(other).add_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])

    def seqs(**params: str) -> list[tuple[int, int]]:
        response = admin_client.get(url("message_changelist"), params)
        assert response.status_code == 200
        return [(m.conversation_id, m.seq) for m in response.context["cl"].result_list]

    b, o = booking.pk, other.pk
    assert seqs() == [(o, 2), (o, 1), *[(b, s) for s in range(10, 0, -1)]]  # newest first
    assert seqs(agent="shop") == [(o, 2), (o, 1)]
    assert seqs(agent="airline", role__exact="human") == [(b, 9), (b, 4), (b, 2)]
    assert seqs(tools="calls") == [(b, 10), (b, 5)]
    assert seqs(tools="results") == [(b, 7), (b, 6)]
    assert seqs(tools="none", agent="airline") == [(b, s) for s in (9, 8, 4, 3, 2, 1)]
    assert seqs(conversation__id__exact=str(o)) == [(o, 2), (o, 1)]
    refused = admin_client.get(url("message_changelist"), {"conversation__id__exact": "abc"})
    assert refused.status_code == 400  # not an id: refused, as on every list page
    body = admin_client.get(url("message_changelist"), {"conversation__id__exact": b}).content.decode()
    assert "Messages of Booking" in body


def test_message_page_pretty_prints_tool_results_and_links_to_the_transcript(admin_client, booking):  # type: ignore[no-untyped-def]
    result = Message.objects.get(conversation=booking, seq=6)
    body = admin_client.get(url("message_change", result.pk)).content.decode().replace("&quot;", '"')
    assert '{\n  "status": "confirmed",\n  "flights": [\n    {\n      "number": "HAT069"' in body
    assert f"{url('conversation_change', booking.pk)}?page=1#msg-6" in body


# -- query counts ----------------------------------------------------------------------------

#: queries per page, whatever the conversation holds (pinned exactly, at 10 and 100,000)
PAGES = {
    # session, user, conversation, the AI messages of pending calls, transcript page,
    # summaries ending on it, owner widget label, current summary, model usage (one aggregate)
    "change": 9,
    # session, user, agent choices, conversation choices, bounded count, page of rows
    "messages": 6,
    # the same and the conversation's title
    "messages of one conversation": 7,
    "search": 6,
    # session, user, conversation, the window builder's statement (with it, what the gap
    # report needs of the messages left out)
    "context": 4,
}


def _pages(conv: Conversation) -> dict[str, tuple[str, dict[str, str]]]:
    return {
        "change": (url("conversation_change", conv.pk), {}),
        "messages": (url("message_changelist"), {}),
        "messages of one conversation": (
            url("message_changelist"),
            {"conversation__id__exact": str(conv.pk)},
        ),
        "search": (url("message_changelist"), {"q": "parcels"}),
        # a window smaller than the conversation at both sizes (the builder then also counts
        # what it leaves out)
        "context": (url("conversation_context", conv.pk), {"max_tokens": "40"}),
    }


def test_admin_pages_cost_the_same_queries_at_10_and_100000_messages(
    admin_client, admin_user, django_assert_num_queries
):  # type: ignore[no-untyped-def]
    small = _conversation_of(3, owner=admin_user, pending=True)  # 11 messages
    for page, params in _pages(small).values():  # warm: session, content types
        admin_client.get(page, params)
    for name, (page, params) in _pages(small).items():
        with django_assert_num_queries(PAGES[name]):
            response = admin_client.get(page, params)
        assert response.status_code == 200, name

    big = _conversation_of(25_001, owner=admin_user, pending=True)  # 100,003 messages
    for name, (page, params) in _pages(big).items():
        with django_assert_num_queries(PAGES[name]):
            response = admin_client.get(page, params)
        assert response.status_code == 200, name
        if name == "change":
            page_shown = response.context["transcript"]
            assert (page_shown.number, page_shown.first_seq, page_shown.last_seq) == (2001, 100_001, 100_003)
            assert page_shown.pending == 1
        if name in ("messages", "search"):
            # the count stops at 10,000 rows and says so
            assert response.context["cl"].result_count == 10_000
            assert "10000+ messages" in response.content.decode()
