"""Time deleting a user who owns many stored messages: ``python -m bench.deletion``.

``--messages`` (default 160,000) messages spread over ``--conversations`` conversations (20),
with a summary each and ``--facts`` long-term facts, are written for one user beside another
user's conversation; then the user is deleted with ``user.delete()`` (what the admin and a
host's own code do) or erased with ``forget_user`` (``--how forget``), and the seconds are
printed with what was deleted. Uses the example project's settings: set ``DATABASE_URL`` to
measure on PostgreSQL. The rows are written with ``bulk_create`` (the append path is not what
is measured here). See docs/operations.md for figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def populate(username: str, *, messages: int, conversations: int, facts: int) -> Any:
    from django.contrib.auth import get_user_model

    from agentmemory.models import Conversation, Fact, Message, Summary

    user = get_user_model().objects.create_user(username)
    per_conversation = messages // conversations
    for c in range(conversations):
        conv = Conversation.objects.create(owner=user, title=f"bench {c}", agent_key="bench")
        rows = []
        for seq in range(1, per_conversation + 1):
            role = "human" if seq % 2 else "ai"
            rows.append(
                Message(
                    conversation=conv,
                    seq=seq,
                    role=role,
                    content=f"message {seq} of conversation {c} about order {seq * 7}",
                    token_count=12,
                    token_counter="bench",
                )
            )
            if len(rows) == 5_000:
                Message.objects.bulk_create(rows)
                rows = []
        if rows:
            Message.objects.bulk_create(rows)
        Conversation.objects.filter(pk=conv.pk).update(
            last_seq=per_conversation,
            message_count=per_conversation,
            human_message_count=(per_conversation + 1) // 2,
            stored_tokens=12 * per_conversation,
        )
        Summary.objects.create(conversation=conv, text="earlier", first_seq=1, through_seq=10)
    Fact.objects.bulk_create(
        [
            Fact(owner=user, content=f"fact {i}", content_hash=f"{i:064x}", category="bench")
            for i in range(facts)
        ]
    )
    return user


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.deletion", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=160_000)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--facts", type=int, default=1_000)
    parser.add_argument("--how", choices=["delete", "forget"], default="delete")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.db import connection

    from agentmemory.models import Message

    stamp = time.monotonic_ns()
    user = populate(
        f"bench-delete-{stamp}", messages=args.messages, conversations=args.conversations, facts=args.facts
    )
    bystander = populate(f"bench-keep-{stamp}", messages=100, conversations=1, facts=5)
    kept_before = Message.objects.filter(conversation__owner=bystander).count()
    started = time.perf_counter()
    if args.how == "delete":
        _total, counts = user.delete()
    else:
        from agentmemory.deletion import forget_user

        counts = forget_user(user).as_dict()
    seconds = time.perf_counter() - started
    kept_after = Message.objects.filter(conversation__owner=bystander).count()
    bystander.delete()
    print(
        json.dumps(
            {
                "database": connection.vendor,
                "how": args.how,
                "messages": args.messages,
                "conversations": args.conversations,
                "facts": args.facts,
                "seconds": round(seconds, 3),
                "deleted": counts,
                "other_user_messages_kept": kept_before == kept_after == 100,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
