"""windlass' ``BufferMemory``, ``WindowMemory`` and ``SummaryMemory`` (seed 002) from
``agentmemory.compat.windlass``: the seed's doctests run with their import lines swapped,
and its edge cases (thread isolation, tool pairs kept together, summaries every
``summarize_every`` overflowed messages, a failing model, clearing)."""

from __future__ import annotations

import asyncio
import doctest
import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmemory.compat.windlass import (
    BufferMemory,
    ConfigurationError,
    FakeLLM,
    Message,
    Role,
    SummaryMemory,
    ToolCall,
    WindowMemory,
)
from agentmemory.exceptions import ConversationNotFound, TransientLLMError
from agentmemory.history import PersistentChatHistory
from agentmemory.models import Conversation
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

#: the seed's examples (its ``>>>`` prompts restored), with only the import lines changed:
#: ``windlass.core.types`` and ``windlass.providers.llm.fake`` become ``agentmemory.compat.windlass``
SEED_DOCTESTS = {
    "module": """
>>> from agentmemory.compat.windlass import Message
>>> m = WindowMemory(window=2)
>>> m.add([Message.user("one"), Message.user("two"), Message.user("three")])
>>> [msg.content for msg in m.get()]
['two', 'three']
""",
    "BufferMemory": """
>>> from agentmemory.compat.windlass import Message
>>> m = BufferMemory()
>>> m.add(Message.user("hi"), thread_id="a")
>>> m.get(thread_id="a")[0].content
'hi'
>>> m.get(thread_id="b")
[]
""",
    "WindowMemory": """
>>> from agentmemory.compat.windlass import Message
>>> m = WindowMemory(window=1)
>>> m.add([Message.user("a"), Message.user("b")])
>>> [x.content for x in m.get()]
['b']
""",
    "SummaryMemory": """
>>> from agentmemory.compat.windlass import Message
>>> from agentmemory.compat.windlass import FakeLLM
>>> m = SummaryMemory(
...     llm=FakeLLM(responses=["User greeted twice."]),
...     window=2,
...     summarize_every=2,
... )
>>> m.add([Message.user(f"msg {i}") for i in range(6)])
>>> recalled = m.get()
>>> recalled[0].role.value
'system'
""",
}


