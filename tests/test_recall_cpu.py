"""What a recall's client work was made cheaper without changing: a long message's sentences
split by the rule of ``lines._SENTENCE``, and the searched messages' queryset built once per
scope yet always a fresh queryset that sees every row stored since."""

from __future__ import annotations

import pytest
from django.db.models.sql.query import Query
from hypothesis import given
from hypothesis import strategies as st

from agentmemory.history import PersistentChatHistory
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation
from agentmemory.recall import _searched_scope, search_messages, searched_messages
from agentmemory.recall.lines import _SENTENCE, _sentences, neutralised, trimmed
from tests.factories import UserFactory

#: characters that make sentences, spaces of every kind and the block's tag forms
_PIECES = st.sampled_from(
    [
        *"ab .!?…,;:'\"<>&/-\n\t",
        "\u00a0",
        "\u2003",
        "\u3000",
        "é",
        "İ",
        "\uff1c",
        "<memory>",
        ". ",
        "? ",
        "日本",
    ]
)


@given(st.lists(_PIECES, max_size=80).map("".join))
def test_sentences_split_where_the_pattern_splits_a_neutralised_text(raw: str) -> None:
    text = neutralised(raw)
    assert _sentences(text) == _SENTENCE.split(text)


def test_a_long_message_keeps_its_opening_and_the_sentences_holding_the_words() -> None:
    text = (
        "I went out today!  It rained.\n"
        + " ".join(f"Filler sentence {i}." for i in range(30))
        + " Did the kayak float? The KAYAK was red. Talk."
    )
    cut = (
        "I went out today! It rained. Filler sentence 0. Filler sentence 1. Filler sentence 2. "
        "Filler sentence 3. … Did the kayak float? The KAYAK was red. …"
    )
    assert trimmed(text, ["kayak", "red"]) == cut
    # a text that is not ASCII is looked at sentence by sentence the same way
    assert trimmed(text.replace("Talk.", "Café."), ["kayak", "red"]) == cut


@pytest.mark.django_db
def test_the_searched_scope_is_built_once_and_each_call_reads_anew(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _searched_scope.cache_clear()
    owner, other = UserFactory(), UserFactory()
    conv = Conversation.objects.create(owner=owner, agent_key="support")
    PersistentChatHistory(conv).add_messages([ChatMessage.human("The kayak is red.")])
    first = searched_messages(None, owner.pk, "support")
    assert list(first.values_list("content", flat=True)) == ["The kayak is red."]

    built = []
    build_filter = Query.build_filter
    monkeypatch.setattr(
        Query, "build_filter", lambda self, *a, **k: built.append(1) or build_filter(self, *a, **k)
    )
    again = searched_messages(None, owner.pk, "support")
    assert again is not first and not built  # a clone: no lookup built again
    PersistentChatHistory(conv).add_messages([ChatMessage.ai("A red kayak, yes.")])
    assert sorted(again.values_list("content", flat=True)) == ["A red kayak, yes.", "The kayak is red."]
    found = search_messages("kayak", owner=owner, agent_key="support", k=5)
    assert sorted(hit.content for hit in found) == ["A red kayak, yes.", "The kayak is red."]
    # another scope is another queryset
    assert not searched_messages(None, other.pk, "support").exists()
    assert not searched_messages(None, owner.pk, "billing").exists()
