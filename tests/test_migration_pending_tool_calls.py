"""The migration to ``Conversation.pending_tool_calls``: stored conversations keep their
pending calls, each mapped to the AI message that made it, and exchanges that legacy imports
had joined are split, one per AI message."""

from __future__ import annotations

import pytest

from tests.helpers_migrations import migrate_to, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("agentmemory", "0003_longterm_fulltext")]
AFTER = [("agentmemory", "0004_pending_tool_calls")]


def test_pending_calls_and_joined_exchanges_are_carried_over() -> None:
    apps = migrate_to(BEFORE)
    try:
        Conversation = apps.get_model("agentmemory", "Conversation")
        Message = apps.get_model("agentmemory", "Message")

        def message(conv, seq, role, *, calls=(), call_id="", exchange=None):  # type: ignore[no-untyped-def]
            Message.objects.create(
                conversation=conv,
                seq=seq,
                role=role,
                content="x",
                tool_calls=[{"id": c, "name": "t", "arguments": {}} for c in calls],
                tool_call_id=call_id,
                token_count=1,
                token_counter="len",
                exchange_seq=exchange,
            )

        # a strict conversation waiting for "b" of the exchange at seq 2
        waiting = Conversation.objects.create(last_seq=3, open_exchange_seq=2, pending_tool_call_ids=["b"])
        message(waiting, 1, "human")
        message(waiting, 2, "ai", calls=["a", "b"], exchange=2)
        message(waiting, 3, "tool", call_id="a", exchange=2)
        # a legacy import: the AI message at 3 called "y" before "x" was answered, and the
        # old rules joined both into the exchange of seq 2; "z" (seq 6) is still pending
        joined = Conversation.objects.create(last_seq=6, open_exchange_seq=2, pending_tool_call_ids=["z"])
        message(joined, 1, "human")
        message(joined, 2, "ai", calls=["x"], exchange=2)
        message(joined, 3, "ai", calls=["y"], exchange=2)
        message(joined, 4, "tool", call_id="y", exchange=2)
        message(joined, 5, "tool", call_id="x", exchange=2)
        message(joined, 6, "ai", calls=["z"], exchange=2)
        idle = Conversation.objects.create()

        apps = migrate_to(AFTER)
        Conversation = apps.get_model("agentmemory", "Conversation")
        Message = apps.get_model("agentmemory", "Message")
        assert Conversation.objects.get(pk=waiting.pk).pending_tool_calls == {"b": 2}
        assert Conversation.objects.get(pk=joined.pk).pending_tool_calls == {"z": 6}
        assert Conversation.objects.get(pk=idle.pk).pending_tool_calls == {}
        exchanges = dict(Message.objects.filter(conversation_id=joined.pk).values_list("seq", "exchange_seq"))
        assert exchanges == {1: None, 2: 2, 3: 3, 4: 3, 5: 2, 6: 6}
        assert dict(
            Message.objects.filter(conversation_id=waiting.pk).values_list("seq", "exchange_seq")
        ) == {
            1: None,
            2: 2,
            3: 2,
        }

        # and back: the old fields are rebuilt from the new one
        apps = migrate_to(BEFORE)
        Conversation = apps.get_model("agentmemory", "Conversation")
        old = Conversation.objects.get(pk=waiting.pk)
        assert (old.open_exchange_seq, old.pending_tool_call_ids) == (2, ["b"])
    finally:
        migrate_to_latest()
