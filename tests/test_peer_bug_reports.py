"""Faults that peer systems reported publicly, beyond the bug corpus (test_bug_cases.py).

Each test names the report it stands for (repository#number) and the symptom in a line, with
the smallest input of that kind of fault, neutral content, driven through the public API:
the converters, ``PersistentChatHistory``, ``ContextWindowBuilder``, the compactor.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib

import pytest

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ContextBudgetExceeded, InvalidMessageError
from agentmemory.formats.anthropic import from_anthropic, from_anthropic_message, to_anthropic
from agentmemory.formats.openai import from_openai, from_openai_messages, to_openai_messages
from agentmemory.history import PersistentChatHistory
from agentmemory.invariants import window_violations
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, Message
from agentmemory.tokens import ApproximateTokenCounter, LengthTokenCounter, TiktokenCounter

pytestmark = pytest.mark.django_db


def png(width: int, height: int, payload_bytes: int = 0) -> str:
    """Base64 of a PNG header of ``width`` x ``height`` followed by ``payload_bytes`` of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return base64.b64encode(
        b"\x89PNG\r\n\x1a\n" + chunk + bytes(range(256)) * (payload_bytes // 256)
    ).decode()


def store(messages, counter=None, *, relaxed: bool = False):  # type: ignore[no-untyped-def]
    conv = Conversation.objects.create(agent_key="peer-bugs")
    history = PersistentChatHistory(
        conv, token_counter=counter or LengthTokenCounter(), validate_tool_pairs=not relaxed
    )
    history.add_messages(messages)
    return conv, history


def window(conv, budget: int, counter=None, **kwargs):  # type: ignore[no-untyped-def]
    kwargs.setdefault("max_tool_result_tokens", None)
    built = ContextWindowBuilder(conv, token_counter=counter or LengthTokenCounter(), **kwargs).build(budget)
    stored = list(Message.objects.filter(conversation=conv).values_list("seq", flat=True))
    assert window_violations(built, stored_seqs=stored, newest_seq=max(stored)) == []
    return built


def assert_openai_pairs(messages: list[dict]) -> None:
    """What OpenAI checks: every tool message answers a call of the assistant message before
    its run of tool messages, and every call is answered before the next other message."""
    open_calls: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, f"tool message {m['tool_call_id']} follows no call"
            open_calls.remove(m["tool_call_id"])
            continue
        assert open_calls == [], f"calls {open_calls} unanswered before a {m['role']} message"
        open_calls = [c["id"] for c in m.get("tool_calls") or []]
    assert open_calls == []


def tool_history(turns: int, result_words: int = 30) -> list[ChatMessage]:
    out: list[ChatMessage] = [ChatMessage.system("You answer questions about parcels.")]
    for n in range(turns):
        out += [
            ChatMessage.human(f"where is parcel {n}?"),
            ChatMessage.ai(None, [ToolCall(f"call_{n}", "track", {"parcel": str(n)})]),
            ChatMessage.tool("in transit " * result_words, tool_call_id=f"call_{n}", name="track"),
            ChatMessage.ai(f"parcel {n} is in transit"),
        ]
    return out


# -- trimming never separates a tool call from its results ------------------------------------


def test_litellm_4931_trimmed_call_never_leaves_a_bare_tool_message() -> None:
    """BerriAI/litellm#4931: trimming to the token limit removed the assistant message that
    made a tool call but kept its result, and OpenAI answered 400 (a 'tool' message must
    answer a preceding message with 'tool_calls')."""
    counter = ApproximateTokenCounter()
    conv, _ = store(tool_history(3, result_words=120), counter)
    sizes = [counter.count_message(m) for m in tool_history(3, result_words=120)]
    for budget in range(sizes[0] + 5, sum(sizes) + 10, 7):
        try:
            built = window(conv, budget, counter)
        except ContextBudgetExceeded:
            continue
        sent = to_openai_messages(built.messages)
        assert sent[0]["role"] == "system"
        assert len(sent) == 1 or sent[1]["role"] == "user"
        assert_openai_pairs(sent)
        assert built.total_tokens <= budget


def test_llama_index_13715_memory_buffer_never_begins_with_a_tool_message() -> None:
    """run-llama/llama_index#13715 (fix PR #16214): the chat memory buffer cut to its token
    limit could begin with a TOOL message whose assistant call had been cut away. Every
    budget from 1 token up gives a history that starts on a human message, or a typed error."""
    conv, _ = store(tool_history(2)[1:])  # no system prompt: history is the whole window
    for budget in range(1, 12):
        try:
            built = window(conv, budget)
        except ContextBudgetExceeded:
            continue
        assert built.messages[0].role is Role.HUMAN
        assert all(m.role is not Role.TOOL or i > 0 for i, m in enumerate(built.messages))


def test_cline_7225_anthropic_request_after_trimming_has_no_orphan_tool_result() -> None:
    """cline/cline#7225: after context truncation the first kept user message still held
    tool_result blocks whose tool_use had been truncated; Anthropic answered 400
    'unexpected tool_use_id found in tool_result blocks'."""
    history = tool_history(3)
    # the second exchange answers two parallel calls
    history[6] = ChatMessage.ai(
        None, [ToolCall("call_1", "track", {"parcel": "1"}), ToolCall("call_1b", "eta", {})]
    )
    history.insert(8, ChatMessage.tool("tomorrow", tool_call_id="call_1b", name="eta"))
    conv, _ = store(history)
    for budget in range(2, len(history) + 1):
        try:
            built = window(conv, budget)
        except ContextBudgetExceeded:
            continue
        system, turns = to_anthropic(built.messages)  # raises on an orphan or a missing result
        assert system == history[0].content
        assert turns[0]["role"] == "user"
        first = turns[0]["content"]
        assert isinstance(first, str) or all(b["type"] != "tool_result" for b in first)


def test_freebuff_1292_large_tool_call_arguments_at_the_cut() -> None:
    """CodebuffAI/freebuff#1292: a tool call whose arguments held a whole file was cut away
    at the trimming boundary while its small result stayed: the request began with
    [user, tool, assistant] and the provider refused it."""
    counter = ApproximateTokenCounter()
    messages = [
        ChatMessage.human("please write the file"),
        ChatMessage.ai(None, [ToolCall("c1", "write_file", {"path": "notes.txt", "content": "x" * 4000})]),
        ChatMessage.tool("ok", tool_call_id="c1", name="write_file"),
        ChatMessage.ai("done"),
        ChatMessage.human("thanks, now list the folder"),
    ]
    conv, _ = store(messages, counter)
    built = window(conv, 600, counter)
    assert [m.seq for m in built.messages] == [5]
    assert counter.count_message(messages[1]) > 600  # the call itself is what does not fit
    assert_openai_pairs(to_openai_messages(built.messages))


def test_datarobot_genai_430_partially_answered_parallel_calls_are_left_out() -> None:
    """datarobot-oss/datarobot-genai#430: trimming dropped only a trailing assistant message
    with tool calls; one that declared two calls with only one result after it still reached
    the API, which refused it. An exchange with an unanswered call is left out whole."""
    messages = [
        ChatMessage.human("compare the two parcels"),
        ChatMessage.ai(
            None, [ToolCall("a", "track", {"parcel": "1"}), ToolCall("b", "track", {"parcel": "2"})]
        ),
        ChatMessage.tool("in transit", tool_call_id="a", name="track"),
        ChatMessage.human("never mind, what are your opening hours?"),
    ]
    conv, _ = store(messages)
    built = window(conv, 100)
    assert [m.seq for m in built.messages] == [1, 4]
    assert built.skipped_pending == (2, 3)
    assert_openai_pairs(to_openai_messages(built.messages))
    to_anthropic(built.messages)
    assert Message.objects.filter(conversation=conv).count() == 4  # storage is untouched


def test_openclaw_11430_aborted_tool_use_does_not_wedge_the_conversation() -> None:
    """openclaw/openclaw#11430: an aborted assistant turn left a tool_use with no result in
    the transcript; every later request was refused ('unexpected tool_use_id' / missing
    tool_result) and the session stayed broken across restarts."""
    turns = [
        {"role": "user", "content": "check both cities"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_a", "name": "weather", "input": {"city": "Oslo"}}],
        },
        {"role": "user", "content": "stop, just say hello"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "and again"},
    ]
    conv, _ = store(from_anthropic(turns))
    for _ in range(2):  # the next turn builds the same valid request: nothing to repair
        built = window(conv, 100)
        _, sent = to_anthropic(built.messages)
        assert all(
            b["type"] not in ("tool_use", "tool_result")
            for t in sent
            for b in (t["content"] if isinstance(t["content"], list) else [])
        )
        assert sent[-1] == {"role": "user", "content": "and again"}


# -- compaction never splits an exchange ------------------------------------------------------


def test_langchain_34282_summary_never_folds_a_call_still_waiting_for_its_result() -> None:
    """langchain-ai/langchain#34282: after the summarization middleware ran, the agent got
    400 'No tool call found': it had summarised a tool call whose response had not arrived
    yet, and the response came later into the kept messages."""
    messages = [
        ChatMessage.human("q1"),
        ChatMessage.ai("a1"),
        ChatMessage.human("book the room"),
        ChatMessage.ai(None, [ToolCall("slow", "book_room", {"room": "B"})]),
        ChatMessage.human("q3"),
        ChatMessage.ai("a3"),
        ChatMessage.human("q4"),
    ]
    conv, history = store(messages)
    llm = ScriptedChatModel(["S1: the user asked q1."] * 3)
    compactor = LLMMemoryCompactor(
        Conversation.objects, conv.pk, llm, history, summarize_every_n_human=1, keep_recent_human_turns=1
    )
    summary = compactor.compact()
    assert summary is None or summary.through_seq < 4  # the waiting exchange is not folded
    history.add_message(ChatMessage.tool("booked", tool_call_id="slow", name="book_room"))
    built = window(conv, 100)
    seqs = [m.seq for m in built.messages if m.seq is not None]
    assert 4 in seqs and 8 in seqs  # call and late result, together
    assert_openai_pairs(to_openai_messages(built.messages))


def test_sagents_167_summary_cut_never_lands_between_parallel_results() -> None:
    """sagents-ai/sagents#167: the summarisation cut point could land between two results of
    parallel calls, so the later result stayed in the kept tail after its call had been
    summarised, and every later turn failed ('No tool call found for function call output')."""
    messages = [
        ChatMessage.human("check both"),
        ChatMessage.ai(
            None, [ToolCall("p1", "track", {"parcel": "1"}), ToolCall("p2", "track", {"parcel": "2"})]
        ),
        ChatMessage.tool("r1", tool_call_id="p1", name="track"),
        ChatMessage.tool("r2", tool_call_id="p2", name="track"),
        ChatMessage.ai("both in transit"),
        ChatMessage.human("thanks"),
    ]
    for keep in range(1, 6):
        conv, history = store(messages)
        llm = ScriptedChatModel(["S: two parcels in transit."])
        compactor = LLMMemoryCompactor(
            Conversation.objects, conv.pk, llm, history, summarize_every_n_human=1, keep_recent_messages=keep
        )
        summary = compactor.compact()
        if summary is not None:
            assert summary.through_seq not in (2, 3)  # never inside the exchange 2-4
        built = window(conv, 100)
        assert_openai_pairs(to_openai_messages(built.messages))
        to_anthropic(built.messages)


# -- Anthropic request shape ------------------------------------------------------------------


def test_pydantic_ai_653_parallel_results_go_back_in_one_user_turn() -> None:
    """pydantic/pydantic-ai#653: results of parallel calls were sent as separate user
    messages; Anthropic answered 400 'tool_use ids were not found in tool_result blocks'."""
    openai_history = [
        {"role": "user", "content": "weather in two cities"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "warm"},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
    ]
    conv, _ = store(from_openai_messages(openai_history))
    _, turns = to_anthropic(window(conv, 100).messages)
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [(b["tool_use_id"], b["content"]) for b in turns[2]["content"]] == [("c1", "cold"), ("c2", "warm")]


def test_codewhale_6378_a_user_message_typed_while_tools_ran_follows_the_results() -> None:
    """Hmbown/Codewhale#6378: each parallel result was stored as its own user message and the
    Anthropic builder answered a call twice (a fake 'not executed' result beside the real
    one). Here the user typed between the two results: one user turn, one result per call,
    results first, the typed text after them."""
    messages = [
        ChatMessage.human("read both files"),
        ChatMessage.ai(None, [ToolCall("r1", "read", {"path": "a"}), ToolCall("r2", "read", {"path": "b"})]),
        ChatMessage.tool("A", tool_call_id="r1", name="read"),
        ChatMessage.human("also count the lines"),
        ChatMessage.tool("B", tool_call_id="r2", name="read"),
    ]
    conv, _ = store(messages)
    built = window(conv, 100)
    _, turns = to_anthropic(built.messages)
    last = turns[-1]["content"]
    assert [b.get("tool_use_id") or b["text"] for b in last] == ["r1", "r2", "also count the lines"]


def test_xuan_152_assistant_text_beside_tool_calls_is_kept() -> None:
    """miruamel/xuan#152: converting an OpenAI assistant message that had both text and
    tool_calls to Anthropic or Gemini dropped the text."""
    message = {
        "role": "assistant",
        "content": "Let me look that up.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}],
    }
    conv, _ = store(
        [
            ChatMessage.human("find it"),
            from_openai(message),
            ChatMessage.tool("found", tool_call_id="c1", name="find"),
        ]
    )
    built = window(conv, 100)
    assert to_openai_messages(built.messages)[1] == message
    _, turns = to_anthropic(built.messages)
    assert turns[1]["content"] == [
        {"type": "text", "text": "Let me look that up."},
        {"type": "tool_use", "id": "c1", "name": "find", "input": {}},
    ]


def test_agents_at_scale_ark_3394_tool_round_trip_is_not_collapsed_into_user_text() -> None:
    """mckinsey/agents-at-scale-ark#3394: the Anthropic converter skipped an assistant
    message that only called tools and mapped the tool result to plain user text, so the
    result read as the user's own words."""
    sent = from_openai_messages(
        [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "w1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "w1", "content": "rain"},
        ]
    )
    _, turns = to_anthropic(sent)
    assert turns == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "w1", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "w1", "content": "rain"}]},
    ]


