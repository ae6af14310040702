"""Faults of the kinds peer agent-memory systems reported, tried on the core beyond the bug
corpus (tests/test_bug_cases.py): each test is a sibling of a corpus case or of a public
report, with the smallest input that broke a peer system, driven through the public API."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agentmemory.compaction import LLMMemoryCompactor
from agentmemory.context import ContextWindowBuilder
from agentmemory.exceptions import ConversationNotFound, InvalidMessageError, MessageNotFound
from agentmemory.formats.openai import from_openai_messages, to_openai_messages
from agentmemory.history import PersistentChatHistory
from agentmemory.llm.fake import ScriptedChatModel
from agentmemory.messages import ChatMessage, ContentPart, PartKind, Role, ToolCall
from agentmemory.models import Conversation, Summary
from agentmemory.tokens import LengthTokenCounter, TiktokenCounter

pytestmark = pytest.mark.django_db


def turns(n: int) -> list[ChatMessage]:
    return [
        ChatMessage.human(f"question {i}") if i % 2 == 0 else ChatMessage.ai(f"answer {i}") for i in range(n)
    ]


def stored(messages: list[ChatMessage]) -> tuple[Conversation, PersistentChatHistory]:
    conv = Conversation.objects.create(agent_key="peer-faults")
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter())
    history.add_messages(messages)
    return conv, history


# -- compactor options: edge values are refused, never read as something else ------------------


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        # 0 once fell back to the default (10) without a word; negative numbers made every
        # turn "due"; fractions and strings compared against counts of messages
        ("summarize_every_n_human", 0, ValueError),
        ("summarize_every_n_human", -1, ValueError),
        ("summarize_every_n_human", 2.5, TypeError),
        ("summarize_every_n_human", "3", TypeError),
        ("summarize_every_n_human", True, TypeError),
        ("keep_recent_human_turns", 1.5, TypeError),
        ("keep_recent_messages", -1, ValueError),
        ("keep_recent_messages", 2.0, TypeError),
        ("max_summary_tokens", 0, ValueError),
        ("max_summary_tokens", -5, ValueError),
        ("max_input_tokens", -1, ValueError),
        ("max_input_tokens", 0, ValueError),
        ("max_calls_per_run", -1, ValueError),
        ("max_calls_per_run", 0, ValueError),
    ],
)
def test_compactor_options_out_of_range_are_refused_before_any_model_call(option, value, error) -> None:  # type: ignore[no-untyped-def]
    """The LangChain and Letta reports of BUG-09/BUG-15 came down to a count that meant something
    else than its user thought. An option that is not a whole number in its range is refused
    when the compactor is made, before a summariser call is paid for or a summary stored."""
    conv, history = stored(turns(12))
    llm = ScriptedChatModel(["a short summary"] * 5)
    with pytest.raises(error, match=option):
        LLMMemoryCompactor(Conversation.objects, conv.pk, llm, history, **{option: value})
    assert llm.calls == [] and not Summary.objects.filter(conversation=conv).exists()


def test_compactor_options_at_their_lowest_are_taken_as_given() -> None:
    conv, history = stored(turns(12))
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        ScriptedChatModel(["a short summary"]),
        history,
        summarize_every_n_human=1,
        keep_recent_messages=0,
        max_summary_tokens=1,
        max_input_tokens=1,
        max_calls_per_run=1,
    )
    assert (compactor.every_n_human, compactor.keep_recent_messages) == (1, 0)
    assert (compactor.summary_token_cap, compactor.max_input_tokens, compactor.max_calls_per_run) == (1, 1, 1)


# -- async code: no database access on the event loop (BUG-25's kind) ----------------------------


@pytest.mark.django_db(transaction=True)
def test_history_and_builder_named_by_uuid_work_inside_an_event_loop() -> None:
    """langchain-ai/langchain#23716 (BUG-25): sync I/O ran on the event loop. An ASGI view
    knows the conversation by the uuid in its URL; making the history and the builder from it
    must not touch the database there (Django raises SynchronousOnlyOperation): the uuid is
    resolved by the first ``a...`` call, in its worker thread."""
    conv = Conversation.objects.create(agent_key="peer-faults")
    missing = uuid.uuid4()

    async def view() -> tuple[list[ChatMessage], list[ChatMessage], type[Exception] | None]:
        try:
            history = PersistentChatHistory(str(conv.uuid), token_counter=LengthTokenCounter())
            await history.aadd_messages([ChatMessage.human("hello"), ChatMessage.ai("hi")])
            window = await ContextWindowBuilder(conv.uuid, token_counter=LengthTokenCounter()).abuild(100)
            paired = ContextWindowBuilder(conv.uuid, chat_history=history)
            again = await paired.abuild(100)
            error = None
            try:
                await PersistentChatHistory(missing).aget_messages()
            except ConversationNotFound as exc:
                error = type(exc)
            return window.messages, again.messages, error
        finally:
            await sync_to_async(connections.close_all)()

    first, second, error = asyncio.run(view())
    assert [m.content for m in first] == [m.content for m in second] == ["hello", "hi"]
    assert error is ConversationNotFound
    # outside an event loop a missing conversation is still refused at once
    with pytest.raises(ConversationNotFound):
        PersistentChatHistory(missing)


# -- OpenAI messages with null or missing content (BUG-20's kind) --------------------------------

_CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


@pytest.mark.parametrize(
    "reply",
    [
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant"},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ],
    ids=["null", "null-with-empty-tool-calls", "no-content-key", "refusal"],
)
def test_an_empty_or_refused_assistant_reply_imports_and_is_sent_back(reply) -> None:  # type: ignore[no-untyped-def]
    """cubist38/mlx-openai-server#205, HKUDS/nanobot#2519 (BUG-20): null content was dropped,
    refused or serialised away. An assistant reply with no text and no tool calls (a refusal,
    an empty completion, a serializer that left the key out) is a turn of the conversation:
    it imports, keeps its place, and is sent back in a shape the API accepts (content "", or
    the refusal's text)."""
    history = [{"role": "user", "content": "Can you help?"}, reply, {"role": "user", "content": "Please?"}]
    conv, _ = stored(from_openai_messages(history))
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    sent = to_openai_messages(window.messages)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    # a refusal is what the assistant said: the next turn is answered knowing it
    assert sent[1] == {"role": "assistant", "content": reply.get("refusal", "")}


@pytest.mark.parametrize(
    "result",
    [
        {"role": "tool", "tool_call_id": "call_1", "content": None},
        {"role": "tool", "tool_call_id": "call_1"},
    ],
    ids=["null", "no-content-key"],
)
def test_a_tool_result_without_content_keeps_its_exchange_whole(result) -> None:  # type: ignore[no-untyped-def]
    """A tool that returned nothing, stored by a serializer that wrote null or left the key
    out: refusing it left the call without its result. It is the empty result, and the
    exchange is sent whole with content ""."""
    history = [
        {"role": "user", "content": "Ping the service."},
        {"role": "assistant", "content": None, "tool_calls": [_CALL]},
        result,
        {"role": "assistant", "content": "Done."},
    ]
    conv, _ = stored(from_openai_messages(history))
    sent = to_openai_messages(ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100))
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": ""}
    assert sent[1]["tool_calls"][0]["id"] == "call_1"


