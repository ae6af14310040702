"""``manage.py recount_tokens`` moves stored counts over to the configured counter."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from agentmemory.conf import app_settings
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, Message, Summary
from agentmemory.tokens import LengthTokenCounter, TiktokenCounter
from tests.factories import conversation_with_turns

pytestmark = pytest.mark.django_db


def _recount(*args: str) -> str:
    out = StringIO()
    call_command("recount_tokens", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def counted_by_length(settings):  # type: ignore[no-untyped-def]
    """Two conversations counted by the one-token-per-message counter, one with a summary."""
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4"}
    first, _ = conversation_with_turns(4, token_counter=LengthTokenCounter())
    second, _ = conversation_with_turns(2, token_counter=LengthTokenCounter())
    summary = Summary.objects.create(
        conversation=first,
        text="The user asked four questions about items 0 to 3.",
        first_seq=1,
        through_seq=6,
        token_count=1,
        token_counter="len",
        tokens_covered=6,
    )
    return first, second, summary


def test_recount_moves_messages_summaries_and_totals_to_the_model_tokenizer(counted_by_length):
    first, second, summary = counted_by_length
    exact = TiktokenCounter("cl100k_base")
    assert set(Message.objects.values_list("token_counter", flat=True)) == {"len"}

    output = _recount("--batch-size", "3")  # several batches

    total = Message.objects.count()
    assert f"Recounted {total} messages and 1 summaries with tiktoken:cl100k_base" in output
    for message in Message.objects.all():
        assert message.token_counter == "tiktoken:cl100k_base"
        assert message.token_count == exact.count_message(message.to_chat_message())
    for conv in (first, second):
        conv.refresh_from_db()
        stored = Message.objects.filter(conversation=conv).aggregate(t=Sum("token_count"))["t"]
        assert conv.stored_tokens == stored > conv.message_count
    summary.refresh_from_db()
    prefix = app_settings().SUMMARY_MESSAGE_PREFIX
    assert summary.token_counter == "tiktoken:cl100k_base"
    assert summary.token_count == exact.count_message(ChatMessage.system(prefix + summary.text))
    covered = Message.objects.filter(conversation=first, seq__gte=1, seq__lte=6)
    assert summary.tokens_covered == covered.aggregate(t=Sum("token_count"))["t"]

    # a second run finds nothing left to move
    assert "Recounted 0 messages and 0 summaries" in _recount()


def test_recount_one_conversation_leaves_the_others(counted_by_length):
    first, second, _ = counted_by_length
    _recount("--conversation", str(second.uuid))
    assert set(Message.objects.filter(conversation=second).values_list("token_counter", flat=True)) == {
        "tiktoken:cl100k_base"
    }
    assert set(Message.objects.filter(conversation=first).values_list("token_counter", flat=True)) == {"len"}
    first.refresh_from_db()
    assert first.stored_tokens == first.message_count


def test_recount_refuses_bad_arguments(counted_by_length):
    with pytest.raises(CommandError, match="batch-size"):
        _recount("--batch-size", "0")
    with pytest.raises(CommandError, match="no conversation"):
        _recount("--conversation", "not-a-uuid")
    with pytest.raises(CommandError, match="no conversation"):
        _recount("--conversation", "00000000-0000-0000-0000-000000000000")
    assert Conversation.objects.count() == 2


def test_recount_prices_stored_images_by_the_providers_rule(settings):  # type: ignore[no-untyped-def]
    import base64
    import struct
    import zlib

    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ContentPart, PartKind, Role
    from tests.factories import ConversationFactory

    # a 1024 x 1024 PNG header is all the size reader needs
    ihdr = struct.pack(">IIBBBBB", 1024, 1024, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", 13)
        + b"IHDR"
        + ihdr
        + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    )
    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4"}
    conv = ConversationFactory()
    message = ChatMessage.from_parts(
        Role.HUMAN,
        [
            ContentPart(PartKind.TEXT, text="What is this?"),
            ContentPart(PartKind.IMAGE, data=base64.b64encode(png).decode(), mime_type="image/png"),
        ],
    )
    PersistentChatHistory(conv, token_counter=LengthTokenCounter()).add_messages([message])

    _recount()

    stored = Message.objects.get(conversation=conv)
    exact = TiktokenCounter("cl100k_base")
    assert stored.token_count == exact.count_message(ChatMessage.human("What is this?")) + 765
    conv.refresh_from_db()
    assert conv.stored_tokens == stored.token_count


def test_recount_counts_the_thinking_blocks_of_ai_messages(settings):  # type: ignore[no-untyped-def]
    """The rule of the counter: an ai message's stored thinking blocks are in its count, so
    counts stored without them are brought up; a message without thinking keeps its count."""
    from agentmemory.history import PersistentChatHistory
    from agentmemory.messages import ToolCall
    from tests.factories import ConversationFactory

    settings.AGENTMEMORY = {"TOKENIZER_MODEL": "gpt-4"}
    counter = TiktokenCounter("cl100k_base")
    blocks = [{"type": "thinking", "thinking": "Look up the order first.", "signature": "s" * 200}]
    conv = ConversationFactory()
    PersistentChatHistory(conv, token_counter=counter).add_messages(
        [
            ChatMessage.human("Where is my order?"),
            ChatMessage.ai(
                "Looking.", [ToolCall("toolu_1", "order", {"id": 7})], metadata={"thinking": blocks}
            ),
            ChatMessage.tool("shipped", tool_call_id="toolu_1", name="order"),
            ChatMessage.ai("It has shipped.", metadata={"model": "claude-sonnet-4-5"}),
        ]
    )
    before = dict(Message.objects.filter(conversation=conv).values_list("seq", "token_count"))
    # counts stored before the thinking blocks were counted
    Message.objects.filter(conversation=conv, seq=2).update(
        token_count=before[2] - counter.count_thinking(blocks)
    )

    _recount("--all")

    after = dict(Message.objects.filter(conversation=conv).values_list("seq", "token_count"))
    assert after == before
    assert after[2] == counter.count_message(
        ChatMessage.ai("Looking.", [ToolCall("toolu_1", "order", {"id": 7})])
    ) + counter.count_thinking(blocks)
    conv.refresh_from_db()
    assert conv.stored_tokens == sum(after.values())