@pytest.mark.parametrize("name", list(SEED_DOCTESTS))
def test_seed_doctest(name: str) -> None:
    namespace = {"BufferMemory": BufferMemory, "WindowMemory": WindowMemory, "SummaryMemory": SummaryMemory}
    test = doctest.DocTestParser().get_doctest(SEED_DOCTESTS[name], namespace, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


# -------------------------------------------------------------------------------- buffers


def test_threads_are_isolated_and_each_is_one_conversation() -> None:
    m = BufferMemory()
    m.add([Message.user("a1"), Message.assistant("a2")], thread_id="a")
    m.add(Message.user("b1"), thread_id="b")
    assert contents(m.get(thread_id="a")) == ["a1", "a2"]
    assert contents(m.get(thread_id="b")) == ["b1"]
    assert m.threads() == ["a", "b"]
    assert m.conversation_for("a").pk != m.conversation_for("b").pk
    assert Conversation.objects.count() == 2
    assert m.conversation_for("a").metadata == {"compat": "windlass", "thread_id": "a"}


def test_an_empty_add_and_a_get_create_nothing() -> None:
    m = BufferMemory()
    m.add([], thread_id="a")
    assert m.get(thread_id="a") == []
    assert m.threads() == []
    assert Conversation.objects.count() == 0


def test_max_messages_bounds_what_get_returns_and_limit_overrides_it() -> None:
    m = BufferMemory(max_messages=2)
    m.add([Message.user(str(i)) for i in range(5)])
    assert contents(m.get()) == ["3", "4"]
    assert contents(m.get(limit=3)) == ["2", "3", "4"]


def test_max_stored_bounds_what_is_read_but_everything_stays_stored() -> None:
    m = BufferMemory(max_stored=3)
    m.add([Message.user(str(i)) for i in range(5)], thread_id="t")
    assert contents(m.get(thread_id="t")) == ["2", "3", "4"]
    stored = PersistentChatHistory(m.conversation_for("t")).get_messages()
    assert [s.text for s in stored] == ["0", "1", "2", "3", "4"]


def test_return_system_false_leaves_system_messages_out() -> None:
    m = BufferMemory(return_system=False)
    m.add([Message.system("be nice"), Message.user("hi")])
    assert contents(m.get()) == ["hi"]
    assert contents(BufferMemory(conversation=m.conversation_for()).get()) == ["be nice", "hi"]


def test_clear_forgets_one_thread_or_all_of_them() -> None:
    m = BufferMemory()
    for thread_id in ("a", "b", "c"):
        m.add(Message.user(thread_id), thread_id=thread_id)
    m.clear(thread_id="a")
    assert m.get(thread_id="a") == []
    assert m.threads() == ["b", "c"]
    m.clear()
    assert m.threads() == []
    assert Conversation.objects.count() == 0


def test_with_an_owner_a_thread_id_names_the_same_conversation_for_every_memory() -> None:
    alice, bob = UserFactory(), UserFactory()
    BufferMemory(owner=alice).add(Message.user("from process one"), thread_id="t")
    assert contents(BufferMemory(owner=alice).get(thread_id="t")) == ["from process one"]
    assert BufferMemory(owner=bob).get(thread_id="t") == []
    assert BufferMemory(owner=alice).threads() == ["t"]
    BufferMemory(owner=alice).clear()
    assert BufferMemory(owner=alice).threads() == []


def test_two_memories_of_an_owner_starting_the_same_thread_at_once_share_one_conversation() -> None:
    user = UserFactory()
    first, second = BufferMemory(owner=user), BufferMemory(owner=user)
    first.get(thread_id="t")  # both looked the thread up before either wrote to it
    second.get(thread_id="t")
    first.add(Message.user("one"), thread_id="t")
    second.add(Message.user("two"), thread_id="t")
    assert contents(first.get(thread_id="t")) == ["one", "two"]
    assert Conversation.objects.filter(owner=user).count() == 1


@pytest.mark.postgres  # SQLite's test database runs one transaction at a time
@pytest.mark.django_db(transaction=True)
def test_two_requests_starting_an_owners_thread_in_transactions_share_one_conversation() -> None:
    """Under ``ATOMIC_REQUESTS`` neither request sees the other's uncommitted conversation:
    without a lock each made its own and the second request's messages were never read
    again (``get`` reads the oldest)."""
    user = UserFactory()
    first_added, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def request(text: str, hold: bool) -> None:
        try:
            with transaction.atomic():
                BufferMemory(owner=user).add(Message.user(text), thread_id="support-42")
                if hold:
                    first_added.set()
                    release.wait(30)
        except BaseException as error:  # reported by the assertion below
            failures.append(error)
            first_added.set()
        finally:
            connections.close_all()

    first = threading.Thread(target=request, args=("one", True))
    first.start()
    assert first_added.wait(30)
    second = threading.Thread(target=request, args=("two", False))
    second.start()
    with connection.cursor() as cursor:  # until the second request is done or waits for the first
        while second.is_alive():
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            if cursor.fetchone()[0]:
                break
    release.set()
    first.join(30)
    second.join(30)

    assert failures == []
    assert Conversation.objects.filter(owner=user).count() == 1
    assert contents(BufferMemory(owner=user).get(thread_id="support-42")) == ["one", "two"]


def test_adding_a_dict_or_text_names_what_was_given() -> None:
    m = BufferMemory()
    with pytest.raises(TypeError, match="not dict"):
        m.add({"role": "user", "content": "hi"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not str"):
        m.add("hi")  # type: ignore[arg-type]
    assert m.threads() == []


def test_an_owner_given_by_user_id_names_the_same_threads_as_the_user() -> None:
    user = UserFactory()
    BufferMemory(owner=user.pk).add(Message.user("by id"), thread_id="t")
    assert contents(BufferMemory(owner=user).get(thread_id="t")) == ["by id"]
    assert Conversation.objects.get().owner_id == user.pk


def test_a_thread_cleared_by_another_memory_of_the_owner_takes_new_messages() -> None:
    """Two workers share an owner's thread; one clears it. The other's next add used to fail
    with ``ConversationNotFound`` for as long as that memory lived."""
    user = UserFactory()
    first, second = BufferMemory(owner=user), BufferMemory(owner=user)
    first.add(Message.user("one"), thread_id="t")
    second.add(Message.user("two"), thread_id="t")
    first.clear(thread_id="t")

    second.add(Message.user("three"), thread_id="t")

    assert contents(BufferMemory(owner=user).get(thread_id="t")) == ["three"]
    assert contents(first.get(thread_id="t")) == ["three"]


def test_a_deleted_conversation_given_for_a_thread_is_not_replaced(conversation: Conversation) -> None:
    m = BufferMemory(conversation=conversation)
    m.add(Message.user("one"))
    Conversation.objects.filter(pk=conversation.pk).delete()
    with pytest.raises(ConversationNotFound):
        m.add(Message.user("two"))
    assert Conversation.objects.count() == 0


def test_async_methods_do_the_same(transactional_db: Any) -> None:
    async def scenario() -> tuple[list[str], list[str], list[Message]]:
        m = BufferMemory()
        await m.aadd(Message.user("hi"), thread_id="x")
        got = contents(await m.aget(thread_id="x"))
        threads = await m.athreads()
        await m.aclear(thread_id="x")
        return got, threads, await m.aget(thread_id="x")

    assert asyncio.run(scenario()) == (["hi"], ["x"], [])


# -------------------------------------------------------------------------------- windows


def exchange(call_id: str) -> list[Message]:
    return [
        Message.assistant("", tool_calls=[ToolCall("search", {"q": "x"}, call_id)]),
        Message.tool("found", tool_call_id=call_id),
    ]


def test_a_window_cutting_between_a_call_and_its_result_widens_to_keep_the_pair() -> None:
    m = WindowMemory(window=1)
    m.add([Message.user("find x"), *exchange("c1")])
    window = m.get()
    assert [x.role for x in window] == [Role.ASSISTANT, Role.TOOL]
    assert window[0].tool_calls[0].id == "c1"


def test_a_window_widens_past_several_parallel_results() -> None:
    m = WindowMemory(window=2)
    call = Message.assistant(
        "", tool_calls=[ToolCall("a", {}, "c1"), ToolCall("b", {}, "c2"), ToolCall("c", {}, "c3")]
    )
    results = [Message.tool(t, tool_call_id=f"c{i}") for i, t in enumerate("ABC", start=1)]
    m.add([Message.user("go"), call, *results])
    assert [x.role for x in m.get()] == [Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.TOOL]


def test_window_must_be_positive_and_max_messages_is_ignored() -> None:
    with pytest.raises(ValueError, match="window must be positive"):
        WindowMemory(window=0)
    assert WindowMemory(window=3, max_messages=99).max_messages == 3


def test_a_window_read_is_one_query_of_window_plus_one_rows(django_assert_num_queries) -> None:
    m = WindowMemory(window=3)
    m.add([Message.user(str(i)) for i in range(40)])
    with django_assert_num_queries(1) as captured:
        assert contents(m.get()) == ["37", "38", "39"]
    assert "LIMIT 4" in captured.captured_queries[0]["sql"]


# ------------------------------------------------------------------------------ summaries


def test_summary_memory_needs_a_model() -> None:
    with pytest.raises(ConfigurationError) as caught:
        SummaryMemory()
    assert "llm=" in caught.value.hint


def test_summaries_are_made_every_summarize_every_overflowed_messages_and_replayed_first() -> None:
    llm = FakeLLM(responses=["first summary", "second summary"])
    m = SummaryMemory(llm=llm, window=2, summarize_every=3)
    m.add([Message.user(f"msg {i}") for i in range(4)])
    # two overflowed (msg 0, msg 1): under summarize_every, no call
    assert contents(m.get()) == ["msg 2", "msg 3"]
    assert llm.calls == []

    m.add(Message.user("msg 4"))
    recalled = m.get()
    assert recalled[0].role == Role.SYSTEM
    assert recalled[0].content == "Summary of the earlier conversation:\nfirst summary"
    assert contents(recalled[1:]) == ["msg 3", "msg 4"]
    assert len(llm.calls) == 1
    assert "msg 0" in llm.calls[0][1].text and "msg 2" in llm.calls[0][1].text
    assert m.summary() == "first summary"

    # the summary is not made again until three more messages have overflowed
    m.add([Message.user("msg 5"), Message.user("msg 6")])
    m.get()
    assert len(llm.calls) == 1
    m.add(Message.user("msg 7"))
    assert m.get()[0].content.endswith("second summary")
    assert "first summary" in llm.calls[1][1].text  # folded into the earlier summary
    assert "msg 2" not in llm.calls[1][1].text


def test_a_summary_prompt_is_bounded_and_keeps_the_newest_messages() -> None:
    # a backlog of long messages must not make a request no model accepts (and that would
    # fail again on every get)
    from agentmemory.compat.windlass import SUMMARY_MESSAGE_CHARS, SUMMARY_PROMPT_CHARS

    llm = FakeLLM(["folded"])
    m = SummaryMemory(llm=llm, window=1, summarize_every=6)
    m.add([Message.user(f"m{i} " + "x" * 50_000) for i in range(20)] + [Message.user("last")])
    assert m.get()[0].content.endswith("folded")
    prompt = llm.calls[0][1].text
    assert len(prompt) < SUMMARY_PROMPT_CHARS + 200
    assert len(llm.calls) == 1
    assert "m19 " in prompt and "m0 " not in prompt  # the newest overflowed kept, the oldest left
    assert "x" * (SUMMARY_MESSAGE_CHARS + 1) not in prompt


def test_a_summary_survives_a_new_memory_of_the_same_owner() -> None:
    user = UserFactory()
    m = SummaryMemory(llm=FakeLLM(["kept"]), window=1, summarize_every=1, owner=user)
    m.add([Message.user("a"), Message.user("b")], thread_id="t")
    m.get(thread_id="t")
    again = SummaryMemory(llm=FakeLLM(["unused"]), window=1, summarize_every=1, owner=user)
    assert again.summary("t") == "kept"
    assert contents(again.get(thread_id="t")) == ["Summary of the earlier conversation:\nkept", "b"]


class FailingLLM(FakeLLM):
    def invoke(self, messages: Any, *, tools: Any = None) -> Any:
        self.calls.append(list(messages))
        raise TransientLLMError("429")


def test_a_failing_model_leaves_a_plain_window_and_is_tried_again(caplog: Any) -> None:
    llm = FailingLLM()
    m = SummaryMemory(llm=llm, window=2, summarize_every=1)
    m.add([Message.user(str(i)) for i in range(4)])
    assert contents(m.get()) == ["2", "3"]
    assert "summarising 2 messages failed" in caplog.text
    m.get()
    assert len(llm.calls) == 2
    assert m.summary() == ""


def test_a_summary_window_never_starts_on_a_tool_result() -> None:
    m = SummaryMemory(llm=FakeLLM(["s"]), window=1, summarize_every=100)
    m.add([Message.user("q"), *exchange("c1")])
    assert [x.role for x in m.get()] == [Role.TOOL]  # one message is always kept
    m.add(Message.assistant("answer"))
    assert contents(m.get(limit=2)) == ["answer"]


def test_clearing_a_thread_forgets_its_summary() -> None:
    m = SummaryMemory(llm=FakeLLM(["s"]), window=1, summarize_every=1)
    m.add([Message.user("a"), Message.user("b")])
    m.get()
    assert m.summary() == "s"
    m.clear()
    assert m.summary() == ""


# ---------------------------------------------- windows against the seed's printed ``aget``


def seed_window(
    messages: list[Message], window: int, limit: int | None, return_system: bool
) -> list[Message]:
    """``WindowMemory.aget`` as the seed prints it, over the whole transcript."""
    size = limit if limit is not None else window
    if not return_system:
        messages = [m for m in messages if m.role != Role.SYSTEM]
    if size <= 0 or len(messages) <= size:
        return messages
    start = len(messages) - size
    while start > 0 and messages[start].role == Role.TOOL:
        start -= 1
    return messages[start:]


@st.composite
def transcripts(draw: Any) -> list[Message]:
    out: list[Message] = []
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "tools"]))
        if kind == "tools":
            ids = [f"c{i}_{j}" for j in range(draw(st.integers(1, 3)))]
            out.append(Message.assistant("", tool_calls=[ToolCall("t", {}, c) for c in ids]))
            out += [Message.tool(f"r{c}", tool_call_id=c) for c in ids]
        else:
            out.append(Message(role=Role(kind), content=f"{kind} {i}"))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    transcript=transcripts(),
    window=st.integers(1, 5),
    limit=st.one_of(st.none(), st.integers(0, 6)),
    return_system=st.booleans(),
)
def test_the_window_is_the_seeds(
    db: Any, transcript: list[Message], window: int, limit: int | None, return_system: bool
) -> None:
    m = WindowMemory(window=window, return_system=return_system)
    m.add(transcript)
    got = [(x.role, x.content) for x in m.get(limit=limit)]
    assert got == [(x.role, x.content) for x in seed_window(transcript, window, limit, return_system)]


