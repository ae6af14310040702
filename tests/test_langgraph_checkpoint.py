"""``DjangoSaver`` against LangGraph's own conformance suite and against a real graph."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from asgiref.sync import async_to_sync
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agentmemory.contrib.langgraph import DjangoSaver
from agentmemory.contrib.langgraph.models import Checkpoint, CheckpointBlob

pytestmark = pytest.mark.django_db


@checkpointer_test(name="DjangoSaver")
async def django_saver():  # type: ignore[no-untyped-def]
    yield DjangoSaver()


def test_conformance_suite_passes_every_base_and_extended_capability() -> None:
    # async_to_sync runs the suite's ORM calls (sync_to_async) back on this thread, inside
    # the test's transaction
    report = async_to_sync(validate)(django_saver)
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert not failures, failures
    assert {c.value for c in BASE_CAPABILITIES | EXTENDED_CAPABILITIES} == {
        name for name, r in report.results.items() if r.detected and r.passed
    }
    assert report.conformance_level() == "FULL"


# -- real graphs ---------------------------------------------------------------------------


def _add(left: list[str], right: list[str]) -> list[str]:
    return left + right


class ApprovalState(TypedDict):
    log: Annotated[list[str], _add]
    approved: str


def _counter_graph(checkpointer: DjangoSaver):  # type: ignore[no-untyped-def]
    """plan -> ask (interrupts for an approval) -> end."""

    def plan(state: ApprovalState) -> dict:
        return {"log": ["planned"]}

    def ask(state: ApprovalState) -> dict:
        return {"approved": interrupt("approve?"), "log": ["asked"]}

    builder = StateGraph(ApprovalState)
    builder.add_node("plan", plan)
    builder.add_node("ask", ask)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer)


# A sync graph saves from LangGraph's worker threads, each with its own connection: SQLite's
# in-memory test database locks its tables against them (a file database waits instead; the
# example command runs a sync graph on one, tests/test_langgraph_example.py).
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sync_graph_interrupted_resumes_from_the_database_in_a_new_saver() -> None:
    config = {"configurable": {"thread_id": "approval-1"}}
    first = _counter_graph(DjangoSaver()).invoke({"log": ["start"]}, config)
    assert first["__interrupt__"][0].value == "approve?"
    # another process: a fresh saver and graph find the interrupted run in the database
    graph = _counter_graph(DjangoSaver())
    assert graph.get_state(config).next == ("ask",)
    done = graph.invoke(Command(resume="yes"), config)
    assert done == {"log": ["start", "planned", "asked"], "approved": "yes"}
    history = list(graph.get_state_history(config))
    assert [s.metadata["step"] for s in history] == sorted(
        (s.metadata["step"] for s in history), reverse=True
    )
    assert history[0].values == done and history[-1].metadata["step"] == -1


def test_an_async_graph_runs_on_the_async_methods() -> None:
    graph = _counter_graph(DjangoSaver())
    config = {"configurable": {"thread_id": "async-1"}}

    async def run() -> tuple[dict, dict, list]:
        first = await graph.ainvoke({"log": ["a"]}, config)
        done = await graph.ainvoke(Command(resume="ok"), config)
        return first, done, [s async for s in graph.aget_state_history(config)]

    first, done, history = async_to_sync(run)()
    assert "__interrupt__" in first
    assert done["log"] == ["a", "planned", "asked"]
    assert len(history) == len(list(graph.get_state_history(config)))


# -- what the conformance suite leaves open ------------------------------------------------


def _put(saver: DjangoSaver, thread: str, parent: dict | None = None, *, ns: str = "", **extra: Any) -> dict:
    """A checkpoint on ``thread`` after ``parent`` whose channel ``v`` holds ``extra["v"]``
    (a new version of it when given) and whose metadata holds the other ``extra``."""
    from langgraph.checkpoint.base import empty_checkpoint

    previous = saver.get_tuple(parent) if parent else None
    checkpoint = empty_checkpoint()
    versions = dict(previous.checkpoint["channel_versions"]) if previous else {}
    values = dict(previous.checkpoint["channel_values"]) if previous else {}
    new_versions = {}
    if "v" in extra:
        versions["v"] = new_versions["v"] = saver.get_next_version(versions.get("v"), None)
        values["v"] = extra.pop("v")
    checkpoint["channel_versions"], checkpoint["channel_values"] = versions, values
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    return saver.put(config, checkpoint, {"source": "loop", "step": 0, "parents": {}, **extra}, new_versions)


def _ids(saver: DjangoSaver, thread: str) -> list[str]:
    return [
        t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": thread}})
    ]


def test_delete_for_runs_reparents_what_stays_and_frees_values_only_it_used() -> None:
    saver = DjangoSaver()
    a = _put(saver, "t", v="one", run_id="r1")
    b = _put(saver, "t", a, v="two", run_id="r2")
    c = _put(saver, "t", b, run_id="r3")  # keeps "two"
    saver.delete_for_runs(["r2"])
    assert _ids(saver, "t") == [c["configurable"]["checkpoint_id"], a["configurable"]["checkpoint_id"]]
    tup = saver.get_tuple(c)
    assert tup.parent_config["configurable"]["checkpoint_id"] == a["configurable"]["checkpoint_id"]
    assert tup.checkpoint["channel_values"] == {"v": "two"}  # still used by c: kept
    saver.delete_for_runs(["r3"])
    assert CheckpointBlob.objects.filter(thread_id="t").count() == 1  # "two" went with c
    with pytest.raises(TypeError):
        saver.delete_for_runs("r1")


def test_prune_keep_latest_keeps_the_head_its_writes_and_values() -> None:
    saver = DjangoSaver()
    a = _put(saver, "t", v="old")
    b = _put(saver, "t", a, v="new")
    saver.put_writes(b, [("v", "pending")], "task-1")
    other = _put(saver, "other", v="x")
    saver.prune(["t"], strategy="keep_latest")
    tup = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert _ids(saver, "t") == [b["configurable"]["checkpoint_id"]]
    assert tup.parent_config is None and tup.checkpoint["channel_values"] == {"v": "new"}
    assert tup.pending_writes == [("task-1", "v", "pending")]
    assert list(CheckpointBlob.objects.filter(thread_id="t").values_list("blob", flat=True)) != []
    assert CheckpointBlob.objects.filter(thread_id="t").count() == 1
    assert saver.get_tuple(other) is not None
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["t"], strategy="sometimes")
    with pytest.raises(TypeError):
        saver.prune("t")


def test_prune_keep_latest_refuses_a_thread_with_a_delta_channel_and_prunes_nothing() -> None:
    saver = DjangoSaver()
    first = _put(saver, "plain", v=1)
    _put(saver, "plain", first, v=2)
    _put(saver, "delta", counters_since_delta_snapshot={"messages": [1, 1]})
    with pytest.raises(NotImplementedError, match="delta"):
        saver.prune(["plain", "delta"])
    assert len(_ids(saver, "plain")) == 2
    saver.prune(["delta"], strategy="delete")
    assert _ids(saver, "delta") == []


def test_prune_keep_latest_deletes_the_namespace_of_a_finished_subgraph_call() -> None:
    saver = DjangoSaver()
    root = _put(saver, "t", v=1)
    child = _put(saver, "t", ns="child:task-1", parents={"": root["configurable"]["checkpoint_id"]})
    _put(saver, "t", root, v=2)
    kept = _put(saver, "t", ns="persistent", parents={})
    saver.prune(["t"])
    assert saver.get_tuple(child) is None
    assert saver.get_tuple(kept) is not None


def test_copy_thread_never_mixes_into_a_thread_that_holds_checkpoints() -> None:
    saver = DjangoSaver()
    _put(saver, "src", v=1)
    _put(saver, "dst", v=2)
    with pytest.raises(ValueError, match="already holds"):
        saver.copy_thread("src", "dst")
    with pytest.raises(ValueError):
        saver.copy_thread("src", "src")
    assert saver.get_tuple({"configurable": {"thread_id": "dst"}}).checkpoint["channel_values"] == {"v": 2}


def test_reads_cost_a_constant_number_of_queries(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    saver = DjangoSaver()
    parent = None
    for i in range(150):
        parent = _put(saver, "long", parent, v=i)
        saver.put_writes(parent, [("v", i), ("w", i)], f"task-{i}")
    with django_assert_max_num_queries(3):
        assert saver.get_tuple({"configurable": {"thread_id": "long"}}).checkpoint["channel_values"] == {
            "v": 149
        }
    with django_assert_max_num_queries(6):  # two pages of 100
        listed = list(saver.list({"configurable": {"thread_id": "long"}}))
    assert [t.checkpoint["channel_values"]["v"] for t in listed] == list(range(149, -1, -1))
    assert all(len(t.pending_writes) == 2 for t in listed)
    with django_assert_max_num_queries(3):
        assert len(list(saver.list({"configurable": {"thread_id": "long"}}, limit=5))) == 5


@pytest.mark.django_db(databases=["default", "secondary"])
def test_a_saver_on_another_database_alias() -> None:
    saver = DjangoSaver(using="secondary")
    stored = _put(saver, "elsewhere", v="x")
    assert Checkpoint.objects.using("secondary").filter(thread_id="elsewhere").exists()
    assert not Checkpoint.objects.using("default").filter(thread_id="elsewhere").exists()
    assert saver.get_tuple(stored).checkpoint["channel_values"] == {"v": "x"}


def test_a_short_listing_loads_only_what_it_returns() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Counting(JsonPlusSerializer):
        loads = 0

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            Counting.loads += 1
            return super().loads_typed(data)

    saver = DjangoSaver(serde=Counting())
    parent = None
    for i in range(120):
        parent = _put(saver, "long", parent, v=i)
    Counting.loads = 0
    assert [
        t.checkpoint["channel_values"]["v"]
        for t in saver.list({"configurable": {"thread_id": "long"}}, limit=2)
    ] == [119, 118]
    assert Counting.loads == 4  # two checkpoints and their two values, not a page of 100