def test_openai_agents_python_1704_thinking_blocks_go_back_with_their_tool_use() -> None:
    """openai/openai-agents-python#1704: stored Anthropic thinking blocks were dropped when the
    history was sent again; with extended thinking on, the assistant turn that calls a tool
    must start with its (signed) thinking block, so the API answered 400."""
    thinking = {"type": "thinking", "thinking": "Need the forecast first.", "signature": "sig-1"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    response = {
        "role": "assistant",
        "content": [
            thinking,
            redacted,
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
        ],
    }
    conv, history = store([ChatMessage.human("weather in Oslo?")])
    history.add_messages(from_anthropic_message(response))
    history.add_message(ChatMessage.tool("sunny", tool_call_id="toolu_1", name="weather"))
    _, turns = to_anthropic(window(conv, 100).messages)
    assert turns[1]["content"] == response["content"]  # verbatim, thinking first, signature kept
    # Once the loop is over, its thinking is history: the next question's request leaves it out.
    history.add_messages([ChatMessage.ai("Sunny in Oslo."), ChatMessage.human("and tomorrow?")])
    _, turns = to_anthropic(window(conv, 100).messages)
    assert [b["type"] for b in turns[1]["content"]] == ["text", "tool_use"]


def test_hermes_agent_17861_thinking_survives_a_langchain_import() -> None:
    """NousResearch/hermes-agent#17861: multi-turn history lost the thinking blocks of the
    provider's content list on the way to storage, and the next tool-loop request was
    refused. An AIMessage from ChatAnthropic keeps them through storage and back."""
    from langchain_core.messages import AIMessage

    from agentmemory.formats.langchain import from_langchain_message

    thinking = {"type": "thinking", "thinking": "Look it up first.", "signature": "sig-9"}
    reply = AIMessage(
        content=[thinking, {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "x"}}],
        tool_calls=[{"id": "toolu_9", "name": "lookup", "args": {"q": "x"}, "type": "tool_call"}],
    )
    conv, history = store([ChatMessage.human("look it up")])
    history.add_messages([from_langchain_message(reply), ChatMessage.tool("found", tool_call_id="toolu_9")])
    _, turns = to_anthropic(window(conv, 100).messages)
    assert turns[1]["content"] == [
        thinking,
        {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "x"}},
    ]