# -- what storage cannot hold, and arguments checked before anything is stored ----------------


@pytest.mark.parametrize(
    "reply",
    ["a summary with a NUL \x00 byte", "a lone \ud800 surrogate", "s" * 5_000_000, "word " * 5_000],
    ids=["nul", "lone-surrogate", "5-mb", "over-max-summary-tokens"],
)
def test_a_summary_storage_cannot_hold_or_too_long_is_a_failed_summary(reply: str, caplog: Any) -> None:
    """A reply that no database stores (PostgreSQL refuses NUL in jsonb; no database encodes a
    lone surrogate) made every later ``get`` of the thread raise ``DataError``; a 5 MB reply
    was stored whole. Each is now a failed summary: logged, the plain window returned, the
    thread still usable."""
    llm = FakeLLM([reply, "Talked about x."])
    m = SummaryMemory(llm=llm, window=2, summarize_every=2)
    m.add([Message.user(f"x{i}") for i in range(6)])

    assert contents(m.get()) == ["x4", "x5"]
    assert m.summary() == ""
    assert "it is not kept and the window is used alone" in caplog.text

    recalled = m.get()  # tried again, as after a failed call; the next reply is kept
    assert recalled[0].role == Role.SYSTEM and recalled[0].content.endswith("Talked about x.")
    assert m.summary() == "Talked about x."
    assert len(llm.calls) == 2


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: BufferMemory(max_messages="2"), TypeError),
        (lambda: BufferMemory(max_messages=-3), ValueError),
        (lambda: BufferMemory(max_messages=0), ValueError),
        (lambda: BufferMemory(max_stored=-1), ValueError),
        (lambda: BufferMemory(max_stored=2.5), TypeError),
        (lambda: WindowMemory(window="5"), TypeError),
        (lambda: SummaryMemory(llm=FakeLLM(), window=-1), ValueError),
        (lambda: SummaryMemory(llm="gpt"), TypeError),
    ],
    ids=[
        "max_messages-str",
        "max_messages-negative",
        "max_messages-zero",
        "max_stored-negative",
        "max_stored-float",
        "window-str",
        "summary-window-negative",
        "llm-not-a-model",
    ],
)
def test_bad_arguments_are_refused_by_the_constructor(make: Any, error: type[Exception]) -> None:
    """They used to be accepted and fail (or be ignored) at the first ``get``, after the
    messages were stored."""
    with pytest.raises(error):
        make()
    assert Conversation.objects.count() == 0