def test_tool_call_arguments_null_read_as_no_arguments() -> None:
    """Arguments left out already read as ``{}``; ``null`` written by a serializer for a
    tool without parameters is the same absence, not a malformed call."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": None}}
    [message] = from_openai_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert message.tool_calls[0].arguments == {}


def test_a_refusal_content_part_of_an_assistant_message_imports_as_its_text() -> None:
    """The assistant message param takes ``refusal`` content parts beside text parts (Chat
    Completions ``ChatCompletionContentPartRefusalParam``); a replayed request history that
    holds one must import, and the model must see what it declined."""
    refused = {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't share that."}]}
    mixed = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Here is the part I can share."},
            {"type": "refusal", "refusal": "Not the rest."},
        ],
    }
    history = [
        {"role": "user", "content": "Show me the file."},
        refused,
        {"role": "user", "content": "And the summary?"},
        mixed,
    ]
    conv, _ = stored(from_openai_messages(history))
    sent = to_openai_messages(ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100))
    assert sent[1] == {"role": "assistant", "content": "I can't share that."}
    assert [part["text"] for part in sent[3]["content"]] == ["Here is the part I can share.", "Not the rest."]


# -- reading the newest N: edge values of ``limit`` and ``message_id`` (BUG-28's kind) ------------


def test_get_messages_limit_edge_values() -> None:
    """yaalalabs/agent-kernel#739 (BUG-28): ``get_items(limit)`` returned the wrong end. The
    limit's edges: 0 is nothing, a limit past the end is everything (a huge one once reached
    the database as an out-of-range integer, a DataError that aborted the transaction on
    PostgreSQL), and what is not a whole number is refused instead of read as 1."""
    _, history = stored(turns(5))
    assert history.get_messages(limit=0) == []
    assert [m.seq for m in history.get_messages(limit=2)] == [4, 5]
    for huge in (6, 2**63, 10**20):
        assert [m.seq for m in history.get_messages(limit=huge)] == [1, 2, 3, 4, 5]
    for wrong in (1.5, True, "2", None.__class__):
        with pytest.raises(TypeError, match="limit"):
            history.get_messages(limit=wrong)
    with pytest.raises(ValueError, match="limit"):
        history.get_messages(limit=-1)
    assert len(history.get_messages()) == 5  # the transaction is still usable


def test_messages_after_takes_only_a_message_id() -> None:
    _, history = stored(turns(3))
    first = history.get_messages()[0]
    assert [m.seq for m in history.messages_after(first.id)] == [2, 3]
    for missing in (0, -1, 2**63, 10**30):
        with pytest.raises(MessageNotFound):
            history.messages_after(missing)
    for wrong in (1.5, True, "1"):
        with pytest.raises(TypeError, match="message_id"):
            history.messages_after(wrong)
    assert len(history.get_messages()) == 3


# -- converters: a part keeps its fields through a round trip ------------------------------------


def test_a_plain_text_document_keeps_its_name_type_and_extras_through_langchain() -> None:
    """A text document part (an uploaded ``notes.md``) went through LangChain's ``text-plain``
    block without its file name, its MIME type (read back as ``text/plain``) or its provider
    fields other than ``title``, so the stored history and the message sent back differed."""
    from agentmemory.formats.langchain import from_langchain, to_langchain

    part = ContentPart(
        PartKind.FILE,
        text="# Notes\n- ship on Friday",
        mime_type="text/markdown",
        filename="notes.md",
        extra={"title": "Release notes", "context": "from the wiki", "cache_control": {"type": "ephemeral"}},
    )
    message = ChatMessage.from_parts(Role.HUMAN, [ContentPart(PartKind.TEXT, text="Read this:"), part])
    _, history = stored([message])
    [back] = from_langchain(to_langchain(history.get_messages()))
    assert back.parts == history.get_messages()[0].parts


# -- the summariser's request stays within its input budget, in tokens (BUG-12/BUG-19) ----------


def _summariser_requests(messages: list[ChatMessage], max_input_tokens: int) -> list[int]:
    """Tokens (cl100k) of each request the compactor sends to fold ``messages``."""
    counter = TiktokenCounter("cl100k_base")
    conv = Conversation.objects.create(agent_key="peer-faults")
    history = PersistentChatHistory(conv, token_counter=counter)
    history.add_messages(messages)
    llm = ScriptedChatModel(["The user sent a long text."] * 10)
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        llm,
        history,
        summarize_every_n_human=1,
        max_input_tokens=max_input_tokens,
        token_counter=counter,
    )
    assert compactor.compact() is not None
    return [sum(counter.count_message(m) for m in call[0]) for call in llm.calls]


@pytest.mark.parametrize(
    "make",
    [
        # rare Han ideographs, two or three tokens each: 8,000 characters are ~18,000 tokens
        lambda: [ChatMessage.human("".join(chr(0x4E00 + (i * 37) % 20_000) for i in range(30_000)))],
        # cuneiform, four tokens a character
        lambda: [ChatMessage.human("".join(chr(0x12000 + i % 900) for i in range(20_000)))],
        # several calls whose arguments carry whole documents
        lambda: [
            ChatMessage.human("save them"),
            ChatMessage.ai(
                None, [ToolCall(f"w{i}", "write_file", {"content": "数据" * 4_000}) for i in range(6)]
            ),
            *[ChatMessage.tool("saved", tool_call_id=f"w{i}", name="write_file") for i in range(6)],
        ],
    ],
    ids=["han", "cuneiform", "tool-arguments"],
)
def test_the_summariser_request_is_bounded_in_tokens_not_characters(make) -> None:  # type: ignore[no-untyped-def]
    """FlowiseAI/Flowise#5873 (BUG-12) and langchainjs#11304 (BUG-19) together: the
    summariser's input was bounded by characters (8,000 per message), which in CJK text or
    in the arguments of several calls is two to four times the token budget of its span, so
    one message could make the compaction request overflow the summariser. Each message is
    cut to the span's budget in tokens, by the compactor's counter, with a visible marker."""
    messages = [*make(), ChatMessage.ai("ok"), ChatMessage.human("next question")]
    budget = 2_000
    requests = _summariser_requests(messages, budget)
    # the span's budget plus the instructions and the (short) previous summary
    assert max(requests) <= budget + 400, requests


# -- legacy transcripts: a call id reused after its call was abandoned (BUG-06's kind) -----------


def test_a_legacy_import_where_an_abandoned_call_id_is_reused_keeps_the_later_pair() -> None:
    """openclaw/openclaw#52024 (BUG-06) with the id reuse of craft-agents#753: in a stored
    transcript a call was never answered (the client died), and the model numbered its next
    call ``call_0`` again. The import of such legacy history (tool-pair check relaxed) was
    refused whole. The later call supersedes the abandoned one: the result pairs with it, the
    abandoned exchange is left out of windows, and it no longer holds compaction back."""
    call = {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    transcript = [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "user", "content": "Hello? Are you there?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": "found it"},
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "Thanks."},
    ]
    conv = Conversation.objects.create(agent_key="peer-faults")
    history = PersistentChatHistory(conv, token_counter=LengthTokenCounter(), validate_tool_pairs=False)
    history.add_messages(from_openai_messages(transcript))
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    assert [m.seq for m in window.messages] == [1, 3, 4, 5, 6, 7]
    assert window.skipped_pending == (2,)
    conv.refresh_from_db()
    assert conv.pending_tool_calls == {}
    compactor = LLMMemoryCompactor(
        Conversation.objects,
        conv.pk,
        ScriptedChatModel(["They looked something up."]),
        history,
        summarize_every_n_human=1,
    )
    summary = compactor.compact()
    assert summary is not None and summary.through_seq == 6
    # live appends keep refusing an id that is still awaiting its result
    live = PersistentChatHistory(Conversation.objects.create(agent_key="peer-faults"))
    live.add_messages([ChatMessage.human("go"), ChatMessage.ai(None, [ToolCall("call_0", "lookup", {})])])
    with pytest.raises(InvalidMessageError, match="already awaiting"):
        live.add_message(ChatMessage.ai(None, [ToolCall("call_0", "lookup", {})]))


# -- builder options: edge values of the tool-result cap ----------------------------------------


@pytest.mark.parametrize(
    ("cap", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("10", TypeError)],
)
def test_a_tool_result_cap_that_is_not_a_positive_whole_number_is_refused(cap, error) -> None:  # type: ignore[no-untyped-def]
    """0 and negative caps surfaced as "needs 1 tokens but only -1 are available", floats
    and bools were taken as caps of a token and a half or one: refused when the builder is
    made, naming the option."""
    conv, _ = stored([ChatMessage.human("q")])
    with pytest.raises(error, match="max_tool_result_tokens"):
        ContextWindowBuilder(conv, token_counter=LengthTokenCounter(), max_tool_result_tokens=cap)


def test_a_tool_result_cap_past_any_window_is_no_cap_beyond_the_window() -> None:
    """A cap of 10**30 reached the database as a parameter too large for its integers
    (SQLite: OverflowError; PostgreSQL: out of range)."""
    conv, _ = stored(
        [
            ChatMessage.human("q"),
            ChatMessage.ai(None, [ToolCall("c", "f", {})]),
            ChatMessage.tool("result " * 50, tool_call_id="c"),
            ChatMessage.ai("done"),
        ]
    )
    for cap in (10**30, 2**63):
        window = ContextWindowBuilder(
            conv, token_counter=LengthTokenCounter(), max_tool_result_tokens=cap
        ).build(100)
        assert [m.seq for m in window.messages] == [1, 2, 3, 4] and window.truncated == ()


# -- a blank newest human message (the empty-content kind) --------------------------------------


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_a_blank_newest_human_message_still_ends_the_anthropic_request_on_a_user_turn(blank: str) -> None:
    """livekit/agents#669 at the other end of the request: blank text is dropped (the API
    refuses it), and when the blank message was the newest one the request ended on the
    assistant's previous answer, which Anthropic takes as a prefill to continue, so the
    model went on with its last reply instead of answering the user (and a model with
    extended thinking refuses a prefill). The turn stays, marked as empty."""
    from agentmemory.formats.anthropic import EMPTY_HUMAN_TEXT, to_anthropic

    conv, _ = stored(
        [ChatMessage.human("hi"), ChatMessage.ai("Hello, how can I help?"), ChatMessage.human(blank)]
    )
    window = ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100)
    _, turns = to_anthropic(window.messages)
    assert turns[-1] == {"role": "user", "content": EMPTY_HUMAN_TEXT}
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    # a blank message in the middle is still left out: the turns around it merge
    _, middle = to_anthropic([*window.messages, ChatMessage.ai("Anything else?"), ChatMessage.human("no")])
    assert [t["role"] for t in middle] == ["user", "assistant", "user"]
    assert middle[1]["content"] == [
        {"type": "text", "text": "Hello, how can I help?"},
        {"type": "text", "text": "Anything else?"},
    ]


# -- OpenAI: participant names in the characters the API accepts ---------------------------------


@pytest.mark.parametrize("name", ["Alice Smith", "José", "ops<bot>", "team/alpha|beta", "agent.v2"])
def test_a_participant_name_is_sent_to_openai_in_the_characters_it_accepts(name: str) -> None:
    """jekalmin/extended_openai_conversation#251, ag2ai/ag2#451: 400 "Invalid
    'messages[1].name': string does not match pattern. Expected a string that matches the
    pattern '^[a-zA-Z0-9_-]+$'" once a participant's display name held a space, an accent or
    a dot. A stored name is kept as it is; the request carries it with each refused
    character as ``_``, as the Anthropic converter already does for tool-call ids."""
    import re

    conv, _ = stored([ChatMessage.human("hi", name=name), ChatMessage.ai("Hello!", name=name)])
    sent = to_openai_messages(ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100))
    expected = re.sub(r"[^a-zA-Z0-9_-]", "_", name)
    assert [m["name"] for m in sent] == [expected, expected]
    assert PersistentChatHistory(conv).get_messages()[0].name == name


def test_tool_call_ids_longer_than_openai_accepts_are_sent_shortened_and_still_paired() -> None:
    """camel-ai/camel#2215, microsoft/autogen#6377, anomalyco/opencode#12653: ids made by
    another provider or a gateway (``ws_689e...`` of 51 characters, ``portkey-<uuid>``)
    failed every later request with 400 "Invalid 'messages[2].tool_calls[0].id': string too
    long. Expected a string with maximum length 40". Storage keeps the ids; the request
    carries ids of at most 40 characters, the same for a call and its result, distinct for
    distinct calls."""
    long_a = "ws_689e2d4880a0819d98acca37694989b00b15d90494fc6b87"
    long_b = long_a[:-1] + "8"  # the same first 50 characters
    conv, _ = stored(
        [
            ChatMessage.human("search twice"),
            ChatMessage.ai(
                None, [ToolCall(long_a, "search", {}), ToolCall(long_b, "search", {}), ToolCall("c", "f", {})]
            ),
            ChatMessage.tool("first", tool_call_id=long_b),
            ChatMessage.tool("second", tool_call_id=long_a),
            ChatMessage.tool("third", tool_call_id="c"),
            ChatMessage.ai("Done."),
        ]
    )
    sent = to_openai_messages(ContextWindowBuilder(conv, token_counter=LengthTokenCounter()).build(100))
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert all(len(i) <= 40 for i in ids) and len(set(ids)) == 3 and ids[2] == "c"
    assert [m["tool_call_id"] for m in sent[2:5]] == ids
    assert [m.tool_call_id for m in PersistentChatHistory(conv).get_messages()[2:4]] == [long_b, long_a]
