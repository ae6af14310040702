"""Structured calls: one JSON object of a given schema from any ``ChatModel``, checked strictly.

``invoke_structured(llm, messages, output)`` uses the model's own structured-output contract
when it has one (``StructuredChatModel``: the OpenAI, Anthropic and LangChain adapters) and
otherwise asks for the JSON in the prompt (``json_only_instructions``) and decodes the reply
(``decode_json``). Either way the caller checks the value with ``schema_problems`` before it
uses any of it: a provider's strict mode is a promise of the provider, a prompt is none.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentmemory.llm.base import ChatModel, ChatResponse, OutputSchema, StructuredChatModel
from agentmemory.messages import ChatMessage, Role

__all__ = [
    "decode_json",
    "invoke_structured",
    "json_only_instructions",
    "prompted",
    "schema_problems",
    "with_instructions",
    "without_reasoning",
]

#: a reasoning block opening a reply: ``<think>`` (DeepSeek-R1 and its distills, Qwen3, QwQ
#: as Ollama, vLLM without a reasoning parser and llama.cpp serve them) or ``<thinking>``;
#: group 1 is the tag name, the block ends at its closing tag or, cut short, at the end
_REASONING_BLOCK = re.compile(r"\A\s*<(think|thinking)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)

#: JSON Schema ``type`` -> the Python types ``json.loads`` gives for it (``bool`` is refused
#: for "integer" and "number" apart, since it is an ``int`` in Python)
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def json_only_instructions(output: OutputSchema) -> str:
    """The instruction that asks a model without a structured-output mode for the JSON:
    the output's description, its JSON Schema, and "one JSON object, nothing else"."""
    described = f" ({output.description})" if output.description else ""
    return (
        f"Answer with one JSON object{described} and nothing else: no text before or after it "
        f"and no code fence. It must match this JSON Schema:\n{json.dumps(output.schema, ensure_ascii=False)}"
    )


def without_reasoning(text: str) -> str:
    """``text`` without the reasoning block a model wrote before its answer, stripped.

    Reasoning models served without a reasoning parser put their chain of thought at the
    start of the message content, in a ``<think>...</think>`` block (DeepSeek-R1's and
    Qwen3's chat templates; ``<thinking>`` in some fine-tunes). It is not the answer: a
    summary that kept it held the model's thinking (SciPhi-AI/R2R#2123,
    langgenius/dify#38587). Only a block that opens the reply is removed; one later in the
    text is part of the answer. A block never closed (the reply is all thinking) leaves
    ``""``.
    """
    match = _REASONING_BLOCK.match(text)
    return text[match.end() :].strip() if match else text.strip()


def decode_json(text: str | None) -> Any:
    """The JSON value that makes up the whole of ``text``, or ``None``.

    The allowances: a reasoning block before it (``without_reasoning``), and a reply wrapped
    whole in a Markdown code fence (```` ```json ... ``` ````), which models asked for JSON in
    the prompt often send. Text around the value, two values, or a value that is not JSON give
    ``None``.
    """
    if not isinstance(text, str):
        return None
    body = without_reasoning(text)
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first_line, _, rest = body.partition("\n")
        if first_line.strip().isalpha() or not first_line.strip():  # "json", or nothing
            body = rest
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def schema_problems(value: Any, schema: Mapping[str, Any], *, path: str = "$", limit: int = 5) -> list[str]:
    """Where ``value`` departs from ``schema``, as "path: problem" lines (at most ``limit``);
    an empty list when it matches.

    Checks the keywords of ``OutputSchema`` (the strict subset the providers accept): ``type``
    (a bool is not a number; NaN and infinities are no JSON numbers), ``enum``, ``properties``
    with ``required`` and ``additionalProperties: false``, ``items``, and ``minLength``,
    ``maxLength``, ``minItems``, ``maxItems``, ``minimum``, ``maximum`` where the schema
    gives them.
    """
    problems: list[str] = []
    _check(value, schema, path, problems)
    return problems[:limit]


def _check(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    kind = schema.get("type")
    if isinstance(kind, str):
        types = _TYPES.get(kind, ())
        if not isinstance(value, types) or (isinstance(value, bool) and kind != "boolean"):
            problems.append(f"{path}: expected {kind}, got {_kind(value)}")
            return
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{path}: {value} is not a JSON number")
            return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of {list(schema['enum'])}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            problems.append(f"{path}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{path}: longer than {schema['maxLength']} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{path}: {value} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{path}: {value} is above {schema['maximum']}")
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                problems.append(f"{path}: {name!r} is missing")
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in properties:
                    problems.append(f"{path}: {name!r} is not allowed")
        for name, sub in properties.items():
            if name in value:
                _check(value[name], sub, f"{path}.{name}", problems)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{path}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _check(item, items, f"{path}[{index}]", problems)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for name, types in _TYPES.items():
        if isinstance(value, types) and not (isinstance(value, bool) and name != "boolean"):
            return name
    return type(value).__name__


def with_instructions(messages: Sequence[ChatMessage], instructions: str) -> list[ChatMessage]:
    """``messages`` with ``instructions`` appended to the first system message (or put first
    as a system message of their own when there is none)."""
    out = list(messages)
    for index, message in enumerate(out):
        if message.role is Role.SYSTEM:
            out[index] = ChatMessage.system(f"{message.text}\n\n{instructions}")
            return out
    return [ChatMessage.system(instructions), *out]


def prompted(
    invoke: Callable[[list[ChatMessage]], ChatResponse], messages: Sequence[ChatMessage], output: OutputSchema
) -> ChatResponse:
    """A structured call made through the prompt: ``invoke`` (a plain call) with
    ``json_only_instructions`` added to the system message, and the reply's text decoded
    into ``ChatResponse.parsed`` (``None`` when it is not one JSON value)."""
    response = invoke(with_instructions(messages, json_only_instructions(output)))
    return dataclasses.replace(response, parsed=decode_json(response.message.text))


def invoke_structured(llm: ChatModel, messages: Sequence[ChatMessage], output: OutputSchema) -> ChatResponse:
    """Ask ``llm`` for one JSON object of ``output``'s schema.

    A ``StructuredChatModel`` answers through its provider's structured-output contract;
    any other ``ChatModel`` (a model of your own, ``ScriptedChatModel``) gets the schema in
    its system message and its reply's text is decoded (``prompted``).

    Returns:
        The ``ChatResponse``; ``parsed`` holds the JSON value or ``None``. Check it with
        ``schema_problems`` before using it.

    Raises:
        TransientLLMError, PermanentLLMError: from the model, as for ``invoke``.
    """
    if isinstance(llm, StructuredChatModel):
        return llm.invoke_structured(messages, output=output)
    return prompted(lambda sent: llm.invoke(sent), messages, output)