@pytest.mark.parametrize("blank", [" ", "\n\n", " \t "])
def test_librechat_agents_124_whitespace_only_text_is_never_sent_to_anthropic(blank: str) -> None:
    """LibreChat-AI/agents#124 (also NousResearch/hermes-agent#69517): a stored assistant
    turn whose text was only whitespace was replayed as a text block on every later request;
    Anthropic refuses 'text content blocks must contain non-whitespace text', so the
    conversation stayed broken."""
    conv, _ = store(
        [
            ChatMessage.human("search the web"),
            ChatMessage.ai(blank, [ToolCall("s1", "search", {"q": "x"})]),
            ChatMessage.tool(blank, tool_call_id="s1", name="search"),
            ChatMessage.ai(blank),
            ChatMessage.human("and?"),
        ]
    )
    _, turns = to_anthropic(window(conv, 100).messages)

    def texts(value):  # type: ignore[no-untyped-def]
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            for block in value:
                if block["type"] == "text":
                    yield block["text"]
                if block["type"] == "tool_result":
                    yield from texts(block.get("content", "x"))

    assert all(text.strip() for turn in turns for text in texts(turn["content"]))
    assert turns[1]["content"] == [{"type": "tool_use", "id": "s1", "name": "search", "input": {"q": "x"}}]


