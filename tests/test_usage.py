"""Usage and cost: totals per conversation, agent and user in one query, priced with
``MODEL_PRICES`` as Decimals; provider usage read by the real adapters from the fake
servers; summariser and embedding calls recorded; the price setting checked."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.checks import run_checks
from django.test.utils import override_settings

from agentmemory.agents import BaseToolCallingAgent
from agentmemory.calls import record_call, usage_scope
from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.base import ChatResponse, Usage
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage
from agentmemory.models import Conversation, ModelCall
from agentmemory.usage import ModelPrice, model_price, parse_prices, usage_by, usage_totals
from tests.factories import UserFactory

PRICES = {
    "gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"},
    "claude-haiku-4-5": {"input": "1", "output": "5", "cached_input": "0.10", "cache_creation_input": "1.25"},
}


class Agent(BaseToolCallingAgent, register=False):
    AGENT_KEY = "usage-test"
    SYSTEM_PROMPT = "Be brief."


def response(text: str, usage: Usage, model: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage.ai(text), usage=usage, model=model, finish_reason="stop")


def test_prices_are_decimals_per_million_tokens_with_cache_prices() -> None:
    prices = parse_prices(PRICES)
    mini = prices["gpt-4o-mini"]
    assert mini == ModelPrice(Decimal("0.15"), Decimal("0.60"), Decimal("0.075"), Decimal("0.15"))
    # 1,000 input tokens of which 400 cached, 200 output
    assert mini.cost(input_tokens=1000, output_tokens=200, cached_input_tokens=400) == Decimal("0.00024")
    haiku = prices["claude-haiku-4-5"]
    cost = haiku.cost(
        input_tokens=2000, output_tokens=100, cached_input_tokens=1000, cache_creation_input_tokens=500
    )
    assert (
        cost == (Decimal(500) * 1 + Decimal(1000) * Decimal("0.10") + 500 * Decimal("1.25") + 100 * 5) / 10**6
    )
    # a dated snapshot takes the price of its model; an unknown model has none
    assert model_price("gpt-4o-mini-2024-07-18", prices) is mini
    assert model_price("gpt-4o", prices) is None
    assert parse_prices({"m": {"input": 0.1, "output": 1}})["m"].input == Decimal("0.1")


@pytest.mark.parametrize(
    "bad",
    [
        {"m": {"input": "0.1"}},
        {"m": {"input": "-1", "output": "1"}},
        {"m": {"input": "NaN", "output": "1"}},
        {"m": {"input": "cheap", "output": "1"}},
        {"m": {"input": "1", "output": "1", "output_cached": "1"}},
        {"m": 0.1},
        ["m"],
    ],
)
def test_a_bad_price_setting_is_a_system_check_error(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        parse_prices(bad)
    with override_settings(AGENTMEMORY={"MODEL_PRICES": bad}):
        assert "agentmemory.E060" in [m.id for m in run_checks()]


@override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES})
def test_totals_per_conversation_agent_and_user_in_one_query(db, django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    alice, bob = UserFactory(), UserFactory()
    llm = ScriptedChatModel(
        [
            response("a", Usage(1000, 100, cached_input_tokens=400), "gpt-4o-mini-2024-07-18"),
            response("b", Usage(3000, 50), "gpt-4o-mini"),
            response("c", Usage(2000, 10), "claude-haiku-4-5"),
            "d",  # no usage reported: counted, and priced as an unknown model
        ]
    )
    agent = Agent(llm=llm)
    first = agent.start_conversation(owner=alice)
    agent.run(first, "one")
    agent.run(first, "two")
    second = agent.start_conversation(owner=alice)
    agent.run(second, "three")
    third = agent.start_conversation(owner=bob)
    agent.run(third, "four")

    with django_assert_num_queries(1):
        totals = usage_totals(conversation=first)
    assert (totals.calls, totals.input_tokens, totals.output_tokens, totals.cached_input_tokens) == (
        2,
        4000,
        150,
        400,
    )
    assert (
        totals.cost
        == (
            Decimal(600) * Decimal("0.15")
            + 400 * Decimal("0.075")
            + 3000 * Decimal("0.15")
            + 150 * Decimal("0.60")
        )
        / 10**6
    )
    assert totals.unpriced_models == () and totals.counted_calls == 0

    with django_assert_num_queries(1):
        per_user = usage_by("owner")
    assert per_user[alice.pk].calls == 3
    assert per_user[alice.pk].cost == totals.cost + Decimal(2000 * 1 + 10 * 5) / 10**6
    assert per_user[bob.pk].counted_calls == 1 and per_user[bob.pk].unpriced_models == ("scripted",)
    assert per_user[bob.pk].cost is None  # only an unpriced model: unknown, not free
    assert usage_totals(owner=bob).input_tokens == ModelCall.objects.get(owner=bob).input_tokens > 0
    assert usage_by("agent_key")["usage-test"].calls == 4
    assert usage_by("conversation")[second.pk].by_model[0].model == "claude-haiku-4-5"
    with pytest.raises(ValueError):
        usage_by("model")


@override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES})
def test_the_total_cost_is_unknown_when_no_call_was_priced(db) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    assert usage_totals(owner=user).cost == 0  # no calls: nothing was spent
    ModelCall.objects.create(
        kind="chat", usage_source="provider", owner=user, model="llama3", input_tokens=500, output_tokens=5
    )
    ModelCall.objects.create(
        kind="chat", usage_source="provider", owner=user, model="mistral", input_tokens=100, output_tokens=1
    )
    unpriced = usage_totals(owner=user)
    assert unpriced.cost is None and unpriced.unpriced_models == ("llama3", "mistral")
    assert [m.cost for m in unpriced.by_model] == [None, None] and unpriced.input_tokens == 600
    ModelCall.objects.create(
        kind="chat",
        usage_source="provider",
        owner=user,
        model="gpt-4o-mini",
        input_tokens=1000,
        output_tokens=0,
    )
    mixed = usage_totals(owner=user)
    assert mixed.cost == Decimal("0.00015") and mixed.unpriced_models == ("llama3", "mistral")


def test_summariser_calls_are_recorded_and_billed_to_the_owner(db) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    conv = Conversation.objects.create(owner=user, agent_key="support")
    history = PersistentChatHistory(conv)
    for i in range(3):
        history.add_messages([ChatMessage.human(f"question {i}"), ChatMessage.ai(f"answer {i}")])
    llm = ScriptedChatModel([response("They asked three questions.", Usage(300, 12), "gpt-4o-mini")])
    compactor = LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, keep_recent_human_turns=1)
    assert compactor.compact() is not None

    [call] = ModelCall.objects.filter(kind="compaction")
    assert (call.conversation_id, call.owner_id, call.agent_key) == (conv.pk, user.pk, "support")
    assert (call.input_tokens, call.output_tokens, call.usage_source) == (300, 12, "provider")
    assert (call.first_seq, call.last_seq) == (1, 4)
    assert usage_totals(owner=user, kind="compaction").calls == 1


def test_calls_recorded_inside_a_scope_are_billed_to_it(db) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory()
    with usage_scope(owner_id=user.pk, agent_key="kb"):
        record_call("embedding", model="text-embedding-3-small", usage=Usage(42), usage_source="provider")
    with override_settings(AGENTMEMORY={"RECORD_MODEL_CALLS": False}):
        assert record_call("embedding", model="x", usage=Usage(1), usage_source="counted") is None
    call = ModelCall.objects.get()
    assert (call.owner_id, call.agent_key, call.input_tokens, call.conversation_id) == (
        user.pk,
        "kb",
        42,
        None,
    )


# -- provider usage through the real adapters and the fake servers ---------------------------


def test_openai_usage_with_cached_tokens_and_a_server_that_sends_none(db) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.llm.openai import OpenAIChatModel
    from tests.fake_http import ScriptedReply
    from tests.fake_openai_server import FakeOpenAIServer, _completion

    with FakeOpenAIServer() as server:
        cached = _completion({"content": "Hi."}, "stop", 1200, 8, "gpt-4o-mini-2024-07-18")
        cached["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024, "audio_tokens": 0}
        server.enqueue(ScriptedReply(200, cached))
        bare = _completion({"content": "Hello."}, "stop", 0, 0, "llama3.1")
        del bare["usage"]  # an OpenAI-compatible server (Ollama, vLLM) may leave usage out
        server.enqueue(ScriptedReply(200, bare))
        llm = OpenAIChatModel(model="gpt-4o-mini", base_url=server.base_url, api_key="sk", max_retries=0)
        agent = Agent(llm=llm)
        conv = agent.start_conversation()
        agent.run(conv, "Hi")
        agent.run(conv, "Hello")
        llm.close()
    first, second = ModelCall.objects.filter(conversation=conv).order_by("id")
    assert (first.input_tokens, first.cached_input_tokens, first.output_tokens) == (1200, 1024, 8)
    assert first.usage_source == "provider" and first.model == "gpt-4o-mini-2024-07-18"
    assert second.usage_source == "counted" and second.input_tokens > 0 and second.output_tokens > 0


def test_anthropic_cache_reads_and_writes_count_as_input(db) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.llm.anthropic import AnthropicChatModel
    from tests.fake_anthropic_server import FakeAnthropicServer, _message
    from tests.fake_http import ScriptedReply

    with FakeAnthropicServer() as server:
        body = _message([{"type": "text", "text": "Hi."}], "end_turn", 30, 7, "claude-haiku-4-5")
        body["usage"].update(cache_read_input_tokens=2000, cache_creation_input_tokens=500)
        server.enqueue(ScriptedReply(200, body))
        llm = AnthropicChatModel(
            model="claude-haiku-4-5", base_url=server.base_url, api_key="k", max_retries=0
        )
        reply = llm.invoke([ChatMessage.system("Be brief."), ChatMessage.human("Hi")])
        llm.close()
    assert reply.usage == Usage(
        input_tokens=2530, output_tokens=7, cached_input_tokens=2000, cache_creation_input_tokens=500
    )
    with override_settings(AGENTMEMORY={"MODEL_PRICES": PRICES}):
        price = model_price("claude-haiku-4-5")
    assert price is not None
    assert (
        price.cost(**{k: getattr(reply.usage, k) for k in Usage.__slots__})
        == (Decimal(30) + Decimal(2000) * Decimal("0.10") + Decimal(500) * Decimal("1.25") + 7 * 5) / 10**6
    )


def test_langchain_usage_metadata_with_cache_details() -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from agentmemory.llm.langchain import LangChainChatModel

    usage = {
        "input_tokens": 900,
        "output_tokens": 20,
        "total_tokens": 920,
        "input_token_details": {"cache_read": 600, "cache_creation": 100},
    }
    fake = GenericFakeChatModel(messages=iter([AIMessage(content="ok", usage_metadata=usage)]))
    reply = LangChainChatModel(fake).invoke([ChatMessage.human("hi")])
    assert reply.usage == Usage(900, 20, cached_input_tokens=600, cache_creation_input_tokens=100)


def test_embedding_requests_are_recorded_with_reported_or_counted_tokens(db) -> None:  # type: ignore[no-untyped-def]
    from agentmemory.knowledge import KnowledgeMemory
    from agentmemory.recall.embedders import OpenAICompatibleEmbedder
    from tests.fake_embeddings_server import FakeEmbeddingsServer

    user = UserFactory()
    with FakeEmbeddingsServer() as server:
        embedder = OpenAICompatibleEmbedder("text-embedding-3-small", base_url=server.base_url, api_key="k")
        server.enqueue_vectors([[1.0, 0.0]], prompt_tokens=6)
        KnowledgeMemory(user, agent_key="kb", embedder=embedder).remember("Likes green tea", "preferences")
        server.enqueue_vectors([[0.0, 1.0]])  # no usage in the answer: counted
        embedder.embed(["unscoped text"])
    reported, counted = ModelCall.objects.filter(kind="embedding").order_by("id")
    assert (reported.owner_id, reported.agent_key, reported.input_tokens, reported.usage_source) == (
        user.pk,
        "kb",
        6,
        "provider",
    )
    assert counted.owner_id is None and counted.usage_source == "counted" and counted.input_tokens > 0
    assert usage_totals(owner=user, kind="embedding").input_tokens == 6
