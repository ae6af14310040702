"""``@tool``: JSON Schema from type hints and docstrings, argument checking, and failures
turned into results (no database needed)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
from typing import Annotated, Literal

import pytest

from agentmemory.agents import MemoryPolicy, Tool, ToolContext, ToolError, tool
from agentmemory.agents.memory import STUB_TEXT, apply_memory_policy
from agentmemory.context import ContextWindow
from agentmemory.invariants import window_violations
from agentmemory.messages import ChatMessage, ToolCall
from agentmemory.tokens import LengthTokenCounter


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@tool
def forecast(
    city: str,
    days: int = 3,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["short", "long"] = "short",
    hours: list[int] | None = None,
    thresholds: dict[str, float] | None = None,
    include_wind: bool = False,
    note: Annotated[str, "free text for the forecaster"] = "",
) -> dict:
    """Weather forecast for a city.

    Uses the national weather service; this paragraph is not part of the description.

    Args:
        city: the city name, e.g. "Lyon".
        days (int): how many days ahead,
            between 1 and 7.
        unit: temperature unit.

    Returns:
        A dict.
    """
    return {"city": city, "days": days, "unit": unit.value, "detail": detail, "hours": hours}


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id="call_1", name=name, arguments=arguments)


def test_schema_from_type_hints_and_docstring():
    assert forecast.schema() == {
        "name": "forecast",
        "description": "Weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": 'the city name, e.g. "Lyon".'},
                "days": {
                    "type": "integer",
                    "description": "how many days ahead, between 1 and 7.",
                    "default": 3,
                },
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "temperature unit.",
                    "default": "celsius",
                },
                "detail": {"type": "string", "enum": ["short", "long"], "default": "short"},
                "hours": {"type": ["array", "null"], "items": {"type": "integer"}},
                "thresholds": {"type": ["object", "null"], "additionalProperties": {"type": "number"}},
                "include_wind": {"type": "boolean", "default": False},
                "note": {"type": "string", "description": "free text for the forecaster", "default": ""},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    }
    assert forecast.memory is MemoryPolicy.REPLAY


def test_decorator_options_and_the_function_stays_callable():
    @tool(name="get-time", description="Current time.", memory="omit")
    def clock(tz: str = "UTC") -> str:
        """Ignored docstring."""
        return f"12:00 {tz}"

    assert isinstance(clock, Tool)
    assert clock.schema()["name"] == "get-time" and clock.schema()["description"] == "Current time."
    assert clock.memory is MemoryPolicy.OMIT
    assert clock("CET") == "12:00 CET"
    assert clock.parameters.get("required") is None


def test_context_parameter_is_hidden_and_injected():
    @tool
    def where(city: str, context: ToolContext) -> str:
        """Echo with the call id."""
        return f"{city} via {context.call.id}"

    @tool
    def unannotated(context) -> str:  # type: ignore[no-untyped-def]
        """Named context."""
        return context.call.name

    assert list(where.parameters["properties"]) == ["city"]
    assert where.run(call("where", city="Oslo")).message.content == "Oslo via call_1"
    assert unannotated.parameters["properties"] == {}
    assert unannotated.run(call("unannotated")).message.content == "unannotated"


def test_arguments_are_checked_and_converted():
    outcome = forecast.run(call("forecast", city="Lyon", days=2.0, unit="fahrenheit", hours=[6, 12]))
    assert not outcome.error
    assert outcome.value == {
        "city": "Lyon",
        "days": 2,
        "unit": "fahrenheit",
        "detail": "short",
        "hours": [6, 12],
    }
    assert outcome.message.content == (
        '{"city": "Lyon", "days": 2, "unit": "fahrenheit", "detail": "short", "hours": [6, 12]}'
    )
    assert outcome.message.tool_call_id == "call_1" and outcome.message.name == "forecast"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "missing required argument(s): city"),
        ({"city": "Lyon", "when": "now"}, "unknown argument(s) when"),
        ({"city": 7}, "city must be a string, not 7"),
        ({"city": "Lyon", "days": True}, "days must be an integer, not true"),
        ({"city": "Lyon", "days": 1.5}, "days must be an integer, not 1.5"),
        ({"city": "Lyon", "unit": "kelvin"}, "unit must be one of 'celsius', 'fahrenheit', not 'kelvin'"),
        ({"city": "Lyon", "detail": "medium"}, "detail must be one of 'short', 'long', not 'medium'"),
        ({"city": "Lyon", "hours": [1, "2"]}, "hours[1] must be an integer"),
        ({"city": "Lyon", "thresholds": {"rain": "high"}}, "thresholds.rain must be a number"),
    ],
)
def test_invalid_arguments_become_error_results(arguments, error):
    outcome = forecast.run(ToolCall(id="c", name="forecast", arguments=arguments))
    assert outcome.error
    assert outcome.message.content.startswith("Error: invalid arguments for forecast: ")
    assert error in outcome.message.content
    assert outcome.message.metadata["error"] is True


def test_exceptions_become_error_results():
    @tool
    def fails(kind: str) -> str:
        """Fails in several ways."""
        if kind == "tool":
            raise ToolError("order A-1 is not yours")
        if kind == "empty":
            raise ValueError
        raise KeyError("missing")

    assert fails.run(call("fails", kind="tool")).message.content == "Error: order A-1 is not yours"
    assert fails.run(call("fails", kind="empty")).message.content == "Error: ValueError"
    assert fails.run(call("fails", kind="key")).message.content == "Error: KeyError: 'missing'"


def test_return_values_become_text():
    @tool
    def value(kind: str) -> object:
        """Returns things."""
        things = {"none": None, "num": 4.5, "list": [1, "a"], "enum": Unit.CELSIUS, "set": {2, 1}}
        return things.get(kind, datetime.date(2025, 3, 1))

    assert value.run(call("value", kind="none")).message.content == "null"
    assert value.run(call("value", kind="num")).message.content == "4.5"
    assert value.run(call("value", kind="list")).message.content == '[1, "a"]'
    assert value.run(call("value", kind="enum")).message.content == "celsius"
    assert value.run(call("value", kind="set")).message.content == "[1, 2]"
    assert value.run(call("value", kind="date")).message.content == '"2025-03-01"'


def test_async_tools_run_in_both_paths():
    @tool
    async def double(n: int) -> int:
        """Doubles n."""
        await asyncio.sleep(0)
        if n < 0:
            raise ValueError("negative")
        return n * 2

    assert double.is_async
    assert double.run(call("double", n=4)).message.content == "8"
    assert asyncio.run(double.arun(call("double", n=5))).message.content == "10"
    assert asyncio.run(double.arun(call("double", n=-1))).message.content == "Error: ValueError: negative"


def test_declaration_errors_are_raised_early():
    with pytest.raises(TypeError, match="has no JSON Schema"):

        @tool
        def bad(when: complex) -> str:
            """Complex."""
            return ""

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs"):

        @tool
        def variadic(*args: str) -> str:
            """Variadic."""
            return ""

    with pytest.raises(TypeError, match="must match"):
        tool(name="has space")(lambda: "")


# -- memory policy (pure) --------------------------------------------------------------


def window_of(messages: list[ChatMessage]) -> ContextWindow:
    numbered = [
        ChatMessage(**{**{s: getattr(m, s) for s in m.__slots__}, "seq": i + 1, "token_count": 10})  # type: ignore[attr-defined]
        for i, m in enumerate(messages)
    ]
    return ContextWindow(
        messages=[ChatMessage.system("sys"), *numbered],
        max_tokens=1000,
        system_tokens=1,
        history_tokens=10 * len(numbered),
        first_seq=1,
        last_seq=len(numbered),
    )


def exchange(ids_names: list[tuple[str, str]]) -> list[ChatMessage]:
    ai = ChatMessage.ai(None, [ToolCall(id=i, name=n, arguments={}) for i, n in ids_names])
    return [ai, *(ChatMessage.tool(f"full {n}", tool_call_id=i, name=n) for i, n in ids_names)]


POLICIES = {"big": MemoryPolicy.STUB, "noise": MemoryPolicy.OMIT, "keep": MemoryPolicy.REPLAY}


def test_policy_stubs_omits_and_keeps_windows_valid():
    history = [
        ChatMessage.human("q1"),
        *exchange([("n1", "noise")]),
        *exchange([("b1", "big"), ("k1", "keep")]),
        ChatMessage.ai("a1"),
        ChatMessage.human("q2"),
        *exchange([("b2", "big")]),
    ]
    window = window_of(history)
    outcome = apply_memory_policy(window, policy_for=POLICIES, before_seq=8, counter=LengthTokenCounter())

    sent = outcome.window.messages
    assert [m.tool_call_id or m.content for m in sent] == [
        "sys",
        "q1",
        None,
        "b1",
        "k1",
        "a1",
        "q2",
        None,
        "b2",
    ]
    assert next(m for m in sent if m.tool_call_id == "b1").content == STUB_TEXT.format(name="big")
    assert next(m for m in sent if m.tool_call_id == "k1").content == "full keep"
    assert next(m for m in sent if m.tool_call_id == "b2").content == "full big"  # current turn
    assert outcome.omitted == (2, 3) and outcome.stubbed == (5,)
    assert outcome.window.history_tokens < window.history_tokens
    assert window_violations(outcome.window) == []


def test_a_stubbed_result_is_listed_in_the_windows_truncated_copies():
    """A stub is sent in place of the stored result, as a cut copy is, and is marked as one
    (``ChatMessage.truncated``); the window's ``truncated`` did not list it (as a summary
    sent cut was not: agentmemory's issue tracker), and an omitted copy left it listed."""
    history = [
        ChatMessage.human("q1"),
        *exchange([("n1", "noise")]),
        *exchange([("b1", "big"), ("k1", "keep")]),
        ChatMessage.ai("a1"),
        ChatMessage.human("q2"),
    ]
    window = dataclasses.replace(window_of(history), truncated=("summary", 3, 6))
    outcome = apply_memory_policy(window, policy_for=POLICIES, before_seq=8, counter=LengthTokenCounter())
    assert outcome.stubbed == (5,) and outcome.omitted == (2, 3)
    assert outcome.window.truncated == ("summary", 5, 6)
    assert {m.seq for m in outcome.window.history if m.truncated} == {5}


def test_policy_never_splits_an_exchange_or_leaves_a_turn_without_reply():
    history = [
        ChatMessage.human("q1"),
        *exchange([("n1", "noise"), ("k1", "keep")]),  # mixed: stub the omitted tool
        ChatMessage.ai("a1"),
        ChatMessage.human("q2"),
        *exchange([("n2", "noise")]),  # last of its turn: stub, do not drop
        ChatMessage.human("q3"),
    ]
    outcome = apply_memory_policy(
        window_of(history), policy_for=POLICIES, before_seq=9, counter=LengthTokenCounter()
    )
    assert outcome.omitted == ()
    assert outcome.stubbed == (3, 8)
    assert window_violations(outcome.window) == []