@pytest.mark.parametrize("blank", ["", "  \n"])
def test_livekit_agents_669_blank_opening_message_still_gives_a_user_first_turn(blank: str) -> None:
    """livekit/agents#669 (also rikkahub/rikkahub#436): a history that opened with an empty
    user message was sent to Anthropic starting with the assistant ('first message must use
    the "user" role'); the window starts on that human message, so the request keeps a
    marked user turn in its place."""
    conv, _ = store(
        [ChatMessage.human(blank), ChatMessage.ai("Hello, how can I help?"), ChatMessage.human("hi")]
    )
    built = window(conv, 100)
    assert built.messages[0].role is Role.HUMAN
    _, turns = to_anthropic(built.messages)
    assert turns == [
        {"role": "user", "content": "[empty message]"},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "hi"},
    ]
    assert Message.objects.get(conversation=conv, seq=1).content == blank  # storage unchanged


def test_craft_agents_753_call_ids_reused_across_turns_keep_their_pairs() -> None:
    """craft-ai-agents/craft-agents-oss#753 (also can1357/oh-my-pi#2055): a proxy numbered tool
    calls 'call_0' afresh on every response; the history held the id twice and the request
    was refused (duplicate id) or a result was paired with the wrong call."""
    messages = []
    for n, city in enumerate(["Oslo", "Rome"]):
        messages += [
            ChatMessage.human(f"weather in {city}?"),
            ChatMessage.ai(None, [ToolCall("call_0", "weather", {"city": city})]),
            ChatMessage.tool(f"report {n}", tool_call_id="call_0", name="weather"),
            ChatMessage.ai(f"answer {n}"),
        ]
    conv, _ = store(messages)  # the second result answers the second, unanswered call_0
    built = window(conv, 100)
    assert_openai_pairs(to_openai_messages(built.messages))
    _, turns = to_anthropic(built.messages)
    blocks = [(t["role"], b) for t in turns if isinstance(t["content"], list) for b in t["content"]]
    uses = [b for role, b in blocks if b["type"] == "tool_use"]
    results = [b for role, b in blocks if b["type"] == "tool_result"]
    assert len({u["id"] for u in uses}) == 2
    assert [(r["tool_use_id"], r["content"]) for r in results] == [
        (uses[0]["id"], "report 0"),
        (uses[1]["id"], "report 1"),
    ]
    with pytest.raises(InvalidMessageError, match="call_0"):  # within one message it is refused
        PersistentChatHistory(conv).add_message(
            ChatMessage.ai(None, [ToolCall("call_0", "weather", {}), ToolCall("call_0", "weather", {})])
        )