def test_a_bad_get_limit_is_refused() -> None:
    m = BufferMemory()
    m.add([Message.user("a"), Message.user("b"), Message.user("c")])
    with pytest.raises(ValueError, match="limit"):
        m.get(limit=-2)
    assert contents(m.get(limit=0)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("thread_id", "error"),
    [
        ("t\x00", ValueError),
        ("t\ud800", ValueError),
        (None, TypeError),
        ({"a": 1}, TypeError),
        (1, TypeError),
    ],
    ids=["nul", "lone-surrogate", "none", "dict", "int"],
)
def test_a_thread_id_storage_cannot_hold_is_refused(thread_id: Any, error: type[Exception]) -> None:
    """A NUL or a lone surrogate in a thread id raised PostgreSQL's ``DataError``."""
    user = UserFactory()
    with pytest.raises(error, match="thread_id"):
        BufferMemory(owner=user).add(Message.user("x"), thread_id=thread_id)
    with pytest.raises(error, match="thread_id"):
        BufferMemory(owner=user).get(thread_id=thread_id)
    assert Conversation.objects.count() == 0


def test_an_add_starts_the_thread_again_each_time_another_memory_clears_it(monkeypatch: Any) -> None:
    """One retry was not enough when another memory cleared the thread again between the
    retry's lookup and its append; ``add`` now tries up to ``ADD_ATTEMPTS`` times."""
    from agentmemory.compat import windlass
    from agentmemory.compat.store import StoredConversation

    user = UserFactory()
    adder, clearer = BufferMemory(owner=user), BufferMemory(owner=user)
    adder.add(Message.user("one"), thread_id="t")
    append = StoredConversation.append
    clears = {"left": windlass.ADD_ATTEMPTS - 1}

    def cleared_first(self: StoredConversation, messages: Any) -> Any:
        if clears["left"]:  # the other memory clears the thread just before the append
            clears["left"] -= 1
            clearer.clear(thread_id="t")
            raise ConversationNotFound("cleared meanwhile")
        return append(self, messages)

    monkeypatch.setattr(StoredConversation, "append", cleared_first)
    adder.add(Message.user("two"), thread_id="t")
    assert contents(BufferMemory(owner=user).get(thread_id="t")) == ["two"]

    clears["left"] = windlass.ADD_ATTEMPTS  # cleared every time: the error is raised at last
    with pytest.raises(ConversationNotFound):
        adder.add(Message.user("three"), thread_id="t")
    assert clears["left"] == 0


@pytest.mark.postgres  # SQLite's test database runs one transaction at a time
@pytest.mark.django_db(transaction=True)
def test_adds_racing_clears_of_another_memory_never_fail() -> None:
    """The breaker's race: one worker adds to an owner's thread while another keeps
    clearing it; one add in 90 raised ``ConversationNotFound``."""
    user = UserFactory()
    failures: list[BaseException] = []
    done = threading.Event()

    def clear() -> None:
        try:
            clearer = BufferMemory(owner=user)
            while not done.is_set():
                clearer.clear(thread_id="t")
        finally:
            connections.close_all()

    clearing = threading.Thread(target=clear)
    clearing.start()
    try:
        adder = BufferMemory(owner=user)
        for i in range(90):
            try:
                adder.add(Message.user(f"m{i}"), thread_id="t")
            except Exception as error:  # reported by the assertion below
                failures.append(error)
    finally:
        done.set()
        clearing.join(30)
    assert failures == []


@pytest.mark.parametrize("value", [0, -1])
def test_summarize_every_below_one_is_one_as_in_the_seed(value: int) -> None:
    # the seed's constructor: self.summarize_every = max(1, summarize_every)
    assert SummaryMemory(llm=FakeLLM(), summarize_every=value).summarize_every == 1