# -- token counting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counter", [ApproximateTokenCounter(), TiktokenCounter("cl100k_base")], ids=["approx", "tiktoken"]
)
def test_litellm_31280_function_name_and_arguments_are_counted(counter) -> None:  # type: ignore[no-untyped-def]
    """BerriAI/litellm#31280 (name) and Arthur-Ficial/apfel#176 (arguments): the token counter
    skipped the function name of a tool call, or priced a call at a flat rate whatever its
    arguments, so histories of tool calls were under-counted and windows overflowed."""
    short = ChatMessage.ai(None, [ToolCall("c1", "f", {"q": "x"})])
    long_name = ChatMessage.ai(None, [ToolCall("c1", "search_internal_knowledge_base_documents", {"q": "x"})])
    big_args = ChatMessage.ai(None, [ToolCall("c1", "f", {"q": "lorem ipsum dolor " * 200})])
    assert counter.count_message(long_name) > counter.count_message(short)
    arguments = json.dumps({"q": "lorem ipsum dolor " * 200})
    assert counter.count_message(big_args) - counter.count_message(
        short
    ) >= 0.9 * TiktokenCounter().count_text(arguments)


def test_gemini_cli_17923_image_in_a_tool_result_is_priced_as_an_image() -> None:
    """google-gemini/gemini-cli#17923: an image returned by a tool (MCP image content) was
    counted as its base64 text, millions of tokens, and flagged as over the context limit."""
    data = png(512, 512, payload_bytes=300_000)
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "shot",
                "content": [
                    {"type": "text", "text": "screenshot taken"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                ],
            }
        ],
    }
    [tool] = from_anthropic_message(result)
    for counter in (ApproximateTokenCounter(), TiktokenCounter()):
        assert counter.count_message(tool) < 2_000 < len(data) // 4
    conv, history = store([ChatMessage.human("take a screenshot")], ApproximateTokenCounter())
    history.add_message(ChatMessage.ai(None, [ToolCall("shot", "screenshot", {})]))
    history.add_message(tool)
    built = window(conv, 3_000, ApproximateTokenCounter())
    assert [m.seq for m in built.messages] == [1, 2, 3]


def test_pi_1441_inline_images_are_never_free() -> None:
    """earendil-works/pi#1441: images in user messages contributed 0 tokens to the estimate,
    so compaction never triggered and the provider refused the overflowing request."""
    counter = ApproximateTokenCounter()
    text_only = ChatMessage.human("what is in this picture?")
    with_image = ChatMessage.from_parts(
        Role.HUMAN,
        [
            ContentPart(PartKind.TEXT, text="what is in this picture?"),
            ContentPart(PartKind.IMAGE, data=png(1024, 1024), mime_type="image/png"),
        ],
    )
    assert (
        counter.count_message(with_image) - counter.count_message(text_only) >= 700
    )  # 1024x1024: 765 by OpenAI's rule
    images = [with_image for _ in range(5)]
    conv, _ = store(images, counter)
    built = window(conv, 2_000, counter)
    assert len(built.messages) == 2 and built.total_tokens <= 2_000


def test_h2ogpt_897_system_prompt_counts_against_the_budget() -> None:
    """h2oai/h2ogpt#897: the system prompt was left out of the token count, so the history
    chosen to fit the limit overflowed it once the prompt was added."""
    counter = ApproximateTokenCounter()
    prompt = "You are a careful assistant. " * 40
    messages = [
        ChatMessage.human(f"question {i} " * 10) if i % 2 == 0 else ChatMessage.ai("answer " * 10)
        for i in range(10)
    ]
    conv, _ = store([ChatMessage.system(prompt), *messages], counter)
    prompt_tokens = counter.count_message(ChatMessage.system(prompt))
    last_four = sum(counter.count_message(m) for m in messages[-4:])
    built = window(conv, prompt_tokens + last_four - 1, counter)  # one token short of both turns
    assert built.system_tokens == prompt_tokens
    assert built.total_tokens == built.system_tokens + built.history_tokens <= built.max_tokens
    assert [m.seq for m in built.messages[1:]] == [10, 11]  # the prompt took the older turn's room


def test_hackerai_45_short_conversation_keeps_one_system_prompt_counted_once() -> None:
    """hackerai-tech/hackerai#45: when the conversation was shorter than the kept tail, the
    system messages landed both in the pinned head and in the tail: sent twice, counted
    twice, and the trimmer gave up early."""
    counter = ApproximateTokenCounter()
    prompt = ChatMessage.system("Be brief.")
    conv, _ = store([prompt, ChatMessage.human("hi")], counter)
    built = window(conv, 1_000, counter)
    assert [m.role for m in built.messages] == [Role.SYSTEM, Role.HUMAN]
    assert built.total_tokens == counter.count_message(prompt) + counter.count_message(
        ChatMessage.human("hi")
    )
    system, _ = to_anthropic(built.messages)
    assert system == "Be brief."


def test_mastra_9446_developer_and_system_messages_are_stored_and_sent_first() -> None:
    """mastra-ai/mastra#9446 (also nicholasgriffintn/ai-platform#109): memory did not store
    system or developer messages, so instructions given at the start were gone on the next
    turn. A leading developer message is stored, pinned and sent first, once."""
    conv, _ = store(
        from_openai_messages(
            [
                {"role": "developer", "content": "The user's name is Kim. Confirm you understand."},
                {"role": "user", "content": "ok?"},
                {"role": "assistant", "content": "Confirmed."},
            ]
        )
    )
    built = window(conv, 3)  # room for the prompt and one more message only
    assert built.messages[0].role is Role.SYSTEM and "Kim" in built.messages[0].content
    later = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    later.add_message(ChatMessage.human("what is my name?"))
    built = window(conv, 3)
    assert [m.role for m in built.messages] == [Role.SYSTEM, Role.HUMAN]
    assert to_openai_messages(built.messages)[0]["content"].startswith("The user's name is Kim")


# -- what the summariser reads ----------------------------------------------------------------


def _compact_prompt(messages: list[ChatMessage]) -> str:
    """The longest request the compactor sent to summarise ``messages`` but the newest turn."""
    conv, history = store(messages, ApproximateTokenCounter())
    llm = ScriptedChatModel(["S: earlier turns."] * 5)
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        history,
        summarize_every_n_human=1,
        keep_recent_human_turns=1,
        token_counter=ApproximateTokenCounter(),
    )
    assert compactor.compact() is not None
    return max(("\n".join(str(m.content) for m in call[0]) for call in llm.calls), key=len)


def test_agentlys_347_summary_prompt_holds_no_base64_images() -> None:
    """myriade-ai/agentlys#347 (also open-multi-agent/open-multi-agent#196): compaction
    rendered images into the summary request as base64 data URLs; one request weighed two
    million tokens and was refused, and the compaction meant to free room failed the turn."""
    data = png(800, 600, payload_bytes=200_000)
    prompt = _compact_prompt(
        [
            ChatMessage.from_parts(
                Role.HUMAN,
                [
                    ContentPart(PartKind.TEXT, text="here is the chart"),
                    ContentPart(PartKind.IMAGE, data=data, mime_type="image/png"),
                ],
            ),
            ChatMessage.ai("the chart shows growth"),
            ChatMessage.human("next question"),
        ]
    )
    assert data[100:200] not in prompt
    assert "[image" in prompt and "here is the chart" in prompt
    assert len(prompt) < 10_000


def test_spring_ai_alibaba_4978_summary_prompt_keeps_tool_calls_and_results() -> None:
    """alibaba/spring-ai-alibaba#4978 (also sipeed/picoclaw#829): the summariser was given
    only each message's text, so tool calls (name, arguments) and tool results were blank
    lines and the facts they carried were lost once the summary replaced them."""
    prompt = _compact_prompt(
        [
            ChatMessage.human("what is the order status?"),
            ChatMessage.ai(None, [ToolCall("c1", "lookup_order", {"order_id": "A-1042"})]),
            ChatMessage.tool(
                '{"status": "shipped", "carrier": "Nordpost"}', tool_call_id="c1", name="lookup_order"
            ),
            ChatMessage.ai("It has shipped."),
            ChatMessage.human("thanks"),
        ]
    )
    for fact in ("lookup_order", "A-1042", "shipped", "Nordpost"):
        assert fact in prompt


def test_summary_prompt_bounds_huge_tool_call_arguments() -> None:
    """myriade-ai/agentlys#347, the same kind through tool-call arguments: a call whose
    arguments carry a whole file goes to the summariser in a bounded form, like long
    contents, so one message cannot make the compaction request overflow."""
    body = "line of the file\n" * 20_000
    prompt = _compact_prompt(
        [
            ChatMessage.human("save the report"),
            ChatMessage.ai(None, [ToolCall("w1", "write_file", {"path": "report.txt", "content": body})]),
            ChatMessage.tool("saved", tool_call_id="w1", name="write_file"),
            ChatMessage.ai("Saved."),
            ChatMessage.human("thanks"),
        ]
    )
    assert "write_file" in prompt and "report.txt" in prompt
    assert len(prompt) < 20_000


def test_codegraff_752_truncated_tool_call_arguments_never_reach_history(api, user) -> None:  # type: ignore[no-untyped-def]
    """justrach/codegraff#752 (also windmill-labs/windmill#9902): a tool call whose streamed
    arguments were cut off (not valid JSON) was saved to history and replayed on every
    later request, which the provider refused until the session was repaired by hand. The
    API refuses the batch whole, naming the call, and the conversation goes on."""
    conv = Conversation.objects.create(owner=user, agent_key="peer-bugs")
    url = f"/api/conversations/{conv.uuid}/messages/?message_format=openai"
    cut = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls -la /sr'},
            }
        ],
    }
    response = api.post(url, {"messages": [{"role": "user", "content": "list it"}, cut]}, format="json")
    assert response.status_code == 400
    assert "call_7" in json.dumps(response.json())
    assert not Message.objects.filter(conversation=conv).exists()  # nothing half-written
    ok = api.post(url, {"messages": [{"role": "user", "content": "list it again"}]}, format="json")
    assert ok.status_code == 201, ok.content
    context = api.get(f"/api/conversations/{conv.uuid}/context/?max_tokens=500&message_format=openai")
    assert context.json()["messages"] == [{"role": "user", "content": "list it again"}]
